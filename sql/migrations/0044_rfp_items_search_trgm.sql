-- An RFP's item search (GET /api/v1/rfps/{id}/rfp_items?query=, the RFP page's search box and its
-- "Approve all" band): `question ILIKE p OR answer ILIKE p` over the RFP's items had no index, so
-- every search read and lower-cased every question and answer of the RFP (at most 20,000 items of
-- up to 100,000 characters): a rare term took 0.5 s at 20,000 items of ~1,300 characters, past
-- the search's 250 ms limit; 2 ms with this index (bench/item_search.py, BENCHMARKS.md).
-- Forward-only: once landed, never edit this file; add a new numbered one.
--
-- One GIN index on the RFP and both texts (btree_gin gives text its `=` in a GIN index). With the
-- RFP in the index, each trigram's item list is cut to the RFP's items inside the index: the
-- rows rechecked are at most the RFP's. A trigram index without it (tried: bitmap AND with the
-- rfp_id btree when the planner chose to) let the planner read a term's trigrams across every
-- account's items alone when it guessed the term rare (one made of common trigrams, 64 matches:
-- 1.7 s against 0.66 s without any index, at 120,000 items). The two columns stay apart, not
-- joined into one expression as rfps_search_trgm (0012) does: the match rechecked is then the
-- query's own `question ILIKE p OR answer ILIKE p`, which skips the answer when the question
-- holds the term (joined: a common term took 5 times as long), and a term shorter than a
-- trigram, which no trigram index serves, is planned and run as before.
-- What it costs a write of an answer (non-HOT, every trigram entered): +0.2 ms at 1,000
-- characters, +1.3 ms at 10,000, +29 ms at 100,000 (medians; more when the write flushes the
-- GIN pending list, as row-by-row writes to rfps_search_trgm and knowledge_items_search_trgm do).
-- btree_gin is in contrib as pg_trgm is, and trusted: the database owner may create it.
CREATE EXTENSION IF NOT EXISTS btree_gin;

-- A plain CREATE INDEX (migrations run in a transaction): writes to rfp_items wait while it is
-- built. With many items, build it first with CREATE INDEX CONCURRENTLY under this name (after
-- creating the extension); IF NOT EXISTS then skips it here.
CREATE INDEX IF NOT EXISTS rfp_items_search_trgm ON rfp_items
    USING gin (rfp_id, question gin_trgm_ops, answer gin_trgm_ops);
