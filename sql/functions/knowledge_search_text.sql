-- What knowledge-base search (the web app's /kb) matches against: question, answer and title
-- joined by U+001F (unit separator), a control character no word contains. pg_trgm splits words
-- at it, so the index holds exactly the trigrams of the three fields. A term can match across a
-- join only if it contains U+001F itself; the search queries recheck the fields one by one in
-- that case (sql/queries/web_app.sql).
--
-- The index knowledge_items_search_trgm (migration 0029) stores this function's results: a
-- changed body needs a migration that rebuilds the index.
CREATE OR REPLACE FUNCTION knowledge_search_text(question text, answer text, title text)
RETURNS text IMMUTABLE PARALLEL SAFE LANGUAGE sql AS $$
    SELECT coalesce(question, '') || E'\x1f' || coalesce(answer, '') || E'\x1f' || coalesce(title, '')
$$;
