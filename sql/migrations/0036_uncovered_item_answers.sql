-- An RFP item whose question nothing answered (sufficient_context not true: "The knowledge base does
-- not cover this question, so no answer was drafted…", or an engine failure's sentence) took that
-- sentence as its answer, which a reviewer could approve and every export wrote out to the
-- customer. Since this release such an item gets no answer (service/answering/pipeline.py
-- item_answer); this clears the sentence from the items answered before, where it still stands
-- unchanged and unreviewed (state needs_input, the answer exactly its question's). An item a
-- reviewer edited, approved or discarded keeps what it has.
-- Forward-only: once landed, never edit this file; add a new numbered one.
UPDATE rfp_items i
   SET answer = NULL
  FROM questions q
 WHERE q.id = i.question_id
   AND i.state = 'needs_input'
   AND q.sufficient_context IS NOT TRUE
   AND i.answer = q.answer;

COMMENT ON COLUMN rfp_items.answer IS
    'The answer to give: the drafted answer of its question (questions.answer) when that question found the knowledge base answers it (sufficient_context), else null until a member writes one; what a review edits and approves and every export writes.';
