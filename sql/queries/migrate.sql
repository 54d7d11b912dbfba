-- create_schema_migrations --
-- The migrations applied to this database, each with the sha256 of its file when applied.
-- (Databases migrated before checksums existed gain the column; `migrate` fills it in.)
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now(),
    checksum   text
);
ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text;

-- applied_migrations --
-- Every applied migration with its stored checksum (null until `migrate` first fills it in).
SELECT version, checksum FROM schema_migrations ORDER BY version;

-- fill_migration_checksum --
-- The checksum of a migration applied before checksums were stored: its file as it is now.
UPDATE schema_migrations SET checksum = $2 WHERE version = $1 AND checksum IS NULL;

-- record_migration --
-- A migration applied, in the transaction that applied it.
INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2);

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
