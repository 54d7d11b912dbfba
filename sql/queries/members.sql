-- user_email_taken --
-- Whether a user with this e-mail (any case) exists.
SELECT EXISTS (SELECT 1 FROM users WHERE lower(email) = lower($1));

-- account_for_members --
-- An account's name and subscription status ('active' or 'inactive').
SELECT name, subscription_status::text AS subscription_status FROM accounts WHERE id = $1;

-- insert_unconfirmed_user --
-- A new user created by an administrator: unconfirmed and without a password until they
-- confirm their address and choose one.
INSERT INTO users (email, first_name, last_name, terms_accepted_at)
VALUES ($1, $2, $3, now())
RETURNING id;

-- insert_confirmed_user --
-- A new user whose address is confirmed (an accepted invitation proves it).
INSERT INTO users (email, first_name, last_name, password_hash, password_chosen_by_user,
                   confirmed_at, terms_accepted_at)
VALUES ($1, $2, $3, $4, true, now(), now())
RETURNING id;

-- user_by_email --
-- The user with this e-mail (any case), for sign-in and invitations.
SELECT id, email, password_hash, password_chosen_by_user, confirmed_at
  FROM users WHERE lower(email) = lower($1);

-- lock_user_by_email --
-- The user with this e-mail, locked for the rest of the transaction.
SELECT id, email, password_hash, password_chosen_by_user, confirmed_at
  FROM users WHERE lower(email) = lower($1) FOR UPDATE;

-- accept_terms_for_invited_user --
-- An existing user accepting an invitation: set the password when $2 is given (they had none
-- of their own), confirm, record the terms.
UPDATE users
   SET password_hash = coalesce($2, password_hash),
       password_chosen_by_user = password_chosen_by_user OR $2 IS NOT NULL,
       first_name = CASE WHEN first_name = '' AND last_name = '' THEN $3 ELSE first_name END,
       last_name = CASE WHEN first_name = '' AND last_name = '' THEN $4 ELSE last_name END,
       confirmed_at = coalesce(confirmed_at, now()),
       terms_accepted_at = now(),
       updated_at = now()
 WHERE id = $1;

-- update_password_hash --
-- Store a stronger hash of the same password (parameters changed since it was set).
UPDATE users SET password_hash = $2, updated_at = now() WHERE id = $1;

-- insert_email_confirmation --
-- A one-time confirmation link for a user, stored as the hash of its token.
INSERT INTO email_confirmations (user_id, token_hash, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3));

-- use_email_confirmation --
-- Spend a live confirmation token; returns its user, or nothing when unknown, used or expired.
UPDATE email_confirmations
   SET used_at = now()
 WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()
RETURNING user_id;

-- confirm_user --
-- Mark a user's address as confirmed (the first confirmation counts) and, when $2 is given,
-- store the password the user chose, unless they have one of their own already.
UPDATE users SET confirmed_at = coalesce(confirmed_at, now()),
                 password_hash = CASE WHEN password_chosen_by_user THEN password_hash
                                      ELSE coalesce($2, password_hash) END,
                 password_chosen_by_user = password_chosen_by_user OR $2 IS NOT NULL,
                 updated_at = now()
 WHERE id = $1
RETURNING id, email, confirmed_at;

-- user_for_confirmation --
-- The user behind a live confirmation token, without spending it.
SELECT u.id, u.email, u.password_chosen_by_user
  FROM email_confirmations c JOIN users u ON u.id = c.user_id
 WHERE c.token_hash = $1 AND c.used_at IS NULL AND c.expires_at > now();

-- insert_membership --
-- A membership of a user in an account (never the owner: the operator CLI creates owners).
INSERT INTO members (id, account_id, user_id, role)
VALUES ($1, $2, $3, $4::member_role)
RETURNING id;

-- is_member --
-- Whether the user with this e-mail is already a member of the account.
SELECT EXISTS (
    SELECT 1 FROM members m JOIN users u ON u.id = m.user_id
     WHERE m.account_id = $1 AND lower(u.email) = lower($2)
);

-- get_member --
-- One membership as the Member object shows it.
SELECT m.id, m.role::text AS role, m.is_owner, m.created_at, m.updated_at,
       u.email, u.first_name, u.last_name,
       display_name(u.first_name, u.last_name, u.email) AS name
  FROM members m JOIN users u ON u.id = m.user_id
 WHERE m.id = $1 AND m.account_id = $2;

-- count_members --
-- How many members an account has.
SELECT count(*) FROM members WHERE account_id = $1;

-- list_members --
-- A page of an account's members, oldest first.
SELECT m.id, m.role::text AS role, m.is_owner, m.created_at, m.updated_at,
       u.email, u.first_name, u.last_name,
       display_name(u.first_name, u.last_name, u.email) AS name
  FROM members m JOIN users u ON u.id = m.user_id
 WHERE m.account_id = $1
 ORDER BY m.created_at, m.id
 LIMIT $2 OFFSET $3;

