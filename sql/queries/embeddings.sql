-- embeddings_available --
-- Whether migration 0011 could create the embeddings table (pgvector present).
SELECT to_regclass('knowledge_embeddings') IS NOT NULL;

-- embeddings_pending --
-- Claim up to $2 entries (of every account) with no vector for model $1, or one of text that has
-- since changed, for $3 seconds, each with the text to embed (the same expression as the hash:
-- keep them in step). Looked for among every entry, oldest first, when $4 (a process's start, and
-- every few minutes: a change of model), else among those on knowledge_embedding_queue (their
-- text written since), the oldest write first: a round then reads the queue, not every entry. The
-- branch not taken is a one-time filter, false in a generic plan too. Entries another indexer
-- holds an unexpired claim on are left to it; of two indexers racing for one entry, the unique
-- claim makes the second skip it. The entries are locked as the claims' foreign key check locks
-- them: one being deleted meanwhile is skipped, not a failed round
-- (knowledge_embedding_claims_item_id_fkey).
WITH candidates AS (
    SELECT item_id AS id, queued_at AS since FROM knowledge_embedding_queue WHERE NOT $4::boolean
    UNION ALL
    SELECT id, created_at FROM knowledge_items WHERE $4::boolean
), pending AS (
    SELECT k.id, k.account_id,
           concat_ws(E'\n', k.question, k.title, k.answer) AS text,
           md5(concat_ws(E'\n', k.question, k.title, k.answer)) AS content_hash,
           w.since
      FROM candidates w
      JOIN knowledge_items k ON k.id = w.id
      LEFT JOIN knowledge_embeddings e ON e.item_id = k.id AND e.model = $1
      LEFT JOIN knowledge_embedding_claims c ON c.item_id = k.id AND c.model = $1
     WHERE (e.item_id IS NULL OR e.content_hash <> md5(concat_ws(E'\n', k.question, k.title, k.answer)))
       AND (c.item_id IS NULL OR c.claimed_until < now())
     ORDER BY w.since, k.id
     LIMIT $2
       FOR KEY SHARE OF k
), claimed AS (
    INSERT INTO knowledge_embedding_claims AS c (item_id, model, claimed_until)
    SELECT p.id, $1, now() + make_interval(secs => $3) FROM pending p
    ON CONFLICT (item_id, model) DO UPDATE SET claimed_until = excluded.claimed_until
     WHERE c.claimed_until < now()
    RETURNING c.item_id
)
SELECT p.id, p.account_id, p.text, p.content_hash
  FROM pending p JOIN claimed c ON c.item_id = p.id
 ORDER BY p.since, p.id;

