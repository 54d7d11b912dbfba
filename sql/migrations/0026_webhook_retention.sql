-- The webhook outbox is pruned (webhooks.keep_days; service/domain/webhooks.py, Deliverer.prune):
-- events are found by age, and an event's deliveries by the event (also what deleting an event
-- cascades through: without this index each deleted event read every delivery).
CREATE INDEX IF NOT EXISTS webhook_events_created ON webhook_events (created_at);
CREATE INDEX IF NOT EXISTS webhook_deliveries_event ON webhook_deliveries (event_id);
-- A plain CREATE INDEX (migrations run in a transaction): writes to both tables wait while it is
-- built, so every webhook-emitting change does. On a large outbox, build them beforehand with
-- CREATE INDEX CONCURRENTLY under these names; IF NOT EXISTS then skips them here.
