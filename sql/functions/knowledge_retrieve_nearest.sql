-- Dense retrieval's part (service/answering/retrieval.py), after knowledge_retrieve has found
-- the lexical candidates: the `nearest` entries of the account nearest in meaning to the
-- question's vector `p_vector` (model `p_model`, `dims` dimensions, pgvector's text form), and
-- each entry's cosine similarity to the question. Two statements rather than one so that the
-- lexical one runs while the question is being embedded (a retrieval waits for the longer of the
-- two, not for both: ~2-3 ms of a ~17 ms retrieval).
--
-- Rows:
-- - one per entry of `candidates` (the lexical candidates' ids) and of the nearest: `joins`
--   false, only `id` and `similarity` (NULL for an entry not embedded yet);
-- - one per nearest entry that is not among the candidates: `joins` true, with the columns a
--   candidate of knowledge_retrieve has (knowledge_candidate_vector of the question's `lexemes`, the
--   field lengths, the concepts of `concepts` whose phrases it contains, its version, review
--   date and staleness).
--
-- HNSW returns at most hnsw.ef_search rows (default 40) before the account filter; iterative
-- scans (pgvector 0.8 and later) go on until `nearest` of this account's entries are found. Both
-- settings are set for the nearest-entries query only and then put back as the caller had them,
-- so they never leak into the caller's transaction. They are not the function's own SET clauses:
-- PostgreSQL checks those when the function is created, and a role that is not a superuser may
-- not attach a setting of an extension not loaded yet in its connection (`migrate` re-creates
-- the functions), so the service would not migrate on a managed server.
CREATE OR REPLACE FUNCTION knowledge_retrieve_nearest(
    p_account text, p_model text, p_vector text, dims integer, nearest integer, ef_search integer,
    candidates text[], lexemes text[], concepts text[]
) RETURNS TABLE (
    joins boolean, id text, external_id text, title text, question text, answer text, source text,
    yes_no boolean, vector text, question_lexemes integer, answer_lexemes integer, matched text[],
    similarity double precision, version integer, review_by date, stale boolean
)
LANGUAGE plpgsql VOLATILE  -- it changes settings, for the duration of one query
AS $$
DECLARE
    near text[];
    caller_ef_search text;
    caller_iterative_scan text;
BEGIN
    EXECUTE 'SELECT NULL::vector(1)';  -- loads pgvector, so that its settings exist here
    caller_ef_search := current_setting('hnsw.ef_search');
    caller_iterative_scan := current_setting('hnsw.iterative_scan', true);  -- NULL before 0.8
    PERFORM set_config('hnsw.ef_search', ef_search::text, true);
    IF caller_iterative_scan IS NOT NULL THEN
        PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
    END IF;
    EXECUTE format(
        $q$SELECT array_agg(n.item_id)
             FROM (SELECT e.item_id
                     FROM knowledge_embeddings e
                    WHERE e.account_id = $1 AND e.model = $2 AND e.dimensions = %1$s
                    ORDER BY e.embedding::vector(%1$s) <=> $3::vector(%1$s)
                    LIMIT $4) AS n$q$, dims::integer)
      INTO near USING p_account, p_model, p_vector, nearest;
    -- An error needs no such care: it undoes the settings with the (sub)transaction.
    PERFORM set_config('hnsw.ef_search', caller_ef_search, true);
    IF caller_iterative_scan IS NOT NULL THEN
        PERFORM set_config('hnsw.iterative_scan', caller_iterative_scan, true);
    END IF;
    near := coalesce(near, '{}'::text[]);
    -- A static statement, so that its plan is cached like any other (planning it with every call
    -- was ~0.3 ms of CPU). The question's vector is parsed once, in an InitPlan: a generic plan
    -- would cast the parameter again for every row. No vector(dims) cast is needed here, unlike
    -- the HNSW query, whose index is over one: `dimensions = dims` keeps the sizes equal.
    RETURN QUERY
    WITH concept_queries AS MATERIALIZED (  -- each concept's phrases as one query
        SELECT v.concept, string_agg('(' || v.phrase_query::text || ')', ' | ')::tsquery AS query
          FROM knowledge_vocabulary v
         WHERE coalesce(v.account_id, '') IN ('', p_account) AND numnode(v.phrase_query) > 0
           AND v.concept = ANY(concepts)
         GROUP BY v.concept
    )
    SELECT false, i.id, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
           NULL::boolean, NULL::text, NULL::integer, NULL::integer, NULL::text[],
           (SELECT 1 - (e.embedding <=> (SELECT p_vector::vector))
              FROM knowledge_embeddings e
             WHERE e.item_id = i.id AND e.model = p_model AND e.dimensions = dims),
           NULL::integer, NULL::date, NULL::boolean
      FROM (SELECT unnest(candidates) UNION SELECT unnest(near)) AS i(id)
    UNION ALL
    SELECT true, k.id, k.external_id, k.title, k.question, k.answer, k.source, k.yes_no,
           knowledge_candidate_vector(k.search_vector, lexemes),
           length(ts_filter(k.search_vector, '{a,b}')), length(ts_filter(k.search_vector, '{c,d}')),
           ARRAY(SELECT q.concept FROM concept_queries q WHERE k.search_vector @@ q.query
                  ORDER BY q.concept),
           NULL::double precision,
           k.version, k.review_by, knowledge_review_passed(k.review_by)
      -- Found by id alone (OFFSET 0 keeps the account's condition out of the scan): a cached
      -- generic plan, not knowing the account, may otherwise take an index that starts with
      -- account_id, as it expects few entries an account when there are many small accounts,
      -- and then read every entry of a large one.
      FROM (SELECT j.* FROM knowledge_items j WHERE j.id = ANY(near) OFFSET 0) AS k
     WHERE k.account_id = p_account AND NOT k.id = ANY(candidates);
END
$$;
