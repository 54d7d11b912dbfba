-- Accounts hardening (issue 17): passwords the user chose, password resets, token management,
-- sign-in from known clients, and mail kept for the operator when no SMTP host is configured.

-- Whether the stored password is one the user chose (set on confirmation, invitation, change or
-- reset). False for a password an administrator chose with POST /users before this migration:
-- it still signs in, but never proves the user's consent to join another account.
ALTER TABLE users ADD COLUMN password_chosen_by_user boolean NOT NULL DEFAULT false;
-- Users who accepted an invitation as new users chose their password: their row and the
-- invitation's acceptance were written by one transaction, so the timestamps are equal.
UPDATE users u SET password_chosen_by_user = true
 WHERE u.password_hash IS NOT NULL
   AND EXISTS (SELECT 1 FROM invitations i JOIN members m ON m.id = i.member_id
                WHERE m.user_id = u.id AND i.accepted_at = u.created_at);

-- One-time password reset links, stored as the hash of their token like confirmations.
CREATE TABLE password_resets (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users ON DELETE CASCADE,
    token_hash  bytea NOT NULL UNIQUE,                    -- sha256 of the link's token
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,                              -- set once: a link works one time
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX password_resets_user ON password_resets (user_id);

-- Where a token came from, for the member's token list and for expiry defaults.
ALTER TABLE api_tokens ADD COLUMN source text NOT NULL DEFAULT 'sign_in'
    CHECK (source IN ('sign_in', 'cli', 'demo'));

-- Clients (an IPv4 address or an IPv6 /64) a user signed in from successfully: once the
-- per-e-mail sign-in limit is reached, these may still try, so a stranger's failures cannot
-- lock the user out of their usual network.
CREATE TABLE sign_in_known_clients (
    user_id         bigint NOT NULL REFERENCES users ON DELETE CASCADE,
    client          text NOT NULL,
    last_success_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, client)
);

-- 'held': no SMTP host is configured; the message stays (body included) for the operator to
-- read with `python -m service mail show ID` instead of going, link and all, to the log.
ALTER TYPE mail_state ADD VALUE 'held';
