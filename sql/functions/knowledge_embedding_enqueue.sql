-- Puts the entries whose text (question, title or answer: what is embedded) was written by the
-- statement on knowledge_embedding_queue, for the embeddings indexer's rounds to read instead of
-- every entry (migration 0042). One statement at a time: the triggers hand it transition tables,
-- so a bulk import costs one insert. An UPDATE that leaves the text as it was (a review date, a
-- re-import of the same answer) queues nothing.
CREATE OR REPLACE FUNCTION knowledge_embedding_enqueue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO knowledge_embedding_queue AS q (item_id)
        SELECT n.id
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE (n.question, n.title, n.answer) IS DISTINCT FROM (o.question, o.title, o.answer)
         ORDER BY n.id
        ON CONFLICT (item_id) DO UPDATE SET queued_at = clock_timestamp();
    ELSE
        INSERT INTO knowledge_embedding_queue AS q (item_id)
        SELECT n.id FROM new_rows n ORDER BY n.id
        ON CONFLICT (item_id) DO UPDATE SET queued_at = clock_timestamp();
    END IF;
    RETURN NULL;
END
$$;
