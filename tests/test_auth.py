from __future__ import annotations

import pytest

from service.auth import TOKEN_PREFIX, hash_token, new_token, token_well_formed

SEARCH = "/api/v1/rfps/search?query=x"


async def get_with(client, authorization: str | None):
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await client.get(SEARCH, headers=headers)
    return response, await response.json()


def assert_unauthorized(response, body, challenge: str) -> None:
    assert response.status == 401
    assert body["error"]["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"] == challenge
    assert response.headers["Content-Type"].startswith("application/json")


async def test_auth__missing_token_is_401_with_bare_challenge(client):
    response, body = await get_with(client, None)
    assert_unauthorized(response, body, 'Bearer realm="api"')


async def test_auth__other_scheme_is_401_with_bare_challenge(client, admin):
    response, body = await get_with(client, f"Basic {admin.token}")
    assert_unauthorized(response, body, 'Bearer realm="api"')


@pytest.mark.parametrize("header", ["Bearer", "Bearer ", "Bearer    "])
async def test_auth__bearer_without_token_is_401_invalid_request(client, header):
    response, body = await get_with(client, header)
    assert_unauthorized(response, body, 'Bearer realm="api", error="invalid_request"')


async def test_auth__bad_checksum_is_401_even_if_its_hash_were_stored(client, conn, admin):
    # A token whose last character is changed fails the checksum. Storing its hash proves that
    # the checksum, not the lookup, rejects it.
    good = admin.token
    mistyped = good[:-1] + ("A" if good[-1] != "A" else "B")
    assert not token_well_formed(mistyped)
    await conn.execute(
        "INSERT INTO api_tokens (member_id, token_hash, scopes) VALUES ($1, $2, '{read,write}')",
        admin.member_id, hash_token(mistyped),
    )
    response, body = await get_with(client, f"Bearer {mistyped}")
    assert_unauthorized(response, body, 'Bearer realm="api", error="invalid_token"')


async def test_auth__unknown_well_formed_token_is_401_invalid_token(client):
    response, body = await get_with(client, f"Bearer {new_token()}")
    assert_unauthorized(response, body, 'Bearer realm="api", error="invalid_token"')


async def test_auth__expired_token_is_401_invalid_token(client, conn, admin):
    await conn.execute(
        "UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE token_hash = $1",
        hash_token(admin.token),
    )
    response, body = await get_with(client, f"Bearer {admin.token}")
    assert_unauthorized(response, body, 'Bearer realm="api", error="invalid_token"')


async def test_auth__revoked_token_is_401_invalid_token(client, conn, admin):
    await conn.execute(
        "UPDATE api_tokens SET revoked_at = now() WHERE token_hash = $1", hash_token(admin.token)
    )
    response, body = await get_with(client, f"Bearer {admin.token}")
    assert_unauthorized(response, body, 'Bearer realm="api", error="invalid_token"')


async def test_auth__live_token_with_future_expiry_is_accepted(client, conn, admin):
    await conn.execute(
        "UPDATE api_tokens SET expires_at = now() + interval '1 hour' WHERE token_hash = $1",
        hash_token(admin.token),
    )
    response, _ = await get_with(client, f"Bearer {admin.token}")
    assert response.status == 200


async def test_auth__scheme_is_case_insensitive(client, admin):
    response, _ = await get_with(client, f"bearer {admin.token}")
    assert response.status == 200


async def test_auth__token_is_stored_only_as_hash(conn, admin):
    stored = await conn.fetch("SELECT token_hash FROM api_tokens")
    assert [bytes(r["token_hash"]) for r in stored] == [hash_token(admin.token)]
    dump = await conn.fetchval("SELECT string_agg(t::text, ' ') FROM api_tokens t")
    assert admin.token not in dump


def test_new_token__is_prefixed_and_passes_its_own_checksum():
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(t.startswith(TOKEN_PREFIX) and len(t) == 41 and token_well_formed(t) for t in tokens)


@pytest.mark.parametrize(
    "token", ["", "rfpk_", "rfpk_short", "xxxx_" + "a" * 36, "rfpk_" + "!" * 36],
)
def test_token_well_formed__rejects_malformed(token):
    assert not token_well_formed(token)


async def test_auth__health_probes_need_no_token(client):
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200


async def test_auth__every_api_route_needs_a_token(client):
    # One request per route of this issue, without a token: all 401, none reaches a handler.
    calls = [
        ("GET", "/api/v1/rfps/rfp_x"),
        ("GET", "/api/v1/rfps/search?query=x"),
        ("GET", "/api/v1/rfps/rfp_x/rfp_items"),
        ("POST", "/api/v1/rfps"),
        ("PATCH", "/api/v1/rfps/rfp_x"),
    ]
    for method, path in calls:
        response = await client.request(method, path, json={"rfp": {"title": "x"}})
        assert response.status == 401, (method, path)
