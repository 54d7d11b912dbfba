-- Questions: asked in state `new` (charged in the same transaction), then moved along the pipeline
-- one guarded transition at a time by whichever process holds the lease.

CREATE TYPE question_state AS ENUM (
    'new',                    -- asked and charged; waiting for a pipeline worker
    'ready_to_answer',        -- validated; the RFP context (if any) captured
    'references_fetched',     -- the knowledge-base entries it may draw on are stored
    'answered',               -- the engine's draft answer (or its failure) is stored
    'confidence_calculated',  -- confidence, rationale and attention points are stored
    'complete'                -- final: the answer is published (and an RFP item updated)
);

CREATE TABLE questions (
    id                   text PRIMARY KEY,                 -- q_…
    account_id           text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    user_id              bigint NOT NULL REFERENCES users,
    member_id            text REFERENCES members ON DELETE SET NULL,  -- who asked (idempotency scope)
    rfp_id               text REFERENCES rfps ON DELETE CASCADE,
    rfp_item_id          text REFERENCES rfp_items ON DELETE SET NULL,
    question             text NOT NULL CHECK (btrim(question) <> ''),
    custom_prompt        text,
    answer_detail_level  smallint NOT NULL DEFAULT 1 CHECK (answer_detail_level BETWEEN 0 AND 2),
    state                question_state NOT NULL DEFAULT 'new',
    -- step outputs
    context              text,                             -- ready_to_answer: the RFP's context
    "references"         jsonb,                            -- references_fetched: [{kb_item_id, score, …}]
    draft_answer         text,                             -- answered: the engine's text
    verbatim_answer      boolean NOT NULL DEFAULT false,
    sufficient_context   boolean,
    engine_points        text[],                           -- answered: what the engine says to check
    engine_failure       text,                             -- answered: why the engine gave up, if it did
    confidence           real CHECK (confidence BETWEEN 0 AND 1),
    confidence_rationale text,
    requires_attention   boolean NOT NULL DEFAULT false,
    attention_points     text[],
    answer               text,                             -- complete: the published answer
    -- credits: charged once at ask time; refunded at most once (guarded by `refunded`)
    charged_credits      integer NOT NULL DEFAULT 0 CHECK (charged_credits >= 0),
    refunded             boolean NOT NULL DEFAULT false,
    -- idempotent asks: one key per member; the hash is of the normalised request
    idempotency_key      text,
    request_hash         bytea,
    -- the pipeline lease: one process at a time works on a question
    lease_owner          text,
    lease_expires_at     timestamptz,
    attempts             integer NOT NULL DEFAULT 0,       -- how many times a worker claimed it
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX questions_idempotency ON questions (member_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- The claim query: unfinished questions, oldest first.
CREATE INDEX questions_unfinished ON questions (created_at) WHERE state <> 'complete';
CREATE INDEX questions_account ON questions (account_id, created_at DESC);
CREATE INDEX questions_rfp_item ON questions (rfp_item_id) WHERE rfp_item_id IS NOT NULL;

-- Every state change (and every new question) is announced in its own transaction, so listeners in
-- any process see it once it is committed. Payload: "<id> <state>".
CREATE FUNCTION notify_question_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM pg_notify('question_events', NEW.id || ' ' || NEW.state::text);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER questions_notify_state AFTER INSERT OR UPDATE OF state ON questions
    FOR EACH ROW EXECUTE FUNCTION notify_question_state();
