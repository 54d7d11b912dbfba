-- find_references --
-- An account's entries sharing any word with the text, best first (question words weigh most).
WITH q AS (
    SELECT replace(plainto_tsquery('english', $2)::text, ' & ', ' | ')::tsquery AS query
)
SELECT k.id, k.external_id, k.title, k.question, k.answer, k.source,
       ts_rank_cd(k.search_vector, q.query, 32) AS score
  FROM knowledge_items k, q
 WHERE k.account_id = $1
   AND q.query::text <> ''
   AND k.search_vector @@ q.query
 ORDER BY score DESC, k.id
 LIMIT $3;
