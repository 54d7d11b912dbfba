-- The items of an RFP still being answered, found without reading its answered ones. Each item's
-- completion asks whether any other is still in flight (the last one says "rfp.answered"): that
-- read every item of the RFP, so an "answer all" of n items read n² rows (35 s of counting at
-- 20,000 items). Answered items leave this index, so the question reads the few left in flight.
-- Forward-only: once landed, never edit this file; add a new numbered one.

-- A plain CREATE INDEX (migrations run in a transaction): writes to rfp_items wait while it is
-- built. With many items, build it first with CREATE INDEX CONCURRENTLY under this name; IF NOT
-- EXISTS then skips it here.
CREATE INDEX IF NOT EXISTS rfp_items_in_flight ON rfp_items (rfp_id, position)
    WHERE state = 'pending' AND question_id IS NOT NULL;
