"""A wrk-style HTTP load generator: C keep-alive connections hammering URLs for S seconds.

Run as its own process (so it does not share a core's event loop with the target):
    python bench/load.py --url URL [--url URL ...] --concurrency 16 --seconds 10 \
        [--header 'Authorization: Bearer …'] [--max-requests N]
Prints one JSON object: requests, errors (non-2xx or failures), rps, p50_ms, p99_ms.
URLs are used round-robin. Uses wrk instead when it is installed and only one URL is given
(--loadgen wrk|python|auto).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import time

import aiohttp


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


async def python_load(args: argparse.Namespace) -> dict:
    headers = dict(h.split(": ", 1) for h in args.header)
    latencies: list[float] = []
    errors = 0
    statuses: dict[int, int] = {}
    counter = 0
    deadline = time.perf_counter() + args.seconds
    connector = aiohttp.TCPConnector(limit=args.concurrency)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal errors, counter
        while time.perf_counter() < deadline and counter < args.max_requests:
            url = args.url[counter % len(args.url)]
            counter += 1
            started = time.perf_counter()
            try:
                async with session.get(url, headers=headers) as response:
                    await response.read()
                    statuses[response.status] = statuses.get(response.status, 0) + 1
                    if response.status >= 400:
                        errors += 1
            except aiohttp.ClientError:
                errors += 1
                continue
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(args.concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "loadgen": "python-aiohttp",
        "requests": len(latencies),
        "errors": errors,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "seconds": round(elapsed, 2),
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
    }


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(number) * _UNITS[unit]


def wrk_load(args: argparse.Namespace) -> dict:
    command = ["wrk", "-t1", f"-c{args.concurrency}", f"-d{max(1, round(args.seconds))}s", "--latency"]
    for header in args.header:
        command += ["-H", header]
    output = subprocess.run([*command, args.url[0]], capture_output=True, text=True, check=True).stdout
    requests = int(re.search(r"(\d+) requests in", output).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    socket_errors = re.search(r"Socket errors: (.*)", output)
    return {
        "loadgen": "wrk",
        "requests": requests,
        "errors": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": socket_errors.group(1) if socket_errors else "",
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
        "p50_ms": _ms(re.search(r"50%\s+(\S+)", output).group(1)),
        "p99_ms": _ms(re.search(r"99%\s+(\S+)", output).group(1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", action="append", required=True)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--max-requests", type=int, default=1_000_000)
    parser.add_argument("--loadgen", choices=["auto", "wrk", "python"], default="auto")
    args = parser.parse_args()
    use_wrk = args.loadgen == "wrk" or (
        args.loadgen == "auto" and shutil.which("wrk") and len(args.url) == 1
    )
    result = None
    if use_wrk:
        try:
            result = wrk_load(args)
        except (subprocess.CalledProcessError, AttributeError, ValueError) as exc:
            print(f"wrk failed ({exc!r}); using the Python generator", file=sys.stderr)
    if result is None:
        result = asyncio.run(python_load(args))
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
