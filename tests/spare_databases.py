"""Test databases handed from one test to the next, reset to the template's state.

Making a database per test (`CREATE DATABASE … TEMPLATE`, a copy of ~10 MB through the WAL) and
dropping it afterwards cost the server more CPU than most tests themselves: about a third of a
second per test on Debian's PostgreSQL 15 in the PgBouncer pass, on 2 cores shared by every
worker. A finished test's database is emptied instead and handed to the worker's next test, but
only when nothing but rows could tell it from a fresh copy; anything else and it is dropped as
before:
- the catalog as the template has it: relations, columns, indexes, constraints, triggers and
  whether they fire, functions, grants, owners, settings, comments, extensions (a test that added
  a trigger, granted to a role or dropped an index leaves a database no other test may have);
- no planner statistics and the template's relpages/reltuples (no ANALYZE or VACUUM since, by a
  test or autovacuum), and no relation past the template's size or 10 pages, below which the
  planner takes any never-vacuumed table for 10 pages: a later test plans as on a fresh database;
- every row of the database's own system catalogs as the template has it: none added, none
  removed, none rewritten since (a rewritten row has a newer xmin). The digest above names what
  tests change; this catches what it does not name (a rule, a sequence's increment, a function
  made STRICT, a trigger's events, a column's collation, a large object, a publication, the
  `english` text search configuration). Statistics and sizes are updated in place by ANALYZE and
  VACUUM, xmin kept: those are the checks above;
- after the rows are deleted, the seeded rows (the global vocabulary, library settings, the
  migrations' bookkeeping) as the template has them; sequences are set back where it has them,
  and the activity counters autovacuum reads (dead rows, rows changed since ANALYZE) are zeroed
  as a new copy's are, so that autovacuum does not VACUUM or ANALYZE a later test's tables
  midway for rows earlier tests wrote.
Rows are deleted rather than truncated (TRUNCATE makes new files for every relation: as costly on
PostgreSQL 15 as the copy), with triggers and foreign keys off for the deletion
(session_replication_role = replica, as a restore does), so no audit or versioning trigger fires.
"""

from __future__ import annotations

import asyncpg
import attrs

