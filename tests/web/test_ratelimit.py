"""Rate limits taken in the same statement as the token lookup (auth.sql principal_and_rate_limit)."""

from __future__ import annotations

from conftest import with_config

from service import db
from service.domain.tokens import hash_token
from service.web.app import create_app


async def buckets(conn) -> dict[str, float]:
    rows = await conn.fetch("SELECT bucket_key, tokens FROM rate_limit_buckets")
    return {row["bucket_key"]: row["tokens"] for row in rows}


async def test_principal_and_rate_limit__takes_only_when_the_policy_passes(conn, admin):
    query = db.query("principal_and_rate_limit")
    args = ("ask_question:", 10.0, 10 / 60)

    refused = await conn.fetchrow(query, hash_token(admin.token), "write", ["viewer"], *args)
    assert refused["member_id"] == admin.member_id and refused["allowed"] is None
    no_scope = await conn.fetchrow(query, hash_token(admin.token), "nope", ["admin"], *args)
    assert no_scope["allowed"] is None
    assert await buckets(conn) == {}

    taken = await conn.fetchrow(query, hash_token(admin.token), "write", ["admin"], *args)
    assert taken["allowed"] is True and taken["remaining"] == 9  # taken once, not per column
    assert await buckets(conn) == {f"ask_question:{admin.member_id}": 9}


async def test_rate_limit__a_request_refused_by_scope_or_role_takes_nothing(
    config, conn, admin, make_member, aiohttp_client
):
    limited = with_config(config, rate_limits={
        "ask_question": {"limit": 2, "period_seconds": 60},
        "create_rfp": {"limit": 2, "period_seconds": 60},
    })
    client = await aiohttp_client(create_app(limited))
    reader = await make_member(admin.account_id, role="member", scopes="read")
    viewer = await make_member(admin.account_id, role="viewer", scopes="read,write")
    ask = {"question": {"question": "Anything?"}}

    assert (await client.post("/api/v1/questions", json=ask, headers=reader.headers)).status == 403
    rfp = {"rfp": {"title": "x"}}
    assert (await client.post("/api/v1/rfps", json=rfp, headers=viewer.headers)).status == 403
    assert await buckets(conn) == {}

    responses = [await client.post("/api/v1/rfps", json=rfp, headers=admin.headers) for _ in range(3)]
    assert [response.status for response in responses] == [201, 201, 429]
    # SECURITY.md: a limit's message names its setting (it said only "at most 2 per 60 seconds").
    assert "(rate_limits.create_rfp)" in (await responses[2].json())["error"]["message"]
    (key, tokens), = (await buckets(conn)).items()
    assert key == f"create_rfp:{admin.member_id}" and tokens < 0.1  # empty, but for the refill


async def test_rate_limit__on_a_prefetching_route_limits_and_still_reads(
    config, admin, make_rfp, aiohttp_client
):
    # GET /rfps/{id} normally reads the RFP with the token; limited, it takes the bucket instead
    # and the handler reads the RFP itself.
    limited = with_config(config, rate_limits={"get_rfp": {"limit": 2, "period_seconds": 60}})
    client = await aiohttp_client(create_app(limited))
    rfp_id = await make_rfp(admin, "Acme")
    first = await client.get(f"/api/v1/rfps/{rfp_id}", headers=admin.headers)
    assert first.status == 200 and (await first.json())["title"] == "Acme"
    assert first.headers["RateLimit-Remaining"] == "1"
    missing = await client.get("/api/v1/rfps/rfp_nope", headers=admin.headers)
    assert missing.status == 404 and missing.headers["RateLimit-Remaining"] == "0"
    assert (await client.get(f"/api/v1/rfps/{rfp_id}", headers=admin.headers)).status == 429


async def test_rate_limit__headers_on_every_response_of_a_limited_route(config, admin, aiohttp_client):
    # Errors that are not the handler's own (413 while reading the body) carry them too.
    limited = with_config(
        config, server={"max_body_bytes": 1024},
        rate_limits={"create_rfp": {"limit": 5, "period_seconds": 60}},
    )
    client = await aiohttp_client(create_app(limited))
    too_big = await client.post(
        "/api/v1/rfps", json={"rfp": {"title": "x" * 2000}}, headers=admin.headers
    )
    assert too_big.status == 413
    assert too_big.headers["RateLimit-Limit"] == "5"
    assert too_big.headers["RateLimit-Remaining"] == "4"
    assert "X-Request-Id" in too_big.headers


async def test_rate_limit__headers_on_a_streamed_response_too(config, admin, make_rfp, aiohttp_client):
    # The CSV export prepares its response itself: its headers leave before the handler returns.
    limited = with_config(config, rate_limits={"export_rfp": {"limit": 5, "period_seconds": 60}})
    client = await aiohttp_client(create_app(limited))
    rfp_id = await make_rfp(admin, "Acme")
    response = await client.get(
        f"/api/v1/rfps/{rfp_id}/export?format=csv", headers={**admin.headers, "X-Request-Id": "c-2"}
    )
    assert response.status == 200 and response.content_type == "text/csv"
    assert response.headers["RateLimit-Remaining"] == "4"
    assert response.headers["X-Request-Id"] == "c-2"
