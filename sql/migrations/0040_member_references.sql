-- The rows that refer to a member, indexed by it. Removing a member (delete_member) sets their
-- questions', entries' and invitations' references to null through the foreign keys, and nothing
-- indexed those columns (questions had only the partial idempotency index, entries only
-- (account_id, owner_member_id), which the foreign key's own statement cannot use): every removal
-- read every question and every entry of every account.
-- Forward-only: once landed, never edit this file; add a new numbered one.

-- Plain CREATE INDEX (migrations run in a transaction): writes to these tables wait while they are
-- built. With many questions, build them first with CREATE INDEX CONCURRENTLY under these names;
-- IF NOT EXISTS then skips them here.
CREATE INDEX IF NOT EXISTS questions_member ON questions (member_id) WHERE member_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS knowledge_items_owner_member ON knowledge_items (owner_member_id)
    WHERE owner_member_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS invitations_member ON invitations (member_id) WHERE member_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS invitations_invited_by ON invitations (invited_by) WHERE invited_by IS NOT NULL;
