-- RFP workflow: items linked to the question answering them and to the knowledge-base entry an
-- approved answer was saved as; the RFP state gains processing_items.

-- The question (q_…) created by POST /api/v1/rfps/{id}/answer for this item. While the item is
-- `pending` with a question set, answering is under way ("in flight"); reopening clears it.
-- No foreign key here: the questions table belongs to another migration.
ALTER TABLE rfp_items ADD COLUMN question_id text;
-- The knowledge-base entry this item's approved answer was saved as, if any.
ALTER TABLE rfp_items ADD COLUMN knowledge_item_id text REFERENCES knowledge_items ON DELETE SET NULL;
-- Finding the item a completed question belongs to.
CREATE INDEX rfp_items_question ON rfp_items (question_id) WHERE question_id IS NOT NULL;

-- The same columns as before (the RFP queries select from it), plus processing_items at the end.
-- State, first match wins:
--   new               no (non-discarded) items
--   processing_items  some item has a question in flight
--   approved          every non-discarded item is approved
--   needs_input       some item the engine could not answer confidently
--   items_generated   otherwise: items waiting to be answered or reviewed
CREATE OR REPLACE VIEW rfp_overview AS
SELECT r.*,
       s.total_items,
       s.needs_input_items,
       s.auto_answered_items,
       s.approved_items,
       s.pending_items,
       CASE WHEN s.total_items = 0 THEN 0
            ELSE (s.approved_items * 100 / s.total_items)::integer
       END AS overall_completion_percentage,
       CASE WHEN s.total_items = 0 THEN 'new'
            WHEN s.processing_items > 0 THEN 'processing_items'
            WHEN s.approved_items = s.total_items THEN 'approved'
            WHEN s.needs_input_items > 0 THEN 'needs_input'
            ELSE 'items_generated'
       END AS state,
       s.processing_items
  FROM rfps r
  CROSS JOIN LATERAL (
      SELECT count(*) FILTER (WHERE i.state <> 'discarded')::integer     AS total_items,
             count(*) FILTER (WHERE i.state = 'needs_input')::integer    AS needs_input_items,
             count(*) FILTER (WHERE i.state = 'auto_answered')::integer  AS auto_answered_items,
             count(*) FILTER (WHERE i.state = 'approved')::integer       AS approved_items,
             count(*) FILTER (WHERE i.state = 'pending')::integer        AS pending_items,
             count(*) FILTER (WHERE i.state = 'pending' AND i.question_id IS NOT NULL)::integer
                                                                         AS processing_items
        FROM rfp_items i
       WHERE i.rfp_id = r.id
  ) s;
