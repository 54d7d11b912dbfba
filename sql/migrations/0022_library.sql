-- Library care and write-back (issue 20): each knowledge entry's owner, review date and version,
-- every earlier version kept; near-duplicate/conflict findings; imported questionnaires kept
-- with each item's cell, so answers can be written back into the customer's own file.

-- The review period new entries get (`library.review_period_days`, written by the service at
-- start-up): one row, so every insert path (API, CSV import, approvals) gets the same default.
CREATE TABLE library_settings (
    singleton          boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    review_period_days integer NOT NULL DEFAULT 365 CHECK (review_period_days > 0)
);
INSERT INTO library_settings DEFAULT VALUES;

ALTER TABLE knowledge_items
    ADD COLUMN owner_member_id text REFERENCES members ON DELETE SET NULL,
    ADD COLUMN review_by       date,         -- past this date the entry is stale
    ADD COLUMN reviewed_at     timestamptz,  -- when someone last confirmed it is still right
    ADD COLUMN version         integer NOT NULL DEFAULT 1,
    ADD COLUMN updated_by      text;         -- member id who wrote this version (null: the system)
UPDATE knowledge_items
   SET review_by = (created_at AT TIME ZONE 'UTC')::date
                   + (SELECT review_period_days FROM library_settings);
ALTER TABLE knowledge_items ALTER COLUMN review_by SET NOT NULL;
CREATE INDEX knowledge_items_review_by ON knowledge_items (account_id, review_by);
CREATE INDEX knowledge_items_owner ON knowledge_items (account_id, owner_member_id);
-- Duplicate detection: trigram similarity of questions and of answers' openings.
CREATE INDEX knowledge_items_question_trgm ON knowledge_items
    USING gist (lower(question) gist_trgm_ops) WHERE question IS NOT NULL;
CREATE INDEX knowledge_items_answer_trgm ON knowledge_items
    USING gist (lower(left(answer, 300)) gist_trgm_ops);

-- Every earlier version of an entry: a row is the entry as it was at `version`, written by
-- `written_by` at `written_at`, replaced by `replaced_by` at `replaced_at` (`change` says how).
-- No foreign key to knowledge_items: the history outlives a deleted or merged entry.
CREATE TABLE knowledge_item_versions (
    item_id         text NOT NULL,
    version         integer NOT NULL,
    account_id      text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    question        text,
    answer          text NOT NULL,
    title           text,
    tags            text[] NOT NULL,
    source          text,
    yes_no          boolean,
    owner_member_id text,
    review_by       date,
    written_by      text,
    written_at      timestamptz NOT NULL,
    replaced_by     text,
    replaced_at     timestamptz NOT NULL DEFAULT now(),
    change          text NOT NULL CHECK (change IN ('updated', 'deleted', 'merged')),
    PRIMARY KEY (item_id, version)
);
CREATE INDEX knowledge_item_versions_account ON knowledge_item_versions (account_id, item_id);

CREATE FUNCTION knowledge_item_versioning() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    actor text := nullif(current_setting('rfp.actor', true), '');
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.review_by := coalesce(NEW.review_by, (now() AT TIME ZONE 'UTC')::date
                                  + (SELECT review_period_days FROM library_settings));
        NEW.updated_by := coalesce(NEW.updated_by, actor);
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND (NEW.question, NEW.answer, NEW.title, NEW.tags, NEW.source, NEW.yes_no,
                             NEW.owner_member_id, NEW.review_by)
        IS NOT DISTINCT FROM (OLD.question, OLD.answer, OLD.title, OLD.tags, OLD.source, OLD.yes_no,
                              OLD.owner_member_id, OLD.review_by) THEN
        RETURN NEW;  -- nothing a reader sees changed (e.g. reviewed_at alone): no new version
    END IF;
    INSERT INTO knowledge_item_versions (item_id, version, account_id, question, answer, title, tags,
                                         source, yes_no, owner_member_id, review_by, written_by,
                                         written_at, replaced_by, change)
    VALUES (OLD.id, OLD.version, OLD.account_id, OLD.question, OLD.answer, OLD.title, OLD.tags,
            OLD.source, OLD.yes_no, OLD.owner_member_id, OLD.review_by, OLD.updated_by,
            OLD.updated_at, actor,
            CASE WHEN TG_OP = 'UPDATE' THEN 'updated'
                 WHEN current_setting('rfp.merging', true) = 'on' THEN 'merged'
                 ELSE 'deleted' END)
    ON CONFLICT (item_id, version) DO NOTHING;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    NEW.version := OLD.version + 1;
    NEW.updated_by := actor;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
CREATE TRIGGER knowledge_items_versioning BEFORE INSERT OR UPDATE OR DELETE ON knowledge_items
    FOR EACH ROW EXECUTE FUNCTION knowledge_item_versioning();

-- Duplicate and conflict findings, recomputed in the background per account (a run replaces the
-- account's rows in one transaction).
CREATE TABLE knowledge_duplicate_runs (
    account_id   text PRIMARY KEY REFERENCES accounts ON DELETE CASCADE,
    started_at   timestamptz NOT NULL DEFAULT now(),
    computed_at  timestamptz,            -- null while the first run is under way
    entries      integer,                -- entries compared
    seconds      real                    -- how long the run took
);
CREATE TABLE knowledge_duplicates (
    account_id  text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    item_a      text NOT NULL,
    item_b      text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('duplicate', 'conflict')),
    reason      text NOT NULL,
    similarity  real NOT NULL,
    PRIMARY KEY (account_id, item_a, item_b)
);

-- Write-back: the questionnaire file an import read (kept per RFP, deduplicated by content), and
-- each item's cell in it.
CREATE TABLE questionnaire_files (
    id            text PRIMARY KEY,                        -- qf_…
    account_id    text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    rfp_id        text NOT NULL REFERENCES rfps ON DELETE CASCADE,
    format        text NOT NULL CHECK (format IN ('xlsx', 'csv')),
    filename      text,
    sha256        bytea NOT NULL,
    content       bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (rfp_id, sha256)
);
ALTER TABLE rfp_items
    ADD COLUMN questionnaire_file_id text REFERENCES questionnaire_files ON DELETE SET NULL,
    ADD COLUMN source_sheet  text,      -- the sheet (XLSX) the question came from
    ADD COLUMN source_row    integer,   -- 1-based row in that sheet or CSV file
    ADD COLUMN answer_column integer;   -- 0-based column its answer is written into
