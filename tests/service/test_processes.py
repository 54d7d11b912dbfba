"""The real service in subprocesses: kill -9 mid-pipeline, and two processes sharing one database."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from helpers_questions import add_entry, balance_and_ledger, wait_all_complete
from service_process import ServiceProcess

pytestmark = pytest.mark.slow  # starts service processes (make test-fast leaves it out)

CRASH_CONFIG = """
[questions]
step_delay_seconds = 0.15   # slow enough to be killed mid-pipeline
lease_seconds = 1.5
poll_seconds = 0.2

[rate_limits.ask_question]
limit = 1000
period_seconds = 60
"""


@pytest.fixture
def services(database_url, tmp_path):
    started: list[ServiceProcess] = []

    def make(config: str = "") -> ServiceProcess:
        service = ServiceProcess(database_url, config, tmp_path)
        started.append(service)
        return service

    yield make
    for service in started:
        service.stop()


async def _ask_all(url: str, headers: dict, texts: list[str]) -> list[int]:
    async with aiohttp.ClientSession(headers=headers) as session:

        async def one(text: str) -> int:
            async with session.post(f"{url}/api/v1/questions", json={"question": {"question": text}}) as r:
                await r.read()
                return r.status

        return await asyncio.gather(*(one(t) for t in texts))


async def test_crash__kill_9_mid_pipeline_then_restart_completes_everything_charged_once(
    services, conn, make_account
):
    actor = await make_account(credits=60)
    await add_entry(conn, actor.account_id, "Is data encrypted at rest?", "Yes, with AES-256.")
    first = await services(CRASH_CONFIG).start()
    texts = [f"Is data {i} encrypted at rest?" for i in range(50)]
    statuses = await _ask_all(first.url, actor.headers, texts)
    assert statuses == [202] * 50
    # Wait until the pipeline is under way but not finished, then crash.
    async with asyncio.timeout(20):
        while True:
            states = dict(await conn.fetch("SELECT state::text, count(*) FROM questions GROUP BY 1"))
            if states.get("complete", 0) >= 5:
                break
            await asyncio.sleep(0.02)
    first.kill()
    states = dict(await conn.fetch("SELECT state::text, count(*) FROM questions GROUP BY 1"))
    assert states.get("complete", 0) < 50, states
    assert sum(n for s, n in states.items() if s not in ("new", "complete")) > 0, states

    second = await services(CRASH_CONFIG).start()
    await wait_all_complete(conn, 60)
    second.stop()
    assert await conn.fetchval("SELECT count(*) FROM questions WHERE answer IS NOT NULL") == 50
    assert await conn.fetchval("SELECT max(attempts) FROM questions") >= 2  # some were resumed
    charges = await conn.fetch(
        "SELECT subject_id, sum(amount) AS total, count(*) AS n FROM credit_ledger"
        " WHERE account_id = $1 AND reason = 'question' GROUP BY 1", actor.account_id,
    )
    assert len(charges) == 50 and all(c["total"] == -1 and c["n"] == 1 for c in charges)
    assert await conn.fetchval("SELECT count(*) FROM credit_ledger WHERE reason = 'refund'") == 0
    assert await balance_and_ledger(conn, actor.account_id) == (10, 10)


async def test_two_processes__share_one_members_rate_limit(services, make_account):
    actor = await make_account(credits=100)
    a, b = services(), services()
    await asyncio.gather(a.start(), b.start())
    texts = [f"Question {i}?" for i in range(15)]
    left, right = await asyncio.gather(
        _ask_all(a.url, actor.headers, texts), _ask_all(b.url, actor.headers, texts)
    )
    statuses = left + right
    assert statuses.count(202) == 10, statuses
    assert statuses.count(429) == 20
    assert left.count(202) + right.count(202) == 10


async def test_two_processes__work_every_question_once(services, conn, make_account):
    actor = await make_account(credits=100)
    config = "[rate_limits.ask_question]\nlimit = 1000\nperiod_seconds = 60\n"
    a, b = services(config), services(config)
    await asyncio.gather(a.start(), b.start())
    texts = [f"Question {i}?" for i in range(20)]
    await asyncio.gather(_ask_all(a.url, actor.headers, texts), _ask_all(b.url, actor.headers, texts))
    await wait_all_complete(conn, 30)
    assert await conn.fetchval("SELECT count(*) FROM questions") == 40
    assert await conn.fetchval("SELECT max(attempts) FROM questions") == 1  # nobody took one twice
