"""HTTP benchmark: the service beside a bare aiohttp + asyncpg floor, in the same run.

    python bench/http_bench.py            (make bench-http; BENCH_SECONDS, BENCH_ROUNDS, BENCH_CONCURRENCY)
    BENCH_BASELINE=<git revision> ...     also the service at that revision, in the same rounds
    BENCH_ONLY=search ...                 only the cases whose name contains this (e.g. "{id}")

Seeds 10,000 RFPs (20 items on the one read) in one account of a fresh database, starts the
service (1 process, default config: auth, rate-limit middleware and JSON-able access log on) and
the floor (bench/bare.py: same SQL, nothing else), then alternates them round by round under the
same load (bench/load.py: wrk when installed, else a Python aiohttp generator in its own process).
A baseline revision gets its own database, migrated by its own migrations and seeded the same
way, so that a schema change (an index) is compared too.

Prints a Markdown table of medians over the rounds, the service/floor ratio, and the CPU time the
measured process spent per request (utime + stime from /proc, over all rounds): on a shared
machine req/s mostly measure scheduling, CPU per request much less so.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

from _setup import (
    BENCH_DIR,
    ROOT,
    create_account,
    free_port,
    fresh_database,
    load,
    machine,
    median,
    peak_rss_mib,
    run,
    server_url,
    start_bare,
    start_service,
    stop,
    through_pooler,
)

SECONDS = float(os.environ.get("BENCH_SECONDS", "8"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "16"))
BASELINE = os.environ.get("BENCH_BASELINE", "")
ONLY = os.environ.get("BENCH_ONLY", "")

SEED = """
INSERT INTO rfps (id, account_id, owner_id, title, description, created_at)
SELECT 'rfp_bench' || lpad(i::text, 13, '0'), $1, $2,
       CASE WHEN i % 100 = 0 THEN 'Cloud hosting security review ' ELSE 'Vendor questionnaire ' END
           || md5(i::text),
       'Due diligence for supplier ' || md5((i * 7)::text),
       now() - make_interval(secs => i)
  FROM generate_series(1, $3) AS i;
"""
ITEMS = """
INSERT INTO rfp_items (id, rfp_id, question, state, position)
SELECT 'item_bench' || i, $1, 'Do you encrypt data at rest? ' || i,
       (ARRAY['pending', 'auto_answered', 'needs_input', 'approved'])[1 + i % 4]::rfp_item_state, i
  FROM generate_series(1, 20) AS i;
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process so far; Linux only."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(pid: int, url: str, headers: list[str]) -> dict:
    """One round of load on `url`, with the CPU time process `pid` spent on it."""
    before = cpu_seconds(pid)
    result = load([url], headers, CONCURRENCY, SECONDS)
    result["cpu_s"] = cpu_seconds(pid) - before
    return result


def baseline_database(admin_url: str, checkout: Path) -> str:
    """A fresh database migrated by the baseline checkout's own migrations."""
    url = run(fresh_database(admin_url, "rfp_bench_http_baseline", migrate=False))
    subprocess.run([sys.executable, "-m", "service", "migrate"], cwd=checkout, check=True,
                   env={**os.environ, "DATABASE_URL": url}, capture_output=True)
    return url


async def seed(url: str) -> tuple[dict, str]:
    import asyncpg

    made = await create_account(url, "Bench")
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SEED, made["account"]["id"], made["member"]["user_id"], 10_000)
        target = "rfp_bench" + "5000".zfill(13)
        await conn.execute(ITEMS, target)
        await conn.execute("ANALYZE")
    finally:
        await conn.close()
    return made, target


