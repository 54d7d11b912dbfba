from __future__ import annotations


async def test_healthz__answers_without_auth(client):
    response = await client.get("/healthz")
    assert response.status == 200
    assert (await response.json()) == {"status": "ok"}


async def test_readyz__reports_database_reachable(client):
    response = await client.get("/readyz")
    assert response.status == 200
    assert (await response.json())["database"] == "ok"
