-- set_review_period --
-- The review period new entries get (config library.review_period_days); written at start-up.
UPDATE library_settings SET review_period_days = $1 WHERE review_period_days <> $1;

-- set_actor --
-- Who makes this transaction's changes to entries (the versioning trigger records it).
SELECT set_config('rfp.actor', coalesce($1, ''), true);

-- set_merging --
-- This transaction's deletes of entries are merges (the versioning trigger records it).
SELECT set_config('rfp.merging', 'on', true);

-- count_library_items --
-- How many entries of an account match the filters ($2 stale only, $3 owner member id).
SELECT count(*)::integer FROM knowledge_items
 WHERE account_id = $1
   AND ($2::boolean IS NOT TRUE OR knowledge_review_passed(review_by))
   AND ($3::text IS NULL OR owner_member_id = $3);

-- list_library_items --
-- One page of an account's entries matching the filters: stale ones by review date (most
-- overdue first), else newest first.
SELECT * FROM knowledge_items
 WHERE account_id = $1
   AND ($2::boolean IS NOT TRUE OR knowledge_review_passed(review_by))
   AND ($3::text IS NULL OR owner_member_id = $3)
 ORDER BY CASE WHEN $2::boolean THEN review_by END, created_at DESC, id DESC
 LIMIT $4 OFFSET $5;

-- lock_knowledge_item --
-- One entry of an account, locked for a change.
SELECT * FROM knowledge_items WHERE id = $1 AND account_id = $2 FOR UPDATE;

-- lock_knowledge_items_to_merge --
-- Entries $1 of account $2, locked in the order an import updates them (upsert_knowledge_items:
-- external id, then id for those without one): merging A into B while B is merged into A, or while
-- an import updates both, then waits instead of deadlocking. Rows are locked as the sort emits them.
-- FOR NO KEY UPDATE, as an import's update locks them, and not FOR UPDATE: the indexer's claims
-- (embeddings_pending) hold entries FOR KEY SHARE in creation order, which FOR UPDATE waits for,
-- and a claim holding the second entry while waiting for the first deadlocked with a merge. Only
-- deleting the duplicate then waits for a claim, holding nothing a claim waits for.
SELECT * FROM knowledge_items WHERE id = ANY($1::text[]) AND account_id = $2
 ORDER BY external_id, id
   FOR NO KEY UPDATE;

-- is_account_member --
-- Whether $1 is a member of account $2.
SELECT EXISTS (SELECT 1 FROM members WHERE id = $1 AND account_id = $2);

-- update_knowledge_item --
-- A changed entry (every field given; the versioning trigger keeps the previous version).
UPDATE knowledge_items
   SET question = $3, answer = $4, title = $5, tags = $6, source = $7, yes_no = $8,
       owner_member_id = $9, review_by = $10
 WHERE id = $1 AND account_id = $2
RETURNING *;

-- mark_knowledge_item_reviewed --
-- Someone confirmed the entry is still right: reviewed now, next review one period (or $3) away.
UPDATE knowledge_items
   SET reviewed_at = now(),
       review_by = coalesce($3::date, (now() AT TIME ZONE 'UTC')::date
                                      + (SELECT review_period_days FROM library_settings))
 WHERE id = $1 AND account_id = $2
RETURNING *;

-- knowledge_item_versions --
-- The earlier versions of an entry, newest first: $3 of them from the $4th (a page).
SELECT * FROM knowledge_item_versions
 WHERE item_id = $1 AND account_id = $2
 ORDER BY version DESC
 LIMIT $3 OFFSET $4;

-- version_authors --
-- The names of the members $2 of account $1 who wrote an entry's versions (those still members).
SELECT m.id, display_name(u.first_name, u.last_name, u.email) AS name
  FROM members m
  JOIN users u ON u.id = m.user_id
 WHERE m.account_id = $1 AND m.id = ANY ($2::text[]);

-- count_knowledge_item_versions --
-- How many earlier versions an entry has.
SELECT count(*)::integer FROM knowledge_item_versions WHERE item_id = $1 AND account_id = $2;

-- stale_items --
-- Every stale entry of an account (the CLI), most overdue first.
SELECT k.id, k.review_by, k.owner_member_id, u.email AS owner_email, k.question, k.title
  FROM knowledge_items k
  LEFT JOIN members m ON m.id = k.owner_member_id
  LEFT JOIN users u ON u.id = m.user_id
 WHERE k.account_id = $1 AND knowledge_review_passed(k.review_by)
 ORDER BY k.review_by, k.id;

