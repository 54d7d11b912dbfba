-- plan_each_search --
-- For the rest of this transaction: plan every statement for its actual values. asyncpg
-- prepares statements, and after five runs PostgreSQL may switch to a generic plan that cannot
-- see the ILIKE pattern: a common term then took ~350 ms instead of ~30 ms at 1M RFPs.
-- SET LOCAL because pooled connections are not reset on release (service/db.py keep_session).
SET LOCAL plan_cache_mode = force_custom_plan;

-- limit_search_time --
-- For the rest of this transaction: a statement running longer than $1 (e.g. '500ms') is
-- cancelled (QueryCanceledError; the service answers 503). A backstop: the term rules
-- (service/domain/rfps.py search_pattern) keep searches to tens of milliseconds, this bounds
-- whatever they miss. Local to the transaction, so behind PgBouncer in transaction mode too.
SELECT set_config('statement_timeout', $1, true);

-- count_search_rfps_capped --
-- How many of an account's RFPs match an ILIKE pattern on title or description (the same
-- condition as search_rfps), counting no further than $3 rows: an exact count of a term in
-- 200,000 RFPs reads all of them (~0.6 s); this stays under ~30 ms.
SELECT count(*)::integer
  FROM (SELECT 1
          FROM rfps r
         WHERE r.account_id = $1
           AND rfp_search_text(r.title, r.description) ILIKE $2
           AND (strpos($2, E'\x1f') = 0 OR r.title ILIKE $2 OR r.description ILIKE $2)
         LIMIT $3) AS matches;
