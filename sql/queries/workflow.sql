-- lock_account_rfp --
-- Lock one RFP of an account so that concurrent item appends get distinct positions.
SELECT id, context FROM rfps WHERE id = $1 AND account_id = $2 FOR UPDATE;

-- insert_rfp_items_returning --
-- Many items of one RFP at once, from parallel arrays; returns them in order.
INSERT INTO rfp_items (id, rfp_id, question, section, position)
SELECT id, $1, question, section, position
  FROM unnest($2::text[], $3::text[], $4::text[], $5::integer[]) AS t(id, question, section, position)
RETURNING *;

-- lock_rfp_before_items --
-- An account's RFP, locked before any of its items is: "answer all" locks the RFP, then its
-- pending items, so a review (and a completing question) takes them in that order too, or the two
-- deadlock. The level touch_rfp takes later anyway, so it holds up nothing more than that did.
SELECT id FROM rfps WHERE id = $1 AND account_id = $2 FOR NO KEY UPDATE;

-- lock_rfp_item --
-- One item of an account's RFP with its assignee's name and e-mail, locked for review.
SELECT i.*, a.email AS assignee_email,
       display_name(a.first_name, a.last_name, a.email) AS assignee_name
  FROM rfp_items i
  JOIN rfps r ON r.id = i.rfp_id
  LEFT JOIN users a ON a.id = i.assignee_id
 WHERE i.id = $1 AND i.rfp_id = $2 AND r.account_id = $3
   FOR UPDATE OF i;

-- get_rfp_item --
-- One item of an account's RFP with its assignee's name and e-mail.
SELECT i.*, a.email AS assignee_email,
       display_name(a.first_name, a.last_name, a.email) AS assignee_name
  FROM rfp_items i
  JOIN rfps r ON r.id = i.rfp_id
  LEFT JOIN users a ON a.id = i.assignee_id
 WHERE i.id = $1 AND i.rfp_id = $2 AND r.account_id = $3;

-- rfp_items_by_ids --
-- Items $2 of account $1's RFPs with their assignees' names and e-mails, as get_rfp_item returns
-- them, in id order (a member's unassigned items, for their webhooks).
SELECT i.*, a.email AS assignee_email,
       display_name(a.first_name, a.last_name, a.email) AS assignee_name
  FROM rfp_items i
  JOIN rfps r ON r.id = i.rfp_id
  LEFT JOIN users a ON a.id = i.assignee_id
 WHERE i.id = ANY ($2::text[]) AND r.account_id = $1
 ORDER BY i.id;

-- review_rfp_item --
-- Store a reviewed item. Moving it to pending from another state reopens it: the link to the
-- question that answered it goes, so the next "answer all" answers it again. A review that
-- rewrites the question or the answer of a pending item while its question is being answered
-- takes the item over: the link goes too, so that question's answer, when it comes, does not
-- replace what the reviewer wrote (answer_rfp_item) and the item is no longer in flight.
-- $6 is its assignee (a user id the caller checked). Returned as get_rfp_item returns it.
WITH reviewed AS (
    UPDATE rfp_items
       SET question = $2,
           section = $3,
           answer = $4,
           state = $5::rfp_item_state,
           question_id = CASE WHEN $5 = 'pending' AND state <> 'pending' THEN NULL
                              WHEN state = 'pending' AND (question IS DISTINCT FROM $2
                                                          OR answer IS DISTINCT FROM $4) THEN NULL
                              ELSE question_id END,
           assignee_id = $6,
           updated_at = clock_timestamp()  -- the write's time: see answer_rfp_item
     WHERE id = $1
    RETURNING *
)
SELECT reviewed.*, a.email AS assignee_email,
       display_name(a.first_name, a.last_name, a.email) AS assignee_name
  FROM reviewed
  LEFT JOIN users a ON a.id = reviewed.assignee_id;

-- link_rfp_item_to_knowledge_item --
-- Remember which knowledge-base entry an item was saved as; the item as get_rfp_item returns it.
WITH linked AS (
    UPDATE rfp_items SET knowledge_item_id = $2 WHERE id = $1 RETURNING *
)
SELECT linked.*, a.email AS assignee_email,
       display_name(a.first_name, a.last_name, a.email) AS assignee_name
  FROM linked
  LEFT JOIN users a ON a.id = linked.assignee_id;

-- export_rfp_items --
-- Every item of an RFP in questionnaire order, for an export.
SELECT question, answer, state::text AS state, confidence, section
  FROM rfp_items
 WHERE rfp_id = $1
 ORDER BY position;

-- lock_unanswered_items --
-- An RFP's pending items not yet being answered, in order (the first $2, or all when $2 is null),
-- locked against a concurrent review.
SELECT id, question
  FROM rfp_items
 WHERE rfp_id = $1 AND state = 'pending' AND question_id IS NULL
 ORDER BY position
 LIMIT $2
   FOR UPDATE;

-- first_rfp_item_in_flight --
-- The position of an RFP's first item still being answered; none when every one is done. By the
-- rfp_items_in_flight index in position order, so the plan reads only items in flight even when
-- the statistics still say, as at the start of a run, that every item is.
SELECT position FROM rfp_items
 WHERE rfp_id = $1 AND state = 'pending' AND question_id IS NOT NULL
 ORDER BY position
 LIMIT 1;

-- count_rfp_items_in_flight --
-- How many items of an RFP are being answered now.
SELECT count(*)::integer FROM rfp_items
 WHERE rfp_id = $1 AND state = 'pending' AND question_id IS NOT NULL;

-- count_rfp_items_waiting --
-- How many items of an RFP "answer all" would start now (pending, not being answered).
SELECT count(*)::integer FROM rfp_items
 WHERE rfp_id = $1 AND state = 'pending' AND question_id IS NULL;

-- rfp_title --
-- An RFP's title (an assignment's e-mail names it).
SELECT title FROM rfps WHERE id = $1;
