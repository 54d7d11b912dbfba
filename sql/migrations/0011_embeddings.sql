-- Dense retrieval (service/embeddings.py): one vector per knowledge entry and embedding model.
--
-- pgvector ships with the embedded PostgreSQL. On an external server without it (or without the
-- right to create it) this migration only leaves a notice: the service runs lexical-only, and a
-- configured embedding backend refuses to start with a message saying why.
DO $migration$
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS vector;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'pgvector is not available (%): dense retrieval stays off', SQLERRM;
        RETURN;
    END;
    -- EXECUTE: the type `vector` did not exist when this block was parsed.
    EXECUTE $sql$
        CREATE TABLE knowledge_embeddings (
            item_id      text NOT NULL REFERENCES knowledge_items ON DELETE CASCADE,
            model        text NOT NULL,        -- the embedding model's name (config embeddings.model)
            account_id   text NOT NULL,        -- the entry's, so a search never joins to find it
            content_hash text NOT NULL,        -- md5 of the text embedded: a changed entry is redone
            dimensions   integer NOT NULL,
            embedding    vector NOT NULL,
            PRIMARY KEY (item_id, model)
        )
    $sql$;
    EXECUTE 'CREATE INDEX knowledge_embeddings_account ON knowledge_embeddings (account_id, model)';
    -- HNSW needs a fixed dimension: one partial index per dimension, over a cast, which queries
    -- repeat. all-MiniLM-L6-v2 has 384; other sizes get theirs when the indexer first meets them.
    EXECUTE $sql$
        CREATE INDEX knowledge_embeddings_hnsw_384 ON knowledge_embeddings
            USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE dimensions = 384
    $sql$;
END
$migration$;
