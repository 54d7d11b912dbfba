-- What `migrate` last made of the part of the schema it re-creates from files rather than
-- migrates: the row 'functions' holds the sha256 of sql/functions/ (every file, by name) as it
-- last created them. A start whose files have that checksum, and that finds each function there,
-- leaves them as they are: re-creating a function needs its owner, so a role granted only
-- read/write on the tables (DEPLOYMENT.md, "A separate runtime role") can then start.
-- Forward-only: once landed, never edit this file; add a new numbered one.
CREATE TABLE schema_state (
    name       text PRIMARY KEY,
    checksum   text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE schema_state IS
    'What migrate last made of the schema it re-creates from files: the row ''functions'' holds '
    'the sha256 of sql/functions/ as last created; a start with the same checksum leaves the '
    'functions alone (so a read/write runtime role can start).';
