-- Questions are claimed round-robin by account (claim_questions in sql/queries/questions.sql), so
-- one account's backlog no longer delays every other account's questions: the claim finds the
-- accounts with unfinished questions by a skip scan of this index, and each account's oldest by
-- it too. It replaces questions_unfinished (created_at), which served the oldest-first claim
-- across all accounts and nothing else.
CREATE INDEX questions_queued ON questions (account_id, created_at) WHERE state <> 'complete';
DROP INDEX questions_unfinished;
