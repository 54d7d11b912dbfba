-- The account on whose behalf a member's action wrote each outbox message, so that the service can
-- bound what one account makes it send: a member's action writes a message only while the
-- account's members had fewer than mail.account_mails_per_hour written in the last hour. Every
-- account's mail goes through one SMTP account and its provider's quota: one hostile or
-- compromised account (an admin inviting without end, many members each assigning up to their
-- own per-address cap) could otherwise use up what every other account needs for its members'
-- confirmations and password resets. Counted: invitations, "you were added", the confirmation of
-- a user an admin created, assignments. Not counted (null): a user's own password reset, and
-- messages written before this migration (or by a host of an older release during a rolling
-- upgrade: at most that hour's are missed).
-- Forward-only: once landed, never edit this file; add a new numbered one.
ALTER TABLE mail_outbox ADD COLUMN account_id text;
COMMENT ON COLUMN mail_outbox.account_id IS
    'The account (accounts.id) whose member''s action wrote the message (requested_by), counted against mail.account_mails_per_hour: invitations, added, confirmations of users an admin created, assignments; null for a user''s own (password_reset) and for messages written before 0035. Not a foreign key: the outbox outlives what it names.';

-- An account's messages of the last hour, counted without reading other accounts' (or any
-- message no member asked for). Plain CREATE INDEX (migrations run in a transaction); the
-- outbox keeps mail.keep_days of messages. Partial on IS NOT NULL, which `account_id = $1`
-- implies for a generic plan too (= is strict).
CREATE INDEX IF NOT EXISTS mail_outbox_account_recent ON mail_outbox (account_id, created_at)
    WHERE account_id IS NOT NULL;
