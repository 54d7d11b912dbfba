-- RFP items by the knowledge-base entry they were saved as (rfp_items.knowledge_item_id). Nothing
-- indexed it, so every deletion of an entry (its foreign key sets the items' reference to null)
-- and every merge (repoint_rfp_items) read every RFP item of every account.
-- Forward-only: once landed, never edit this file; add a new numbered one.

-- A plain CREATE INDEX (migrations run in a transaction): writes to rfp_items wait while it is
-- built. With many items, build it first with CREATE INDEX CONCURRENTLY under this name; IF NOT
-- EXISTS then skips it here.
CREATE INDEX IF NOT EXISTS rfp_items_saved_as ON rfp_items (knowledge_item_id)
    WHERE knowledge_item_id IS NOT NULL;
