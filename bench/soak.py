"""Soak: mixed traffic on two service processes sharing one database, then consistency checks.

Loopback only. For `--seconds` (default 150), `--clients` closed-loop clients spread over two
`python -m service serve` processes send a mix: asks, question reads, RFP searches and reads,
knowledge-base lists and reads, RFP creates, and some invalid requests (bad JSON, unknown ids,
missing query, no token) whose 4xx is expected. Afterwards:

- every accepted question reaches `complete` (within 120 s of the end of the traffic);
- every account's balance equals the sum of its credit ledger, and each accepted ask was charged
  exactly once;
- no response outside the expected statuses (no 5xx, no unexpected 4xx);
- memory: RSS of each process sampled at start (after warm-up), middle and end.

Exit code 0 when every check holds. `make soak` runs it; results go into BENCHMARKS.md (## Soak).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import (
    BENCH_DIR,
    ROOT,
    create_account,
    free_port,
    fresh_database,
    machine,
    server_url,
    start_service,
    stop,
)

CONFIG = """
[questions]
poll_seconds = 0.5
[rate_limits.ask_question]
limit = 100000
period_seconds = 60
"""
sys.path.insert(0, str(ROOT))
from service.domain import accounts  # noqa: E402

WORDS = ("encryption backup retention access audit incident vendor password network privacy "
         "logging firewall training policy recovery").split()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class Traffic:
    def __init__(self, token: str, seed: int) -> None:
        self.auth = {"Authorization": f"Bearer {token}"}
        self.rng = random.Random(seed)
        self.questions: list[str] = []
        self.rfps: list[str] = []
        self.kb: list[str] = []
        self.accepted = 0
        self.counts: Counter[str] = Counter()
        self.unexpected: list[str] = []

    async def call(self, session: aiohttp.ClientSession, name: str, method: str, url: str,
                   expect: tuple[int, ...], auth: bool = True, **kwargs) -> dict | None:
        headers = {**(self.auth if auth else {}), **kwargs.pop("headers", {})}
        async with session.request(method, url, headers=headers, **kwargs) as response:
            body = await response.read()
            self.counts[f"{name} {response.status}"] += 1
            if response.status not in expect:
                self.unexpected.append(f"{name}: {response.status} {body[:200]!r}")
                return None
            if response.content_type == "application/json":
                return json.loads(body)
            return None

    async def one(self, session: aiohttp.ClientSession, base: str) -> None:
        rng = self.rng
        roll = rng.random()
        words = " ".join(rng.sample(WORDS, 3))
        if roll < 0.20:
            body = await self.call(session, "ask", "POST", f"{base}/api/v1/questions", (202,),
                                   json={"question": {"question": f"Do you have {words}?"}})
            if body:
                self.accepted += 1
                self.questions.append(body["id"])
        elif roll < 0.35 and self.questions:
            qid = rng.choice(self.questions)
            await self.call(session, "get_question", "GET", f"{base}/api/v1/questions/{qid}", (200,))
        elif roll < 0.50:
            await self.call(session, "search", "GET", f"{base}/api/v1/rfps/search", (200,),
                            params={"query": rng.choice(WORDS), "page": str(rng.randint(1, 3))})
        elif roll < 0.60:
            body = await self.call(session, "kb_list", "GET", f"{base}/api/v1/knowledge_base_items",
                                   (200,), params={"page": str(rng.randint(1, 5))})
            if body:
                self.kb += [item["id"] for item in body["knowledge_base_items"][:3]]
        elif roll < 0.67 and self.kb:
            kid = rng.choice(self.kb)
            await self.call(session, "kb_get", "GET", f"{base}/api/v1/knowledge_base_items/{kid}",
                            (200,))
        elif roll < 0.77:
            body = await self.call(session, "create_rfp", "POST", f"{base}/api/v1/rfps", (201,),
                                   json={"rfp": {"title": f"RFP on {words}",
                                                 "description": f"About {words}.",
                                                 "items": [{"question": f"{w}?"} for w in WORDS[:3]]}})
            if body:
                self.rfps.append(body["id"])
        elif roll < 0.87 and self.rfps:
            rid = rng.choice(self.rfps)
            await self.call(session, "get_rfp", "GET", f"{base}/api/v1/rfps/{rid}", (200,))
        else:  # invalid requests: each has one expected 4xx
            kind = rng.randrange(5)
            if kind == 0:
                await self.call(session, "bad_json", "POST", f"{base}/api/v1/rfps", (400,),
                                data=b"{not json", headers={"Content-Type": "application/json"})
            elif kind == 1:
                await self.call(session, "unknown_rfp", "GET", f"{base}/api/v1/rfps/rfp_nope", (404,))
            elif kind == 2:
                await self.call(session, "no_query", "GET", f"{base}/api/v1/rfps/search", (400,))
            elif kind == 3:
                await self.call(session, "no_token", "GET", f"{base}/api/v1/knowledge_base_items",
                                (401,), auth=False)
            else:
                await self.call(session, "invalid_ask", "POST", f"{base}/api/v1/questions", (422,),
                                json={"question": {"question": "  "}})


async def seed(url: str, account_id: str, entries: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        rng = random.Random(1)
        await conn.executemany(
            "INSERT INTO knowledge_items (id, account_id, question, answer) VALUES ($1, $2, $3, $4)",
            [(f"kb_soak{i:06d}", account_id, f"Do you have {' '.join(rng.sample(WORDS, 3))}?",
              f"Yes: {' '.join(rng.sample(WORDS, 6))} are covered by policy {i}.")
             for i in range(entries)],
        )
    finally:
        await conn.close()


async def ledger_check(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        problems = []
        rows = await conn.fetch(
            "SELECT a.id, a.credits, coalesce(sum(l.amount), 0) AS ledger FROM accounts a"
            " LEFT JOIN credit_ledger l ON l.account_id = a.id GROUP BY a.id, a.credits"
        )
        for row in rows:
            if row["credits"] != row["ledger"]:
                problems.append(f"{row['id']}: balance {row['credits']} != ledger {row['ledger']}")
        doubles = await conn.fetchval(
            "SELECT count(*) FROM (SELECT subject_id FROM credit_ledger WHERE reason = 'question'"
            " GROUP BY subject_id HAVING count(*) > 1) d"
        )
        if doubles:
            problems.append(f"{doubles} questions charged more than once")
        return problems
    finally:
        await conn.close()


async def wait_complete(url: str, seconds: float) -> int:
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + seconds
        while True:
            left = await conn.fetchval("SELECT count(*) FROM questions WHERE state <> 'complete'")
            if not left or time.monotonic() > deadline:
                return left
            await asyncio.sleep(0.5)
    finally:
        await conn.close()


async def main(args: argparse.Namespace) -> int:
    admin_url, server = server_url()
    processes = []
    try:
        url = await fresh_database(admin_url, "rfp_soak")
        made = await create_account(url, "Soak")
        conn = await asyncpg.connect(url)
        await accounts.change_credits(conn, made["account"]["id"], 1_000_000, "grant")
        await conn.close()
        await seed(url, made["account"]["id"], args.entries)
        config_path = BENCH_DIR / "soak.toml"
        config_path.write_text(CONFIG)
        ports = [free_port(), free_port()]
        processes = [
            start_service(url, port, log=BENCH_DIR / f"soak-{n}.log", RFP_CONFIG=str(config_path))
            for n, port in enumerate(ports)
        ]
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        traffic = Traffic(made["token"], seed=42)
        samples: dict[str, list[float]] = {str(p.pid): [] for p in processes}
        started = time.monotonic()
        until = started + args.seconds

        async def client(index: int) -> None:
            async with aiohttp.ClientSession() as session:
                while time.monotonic() < until:
                    await traffic.one(session, bases[index % 2])

        async def sampler() -> None:
            marks = [args.warmup, args.seconds / 2, args.seconds - 1]
            for mark in marks:
                await asyncio.sleep(max(0.0, started + mark - time.monotonic()))
                for p in processes:
                    samples[str(p.pid)].append(rss_mib(p.pid))

        await asyncio.gather(sampler(), *(client(i) for i in range(args.clients)))
        elapsed = time.monotonic() - started
        left = await wait_complete(url, 120)
        problems = await ledger_check(url)
    finally:
        for p in processes:
            stop(p)
        if server is not None:
            server.stop()

    total = sum(traffic.counts.values())
    result = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(elapsed),
        "clients": args.clients,
        "processes": 2,
        "requests": total,
        "requests_per_second": round(total / elapsed, 1),
        "accepted_questions": traffic.accepted,
        "questions_not_complete": left,
        "ledger_problems": problems,
        "unexpected_responses": len(traffic.unexpected),
        "unexpected_examples": traffic.unexpected[:5],
        "rss_mib_start_middle_end": samples,
        "by_operation_and_status": dict(sorted(traffic.counts.items())),
    }
    print(json.dumps(result, indent=2))
    growth = [s[-1] - s[0] for s in samples.values() if len(s) == 3]
    ok = not left and not problems and not traffic.unexpected and all(g < 25 for g in growth)
    print("soak:", "OK" if ok else "FAILED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=150)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--entries", type=int, default=300, help="knowledge-base entries")
    parser.add_argument("--warmup", type=float, default=10, help="seconds before the first RSS sample")
    raise SystemExit(asyncio.run(main(parser.parse_args())))
