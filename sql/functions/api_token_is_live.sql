-- Whether an API token may be used: not revoked and not expired (a token without expires_at
-- never expires). The one statement of this rule; every query finding a principal by its token
-- calls it (sql/queries/auth.sql). A plain SQL expression, so the planner inlines it.
CREATE OR REPLACE FUNCTION api_token_is_live(revoked_at timestamptz, expires_at timestamptz)
RETURNS boolean
STABLE LANGUAGE sql AS $$
    SELECT revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
$$;
