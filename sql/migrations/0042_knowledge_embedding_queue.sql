-- The entries the embeddings indexer has still to look at. Each round (every embeddings.poll_seconds
-- in every process, and after every write to the knowledge base) looked for entries without a
-- current vector by joining every entry of every account with its vector and hashing each entry's
-- text: 450-560 ms of the database's CPU a round at 100,000 entries, all of them embedded. Writes to
-- an entry's text now queue it here (knowledge_embedding_enqueue, sql/functions/), and a round reads
-- the queue; the whole scan stays for a process's start and a few minutes apart (a change of model,
-- and what a queue row removed by another process's model left behind).
-- Forward-only: once landed, never edit this file; add a new numbered one.

CREATE TABLE knowledge_embedding_queue (
    item_id   text PRIMARY KEY REFERENCES knowledge_items ON DELETE CASCADE,
    queued_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE knowledge_embedding_queue IS
    'Entries whose text was written and that the embeddings indexer has not yet embedded since: its rounds read these rather than every entry.';
COMMENT ON COLUMN knowledge_embedding_queue.queued_at IS
    'When the entry''s text was last written (the indexer takes the oldest first).';

-- The triggers' function is sql/functions/knowledge_embedding_enqueue.sql, which `migrate`
-- creates right after the migrations, in place of this placeholder (CREATE TRIGGER needs one).
CREATE OR REPLACE FUNCTION knowledge_embedding_enqueue() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;

CREATE TRIGGER knowledge_embedding_enqueue_insert AFTER INSERT ON knowledge_items
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_embedding_enqueue();
CREATE TRIGGER knowledge_embedding_enqueue_update AFTER UPDATE ON knowledge_items
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_embedding_enqueue();
