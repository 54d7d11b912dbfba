-- insert_import_report --
-- Keep an import's report $5 (jsonb) as $1, of account $2, imported by member $3 (null: not a
-- member) into RFP $4 (null: into the knowledge base).
INSERT INTO import_reports (id, account_id, member_id, rfp_id, report) VALUES ($1, $2, $3, $4, $5::jsonb);

-- get_import_report --
-- Report $1 of account $2 for RFP $3 (null: a knowledge base import's): its text, or no row.
SELECT report::text AS report
  FROM import_reports
 WHERE id = $1 AND account_id = $2 AND rfp_id IS NOT DISTINCT FROM $3;

-- prune_import_reports --
-- Up to $2 reports kept more than $1 days; how many went. Rows another process holds are skipped.
WITH old AS (
    SELECT id FROM import_reports WHERE created_at < now() - make_interval(days => $1::integer)
     LIMIT $2 FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM import_reports r USING old WHERE r.id = old.id RETURNING 1
)
SELECT count(*)::integer FROM gone;
