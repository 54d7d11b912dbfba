-- What each outbox message is for, so that operators can tell them apart with SQL and the service
-- can count one kind per recipient: an assignment's e-mail is sent only while its address got
-- fewer than mail.assignment_mails_per_hour of them in the last hour (one who may assign could
-- otherwise assign and unassign a colleague's item in a loop: 150 e-mails in 0.7 s, on the SMTP
-- quota every account shares). Messages written before this migration have none.
-- Forward-only: once landed, never edit this file; add a new numbered one.
ALTER TABLE mail_outbox ADD COLUMN kind text;
COMMENT ON COLUMN mail_outbox.kind IS
    'What the message is for: confirmation, added (to an account), invitation, password_reset or assignment (an RFP item assigned to the recipient); null for messages written before 0034.';

-- An address's assignment e-mails of the last hour, counted without reading its others. Plain
-- CREATE INDEX (migrations run in a transaction); the outbox keeps mail.keep_days of messages.
CREATE INDEX IF NOT EXISTS mail_outbox_assignments ON mail_outbox (recipient, created_at)
    WHERE kind = 'assignment';
