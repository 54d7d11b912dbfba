"""HTTP benchmark: the service beside a bare aiohttp + asyncpg floor, in the same run.

    python bench/http_bench.py            (make bench-http; BENCH_SECONDS, BENCH_ROUNDS, BENCH_CONCURRENCY)
    BENCH_BASELINE=<git revision> ...     also the service at that revision, in the same rounds

Seeds 10,000 RFPs (20 items on the one read) in one account of a fresh database, starts the
service (1 process, default config: auth, rate-limit middleware and JSON-able access log on) and
the floor (bench/bare.py: same SQL, nothing else), then alternates them round by round under the
same load (bench/load.py: wrk when installed, else a Python aiohttp generator in its own process).
Prints a Markdown table of medians over the rounds and the service/floor ratio.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess

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
)

SECONDS = float(os.environ.get("BENCH_SECONDS", "8"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "16"))
BASELINE = os.environ.get("BENCH_BASELINE", "")

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
        service = start_service(url, service_port, RFP_LOG_JSON="1")
        bare = start_bare(url, bare_port, account)
        baseline, baseline_port = None, free_port()
        if BASELINE:  # the same service at another revision, e.g. before a change
            checkout = BENCH_DIR / "baseline"
            subprocess.run(["rm", "-rf", str(checkout)], check=True)
            checkout.mkdir(parents=True)
            archive = subprocess.run(["git", "archive", BASELINE], cwd=ROOT, check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive, check=True)
            baseline = start_service(url, baseline_port, cwd=checkout, RFP_LOG_JSON="1")
        auth = [f"Authorization: Bearer {token}"]
        cases = {
            "GET /api/v1/rfps/{id}": (
                f"http://127.0.0.1:{service_port}/api/v1/rfps/{target}",
                f"http://127.0.0.1:{bare_port}/rfps/{target}",
                f"http://127.0.0.1:{baseline_port}/api/v1/rfps/{target}",
            ),
            "GET /api/v1/rfps/search (100 of 10,000 match)": (
                f"http://127.0.0.1:{service_port}/api/v1/rfps/search?query=cloud%20hosting",
                f"http://127.0.0.1:{bare_port}/search?query=cloud%20hosting",
                f"http://127.0.0.1:{baseline_port}/api/v1/rfps/search?query=cloud%20hosting",
            ),
        }
        results: dict[str, dict[str, list[dict]]] = {}
        try:
            for name, (service_url, bare_url, baseline_url) in cases.items():
                load([service_url], auth, CONCURRENCY, 2)  # warm-up: pools, plans, caches
                load([bare_url], [], CONCURRENCY, 2)
                if baseline:
                    load([baseline_url], auth, CONCURRENCY, 2)
                runs = results.setdefault(name, {"service": [], "floor": []})
                for _ in range(ROUNDS):
                    runs["service"].append(load([service_url], auth, CONCURRENCY, SECONDS))
                    runs["floor"].append(load([bare_url], [], CONCURRENCY, SECONDS))
                    if baseline:
                        runs.setdefault(f"service@{BASELINE}", []).append(
                            load([baseline_url], auth, CONCURRENCY, SECONDS))
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
    print(f"Date: {datetime.date.today().isoformat()}; load: {loadgen}, {CONCURRENCY} connections, "
          f"{ROUNDS} alternating rounds of {SECONDS:g} s; medians over rounds\n")
    print("| endpoint | target | req/s | p50 ms | p99 ms | errors | service/floor req/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        rps = {who: median([r["rps"] for r in rs]) for who, rs in runs.items()}
        for who, rs in runs.items():
            ratio = f"{rps[who] / rps['floor']:.0%}" if who != "floor" else ""
            print(f"| {name} | {who} | {rps[who]:.0f} | {median([r['p50_ms'] for r in rs]):.2f} | "
                  f"{median([r['p99_ms'] for r in rs]):.2f} | {sum(r['errors'] for r in rs)} | {ratio} |")
    print(f"\nPeak RSS (VmHWM): service {memory['service']} MiB, floor {memory['floor']} MiB")
    (BENCH_DIR / "http.json").write_text(json.dumps({"results": results, "memory": memory}, indent=1))


if __name__ == "__main__":
    main()
