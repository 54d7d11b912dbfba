from __future__ import annotations

import re

import pytest

from service.domain.ids import new_id
from service.domain.tokens import TOKEN_PREFIX, hash_token, new_token, token_well_formed

SEARCH = "/api/v1/rfps/search?query=xyz"
# GET /rfps/{id} reads the principal and the RFP in one statement (auth.sql principal_and_rfp),
# every other route through principal_by_token_hash: each token case runs through both.
READ_RFP = "/api/v1/rfps/rfp_x"
PATHS = pytest.mark.parametrize("path", [SEARCH, READ_RFP], ids=["search", "read_rfp"])


async def get_with(client, authorization: str | None, path: str = SEARCH):
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await client.get(path, headers=headers)
    return response, await response.json()


def assert_accepted(response, path: str) -> None:
    # rfp_x does not exist: a live token reaches the handler, which answers 404.
    assert response.status == (200 if path == SEARCH else 404)


def assert_unauthorized(response, body, challenge: str) -> None:
    assert response.status == 401
    assert body["error"]["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"] == challenge
    assert response.headers["Content-Type"].startswith("application/json")


@PATHS
async def test_auth__missing_token_is_401_with_bare_challenge(client, path):
    response, body = await get_with(client, None, path)
    assert_unauthorized(response, body, 'Bearer realm="api"')


@PATHS
async def test_auth__other_scheme_is_401_with_bare_challenge(client, admin, path):
    response, body = await get_with(client, f"Basic {admin.token}", path)
    assert_unauthorized(response, body, 'Bearer realm="api"')


@pytest.mark.parametrize("header", ["Bearer", "Bearer ", "Bearer    "])
@PATHS
async def test_auth__bearer_without_token_is_401_invalid_request(client, header, path):
    response, body = await get_with(client, header, path)
    assert_unauthorized(response, body, 'Bearer realm="api", error="invalid_request"')


@PATHS
async def test_auth__bad_checksum_is_401_even_if_its_hash_were_stored(client, conn, admin, path):
    # A token whose last character is changed fails the checksum. Storing its hash proves that
    # the checksum, not the lookup, rejects it.
    good = admin.token
    mistyped = good[:-1] + ("A" if good[-1] != "A" else "B")
    assert not token_well_formed(mistyped)
    await conn.execute(
        "INSERT INTO api_tokens (member_id, token_hash, scopes) VALUES ($1, $2, '{read,write}')",
        admin.member_id, hash_token(mistyped),
    )
    response, body = await get_with(client, f"Bearer {mistyped}", path)
    assert_unauthorized(response, body, 'Bearer realm="api", error="invalid_token"')


@PATHS
async def test_auth__unknown_well_formed_token_is_401_invalid_token(client, path):
    response, body = await get_with(client, f"Bearer {new_token()}", path)
    assert_unauthorized(response, body, 'Bearer realm="api", error="invalid_token"')


@PATHS
async def test_auth__expired_token_is_401_invalid_token(client, conn, admin, path):
    await conn.execute(
        "UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE token_hash = $1",
        hash_token(admin.token),
    )
    response, body = await get_with(client, f"Bearer {admin.token}", path)
    assert_unauthorized(response, body, 'Bearer realm="api", error="invalid_token"')


@PATHS
async def test_auth__revoked_token_is_401_invalid_token(client, conn, admin, path):
    await conn.execute(
        "UPDATE api_tokens SET revoked_at = now() WHERE token_hash = $1", hash_token(admin.token)
    )
    response, body = await get_with(client, f"Bearer {admin.token}", path)
    assert_unauthorized(response, body, 'Bearer realm="api", error="invalid_token"')


@PATHS
async def test_auth__live_token_with_future_expiry_is_accepted(client, conn, admin, path):
    await conn.execute(
        "UPDATE api_tokens SET expires_at = now() + interval '1 hour' WHERE token_hash = $1",
        hash_token(admin.token),
    )
    response, _ = await get_with(client, f"Bearer {admin.token}", path)
    assert_accepted(response, path)


@PATHS
async def test_auth__scheme_is_case_insensitive(client, admin, path):
    response, _ = await get_with(client, f"bearer {admin.token}", path)
    assert_accepted(response, path)


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
        ("GET", "/api/v1/rfps/search?query=xyz"),
        ("GET", "/api/v1/rfps/rfp_x/rfp_items"),
        ("POST", "/api/v1/rfps"),
        ("PATCH", "/api/v1/rfps/rfp_x"),
    ]
    for method, path in calls:
        response = await client.request(method, path, json={"rfp": {"title": "x"}})
        assert response.status == 401, (method, path)


def test_new_id__22_base62_characters_every_position_random():
    ids = [new_id("rfp") for _ in range(300)]
    assert all(re.fullmatch(r"rfp_[0-9A-Za-z]{22}", i) for i in ids)
    assert len(set(ids)) == 300
    for position in (4, 14, 25):  # first, middle and last character all vary
        assert len({i[position] for i in ids}) > 30
