-- lock_account_webhook_endpoints --
-- Serialize, until the transaction ends, account $1's endpoints being counted and added:
-- concurrent creations each counted the others' uncommitted ones as not there, and all added theirs
-- past webhooks.max_endpoints_per_account.
SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints:' || $1, 17));

-- insert_webhook_endpoint --
-- A new endpoint of account $2.
INSERT INTO webhook_endpoints (id, account_id, url, event_types, description, secret, enabled)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING *;

-- list_webhook_endpoints --
-- An account's endpoints, oldest first; $2 rows from $3.
SELECT * FROM webhook_endpoints WHERE account_id = $1 ORDER BY created_at, id LIMIT $2 OFFSET $3;

-- count_webhook_endpoints --
-- How many endpoints an account has.
SELECT count(*) FROM webhook_endpoints WHERE account_id = $1;

-- get_webhook_endpoint --
-- One endpoint of an account.
SELECT * FROM webhook_endpoints WHERE id = $1 AND account_id = $2;

-- lock_webhook_endpoint --
-- One endpoint of an account, locked for a change.
SELECT * FROM webhook_endpoints WHERE id = $1 AND account_id = $2 FOR UPDATE;

-- update_webhook_endpoint --
-- Store an admin's change; enabling clears the reason the service had disabled it for.
UPDATE webhook_endpoints
   SET url = $2, event_types = $3, description = $4, enabled = $5,
       disabled_reason = CASE WHEN $5 THEN NULL ELSE disabled_reason END,
       updated_at = now()
 WHERE id = $1
RETURNING *;

-- delete_webhook_endpoint --
-- Remove an endpoint (its deliveries go with it); returns its id when it existed.
DELETE FROM webhook_endpoints WHERE id = $1 AND account_id = $2 RETURNING id;

-- enqueue_webhook_events --
-- The outbox: events $1 (ids) of account $2, of type $3, about records $4 with bodies $5 (arrays
-- in step; one event or many), each with a delivery to every enabled endpoint of the account
-- that wants the type. Nothing is written when no endpoint wants it. Returns how many
-- deliveries were queued.
WITH targets AS (
    SELECT id FROM webhook_endpoints
     WHERE account_id = $2 AND enabled AND $3 = ANY (event_types)
), events AS (
    INSERT INTO webhook_events (id, account_id, type, record_id, body)
    SELECT e.id, $2, $3, e.record_id, e.body
      FROM unnest($1::text[], $4::text[], $5::text[]) AS e (id, record_id, body)
     WHERE EXISTS (SELECT 1 FROM targets)
    RETURNING id, record_id
), queued AS (
    INSERT INTO webhook_deliveries (event_id, endpoint_id, record_id)
    SELECT events.id, targets.id, events.record_id FROM events, targets
    RETURNING id
)
SELECT count(*) FROM queued;

-- webhook_type_wanted --
-- Whether any enabled endpoint of account $1 wants event type $2 (before building a costly body).
SELECT webhook_wanted($1, $2);

