-- insert_audit_event --
-- Record one action; the caller's transaction decides whether it happened.
INSERT INTO audit_events (account_id, actor_type, actor_id, actor_label, action, record_id,
                          client_address, request_id, before, after)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb);

-- list_audit_events --
-- One page of an account's events, newest first, filtered ($2 actor id, $3 record id, $4 action,
-- $5 since, $6 until; NULL: any); $7 rows from $8.
SELECT id, occurred_at, actor_type, actor_id, actor_label, action, record_id, client_address,
       request_id, before::text AS before, after::text AS after
  FROM audit_events
 WHERE account_id = $1
   AND ($2::text IS NULL OR actor_id = $2)
   AND ($3::text IS NULL OR record_id = $3)
   AND ($4::text IS NULL OR action = $4)
   AND ($5::timestamptz IS NULL OR occurred_at >= $5)
   AND ($6::timestamptz IS NULL OR occurred_at < $6)
 ORDER BY id DESC
 LIMIT $7 OFFSET $8;

-- count_audit_events --
-- How many events list_audit_events filters in.
SELECT count(*)
  FROM audit_events
 WHERE account_id = $1
   AND ($2::text IS NULL OR actor_id = $2)
   AND ($3::text IS NULL OR record_id = $3)
   AND ($4::text IS NULL OR action = $4)
   AND ($5::timestamptz IS NULL OR occurred_at >= $5)
   AND ($6::timestamptz IS NULL OR occurred_at < $6);

-- export_audit_events --
-- An account's events from $2 up to $3 (exclusive; audit_export_settled), oldest first (the
-- operator's JSON-lines export).
SELECT id, occurred_at, actor_type, actor_id, actor_label, action, record_id, client_address,
       request_id, before::text AS before, after::text AS after
  FROM audit_events
 WHERE account_id = $1 AND occurred_at >= $2 AND occurred_at < $3
 ORDER BY id;

-- audit_export_settled --
-- Where an export ends: every event stamped before it has committed or rolled back (events are
-- stamped with their write's time, migration 0046), so the next export from it misses none.
SELECT writes_settled_before();

-- first_account_of_user --
-- The account of a user's oldest membership (where an event about the user, not one of its
-- memberships, is logged).
SELECT account_id FROM members WHERE user_id = $1 ORDER BY created_at, id LIMIT 1;
