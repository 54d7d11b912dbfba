-- schema_migrations_current --
-- Whether schema_migrations is there with its checksum column, so that `migrate` need not run
-- create_schema_migrations: even with IF NOT EXISTS that needs CREATE on the schema (and the
-- ALTER the table's ownership), which a runtime role has not.
SELECT EXISTS (SELECT FROM pg_attribute
                WHERE attrelid = to_regclass('schema_migrations') AND attname = 'checksum'
                  AND NOT attisdropped);

-- create_schema_migrations --
-- The migrations applied to this database, each with the sha256 of its file when applied.
-- (Databases migrated before checksums existed gain the column; `migrate` fills it in.)
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now(),
    checksum   text
);
ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text;

-- schema_migrations_readable --
-- Where schema_migrations_current says no: null when there is no schema_migrations, else whether
-- this role may read the one from before checksums that is there.
SELECT has_table_privilege(to_regclass('schema_migrations'), 'SELECT');

-- recorded_migrations --
-- The versions a schema_migrations from before checksums lists (it has no checksum column).
SELECT array(SELECT version FROM schema_migrations ORDER BY version);

-- applied_migrations --
-- Every applied migration with its stored checksum (null until `migrate` first fills it in).
SELECT version, checksum FROM schema_migrations ORDER BY version;

-- fill_migration_checksum --
-- The checksum of a migration applied before checksums were stored: its file as it is now.
UPDATE schema_migrations SET checksum = $2 WHERE version = $1 AND checksum IS NULL;

-- record_migration --
-- A migration applied, in the transaction that applied it.
INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2);

-- owns_the_schema --
-- Whether this role owns schema_migrations (or is a member of its owner, or a superuser): the
-- role that migrates. True on a database not migrated yet.
SELECT coalesce((SELECT pg_has_role(relowner, 'USAGE') FROM pg_class
                  WHERE oid = to_regclass('schema_migrations')), true);

-- schema_state_checksum --
-- What `migrate` last made of a part of the schema it re-creates from files ($1: 'functions'),
-- or null (migration 0032 creates the table).
SELECT checksum FROM schema_state WHERE name = $1;

-- record_schema_state --
-- That part of the schema ($1) as the files with checksum $2 define it, in the transaction that
-- made it so ('functions_revision': $2 is sql/functions.toml's revision, a space, that checksum).
INSERT INTO schema_state (name, checksum) VALUES ($1, $2)
    ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, updated_at = now();

-- functions_missing --
-- Which of the functions named $1 the database lacks (dropped by hand, say): re-created then,
-- whatever the stored checksum says.
SELECT array(SELECT unnest($1::text[])
             EXCEPT SELECT proname::text FROM pg_proc WHERE pg_function_is_visible(oid));

-- functions_defined --
-- A digest of the functions named $1 as pg_proc holds them (signature, result, attributes,
-- settings, body): stored when `migrate` creates them, compared at each start, so that ones
-- re-created otherwise (by a release from before schema_state, by hand) are noticed.
SELECT md5(coalesce(string_agg(
           concat_ws(' ', p.oid::regprocedure::text, p.prorettype::regtype::text, p.prokind,
                     p.provolatile, p.proparallel, p.proisstrict, p.prosecdef, p.proretset,
                     p.proconfig::text, p.prosrc),
           E'\n' ORDER BY p.oid::regprocedure::text), ''))
  FROM pg_proc p
 WHERE p.proname = ANY($1::text[]) AND pg_function_is_visible(p.oid);

-- vector_extension_created --
-- Whether pgvector is created in this database (its table may still be missing: a role that
-- may not create tables then cannot make it).
SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'vector');

-- delete_unlisted_vocabulary --
-- Seeded phrases no longer in sql/vocabulary.toml (concepts $1 and phrases $2, parallel arrays).
DELETE FROM knowledge_vocabulary v
 WHERE v.seeded
   AND (v.concept, lower(v.phrase)) NOT IN (
       SELECT f.concept, lower(f.phrase) FROM unnest($1::text[], $2::text[]) AS f(concept, phrase))
RETURNING v.concept, v.phrase;

-- update_vocabulary_case --
-- Seeded phrases whose spelling changed in the file only in case (the same row by the unique index).
UPDATE knowledge_vocabulary v
   SET phrase = f.phrase
  FROM unnest($1::text[], $2::text[]) AS f(concept, phrase)
 WHERE v.seeded AND v.concept = f.concept AND lower(v.phrase) = lower(f.phrase) AND v.phrase <> f.phrase
RETURNING v.concept, v.phrase;

-- insert_listed_vocabulary --
-- The file's phrases that no row for every account holds yet, in the file's order. One an
-- operator already added for every account stays the operator's row.
INSERT INTO knowledge_vocabulary (concept, phrase, seeded)
SELECT f.concept, f.phrase, true
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS f(concept, phrase, n)
 WHERE NOT EXISTS (SELECT FROM knowledge_vocabulary v
                    WHERE v.account_id IS NULL AND v.concept = f.concept
                      AND lower(v.phrase) = lower(f.phrase))
 ORDER BY f.n
RETURNING concept, phrase;

