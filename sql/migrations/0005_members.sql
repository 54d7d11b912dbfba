-- Members: e-mail confirmation links, invitations and the mail outbox.
-- Link tokens are stored only as SHA-256 hashes, like API tokens.

CREATE TABLE email_confirmations (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users ON DELETE CASCADE,
    token_hash  bytea NOT NULL UNIQUE,                    -- sha256 of the link's token
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,                              -- set once: a link works one time
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX email_confirmations_user ON email_confirmations (user_id);

CREATE TYPE invitation_state AS ENUM (
    'pending',   -- sent, not yet accepted (shown as "expired" once expires_at has passed)
    'accepted',  -- used once: the invitee is a member now
    'revoked'    -- replaced by a newer invitation to the same address; its link no longer works
);

CREATE TABLE invitations (
    id          text PRIMARY KEY,                         -- inv_…
    account_id  text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    email       text NOT NULL,
    role        member_role NOT NULL,
    token_hash  bytea NOT NULL UNIQUE,                    -- sha256 of the link's token
    state       invitation_state NOT NULL DEFAULT 'pending',
    invited_by  text REFERENCES members ON DELETE SET NULL,
    member_id   text REFERENCES members ON DELETE SET NULL, -- the membership created on acceptance
    expires_at  timestamptz NOT NULL,
    accepted_at timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
-- At most one live invitation per address and account: re-inviting revokes the old one.
CREATE UNIQUE INDEX invitations_one_pending ON invitations (account_id, lower(email))
    WHERE state = 'pending';

CREATE TYPE mail_state AS ENUM (
    'pending',   -- waiting to be sent (or to be retried at next_attempt_at)
    'sent',      -- handed to the SMTP server (or written to the log when no SMTP is configured)
    'failed'     -- gave up after the configured number of attempts
);

-- Outgoing mail, written in the same transaction as the user or invitation it belongs to and
-- delivered by a background sender. The body holds a one-time link, so it is erased once the
-- message is sent or given up on.
CREATE TABLE mail_outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id      text NOT NULL UNIQUE,                 -- the Message-ID header, the same on every attempt
    recipient       text NOT NULL,
    subject         text NOT NULL,
    body            text NOT NULL,
    state           mail_state NOT NULL DEFAULT 'pending',
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),   -- also the lease of a claimed message
    last_error      text,
    sent_at         timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mail_outbox_due ON mail_outbox (next_attempt_at, id) WHERE state = 'pending';
