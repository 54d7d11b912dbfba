"""Operator CLI: `python -m service serve|migrate|psql|account|member|token|credits|subscription|rfp|kb|
audit|eval`.

With `--json` a command prints exactly one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import select
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import date
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import attrs

from . import config as config_module
from . import db, logs
from .config import Config, ConfigError
from .domain import accounts, audit
from .domain.convert import unstructure
from .domain.errors import ServiceError

log = logging.getLogger("service")


# -- database access for commands ---------------------------------------------------------


class Database:
    """The configured database (starting the embedded one if need be), migrated."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.url, self.embedded = db.database_url(config)

    async def connect(self, *, migrate: bool = True) -> asyncpg.Connection:
        conn, session = await connect(self.url, self.config)
        if migrate:
            await db.migrate(conn, session=session)
        return conn


async def connect(url: str, config: Config) -> tuple[asyncpg.Connection, bool]:
    """A connection (past a pooler when configured so: db.connect_for_admin) and whether it keeps
    its session, or a ConfigError saying which server could not be reached and why."""
    try:
        return await db.connect_for_admin(config, url)
    except (OSError, TimeoutError, ValueError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        setting = "database.url"
        if config.database.pooler == db.TRANSACTION_POOLER and config.database.direct_url:
            setting, url = "database.direct_url", config.database.direct_url  # what was tried
        where = db.shown_url(url) or "the configured URL"
        raise ConfigError(f"{setting}: cannot connect to {where}: {exc}") from None


def run_with_connection(config: Config, work: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
    database = Database(config)

    async def main() -> Any:
        conn = await database.connect()
        try:
            return await work(conn)
        finally:
            await conn.close()

    return asyncio.run(main())


def run_audited(
    config: Config,
    work: Callable[[asyncpg.Connection], Awaitable[Any]],
    action: str,
    describe: Callable[[Any], dict[str, Any]],
) -> Any:
    """`work` and its audit event (the operator as actor) in one transaction. `describe(result)`
    gives the event's account_id, record_id and after."""

    async def audited(conn: asyncpg.Connection) -> Any:
        async with conn.transaction():
            result = await work(conn)
            await audit.record(conn, audit.Actor.operator(), action, **describe(result))
        return result

    return run_with_connection(config, audited)


def emit(args: argparse.Namespace, payload: dict, text: str) -> None:
    print(json.dumps(payload) if getattr(args, "json", False) else text)


# -- serve --------------------------------------------------------------------------------


async def bootstrap_demo(url: str, config: Config) -> dict | None:
    """Migrate; then, on first start with an empty database and `server.demo_account`, create a
    demo account and return it."""
    conn, session = await connect(url, config)
    try:
        await db.migrate(conn, session=session)
        if not config.server.demo_account:
            return None
        async with conn.transaction():
            # Two service instances starting at once on an empty database make one demo, not two.
            await conn.execute("SELECT pg_advisory_xact_lock($1)", db.MIGRATION_LOCK_ID)
            if await conn.fetchval(db.query("any_account")):
                return None
            demo = await accounts.create_account(
                conn, "Demo", "admin@example.com", credits=100,
                token_ttl_days=config.auth.cli_token_ttl_days, token_source="demo",
            )
            await audit.record(
                conn, audit.Actor.operator("first-start"), "account.created",
                account_id=demo["account"]["id"], record_id=demo["account"]["id"],
                after={"name": "Demo", "credits": 100, "admin": demo["member"]["email"]},
            )
            # The web app signs in with a password: the demo admin gets one, shown once.
            demo["password"] = secrets.token_urlsafe(12)
            await accounts.set_password(conn, demo["member"]["user_id"], demo["password"])
            return demo
    finally:
        await conn.close()


def print_demo(demo: dict, config: Config) -> None:
    base = config.server.web_base_url.rstrip("/")  # http://localhost:{port} unless set
    token = demo["token"]
    print(
        f"""
First start: created the demo account {demo['account']['id']} with admin {demo['member']['email']}.
Its API token (shown once; keep it):

    {token}

The web app: {base}/signin as {demo['member']['email']} with the password {demo['password']}

Try:
    curl -s -X POST {base}/api/v1/rfps -H 'Authorization: Bearer {token}' \\
         -H 'Content-Type: application/json' -d '{{"rfp": {{"title": "Acme security review"}}}}'
    curl -s '{base}/api/v1/rfps/search?query=acme' -H 'Authorization: Bearer {token}'
""",
        flush=True,
    )


def cmd_serve(args: argparse.Namespace, config: Config) -> int:
    overrides: dict[str, Any] = {}
    if args.host:
        overrides["host"] = args.host
    if args.port is not None:
        overrides["port"] = args.port
    if args.workers is not None:
        overrides["workers"] = args.workers
    if overrides:  # read again with the options on top, so that what follows the port (an
        # empty web_base_url) follows --port as it follows PORT; checked as config.toml is
        config = config_module.load(args.config, overrides={"server": overrides})
    from .server import check_can_listen, check_rate_limits, run_workers, serve_worker  # serve only

    check_rate_limits(config)  # the settings only the app knows, before any database work
    check_can_listen(config)
    database = Database(config)
    config = attrs.evolve(config, database=attrs.evolve(config.database, url=database.url))
    demo = asyncio.run(bootstrap_demo(database.url, config))
    if demo:
        print_demo(demo, config)
    where = "embedded PostgreSQL in " + str(database.embedded.pgdata) if database.embedded else "DATABASE_URL"
    log.info(
        "starting on http://%s:%s with %d worker(s), database: %s",
        config.server.host, config.server.port, config.server.workers, where,
    )
    try:
        if config.server.workers == 1:
            serve_worker(config)
            status = 0
        else:
            status = run_workers(config)
    finally:
        if database.embedded:
            if database.embedded.stop():
                log.info("embedded PostgreSQL stopped")
            else:
                log.info("embedded PostgreSQL left running: another process still uses it "
                         "(the last one to let go stops it)")
    return status


# -- other commands -----------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace, config: Config) -> int:
    database = Database(config)

    async def work() -> list[str]:
        conn, session = await connect(database.url, config)
        try:
            # The functions are re-created even when their files did not change: the command
            # that repairs one changed in the database by hand (starts leave them be).
            return await db.migrate(conn, session=session, recreate_functions=True)
        finally:
            await conn.close()

    applied = asyncio.run(work())
    emit(args, {"applied": applied}, f"applied: {', '.join(applied) or 'nothing (up to date)'}")
    return 0


def cmd_psql(args: argparse.Namespace, config: Config) -> int:
    database = Database(config)

    async def migrated() -> None:  # so that the tables are there to look at
        await (await database.connect()).close()

    asyncio.run(migrated())
    # The wheel's psql works with DATABASE_URL too, so no client needs installing.
    psql = str(db.psql_path())
    # Not exec: the embedded server is stopped when this process exits, after psql.
    import subprocess

    return subprocess.call([psql, database.url, *args.psql_args])


def cmd_account_create(args: argparse.Namespace, config: Config) -> int:
    result = run_audited(
        config, lambda c: accounts.create_account(
            c, args.name, args.admin_email, args.credits,
            token_ttl_days=config.auth.cli_token_ttl_days,
        ),
        "account.created", lambda r: {
            "account_id": r["account"]["id"], "record_id": r["account"]["id"],
            "after": {"name": r["account"]["name"], "credits": r["account"]["credits"],
                      "admin": r["member"]["email"]}},
    )
    emit(
        args,
        result,
        f"account {result['account']['id']} ({result['account']['name']}), admin "
        f"{result['member']['email']} ({result['member']['id']}), token:\n{result['token']}",
    )
    return 0


def cmd_member_create(args: argparse.Namespace, config: Config) -> int:
    member = run_audited(
        config, lambda c: accounts.add_member(c, args.account, args.email, args.role),
        "member.created", lambda m: {
            "account_id": args.account, "record_id": m["id"],
            "after": {"email": m["email"], "role": m["role"]}},
    )
    emit(args, {"member": member}, f"member {member['id']}: {member['email']} ({member['role']})")
    return 0


def cmd_token_create(args: argparse.Namespace, config: Config) -> int:
    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    ttl_days = config.auth.cli_token_ttl_days if args.ttl_days is None else args.ttl_days
    token = run_audited(
        config, lambda c: accounts.create_token(c, args.account, args.email, scopes, ttl_days),
        "token.created", lambda _: {
            "account_id": args.account, "after": {"email": args.email, "scopes": sorted(scopes),
                                                  "ttl_days": ttl_days}},
    )
    emit(args, {"token": token}, token)
    return 0


# -- member and token management (issue 17) ---------------------------------------------------


def _token_line(token: Any) -> str:
    expires = token.expires_at.isoformat() if token.expires_at else "never"
    return (f"{token.id}\t{token.state}\t{','.join(token.scopes)}\t{token.source}\t"
            f"created {token.created_at.isoformat()}\texpires {expires}")


def cmd_token_list(args: argparse.Namespace, config: Config) -> int:
    tokens = run_with_connection(
        config, lambda c: accounts.list_member_tokens(c, args.account, args.email)
    )
    emit(args, {"tokens": unstructure(tokens)}, "\n".join(_token_line(t) for t in tokens)
         or "no tokens")
    return 0


def cmd_token_revoke(args: argparse.Namespace, config: Config) -> int:
    token = run_audited(
        config, lambda c: accounts.revoke_member_token(c, args.account, args.id),
        "token.revoked", lambda t: {"account_id": args.account, "record_id": str(t.id)},
    )
    emit(args, {"token": unstructure(token)}, f"revoked token {token.id}")
    return 0


def cmd_member_remove(args: argparse.Namespace, config: Config) -> int:
    run_audited(
        config, lambda c: accounts.remove_member_by_email(c, args.account, args.email),
        "member.removed", lambda _: {"account_id": args.account,
                                     "before": {"email": args.email}},
    )
    emit(args, {"removed": args.email}, f"removed {args.email} from {args.account}; "
         "their tokens no longer work")
    return 0


def cmd_member_role(args: argparse.Namespace, config: Config) -> int:
    member = run_audited(
        config, lambda c: accounts.change_role_by_email(c, args.account, args.email, args.role),
        "member.role_changed", lambda m: {"account_id": args.account, "record_id": m.id,
                                          "after": {"role": m.role}},
    )
    emit(args, {"member": unstructure(member)}, f"member {member.id}: {member.email} ({member.role})")
    return 0


def cmd_mail_show(args: argparse.Namespace, config: Config) -> int:
    """Held mail (no SMTP host configured): the list, or one message with its body."""

    async def work(conn: asyncpg.Connection) -> Any:
        if args.id is None:
            return await conn.fetch(db.query("held_mail"), 50)
        row = await conn.fetchrow(db.query("mail_by_id"), args.id)
        if row is None:
            raise accounts.OperatorError(f"no mail {args.id}")
        return row

    result = run_with_connection(config, work)
    if args.id is None:
        print("\n".join(f"{r['id']}\t{r['created_at'].isoformat()}\t{r['recipient']}\t{r['subject']}"
                        for r in result) or "no held mail")
    else:
        print(f"To: {result['recipient']}\nSubject: {result['subject']}\nState: {result['state']}\n\n"
              f"{result['body'] or '(body erased: the message was sent or given up)'}")
    return 0


def cmd_credits_add(args: argparse.Namespace, config: Config) -> int:
    if args.amount == 0:
        raise accounts.OperatorError("--amount must not be 0")

    async def work(conn: asyncpg.Connection) -> int:
        try:
            reason = "grant" if args.amount > 0 else "adjustment"
            return await accounts.change_credits(conn, args.account, args.amount, reason)
        except asyncpg.CheckViolationError:
            raise accounts.OperatorError(
                f"{args.account} has fewer than {-args.amount} credits to remove"
            ) from None

    balance = run_audited(config, work, "credits.changed", lambda b: {
        "account_id": args.account, "record_id": args.account,
        "after": {"amount": args.amount, "balance": b}})
    emit(args, {"account": args.account, "credits": balance}, f"{args.account}: {balance} credits")
    return 0


def cmd_subscription_set(args: argparse.Namespace, config: Config) -> int:
    run_audited(
        config, lambda c: accounts.set_subscription(c, args.account, args.status),
        "subscription.changed", lambda _: {
            "account_id": args.account, "record_id": args.account,
            "after": {"subscription_status": args.status}},
    )
    emit(args, {"account": args.account, "subscription": args.status},
         f"{args.account}: subscription {args.status}")
    return 0


def cmd_rfp_create(args: argparse.Namespace, config: Config) -> int:
    from .domain.convert import structure
    from .domain.rfps import RfpCreate, create_rfp

    raw = {"title": args.title, "description": args.description, "framework": args.framework,
           "deadline": args.deadline, "context": args.context}
    data = structure({k: v for k, v in raw.items() if v is not None}, RfpCreate)

    async def work(conn: asyncpg.Connection) -> str:
        await accounts.require_account(conn, args.account)
        member = await conn.fetchrow(db.query("member_by_email"), args.account, args.owner_email)
        if member is None:
            raise accounts.OperatorError(f"{args.owner_email} is not a member of {args.account}")
        return await create_rfp(
            conn, account_id=args.account, owner_user_id=member["user_id"], data=data
        )

    rfp_id = run_audited(config, work, "rfp.created", lambda r: {
        "account_id": args.account, "record_id": r,
        "after": {"title": data.title.strip(), "owner": args.owner_email}})
    emit(args, {"id": rfp_id}, rfp_id)
    return 0


def cmd_rfp_import(args: argparse.Namespace, config: Config) -> int:
    from .domain import questionnaires, rfp_items

    options = questionnaires.ImportOptions(
        sheet=args.sheet, question_column=args.question_column,
        section_column=args.section_column, header_row=args.header_row,
        answer_column=args.answer_column,
    )
    progress = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        progress = tqdm(desc=f"reading {Path(args.file).name}", unit=" rows", file=sys.stderr)
    try:
        with open(args.file, "rb") as file:
            found = questionnaires.parse(file, options, filename=args.file,
                                         progress=progress.update if progress else None,
                                         limits=questionnaires.Limits.of(config.uploads))
    except OSError as exc:
        raise accounts.OperatorError(f"cannot read {args.file}: {exc.strerror}") from None
    finally:
        if progress:
            progress.close()

    kept = _kept_questionnaire(args.file, config.library.max_kept_file_bytes)

    async def work(conn: asyncpg.Connection) -> dict:
        await accounts.require_account(conn, args.account)
        return await rfp_items.import_questionnaire(conn, args.account, args.rfp, found, kept)

    report = run_audited(config, work, "rfp.items_imported", lambda r: {
        "account_id": args.account, "record_id": args.rfp,
        "after": {"filename": Path(args.file).name, "imported": r["imported"],
                  "skipped": r["skipped_count"]}})
    skipped = "".join(f"\n  row {s['row']}: {s['reason']}" for s in report["skipped"])
    emit(args, {"import": report},
         f"imported {report['imported']} items into {args.rfp} from "
         f"{'sheet ' + repr(report['sheet']) + ', ' if report['sheet'] else ''}column "
         f"{report['question_column']!r}; skipped {report['skipped_count']} rows{skipped}")
    return 0


def _kept_questionnaire(path: str, limit: int) -> Any:
    """The questionnaire file, kept for `rfp export --format original` (write-back, issue 20)."""
    from .domain import writeback

    try:
        if Path(path).stat().st_size > limit:
            return None
        content = Path(path).read_bytes()
    except OSError as exc:
        raise accounts.OperatorError(f"cannot read {path}: {exc.strerror}") from None
    return writeback.kept_file(content, None, Path(path).name, limit)


def _export_original(args: argparse.Namespace, config: Config) -> int:
    from .domain import questionnaires, writeback
    from .domain.rfps import fetch_rfp

    options = writeback.WriteOptions(drafted=args.answers == "drafted", unanswered=args.unanswered)

    async def work(conn: asyncpg.Connection) -> tuple[Any, list]:
        await accounts.require_account(conn, args.account)
        await fetch_rfp(conn, args.rfp, args.account)
        return await writeback.load(conn, args.account, args.rfp, options)

    file, cells = run_with_connection(config, work)
    try:
        written_back = writeback.write(file, cells, questionnaires.Limits.of(config.uploads))
        Path(args.output).write_bytes(written_back)
    except OSError as exc:
        raise accounts.OperatorError(f"cannot write {args.output}: {exc.strerror}") from None
    written = sum(1 for cell in cells if cell.answered and cell.text is not None)
    marked = sum(1 for cell in cells if not cell.answered and cell.text is not None)
    emit(args, {"rfp_id": args.rfp, "format": "original", "output": args.output, "items": len(cells),
                "written": written, "marked_unanswered": marked},
         f"wrote {written} of {len(cells)} answers of {args.rfp} into {args.output}"
         + (f" ({marked} left unanswered, given {args.unanswered!r})" if marked else ""))
    return 0


def cmd_rfp_export(args: argparse.Namespace, config: Config) -> int:
    from .domain import rfp_items
    from .domain.rfps import fetch_rfp

    if args.format == "original":
        return _export_original(args, config)

    async def work(conn: asyncpg.Connection) -> int:
        await accounts.require_account(conn, args.account)
        rfp = await fetch_rfp(conn, args.rfp, args.account)
        await audit.record(conn, audit.Actor.operator(), "rfp.exported", account_id=args.account,
                           record_id=args.rfp, after={"format": args.format})
        return await rfp_items.spool_export(conn, rfp, args.format, spool)

    # The web's export, spooled; the output is written only once it is whole.
    with tempfile.TemporaryFile() as spool:
        items = run_with_connection(config, work)
        spool.seek(0)
        try:
            with open(args.output, "wb") as out:
                shutil.copyfileobj(spool, out)
        except OSError as exc:
            raise accounts.OperatorError(f"cannot write {args.output}: {exc.strerror}") from None
    emit(args, {"rfp_id": args.rfp, "format": args.format, "output": args.output, "items": items},
         f"exported {items} items of {args.rfp} to {args.output}")
    return 0


def cmd_kb_import(args: argparse.Namespace, config: Config) -> int:
    from .domain.knowledge import import_csv, parse_upload
    from .domain.uploads import Limits

    # Read whole, as the API's import is, and so at most as much: a 400 MB file read whole grew
    # the CLI to 2.4 GB before its rows were refused (on the service's host, sharing its memory).
    limit = config.server.max_upload_bytes
    try:
        with open(args.file, "rb") as handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise accounts.OperatorError(f"cannot read {args.file}: {exc.strerror}") from None
    if len(raw) > limit:
        raise accounts.OperatorError(
            f"{args.file} is larger than server.max_upload_bytes ({limit:,} bytes), the limit of "
            "an import through the API too; split the file, or raise the setting"
        )
    parsed = parse_upload(raw, Limits.of(config.uploads))

    async def work(conn: asyncpg.Connection) -> Any:
        await accounts.require_account(conn, args.account)
        return await import_csv(conn, args.account, parsed, audit.Actor.operator())

    report = run_with_connection(config, work)
    lines = [f"imported {report.imported} ({report.created} new, {report.updated} updated), "
             f"rejected {len(report.rejected)}"]
    lines += [f"  row {r.row}: {r.reason}" for r in report.rejected]
    emit(args, unstructure(report), "\n".join(lines))
    return 0


def _eval_sets(args: argparse.Namespace) -> dict[str, tuple[Path, Path, Path]]:
    """The labelled sets to evaluate: each --set folder (kb.csv, dev_questions.csv,
    dev_labels.csv), or the one set of --kb/--questions/--labels."""
    sets: dict[str, tuple[Path, Path, Path]] = {}
    for folder in args.set or ():
        base = Path(folder)
        name = base.name if base.name not in sets else str(base)
        sets[name] = (base / "kb.csv", base / "dev_questions.csv", base / "dev_labels.csv")
    if args.kb or args.questions or args.labels:
        if not (args.kb and args.questions and args.labels):
            raise accounts.OperatorError("--kb, --questions and --labels go together")
        sets[Path(args.kb).parent.name or "set"] = (Path(args.kb), Path(args.questions),
                                                    Path(args.labels))
    if not sets:
        raise accounts.OperatorError("give --set FOLDER (repeatable) or --kb, --questions and --labels")
    for paths in sets.values():
        for path in paths:
            if not path.is_file():
                raise accounts.OperatorError(f"no such file: {path}")
    return sets


def _print_figures(title: str, figures: dict[str, Any]) -> None:
    print(f"  {title:28} hit@1 {figures['hit_at_1']}  hit@5 {figures['hit_at_5']}  decision "
          f"accuracy {figures['decision_accuracy']} ({figures['decisions_right']}/"
          f"{figures['questions']})  confidence ≥ 0.8: {figures['confident_right']}/"
          f"{figures['confident_answers']} right")
    if "repeated" in figures:
        spread = figures["repeated"]
        print(f"  {'':28} decisions right over {spread['splits']} fold assignments: mean "
              f"{spread['mean']} of {spread['questions']} (lowest {spread['low']}, highest "
              f"{spread['high']})")


def _print_calibration(title: str, figures: dict[str, Any]) -> None:
    print(f"calibration, {title} (confidence: questions, share whose first reference is right):")
    for row in figures["calibration"]:
        if row["questions"]:
            share = row["first_reference_right"] / row["questions"]
            print(f"  {row['confidence']}: {row['questions']:4}  {share:.2f}  "
                  f"(mean confidence {row['mean_confidence']:.2f})")


def cmd_eval(args: argparse.Namespace, config: Config) -> int:
    from .answering import decision as coverage
    from .answering import evaluation

    sets = _eval_sets(args)
    database = Database(config)
    # Scratch databases are made and used on the server itself, never through a pooler.
    server_url = db.session_url(config) if not database.embedded else database.url
    if server_url is None:
        raise ConfigError("eval creates scratch databases on the server itself: with database.pooler "
                          "set, set database.direct_url too")
    embeddings_config = config.embeddings
    if args.embeddings:
        embeddings_config = attrs.evolve(embeddings_config, backend=args.embeddings)

    async def run() -> dict[str, dict]:
        from .answering.embeddings import make_embedder

        results = {}
        async with aiohttp.ClientSession() as session:
            embedder = make_embedder(embeddings_config, session)
            for name, paths in sets.items():
                results[name] = await evaluation.evaluate(
                    server_url, *paths, config=config.questions, embedder=embedder,
                    review=args.review)
        return results

    if args.ablate:
        table = asyncio.run(evaluation.ablate(server_url, sets, config.questions))
        if args.json:
            print(json.dumps({"ablation": table}))
            return 0
        print("questions right without each knob (as shipped first): hit@1 / hit@5 / decisions "
              "(cross-validated), per set")
        for row in table:
            print(f"  {row['variant']:56} " + "   ".join(
                f"{name} {row[name]['hit1']}/{row[name]['hit5']}/{row[name]['decisions']}"
                for name in sets))
        return 0
    results = asyncio.run(run())
    labelled = {name: (results[name], evaluation.read_labels(paths[2]))
                for name, paths in sets.items()}
    output: dict[str, Any] = {}
    fitted = None
    if args.fit:
        try:
            fitted = evaluation.fit_decision(
                labelled, prune_features=args.prune,
                features=tuple(f for f in (args.features or "").split(",") if f))
        except ValueError as exc:
            raise accounts.OperatorError(str(exc)) from None
        if args.write_model:
            Path(args.write_model).write_text(json.dumps(fitted["model"], indent=2) + "\n")
        output["fit"] = fitted
        cross = fitted["cross_validated"]
    else:
        cross = evaluation.cross_validate(labelled)
    output["cross_validated"] = cross
    output["in_sample"] = evaluation.in_sample(labelled)
    if args.json:
        keep = ("id", "references", "sufficient_context", "confidence", "verbatim_answer", "answer",
                "requires_attention", "correct")
        for result in results.values():
            result["questions"] = [{k: q.get(k) for k in keep} for q in result["questions"]]
        if len(results) == 1:
            output |= next(iter(results.values()))
        else:
            output["sets"] = results
        print(json.dumps(output))
        return 0
    for name, result in results.items():
        if args.verbose or len(results) == 1:
            for q in result["questions"]:
                mark = "ok " if q.get("correct") else ("BAD" if "correct" in q else "   ")
                print(f"{mark} {name}:{q['id']:12} sufficient={q['sufficient_context']!s:5} "
                      f"confidence={q['confidence']:.2f} references={', '.join(q['references'][:3])}")
    dense = any(r.dense is not None for result in results.values()
                for q in result["questions"] for r in q["reference_objects"][:1])
    model, path = ((coverage.DENSE_MODEL, coverage.DENSE_MODEL_PATH)
                   if dense and coverage.DENSE_MODEL is not None else (coverage.MODEL, coverage.MODEL_PATH))
    print(f"\nretrieval: {'dense fusion (' + embeddings_config.backend + ')' if dense else 'lexical'}; "
          f"decision model: {path.name} features {', '.join(model.coefficients)}; cap {model.cap}")
    for name, result in results.items():
        print(f"\n{name}: {len(result['questions'])} questions, knowledge base "
              f"{result['knowledge_base']['imported']} entries")
        _print_figures("in-sample (as shipped)", output["in_sample"][name])
        if cross:
            _print_figures(f"cross-validated ({evaluation.FOLDS}-fold)", cross[name])
        latency = result["latency_ms"]
        print(f"  latency per question (ms): p50 {latency['p50']}  p95 {latency['p95']}  "
              f"p99 {latency['p99']}")
        if "review" in result:
            review = result["review"]
            print(f"  review: accepted the labelled entry for {review['reviewed']} questions; "
                  f"asked again: hit@1 {review['before']['hit_at_1']} -> {review['after']['hit_at_1']}"
                  f", mean confidence {review['before']['mean_confidence']} -> "
                  f"{review['after']['mean_confidence']}; reviewed questions hit@1 "
                  f"{review['reviewed_after_hit_at_1']}, the others "
                  f"{review['others_before_hit_at_1']} -> {review['others_after_hit_at_1']}; "
                  f"entries added {review['entries_added']}")
    if cross and "all" in cross:
        print("\nall sets:")
        _print_figures(f"cross-validated ({evaluation.FOLDS}-fold)", cross["all"])
    print("\n(hit@1 and hit@5 are the same in-sample and cross-validated: no fitted parameter "
          "touches the ranking; the decision and its confidence are what is fitted.)")
    if cross:
        pooled = cross.get("all") or next(iter(cross.values()))
        print()
        _print_calibration("cross-validated, all sets", pooled)
    pooled_in = output["in_sample"].get("all") or next(iter(output["in_sample"].values()))
    _print_calibration("in-sample (as shipped), all sets", pooled_in)
    if fitted:
        print(f"\nfit: L2 {fitted['l2']}, features {', '.join(fitted['features'])}, "
              f"threshold {fitted['model']['threshold']}, cap {fitted['model']['cap']}")
        for step in fitted["pruning"]:
            print(f"  without {step['without']}: {step['decisions_right']} right decisions "
                  f"(with it {step['with']})")
        for pair, figures in fitted["set_to_set"].items():
            _print_figures(f"fitted {pair}", figures)
        print(json.dumps(fitted["model"], indent=2))
        if args.write_model:
            print(f"written to {args.write_model}")
    return 0


# -- argument parsing ---------------------------------------------------------------------


def cmd_audit_export(args: argparse.Namespace, config: Config) -> int:
    """An account's audit events since a time, oldest first, as JSON lines."""
    from datetime import UTC, datetime

    try:
        since = datetime.fromisoformat(args.since.replace("Z", "+00:00"))
    except ValueError:
        raise accounts.OperatorError(
            f"--since must be a date or time like 2030-01-31 or 2030-01-31T09:00:00Z; got {args.since!r}"
        ) from None
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    if (utc := audit.in_utc(since)) is None:
        raise accounts.OperatorError(f"--since {audit.OUT_OF_RANGE}; got {args.since!r}")

    async def work(conn: asyncpg.Connection) -> tuple[list[dict[str, Any]], datetime]:
        await accounts.require_account(conn, args.account)
        return await audit.export_events(conn, args.account, utc)

    events, settled = run_with_connection(config, work)
    out = sys.stdout if args.output in (None, "-") else None
    try:
        handle = out or open(args.output, "w", encoding="utf-8")
    except OSError as exc:
        raise accounts.OperatorError(f"cannot write {args.output}: {exc.strerror}") from None
    try:
        for event in events:
            handle.write(json.dumps(event, ensure_ascii=False) + "\n")
    finally:
        if out is None:
            handle.close()
    # Where the next export goes on from, to miss nothing and repeat nothing (audit.export_events).
    until = settled.astimezone(UTC).isoformat().replace("+00:00", "Z")
    print(f"exported {len(events)} audit events of {args.account}"
          + (f" to {args.output}" if out is None else "")
          + f", complete up to {until}: export what follows with --since {until}", file=sys.stderr)
    return 0


def _iso_date(text: str) -> str:
    date.fromisoformat(text)
    return text


def cmd_kb_stale(args: argparse.Namespace, config: Config) -> int:
    """The entries past their review date, most overdue first (library care, issue 20)."""

    from .domain import library

    async def work(conn: asyncpg.Connection) -> list[dict]:
        await accounts.require_account(conn, args.account)
        return await library.stale_items(conn, args.account)

    rows = run_with_connection(config, work)
    payload = {"stale": [
        {"id": r["id"], "review_by": r["review_by"].isoformat(), "owner_id": r["owner_member_id"],
         "owner_email": r["owner_email"], "question": r["question"], "title": r["title"]}
        for r in rows
    ]}
    lines = [f"{len(rows)} stale entr{'y' if len(rows) == 1 else 'ies'}"]
    lines += [f"  {r['id']}  review by {r['review_by']}  {r['owner_email'] or '(no owner)'}  "
              f"{(r['question'] or r['title'] or '')[:80]}" for r in rows]
    emit(args, payload, "\n".join(lines))
    return 0


def cmd_housekeeping(args: argparse.Namespace, config: Config) -> int:
    """One housekeeping sweep now (what every service process does hourly): how many rows of
    each kind were deleted. Exit status 1 when a step failed (its error is logged)."""
    from .domain import housekeeping

    database = Database(config)

    async def main() -> dict[str, int | None]:
        await (await database.connect()).close()  # (migrated)
        pool = await db.create_pool(database.url, config, min_size=1, max_size=2)
        try:
            return await housekeeping.sweep(pool, config)
        finally:
            await pool.close()

    deleted = asyncio.run(main())
    emit(args, {"deleted": deleted}, "\n".join(
        f"{what.replace('_', ' ')}: {'failed' if count is None else count}"
        for what, count in deleted.items()))
    return 1 if None in deleted.values() else 0


def cmd_kb_prune_embeddings(args: argparse.Namespace, config: Config) -> int:
    """Delete the vectors of embedding models other than the configured one, once it covers every
    entry (after a change of embeddings backend, model or onnx_kernels)."""
    from .answering import embeddings

    model = embeddings.configured_model(config.embeddings)
    if model is None:
        print("error: embeddings.backend is \"none\": no model's vectors to keep", file=sys.stderr)
        return 2

    async def work(conn: asyncpg.Connection) -> tuple[int, int] | None:
        if not await conn.fetchval(db.query("embeddings_available")):
            return None
        return await embeddings.prune_other_models(conn, model)

    result = run_with_connection(config, work)
    if result is None:
        print("error: this database has no embeddings (pgvector is not installed)", file=sys.stderr)
        return 2
    missing, deleted = result
    if missing:
        print(f"error: {missing} entr{'y has' if missing == 1 else 'ies have'} no current vector of "
              f"{model} yet: nothing deleted (let the service's indexer finish, then run this again)",
              file=sys.stderr)
        return 1
    emit(args, {"model": model, "deleted": deleted},
         f"deleted {deleted} vector(s) of models other than {model}")
    return 0


def cmd_kb_duplicates(args: argparse.Namespace, config: Config) -> int:
    """Find near-duplicate and conflicting entries now, and print them (library care, issue 20)."""
    from .domain import library

    async def work(conn: asyncpg.Connection) -> tuple[Any, dict]:
        await accounts.require_account(conn, args.account)
        run = await library.find_duplicates(
            conn, args.account, duplicate_similarity=config.library.duplicate_similarity,
            conflict_similarity=config.library.conflict_similarity,
        )
        return run, await library.duplicate_report(conn, args.account)

    run, report = run_with_connection(config, work)
    if run is None:
        raise accounts.OperatorError("a duplicate run for this account is under way; try again shortly")
    report["computed_at"] = report["computed_at"].isoformat() if report["computed_at"] else None
    lines = [f"{len(report['pairs'])} pair(s) among {run.entries} entries in {run.seconds:.2f} s"
             + (f" (a run keeps the first {library.MAX_FINDINGS:,} of the {run.findings:,} found,"
                " conflicts first)" if run.findings > library.MAX_FINDINGS else "")]
    for pair in report["pairs"]:
        a, b = pair["items"]
        lines.append(f"  {pair['kind']:9}  {a['id']}  {b['id']}  {pair['similarity']:.2f}  {pair['reason']}")
    emit(args, report, "\n".join(lines))
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m service", description=__doc__)
    top.add_argument("--config", help="config file (default: config.toml, or $RFP_CONFIG)")
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, handler: Callable, parent: Any = sub, **kwargs: Any) -> Any:
        p = parent.add_parser(name, **kwargs)
        p.set_defaults(handler=handler)
        return p

    p = command("serve", cmd_serve, help="run the HTTP service")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--workers", type=int)
    p = command("migrate", cmd_migrate, help="apply pending migrations")
    p.add_argument("--json", action="store_true")
    p = command("psql", cmd_psql, help="open psql on the service's database; extra arguments go to psql")
    p.add_argument("psql_args", nargs=argparse.REMAINDER)

    group = sub.add_parser("account", help="accounts").add_subparsers(dest="action", required=True)
    p = command("create", cmd_account_create, group, help="create an account with its admin")
    p.add_argument("--name", required=True)
    p.add_argument("--admin-email", required=True)
    p.add_argument("--credits", type=int, default=0)
    p.add_argument("--json", action="store_true")

    group = sub.add_parser("member", help="members").add_subparsers(dest="action", required=True)
    p = command("create", cmd_member_create, group, help="add a member to an account")
    p.add_argument("--account", required=True)
    p.add_argument("--email", required=True)
    p.add_argument("--role", required=True, choices=["admin", "member", "viewer"])
    p.add_argument("--json", action="store_true")
    p = command("remove", cmd_member_remove, group, help="remove a member; their tokens stop working")
    p.add_argument("--account", required=True)
    p.add_argument("--email", required=True)
    p.add_argument("--json", action="store_true")
    p = command("role", cmd_member_role, group, help="change a member's role")
    p.add_argument("--account", required=True)
    p.add_argument("--email", required=True)
    p.add_argument("--role", required=True, choices=["admin", "member", "viewer"])
    p.add_argument("--json", action="store_true")

    group = sub.add_parser("token", help="API tokens").add_subparsers(dest="action", required=True)
    p = command("create", cmd_token_create, group, help="create a token for a member")
    p.add_argument("--account", required=True)
    p.add_argument("--email", required=True)
    p.add_argument("--scopes", default="read,write")
    p.add_argument("--ttl-days", type=int, default=None,
                   help="days until it expires; 0 = never (default: auth.cli_token_ttl_days)")
    p.add_argument("--json", action="store_true")
    p = command("list", cmd_token_list, group, help="list a member's tokens (never the tokens themselves)")
    p.add_argument("--account", required=True)
    p.add_argument("--email", required=True)
    p.add_argument("--json", action="store_true")
    p = command("revoke", cmd_token_revoke, group, help="revoke a token by its id (from `token list`)")
    p.add_argument("--account", required=True)
    p.add_argument("id", type=int)
    p.add_argument("--json", action="store_true")

    group = sub.add_parser("mail", help="outgoing mail").add_subparsers(dest="action", required=True)
    p = command("show", cmd_mail_show, group,
                help="held mail (no SMTP host configured): list it, or show one message by id")
    p.add_argument("id", type=int, nargs="?")

    group = sub.add_parser("credits", help="credits").add_subparsers(dest="action", required=True)
    p = command("add", cmd_credits_add, group, help="grant credits to an account")
    p.add_argument("--account", required=True)
    p.add_argument("--amount", type=int, required=True)
    p.add_argument("--json", action="store_true")

    group = sub.add_parser("subscription", help="subscription").add_subparsers(
        dest="action", required=True
    )
    p = command("set", cmd_subscription_set, group, help="activate or deactivate an account")
    p.add_argument("--account", required=True)
    p.add_argument("--status", required=True, choices=["active", "inactive"])
    p.add_argument("--json", action="store_true")

    group = sub.add_parser("rfp", help="RFPs").add_subparsers(dest="action", required=True)
    p = command("create", cmd_rfp_create, group, help="create an RFP")
    p.add_argument("--account", required=True)
    p.add_argument("--owner-email", required=True)
    p.add_argument("--title", required=True)
    p.add_argument("--description")
    p.add_argument("--framework")
    p.add_argument("--deadline", type=_iso_date)
    p.add_argument("--context")
    p.add_argument("--json", action="store_true")
    p = command("import", cmd_rfp_import, group, help="import a CSV or XLSX questionnaire as items")
    p.add_argument("--account", required=True)
    p.add_argument("--rfp", required=True)
    p.add_argument("file")
    p.add_argument("--sheet", help="sheet name (default: the first with a question-like header)")
    p.add_argument("--question-column", help="header name or column letter")
    p.add_argument("--section-column", help="header name or column letter")
    p.add_argument("--header-row", type=int, help="1-based header row; 0 = no header row")
    p.add_argument("--answer-column", help="header name or column letter answers are written back "
                   "into by export --format original (default: detected)")
    p.add_argument("--json", action="store_true")
    p = command("export", cmd_rfp_export, group, help="export an RFP's items as CSV or XLSX")
    p.add_argument("--account", required=True)
    p.add_argument("--rfp", required=True)
    p.add_argument("--format", required=True, choices=["csv", "xlsx", "original"],
                   help="original: the imported questionnaire with the answers in their cells")
    p.add_argument("--answers", choices=["approved", "drafted"], default="approved",
                   help="with --format original: only approved answers (default) or every answer")
    p.add_argument("--unanswered", help="with --format original: text for cells left unanswered")
    p.add_argument("--output", required=True, help="file to write")
    p.add_argument("--json", action="store_true")

    p = command("housekeeping", cmd_housekeeping,
                help="delete now what nothing reads any more (what the service does hourly)")
    p.add_argument("--json", action="store_true")

    group = sub.add_parser("kb", help="knowledge base").add_subparsers(dest="action", required=True)
    p = command("import", cmd_kb_import, group, help="import knowledge-base entries from a CSV file")
    p.add_argument("--account", required=True)
    p.add_argument("file", metavar="FILE.csv")
    p.add_argument("--json", action="store_true")
    p = command("stale", cmd_kb_stale, group, help="entries past their review date")
    p.add_argument("--account", required=True)
    p.add_argument("--json", action="store_true")
    p = command("prune-embeddings", cmd_kb_prune_embeddings, group,
                help="delete other models' vectors once the configured model covers every entry")
    p.add_argument("--json", action="store_true")
    p = command("duplicates", cmd_kb_duplicates, group,
                help="find near-duplicate and conflicting entries now")
    p.add_argument("--account", required=True)
    p.add_argument("--json", action="store_true")

    group = sub.add_parser("audit", help="the audit log").add_subparsers(dest="action", required=True)
    p = command("export", cmd_audit_export, group,
                help="an account's audit events as JSON lines, oldest first")
    p.add_argument("--account", required=True)
    p.add_argument("--since", required=True, help="date or RFC 3339 time (UTC when no zone)")
    p.add_argument("--output", help="file to write (default: standard output)")

    p = command("eval", cmd_eval, help="measure answer quality on a labelled question set")
    p.add_argument("--set", action="append", metavar="FOLDER",
                   help="a labelled set: FOLDER/kb.csv, dev_questions.csv, dev_labels.csv "
                        "(repeatable; figures per set and over all)")
    p.add_argument("--kb", metavar="KB.csv")
    p.add_argument("--questions", metavar="Q.csv")
    p.add_argument("--labels", metavar="L.csv")
    p.add_argument("--json", action="store_true")
    p.add_argument("--verbose", action="store_true", help="each question's outcome, for every set")
    p.add_argument("--ablate", action="store_true",
                   help="instead: the questions right without each vocabulary concept and "
                        "retrieval knob, per set")
    p.add_argument("--review", action="store_true",
                   help="then accept the labelled entry for half of the answerable questions "
                        "through the review path, ask every question again, report the change")
    p.add_argument("--embeddings", choices=["onnx", "none", "local", "openai"],
                   help="dense retrieval backend for this run (default: the config's [embeddings])")
    p.add_argument("--fit", action="store_true",
                   help="fit the coverage decision model on all the sets by k-fold cross-validation")
    p.add_argument("--features", metavar="A,B",
                   help="with --fit: the candidate features (default: all of them)")
    p.add_argument("--prune", action="store_true",
                   help="with --fit: keep only features worth more than one question under "
                        "cross-validation")
    p.add_argument("--write-model", metavar="MODEL.json",
                   help="with --fit: write the fitted model there (service/answering/decision_model.json "
                        "is the one the service uses)")
    return top


def _stdout_closed() -> bool:
    """Whether stdout's reader has gone: a pipe whose reading end, or a socket whose peer, is
    closed. poll() reports POLLERR or POLLHUP on the descriptor then (whatever events are asked
    for), and neither for a file, /dev/null or a terminal in use."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no descriptor, or no stdout at all
        return False


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args, extra = cli.parse_known_args(argv)
    if args.command == "psql":  # everything after `psql` goes to psql, options included
        args.psql_args = [*extra, *args.psql_args]
    elif extra:
        cli.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        config = config_module.load(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logs.setup(config.logging)
    try:
        status = args.handler(args, config)
        if sys.stdout is not None:  # None when started with fd 1 closed: print() writes nothing
            sys.stdout.flush()  # a reader gone away shows here, not as a traceback at exit
        return status
    except BrokenPipeError:
        if not _stdout_closed():  # a socket's, say: the command's own failure, shown as such
            raise
        # `… | head` read what it wanted and closed the pipe. Python's documented way out: point
        # stdout at /dev/null so that its last flush at exit fails on nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ConfigError, db.MigrationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except accounts.OperatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ServiceError as exc:  # a domain rule refused it: the same message the API gives
        print(f"error: {exc.describe()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: whatever transaction was open is rolled back
        # What the interrupted loop leaves behind (a connection's future failing as it is
        # collected) is asyncio's complaint to log at exit, not the operator's to read.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        print("error: interrupted", file=sys.stderr)
        return 130

