"""SIGTERM: in-flight requests and pipeline steps finish, every lease is handed back, exit 0."""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp
import pytest
from helpers_questions import add_entry, balance_and_ledger, wait_all_complete
from service_process import ServiceProcess

pytestmark = pytest.mark.slow  # starts service processes (make test-fast leaves it out)

SHUTDOWN_TIMEOUT = 6.0
DRAIN_CONFIG = f"""
[server]
shutdown_timeout = {SHUTDOWN_TIMEOUT}

[questions]
step_delay_seconds = 0.4   # slow steps: SIGTERM lands while questions are mid-pipeline
lease_seconds = 60         # long: only a released lease lets the next process resume at once
poll_seconds = 0.2

[rate_limits.ask_question]
limit = 1000
period_seconds = 60
"""


async def test_sigterm__drains_requests_and_steps_releases_leases_and_exits_0(
    conn, make_account, database_url, tmp_path
):
    actor = await make_account(credits=20)
    await add_entry(conn, actor.account_id, "Is data encrypted at rest?", "Yes, with AES-256.")
    first = await ServiceProcess(database_url, DRAIN_CONFIG, tmp_path).start()
    async with aiohttp.ClientSession(headers=actor.headers) as session:
        for i in range(8):
            async with session.post(f"{first.url}/api/v1/questions",
                                    json={"question": {"question": f"Is data {i} encrypted?"}}) as r:
                assert r.status == 202
        async with asyncio.timeout(15):  # under way: some questions leased, none complete yet
            while not await conn.fetchval(  # noqa: ASYNC110 (polls the database)
                "SELECT count(*) FROM questions WHERE lease_owner IS NOT NULL"
                " AND state NOT IN ('new', 'complete')"
            ):
                await asyncio.sleep(0.02)

        # A slow request: a 10,000-row import takes a second or more. (A request whose body is
        # still being uploaded is not drained: aiohttp stops reading a closing connection.)
        csv = "question,answer,id\n" + "".join(
            f"Is feature {i} supported?,Yes: feature {i} is in every plan.,f{i}\n" for i in range(10_000)
        )
        upload = asyncio.create_task(session.post(
            f"{first.url}/api/v1/knowledge_base_items/import", data=csv.encode(),
            headers={"Content-Type": "text/csv"},
        ))
        await asyncio.sleep(0.15)
        assert not upload.done(), "the import finished before SIGTERM: the test proves nothing"
        signalled = time.monotonic()
        first.process.terminate()
        response = await upload
        assert response.status == 200
        assert (await response.json())["created"] == 10_000

    code = await asyncio.to_thread(first.process.wait, SHUTDOWN_TIMEOUT + 5)
    assert code == 0, first.log.read_text()[-3000:]
    assert time.monotonic() - signalled < SHUTDOWN_TIMEOUT + 3
    # The operator sees the stop in the log: it was silent from SIGTERM to exit.
    log = first.log.read_text()
    assert re.search(r"INFO service\.web\.app: stopping: in-flight requests and the steps of [1-8] ",
                     log), log
    assert "INFO service.web.app: stopped: 0 question step(s) cut off at the shutdown timeout" in log, log

    unfinished = await conn.fetch(
        "SELECT id, state::text, lease_owner, lease_expires_at <= now() AS free"
        " FROM questions WHERE state <> 'complete'"
    )
    assert unfinished, "everything finished before SIGTERM: the test proves nothing"
    assert [q for q in unfinished if q["lease_owner"] is not None or not q["free"]] == []

    second = await ServiceProcess(database_url, DRAIN_CONFIG, tmp_path).start()
    try:
        await wait_all_complete(conn, 20)  # far sooner than the 60 s lease
    finally:
        second.stop()
    assert await balance_and_ledger(conn, actor.account_id) == (12, 12)
    assert await conn.fetchval("SELECT count(*) FROM credit_ledger WHERE reason = 'question'") == 8
