-- Retrieval in one statement (service/retrieval.py), and a bounded GIN pending list.

-- After a bulk import the new entries' lexemes sit in the GIN index's pending list until
-- autovacuum (or the list's limit) merges them, and every search reads the whole list: up to the
-- default 4 MB. Imports now merge it themselves (knowledge.merge_pending_index); the smaller limit
-- bounds what any other writer (single entries, reviews, a bulk load by hand) can leave behind.
ALTER INDEX knowledge_items_search SET (gin_pending_list_limit = 256);  -- kB

-- A questionnaire's own Yes/No for the entry (the CSV's `yes_no` column): true Yes, false No,
-- NULL when it gave none. An answer to a yes/no question is led by it.
ALTER TABLE knowledge_items ADD COLUMN yes_no boolean;

-- The lexical candidates of a question, with everything the ranking in Python reads, in one
-- round trip instead of four (term statistics, vocabulary, candidates, concept matches).
--
-- The first row describes the question (id NULL): its lexemes in order with their document
-- frequencies (`dfs`), the account's entry count (`items`) and the vocabulary concepts it mentions
-- (`concepts`). The other rows are the candidates: entries containing the question's rarest
-- lexemes (document frequencies summing to at most `budget`; every lexeme when the account has at
-- most `candidate_limit` entries) or a phrase of a mentioned concept, at most `candidate_limit`,
-- cut to the best `rerank` by a weighted ts_rank over every lexeme; then the entries `also` (dense
-- retrieval's) that are not among them. Each carries its tsvector as text, its field lengths in
-- distinct lexemes and the mentioned concepts it contains (`matched`).
--
-- plan_cache_mode: after five runs a cached generic plan (not knowing the account or the
-- tsquery) reads every entry of the account through the account index instead of the few the GIN
-- index finds; planning each time costs well under a millisecond.
CREATE FUNCTION knowledge_retrieve(
    p_account text, p_question text, budget integer, candidate_limit integer, rerank integer,
    also text[]
) RETURNS TABLE (
    id text, external_id text, title text, question text, answer text, source text, yes_no boolean,
    vector text, question_lexemes integer, answer_lexemes integer, matched text[],
    lexemes text[], dfs integer[], items integer, concepts text[]
)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    question_vector tsvector := to_tsvector('english', p_question);
    n integer;
    all_lexemes text[];
    all_dfs integer[];
    phrase_concepts text[];  -- the mentioned concepts' phrases, as parallel arrays
    phrase_queries tsquery[];
    candidate_query tsquery;
    ranking_query tsquery;
BEGIN
    n := coalesce((SELECT s.items FROM knowledge_stats s WHERE s.account_id = p_account), 0);
    SELECT array_agg(l.lexeme ORDER BY l.lexeme), array_agg(coalesce(t.df, 0) ORDER BY l.lexeme)
      INTO all_lexemes, all_dfs
      FROM unnest(tsvector_to_array(question_vector)) AS l(lexeme)
      LEFT JOIN knowledge_terms t ON t.account_id = p_account AND t.lexeme = l.lexeme;
    SELECT array_agg(v.concept ORDER BY v.concept, v.id), array_agg(v.phrase_query ORDER BY v.concept, v.id)
      INTO phrase_concepts, phrase_queries
      FROM knowledge_vocabulary v
     WHERE (v.account_id IS NULL OR v.account_id = p_account) AND numnode(v.phrase_query) > 0
       AND v.concept IN (SELECT m.concept FROM knowledge_vocabulary m
                          WHERE (m.account_id IS NULL OR m.account_id = p_account)
                            AND numnode(m.phrase_query) > 0 AND question_vector @@ m.phrase_query);

    RETURN QUERY SELECT NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
                        NULL::boolean, NULL::text, NULL::integer, NULL::integer, NULL::text[],
                        all_lexemes, all_dfs, n,
                        ARRAY(SELECT DISTINCT c FROM unnest(phrase_concepts) AS c ORDER BY c);
    IF n = 0 OR all_lexemes IS NULL THEN
        RETURN;
    END IF;

    -- Lexemes are quoted and phrase queries are tsquery text already, so any question is safe.
    SELECT (SELECT string_agg(part, ' | ')
              FROM (SELECT quote_literal(s.lexeme)
                      FROM (SELECT l.lexeme, l.df,
                                   sum(l.df) OVER (ORDER BY l.df, l.lexeme) AS running,
                                   row_number() OVER (ORDER BY l.df, l.lexeme) AS rarity
                              FROM unnest(all_lexemes, all_dfs) AS l(lexeme, df)
                             WHERE l.df > 0) AS s
                     WHERE n <= candidate_limit OR s.rarity = 1 OR s.running <= budget
                    UNION ALL
                    SELECT '(' || p::text || ')' FROM unnest(phrase_queries) AS p) AS a(part)
           )::tsquery,
           (SELECT string_agg(part, ' | ')
              FROM (SELECT quote_literal(l.lexeme)
                      FROM unnest(all_lexemes, all_dfs) AS l(lexeme, df) WHERE l.df > 0
                    UNION ALL
                    SELECT '(' || p::text || ')' FROM unnest(phrase_queries) AS p) AS a(part)
           )::tsquery
      INTO candidate_query, ranking_query;

    RETURN QUERY
    WITH cand AS MATERIALIZED (
        SELECT k.id, k.external_id, k.title, k.question, k.answer, k.source, k.yes_no, k.search_vector
          FROM knowledge_items k
         WHERE k.account_id = p_account AND k.search_vector @@ candidate_query
         LIMIT candidate_limit
    ), best AS (
        SELECT c.*
          FROM cand c
         ORDER BY ts_rank('{0.1, 0.2, 0.4, 1.0}', c.search_vector, ranking_query) DESC, c.id
         LIMIT rerank
    ), chosen AS (
        SELECT * FROM best
        UNION ALL
        SELECT k.id, k.external_id, k.title, k.question, k.answer, k.source, k.yes_no, k.search_vector
          FROM knowledge_items k
         WHERE k.account_id = p_account AND k.id = ANY(also)
           AND k.id NOT IN (SELECT b.id FROM best b)
    )
    SELECT c.id, c.external_id, c.title, c.question, c.answer, c.source, c.yes_no, c.search_vector::text,
           length(ts_filter(c.search_vector, '{a,b}')), length(ts_filter(c.search_vector, '{c,d}')),
           ARRAY(SELECT DISTINCT p.concept
                   FROM unnest(phrase_concepts, phrase_queries) AS p(concept, query)
                  WHERE c.search_vector @@ p.query),
           NULL::text[], NULL::integer[], NULL::integer, NULL::text[]
      FROM chosen c;
END
$$;

-- Learning from review (service/review.py): the question a review saved an entry for, so that
-- reviewing it again (or reviewing the same question asked again) updates that entry instead of
-- adding a duplicate.
ALTER TABLE knowledge_items ADD COLUMN reviewed_question text REFERENCES questions ON DELETE SET NULL;
CREATE UNIQUE INDEX knowledge_items_reviewed_question ON knowledge_items (account_id, reviewed_question)
    WHERE reviewed_question IS NOT NULL;
CREATE INDEX knowledge_items_reviewed_text ON knowledge_items (account_id, lower(question))
    WHERE reviewed_question IS NOT NULL;

-- The embeddings indexer's claims (service/embeddings.py): an entry being embedded by one process
-- is not embedded again by another meanwhile. A claim lapses at `claimed_until`, so the entries of
-- a process that died are taken up by another.
CREATE TABLE knowledge_embedding_claims (
    item_id       text NOT NULL REFERENCES knowledge_items ON DELETE CASCADE,
    model         text NOT NULL,
    claimed_until timestamptz NOT NULL,
    PRIMARY KEY (item_id, model)
);
