"""Question bench: ask-to-complete latency and throughput through a real server over real HTTP.

    make bench                      # or: .venv/bin/python bench/questions.py --help

Starts the embedded PostgreSQL under var/bench (or uses $DATABASE_URL's server), creates a fresh
database with one account and 10,000 knowledge-base entries, starts `python -m service serve`
as a subprocess (local engine), then runs two measurements, each client asking a question
(POST /api/v1/questions) and reading GET /api/v1/questions/{id}/events until `complete`:

- closed loop: N clients ask again as soon as their previous question completes, so the service
  runs flat out: its maximum sustained questions per second (latency is then ≈ N / throughput);
- open loop: N clients each ask on a fixed schedule (--rate-per-client per second, independent
  of completions), so the service is offered N * rate questions per second: the ask-to-complete
  latency at that load, measured from each ask's scheduled time.

The service runs its default configuration, dense retrieval included (`--embeddings onnx`):
every question is embedded by MiniLM in the service. Before the services start, the entries are
embedded by the real indexer in this process, timed (`--vectors random` fills random vectors
instead, in seconds, for a quick run). `--floor` repeats the runs with lexical retrieval only
(`--embeddings none`) on the same database, so the cost of dense retrieval is measured under the
same load. Each run reports the peak RSS (VmHWM) of every service process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
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

from _setup import database_name, through_pooler  # noqa: E402 (bench/ is on the path: run as a script)
from service_process import ServiceProcess  # noqa: E402

from service import db  # noqa: E402 (after the path set-up above)
from service.answering.embeddings import Indexer  # noqa: E402
from service.answering.minilm_onnx import MODEL, MODEL_INTEGER, OnnxEmbedder  # noqa: E402
from service.config import EmbeddingsConfig  # noqa: E402
from service.domain import accounts  # noqa: E402
from service.domain.ids import new_id  # noqa: E402

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
    # What autovacuum does soon after an import: statistics, and the GIN index's pending list
    # merged (a search reads that list in full; ~300 pages after this load, +5 ms per search).
    await conn.execute("VACUUM ANALYZE")
    await conn.close()
    # Asked: mostly questions the knowledge base holds (some reworded), a few it does not.
    asked = [row[2] for row in rng.sample(rows, min(500, len(rows)))]
    asked += [q.replace("Describe your", "Please describe the") for q in asked[:100]]
    asked += NOT_COVERED * 10
    return url, made["token"], asked


RANDOM_VECTORS = """
INSERT INTO knowledge_embeddings (item_id, model, account_id, content_hash, dimensions, embedding)
SELECT k.id, $1, k.account_id, md5(concat_ws(E'\\n', k.question, k.title, k.answer)), 384,
       (SELECT array_agg(random() - 0.5) FROM generate_series(1, 384) WHERE k.id IS NOT NULL)::vector
  FROM knowledge_items k
"""


async def embed_entries(url: str, vectors: str, integer_kernels: bool = False) -> dict:
    """Every entry's vector before the services start (else their indexers would compete with
    the measurement): by the real indexer and model (timed), or random ones."""
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF)
    if vectors == "random":
        conn = await asyncpg.connect(url)
        try:
            model = MODEL_INTEGER if integer_kernels else MODEL
            stored = int((await conn.execute(RANDOM_VECTORS, model)).split()[-1])
        finally:
            await conn.close()
    else:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
        try:
            embedder = OnnxEmbedder(integer_kernels=integer_kernels)
            stored = await Indexer(pool, embedder, EmbeddingsConfig()).catch_up()
        finally:
            await pool.close()
    after = resource.getrusage(resource.RUSAGE_SELF)
    took = time.perf_counter() - started
    conn = await asyncpg.connect(url)
    try:  # what autovacuum does after so many rows: without statistics HNSW is not chosen
        await conn.execute("ANALYZE knowledge_embeddings")
    finally:
        await conn.close()
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"vectors": vectors, "integer_kernels": integer_kernels, "entries_embedded": stored,
            "seconds": round(took, 1),
            "entries_per_second": round(stored / took, 1), "client_cpu_seconds": round(cpu, 1),
            "client_peak_rss_mib": round(after.ru_maxrss / 1024, 1)}


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM of a live process, in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except FileNotFoundError:
        pass
    return None


async def ask_and_follow(session: aiohttp.ClientSession, url: str, text: str) -> str | None:
    """Ask, then read the question's event stream to `complete`; an error message, or None."""
    async with session.post(f"{url}/api/v1/questions", json={"question": {"question": text}}) as r:
        body = await r.json()
        if r.status != 202:
            return f"{r.status} {body}"
    async with session.get(f"{url}/api/v1/questions/{body['id']}/events") as stream:
        last = None
        async for line in stream.content:
            if line.startswith(b"event: "):
                last = line[7:].strip().decode()
    return None if last == "complete" else f"stream ended in {last}"