-- create_embeddings_table --
-- Migration 0011's dense-retrieval table (with 0031's comments on it), for a database it was
-- applied to while pgvector was missing (0011 then only left a notice): run at every migrate once
-- pgvector can be created here, so that installing pgvector later and restarting turns dense
-- retrieval on. A server that still lacks pgvector (or the right to create it) is left as it is.
DO $setup$
BEGIN
    IF to_regclass('knowledge_embeddings') IS NOT NULL
       OR NOT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'vector') THEN
        RETURN;
    END IF;
    BEGIN
        CREATE EXTENSION IF NOT EXISTS vector;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'pgvector is installed but cannot be created here (%): dense retrieval stays off', SQLERRM;
        RETURN;
    END;
    IF NOT has_schema_privilege(current_schema(), 'CREATE')
       OR NOT pg_has_role((SELECT relowner FROM pg_class WHERE oid = 'knowledge_items'::regclass), 'USAGE') THEN
        RETURN;  -- a runtime role: the schema's owner makes the table (`migrate` logs it)
    END IF;
    EXECUTE $sql$
        CREATE TABLE knowledge_embeddings (
            item_id      text NOT NULL REFERENCES knowledge_items ON DELETE CASCADE,
            model        text NOT NULL,
            account_id   text NOT NULL,
            content_hash text NOT NULL,
            dimensions   integer NOT NULL,
            embedding    vector NOT NULL,
            PRIMARY KEY (item_id, model)
        )
    $sql$;
    EXECUTE 'CREATE INDEX knowledge_embeddings_account ON knowledge_embeddings (account_id, model)';
    EXECUTE $sql$
        CREATE INDEX knowledge_embeddings_hnsw_384 ON knowledge_embeddings
            USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE dimensions = 384
    $sql$;
    -- As migration 0031 comments the table 0011 made (keep the two in step).
    COMMENT ON TABLE knowledge_embeddings IS
        'Dense retrieval: one vector per knowledge entry and embedding model, written by the embeddings indexer. Only where pgvector is installed.';
    COMMENT ON COLUMN knowledge_embeddings.model IS
        'The embedding model''s name (config embeddings.model).';
    COMMENT ON COLUMN knowledge_embeddings.account_id IS
        'The entry''s account, copied so that a search never joins to find it.';
    COMMENT ON COLUMN knowledge_embeddings.content_hash IS
        'md5 (hex) of the text embedded (question, title and answer): when the entry''s differs, it is embedded again.';
    COMMENT ON COLUMN knowledge_embeddings.dimensions IS
        'The vector''s length; an HNSW index exists per dimension (384 for all-MiniLM-L6-v2).';
END
$setup$;

-- schema_migrations_columns --
-- The schema, name and type of each column of the schema_migrations on the search path (none
-- where there is none): another application's (Rails, golang-migrate, Ecto keep a table of that
-- name) is told from this service's (version text, applied_at timestamptz, checksum text).
SELECT n.nspname AS schema, a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE a.attrelid = to_regclass('schema_migrations') AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum;

-- foreign_migration_versions --
-- Up to three versions in schema_migrations not named as this service's migration files are
-- (0001_foundation): another application's rows.
SELECT array(SELECT version FROM schema_migrations
              WHERE version !~ '^[0-9]{4}_[a-z0-9_]+$' ORDER BY version LIMIT 3);

-- tables_without_migrations --
-- Up to four tables, views and sequences in the schema migrations would create in (the first on
-- the search path), those of extensions left out (PostGIS's spatial_ref_sys): where there is no
-- schema_migrations, another application's.
SELECT array(SELECT c.relname::text FROM pg_class c
              WHERE c.relnamespace = current_schema()::regnamespace
                AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
                AND NOT EXISTS (SELECT FROM pg_depend d
                                 WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                                   AND d.deptype = 'e')
              ORDER BY c.relname LIMIT 4);

-- rights_lacking --
-- What this role may not do that the service does, in the schema migrations create in (objects
-- of extensions left out), each as `name (rights)`: tables lacking SELECT, INSERT, UPDATE or
-- DELETE, views lacking SELECT, sequences lacking USAGE, functions lacking EXECUTE. Empty for the
-- owner; for a runtime role, what the GRANTs of DEPLOYMENT.md ("A separate runtime role") give.
SELECT array(
    SELECT format('%s (%s)', c.relname, array_to_string(lacking, ', '))
      FROM pg_class c
     CROSS JOIN LATERAL (
         SELECT array_agg(r.name ORDER BY r.n) AS lacking
           FROM unnest(CASE WHEN c.relkind = 'S' THEN ARRAY['USAGE']
                            WHEN c.relkind IN ('v', 'm') THEN ARRAY['SELECT']
                            ELSE ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE'] END)
                WITH ORDINALITY AS r (name, n)
          WHERE NOT CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, r.name)
                         ELSE has_table_privilege(c.oid, r.name) END) AS rights
     WHERE c.relnamespace = current_schema()::regnamespace
       AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
       AND rights.lacking IS NOT NULL
       AND NOT EXISTS (SELECT FROM pg_depend d
                        WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
    UNION ALL
    SELECT format('%s() (EXECUTE)', p.proname)
      FROM pg_proc p
     WHERE p.pronamespace = current_schema()::regnamespace
       AND NOT has_function_privilege(p.oid, 'EXECUTE')
       AND NOT EXISTS (SELECT FROM pg_depend d
                        WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
    ORDER BY 1);
