-- enqueue_mail --
-- Put a message of kind $5, written for member $6 (or none) of account $7 (or none), in the
-- outbox; the caller's transaction decides whether it is ever sent.
INSERT INTO mail_outbox (message_id, recipient, subject, body, kind, requested_by, account_id)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id;

-- lock_recent_mail --
-- Serialize, until the transaction ends, the messages of kind $2 from member $3 to address $1
-- being counted and written: concurrent transactions each counted the others' uncommitted ones as
-- not there, and all wrote theirs past the limit.
SELECT pg_advisory_xact_lock(
    hashtextextended('mail_outbox:' || $2 || ':' || coalesce($3, '') || ':' || lower($1), 17));

-- count_recent_mail --
-- Messages of kind $2 from member $3 to address $1 in the last $4 seconds (mail_outbox_recent;
-- whatever their state: a held or failed one was still asked for).
SELECT count(*) FROM mail_outbox
 WHERE recipient = $1 AND kind = $2 AND requested_by IS NOT DISTINCT FROM $3
   AND created_at > now() - make_interval(secs => $4);

-- lock_account_mail --
-- Serialize, until the transaction ends, the messages of account $1 being counted and written
-- (mail.account_mails_per_hour): concurrent transactions would each count the others'
-- uncommitted ones as not there, and all write theirs past the bound. Taken after any address
-- lock (lock_address, lock_recent_mail), never before one.
SELECT pg_advisory_xact_lock(hashtextextended('mail_outbox_account:' || $1, 17));

-- account_mail_wait --
-- Whole seconds until account $1 may have one more message written under a bound of $2 in $3
-- seconds: how long until the $2-th newest of the window leaves it; no row while fewer than $2
-- are in it (mail_outbox_account_recent, read backward: at most $2 entries; whatever their
-- state, as count_recent_mail).
SELECT greatest(1, ceil(extract(epoch FROM created_at + make_interval(secs => $3) - now())))::integer
  FROM mail_outbox
 WHERE account_id = $1 AND created_at > now() - make_interval(secs => $3)
 ORDER BY created_at DESC
OFFSET $2 - 1 LIMIT 1;

-- address_mail_wait --
-- Whole seconds until account $1 may have one more invitation, "you were added" or confirmation
-- written to address $2 (any case) under a bound of $3 in $4 seconds: how long until the $3-th
-- newest of the window leaves it; no row while fewer than $3 are in it. Read by
-- mail_outbox_account_recent backward, the account's messages of the window until $3 are found:
-- at most mail.account_mails_per_hour of them; all of them when that is 0, or when the CLI
-- (which it does not bound) assigned items: 11 ms for 100,000. Not mail_outbox_recent: it is
-- by recipient as written, and an admin chooses the case of an invitation's address. Whatever
-- their state, as count_recent_mail. Counted under the address's lock (lock_address), which
-- every invitation and new user takes before it.
SELECT greatest(1, ceil(extract(epoch FROM created_at + make_interval(secs => $4) - now())))::integer
  FROM mail_outbox
 WHERE account_id = $1 AND created_at > now() - make_interval(secs => $4)
   AND lower(recipient) = lower($2) AND kind IN ('invitation', 'added', 'confirmation')
 ORDER BY created_at DESC
OFFSET $3 - 1 LIMIT 1;

-- claim_mail --
-- Claim up to $1 due messages for $2 seconds (the lease); rows another sender holds are skipped.
UPDATE mail_outbox
   SET attempts = attempts + 1,
       next_attempt_at = now() + make_interval(secs => $2)
 WHERE id IN (
        SELECT id FROM mail_outbox
         WHERE state = 'pending' AND next_attempt_at <= now()
         ORDER BY next_attempt_at, id
         LIMIT $1
           FOR UPDATE SKIP LOCKED
       )
RETURNING id, message_id, recipient, subject, body, attempts;

-- mark_mail_sent --
-- The claimed attempt ($2) succeeded; erase the body, which holds a one-time link.
UPDATE mail_outbox
   SET state = 'sent', sent_at = now(), body = '', last_error = NULL
 WHERE id = $1 AND attempts = $2 AND state = 'pending'
RETURNING id;

-- mark_mail_failed --
-- The claimed attempt ($2) failed: retry after $3 seconds, or give up after $4 attempts.
UPDATE mail_outbox
   SET last_error = $5,
       state = CASE WHEN attempts >= $4 THEN 'failed'::mail_state ELSE 'pending'::mail_state END,
       body = CASE WHEN attempts >= $4 THEN '' ELSE body END,
       next_attempt_at = now() + make_interval(secs => $3)
 WHERE id = $1 AND attempts = $2 AND state = 'pending'
RETURNING state::text AS state;

-- mark_mail_held --
-- No SMTP host is configured: keep the claimed message, body included, for the operator
-- (`python -m service mail show ID`) instead of sending or logging it.
UPDATE mail_outbox
   SET state = 'held', last_error = NULL
 WHERE id = $1 AND attempts = $2 AND state = 'pending'
RETURNING id;

-- held_mail --
-- Messages kept for the operator because no SMTP host is configured, newest first.
SELECT id, recipient, subject, created_at FROM mail_outbox
 WHERE state = 'held' ORDER BY id DESC LIMIT $1;

-- mail_by_id --
-- One outbox message with its body (empty once sent or given up).
SELECT id, message_id, recipient, subject, body, state::text AS state, attempts, last_error,
       created_at, sent_at
  FROM mail_outbox WHERE id = $1;

-- prune_mail --
-- Up to $3 messages no longer pending written more than $1 days ago (sent or given up) or $2
-- days ago (held for the operator: their links may still work until then); how many went. Rows
-- another process holds are skipped.
WITH old AS (
    SELECT id FROM mail_outbox
     WHERE state <> 'pending'
       AND created_at < now() - make_interval(
               days => CASE WHEN state = 'held' THEN $2::integer ELSE $1::integer END)
     ORDER BY id
     LIMIT $3
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM mail_outbox m USING old WHERE m.id = old.id RETURNING 1
)
SELECT count(*)::integer FROM gone;
