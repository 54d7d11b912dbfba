-- Knowledge-base search (the web app's /kb): one trigram index on question, answer and title
-- together, as 0012 made for RFP search. Without it every search matched every entry of the
-- account, whole answers included: a term found nowhere took 138 ms at 5,100 entries and passed
-- the search time limit (service/domain/rfps.py SEARCH_TIMEOUT_MS) at 50,000.
-- Forward-only: once landed, never edit this file; add a new numbered one.

-- What knowledge-base search matches against: the three fields joined by U+001F (unit
-- separator), a control character no word contains. pg_trgm splits words at it, so the index
-- holds exactly the trigrams of the fields; a term holding U+001F itself could match across a
-- join, and the queries then recheck the fields one by one (sql/queries/web_app.sql).
CREATE OR REPLACE FUNCTION knowledge_search_text(question text, answer text, title text)
RETURNS text IMMUTABLE PARALLEL SAFE LANGUAGE sql AS $$
    SELECT coalesce(question, '') || E'\x1f' || coalesce(answer, '') || E'\x1f' || coalesce(title, '')
$$;

-- A plain CREATE INDEX (migrations run in a transaction): writes to knowledge_items wait while
-- it is built. On a large library, build it first with CREATE INDEX CONCURRENTLY under this name
-- (after creating the function above); IF NOT EXISTS then skips it here.
CREATE INDEX IF NOT EXISTS knowledge_items_search_trgm ON knowledge_items
    USING gin (knowledge_search_text(question, answer, title) gin_trgm_ops);
