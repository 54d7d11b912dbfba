from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from service import db
from service.domain.rfps import like_pattern

SEARCH = "/api/v1/rfps/search"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


async def search(client, actor, **params):
    response = await client.get(SEARCH, params=params, headers=actor.headers)
    return response.status, await response.json()


async def test_search__matches_title_and_description_case_insensitively(client, admin, make_rfp):
    in_title = await make_rfp(admin, "ACME Security Review")
    in_description = await make_rfp(admin, "Other", description="for acme corp")
    await make_rfp(admin, "Unrelated", description="nothing here")

    status, body = await search(client, admin, query="aCmE")

    assert status == 200
    assert {rfp["id"] for rfp in body["rfps"]} == {in_title, in_description}


async def test_search__results_omit_context_but_carry_owner_and_stats(client, admin):
    await client.post(
        "/api/v1/rfps", json={"rfp": {"title": "Acme", "context": "secret"}}, headers=admin.headers
    )
    _, body = await search(client, admin, query="acme")
    (rfp,) = body["rfps"]
    assert "context" not in rfp
    assert rfp["owner"]["id"] == admin.user_id
    assert rfp["stats"]["total_items"] == 0
    assert rfp["web_link"] == f"https://app.example.test/rfps/{rfp['id']}"


@pytest.mark.parametrize(
    ("term", "matching_title"),
    [("50% off", "50% off"), ("abc_def", "abc_def"), ("abc\\def", "abc\\def")],
    ids=["percent", "underscore", "backslash"],
)
async def test_search__escapes_wildcards_and_backslash(client, admin, make_rfp, term, matching_title):
    # Each decoy would match if the character were a wildcard (or an escape) instead of a literal.
    await make_rfp(admin, "50 percent off")  # `%` as a wildcard would match
    await make_rfp(admin, "abcxdef")  # `_` as a wildcard would match
    await make_rfp(admin, "abcdef")  # `\d` as an escaped `d` would match
    wanted = await make_rfp(admin, matching_title)

    _, body = await search(client, admin, query=term)

    assert [rfp["id"] for rfp in body["rfps"]] == [wanted]


def test_like_pattern__escapes_backslash_before_wildcards():
    assert like_pattern("a\\%_") == "%a\\\\\\%\\_%"


async def test_search__newest_first_twenty_per_page_with_partial_last_page(client, admin, make_rfp):
    ids = [
        await make_rfp(admin, f"Acme {n}", created_at=T0 + timedelta(minutes=n)) for n in range(25)
    ]
    newest_first = list(reversed(ids))

    status1, first = await search(client, admin, query="acme")
    status2, last = await search(client, admin, query="acme", page="2")

    assert (status1, status2) == (200, 200)
    assert [r["id"] for r in first["rfps"]] == newest_first[:20]
    assert first["pagination"] == {
        "current_page": 1, "total_pages": 2, "total_count": 25, "items_per_page": 20,
        "from": 1, "to": 20,
    }
    assert [r["id"] for r in last["rfps"]] == newest_first[20:]
    assert last["pagination"] == {
        "current_page": 2, "total_pages": 2, "total_count": 25, "items_per_page": 20,
        "from": 21, "to": 25,
    }


async def test_search__empty_result_has_zero_pages_and_null_from_to(client, admin, make_rfp):
    await make_rfp(admin, "Acme")
    status, body = await search(client, admin, query="zebra")
    assert status == 200
    assert body == {
        "rfps": [],
        "pagination": {
            "current_page": 1, "total_pages": 0, "total_count": 0, "items_per_page": 20,
            "from": None, "to": None,
        },
    }


async def test_search__leading_zeros_however_many_name_the_same_page(client, admin, make_rfp):
    await make_rfp(admin, title="Acme")
    status, body = await search(client, admin, query="acme", page="0" * 4400 + "1")
    assert status == 200 and body["pagination"]["current_page"] == 1


async def test_search__page_past_the_end_is_empty_list(client, admin, make_rfp):
    await make_rfp(admin, "Acme")
    status, body = await search(client, admin, query="acme", page="3")
    assert status == 200
    assert body["rfps"] == []
    assert body["pagination"] == {
        "current_page": 3, "total_pages": 1, "total_count": 1, "items_per_page": 20,
        "from": None, "to": None,
    }


@pytest.mark.parametrize("page", ["0", "abc", "-1", "1.5", " 1", "99999999999", "000", "9" * 4400],
                         ids=["0", "abc", "-1", "1.5", " 1", "11 digits", "000", "4400 digits"])
async def test_search__page_not_a_positive_integer_is_400_parameter_invalid(client, admin, page):
    status, body = await search(client, admin, query="acme", page=page)
    assert status == 400
    assert body["error"]["code"] == "parameter_invalid"
    assert "page" in body["error"]["message"]


