-- Webhooks (endpoints, an outbox of events, one delivery per event and endpoint) and the audit log.

-- Who did what, written in the transaction of the change it records (service/domain/audit.py).
CREATE TABLE audit_events (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- NULL only for an event tied to no account (a failed sign-in for an unknown address).
    account_id     text REFERENCES accounts ON DELETE CASCADE,
    occurred_at    timestamptz NOT NULL DEFAULT now(),
    -- member: a membership through a token; operator: the CLI; anonymous: no one signed in
    -- (a sign-in attempt, an e-mail confirmation, accepting an invitation).
    actor_type     text NOT NULL CHECK (actor_type IN ('member', 'operator', 'anonymous')),
    actor_id       text,      -- mbr_… for a member, the OS user for an operator
    actor_label    text,      -- the member's e-mail address, the address a sign-in named
    action         text NOT NULL,   -- e.g. rfp.created, rfp_item.updated, auth.sign_in_failed
    record_id      text,
    client_address text,
    request_id     text,
    -- For a change: the changed fields' values before and after (never secrets); for a creation
    -- only `after`.
    before         jsonb,
    after          jsonb
);
CREATE INDEX audit_events_account ON audit_events (account_id, id);
CREATE INDEX audit_events_record ON audit_events (account_id, record_id, id);

-- An account's receiver of webhooks.
CREATE TABLE webhook_endpoints (
    id              text PRIMARY KEY,   -- whep_…
    account_id      text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    url             text NOT NULL,
    event_types     text[] NOT NULL,
    description     text,
    -- whsec_… (Standard Webhooks). Kept in clear because signing needs it; the API shows it
    -- only in the response that created it.
    secret          text NOT NULL,
    enabled         boolean NOT NULL DEFAULT true,
    -- Why the service disabled the endpoint (persistent failure); NULL when enabled or disabled
    -- by an admin.
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_account ON webhook_endpoints (account_id, created_at);

-- The outbox: one row per event, written in the transaction of the change it reports.
CREATE TABLE webhook_events (
    id          text PRIMARY KEY,   -- msg_…: the webhook-id header, the same on every attempt
    account_id  text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    type        text NOT NULL,
    record_id   text NOT NULL,      -- the record the event is about; delivery keeps its order
    body        text NOT NULL,      -- the JSON sent (and signed), exactly
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TYPE webhook_delivery_state AS ENUM (
    'pending',    -- to be attempted at next_attempt_at (or being attempted: a lease)
    'delivered',  -- the endpoint answered 2xx
    'failed'      -- retries ran out (retry_until passed); a manual retry makes it pending again
);

-- One event to one endpoint, and the outcome of its last attempt.
CREATE TABLE webhook_deliveries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id         text NOT NULL REFERENCES webhook_events ON DELETE CASCADE,
    endpoint_id      text NOT NULL REFERENCES webhook_endpoints ON DELETE CASCADE,
    record_id        text NOT NULL,  -- the event's, here for the per-record order check
    state            webhook_delivery_state NOT NULL DEFAULT 'pending',
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    -- Set by the first attempt: retries continue until then (webhooks.retry_for_seconds).
    retry_until      timestamptz,
    last_attempt_at  timestamptz,
    last_status      integer,        -- the HTTP status of the last attempt, if it got one
    last_error       text,
    last_response    text,           -- the start of the last response body
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_order ON webhook_deliveries (endpoint_id, record_id, id)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id);
