-- get_rfp --
-- One RFP of an account, with owner, stats and derived state.
SELECT o.*, u.email AS owner_email, display_name(u.first_name, u.last_name, u.email) AS owner_name
  FROM rfp_overview o
  JOIN users u ON u.id = o.owner_id
 WHERE o.id = $1 AND o.account_id = $2;

-- lock_rfp --
-- The stored fields of one RFP, locked for an update.
SELECT * FROM rfps WHERE id = $1 AND account_id = $2 FOR UPDATE;

-- search_rfps --
-- One page of an account's RFPs whose title or description matches an ILIKE pattern, newest
-- first. rfp_search_text (migration 0012) is both fields joined by U+001F and has the trigram
-- index; a pattern holding U+001F could match across the join, so then the fields are checked
-- one by one (with custom plans the strpos folds away for every other pattern).
WITH page AS (
    SELECT r.id, r.created_at
      FROM rfps r
     WHERE r.account_id = $1
       AND rfp_search_text(r.title, r.description) ILIKE $2
       AND (strpos($2, E'\x1f') = 0 OR r.title ILIKE $2 OR r.description ILIKE $2)
     ORDER BY r.created_at DESC, r.id DESC
     LIMIT $3 OFFSET $4
)
SELECT o.id, o.title, o.description, o.deadline, o.framework, o.portal_url, o.created_at,
       o.updated_at, o.owner_id, o.state, o.total_items, o.needs_input_items,
       o.auto_answered_items, o.approved_items, o.overall_completion_percentage,
       u.email AS owner_email, display_name(u.first_name, u.last_name, u.email) AS owner_name
  FROM page
  JOIN rfp_overview o ON o.id = page.id
  JOIN users u ON u.id = o.owner_id
 ORDER BY page.created_at DESC, page.id DESC;

-- insert_rfp --
-- A new RFP owned by a user of the account.
INSERT INTO rfps (id, account_id, owner_id, title, description, deadline, framework, portal_url, context)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- update_rfp --
-- Replace an RFP's editable fields.
UPDATE rfps
   SET title = $3, description = $4, deadline = $5, framework = $6, portal_url = $7,
       context = $8, updated_at = now()
 WHERE id = $1 AND account_id = $2;

-- next_item_position --
-- The position after the last item of an RFP.
SELECT coalesce(max(position), 0) + 1 FROM rfp_items WHERE rfp_id = $1;

-- insert_rfp_items --
-- Many items of one RFP at once, from parallel arrays.
INSERT INTO rfp_items (id, rfp_id, question, section, position)
SELECT id, $1, question, section, position
  FROM unnest($2::text[], $3::text[], $4::text[], $5::integer[]) AS t(id, question, section, position);

-- touch_rfp --
-- Mark an RFP as changed (its items changed).
UPDATE rfps SET updated_at = now() WHERE id = $1;

-- count_rfp_items --
-- How many items an RFP has, discarded ones included.
SELECT count(*)::integer FROM rfp_items WHERE rfp_id = $1;

-- list_rfp_items --
-- One page of an RFP's items in questionnaire order, each with its assignee's name and e-mail.
-- With $4 only the items assigned to $5 (null: the unassigned ones). A search: search_rfp_items_page.
SELECT i.*, a.email AS assignee_email,
       display_name(a.first_name, a.last_name, a.email) AS assignee_name
  FROM rfp_items i
  LEFT JOIN users a ON a.id = i.assignee_id
 WHERE i.rfp_id = $1
   AND (NOT $4::boolean OR i.assignee_id = $5::bigint OR ($5 IS NULL AND i.assignee_id IS NULL))
 ORDER BY i.position
 LIMIT $2 OFFSET $3;

-- count_rfp_items_of_assignee --
-- How many items of an RFP list_rfp_items filters by assignee ($2 as its $5) would show.
SELECT count(*)::integer FROM rfp_items
 WHERE rfp_id = $1 AND (assignee_id = $2::bigint OR ($2 IS NULL AND assignee_id IS NULL));