# Everything about the current database's own objects that a test could change and a later test
# could notice, as one digest. System schemas are left out; so are the temporary schemas of
# sessions (gone with them).
CATALOG_DIGEST = """
WITH user_ns AS (
    SELECT oid, nspname FROM pg_namespace
    WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname !~ '^pg_(toast|temp|toast_temp)'
), parts AS (
    SELECT 'ns ' || n.nspname || ' ' || coalesce(n.nspacl::text, '') || ' ' || n.nspowner AS p
    FROM pg_namespace n JOIN user_ns USING (oid)
    UNION ALL
    SELECT concat_ws(' ', 'rel', c.oid::regclass, c.relkind, c.relowner, c.relacl, c.reloptions,
                     c.relpersistence, c.relrowsecurity, c.relpages, c.reltuples, c.relhasindex)
    FROM pg_class c JOIN user_ns n ON n.oid = c.relnamespace
    UNION ALL
    SELECT concat_ws(' ', 'col', a.attrelid::regclass, a.attname, a.atttypid, a.attnotnull, a.attisdropped,
                     pg_get_expr(d.adbin, d.adrelid), a.attacl)
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN user_ns n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attnum > 0
    UNION ALL
    SELECT concat_ws(' ', 'idx', i.indexrelid::regclass, i.indisvalid, pg_get_indexdef(i.indexrelid))
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN user_ns n ON n.oid = c.relnamespace
    UNION ALL
    SELECT concat_ws(' ', 'con', co.conrelid::regclass, co.conname, co.convalidated,
                     pg_get_constraintdef(co.oid))
    FROM pg_constraint co JOIN user_ns n ON n.oid = co.connamespace
    UNION ALL
    SELECT concat_ws(' ', 'trg', t.tgrelid::regclass, t.tgname, t.tgenabled, t.tgfoid)
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN user_ns n ON n.oid = c.relnamespace
    UNION ALL
    SELECT concat_ws(' ', 'fn', p.oid::regprocedure, md5(p.prosrc), p.proacl, p.proconfig, p.proowner)
    FROM pg_proc p JOIN user_ns n ON n.oid = p.pronamespace
    UNION ALL
    SELECT concat_ws(' ', 'view', c.oid::regclass, md5(pg_get_viewdef(c.oid)))
    FROM pg_class c JOIN user_ns n ON n.oid = c.relnamespace WHERE c.relkind IN ('v', 'm')
    UNION ALL
    SELECT concat_ws(' ', 'policy', pol.polrelid::regclass, pol.polname) FROM pg_policy pol
    UNION ALL
    SELECT concat_ws(' ', 'type', t.oid::regtype, t.typowner, t.typacl)
    FROM pg_type t JOIN user_ns n ON n.oid = t.typnamespace
    UNION ALL
    SELECT concat_ws(' ', 'enum', e.enumtypid::regtype, e.enumlabel, e.enumsortorder) FROM pg_enum e
    UNION ALL
    SELECT concat_ws(' ', 'ext', extname, extversion) FROM pg_extension
    UNION ALL
    SELECT concat_ws(' ', 'comment', classoid, objoid, objsubid, md5(description)) FROM pg_description
    WHERE objoid >= 16384
    UNION ALL
    SELECT concat_ws(' ', 'defacl', defaclrole, defaclnamespace, defaclobjtype, defaclacl) FROM pg_default_acl
    UNION ALL
    SELECT concat_ws(' ', 'db', datacl, datallowconn, datconnlimit, datistemplate, datdba) FROM pg_database
    WHERE datname = current_database()
    UNION ALL
    SELECT concat_ws(' ', 'dbcomment', md5(description)) FROM pg_shdescription
    WHERE classoid = 'pg_database'::regclass
      AND objoid = (SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL
    SELECT concat_ws(' ', 'setting', setrole, setconfig) FROM pg_db_role_setting s JOIN pg_database d
        ON d.oid = s.setdatabase WHERE d.datname = current_database()
    UNION ALL
    SELECT concat_ws(' ', 'stats', count(*)) FROM pg_statistic s JOIN pg_class c ON c.oid = s.starelid
        JOIN user_ns n ON n.oid = c.relnamespace
    UNION ALL
    SELECT concat_ws(' ', 'extstats', count(*)) FROM pg_statistic_ext x
        JOIN user_ns n ON n.oid = x.stxnamespace
)
SELECT md5(string_agg(p, E'\n' ORDER BY p)) FROM parts
"""

# Each user relation's size in pages, to hold against the template's.
SIZES = """
SELECT c.oid::regclass::text, pg_relation_size(c.oid) / current_setting('block_size')::int
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(temp|toast_temp)'
  AND c.relkind IN ('r', 'i', 't', 'm')
"""

# The user schemas' sequences (identity columns'), whose positions a fresh copy has from the template.
SEQUENCES = """
SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'S' AND n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1
"""

# One query over the database's own (not shared) system catalogs: per catalog, its row count and
# the sum of its rows' xmin. A copy's catalogs are the template's pages, xmin and all; a row added
# or rewritten since has a newer xmin (the session is far from wrapping the XID counter), so the
# pair stays as the template's only while no row was added, removed or rewritten. Temporary schemas
# (left for reuse by the sessions that made them) are not counted, nor statistics: autovacuum
# analyzes the system catalogs of a database used for a while, and the user tables' are the
# digest's (none but the template's).
CATALOG_ROWS_QUERY = """
SELECT string_agg(format(
    'SELECT %L AS c, count(*) AS n, coalesce(sum(xmin::text::bigint), 0) AS x FROM %s%s',
    c.relname, c.oid::regclass,
    CASE c.relname WHEN 'pg_namespace' THEN ' WHERE nspname !~ ''^pg_(toast_)?temp_''' ELSE '' END),
    ' UNION ALL ' ORDER BY c.relname)
FROM pg_class c WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'r' AND NOT c.relisshared
  AND c.relname NOT IN ('pg_statistic', 'pg_statistic_ext_data')
"""

