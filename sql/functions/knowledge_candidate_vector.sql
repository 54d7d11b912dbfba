-- A candidate's tsvector as retrieval reads it (service/answering/retrieval.py, BM25F and term
-- proximity): as text, reduced to the question's `lexemes` with their positions and weights, all
-- the ranking reads. knowledge_retrieve and knowledge_retrieve_nearest both return it, so the two
-- kinds of candidate cannot differ. (On long entries the whole vector cost more to print, send
-- and search than to cut here: ~3 ms of a ~17 ms retrieval.)
CREATE OR REPLACE FUNCTION knowledge_candidate_vector(v tsvector, lexemes text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- the vector less its lexemes that are not the question's
    SELECT ts_delete(v, tsvector_to_array(ts_delete(v, lexemes)))::text
$$;
