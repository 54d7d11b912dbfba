-- keep_questionnaire_file --
-- Keep an imported questionnaire for write-back; the same file imported again into the same RFP
-- (another sheet of it, say) is kept once. Returns its id.
INSERT INTO questionnaire_files AS f (id, account_id, rfp_id, format, filename, sha256, content)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (rfp_id, sha256) DO UPDATE SET filename = coalesce(excluded.filename, f.filename)
RETURNING id;

-- set_item_sources --
-- Where each imported item sits in its file (parallel arrays by position).
UPDATE rfp_items i
   SET questionnaire_file_id = $2, source_sheet = $3, answer_column = $4, source_row = s.row
  FROM unnest($5::integer[], $6::integer[]) AS s(position, row)
 WHERE i.rfp_id = $1 AND i.position = s.position;

-- latest_questionnaire_file --
-- The questionnaire an RFP's items were last imported from.
SELECT f.*
  FROM questionnaire_files f
 WHERE f.rfp_id = $1 AND f.account_id = $2
   AND EXISTS (SELECT 1 FROM rfp_items i WHERE i.questionnaire_file_id = f.id)
 ORDER BY f.created_at DESC, f.id DESC
 LIMIT 1;

-- has_questionnaire_file --
-- Whether an RFP has a questionnaire latest_questionnaire_file finds (the RFP page offers the
-- export into it then), without reading the file.
SELECT EXISTS (
  SELECT 1
    FROM questionnaire_files f
   WHERE f.rfp_id = $1 AND f.account_id = $2
     AND EXISTS (SELECT 1 FROM rfp_items i WHERE i.questionnaire_file_id = f.id)
);

-- questionnaire_file_answer_chars --
-- The characters of the answers a write-back of a kept questionnaire writes ($2: drafted ones too).
SELECT coalesce(sum(length(answer)), 0)
  FROM rfp_items
 WHERE questionnaire_file_id = $1 AND state <> 'discarded' AND ($2 OR state = 'approved');

-- questionnaire_file_items --
-- The items of a kept questionnaire with their cells, in file order.
SELECT id, source_sheet, source_row, answer_column, answer, state::text AS state
  FROM rfp_items
 WHERE questionnaire_file_id = $1
 ORDER BY position;