@pytest.mark.parametrize("params", [{}, {"query": ""}, {"query": "   "}], ids=["absent", "empty", "blank"])
async def test_search__without_query_is_400_parameter_missing(client, admin, params):
    status, body = await search(client, admin, **params)
    assert status == 400
    assert body["error"]["code"] == "parameter_missing"
    assert "query" in body["error"]["message"]
    assert "details" not in body["error"]


async def test_search__other_account_rfps_are_invisible(client, make_account, make_rfp):
    mine, theirs = await make_account(), await make_account()
    await make_rfp(theirs, "Acme")
    _, body = await search(client, mine, query="acme")
    assert body["rfps"] == []
    assert body["pagination"]["total_count"] == 0


async def test_search__viewer_with_read_token_may_search(client, admin, make_member, make_rfp):
    viewer = await make_member(admin.account_id, role="viewer", scopes="read")
    await make_rfp(admin, "Acme")
    status, body = await search(client, viewer, query="acme")
    assert status == 200
    assert len(body["rfps"]) == 1


def _index_names(plan: dict) -> set[str]:
    names = {plan["Index Name"]} if "Index Name" in plan else set()
    for child in plan.get("Plans", []):
        names |= _index_names(child)
    return names


@pytest.mark.parametrize("query_name", ["search_rfps", "count_search_rfps_capped"])
async def test_search__trigram_index_serves_the_substring_match(conn, admin, query_name):
    # 20,000 RFPs with random titles and descriptions, three of them mentioning "zebra". Nothing
    # is disabled: after VACUUM ANALYZE the planner picks the trigram indexes on its own. VACUUM
    # (what autovacuum does in production) flushes the GIN pending list the bulk insert filled;
    # without it the planner prices the unflushed list so high that a seq scan looks cheaper.
    await conn.execute(
        """INSERT INTO rfps (id, account_id, owner_id, title, description)
           SELECT 'rfp_bulk' || n, $1, $2, md5(n::text), md5((n * 7)::text)
             FROM generate_series(1, 20000) AS n""",
        admin.account_id, admin.user_id,
    )
    await conn.execute(
        """UPDATE rfps SET title = title || ' Zebra crossing' WHERE id IN ('rfp_bulk7', 'rfp_bulk70');
           UPDATE rfps SET description = 'a zebra' WHERE id = 'rfp_bulk700'"""
    )
    await conn.execute("VACUUM ANALYZE rfps")
    args = [admin.account_id, like_pattern("zebra")]
    args += [20, 0] if query_name == "search_rfps" else [10_000]

    # As the handler runs them: custom plans (search.sql plan_each_search).
    async with conn.transaction():
        await conn.execute(db.query("plan_each_search"))
        plan = json.loads(
            await conn.fetchval("EXPLAIN (FORMAT JSON) " + db.query(query_name), *args)
        )

    # One index on title and description together (migration 0012); the per-column ones are gone.
    used = _index_names(plan[0]["Plan"])
    assert "rfps_search_trgm" in used and "rfps_account_newest" not in used, plan
    rows = await conn.fetch(db.query("search_rfps"), admin.account_id, like_pattern("zebra"), 20, 0)
    assert {row["id"] for row in rows} == {"rfp_bulk7", "rfp_bulk70", "rfp_bulk700"}


async def test_search__leaves_no_session_setting_on_the_pooled_connection(client, admin, config):
    """Pooled connections are not reset on release, so the search's planner setting must end
    with its transaction instead of leaking into whatever the connection serves next."""
    from service.web.keys import POOL

    response = await client.get("/api/v1/rfps/search?query=xyz", headers=admin.headers)
    assert response.status == 200
    pool = client.server.app[POOL]
    for _ in range(pool.get_size()):
        async with pool.acquire() as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == "auto"


async def test_search__term_never_matches_across_title_and_description(client, admin, make_rfp):
    """The index covers title and description joined by U+001F: a term spanning the end of the
    title and the start of the description must not match, with a space or the separator itself."""
    joined = await make_rfp(admin, "Acme Security", description="Review board")
    no_description = await make_rfp(admin, "Acme Security")

    for term in ("security review", "securityreview", "Security\x1fReview", "security\x1f"):
        status, body = await search(client, admin, query=term)
        assert status == 200
        assert body["rfps"] == [], term
    _, body = await search(client, admin, query="security")
    assert {rfp["id"] for rfp in body["rfps"]} == {joined, no_description}


async def test_search__term_with_the_separator_matches_inside_one_field(client, admin, make_rfp):
    in_title = await make_rfp(admin, "odd\x1ftitle")
    in_description = await make_rfp(admin, "plain", description="odd\x1fdescription")
    await make_rfp(admin, "odd", description="title")  # only across the join

    status, body = await search(client, admin, query="ODD\x1fT")
    assert status == 200
    assert [rfp["id"] for rfp in body["rfps"]] == [in_title]
    assert body["pagination"]["total_count"] == 1
    _, body = await search(client, admin, query="odd\x1fd")
    assert [rfp["id"] for rfp in body["rfps"]] == [in_description]
