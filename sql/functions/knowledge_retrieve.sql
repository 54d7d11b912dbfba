-- The lexical candidates of a question, with everything the ranking in Python reads, in one
-- round trip (service/retrieval.py).
--
-- The first row describes the question (id NULL): its lexemes in order with their document
-- frequencies (`dfs`), the account's entry count (`items`), the vocabulary concepts it mentions
-- (`concepts`), {concept, lexeme} for each lexeme of a vocabulary phrase it contains (`covered`)
-- and {word as written, its lexeme} for its words (`words`). The other rows are the candidates:
-- entries containing the question's rarest lexemes (document frequencies summing to at most
-- `budget`; every lexeme when the account has at most `candidate_limit` entries) or a phrase of
-- a mentioned concept, at most `candidate_limit`, cut to the best `rerank` by a weighted ts_rank
-- over every lexeme; then the entries `also` (dense retrieval's) that are not among them. Each
-- carries its tsvector reduced to the question's lexemes (knowledge_candidate_vector), its field
-- lengths in distinct lexemes, the mentioned concepts it contains (`matched`) and, for the
-- references of an answer (service/answering/staleness.py), its `version`, its review date
-- (`review_by`) and whether that has passed (`stale`).
--
-- plan_cache_mode: after five runs a cached generic plan of the candidates' query (not knowing
-- the account or the tsquery) reads every entry of the account through the account index instead
-- of the few the GIN index finds, so that query is planned each time (well under a millisecond).
-- It is set for that query only and then put back as the caller had it: the small statements
-- before it keep their cached plans (planning them every time was ~0.25 ms of a retrieval).
--
-- enable_seqscan, enable_indexscan off: the candidates are the first `candidate_limit` matches in
-- the order the scan meets them, so the plan must not choose which. With a common word among the
-- lexemes the planner expected the limit to come soon and read the table in order (a sequential
-- scan testing every entry's tsvector: 6,000 of 10,000 read for 400 found, ~2 ms of the ~8 of a
-- retrieval, bench/questions.py), or walked an unrelated index in its order. Bitmap scans leave
-- it the GIN index, whose matches come in table order like a sequential scan's (the same
-- candidates), and the small lookups (terms, vocabulary, `also`) lose nothing measurable.
--
-- A change of its arguments or result columns cannot be a CREATE OR REPLACE: a migration drops
-- the old function first (as 0016 did), and statements prepared on the old one are re-prepared.
CREATE OR REPLACE FUNCTION knowledge_retrieve(
    p_account text, p_question text, budget integer, candidate_limit integer, rerank integer,
    also text[]
) RETURNS TABLE (
    id text, external_id text, title text, question text, answer text, source text, yes_no boolean,
    vector text, question_lexemes integer, answer_lexemes integer, matched text[],
    lexemes text[], dfs integer[], items integer, concepts text[], covered text[], words text[],
    version integer, review_by date, stale boolean
)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_indexscan = off
AS $$
#variable_conflict use_column
DECLARE
    question_text text := knowledge_text(p_question);  -- parsed as entries are
    question_vector tsvector := to_tsvector('english', question_text);
    n integer;
    all_lexemes text[];
    all_dfs integer[];
    phrase_concepts text[];  -- the mentioned concepts' phrases, as parallel arrays
    phrase_queries tsquery[];
    concept_names text[];  -- the mentioned concepts, each with its phrases as one query
    concept_queries tsquery[];
    mentioned text[];  -- the vocabulary phrases the question contains, and their concepts
    mentioned_phrases text[];
    candidate_query tsquery;
    ranking_query tsquery;
    caller_plan_cache_mode text := current_setting('plan_cache_mode');