-- membership_for_sign_in --
-- The user's membership in account $2, or (when $2 is null) their oldest membership.
SELECT m.id, m.account_id
  FROM members m
 WHERE m.user_id = $1 AND ($2::text IS NULL OR m.account_id = $2)
 ORDER BY m.created_at, m.id
 LIMIT 1;

-- membership_last_used --
-- The user's membership the web app last started a session of (members.web_session_at: a
-- sign-in, a switch, an accepted invitation), else their oldest: where the web app signs in.
SELECT m.id, m.account_id
  FROM members m
 WHERE m.user_id = $1
 ORDER BY m.web_session_at DESC NULLS LAST, m.created_at, m.id
 LIMIT 1;

-- membership_holding_record --
-- User $1's membership in the account that holds record $2 of kind $3 (rfp, knowledge_item,
-- question): where the web app signs in to open a page of it. None when that account is not one
-- of theirs, alike whether the record is another account's or nobody's.
SELECT m.id, m.account_id
  FROM members m
 WHERE m.user_id = $1
   AND m.account_id = CASE $3::text
       WHEN 'rfp' THEN (SELECT account_id FROM rfps WHERE id = $2)
       WHEN 'knowledge_item' THEN (SELECT account_id FROM knowledge_items WHERE id = $2)
       WHEN 'question' THEN (SELECT account_id FROM questions WHERE id = $2)
       END;

-- revoke_pending_invitations --
-- Revoke the live invitation to this address in the account, so its link stops working.
UPDATE invitations SET state = 'revoked', updated_at = now()
 WHERE account_id = $1 AND lower(email) = lower($2) AND state = 'pending';

-- count_pending_invitations --
-- How many invitations of the account wait for their invitee (expired ones included; not those
-- of an address that became a member another way, by POST /users or the CLI).
SELECT count(*) FROM invitations i
 WHERE i.account_id = $1 AND i.state = 'pending'
   AND NOT EXISTS (SELECT 1 FROM members m JOIN users u ON u.id = m.user_id
                    WHERE m.account_id = i.account_id AND lower(u.email) = lower(i.email));

-- list_pending_invitations --
-- A page of the account's invitations that wait for their invitee, newest first (the partial
-- index invitations_one_pending holds these rows), as count_pending_invitations counts them.
SELECT i.id, i.email, i.role::text AS role, i.state::text AS state, i.expires_at, i.created_at
  FROM invitations i
 WHERE i.account_id = $1 AND i.state = 'pending'
   AND NOT EXISTS (SELECT 1 FROM members m JOIN users u ON u.id = m.user_id
                    WHERE m.account_id = i.account_id AND lower(u.email) = lower(i.email))
 ORDER BY i.created_at DESC, i.id
 LIMIT $2 OFFSET $3;

-- revoke_invitation --
-- An administrator withdraws a pending invitation of the account: its link stops working.
-- Returns nothing when the account has no such invitation or it is no longer pending.
UPDATE invitations SET state = 'revoked', updated_at = now()
 WHERE id = $1 AND account_id = $2 AND state = 'pending'
RETURNING id, email, role::text AS role, state::text AS state, expires_at, created_at;

-- lock_pending_invitation_to --
-- Invitation $1 of account $2 when it is still the pending one to address $3 (the Members page's
-- "Send again" of it), locked: a revoke under way is waited for, and then it is not found.
SELECT id FROM invitations
 WHERE id = $1 AND account_id = $2 AND lower(email) = lower($3) AND state = 'pending'
   FOR UPDATE;

-- pending_invitation_replacing --
-- The pending invitation of account $2 to the address of its invitation $1, when there is one
-- (a revoked invitation replaced by a newer one: that is the live link).
SELECT newer.id
  FROM invitations old
  JOIN invitations newer ON newer.account_id = old.account_id
                        AND lower(newer.email) = lower(old.email) AND newer.state = 'pending'
 WHERE old.id = $1 AND old.account_id = $2 AND old.state = 'revoked';

-- invitation_state_in_account --
-- The state of one of the account's invitations (to say why it cannot be revoked).
SELECT state::text FROM invitations WHERE id = $1 AND account_id = $2;

-- insert_invitation --
-- A new invitation whose link token is stored as a hash.
INSERT INTO invitations (id, account_id, email, role, token_hash, invited_by, expires_at)
VALUES ($1, $2, $3, $4::member_role, $5, $6, now() + make_interval(secs => $7))
RETURNING id, email, role::text AS role, state::text AS state, expires_at, created_at;

-- invitation_by_token_hash --
-- The invitation behind a link token, with its account's name.
SELECT i.id, i.account_id, i.email, i.role::text AS role, i.state::text AS state,
       i.expires_at, i.created_at, i.expires_at <= now() AS expired, a.name AS account_name
  FROM invitations i JOIN accounts a ON a.id = i.account_id
 WHERE i.token_hash = $1;