def main() -> None:
    admin_url, embedded = server_url()
    try:
        url = run(fresh_database(admin_url, "rfp_bench_http"))
        made, target = run(seed(url))
        token, account = made["token"], made["account"]["id"]
        service_port, bare_port = free_port(), free_port()
        service_url, pooler_env = through_pooler(url)  # the floor stays on the server itself
        service = start_service(service_url, service_port, RFP_LOG_JSON="1", **pooler_env)
        bare = start_bare(url, bare_port, account)
        targets = {"service": (service, service_port, [f"Authorization: Bearer {token}"], "/api/v1")}
        targets["floor"] = (bare, bare_port, [], "")
        baseline = None
        if BASELINE:  # the same service at another revision, e.g. before a change
            checkout = BENCH_DIR / "baseline"
            subprocess.run(["rm", "-rf", str(checkout)], check=True)
            checkout.mkdir(parents=True)
            archive = subprocess.run(["git", "archive", BASELINE], cwd=ROOT, check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive, check=True)
            baseline_url = baseline_database(admin_url, checkout)
            baseline_made, _ = run(seed(baseline_url))
            baseline_port = free_port()
            baseline = start_service(baseline_url, baseline_port, cwd=checkout, RFP_LOG_JSON="1")
            targets[f"service@{BASELINE}"] = (
                baseline, baseline_port,
                [f"Authorization: Bearer {baseline_made['token']}"], "/api/v1",
            )
        cases = {
            "GET /api/v1/rfps/{id}": f"/rfps/{target}",
            "GET /api/v1/rfps/search (100 of 10,000 match)": "/rfps/search?query=cloud%20hosting",
        }
        if ONLY:  # e.g. BENCH_ONLY=search: the cases whose name contains it
            cases = {name: path for name, path in cases.items() if ONLY in name}
        results: dict[str, dict[str, list[dict]]] = {}
        try:
            for name, path in cases.items():
                urls = {}
                for who, (process, port, headers, prefix) in targets.items():
                    # The floor's routes: /rfps/{id} and /search.
                    route = path.replace("/rfps/search", "/search") if who == "floor" else path
                    urls[who] = (process.pid, f"http://127.0.0.1:{port}{prefix}{route}", headers)
                    load([urls[who][1]], headers, CONCURRENCY, 2)  # warm-up: pools, plans, caches
                runs = results.setdefault(name, {who: [] for who in targets})
                for _ in range(ROUNDS):
                    for who, (pid, target_url, headers) in urls.items():
                        runs[who].append(measured(pid, target_url, headers))
            memory = {"service": peak_rss_mib(service.pid), "floor": peak_rss_mib(bare.pid)}
        finally:
            stop(service)
            stop(bare)
            if baseline:
                stop(baseline)
    finally:
        if embedded is not None:
            embedded.stop()
    report(results, memory)


def report(results: dict, memory: dict) -> None:
    loadgen = next(iter(results.values()))["service"][0]["loadgen"]
    print(f"\nMachine: {machine()}")
    print(f"Date: {datetime.date.today().isoformat()}; load average {os.getloadavg()[0]:.1f}; "
          f"load: {loadgen}, {CONCURRENCY} connections, {ROUNDS} alternating rounds of "
          f"{SECONDS:g} s; medians over rounds; CPU: the process's CPU time per request\n")
    print("| endpoint | target | req/s | p50 ms | p99 ms | errors | service/floor req/s "
          "| CPU µs/req | floor/service CPU |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        rps = {who: median([r["rps"] for r in rs]) for who, rs in runs.items()}
        cpu = {who: 1e6 * sum(r["cpu_s"] for r in rs) / max(1, sum(r["requests"] for r in rs))
               for who, rs in runs.items()}
        for who, rs in runs.items():
            ratio = f"{rps[who] / rps['floor']:.0%}" if who != "floor" else ""
            cpu_ratio = f"{cpu['floor'] / cpu[who]:.0%}" if who != "floor" else ""
            print(f"| {name} | {who} | {rps[who]:.0f} | {median([r['p50_ms'] for r in rs]):.2f} | "
                  f"{median([r['p99_ms'] for r in rs]):.2f} | {sum(r['errors'] for r in rs)} | "
                  f"{ratio} | {cpu[who]:.0f} | {cpu_ratio} |")
    print(f"\nPeak RSS (VmHWM): service {memory['service']} MiB, floor {memory['floor']} MiB")
    (BENCH_DIR / "http.json").write_text(json.dumps({"results": results, "memory": memory}, indent=1))


if __name__ == "__main__":
    main()
