-- Text as retrieval parses it: a slash between two word characters read as a space, because
-- PostgreSQL's parser makes "Business Continuity/Disaster Recovery" or "upgrade/update" one
-- file-path token and neither word could be found. A URL's "://" stays, so a link is still a URL.
-- Entries, questions and vocabulary phrases are parsed alike (knowledge_retrieve).
--
-- Stored results depend on it (knowledge_items.search_vector, knowledge_vocabulary.phrase_query
-- and the knowledge_items_search index, migration 0016): a changed body needs a migration that
-- recomputes them, as 0016 did.
CREATE OR REPLACE FUNCTION knowledge_text(body text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT regexp_replace(body, '(\w)/(?=\w)', '\1 ', 'g') $$;
