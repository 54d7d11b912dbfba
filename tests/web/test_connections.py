from __future__ import annotations

import asyncio
import re
from pathlib import Path

from conftest import with_config

from service import db
from service.web.app import create_app

SERVICE = Path(db.__file__).resolve().parent
# Only these may take connections from the pool directly: the auth middleware holds one per
# body-less request, and auth.connection hands it to handlers.
ALLOWED = {"db.py", "auth.py", "app.py"}


def test_handlers_take_connections_through_db_connection():
    """A handler acquiring from the pool while auth holds the request's connection needs two at
    once; with a full pool, every request waits for a second one and none can finish."""
    offenders = [
        f"{path.relative_to(SERVICE)}:{number}"
        for path in sorted(SERVICE.rglob("*.py"))
        if path.name not in ALLOWED
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\[POOL\]\.acquire\(|= request\.app\[POOL\]$", line)
    ]
    assert offenders == [], (
        "use `async with connection(request) as conn` (service/web/auth.py) in: " + ", ".join(offenders)
    )


async def test_request_connection__every_route_works_with_a_one_connection_pool(
    config, admin, aiohttp_client
):
    client = await aiohttp_client(
        create_app(with_config(config, database={"pool_min_size": 1, "pool_max_size": 1}))
    )
    created = await client.post("/api/v1/rfps", json={"rfp": {"title": "x"}}, headers=admin.headers)
    rfp_id = (await created.json())["id"]
    async with asyncio.timeout(10):  # two connections at once would wait forever
        for path in (f"/api/v1/rfps/{rfp_id}", f"/api/v1/rfps/{rfp_id}/rfp_items",
                     "/api/v1/rfps/search?query=x", "/readyz"):
            assert (await client.get(path, headers=admin.headers)).status == 200, path
        patched = await client.patch(
            f"/api/v1/rfps/{rfp_id}", json={"rfp": {"title": "y"}}, headers=admin.headers
        )
        assert patched.status == 200


async def test_event_streams__do_not_pin_pool_connections(config, admin, aiohttp_client):
    slow = with_config(
        config,
        database={"pool_min_size": 1, "pool_max_size": 2},
        questions={"step_delay_seconds": 1.0},
    )
    client = await aiohttp_client(create_app(slow))
    asked = await client.post(
        "/api/v1/questions", json={"question": {"question": "Is data encrypted?"}}, headers=admin.headers
    )
    question_id = (await asked.json())["id"]
    streams = [
        await client.get(f"/api/v1/questions/{question_id}/events", headers=admin.headers)
        for _ in range(3)
    ]
    try:
        assert all(stream.status == 200 for stream in streams)
        async with asyncio.timeout(5):  # three streams holding connections would starve this
            response = await client.get(f"/api/v1/questions/{question_id}", headers=admin.headers)
        assert response.status == 200
    finally:
        for stream in streams:
            stream.close()

