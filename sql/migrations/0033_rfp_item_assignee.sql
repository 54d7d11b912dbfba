-- An RFP item's assignee: the member (by user id, as rfps.owner_id) who answers it. Only a member
-- of the item's account who may write (admin or member) is assigned: the review that assigns
-- checks it with the membership locked (FOR SHARE), and removing a member, or making them a
-- viewer, unassigns their items in the same transaction (service/domain/members.py), so neither
-- can slip between the check and the write. A deleted user is unassigned by the foreign key.
-- Forward-only: once landed, never edit this file; add a new numbered one.
ALTER TABLE rfp_items ADD COLUMN assignee_id bigint REFERENCES users ON DELETE SET NULL;
COMMENT ON COLUMN rfp_items.assignee_id IS
    'The member who answers the item: a users.id (bigint) of a member of the RFP''s account whose role may write (admin or member); null: unassigned. Removing the member, or making them a viewer, sets it to null.';

-- "Items assigned to X" (an RFP's, in order) and a removed member's items, found without reading
-- the unassigned ones. A plain CREATE INDEX (migrations run in a transaction): with many items,
-- build it first with CREATE INDEX CONCURRENTLY under this name; IF NOT EXISTS then skips it.
CREATE INDEX IF NOT EXISTS rfp_items_assignee ON rfp_items (assignee_id, rfp_id, position)
    WHERE assignee_id IS NOT NULL;
