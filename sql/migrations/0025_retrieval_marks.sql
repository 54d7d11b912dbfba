-- knowledge_retrieve and knowledge_retrieve_nearest also return each candidate's `version`,
-- `review_by` and `stale` (past its review date), which an answer's references carry
-- (service/answering/staleness.py): a question no longer reads them in a statement of their own
-- after retrieval (one round trip of seven per question).
--
-- New result columns cannot be a CREATE OR REPLACE: both functions are dropped here and created
-- anew from sql/functions once the migrations are applied. A process of the previous version
-- re-prepares its statements on its own (retrieval runs outside a transaction) and reads the
-- columns it knows by name; a question it retrieves for in the moment between the two fails once
-- and is retried by its pipeline. Such a process cannot start again on this database (its own
-- definitions have the old columns): upgrade it rather than restart it.
DROP FUNCTION IF EXISTS knowledge_retrieve(text, text, integer, integer, integer, text[]);
DROP FUNCTION IF EXISTS knowledge_retrieve_nearest(
    text, text, text, integer, integer, integer, text[], text[], text[]
);
-- Dense retrieval's single statement of two versions back (replaced by knowledge_retrieve_nearest;
-- it called the knowledge_retrieve dropped above).
DROP FUNCTION IF EXISTS knowledge_retrieve_dense(
    text, text, integer, integer, integer, text, text, integer, integer, integer
);
