-- lock_account_rfp --
-- Lock one RFP of an account so that concurrent item appends get distinct positions.
SELECT id, context FROM rfps WHERE id = $1 AND account_id = $2 FOR UPDATE;

-- insert_rfp_items_returning --
-- Many items of one RFP at once, from parallel arrays; returns them in order.
INSERT INTO rfp_items (id, rfp_id, question, section, position)
SELECT id, $1, question, section, position
  FROM unnest($2::text[], $3::text[], $4::text[], $5::integer[]) AS t(id, question, section, position)
RETURNING *;

-- lock_rfp_item --
-- One item of an account's RFP, locked for review.
SELECT i.*
  FROM rfp_items i
  JOIN rfps r ON r.id = i.rfp_id
 WHERE i.id = $1 AND i.rfp_id = $2 AND r.account_id = $3
   FOR UPDATE OF i;

-- get_rfp_item --
-- One item of an account's RFP.
SELECT i.*
  FROM rfp_items i
  JOIN rfps r ON r.id = i.rfp_id
 WHERE i.id = $1 AND i.rfp_id = $2 AND r.account_id = $3;

-- review_rfp_item --
-- Store a reviewed item. Moving it to pending from another state reopens it: the link to the
-- question that answered it goes, so the next "answer all" answers it again.
UPDATE rfp_items
   SET question = $2,
       section = $3,
       answer = $4,
       state = $5::rfp_item_state,
       question_id = CASE WHEN $5 = 'pending' AND state <> 'pending' THEN NULL ELSE question_id END,
       updated_at = now()
 WHERE id = $1
RETURNING *;

-- link_rfp_item_to_knowledge_item --
-- Remember which knowledge-base entry an item was saved as.
UPDATE rfp_items SET knowledge_item_id = $2 WHERE id = $1 RETURNING *;

-- export_rfp_items --
-- Every item of an RFP in questionnaire order, for an export.
SELECT question, answer, state::text AS state, confidence, section
  FROM rfp_items
 WHERE rfp_id = $1
 ORDER BY position;

-- lock_unanswered_items --
-- An RFP's pending items not yet being answered, in order, locked against a concurrent review.
SELECT id, question
  FROM rfp_items
 WHERE rfp_id = $1 AND state = 'pending' AND question_id IS NULL
 ORDER BY position
   FOR UPDATE;

-- count_rfp_items_in_flight --
-- How many items of an RFP are being answered now.
SELECT count(*)::integer FROM rfp_items
 WHERE rfp_id = $1 AND state = 'pending' AND question_id IS NOT NULL;

-- lock_account_for_answering --
-- An account's balance and subscription, locked while an RFP's items are asked: answering is
-- all or nothing, so the balance must cover every item before the first is charged.
SELECT credits, subscription_status::text AS subscription_status FROM accounts WHERE id = $1 FOR UPDATE;

-- ask_pending_items --
-- "Answer all" in one statement: for each item of $5 (ids, with their questions $6), a question
-- $4 in state `new` charged $9 credits, its ledger entry, and the item marked as being answered by
-- it; the account debited once for all. One statement, not one per item, because the account row
-- stays locked until commit and every ask of the account waits on it (10,000 items took ~3 s
-- one by one). The caller holds that lock (lock_account_for_answering) and has checked the
-- subscription and the balance. Returns how many questions were stored.
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
