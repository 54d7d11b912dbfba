-- knowledge_retrieve with dense retrieval, in one statement (service/answering/retrieval.py): the
-- `nearest` entries of the account nearest in meaning to the question's vector `p_vector` (model
-- `p_model`, `dims` dimensions, pgvector's text form) join the lexical candidates as
-- knowledge_retrieve's `also`, and every row returned carries its entry's cosine similarity to the
-- question (`similarity`, NULL on the question's row and for an entry not embedded yet). The
-- rows are knowledge_retrieve's, in its order (the question's first).
--
-- One round trip instead of six (BEGIN, SET, the nearest, knowledge_retrieve, the candidates'
-- similarities, COMMIT: bench/retrieval.py), and the question's vector parsed once.
--
-- HNSW returns at most hnsw.ef_search rows (default 40) before the account filter; iterative
-- scans (pgvector 0.8 and later) go on until `nearest` of this account's entries are found. Both
-- settings are set for the nearest-entries query only and then put back as the caller had them,
-- so they never leak into the caller's transaction. They are not the function's own SET clauses:
-- PostgreSQL checks those when the function is created, and a role that is not a superuser may
-- not attach a setting of an extension not loaded yet in its connection (every start re-creates
-- the functions), so the service would not start on a managed server.
--
CREATE OR REPLACE FUNCTION knowledge_retrieve_dense(
    p_account text, p_question text, budget integer, candidate_limit integer, rerank integer,
    p_model text, p_vector text, dims integer, nearest integer, ef_search integer
) RETURNS TABLE (
    id text, external_id text, title text, question text, answer text, source text, yes_no boolean,
    vector text, question_lexemes integer, answer_lexemes integer, matched text[],
    lexemes text[], dfs integer[], items integer, concepts text[], covered text[], words text[],
    similarity double precision
)
LANGUAGE plpgsql VOLATILE  -- it changes settings, for the duration of one query
SET plan_cache_mode = force_custom_plan
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
    RETURN QUERY EXECUTE format(
        $q$SELECT r.id, r.external_id, r.title, r.question, r.answer, r.source, r.yes_no, r.vector,
                  r.question_lexemes, r.answer_lexemes, r.matched, r.lexemes, r.dfs, r.items,
                  r.concepts, r.covered, r.words,
                  (SELECT 1 - (e.embedding::vector(%1$s) <=> $7::vector(%1$s))
                     FROM knowledge_embeddings e
                    WHERE e.item_id = r.id AND e.model = $8 AND e.dimensions = %1$s)
             FROM knowledge_retrieve($1, $2, $3, $4, $5, $6) WITH ORDINALITY AS r
            ORDER BY r.ordinality$q$, dims::integer)
      USING p_account, p_question, budget, candidate_limit, rerank, coalesce(near, '{}'::text[]),
            p_vector, p_model;
END
$$;
