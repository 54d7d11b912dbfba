-- RFP search: one trigram index on title and description together, instead of one per column.
-- Forward-only: once landed, never edit this file; add a new numbered one.
--
-- `title ILIKE p OR description ILIKE p` over two indexes is a BitmapOr of two index scans, and
-- the planner prices the OR poorly: with custom plans it picked worse plans than the generic one
-- on 10,000 RFPs. One expression and one index give it one condition with its own statistics.

-- What RFP search matches against: title and description joined by U+001F (unit separator), a
-- control character no word contains. pg_trgm splits words at it, so the index holds exactly the
-- trigrams of the two fields. A term can match across the join only if it contains U+001F
-- itself; the search queries recheck the two fields in that case (sql/queries/rfps.sql).
CREATE FUNCTION rfp_search_text(title text, description text) RETURNS text
IMMUTABLE PARALLEL SAFE LANGUAGE sql AS $$
    SELECT title || E'\x1f' || coalesce(description, '')
$$;

CREATE INDEX rfps_search_trgm ON rfps USING gin (rfp_search_text(title, description) gin_trgm_ops);

-- Served only the two-column match, which no query makes any more.
DROP INDEX rfps_title_trgm;
DROP INDEX rfps_description_trgm;
