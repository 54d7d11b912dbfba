from __future__ import annotations

from service.domain import rfps


async def test_search__total_count_is_exact_below_the_cap(client, admin):
    for title in ("alpha one", "alpha two", "beta"):
        await client.post("/api/v1/rfps", json={"rfp": {"title": title}}, headers=admin.headers)
    response = await client.get("/api/v1/rfps/search?query=ALPHA", headers=admin.headers)
    assert response.status == 200
    assert (await response.json())["pagination"]["total_count"] == 2
    assert "X-Total-Count-Capped" not in response.headers


async def test_search__count_stops_at_the_cap_and_says_so(client, admin, monkeypatch):
    monkeypatch.setattr(rfps, "SEARCH_COUNT_CAP", 3)
    for n in range(5):
        await client.post("/api/v1/rfps", json={"rfp": {"title": f"alpha {n}"}}, headers=admin.headers)
    response = await client.get("/api/v1/rfps/search?query=alpha", headers=admin.headers)
    body = await response.json()
    assert body["pagination"]["total_count"] == 3
    assert body["pagination"]["total_pages"] == 1
    assert len(body["rfps"]) == 5  # the page itself is not capped
    assert response.headers["X-Total-Count-Capped"] == "true"
