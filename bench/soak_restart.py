"""Soak, restart phase: PostgreSQL, then PgBouncer, restarted under mixed traffic on two processes.

Debian's PostgreSQL server and PgBouncer in transaction mode on loopback ports
(tests/pgservers.py; `apt-get install -y postgresql pgbouncer`). Two `python -m service serve`
processes reach the database through PgBouncer (`database.pooler = "pgbouncer-transaction"`,
`direct_url` for LISTEN), deliver mail to an SMTP sink on loopback, and get the soak's mixed
traffic (bench/soak.py) plus invitations (each one an e-mail). A quarter into the run PostgreSQL
is stopped for `--outage` seconds and started again; at three quarters PgBouncer is. Checks:

- no 500 and no hang (a request unanswered after 20 s); during an outage 503 with Retry-After;
- the pool recovers without restarting the service: the last quarter has no 503 at all;
- every accepted question completes; every balance equals its ledger, no question charged twice;
- every queued e-mail is delivered exactly once (the sink's Message-IDs against mail_outbox);
- LISTEN reconnects: after the restarts each process has its listening connection again.

Exit code 0 when every check holds. `make soak` runs it after the steady soak.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import BENCH_DIR, ROOT, create_account, free_port, fresh_database, machine, start_service, stop
from soak import Traffic, ledger_check, seed, wait_complete

sys.path.insert(0, str(ROOT))
from service.domain import accounts
from tests.conftest import SmtpSink
from tests.pgservers import servers

CONFIG = """
[questions]
poll_seconds = 0.5
[rate_limits.ask_question]
limit = 100000
period_seconds = 60
[mail]
smtp_host = "127.0.0.1"
smtp_port = {smtp_port}
security = "none"
poll_interval_seconds = 0.2
retry_base_seconds = 0.5
timeout_seconds = 5.0
"""


class RestartTraffic(Traffic):
    """The soak's mix, plus invitations (mail), 503s allowed (with Retry-After), and each response
    counted under the phase it was sent in."""

    def __init__(self, token: str, seed: int) -> None:
        super().__init__(token, seed)
        self.phase = "before"
        self.phase_started = time.monotonic()
        self.last_unavailable: dict[str, float] = {}  # phase: seconds into it of its last 503
        self.by_phase: dict[str, Counter[str]] = {}
        self.hangs = 0
        self.unavailable_without_retry_after = 0
        self.invited = 0

    async def call(self, session: aiohttp.ClientSession, name: str, method: str, url: str,
                   expect: tuple[int, ...], auth: bool = True, **kwargs) -> dict | None:
        phase = self.phase
        counts = self.by_phase.setdefault(phase, Counter())
        headers = {**(self.auth if auth else {}), **kwargs.pop("headers", {})}
        try:
            async with session.request(method, url, headers=headers,
                                       timeout=aiohttp.ClientTimeout(total=20), **kwargs) as response:
                body = await response.read()
        except TimeoutError:
            self.hangs += 1
            counts[f"{name} hang"] += 1
            return None
        except aiohttp.ClientConnectionError as exc:  # the service itself never goes away here
            self.unexpected.append(f"{name}: connection error {exc!r}")
            return None
        counts[f"{name} {response.status}"] += 1
        self.counts[f"{name} {response.status}"] += 1
        if response.status == 503:
            self.last_unavailable[phase] = round(time.monotonic() - self.phase_started, 1)
            if "Retry-After" not in response.headers:
                self.unavailable_without_retry_after += 1
            return None
        if response.status not in expect:
            self.unexpected.append(f"{phase} {name}: {response.status} {body[:200]!r}")
            return None
        return json.loads(body) if response.content_type == "application/json" else None

    async def one(self, session: aiohttp.ClientSession, base: str) -> None:
        if self.rng.random() < 0.05:
            self.invited += 1
            await self.call(session, "invite", "POST", f"{base}/api/v1/invitations", (201,),
                            json={"invitation": {"email": f"soak{self.invited}@example.test"}})
            return
        await super().one(session, base)


async def listening(admin_url: str) -> int:
    """Connections of the soak's database waiting on LISTEN (one per service process)."""
    conn = await asyncpg.connect(admin_url)
    try:
        return await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = 'rfp_soak' AND query ILIKE 'LISTEN%'"
        )
    finally:
        await conn.close()


async def mail_check(url: str, sink: SmtpSink, seconds: float) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + seconds
        while await conn.fetchval("SELECT count(*) FROM mail_outbox WHERE state = 'pending'"):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        rows = await conn.fetch("SELECT message_id, state::text FROM mail_outbox")
    finally:
        await conn.close()
    problems = []
    received = Counter(m["Message-ID"] for m in sink.messages)
    for row in rows:
        if received[row["message_id"]] != 1:
            times = received[row["message_id"]]
            problems.append(f"{row['message_id']} ({row['state']}) received {times} times")
    stray = set(received) - {r["message_id"] for r in rows}
    if stray:
        problems.append(f"{len(stray)} messages received that the outbox does not hold")
    return problems[:10] + ([f"… {len(problems) - 10} more"] if len(problems) > 10 else [])


