-- set_own_password --
-- Store a password the user chose (change or reset); a reset link also proves the address.
UPDATE users
   SET password_hash = $2, password_chosen_by_user = true,
       confirmed_at = CASE WHEN $3 THEN coalesce(confirmed_at, now()) ELSE confirmed_at END,
       updated_at = now()
 WHERE id = $1
RETURNING id;

-- password_of_user --
-- The stored password hash of a user, and whether the user chose it.
SELECT id, email, password_hash, password_chosen_by_user FROM users WHERE id = $1;

-- insert_password_reset --
-- A one-time password reset link for a user, stored as the hash of its token.
INSERT INTO password_resets (user_id, token_hash, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3));

-- password_reset_is_live --
-- Whether a reset token is live (unknown, used and expired ones are not), without spending it.
SELECT EXISTS (
    SELECT 1 FROM password_resets WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()
);

-- use_password_reset --
-- Spend a live reset token; returns its user, or nothing when unknown, used or expired. The
-- user's other live reset links are spent with it.
WITH used AS (
    UPDATE password_resets
       SET used_at = now()
     WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()
    RETURNING user_id
), others AS (
    UPDATE password_resets p SET used_at = now()
      FROM used WHERE p.user_id = used.user_id AND p.used_at IS NULL AND p.token_hash <> $1
)
SELECT user_id FROM used;

-- revoke_user_tokens --
-- Revoke every live token of a user, in every account, except the one whose hash is $2, and
-- end every web session of the user (a session is signed in with the password being replaced).
WITH sessions AS (
    UPDATE web_sessions s
       SET revoked_at = now()
      FROM members m
     WHERE m.id = s.member_id AND m.user_id = $1 AND s.revoked_at IS NULL
)
UPDATE api_tokens t
   SET revoked_at = now()
  FROM members m
 WHERE m.id = t.member_id AND m.user_id = $1 AND t.revoked_at IS NULL
   AND ($2::bytea IS NULL OR t.token_hash <> $2);

-- is_known_sign_in_client --
-- Whether the user signed in successfully from this client within the last $3 seconds.
SELECT EXISTS (
    SELECT 1 FROM sign_in_known_clients
     WHERE user_id = $1 AND client = $2
       AND last_success_at > now() - make_interval(secs => $3)
);

-- remember_sign_in_client --
-- Record a successful sign-in of a user from a client.
INSERT INTO sign_in_known_clients (user_id, client) VALUES ($1, $2)
ON CONFLICT (user_id, client) DO UPDATE SET last_success_at = now();

-- prune_password_resets --
-- Up to $1 reset links expired a day ago (used or not: an unknown link is refused with the same
-- message as an expired one); how many went.
WITH old AS (
    SELECT id FROM password_resets WHERE expires_at < now() - interval '1 day'
     LIMIT $1 FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM password_resets r USING old WHERE r.id = old.id RETURNING 1
)
SELECT count(*)::integer FROM gone;