-- embeddings_dequeue_lock --
-- The entries on knowledge_embedding_queue whose vector of model $1 is current, their queue rows
-- locked for embeddings_dequeue in the same transaction, whose next statement's snapshot sees
-- their text as written by then. Rows a write holds (its entry's text written again) are skipped:
-- they stay queued for the next round, and the indexer never waits for a writer, so it cannot
-- deadlock with one whose transaction writes entries in several statements. At most $2 of them,
-- so that after a large import each transaction deletes a bounded batch.
SELECT q.item_id
  FROM knowledge_embedding_queue q
  JOIN knowledge_items k ON k.id = q.item_id
  JOIN knowledge_embeddings e ON e.item_id = k.id AND e.model = $1
 WHERE e.content_hash = md5(concat_ws(E'\n', k.question, k.title, k.answer))
 ORDER BY q.item_id
 LIMIT $2
   FOR UPDATE OF q SKIP LOCKED;

-- embeddings_dequeue --
-- Take entries $2 (embeddings_dequeue_lock's) off the queue whose vector of model $1 is still
-- current as this statement sees their text. One whose text a write changed meanwhile stays: it
-- is embedded again.
DELETE FROM knowledge_embedding_queue q
 USING knowledge_items k, knowledge_embeddings e
 WHERE q.item_id = ANY ($2::text[]) AND k.id = q.item_id AND e.item_id = k.id AND e.model = $1
   AND e.content_hash = md5(concat_ws(E'\n', k.question, k.title, k.answer));

-- embeddings_release --
-- Give up the claims on entries $2 (model $1): stored, or the backend failed.
DELETE FROM knowledge_embedding_claims WHERE model = $1 AND item_id = ANY($2::text[]);

-- embeddings_store --
-- Store vectors (parallel arrays; vectors as pgvector text '[x,y,…]') for model $1. An entry
-- deleted meanwhile is skipped: the entries are locked as the foreign key's check locks them, so
-- one whose deletion commits while this runs is left out (waited for, then not there) rather than
-- failing the whole batch on knowledge_embeddings_item_id_fkey after its vectors were computed.
INSERT INTO knowledge_embeddings (item_id, model, account_id, content_hash, dimensions, embedding)
SELECT r.item_id, $1, k.account_id, r.content_hash, $5, r.embedding::vector
  FROM unnest($2::text[], $3::text[], $4::text[]) AS r(item_id, content_hash, embedding)
  JOIN knowledge_items k ON k.id = r.item_id
   FOR KEY SHARE OF k
ON CONFLICT (item_id, model) DO UPDATE
   SET content_hash = excluded.content_hash, dimensions = excluded.dimensions,
       embedding = excluded.embedding;

-- embeddings_missing --
-- Entries (of every account) with no current vector of model $1: none embedded yet, or its text
-- changed since (the same hash as embeddings_pending).
SELECT count(*)
  FROM knowledge_items k
  LEFT JOIN knowledge_embeddings e ON e.item_id = k.id AND e.model = $1
 WHERE e.item_id IS NULL OR e.content_hash <> md5(concat_ws(E'\n', k.question, k.title, k.answer));

-- embeddings_prune --
-- The vectors and indexing claims of every model but $1 (vectors of a model no longer configured:
-- they share the HNSW index of their dimension, and every search walks past them).
WITH claims AS (DELETE FROM knowledge_embedding_claims WHERE model <> $1)
DELETE FROM knowledge_embeddings WHERE model <> $1;

-- embeddings_may_vacuum --
-- Whether this role's VACUUM of knowledge_embeddings does anything: the table's owner (or a
-- member of its role), the database's owner before PostgreSQL 17, a role granted MAINTAIN on it
-- from 17. Any other role's VACUUM only warns and skips the table (autovacuum does it later).
SELECT pg_has_role(c.relowner, 'USAGE')
       OR CASE WHEN current_setting('server_version_num')::int >= 170000
               THEN has_table_privilege(c.oid, 'MAINTAIN')
               ELSE pg_has_role((SELECT datdba FROM pg_database WHERE datname = current_database()),
                                'USAGE') END
  FROM pg_class c
 WHERE c.oid = 'knowledge_embeddings'::regclass;

-- embeddings_vacuum --
-- After a prune: HNSW drops deleted rows from its graph only when vacuumed.
VACUUM (ANALYZE) knowledge_embeddings;

-- embeddings_hnsw_index_exists --
-- Whether the HNSW index for vectors of $1 dimensions is there: creating it needs the table's
-- owner even when it exists (IF NOT EXISTS is checked after ownership), which a runtime role is not.
SELECT to_regclass('knowledge_embeddings_hnsw_' || $1::integer) IS NOT NULL;

-- embeddings_hnsw_index --
-- The HNSW index for vectors of {dims} dimensions (384 is created by the migration). Indexers in
-- several processes meet a new model's dimension together, and CREATE INDEX IF NOT EXISTS run
-- twice at once can fail on a duplicate in pg_class: a transaction-level advisory lock makes the
-- second wait and then find the index. (Both statements run as one transaction: simple protocol.)
SELECT pg_advisory_xact_lock(hashtext('knowledge_embeddings_hnsw_{dims}'));
CREATE INDEX IF NOT EXISTS knowledge_embeddings_hnsw_{dims} ON knowledge_embeddings
    USING hnsw ((embedding::vector({dims})) vector_cosine_ops) WHERE dimensions = {dims};
