-- ask_question --
-- Charge $10 credits and store a new question in state `new`, with its ledger entry and (with an
-- actor) its audit event: one statement, so the account row (the lock that orders concurrent asks
-- of an account) is held for no round trip to the client when it commits on its own. The debit
-- matches only an active account with enough credits; no row back means nothing was written
-- (`account_standing` then says why). $13, when set, is the
-- asking process's pipeline: the question is born leased to it for $14 seconds (no claim needed,
-- no announcement: see 0014_question_handoff.sql). Returns the question with its asker, as
-- get_question does.
WITH debit AS (
    UPDATE accounts
       SET credits = credits - $10::integer,
           updated_at = CASE WHEN $10::integer > 0 THEN now() ELSE updated_at END
     WHERE id = $2 AND subscription_status = 'active' AND credits >= $10::integer
    RETURNING id
), question AS (
    INSERT INTO questions (id, account_id, user_id, member_id, rfp_id, rfp_item_id, question,
                           custom_prompt, answer_detail_level, charged_credits, idempotency_key,
                           request_hash, lease_owner, lease_expires_at, attempts)
    SELECT $1::text, d.id, $3::bigint, $4::text, $5::text, $6::text, $7::text, $8::text,
           $9::smallint, $10::integer, $11::text, $12::bytea, $13::text,
           CASE WHEN $13::text IS NOT NULL THEN now() + make_interval(secs => $14::float8) END,
           CASE WHEN $13::text IS NOT NULL THEN 1 ELSE 0 END
      FROM debit d
    RETURNING *
), ledger AS (
    INSERT INTO credit_ledger (account_id, amount, reason, subject_id)
    SELECT q.account_id, -q.charged_credits, 'question', q.id FROM question q WHERE q.charged_credits > 0
), audited AS (
    -- $15–$24: the audit event (audit.values: account, actor type, id, label, action, record,
    -- client address, request id, before, after), when there is an actor ($16 set).
    INSERT INTO audit_events (account_id, actor_type, actor_id, actor_label, action, record_id,
                              client_address, request_id, before, after)
    SELECT $15::text, $16::text, $17::text, $18::text, $19::text, $20::text, $21::text, $22::text,
           $23::jsonb, $24::jsonb
      FROM question q
     WHERE $16::text IS NOT NULL
)
SELECT q.*, q.state::text AS state, u.email AS user_email,
       display_name(u.first_name, u.last_name, u.email) AS user_name
  FROM question q
  JOIN users u ON u.id = q.user_id;

-- ask_item_questions --
-- An RFP's items asked at once ("answer all"): for each item of $5 (ids, with their questions $6)
-- a question $4 in state `new` charged $9 credits, its ledger entry, and the item marked as being
-- answered by it; the account debited once for all, when it is active and its credits cover every
-- item (no row counted back means nothing was written). One statement rather than one ask per
-- item: the account row stays locked until commit and every ask of the account waits on it (an
-- RFP of 10,000 items held it for 5.6 s asked one by one, 0.5 s so). Returns how many questions
-- were stored.
WITH debit AS (
    UPDATE accounts
       SET credits = credits - $9::integer * cardinality($5::text[]),
           updated_at = CASE WHEN $9::integer > 0 THEN now() ELSE updated_at END
     WHERE id = $1 AND subscription_status = 'active'
       AND credits >= $9::integer * cardinality($5::text[])
    RETURNING id
), question AS (
    INSERT INTO questions (id, account_id, user_id, member_id, rfp_id, rfp_item_id, question,
                           custom_prompt, answer_detail_level, charged_credits)
    SELECT n.question_id, d.id, $2::bigint, $3::text, $7::text, n.item_id, n.text, $8::text,
           $10::smallint, $9::integer
      FROM debit d, unnest($4::text[], $5::text[], $6::text[]) AS n(question_id, item_id, text)
    RETURNING id, account_id, rfp_item_id, charged_credits
), ledger AS (
    INSERT INTO credit_ledger (account_id, amount, reason, subject_id)
    SELECT q.account_id, -q.charged_credits, 'question', q.id FROM question q WHERE q.charged_credits > 0
), linked AS (
    UPDATE rfp_items i
       SET question_id = q.id, updated_at = now()
      FROM question q
     WHERE i.id = q.rfp_item_id
)
SELECT count(*)::integer FROM question;

-- account_standing --
-- An account's balance and subscription (why an ask was refused).
SELECT credits, subscription_status::text AS subscription_status FROM accounts WHERE id = $1;

-- question_by_idempotency_key --
-- The question a member already asked with this Idempotency-Key, and the hash of that request.
SELECT id, request_hash FROM questions WHERE member_id = $1 AND idempotency_key = $2;