async def main(args: argparse.Namespace) -> int:
    sink = SmtpSink()
    sink.start()
    processes = []
    with servers("soak-restart") as (postgres, bouncer):
        try:
            direct = await fresh_database(postgres.url(), "rfp_soak")
            pooled = bouncer.url("rfp_soak")
            made = await create_account(direct, "Soak")
            conn = await asyncpg.connect(direct)
            await accounts.change_credits(conn, made["account"]["id"], 1_000_000, "grant")
            await conn.close()
            await seed(direct, made["account"]["id"], args.entries)
            config_path = BENCH_DIR / "soak-restart.toml"
            config_path.write_text(CONFIG.format(smtp_port=sink.port))
            env = {"RFP_CONFIG": str(config_path), "RFP_DATABASE_POOLER": "pgbouncer-transaction",
                   "DATABASE_DIRECT_URL": direct}
            ports = [free_port(), free_port()]
            processes = [start_service(pooled, port, log=BENCH_DIR / f"soak-restart-{n}.log", **env)
                         for n, port in enumerate(ports)]
            bases = [f"http://127.0.0.1:{port}" for port in ports]
            traffic = RestartTraffic(made["token"], seed=43)
            started = time.monotonic()
            until = started + args.seconds

            async def client(index: int) -> None:
                async with aiohttp.ClientSession() as session:
                    while time.monotonic() < until:
                        await traffic.one(session, bases[index % 2])

            async def outage(at: float, name: str, down, up) -> float:
                await asyncio.sleep(max(0.0, started + at - time.monotonic()))
                traffic.phase, traffic.phase_started = f"{name} down", time.monotonic()
                began = time.monotonic()
                await asyncio.to_thread(down)
                await asyncio.sleep(args.outage)
                await asyncio.to_thread(up)
                traffic.phase, traffic.phase_started = f"after {name}", time.monotonic()
                return time.monotonic() - began

            async def restarts() -> dict[str, float]:
                took = {}
                took["postgres"] = await outage(args.seconds / 4, "postgres",
                                                lambda: postgres.stop("fast"), postgres.start)
                took["pgbouncer"] = await outage(args.seconds / 2, "pgbouncer", bouncer.stop,
                                                 bouncer.start)
                await asyncio.sleep(max(0.0, started + args.seconds * 3 / 4 - time.monotonic()))
                traffic.phase, traffic.phase_started = "last quarter", time.monotonic()
                return took

            outages, *_ = await asyncio.gather(restarts(), *(client(i) for i in range(args.clients)))
            elapsed = time.monotonic() - started
            left = await wait_complete(direct, 120)
            problems = await ledger_check(direct)
            mail_problems = await mail_check(direct, sink, 60)
            listeners = await listening(postgres.url())
        finally:
            for p in processes:
                stop(p)
            sink.stop()

    last = traffic.by_phase.get("last quarter", Counter())
    last_unavailable = sum(n for k, n in last.items() if k.endswith(" 503"))
    result = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(elapsed),
        "clients": args.clients,
        "processes": 2,
        "outage_seconds": {k: round(v, 1) for k, v in outages.items()},
        "requests": sum(traffic.counts.values()),
        "accepted_questions": traffic.accepted,
        "questions_not_complete": left,
        "ledger_problems": problems,
        "mail_sent": len(sink.messages),
        "mail_problems": mail_problems,
        "listening_connections_after": listeners,
        "hangs": traffic.hangs,
        "unavailable_without_retry_after": traffic.unavailable_without_retry_after,
        "unavailable_in_last_quarter": last_unavailable,
        # how long after each server came back requests still got 503 (pools reconnecting)
        "last_503_seconds_into_phase": traffic.last_unavailable,
        "unexpected_responses": len(traffic.unexpected),
        "unexpected_examples": traffic.unexpected[:5],
        "by_phase": {phase: dict(sorted(c.items())) for phase, c in traffic.by_phase.items()},
    }
    print(json.dumps(result, indent=2))
    ok = (not left and not problems and not mail_problems and listeners == 2 and not traffic.hangs
          and not traffic.unavailable_without_retry_after and not last_unavailable
          and not traffic.unexpected and sum(last.values()) > 0)
    print("soak (restarts):", "OK" if ok else "FAILED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--outage", type=float, default=3.0, help="seconds each server stays down")
    parser.add_argument("--entries", type=int, default=300, help="knowledge-base entries")
    raise SystemExit(asyncio.run(main(parser.parse_args())))
