-- A question can be asked already leased to the asking process's pipeline (handed straight to it,
-- no claim round trip). Only an unleased new question needs announcing: it wakes the pipelines
-- of every process so one of them claims it. State changes are announced as before.

CREATE OR REPLACE FUNCTION notify_question_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.lease_owner IS NOT NULL THEN
        RETURN NULL;  -- handed to its asker's pipeline: nobody else is to claim it
    END IF;
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM pg_notify('question_events', NEW.id || ' ' || NEW.state::text);
    END IF;
    RETURN NULL;
END;
$$;
