-- The time before which every write of this database's other sessions has committed or rolled
-- back, as far as pg_stat_activity tells: the statement's time, or just before the oldest
-- transaction of another session that has written and not yet finished began. A reader that
-- takes rows stamped before it sees all it will ever see there, and resumes from it later
-- (the audit export, the bulk approval's `seen`, the duplicate run's): a row stamped earlier but
-- committed later would have been missed for good. The rows must be stamped with their write's
-- time (clock_timestamp(), or now() of a transaction that had already written: one that has
-- written nothing yet has no backend_xid and holds nothing back). pg_stat_activity shows the
-- transactions of this role's sessions (the service's, when one role runs it and its CLI).
CREATE OR REPLACE FUNCTION writes_settled_before() RETURNS timestamptz
STABLE LANGUAGE sql AS $$
    SELECT least(statement_timestamp(),
                 (SELECT min(a.xact_start) - interval '1 microsecond' FROM pg_stat_activity a
                   WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
                     AND a.datid = (SELECT oid FROM pg_database WHERE datname = current_database())))
$$;
