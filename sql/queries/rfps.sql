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
-- With $4 only the items assigned to $5 (null: the unassigned ones).
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