-- duplicate_entries --
-- An account's entries as duplicate detection compares them (answers' first 2,000 characters:
-- enough for their opening and the numbers a conflict is found by; questions' first 1,000, all
-- that library.QUESTION_OPENING compares: 30,000 questions of 100,000 characters were 3 GB).
SELECT id, left(question, 1000) AS question, left(answer, 2000) AS answer, yes_no
  FROM knowledge_items
 WHERE account_id = $1;

-- start_duplicate_run --
-- Claim an account's duplicate run; null when one started under a minute ago is still going.
-- `seen`, the time the entries the run reads next are current to (finish_duplicate_run stores it
-- as started_at, which entries written later make the report outdated by): the claim's, or just
-- before the oldest transaction of another session that has written and not yet committed began.
-- Entries stamp updated_at with their write's time (knowledge_item_versioning), so one written
-- after the claim is later than `seen`; one written before it whose transaction commits after
-- the run read the entries (an import waiting for an entry another write holds) holds `seen`
-- back instead (writes_settled_before, sql/functions, as auto_answer_items' `seen`).
INSERT INTO knowledge_duplicate_runs AS r (account_id) VALUES ($1)
ON CONFLICT (account_id) DO UPDATE SET started_at = now()
 WHERE r.computed_at IS NOT NULL AND r.computed_at >= r.started_at
    OR r.started_at < now() - interval '1 minute'
RETURNING r.started_at,
          least(r.started_at, writes_settled_before()) AS seen;

-- clear_duplicates --
-- Forget an account's earlier findings (before storing a run's, in one transaction).
DELETE FROM knowledge_duplicates WHERE account_id = $1;

-- replace_duplicates --
-- Store a run's findings (parallel arrays), after clear_duplicates.
INSERT INTO knowledge_duplicates (account_id, item_a, item_b, kind, reason, similarity)
SELECT $1, a, b, k, r, s
  FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::real[]) AS f(a, b, k, r, s);

-- finish_duplicate_run --
-- A run is done: when, over how many entries, in how long; started_at becomes the time its
-- entries were current to ($4, start_duplicate_run's `seen`).
UPDATE knowledge_duplicate_runs SET computed_at = now(), entries = $2, seconds = $3, started_at = $4
 WHERE account_id = $1;

-- duplicate_run --
-- An account's last duplicate run and whether entries changed since it started.
SELECT r.*, EXISTS (SELECT 1 FROM knowledge_items k
                     WHERE k.account_id = r.account_id AND k.updated_at > r.started_at) AS outdated
  FROM knowledge_duplicate_runs r
 WHERE r.account_id = $1;

-- list_duplicates --
-- An account's findings (only pairs whose entries both still exist), conflicts first; $2 of them
-- (null: all) after the first $3.
SELECT d.kind, d.reason, d.similarity,
       a.id AS a_id, a.question AS a_question, a.answer AS a_answer,
       b.id AS b_id, b.question AS b_question, b.answer AS b_answer
  FROM knowledge_duplicates d
  JOIN knowledge_items a ON a.id = d.item_a
  JOIN knowledge_items b ON b.id = d.item_b
 WHERE d.account_id = $1
 ORDER BY d.kind = 'conflict' DESC, d.similarity DESC, d.item_a, d.item_b
 LIMIT $2::bigint OFFSET $3;

-- count_duplicates --
-- How many findings list_duplicates has for an account.
SELECT count(*)::integer
  FROM knowledge_duplicates d
  JOIN knowledge_items a ON a.id = d.item_a
  JOIN knowledge_items b ON b.id = d.item_b
 WHERE d.account_id = $1;

-- repoint_question_references --
-- Questions that cited entry $2 cite entry $3 instead, remembering the entry they cited.
UPDATE questions q
   SET "references" = (
       SELECT jsonb_agg(CASE WHEN ref->>'kb_item_id' = $2::text
                             THEN ref || jsonb_build_object('kb_item_id', $3::text,
                                                            'merged_from', $2::text)
                             ELSE ref END ORDER BY ord)
         FROM jsonb_array_elements(q."references") WITH ORDINALITY AS r(ref, ord))
 WHERE q.account_id = $1
   AND q."references" @> jsonb_build_array(jsonb_build_object('kb_item_id', $2::text))
RETURNING q.id;

-- repoint_rfp_items --
-- RFP items saved as entry $1 are saved as entry $2.
UPDATE rfp_items SET knowledge_item_id = $2 WHERE knowledge_item_id = $1;

-- delete_merged_item --
-- Remove the entry merged into another (its versions stay readable).
DELETE FROM knowledge_items WHERE id = $1 AND account_id = $2 RETURNING id;
