-- An audit event is stamped with the time it is written (clock_timestamp()), no longer with its
-- transaction's start (now()). `audit export` takes the events stamped before
-- writes_settled_before() and says so, for the next export to go on from there: an event whose
-- transaction began before an export and wrote its first row only after it was stamped before
-- that time, committed after the export, and missed by every later one.
-- Forward-only: once landed, never edit this file; add a new numbered one.
ALTER TABLE audit_events ALTER COLUMN occurred_at SET DEFAULT clock_timestamp();
COMMENT ON COLUMN audit_events.occurred_at IS
    'When the event was written (clock_timestamp(): within its transaction, not at its start)';
