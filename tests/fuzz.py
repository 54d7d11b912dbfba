"""Property-based API fuzzing: schemathesis against the service's own OpenAPI description.

A real `python -m service serve` on loopback, a fresh database with one account (credits enough for
every generated ask, one admin token), then `schemathesis run` with the checks that matter here:

- not_a_server_error: no 5xx, ever;
- status_code_conformance, content_type_conformance, response_headers_conformance,
  response_schema_conformance: no response outside the description;
- ignored_auth: every operation that declares the bearer scheme answers 401 without a token.

Then the upload routes get generated CSV and XLSX files (tests/upload_fuzz.py: valid, truncated,
mutated, oversized, zip and XML bombs) for `--upload-seconds`: no 5xx, no answer later than the
parse time limit allows, no parse worker left running past it.

`make fuzz` runs it for a few minutes (`--max-time`); tests/test_fuzz.py runs a short version as part
of `make test`. Exit code 0 when neither found anything.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import upload_fuzz  # noqa: E402
from service_process import ServiceProcess  # noqa: E402

from service import db  # noqa: E402  (after the path set-up above)
from service.domain import accounts  # noqa: E402

CHECKS = ",".join([
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "ignored_auth",
])

# Generous limits, so generated asks reach validation and the pipeline instead of 429; the
# rate limiting itself is tested in tests/test_questions.py and tests/test_metrics.py.
CONFIG_TOML = """
[server]
web_base_url = "https://app.example.test"
[questions]
poll_seconds = 0.5
[uploads]
parse_timeout_seconds = 5.0
[rate_limits.ask_question]
limit = 100000
period_seconds = 60
"""


async def prepare(database_url: str) -> str:
    """An account with plenty of credits; its admin's token."""
    conn = await asyncpg.connect(database_url)
    try:
        made = await accounts.create_account(conn, "Fuzz", "admin@fuzz.example.test", 1_000_000)
    finally:
        await conn.close()
    return made["token"]


def schemathesis_command(
    base_url: str, token: str, *, max_examples: int, max_time: float | None, seed: int | None,
    workers: int = 1, phases: str = "examples,coverage,fuzzing",
) -> list[str]:
    command = [
        str(Path(sys.executable).with_name("schemathesis")), "run", f"{base_url}/api/v1/openapi.json",
        "--url", base_url,
        "--header", f"Authorization: Bearer {token}",
        "--checks", CHECKS,
        "--max-examples", str(max_examples),
        "--phases", phases,
        "--workers", str(workers),
        "--request-timeout", "30",
        "--suppress-health-check", "too_slow,filter_too_much",
        # Not the documentation's static assets: nothing to fuzz, and large.
        "--exclude-path-regex", "^/docs",
    ]
    if max_time:
        command += ["--max-time", str(int(max_time))]
    if seed is not None:
        command += ["--seed", str(seed)]
    return command


async def run(
    database_url: str, tmp: Path, *, max_examples: int, max_time: float | None = None,
    seed: int | None = None, workers: int = 1, phases: str = "examples,coverage,fuzzing",
    upload_seconds: float = 0,
) -> subprocess.CompletedProcess:
    token = await prepare(database_url)
    service = await ServiceProcess(database_url, CONFIG_TOML, tmp).start()
    try:
        command = schemathesis_command(
            service.url, token, max_examples=max_examples, max_time=max_time, seed=seed,
            workers=workers, phases=phases,
        )
        process = await asyncio.create_subprocess_exec(
            *command, cwd=tmp, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "120"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await process.communicate()
        text, code = output.decode(), process.returncode or 0
        if upload_seconds:
            print("uploads:")
            problems = await upload_fuzz.run(
                service.url, token, service.process.pid, seconds=upload_seconds, seed=seed or 1,
                parse_timeout=5.0,
            )
            text += "\nUpload fuzzing: " + ("\n".join(problems) if problems else "no problems") + "\n"
            code = code or (1 if problems else 0)
        return subprocess.CompletedProcess(command, code, text, "")
    finally:
        service.stop()


async def _main(args: argparse.Namespace) -> int:
    tmp = ROOT / "var" / "fuzz"
    tmp.mkdir(parents=True, exist_ok=True)
    server = None
    admin_url = os.environ.get("DATABASE_URL")
    if not admin_url:
        server = db.EmbeddedPostgres(tmp)
        admin_url = server.url()
    name = f"rfp_fuzz_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(admin_url)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    database_url = db.with_database(admin_url, name)
    try:
        await db.migrate_url(database_url)
        result = await run(
            database_url, tmp, max_examples=args.max_examples, max_time=args.max_time,
            seed=args.seed, workers=args.workers, upload_seconds=args.upload_seconds,
        )
        print(result.stdout)
        return result.returncode
    finally:
        conn = await asyncpg.connect(admin_url)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()
        if server is not None:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=200, help="per operation")
    parser.add_argument("--max-time", type=float, default=180, help="seconds for the whole run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--upload-seconds", type=float, default=60,
                        help="seconds of generated CSV/XLSX uploads after schemathesis (0: none)")
    return asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
