-- What RFP search matches against: title and description joined by U+001F (unit separator), a
-- control character no word contains. pg_trgm splits words at it, so the index holds exactly the
-- trigrams of the two fields. A term can match across the join only if it contains U+001F
-- itself; the search queries recheck the two fields in that case (sql/queries/rfps.sql).
--
-- The index rfps_search_trgm (migration 0012) stores this function's results: a changed body
-- needs a migration that rebuilds the index.
CREATE OR REPLACE FUNCTION rfp_search_text(title text, description text) RETURNS text
IMMUTABLE PARALLEL SAFE LANGUAGE sql AS $$
    SELECT title || E'\x1f' || coalesce(description, '')
$$;
