"""Question bench: ask-to-complete latency and throughput through a real server over real HTTP.

    make bench                      # or: .venv/bin/python bench/questions.py --help

Starts the embedded PostgreSQL under var/bench (or uses $DATABASE_URL's server), creates a fresh
database with one account and 10,000 knowledge-base entries, starts `python -m service serve`
as a subprocess (local engine), then runs N concurrent clients that each ask a question and wait
for its `complete` event on GET /api/v1/questions/{id}/events, again and again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import secrets
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from service_process import ServiceProcess  # noqa: E402

from service import accounts, db  # noqa: E402 (after the path set-up above)
from service.auth import new_id  # noqa: E402

TOPICS = """encryption at rest|encryption in transit|multi-factor authentication|password policy|
backup retention|disaster recovery|incident response|vulnerability scanning|penetration testing|
security awareness training|background checks|access reviews|privileged access|logging and monitoring|
data retention|data deletion|data residency|subprocessor management|vendor risk|change management|
secure development|code review|dependency scanning|network segmentation|firewall rules|endpoint protection|
mobile device management|physical security|business continuity|key management|secrets management|
single sign-on|role-based access|audit logs|SOC 2 report|ISO 27001 certification|GDPR compliance|
HIPAA compliance|PCI DSS scope|customer data isolation|tenant separation|DDoS protection|rate limiting|
web application firewall|security headers|session timeout|account lockout|bug bounty|threat modeling|
risk assessment""".replace("\n", "").split("|")
ASPECTS = ["policy", "process", "frequency", "owner", "tooling", "evidence", "exceptions",
           "scope", "testing", "reporting", "approval", "review cadence", "metrics", "training",
           "documentation", "escalation", "automation", "third parties", "history", "roadmap"]
TEMPLATES = ["Describe your {aspect} for {topic} in the {unit} environment.",
             "What is the {aspect} of {topic} for {unit}?",
             "How do you handle {topic} {aspect} across {unit}?"]
UNITS = ["production", "staging", "corporate", "EU region", "US region", "support tooling",
         "analytics", "mobile apps", "partner integrations", "internal IT"]
ANSWERS = ["Our {aspect} for {topic} in {unit} is documented and reviewed yearly (ref {i}).",
           "Yes. {topic} in {unit} follows a written {aspect}; the CISO signs it off. Ref {i}.",
           "{topic} ({aspect}): handled by a named owner for {unit}; evidence under NDA, ref {i}.",
           "We cover {topic} for {unit} with an automated {aspect}. Exceptions need approval. #{i}"]
NOT_COVERED = ["Do you offer a rooftop garden to visiting auditors?",
               "What is the seating capacity of your cafeteria?",
               "Which football club sponsors your annual picnic?"]


def knowledge_rows(account_id: str, count: int, rng: random.Random) -> list[tuple]:
    rows = []
    for i in range(count):
        topic, aspect, unit = rng.choice(TOPICS), rng.choice(ASPECTS), rng.choice(UNITS)
        question = rng.choice(TEMPLATES).format(topic=topic, aspect=aspect, unit=unit)
        answer = rng.choice(ANSWERS).format(topic=topic, aspect=aspect, unit=unit, i=i)
        rows.append((new_id("kb"), account_id, question, answer, f"{topic.title()}: {aspect}", f"KB-{i}"))
    return rows


async def prepare(server_url: str, entries: int) -> tuple[str, str, list[str]]:
    name = f"rfp_bench_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(server_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = db.with_database(server_url, name)
    conn = await asyncpg.connect(url)
    await db.migrate(conn)
    made = await accounts.create_account(conn, "Bench", "bench@example.test", credits=1_000_000)
    rng = random.Random(7)
    rows = knowledge_rows(made["account"]["id"], entries, rng)
    await conn.copy_records_to_table(
        "knowledge_items", records=rows,
        columns=["id", "account_id", "question", "answer", "title", "external_id"],
    )
    await conn.execute("ANALYZE")
    await conn.close()
    # Asked: mostly questions the knowledge base holds (some reworded), a few it does not.
    asked = [row[2] for row in rng.sample(rows, min(500, len(rows)))]
    asked += [q.replace("Describe your", "Please describe the") for q in asked[:100]]
    asked += NOT_COVERED * 10
    return url, made["token"], asked


async def client(session: aiohttp.ClientSession, url: str, questions: list[str], until: float,
                 latencies: list[float], errors: list[str], rng: random.Random) -> None:
    while time.monotonic() < until:
        text = rng.choice(questions)
        started = time.perf_counter()
        async with session.post(f"{url}/api/v1/questions", json={"question": {"question": text}}) as r:
            body = await r.json()
            if r.status != 202:
                errors.append(f"{r.status} {body}")
                continue
        async with session.get(f"{url}/api/v1/questions/{body['id']}/events") as stream:
            last = None
            async for line in stream.content:
                if line.startswith(b"event: "):
                    last = line[7:].strip().decode()
        if last != "complete":
            errors.append(f"stream ended in {last}")
            continue
        latencies.append(time.perf_counter() - started)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=1,
                        help="service processes on one database, each on its own port; clients "
                             "are spread over them (`serve --workers` cannot be started from here)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    embedded = None
    if os.environ.get("DATABASE_URL"):
        server_url = os.environ["DATABASE_URL"]
    else:
        embedded = db.EmbeddedPostgres(ROOT / "var" / "bench")
        server_url = embedded.url()
    url, token, asked = await prepare(server_url, args.entries)
    config = ("[database]\npool_max_size = 20\n"
              "[logging]\nlevel = \"WARNING\"\n"
              "[rate_limits.ask_question]\nlimit = 1000000\nperiod_seconds = 1\n")
    tmp = ROOT / "var" / "bench-run"
    tmp.mkdir(parents=True, exist_ok=True)
    services = [ServiceProcess(url, config, tmp) for _ in range(args.processes)]
    await asyncio.gather(*(service.start() for service in services))
    urls = [service.url for service in services]
    try:
        connector = aiohttp.TCPConnector(limit=0)
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
            rng = random.Random(11)
            warm: list[float] = []
            errors: list[str] = []
            until = time.monotonic() + args.warmup
            await asyncio.gather(*(client(session, urls[i % len(urls)], asked, until, warm, errors, rng)
                                   for i in range(args.clients)))
            latencies: list[float] = []
            started = time.monotonic()
            until = started + args.seconds
            await asyncio.gather(*(client(session, urls[i % len(urls)], asked, until, latencies, errors,
                                          rng) for i in range(args.clients)))
            elapsed = time.monotonic() - started
    finally:
        for service in services:
            service.stop()
        if embedded:
            admin = await asyncpg.connect(server_url)
            name = url.rsplit("/", 1)[-1].split("?")[0]
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()
            embedded.stop()
    result = {
        "clients": args.clients, "processes": args.processes, "entries": args.entries,
        "completed": len(latencies), "errors": len(errors),
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 99) * 1000, 1) if latencies else None,
        "questions_per_second": round(len(latencies) / elapsed, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")
        for error in errors[:5]:
            print("error:", error)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
