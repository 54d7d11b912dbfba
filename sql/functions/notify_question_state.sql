-- Announces every state change (and every new question) in its own transaction, so listeners in
-- any process see it once it is committed (trigger questions_notify_state, migration 0004).
-- Payload: "<id> <state>". A question asked already leased to the asking process's pipeline
-- (handed straight to it) is not announced: nobody else is to claim it.
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
