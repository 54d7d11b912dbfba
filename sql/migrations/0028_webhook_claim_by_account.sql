-- Webhook deliveries are claimed in turns between accounts (claim_webhook_delivery in
-- sql/queries/webhooks.sql), so one account's backlog no longer delays every other account's
-- deliveries: the claim finds the endpoints with pending deliveries by a skip scan of this index
-- and each one's first due deliveries by it too. It replaces webhook_deliveries_due
-- (next_attempt_at, id), which served the oldest-first claim across all accounts and nothing else
-- (and made every claim walk a disabled endpoint's due backlog).
--
-- A plain CREATE INDEX (migrations run in a transaction): deliveries wait while it is built. On a
-- large outbox, build it beforehand with CREATE INDEX CONCURRENTLY under this name; IF NOT EXISTS
-- then skips it here.
CREATE INDEX IF NOT EXISTS webhook_deliveries_pending
    ON webhook_deliveries (endpoint_id, next_attempt_at, id) WHERE state = 'pending';
DROP INDEX IF EXISTS webhook_deliveries_due;