async def closed_client(session: aiohttp.ClientSession, url: str, questions: list[str], until: float,
                        latencies: list[float], errors: list[str], rng: random.Random) -> None:
    """Ask, wait for the answer, ask again: as many as the service completes."""
    while time.monotonic() < until:
        started = time.monotonic()
        error = await ask_and_follow(session, url, rng.choice(questions))
        if error:
            errors.append(error)
        else:
            latencies.append(time.monotonic() - started)


async def open_client(session: aiohttp.ClientSession, url: str, questions: list[str], start: float,
                      until: float, measure_from: float, rate: float, drain: float,
                      latencies: list[float], in_window: list[int], unfinished: list[int],
                      answered: list[int], errors: list[str], rng: random.Random) -> None:
    """Ask at start, start + 1/rate, … until `until`, whether or not earlier asks are answered;
    latency counts from the scheduled time (a late send is the service's delay too)."""

    async def one(scheduled: float, text: str) -> None:
        error = await ask_and_follow(session, url, text)
        if error:
            errors.append(error)
            return
        answered.append(1)
        if scheduled >= measure_from:
            latencies.append(time.monotonic() - scheduled)
            if time.monotonic() <= until:
                in_window.append(1)

    asks = []
    scheduled = start
    while scheduled < until:
        await asyncio.sleep(max(0.0, scheduled - time.monotonic()))
        asks.append(asyncio.create_task(one(scheduled, rng.choice(questions))))
        scheduled += 1 / rate
    # An overloaded service has a backlog: wait a while for it, then give up on the rest.
    _, late = await asyncio.wait(asks, timeout=drain)
    for ask in late:
        ask.cancel()
    unfinished.append(len(late))


TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name (index 0 = state, 11 = utime)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2:].split()


def process_cpu(pid: int, children: bool = False) -> float:
    """CPU seconds used by a process (and by its reaped children, when asked), 0 once gone."""
    try:
        fields = _stat(pid)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICK


