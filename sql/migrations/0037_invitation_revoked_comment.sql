-- An administrator can now withdraw a pending invitation (POST /api/v1/invitations/{id}/revoke,
-- the Members page's "Revoke"): `revoked` no longer means only "replaced by a newer invitation".
-- Only the comments an operator reads change.
-- Forward-only: once landed, never edit this file; add a new numbered one.
COMMENT ON TYPE invitation_state IS
    'An invitation: pending (sent, not accepted; shown as expired once expires_at has passed) -> accepted (used once, the invitee is a member) or revoked (replaced by a newer invitation to the same address, or withdrawn by an administrator; its link no longer works).';