BEGIN
    n := coalesce((SELECT s.items FROM knowledge_stats s WHERE s.account_id = p_account), 0);
    SELECT array_agg(l.lexeme ORDER BY l.lexeme), array_agg(coalesce(t.df, 0) ORDER BY l.lexeme)
      INTO all_lexemes, all_dfs
      FROM unnest(tsvector_to_array(question_vector)) AS l(lexeme)
      LEFT JOIN knowledge_terms t ON t.account_id = p_account AND t.lexeme = l.lexeme;
    SELECT array_agg(m.concept), array_agg(m.phrase)
      INTO mentioned, mentioned_phrases
      FROM knowledge_vocabulary m
     WHERE coalesce(m.account_id, '') IN ('', p_account)  -- knowledge_vocabulary_phrase's key
       AND numnode(m.phrase_query) > 0 AND question_vector @@ m.phrase_query;
    SELECT array_agg(v.concept ORDER BY v.concept, v.id), array_agg(v.phrase_query ORDER BY v.concept, v.id)
      INTO phrase_concepts, phrase_queries
      FROM knowledge_vocabulary v
     WHERE coalesce(v.account_id, '') IN ('', p_account) AND numnode(v.phrase_query) > 0
       AND v.concept = ANY(mentioned);

    -- A candidate's concepts are tested one query a concept, not one a phrase: ~0.2 ms less a
    -- question (bench/questions.py's, 10,000 entries), the same concepts.
    SELECT array_agg(q.concept ORDER BY q.concept), array_agg(q.query ORDER BY q.concept)
      INTO concept_names, concept_queries
      FROM (SELECT p.concept, string_agg('(' || p.query::text || ')', ' | ')::tsquery AS query
              FROM unnest(phrase_concepts, phrase_queries) AS p(concept, query)
             GROUP BY p.concept) AS q;

    RETURN QUERY SELECT NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
                        NULL::boolean, NULL::text, NULL::integer, NULL::integer, NULL::text[],
                        all_lexemes, all_dfs, n,
                        ARRAY(SELECT DISTINCT c FROM unnest(phrase_concepts) AS c ORDER BY c),
                        -- {concept, lexeme} of each lexeme of those phrases
                        ARRAY(SELECT DISTINCT ARRAY[p.concept, l.lexeme]
                                FROM unnest(mentioned, mentioned_phrases) AS p(concept, phrase),
                                     unnest(tsvector_to_array(to_tsvector('english',
                                                                          knowledge_text(p.phrase))))
                                       AS l(lexeme)),
                        -- {word as written, its lexeme}, for the words the english configuration
                        -- stems and for dotted abbreviations ("e.g.", a file name to the parser,
                        -- kept as written); numbers and the like keep their whole weight.
                        -- service/english.py weighs words. (ts_debug says the same at four times
                        -- the cost.)
                        ARRAY(SELECT DISTINCT ARRAY[p.token, l.lexeme]
                                FROM ts_parse('default', question_text) AS p
                                JOIN ts_token_type('default') AS t ON t.tokid = p.tokid
                                 AND t.alias IN ('asciiword', 'word', 'asciihword', 'hword',
                                                 'hword_asciipart', 'hword_part', 'file'),
                                     unnest(CASE t.alias WHEN 'file' THEN ARRAY[lower(p.token)]
                                                 ELSE ts_lexize('english_stem', p.token) END)
                                       AS l(lexeme)),
                        NULL::integer, NULL::date, NULL::boolean;
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

    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    RETURN QUERY
    WITH cand AS MATERIALIZED (
        SELECT k.id, k.external_id, k.title, k.question, k.answer, k.source, k.yes_no, k.search_vector,
               k.version, k.review_by
          FROM knowledge_items k
         WHERE k.account_id = p_account AND k.search_vector @@ candidate_query
         LIMIT candidate_limit
    ), best AS (
        SELECT c.*
          FROM cand c
         -- ts_rank only when there are more than `rerank` to cut: otherwise every candidate is
         -- kept, and their order does not matter (retrieval.py sorts them). That saves ~0.2 ms
         -- of a ~3 ms statement for such a question (half of them in 1,000 bench entries).
         ORDER BY CASE WHEN (SELECT count(*) FROM cand) > rerank
                       THEN ts_rank('{0.1, 0.2, 0.4, 1.0}', c.search_vector, ranking_query) END DESC,
                  coalesce(c.external_id, ''), c.id  -- ties as retrieval.py orders them
         LIMIT rerank
    ), chosen AS (
        SELECT * FROM best
        UNION ALL
        SELECT k.id, k.external_id, k.title, k.question, k.answer, k.source, k.yes_no, k.search_vector,
               k.version, k.review_by
          FROM knowledge_items k
         WHERE k.account_id = p_account AND k.id = ANY(also)
           AND k.id NOT IN (SELECT b.id FROM best b)
    )
    SELECT c.id, c.external_id, c.title, c.question, c.answer, c.source, c.yes_no,
           knowledge_candidate_vector(c.search_vector, all_lexemes),
           length(ts_filter(c.search_vector, '{a,b}')), length(ts_filter(c.search_vector, '{c,d}')),
           ARRAY(SELECT q.concept
                   FROM unnest(concept_names, concept_queries) AS q(concept, query)
                  WHERE c.search_vector @@ q.query),
           NULL::text[], NULL::integer[], NULL::integer, NULL::text[], NULL::text[], NULL::text[],
           c.version, c.review_by, knowledge_review_passed(c.review_by)
      FROM chosen c;
    -- An error needs no such care: it undoes the setting with the (sub)transaction.
    PERFORM set_config('plan_cache_mode', caller_plan_cache_mode, true);
END
$$;
