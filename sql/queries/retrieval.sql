-- knowledge_retrieve --
-- The question's term statistics, concepts and words (first row, id NULL), then its lexical
-- candidates and the entries $6 (dense retrieval's), each with what the ranking reads: one round
-- trip (the function is in sql/migrations/0013_retrieval_one_statement.sql, redefined by 0016).
SELECT * FROM knowledge_retrieve($1, $2, $3, $4, $5, $6);

-- knowledge_retrieve_dense --
-- The same rows with dense retrieval, in one round trip: the $9 entries nearest to the question's
-- vector $7 (model $6, $8 dimensions, HNSW searching $10 at a time) join the candidates, and each
-- row carries its entry's similarity to the question (sql/functions/knowledge_retrieve_dense.sql).
SELECT * FROM knowledge_retrieve_dense($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- knowledge_item_by_external_id --
-- One entry of an account by its importer's id (to follow "Please see X" pointers).
SELECT id, external_id, title, question, answer, source
  FROM knowledge_items
 WHERE account_id = $1 AND external_id = ANY($2::text[]);