SMALL_PAGES = 10  # the planner's floor for a never-vacuumed table (estimate_rel_size)


@attrs.frozen
class Template:
    """What a database copied from the template looks like, to check a used one against."""

    catalog: str
    catalog_rows: str
    sizes: dict[str, int]
    tables: tuple[str, ...]  # every user table, to empty
    seeded: dict[str, str]  # table -> digest of its rows
    sequences: dict[str, tuple[int, bool]]  # sequence -> (last_value, is_called)


async def _table_digest(conn: asyncpg.Connection, table: str) -> str:
    return await conn.fetchval(f"SELECT coalesce(md5(string_agg(t::text, E'\\n' ORDER BY t::text)), '') "
                               f"FROM {table} t")


async def _catalog_rows(conn: asyncpg.Connection) -> str:
    rows = await conn.fetch(await conn.fetchval(CATALOG_ROWS_QUERY))
    return " ".join(f"{r['c']}:{r['n']}:{r['x']}" for r in rows)


async def settle(conn: asyncpg.Connection) -> None:
    """ANALYZE the tables the migrations seeded (the vocabulary's hundreds of rows), as autovacuum
    would within its first minute: done by autovacuum after `describe`, it would change every copy
    made since (their statistics, reltuples) and no used database would match the template again.
    Empty tables are left never-analyzed, as a new installation's are."""
    for (table,) in await conn.fetch("SELECT relid::regclass::text FROM pg_stat_user_tables"):
        if await conn.fetchval(f"SELECT EXISTS (SELECT FROM {table})"):
            await conn.execute(f"ANALYZE {table}")


async def describe(conn: asyncpg.Connection) -> Template:
    """The template's state, read once per session on a connection to it."""
    tables = tuple(r[0] for r in await conn.fetch(
        "SELECT relid::regclass::text FROM pg_stat_user_tables ORDER BY 1"))
    seeded = {}
    for table in tables:
        if await conn.fetchval(f"SELECT EXISTS (SELECT FROM {table})"):
            seeded[table] = await _table_digest(conn, table)
    return Template(
        catalog=await conn.fetchval(CATALOG_DIGEST),
        catalog_rows=await _catalog_rows(conn),
        sizes={name: pages for name, pages in await conn.fetch(SIZES)},
        tables=tables,
        seeded=seeded,
        sequences={name: tuple(await conn.fetchrow(f"SELECT last_value, is_called FROM {name}"))
                   for (name,) in await conn.fetch(SEQUENCES)},
    )


async def reset(conn: asyncpg.Connection, template: Template) -> bool:
    """Empty the database `conn` is on back to the template's rows; False (and it must be dropped)
    when it differs from a fresh copy in anything but rows. Ends every other session on it first,
    as DROP DATABASE … WITH (FORCE) did (PgBouncer's server connections among them)."""
    # Waiting (up to 5 s each) for them to be gone: until then one may still hold a session's
    # advisory lock, its temporary tables' catalog rows, or activity counters it reports as it exits.
    await conn.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    if await conn.fetchval(CATALOG_DIGEST) != template.catalog:
        return False
    if await _catalog_rows(conn) != template.catalog_rows:
        return False
    for name, pages in await conn.fetch(SIZES):
        if pages > max(template.sizes.get(name, 0), SMALL_PAGES):
            return False
    async with conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.execute("SET LOCAL lock_timeout = '5s'")  # a session still ending holds its locks
        for table in template.tables:
            if table == "knowledge_vocabulary":  # global terms are seeded; accounts' own are not
                await conn.execute("DELETE FROM knowledge_vocabulary WHERE account_id IS NOT NULL")
            elif table not in template.seeded:
                await conn.execute(f"DELETE FROM {table}")
        for sequence, (value, called) in template.sequences.items():
            await conn.execute("SELECT setval($1::regclass, $2, $3)", sequence, value, called)
    for table, digest in template.seeded.items():
        if await _table_digest(conn, table) != digest:
            return False
    # This session's own deletions are reported when it next goes idle once told to; then every
    # counter of the database is zeroed, as a new copy starts with none.
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute("SELECT pg_stat_reset()")
    return True
