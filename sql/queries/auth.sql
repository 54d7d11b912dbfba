-- insert_api_token --
-- Store a token's hash for a member; the token itself is never stored.
INSERT INTO api_tokens (member_id, token_hash, scopes, expires_at)
VALUES ($1, $2, $3, $4)
RETURNING id;

-- principal_by_token_hash --
-- The member, account and user behind a live token (api_token_is_live: unrevoked, unexpired).
SELECT t.token_hash, t.scopes,
       m.id AS member_id, m.account_id, m.role::text AS role,
       u.id AS user_id, u.email,
       display_name(u.first_name, u.last_name, u.email) AS name
  FROM api_tokens t
  JOIN members m ON m.id = t.member_id
  JOIN users u ON u.id = m.user_id
 WHERE t.token_hash = $1
   AND api_token_is_live(t.revoked_at, t.expires_at);

-- token_is_live --
-- Whether the token of hash $1 may still be used (api_token_is_live; a removed member's tokens
-- are deleted with it): an event stream's re-check before it sends.
SELECT EXISTS (SELECT 1 FROM api_tokens t
                WHERE t.token_hash = $1 AND api_token_is_live(t.revoked_at, t.expires_at));

-- take_rate_limit_token --
-- One request against a shared token bucket: (allowed, remaining, retry_after seconds).
-- Committed without waiting for the WAL flush (this statement's own transaction only): the
-- bucket row is every request's lock, and holding it through an fsync orders a member's
-- requests one flush apart. A database crash can forget the last fraction of a second of
-- bucket updates, i.e. grant a few requests again; nothing else is at stake.
SELECT b.allowed, b.remaining, b.retry_after
  FROM set_config('synchronous_commit', 'off', true) AS s,
       take_rate_limit_token($1, $2, $3) AS b;

-- prune_rate_limit_buckets --
-- The buckets untouched for $1 seconds (housekeeping: at least the longest period, so full again,
-- the same as no bucket); how many went. One statement, not batches: without an index on
-- refilled_at (every request updates it: an index would cost each one) each batch would scan
-- the table again. A bucket taken meanwhile is re-checked once its taker commits, and stays.
WITH gone AS (
    DELETE FROM rate_limit_buckets WHERE refilled_at < now() - make_interval(secs => $1::float8)
    RETURNING 1
)
SELECT count(*)::integer FROM gone;

-- principal_and_rfp --
-- principal_by_token_hash and get_rfp in one round trip (GET /api/v1/rfps/{id}): the principal
-- behind a live token $1 and the RFP $2 of its account, the RFP's columns null when the account
-- has no such RFP. (tests/test_auth.py runs every token case through both.)
SELECT t.token_hash, t.scopes,
       m.id AS member_id, m.account_id, m.role::text AS role,
       u.id AS user_id, u.email,
       display_name(u.first_name, u.last_name, u.email) AS name,
       r.*
  FROM api_tokens t
  JOIN members m ON m.id = t.member_id
  JOIN users u ON u.id = m.user_id
  LEFT JOIN LATERAL (
      SELECT o.id, o.title, o.description, o.deadline, o.state, o.framework, o.portal_url,
             o.context, o.created_at, o.updated_at, o.owner_id, o.total_items,
             o.needs_input_items, o.auto_answered_items, o.approved_items,
             o.overall_completion_percentage,
             ou.email AS owner_email,
             display_name(ou.first_name, ou.last_name, ou.email) AS owner_name
        FROM rfp_overview o
        JOIN users ou ON ou.id = o.owner_id
       WHERE o.id = $2 AND o.account_id = m.account_id
  ) r ON true
 WHERE t.token_hash = $1
   AND api_token_is_live(t.revoked_at, t.expires_at);

-- principal_and_rate_limit --
-- principal_by_token_hash and take_rate_limit_token in one round trip, for a rate-limited
-- route: the principal behind a live token $1 and, only when the request passes the route's
-- policy (the token has scope $2 and the member one of the roles $3, as auth.check demands),
-- one request from the bucket $4 || member id, of capacity $5 refilled at $6 per second;
-- allowed/remaining/retry_after are null when nothing was taken. Committed without waiting for
-- the WAL flush, like take_rate_limit_token.
-- The CASE runs its subquery only when the policy passes (a lateral WHERE would not keep the
-- function from running); OFFSET 0 keeps the bucket (as jsonb: the function's row type is
-- anonymous) one value, taken once, not once per field.
SELECT t.token_hash, t.scopes,
       m.id AS member_id, m.account_id, m.role::text AS role,
       u.id AS user_id, u.email,
       display_name(u.first_name, u.last_name, u.email) AS name,
       (g.bucket ->> 'allowed')::boolean AS allowed,
       (g.bucket ->> 'remaining')::double precision AS remaining,
       (g.bucket ->> 'retry_after')::double precision AS retry_after
  FROM api_tokens t
  JOIN members m ON m.id = t.member_id
  JOIN users u ON u.id = m.user_id
  LEFT JOIN LATERAL (
      SELECT CASE WHEN $2 = ANY (t.scopes) AND m.role::text = ANY ($3::text[])
                  THEN (SELECT to_jsonb(b)
                          FROM set_config('synchronous_commit', 'off', true) AS s,
                               take_rate_limit_token($4 || m.id, $5, $6) AS b)
             END AS bucket
      OFFSET 0
  ) g ON true
 WHERE t.token_hash = $1
   AND api_token_is_live(t.revoked_at, t.expires_at);

-- insert_api_token_from --
-- Store a token's hash for a member, saying where it came from (sign_in, cli, demo).
INSERT INTO api_tokens (member_id, token_hash, scopes, expires_at, source)
VALUES ($1, $2, $3, $4, $5)
RETURNING id;

-- list_member_tokens --
-- A member's tokens (of account $2), newest first; never the token or its hash.
SELECT t.id, t.scopes, t.source, t.created_at, t.expires_at, t.revoked_at,
       api_token_is_live(t.revoked_at, t.expires_at) AS live
  FROM api_tokens t JOIN members m ON m.id = t.member_id
 WHERE t.member_id = $1 AND m.account_id = $2
 ORDER BY t.created_at DESC, t.id DESC;

-- token_in_account --
-- A token of a member of account $2, with its member.
SELECT t.id, t.member_id, t.scopes, t.source, t.created_at, t.expires_at, t.revoked_at,
       api_token_is_live(t.revoked_at, t.expires_at) AS live
  FROM api_tokens t JOIN members m ON m.id = t.member_id
 WHERE t.id = $1 AND m.account_id = $2;

-- revoke_token --
-- Revoke a token (the first revocation counts); returns it as token_in_account does.
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
 WHERE id = $1
RETURNING id, member_id, scopes, source, created_at, expires_at, revoked_at,
          api_token_is_live(revoked_at, expires_at) AS live;
