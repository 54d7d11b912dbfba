-- A finished duplicate run stores as started_at the time the entries it compared were current to
-- (library.sql start_duplicate_run's `seen`), which an uncommitted write can hold before the run's
-- claim; entries written after it make the report outdated. Only the comment an operator reads
-- changes.
-- Forward-only: once landed, never edit this file; add a new numbered one.
COMMENT ON COLUMN knowledge_duplicate_runs.started_at IS
    'While a run is under way, when it was claimed (one claimed under a minute ago that has not finished blocks another); once it finished, the time the entries it compared were current to (at most its claim: before the oldest uncommitted write then): an entry updated after it makes the report outdated.';
