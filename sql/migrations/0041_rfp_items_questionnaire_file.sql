-- RFP items by the questionnaire file they were imported from (rfp_items.questionnaire_file_id).
-- Nothing indexed it, so writing the answers back into a kept questionnaire (writeback.sql: the
-- latest file of an RFP, its answers' length, its items in file order) read every RFP item of
-- every account, three times per export.
-- Forward-only: once landed, never edit this file; add a new numbered one.

-- A plain CREATE INDEX (migrations run in a transaction): writes to rfp_items wait while it is
-- built. With many items, build it first with CREATE INDEX CONCURRENTLY under this name; IF NOT
-- EXISTS then skips it here.
CREATE INDEX IF NOT EXISTS rfp_items_questionnaire_file ON rfp_items (questionnaire_file_id, position)
    WHERE questionnaire_file_id IS NOT NULL;
