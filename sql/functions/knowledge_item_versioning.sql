-- Keeps every earlier version of a knowledge entry (migration 0022): the entry as it was, who
-- wrote it and when, who replaced it (the transaction's `rfp.actor`) and how. New entries get
-- their review date one review period (library_settings) from today. updated_at is the write's
-- time, clock_timestamp(), not now() (its transaction's start): a duplicate run counts its report
-- outdated by entries written after it began (library.sql start_duplicate_run), and a transaction
-- that began before the run but wrote after it read the entries (waiting for a lock) would
-- otherwise pass as compared.
CREATE OR REPLACE FUNCTION knowledge_item_versioning() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    actor text := nullif(current_setting('rfp.actor', true), '');
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.review_by := coalesce(NEW.review_by, (now() AT TIME ZONE 'UTC')::date
                                  + (SELECT review_period_days FROM library_settings));
        NEW.updated_by := coalesce(NEW.updated_by, actor);
        NEW.updated_at := clock_timestamp();
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
    NEW.updated_at := clock_timestamp();
    RETURN NEW;
END
$$;
