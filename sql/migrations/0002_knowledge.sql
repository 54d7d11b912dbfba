-- Knowledge base: the entries questions are answered from.

CREATE TABLE knowledge_items (
    id          text PRIMARY KEY,                         -- kb_…
    account_id  text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    question    text,                                     -- the question this entry answers, if known
    answer      text NOT NULL CHECK (btrim(answer) <> ''),-- the answer, or free-text content
    title       text,
    tags        text[] NOT NULL DEFAULT '{}',
    source      text,                                     -- where it came from (document, URL …)
    external_id text,                                     -- the importer's own id (CSV `id` column)
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- Question text weighs more than title, title more than answer.
    search_vector tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', coalesce(question, '')), 'A') ||
        setweight(to_tsvector('english', coalesce(title, '')), 'B') ||
        setweight(to_tsvector('english', answer), 'C')
    ) STORED
);
CREATE INDEX knowledge_items_account_newest ON knowledge_items (account_id, created_at DESC, id DESC);
CREATE INDEX knowledge_items_search ON knowledge_items USING gin (search_vector);
CREATE UNIQUE INDEX knowledge_items_external_id ON knowledge_items (account_id, external_id)
    WHERE external_id IS NOT NULL;