-- claim_webhook_delivery --
-- Lease one due delivery for $1 seconds; its first attempt sets the retry window ($2 seconds).
-- Fair between accounts: the accounts take turns, starting with the account after $4 (the one
-- this deliverer last claimed for; '' at first), so one account's backlog (an endpoint failing
-- thousands of deliveries) delays another account's delivery by about one attempt per account
-- ahead of it, not by the backlog. Within an account, the oldest due first (next_attempt_at, id).
-- Rows another deliverer holds are skipped; so is a delivery with an earlier one still pending for
-- the same endpoint and record (order per record), and any delivery to a disabled endpoint.
--
-- The endpoints with pending deliveries are found by a skip scan of webhook_deliveries_pending
-- (endpoint_id, next_attempt_at, id) WHERE state = 'pending': one index descent per such
-- endpoint, however many deliveries it holds (a disabled endpoint's backlog is never walked);
-- then each enabled one's first $3 due deliveries by the same index.
WITH RECURSIVE pending (endpoint_id) AS (
    (SELECT endpoint_id FROM webhook_deliveries WHERE state = 'pending'
      ORDER BY endpoint_id, next_attempt_at LIMIT 1)
    UNION ALL
    SELECT (SELECT d.endpoint_id FROM webhook_deliveries d
             WHERE d.state = 'pending' AND d.endpoint_id > p.endpoint_id
             ORDER BY d.endpoint_id, d.next_attempt_at LIMIT 1)
      FROM pending p
     WHERE p.endpoint_id IS NOT NULL
), due AS (
    SELECT ep.account_id, c.id,
           row_number() OVER (PARTITION BY ep.account_id ORDER BY c.next_attempt_at, c.id) AS place
      FROM pending p
      JOIN webhook_endpoints ep ON ep.id = p.endpoint_id AND ep.enabled
     CROSS JOIN LATERAL (
            SELECT c.id, c.next_attempt_at
              FROM webhook_deliveries c
             WHERE c.endpoint_id = ep.id AND c.state = 'pending' AND c.next_attempt_at <= now()
               AND NOT EXISTS (
                    SELECT 1 FROM webhook_deliveries b
                     WHERE b.endpoint_id = c.endpoint_id AND b.record_id = c.record_id
                       AND b.state = 'pending' AND b.id < c.id)
             ORDER BY c.next_attempt_at, c.id
             LIMIT $3) c
), turn AS (
    -- the first $3 in turn: enough for the deliverers claiming at the same time to skip
    SELECT id, place, account_id <= $4::text AS wrapped, account_id
      FROM due
     ORDER BY place, wrapped, account_id
     LIMIT $3
)
UPDATE webhook_deliveries d
   SET attempts = d.attempts + 1,
       next_attempt_at = now() + make_interval(secs => $1),
       last_attempt_at = now(),
       retry_until = coalesce(d.retry_until, now() + make_interval(secs => $2))
  FROM webhook_events e, webhook_endpoints p
 WHERE d.id = (
        SELECT c.id
          FROM turn t
          JOIN webhook_deliveries c ON c.id = t.id
         WHERE c.state = 'pending' AND c.next_attempt_at <= now()
         ORDER BY t.place, t.wrapped, t.account_id
         LIMIT 1
           FOR UPDATE OF c SKIP LOCKED
       )
   AND e.id = d.event_id AND p.id = d.endpoint_id
RETURNING d.id, d.event_id, d.endpoint_id, d.attempts, d.retry_until, e.type, e.body,
          p.url, p.secret, p.account_id;

-- mark_webhook_delivered --
-- The claimed attempt ($2) got a 2xx ($3, body start $4).
UPDATE webhook_deliveries
   SET state = 'delivered', delivered_at = now(), last_status = $3, last_response = $4,
       last_error = NULL
 WHERE id = $1 AND attempts = $2 AND state = 'pending'
RETURNING id;

-- mark_webhook_failed --
-- The claimed attempt ($2) failed ($3 status or NULL, $4 body start, $5 error): retry after $6
-- seconds, or give up when that would pass retry_until. Returns the new state. $7: it was
-- refused before anything was sent, and the retry is due $6 seconds after its claim
-- (last_attempt_at), or now if that has passed, and whether it gives up is judged from the
-- claim too: the delivery log, which the account's admins read, then does not show how long
-- its address look-up took.
UPDATE webhook_deliveries
   SET last_status = $3, last_response = $4, last_error = $5,
       state = CASE WHEN CASE WHEN $7::boolean THEN last_attempt_at ELSE now() END
                         + make_interval(secs => $6) > retry_until
                    THEN 'failed'::webhook_delivery_state
                    ELSE 'pending'::webhook_delivery_state END,
       next_attempt_at = CASE WHEN $7::boolean
                              THEN greatest(now(), last_attempt_at + make_interval(secs => $6))
                              ELSE now() + make_interval(secs => $6) END
 WHERE id = $1 AND attempts = $2 AND state = 'pending'
RETURNING state::text AS state;

-- disable_webhook_endpoint --
-- Persistent failure: the service turns the endpoint off and says why.
UPDATE webhook_endpoints
   SET enabled = false, disabled_reason = $2, updated_at = now()
 WHERE id = $1 AND enabled
RETURNING id;

-- list_webhook_deliveries --
-- An endpoint's deliveries, newest first; $2 rows from $3.
SELECT d.id, d.event_id, e.type AS event_type, d.record_id, d.state::text AS state, d.attempts,
       d.next_attempt_at, d.retry_until, d.last_attempt_at, d.last_status, d.last_error,
       d.last_response, d.delivered_at, d.created_at
  FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
 WHERE d.endpoint_id = $1
 ORDER BY d.id DESC
 LIMIT $2 OFFSET $3;

-- count_webhook_deliveries --
-- How many deliveries an endpoint has.
SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1;

-- retry_webhook_delivery --
-- An admin's retry of a delivery that is not pending: due now, with a fresh retry window (set
-- by its next attempt). A delivered one is sent again; receivers deduplicate by webhook-id.
-- It first holds the delivery's event (FOR KEY SHARE) so that housekeeping's prune, which locks
-- the events it deletes, either skips this event or has deleted it by the time the update runs
-- (then nothing is updated: 404). Without that, a prune could delete a sibling's log entry while
-- this delivery became pending again.
WITH event AS (
    SELECT e.id
      FROM webhook_events e
     WHERE e.id = (SELECT event_id FROM webhook_deliveries WHERE id = $1 AND endpoint_id = $2)
       FOR KEY SHARE
)
UPDATE webhook_deliveries d
   SET state = 'pending', next_attempt_at = now(), retry_until = NULL
  FROM event
 WHERE d.id = $1 AND d.endpoint_id = $2 AND d.event_id = event.id AND d.state <> 'pending'
