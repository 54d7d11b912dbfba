-- Hardening (issue 17, finding 4): how often a question's step failed unexpectedly. After
-- questions.max_failed_attempts the question completes needing attention, and is refunded,
-- instead of being retried forever (across restarts too, hence stored).
ALTER TABLE questions ADD COLUMN failed_attempts integer NOT NULL DEFAULT 0;
