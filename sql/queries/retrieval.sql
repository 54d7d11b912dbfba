-- query_terms --
-- The lexemes of a text with their document frequency in an account, and the account's entry count.
WITH q AS (SELECT to_tsvector('english', $2) AS v)
SELECT l.lexeme, coalesce(t.df, 0) AS df,
       coalesce((SELECT s.items FROM knowledge_stats s WHERE s.account_id = $1), 0) AS items
  FROM q, unnest(tsvector_to_array(q.v)) AS l(lexeme)
  LEFT JOIN knowledge_terms t ON t.account_id = $1 AND t.lexeme = l.lexeme;

-- query_concepts --
-- The vocabulary concepts a text mentions, each with every phrase query of the concept.
WITH q AS (SELECT to_tsvector('english', $2) AS v),
mentioned AS (
    SELECT DISTINCT v.concept
      FROM knowledge_vocabulary v, q
     WHERE (v.account_id IS NULL OR v.account_id = $1)
       AND numnode(v.phrase_query) > 0
       AND q.v @@ v.phrase_query
)
SELECT m.concept, array_agg(v.phrase_query::text ORDER BY v.id) AS phrase_queries
  FROM mentioned m
  JOIN knowledge_vocabulary v ON v.concept = m.concept
 WHERE (v.account_id IS NULL OR v.account_id = $1) AND numnode(v.phrase_query) > 0
 GROUP BY m.concept;

-- knowledge_candidates --
-- The cheap first stage that the Python ranking refines. Entries matching any candidate lexeme
-- ($2, the question's rarest) or concept phrase query ($3), at most $5 of them; then the best $6
-- of those by a weighted ts_rank on every lexeme of the question ($4) and the phrases. Lexemes are
-- quoted, so any text is safe. Each row carries its tsvector for the second stage.
WITH queries AS (
    SELECT (SELECT string_agg(part, ' | ')
              FROM (SELECT quote_literal(l) FROM unnest($2::text[]) AS l
                    UNION ALL SELECT '(' || p || ')' FROM unnest($3::text[]) AS p) AS a(part)
           )::tsquery AS candidate,
           (SELECT string_agg(part, ' | ')
              FROM (SELECT quote_literal(l) FROM unnest($4::text[]) AS l
                    UNION ALL SELECT '(' || p || ')' FROM unnest($3::text[]) AS p) AS a(part)
           )::tsquery AS ranking
), cand AS MATERIALIZED (
    SELECT k.id, k.external_id, k.title, k.question, k.answer, k.source, k.search_vector
      FROM knowledge_items k, queries q
     WHERE k.account_id = $1 AND k.search_vector @@ q.candidate
     LIMIT $5
)
SELECT c.id, c.external_id, c.title, c.question, c.answer, c.source, c.search_vector::text AS vector,
       length(ts_filter(c.search_vector, '{a,b}')) AS question_lexemes,
       length(ts_filter(c.search_vector, '{c,d}')) AS answer_lexemes,
       ts_rank('{0.1, 0.2, 0.4, 1.0}', c.search_vector, q.ranking) AS rank
  FROM cand c, queries q
 ORDER BY rank DESC, c.id
 LIMIT $6;

-- knowledge_concept_matches --
-- For each given entry, which of the given phrase queries (as text) it matches.
SELECT k.id, array_agg(p.ord) FILTER (WHERE k.search_vector @@ p.query::tsquery) AS matched
  FROM knowledge_items k,
       unnest($2::text[]) WITH ORDINALITY AS p(query, ord)
 WHERE k.account_id = $1 AND k.id = ANY($3::text[])
 GROUP BY k.id;

-- knowledge_item_by_external_id --
-- One entry of an account by its importer's id (to follow "Please see X" pointers).
SELECT id, external_id, title, question, answer, source
  FROM knowledge_items
 WHERE account_id = $1 AND external_id = ANY($2::text[]);

-- knowledge_ranking_rows --
-- Given entries of an account with what the ranking reads (as knowledge_candidates returns):
-- the entries dense retrieval found that the lexical candidates did not.
SELECT k.id, k.external_id, k.title, k.question, k.answer, k.source, k.search_vector::text AS vector,
       length(ts_filter(k.search_vector, '{a,b}')) AS question_lexemes,
       length(ts_filter(k.search_vector, '{c,d}')) AS answer_lexemes,
       0.0::real AS rank
  FROM knowledge_items k
 WHERE k.account_id = $1 AND k.id = ANY($2::text[]);