RETURNING d.id;

-- get_webhook_delivery --
-- One delivery of an endpoint.
SELECT d.id, d.event_id, e.type AS event_type, d.record_id, d.state::text AS state, d.attempts,
       d.next_attempt_at, d.retry_until, d.last_attempt_at, d.last_status, d.last_error,
       d.last_response, d.delivered_at, d.created_at
  FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
 WHERE d.id = $1 AND d.endpoint_id = $2;

-- knowledge_items_by_ids --
-- Entries of account $1 by id (the bodies of an import's webhooks).
SELECT * FROM knowledge_items WHERE account_id = $1 AND id = ANY ($2::text[]) ORDER BY id;

-- lock_old_webhook_events --
-- Up to $2 events older than $1 days all of whose deliveries were finished (delivered or failed)
-- when this statement began, locked for prune_webhook_events; their ids. Events another process
-- holds are skipped: a manual retry holds its delivery's event (retry_webhook_delivery) until it
-- commits, so an event being retried is never taken.
SELECT coalesce(array_agg(id), '{}')
  FROM (SELECT e.id
          FROM webhook_events e
         WHERE e.created_at < now() - make_interval(days => $1::integer)
           AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                            WHERE d.event_id = e.id AND d.state = 'pending')
         ORDER BY e.created_at
         LIMIT $2
           FOR UPDATE SKIP LOCKED) AS old;

-- prune_webhook_events --
-- The events $1 (locked by lock_old_webhook_events in this transaction) with their deliveries
-- (ON DELETE CASCADE), but for any with a delivery pending now; how many went. This statement's
-- snapshot is taken after the locks, so it sees every retry committed before them, and a retry
-- after them waits for this transaction and then finds its delivery gone (404). An event with one
-- delivery still pending keeps every delivery's log.
WITH gone AS (
    DELETE FROM webhook_events e
     WHERE e.id = ANY ($1::text[])
       AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                        WHERE d.event_id = e.id AND d.state = 'pending')
    RETURNING 1
)
SELECT count(*)::integer FROM gone;