-- get_question --
-- One question of an account, with its asker.
SELECT q.*, q.state::text AS state, u.email AS user_email,
       display_name(u.first_name, u.last_name, u.email) AS user_name
  FROM questions q
  JOIN users u ON u.id = q.user_id
 WHERE q.id = $1 AND q.account_id = $2;

-- get_question_and_token --
-- get_question and, in the same round trip, whether the token of hash $3 is still live
-- (api_token_is_live; a removed member's tokens are deleted with it): an event stream's re-read.
SELECT q.*, q.state::text AS state, u.email AS user_email,
       display_name(u.first_name, u.last_name, u.email) AS user_name,
       EXISTS (SELECT 1 FROM api_tokens t
                WHERE t.token_hash = $3 AND api_token_is_live(t.revoked_at, t.expires_at))
           AS token_live
  FROM questions q
  JOIN users u ON u.id = q.user_id
 WHERE q.id = $1 AND q.account_id = $2;

-- claim_questions --
-- Lease up to $2 unfinished questions whose lease is free or expired, fairly between accounts:
-- round-robin by account, starting with the account after $4 (the one this pipeline last claimed
-- from; '' at first), each account's oldest first. A round takes each account's oldest, then each
-- one's second oldest…, so an account's backlog (an answer-all of 3,000 items) delays another
-- account's question by at most one claim per account ahead of it in the turn, rather than by the
-- whole backlog. Rows another process is claiming right now are skipped, and the next ones taken.
--
-- The accounts are found by a skip scan of questions_queued (account_id, created_at) WHERE
-- state <> 'complete': one index descent per account (past the few questions in flight), at most
-- $2 accounts after $4 and then $2 from the first; each account's oldest $2 by the same index.
WITH RECURSIVE after_cursor (account_id, turn) AS (
    (SELECT account_id, 1
       FROM questions
      WHERE state <> 'complete' AND account_id > $4::text
        AND (lease_expires_at IS NULL OR lease_expires_at < now())
      ORDER BY account_id
      LIMIT 1)
    UNION ALL
    SELECT (SELECT q.account_id
              FROM questions q
             WHERE q.state <> 'complete' AND q.account_id > a.account_id
               AND (q.lease_expires_at IS NULL OR q.lease_expires_at < now())
             ORDER BY q.account_id
             LIMIT 1),
           a.turn + 1
      FROM after_cursor a
     WHERE a.account_id IS NOT NULL AND a.turn < $2
), from_first (account_id, turn) AS (
    (SELECT account_id, 1
       FROM questions
      WHERE state <> 'complete' AND account_id <= $4::text
        AND (lease_expires_at IS NULL OR lease_expires_at < now())
      ORDER BY account_id
      LIMIT 1)
    UNION ALL
    SELECT (SELECT q.account_id
              FROM questions q
             WHERE q.state <> 'complete' AND q.account_id > a.account_id
               AND q.account_id <= $4::text
               AND (q.lease_expires_at IS NULL OR q.lease_expires_at < now())
             ORDER BY q.account_id
             LIMIT 1),
           a.turn + 1
      FROM from_first a
     WHERE a.account_id IS NOT NULL AND a.turn < $2
), turns AS (
    SELECT account_id, turn FROM after_cursor WHERE account_id IS NOT NULL
    UNION ALL
    SELECT account_id, turn + $2 FROM from_first WHERE account_id IS NOT NULL
    ORDER BY turn
    LIMIT $2
), candidates AS (
    SELECT c.id, t.turn, row_number() OVER (PARTITION BY t.turn ORDER BY c.created_at) AS place
      FROM turns t
     CROSS JOIN LATERAL (
            -- Locked here, before the limit, so rows another claim holds are passed over for
            -- the next ones rather than filling the limit (a claim not yet committed is seen
            -- as free by this one's snapshot). An account gives at most $2 less one for each
            -- other account in turn (each of those gives one at least), so a claim locks at
            -- most about ($2 / 2)² rows beyond those it takes, for the moment it runs.
            SELECT q.id, q.created_at
              FROM questions q
             WHERE q.account_id = t.account_id AND q.state <> 'complete'
               AND (q.lease_expires_at IS NULL OR q.lease_expires_at < now())
             ORDER BY q.created_at
             LIMIT greatest(1, $2 + 1 - (SELECT count(*) FROM turns))
               FOR UPDATE OF q SKIP LOCKED) c
), claimable AS (
    SELECT id, place, turn
      FROM candidates
     ORDER BY place, turn
     LIMIT $2
)
UPDATE questions q
   SET lease_owner = $1,
       lease_expires_at = now() + make_interval(secs => $3),
       attempts = q.attempts + 1
  FROM claimable c
 WHERE q.id = c.id
RETURNING q.*, q.state::text AS state, c.place AS claim_place, c.turn AS claim_turn;

-- renew_lease --
-- Extend a lease this process still holds (a slow step keeps its question).
UPDATE questions SET lease_expires_at = now() + make_interval(secs => $3)
 WHERE id = $1 AND lease_owner = $2 AND state <> 'complete'
RETURNING id;

-- release_lease --
-- Give a question back (shutdown, or a step failed unexpectedly) so another worker can take it.
UPDATE questions SET lease_owner = NULL, lease_expires_at = now() + make_interval(secs => $3)
 WHERE id = $1 AND lease_owner = $2 AND state <> 'complete';

-- count_failed_attempt --
-- A step of a question leased to us failed unexpectedly: count it; returns the count so far.
UPDATE questions SET failed_attempts = failed_attempts + 1
 WHERE id = $1 AND lease_owner = $2 AND state <> 'complete'
RETURNING failed_attempts;

-- advance_question --
-- A guarded transition: store the output of a step (or of a run of quick steps) and the state
-- after it, only if the question is still in the expected state and leased to us. No row back
-- means another worker moved it. Returns the question as get_question reads it (this process's
-- event streams take it from here instead of reading it again).
--
-- $18, an event type or NULL: store nothing (no row back) when an endpoint of the account wants
-- that event (webhook_wanted). A completion no endpoint wants then commits in this one statement;
-- one that is wanted is stored again in a transaction that queues the event with it (persist).
--
-- The references $6 are the step's, from the worker's memory. A merge since they were read
-- repointed the stored ones (repoint_question_references: kb_item_id the kept entry, merged_from
-- the duplicate): a reference of $6 to a duplicate so merged is repointed the same way here, or
-- the next step's write put back the removed entry (a probe: a question mid-pipeline still cited
-- it once complete, though the merge had counted it as repointed).
UPDATE questions q
   SET state = $4::question_state,
       context = $5,
       "references" = CASE
           WHEN $6::jsonb IS NOT NULL
                AND jsonb_path_exists(coalesce(q."references", '[]'), '$[*].merged_from')
           THEN coalesce((SELECT jsonb_agg(coalesce(
                        (SELECT ref || jsonb_build_object('kb_item_id', stored->>'kb_item_id',
                                                          'merged_from', ref->>'kb_item_id')
                           FROM jsonb_array_elements(q."references") AS s(stored)
                          WHERE stored->>'merged_from' = ref->>'kb_item_id'
                          LIMIT 1),
                        ref) ORDER BY ord)
                   FROM jsonb_array_elements($6::jsonb) WITH ORDINALITY AS r(ref, ord)), $6::jsonb)
           ELSE $6::jsonb
       END,
       draft_answer = $7,
       verbatim_answer = $8,
       sufficient_context = $9,
       engine_points = $10,
       engine_failure = $11,
       confidence = $12,
       confidence_rationale = $13,
       requires_attention = $14,
       attention_points = $15,
       answer = $16,
       lease_owner = CASE WHEN $4::question_state = 'complete' THEN NULL ELSE q.lease_owner END,
       lease_expires_at = CASE WHEN $4::question_state = 'complete' THEN NULL
                               ELSE now() + make_interval(secs => $17) END,
       updated_at = now()
  FROM users u
 WHERE q.id = $1 AND q.state = $2::question_state AND q.lease_owner = $3 AND u.id = q.user_id
   AND ($18::text IS NULL OR NOT webhook_wanted(q.account_id, $18))
RETURNING q.*, q.state::text AS state, u.email AS user_email,
          display_name(u.first_name, u.last_name, u.email) AS user_name;

-- rfp_context --
-- The background an RFP gives the engine.
SELECT context FROM rfps WHERE id = $1;

-- answer_rfp_item --
-- A completed question answers its RFP item, if the item still waits for an answer from this
-- question: a reopened item asked anew must not take the answer of its earlier question.
-- updated_at is the time of the write, not now() (its transaction's start): the RFP page's bulk
-- approval counts an item unchanged when updated_at is before the page's time, and a transaction
-- that began before the page but wrote after it (waiting for a lock) would otherwise pass. One
-- that wrote before the page and commits after it holds the page's time back instead
-- (auto_answer_items). The same for review_rfp_item.
UPDATE rfp_items
   SET answer = $2, confidence = $3, state = $4::rfp_item_state, updated_at = clock_timestamp()
 WHERE id = $1 AND state = 'pending' AND question_id = $5
RETURNING rfp_id;

-- mark_question_refunded --
-- Record that a question's credits were given back; returns them only the first time.
UPDATE questions SET refunded = true
 WHERE id = $1 AND NOT refunded AND charged_credits > 0
RETURNING charged_credits;