-- search_rfp_items_page --
-- One page of an RFP's items whose question or answer matches an ILIKE pattern ($4), in
-- questionnaire order, as list_rfp_items gives them (with $5 only the items assigned to $6, null:
-- the unassigned ones), and `total`, how many match: one statement, reading the matching items
-- once. One row with the total and nulls when the page is past the end.
-- rfp_items_search_trgm (migration 0044: the RFP, question and answer in one GIN index) serves the
-- match: a BitmapOr of the question's and the answer's trigrams, each list cut to the RFP's items
-- in the index, then `question ILIKE $4 OR answer ILIKE $4` rechecked on those rows alone. It
-- needs the pattern seen: custom plans, as every search's (domain rfps.search_time_bounded runs
-- search.sql plan_each_search, then the search's statement timeout). A pattern without a
-- trigram (shorter than 3 letters or digits in a row, which search_pattern refuses anyway) gets
-- the RFP's items from the index by rfp_id and matches each, as before the index.
WITH passing AS MATERIALIZED (
    SELECT i.id, i.position
      FROM rfp_items i
     WHERE i.rfp_id = $1
       AND (NOT $5::boolean OR i.assignee_id = $6::bigint OR ($6 IS NULL AND i.assignee_id IS NULL))
       AND (i.question ILIKE $4 OR i.answer ILIKE $4)
), page AS (
    SELECT id, position FROM passing ORDER BY position LIMIT $2 OFFSET $3
)
SELECT i.*, a.email AS assignee_email,
       display_name(a.first_name, a.last_name, a.email) AS assignee_name, counted.total
  FROM (SELECT count(*)::integer AS total FROM passing) AS counted
  LEFT JOIN (page JOIN rfp_items i ON i.id = page.id) ON true
  LEFT JOIN users a ON a.id = i.assignee_id
 ORDER BY page.position;

-- assigned_items_page --
-- "My items": one page of the items of account $1's RFPs assigned to user $2, across its RFPs, by
-- the RFP's deadline (none last), then the RFP, then position; $3 keeps only the items in that
-- state (null: every state). Questions and answers are cut to $6 characters, their whole lengths
-- beside them (the web app's list cuts long ones as the RFP page does; the API passes its
-- largest integer). `total` is how many items pass: one row with it, and nulls for the rest,
-- when the page is past the end.
-- The partial index rfp_items_assignee (assignee_id, rfp_id, position) finds the user's items
-- without reading anyone else's; each one's RFP comes by its key and is kept only if it is the
-- account's (the user may be a member of other accounts). No index gives the deadline order, so
-- the user's matching items are sorted as a few columns (ids, keys, the RFP's title), and only
-- the page's items are read whole; a later page costs what the first does. A user who is no
-- member of the account has no items in it (removal unassigns them): checked once first, so that
-- naming another account's user does not walk that user's items there (30 ms at 100,000).
WITH mine AS MATERIALIZED (
    SELECT i.id, i.position, r.id AS rfp_id, r.deadline, r.title
      FROM rfp_items i
      JOIN rfps r ON r.id = i.rfp_id
     WHERE i.assignee_id = $2 AND r.account_id = $1
       AND ($3::text IS NULL OR i.state::text = $3)
       AND EXISTS (SELECT 1 FROM members m WHERE m.account_id = $1 AND m.user_id = $2)
)
SELECT counted.total, shown.*
  FROM (SELECT count(*)::integer AS total FROM mine) AS counted
  LEFT JOIN LATERAL (
      SELECT i.id, i.rfp_id, left(i.question, $6) AS question, length(i.question) AS question_chars,
             left(i.answer, $6) AS answer, length(i.answer) AS answer_chars,
             i.state::text AS state, i.confidence, i.section, i.position, i.created_at,
             i.updated_at, i.question_id, i.knowledge_item_id, i.assignee_id,
             a.email AS assignee_email,
             display_name(a.first_name, a.last_name, a.email) AS assignee_name,
             page.title AS rfp_title, page.deadline AS rfp_deadline,
             coalesce(q.requires_attention, false) AS requires_attention
        FROM (SELECT * FROM mine
               ORDER BY deadline NULLS LAST, rfp_id, position
               LIMIT $4 OFFSET $5) AS page
        JOIN rfp_items i ON i.id = page.id
        JOIN users a ON a.id = i.assignee_id
        LEFT JOIN questions q ON q.id = i.question_id
  ) AS shown ON true
 ORDER BY shown.rfp_deadline NULLS LAST, shown.rfp_id, shown.position;