def postgres_cpu(postmaster: int) -> float:
    """CPU seconds of the whole PostgreSQL server: the postmaster, its live children (backends,
    walwriter, …) and the children it has reaped (backends of closed connections)."""
    total = process_cpu(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = _stat(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[1]) == postmaster:
                total += (int(fields[11]) + int(fields[12])) / TICK
    return total


class CpuMeter:
    """CPU seconds of the service processes, PostgreSQL (when it is the embedded one, so only
    this bench uses it) and this client, between `start()` and `stop()`."""

    def __init__(self, service_pids: list[int], postmaster: int | None) -> None:
        self.service_pids = service_pids
        self.postmaster = postmaster

    def sample(self) -> dict[str, float | None]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "service": sum(process_cpu(pid, children=True) for pid in self.service_pids),
            "postgres": postgres_cpu(self.postmaster) if self.postmaster else None,
            "client": usage.ru_utime + usage.ru_stime,
        }

    def start(self) -> None:
        self.started = self.sample()

    def per_question(self, completed: int) -> dict[str, float | None]:
        """Milliseconds of CPU per completed question, by part, since `start()`."""
        ended = self.sample()
        out: dict[str, float | None] = {}
        for part, before in self.started.items():
            after = ended[part]
            out[f"cpu_ms_per_question_{part}"] = (
                None if before is None or after is None or not completed
                else round((after - before) * 1000 / completed, 2)
            )
        known = [out[f"cpu_ms_per_question_{p}"] for p in ("service", "postgres")]
        out["cpu_ms_per_question_service_and_postgres"] = (
            None if None in known else round(sum(known), 2)  # type: ignore[arg-type]
        )
        return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time of each run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--mode", choices=("both", "closed", "open"), default="both")
    parser.add_argument("--rate-per-client", type=float, default=2.0,
                        help="open loop: questions per second each client asks (default 2: 50 "
                             "clients offer 100/s)")
    parser.add_argument("--processes", type=int, default=1,
                        help="service processes on one database, each on its own port; clients "
                             "are spread over them (`serve --workers` cannot be started from here)")
    parser.add_argument("--drain", type=float, default=30.0,
                        help="open loop: seconds to wait for answers after the last ask")
    parser.add_argument("--pool", type=int, default=20, help="database.pool_max_size per process")
    parser.add_argument("--questions", action="append", default=[], metavar="KEY=VALUE",
                        help="a [questions] setting for the service, e.g. pool_size=3 (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per run")
    parser.add_argument("--embeddings", choices=("onnx", "none"), default="onnx",
                        help="the services' embeddings.backend (default: the service's, onnx)")
    parser.add_argument("--vectors", choices=("model", "random"), default="model",
                        help="entries' vectors: embedded by the model, timed (default), or random")
    parser.add_argument("--onnx-kernels", choices=("float", "integer"), default="integer",
                        help="the services' embeddings.onnx_kernels (default: the service's, integer)")
    parser.add_argument("--floor", action="store_true",
                        help="then the same runs with lexical retrieval only, on the same data")
    args = parser.parse_args()

    embedded = None
    if os.environ.get("DATABASE_URL"):
        server_url = os.environ["DATABASE_URL"]
    else:
        embedded = db.EmbeddedPostgres(ROOT / "var" / "bench")
        server_url = embedded.url()
    url, token, asked = await prepare(server_url, args.entries)
    integer = args.onnx_kernels == "integer"
    indexing = await embed_entries(url, args.vectors, integer) if args.embeddings == "onnx" else None
    if indexing:
        print(json.dumps({"indexing": indexing}) if args.json else f"indexing: {indexing}", flush=True)
    config = (f"[database]\npool_max_size = {args.pool}\n"
              "[logging]\nlevel = \"WARNING\"\n"
              # One member's clients follow their questions' streams: more than the per-member cap.
              f"[server]\nmax_streams_per_member = {max(20, 2 * args.clients)}\n"
              "[rate_limits.ask_question]\nlimit = 1000000\nperiod_seconds = 1\n"
              "[questions]\n" + "".join(f"{setting}\n" for setting in args.questions))
    tmp = ROOT / "var" / "bench-run"
    tmp.mkdir(parents=True, exist_ok=True)
    service_url, pooler_env = through_pooler(url)
    postmaster = None
    if embedded:
        postmaster = int((embedded.pgdata / "postmaster.pid").read_text().split()[0])
    results = []
    backends = [args.embeddings] + (["none"] if args.floor and args.embeddings != "none" else [])
    try:
        for backend in backends:
            # Both settings in the file (ServiceProcess then sets no RFP_EMBEDDINGS).
            embeddings = f"[embeddings]\nbackend = \"{backend}\"\nonnx_kernels = \"{args.onnx_kernels}\"\n"
            services = [ServiceProcess(service_url, config + embeddings, tmp, embeddings=backend)
                        for _ in range(args.processes)]
            for service in services:
                service.env.update(pooler_env)
            await asyncio.gather(*(service.start() for service in services))
            urls = [service.url for service in services]
            meter = CpuMeter([service.process.pid for service in services], postmaster)
            try:
                connector = aiohttp.TCPConnector(limit=0)
                headers = {"Authorization": f"Bearer {token}"}
                async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
                    rng = random.Random(11)
                    runs = []
                    if args.mode in ("both", "closed"):
                        runs.append(await closed_run(session, urls, asked, args, rng, meter))
                    if args.mode in ("both", "open"):
                        runs.append(await open_run(session, urls, asked, args, rng, meter))
                peaks = [peak_rss_mib(service.process.pid) for service in services]
                for run in runs:
                    run |= {"embeddings": backend, "service_peak_rss_mib": peaks,
                            "onnx_kernels": args.onnx_kernels if backend == "onnx" else None,
                            "load_average_now": " ".join(f"{x:.2f}" for x in os.getloadavg())}
                results += runs
            finally:
                for service in services:
                    service.stop()
    finally:
        try:  # the scratch database goes on any server, the embedded one or $DATABASE_URL's
            admin = await asyncpg.connect(server_url)
            await admin.execute(f'DROP DATABASE IF EXISTS "{database_name(url)}" WITH (FORCE)')
            await admin.close()
        finally:
            if embedded:
                embedded.stop()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    samples = []
    for result in results:
        result |= {"clients": args.clients, "processes": args.processes, "entries": args.entries,
                   "questions_settings": args.questions,
                   "machine": machine, "load_average_at_end": load}
        samples += result.pop("error_samples")
        if args.json:
            print(json.dumps(result))
        else:
            for key, value in result.items():
                print(f"{key:>22}: {value}")
            print()
    for error in samples:
        print("error:", error)
    return 1 if samples else 0


