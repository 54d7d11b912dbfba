-- Puts the entries whose text (question, title or answer: what is embedded) was written by the
-- statement on knowledge_embedding_queue, for the embeddings indexer's rounds to read instead of
-- every entry (migration 0042). One statement at a time: the triggers hand it transition tables,
-- so a bulk import costs one insert. An UPDATE that leaves the text as it was (a review date, a
-- re-import of the same answer) queues nothing. The rows whose text changed are found by EXCEPT
-- ALL (sorted or hashed: NULLs compare equal there, as IS DISTINCT FROM has them), not by joining
-- the transition tables on id: those have no statistics or index, and plpgsql keeps the join's
-- first plan, a nested loop, so re-importing 10,000 entries took 6-15 s more (helper-81).
CREATE OR REPLACE FUNCTION knowledge_embedding_enqueue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO knowledge_embedding_queue AS q (item_id)
        SELECT c.id
          FROM (SELECT id, question, title, answer FROM new_rows
                EXCEPT ALL
                SELECT id, question, title, answer FROM old_rows) c
         ORDER BY c.id
        ON CONFLICT (item_id) DO UPDATE SET queued_at = clock_timestamp();
    ELSE
        INSERT INTO knowledge_embedding_queue AS q (item_id)
        SELECT n.id FROM new_rows n ORDER BY n.id
        ON CONFLICT (item_id) DO UPDATE SET queued_at = clock_timestamp();
    END IF;
    RETURN NULL;
END
$$;
