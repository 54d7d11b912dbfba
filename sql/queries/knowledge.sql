-- insert_knowledge_item --
-- A new entry of an account.
INSERT INTO knowledge_items (id, account_id, question, answer, title, tags, source, external_id, yes_no)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING *;

-- get_knowledge_item --
-- One entry of an account.
SELECT * FROM knowledge_items WHERE id = $1 AND account_id = $2;

-- count_knowledge_items --
-- How many entries an account has.
SELECT count(*)::integer FROM knowledge_items WHERE account_id = $1;

-- list_knowledge_items --
-- One page of an account's entries, newest first.
SELECT * FROM knowledge_items
 WHERE account_id = $1
 ORDER BY created_at DESC, id DESC
 LIMIT $2 OFFSET $3;

-- lock_items_saved_as --
-- The RFP items saved as entries $1 (rfp_items.knowledge_item_id), locked in id order before the
-- entries are: deleting or merging an entry changes them (ON DELETE SET NULL, repoint_rfp_items)
-- after it had locked the entry, while an approval saving an item takes the item, then its entry:
-- the two orders could deadlock (one of the two a 503). Only account $2's items: the ids are
-- the caller's, not yet found in the account, and another account's entry id sent here locked
-- that account's items (their approvals waited) until the refusal's rollback.
SELECT i.id FROM rfp_items i JOIN rfps r ON r.id = i.rfp_id
 WHERE i.knowledge_item_id = ANY($1::text[]) AND r.account_id = $2
 ORDER BY i.id FOR UPDATE OF i;

-- delete_knowledge_item --
-- Remove one entry of an account; returns its id when it existed.
DELETE FROM knowledge_items WHERE id = $1 AND account_id = $2 RETURNING id;

-- upsert_knowledge_items --
-- Import rows (parallel arrays): a row whose external id the account already has updates that
-- entry, the others are created. Returns each row's id and whether it was created.
-- Written in external id order, so that two imports sharing ids take their rows' locks in one
-- order: in file order, two files listing the same ids in other orders deadlocked (a probe: every
-- such pair imported at once, one of the two a 500).
INSERT INTO knowledge_items AS k (id, account_id, question, answer, title, tags, source, external_id,
                                  yes_no)
SELECT r.id, $1, r.question, r.answer, r.title,
       coalesce((SELECT array_agg(t) FROM jsonb_array_elements_text(r.tags) AS t), '{}'),
       r.source, r.external_id, r.yes_no
  FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::text[], $8::text[],
              $9::boolean[])
       AS r(id, question, answer, title, tags, source, external_id, yes_no)
 ORDER BY r.external_id
ON CONFLICT (account_id, external_id) WHERE external_id IS NOT NULL DO UPDATE
   SET question = excluded.question, answer = excluded.answer, title = excluded.title,
       tags = excluded.tags, source = excluded.source, yes_no = excluded.yes_no, updated_at = now()
RETURNING k.id, k.external_id, (xmax = 0) AS created;

-- merge_knowledge_index_pending --
-- Move the full-text index's pending list into the index proper (after a bulk import).
SELECT gin_clean_pending_list('knowledge_items_search'::regclass);

-- lock_reviewed_question_text --
-- Serialize, until the transaction ends, the reviews saving a question's text $2 (case aside) in
-- account $1: one entry per reviewed question text, and no unique index spans two questions, so two
-- reviews of one text asked twice each found no entry (neither saw the other's uncommitted insert)
-- and both inserted. The second now waits, then finds the first's entry and updates it.
SELECT pg_advisory_xact_lock(hashtextextended('reviewed_question:' || $1 || ':' || lower($2), 17));

-- save_reviewed_answer --
-- A reviewed answer as an entry (id $1 when new): the entry an earlier save of the same RFP item
-- (the entry it is saved as, $10: the one a merge kept, when its own was merged into it; or external
-- id $7) or of the same question (reviewed question $8, or the same question text among reviewed
-- entries) made is updated in place, so saving again never duplicates. A new entry is owned by the
-- reviewer ($9); an existing one keeps its owner, review date and, given no title $5, its title.
-- No row: a concurrent first save won the insert; the caller runs this again to update it.
WITH earlier AS (
    SELECT k.id
      FROM knowledge_items k
     WHERE k.account_id = $2
       AND (k.id = $10::text OR k.external_id = $7::text
            OR ($8::text IS NOT NULL AND k.reviewed_question IS NOT NULL
                AND (k.reviewed_question = $8 OR lower(k.question) = lower($3))))
     ORDER BY k.id IS NOT DISTINCT FROM $10 DESC, k.external_id IS NOT DISTINCT FROM $7 DESC,
              k.reviewed_question IS NOT DISTINCT FROM $8 DESC, k.created_at, k.id
     LIMIT 1
     FOR UPDATE
), updated AS (
    UPDATE knowledge_items k
       SET question = $3, answer = $4, title = coalesce($5, k.title), source = $6, updated_at = now()
      FROM earlier e
     WHERE k.id = e.id
    RETURNING k.*
), inserted AS (
    INSERT INTO knowledge_items AS k (id, account_id, question, answer, title, source, external_id,
                                      reviewed_question, owner_member_id)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
     WHERE NOT EXISTS (SELECT 1 FROM earlier)
    ON CONFLICT DO NOTHING
    RETURNING k.*
)
SELECT *, false AS created FROM updated
UNION ALL
SELECT *, true AS created FROM inserted;
