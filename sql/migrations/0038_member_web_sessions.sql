-- The web app signs a user with several memberships in to the account they last used there, not
-- always their oldest membership: every web session started (a sign-in, a switch of accounts, an
-- accepted invitation; sql/queries/web_app.sql insert_web_session) records the time on its
-- membership. POST /api/v1/tokens without an account_id keeps the oldest membership.
-- Forward-only: once landed, never edit this file; add a new numbered one.
ALTER TABLE members ADD COLUMN web_session_at timestamptz;
COMMENT ON COLUMN members.web_session_at IS
    'When the web app last started a session of this membership (sign-in, switch, accepted invitation); the web sign-in chooses the latest, else the oldest membership. Null: none since migration 0038.';

-- A user's memberships (the web sign-in's choice, the web app's account switcher, every page's
-- header counting them) without reading every account's members: the only index on user_id,
-- UNIQUE (account_id, user_id), leads with the account.
CREATE INDEX IF NOT EXISTS members_user ON members (user_id);