def summary(mode: str, latencies: list[float], errors: list[str], elapsed: float) -> dict:
    return {
        "mode": mode,
        "completed": len(latencies), "errors": len(errors),
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 99) * 1000, 1) if latencies else None,
        "questions_per_second": round(len(latencies) / elapsed, 1),
        "error_samples": errors[:5],
    }


async def closed_run(session: aiohttp.ClientSession, urls: list[str], asked: list[str],
                     args: argparse.Namespace, rng: random.Random, meter: CpuMeter) -> dict:
    errors: list[str] = []
    until = time.monotonic() + args.warmup
    await asyncio.gather(*(closed_client(session, urls[i % len(urls)], asked, until, [], errors, rng)
                           for i in range(args.clients)))
    latencies: list[float] = []
    meter.start()
    started = time.monotonic()
    until = started + args.seconds
    await asyncio.gather(*(closed_client(session, urls[i % len(urls)], asked, until, latencies,
                                         errors, rng) for i in range(args.clients)))
    return (summary("closed loop", latencies, errors, time.monotonic() - started)
            | meter.per_question(len(latencies)))


async def open_run(session: aiohttp.ClientSession, urls: list[str], asked: list[str],
                   args: argparse.Namespace, rng: random.Random, meter: CpuMeter) -> dict:
    errors: list[str] = []
    latencies: list[float] = []
    start = time.monotonic() + 0.1
    measure_from = start + args.warmup
    until = measure_from + args.seconds
    spread = 1 / (args.rate_per_client * args.clients)  # clients' schedules interleave evenly
    in_window: list[int] = []
    unfinished: list[int] = []
    answered: list[int] = []  # every answer, warm-up and drain included: the CPU covers them all
    meter.start()
    await asyncio.gather(*(open_client(session, urls[i % len(urls)], asked, start + i * spread, until,
                                       measure_from, args.rate_per_client, args.drain, latencies,
                                       in_window, unfinished, answered, errors, rng)
                           for i in range(args.clients)))
    result = summary("open loop", latencies, errors, args.seconds) | meter.per_question(len(answered))
    # completed within the measured window (not the backlog answered after it), per second
    result["questions_per_second"] = round(len(in_window) / args.seconds, 1)
    result["offered_per_second"] = round(args.clients * args.rate_per_client, 1)
    result["unfinished_after_drain"] = sum(unfinished)
    return result


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
