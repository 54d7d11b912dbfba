-- Sessions of the web app (service/web/pages): a browser signed in with e-mail and password holds
-- a random cookie; only its SHA-256 is stored, so a leaked table signs nobody in. Kept here, not in
-- the cookie, so that signing out (or an operator deleting the row) ends the session at once.
CREATE TABLE web_sessions (
    token_hash   bytea PRIMARY KEY,
    member_id    text NOT NULL REFERENCES members ON DELETE CASCADE,
    -- The synchronizer token every form and state-changing request of this session must carry.
    csrf_token   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz
);
CREATE INDEX web_sessions_member ON web_sessions (member_id);
