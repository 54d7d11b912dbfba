"""Running the operator CLI (`python -m service …`) as an operator would, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import PGBOUNCER_URL, ROOT

# In the PgBouncer pass the CLI is told, as an operator would tell it; without a direct URL, so
# its migrations take the one-transaction path.
POOLER_ENV = {"RFP_DATABASE_POOLER": "pgbouncer-transaction"} if PGBOUNCER_URL else {}


def cli(database_url: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "service", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": database_url, **POOLER_ENV,
             **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def cli_json(database_url: str, *args: str) -> dict:
    result = cli(database_url, *args, "--json")
    assert result.returncode == 0, result.stderr
    # Exactly one JSON object on stdout, nothing else there.
    assert result.stdout.count("\n") == 1
    return json.loads(result.stdout)
