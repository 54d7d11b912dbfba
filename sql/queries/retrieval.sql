-- knowledge_retrieve --
-- The question's term statistics, concepts and words (first row, id NULL), then its lexical
-- candidates and the entries $6 (given, as also), each with what the ranking reads: one round
-- trip (sql/functions/knowledge_retrieve.sql).
SELECT * FROM knowledge_retrieve($1, $2, $3, $4, $5, $6);

-- knowledge_retrieve_nearest --
-- Dense retrieval's part, once knowledge_retrieve has found the lexical candidates $7 (while the
-- question was being embedded): the $5 entries nearest to the question's vector $3 (model $2, $4
-- dimensions, HNSW searching $6 at a time) that are not among them, as candidates (`joins`), and
-- every entry's similarity to the question (sql/functions/knowledge_retrieve_nearest.sql).
SELECT * FROM knowledge_retrieve_nearest($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- knowledge_item_by_external_id --
-- One entry of an account by its importer's id (to follow "Please see X" pointers).
SELECT id, external_id, title, question, answer, source
  FROM knowledge_items
 WHERE account_id = $1 AND external_id = ANY($2::text[]);
