-- What each outbox message is for, and whose action wrote it, so that operators can tell messages
-- apart with SQL and the service can count one kind per sender and address: an assignment's
-- e-mail is sent only while its assigner sent its address fewer than
-- mail.assignment_mails_per_hour of them in the last hour (one who may assign could otherwise
-- assign and unassign a colleague's item in a loop: 150 e-mails in 0.7 s, on the SMTP quota every
-- account shares; counted per assigner, so that one cannot use up a colleague's allowance and
-- silence the others' assignments). Messages written before this migration have neither.
-- Forward-only: once landed, never edit this file; add a new numbered one.
ALTER TABLE mail_outbox ADD COLUMN kind text;
ALTER TABLE mail_outbox ADD COLUMN requested_by text;
COMMENT ON COLUMN mail_outbox.kind IS
    'What the message is for: confirmation, added (to an account), invitation, password_reset or assignment (an RFP item assigned to the recipient); null for messages written before 0034.';
COMMENT ON COLUMN mail_outbox.requested_by IS
    'The member (members.id) whose action wrote the message, where one did (an assignment''s assigner, an invitation''s inviter); null otherwise. Not a foreign key: the outbox outlives memberships.';

-- An address's messages of one kind from one sender in the last hour, counted without reading
-- the others. Plain CREATE INDEX (migrations run in a transaction); the outbox keeps
-- mail.keep_days of messages.
CREATE INDEX IF NOT EXISTS mail_outbox_recent ON mail_outbox (recipient, kind, requested_by, created_at);