-- lock_invitation_by_token_hash --
-- The invitation behind a link token, locked while it is being accepted.
SELECT id, account_id, email, role::text AS role, state::text AS state,
       expires_at <= now() AS expired
  FROM invitations
 WHERE token_hash = $1
   FOR UPDATE;

-- mark_invitation_accepted --
-- Use a pending invitation; matches no row when someone else used or revoked it first.
UPDATE invitations
   SET state = 'accepted', accepted_at = now(), member_id = $2, updated_at = now()
 WHERE id = $1 AND state = 'pending'
RETURNING id;

-- lock_address --
-- Serialize, until the transaction ends, every change concerning one e-mail address (accepting
-- invitations to it, inviting it): concurrent requests then see each other's rows instead of
-- failing on a unique index.
SELECT pg_advisory_xact_lock(hashtextextended(lower($1), 17));

-- display_name_of --
-- How a member with these names and e-mail is shown.
SELECT display_name($1, $2, $3);

-- change_member_role --
-- Set a member's role; the owner's role never changes. Returns nothing when no such member.
UPDATE members SET role = $3::member_role, updated_at = now()
 WHERE id = $1 AND account_id = $2
RETURNING id, role::text AS role, is_owner;

-- lock_member --
-- A member of the account, locked while its role or membership changes.
SELECT id, user_id, role::text AS role, is_owner FROM members
 WHERE id = $1 AND account_id = $2
   FOR UPDATE;

-- lock_acting_member --
-- The role of the member making a role change or removal, their membership locked (FOR SHARE)
-- until it commits: a change of their own role, or their removal, waits for it.
SELECT role::text FROM members WHERE id = $1 AND account_id = $2 FOR SHARE;

-- count_admins --
-- How many admins an account has.
SELECT count(*) FROM members WHERE account_id = $1 AND role = 'admin';

-- lock_assignable_member --
-- The user $2 as an assignee of the account's items: a member whose role may write, with the
-- name and e-mail the item shows; none otherwise. The membership is locked (FOR SHARE) until
-- the assignment commits, so removing the member or making them a viewer waits for it and then
-- unassigns the item (unassign_member_items).
SELECT u.id, u.email, display_name(u.first_name, u.last_name, u.email) AS name,
       m.id AS member_id
  FROM members m
  JOIN users u ON u.id = m.user_id
 WHERE m.account_id = $1 AND m.user_id = $2 AND m.role IN ('admin', 'member')
   FOR SHARE OF m;

-- assignable_members --
-- The members of an account who may be assigned items (those whose role may write), by name.
SELECT u.id, u.email, display_name(u.first_name, u.last_name, u.email) AS name
  FROM members m
  JOIN users u ON u.id = m.user_id
 WHERE m.account_id = $1 AND m.role IN ('admin', 'member')
 ORDER BY lower(display_name(u.first_name, u.last_name, u.email)), u.id;

-- unassign_member_items --
-- Unassign every item of the account's RFPs assigned to user $2 (a member removed or made a
-- viewer); the ids of those that were and the bytes of their question and answer, in id order
-- (for their rfp_item.assigned webhooks, read a few megabytes at a time).
WITH unassigned AS (
    UPDATE rfp_items i SET assignee_id = NULL, updated_at = now()
      FROM rfps r
     WHERE i.assignee_id = $2 AND r.id = i.rfp_id AND r.account_id = $1
    RETURNING i.id, octet_length(i.question) + coalesce(octet_length(i.answer), 0) AS size
)
SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids,
       coalesce(array_agg(size ORDER BY id), '{}') AS sizes
  FROM unassigned;

-- user_ref --
-- User $1 as an item names its assignee (id, name, email): whom a member's unassigned items were
-- taken from (the rfp_item.assigned webhook's previous_assignee).
SELECT id, display_name(first_name, last_name, email) AS name, email
  FROM users
 WHERE id = $1;

-- member_user --
-- The user behind member $2 of account $1 as an item shows its assignee (id, name, email): who
-- assigned an item, for the assignee's e-mail and the rfp_item.assigned webhook.
SELECT u.id, display_name(u.first_name, u.last_name, u.email) AS name, u.email
  FROM members m
  JOIN users u ON u.id = m.user_id
 WHERE m.account_id = $1 AND m.id = $2;

-- delete_member --
-- Remove a membership; its tokens go with it (api_tokens cascade).
DELETE FROM members WHERE id = $1 AND account_id = $2 RETURNING id;

-- prune_email_confirmations --
-- Up to $1 confirmation links expired a day ago (used or not: an unknown link is refused with the
-- same message as an expired one); how many went.
WITH old AS (
    SELECT id FROM email_confirmations WHERE expires_at < now() - interval '1 day'
     LIMIT $1 FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM email_confirmations c USING old WHERE c.id = old.id RETURNING 1
)
SELECT count(*)::integer FROM gone;
