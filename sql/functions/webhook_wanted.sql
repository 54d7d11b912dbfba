-- Whether an enabled endpoint of the account wants events of the type: what decides whether an
-- event is queued at all (enqueue_webhook_events's targets are these endpoints).
CREATE OR REPLACE FUNCTION webhook_wanted(p_account text, event_type text) RETURNS boolean
STABLE LANGUAGE sql AS $$
    SELECT EXISTS (
        SELECT 1 FROM webhook_endpoints
         WHERE account_id = p_account AND enabled AND event_type = ANY (event_types)
    )
$$;
