"""A short schemathesis run against a real server (tests/fuzz.py); `make fuzz` runs a longer one."""

from __future__ import annotations

import re

import fuzz
import pytest

pytestmark = pytest.mark.slow  # starts service processes (make test-fast leaves it out)


async def test_fuzz__no_5xx_no_undescribed_response_no_unauthenticated_access(
    database_url, tmp_path
):
    result = await fuzz.run(
        database_url, tmp_path, max_examples=4, max_time=45, seed=7, workers=2,
        phases="examples,fuzzing", upload_seconds=10,
    )
    assert result.returncode == 0, result.stdout[-6000:]
    # Bounded by time on a loaded machine: not every operation may be reached (make fuzz does).
    tested = re.search(r"Tested: (\d+)", result.stdout)
    assert tested and int(tested.group(1)) >= 10, result.stdout[-3000:]
    assert "Upload fuzzing: no problems" in result.stdout, result.stdout[-3000:]
