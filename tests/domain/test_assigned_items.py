"""One member's items across the account's RFPs: GET /api/v1/rfp_items?assignee=me|<user id>
(what the web app's "My items" page lists too)."""

from __future__ import annotations

import json
from typing import Any

from helpers_items import add_items, deadline_rfp

from service import db
from service.domain import accounts


async def listed(client: Any, actor: Any, **params: Any) -> tuple[int, dict[str, Any]]:
    response = await client.get("/api/v1/rfp_items", params=params, headers=actor.headers)
    return response.status, await response.json()


def ids_of(body: dict[str, Any]) -> list[str]:
    return [item["id"] for item in body["rfp_items"]]


async def test_assigned_items__across_rfps_by_deadline_then_rfp_then_position(
    client, conn, admin, make_member, make_rfp,
):
    writer = await make_member(admin.account_id, "member")
    later = await deadline_rfp(conn, make_rfp, admin, "Later", "2031-05-01")
    undated = await deadline_rfp(conn, make_rfp, admin, "Undated", None)
    sooner = await deadline_rfp(conn, make_rfp, admin, "Sooner", "2031-01-10")
    tied = await deadline_rfp(conn, make_rfp, admin, "Sooner too", "2031-01-10")
    w = writer.user_id
    later_ids = await add_items(conn, later, (1, w, "pending"), (2, admin.user_id, "pending"),
                                (3, w, "approved"))
    undated_ids = await add_items(conn, undated, (1, None, "pending"), (2, w, "auto_answered"))
    sooner_ids = await add_items(conn, sooner, (5, w, "needs_input"), (2, w, "pending"))
    tied_ids = await add_items(conn, tied, (1, w, "discarded"))
    first, second = sorted([(sooner, sooner_ids), (tied, tied_ids)])  # a tie: by the RFP's id
    expected = [*sorted(first[1], key=lambda i: int(i.rsplit("_", 1)[1])),
                *sorted(second[1], key=lambda i: int(i.rsplit("_", 1)[1])),
                later_ids[0], later_ids[2], undated_ids[1]]

    status, body = await listed(client, writer, assignee="me")
    assert status == 200
    assert ids_of(body) == expected
    assert body["pagination"] == {"current_page": 1, "total_pages": 1, "total_count": 6,
                                  "items_per_page": 20, "from": 1, "to": 6}
    # Anyone of the account asks for it by the member's user id alike.
    assert (await listed(client, admin, assignee=str(w)))[1] == body

    # Each item as the item API shows it, with its RFP's id, title and deadline.
    shown = {item["id"]: item for item in body["rfp_items"]}
    for rfp_id, title, deadline, item_id in [(later, "Later", "2031-05-01", later_ids[2]),
                                             (undated, "Undated", None, undated_ids[1])]:
        alone = await (await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items/{item_id}",
                                        headers=admin.headers)).json()
        assert shown[item_id] == alone | {"rfp": {"id": rfp_id, "title": title, "deadline": deadline}}
    assert shown[later_ids[2]]["assignee"] == {
        "id": w, "name": writer.email.split("@")[0], "email": writer.email}


async def test_assigned_items__another_accounts_items_are_never_listed_even_with_their_user_ids(
    client, conn, admin, make_account, make_member, make_rfp,
):
    other = await make_account(name="Other")
    # One person, a member of both accounts, with items assigned in each.
    writer = await make_member(admin.account_id, "member")
    await accounts.add_member(conn, other.account_id, writer.email, "member")
    token_there = await accounts.create_token(conn, other.account_id, writer.email, ["read"])
    ours = await add_items(conn, await make_rfp(admin, "Ours"), (1, writer.user_id, "pending"))
    theirs_rfp = await make_rfp(other, "Theirs")
    await add_items(conn, theirs_rfp, (1, writer.user_id, "pending"), (2, other.user_id, "pending"))

    for actor, value in [(writer, "me"), (admin, str(writer.user_id))]:
        status, body = await listed(client, actor, assignee=value)
        assert status == 200 and ids_of(body) == ours, (actor, value)
        assert body["pagination"]["total_count"] == 1
    # The other account's own admin, by user id: nothing here, whatever they hold there.
    status, body = await listed(client, admin, assignee=str(other.user_id))
    assert status == 200 and body["rfp_items"] == [] and body["pagination"]["total_count"] == 0
    # From the other account, the same person's list is that account's items alone.
    response = await client.get("/api/v1/rfp_items", params={"assignee": "me"},
                                headers={"Authorization": f"Bearer {token_there}"})
    assert [i["rfp_id"] for i in (await response.json())["rfp_items"]] == [theirs_rfp]


async def test_assigned_items__a_viewer_reads_lists_and_its_own_is_empty(
    client, conn, admin, make_member, make_rfp,
):
    viewer = await make_member(admin.account_id, "viewer", scopes="read")
    rfp_id = await make_rfp(admin, "Acme")
    [item_id] = await add_items(conn, rfp_id, (1, admin.user_id, "pending"))

    status, body = await listed(client, viewer, assignee="me")
    assert status == 200
    assert body == {"rfp_items": [], "pagination": {
        "current_page": 1, "total_pages": 0, "total_count": 0, "items_per_page": 20,
        "from": None, "to": None}}
    status, body = await listed(client, viewer, assignee=str(admin.user_id))
    assert status == 200 and ids_of(body) == [item_id]
    assert (await client.get("/api/v1/rfp_items", params={"assignee": "me"})).status == 401


async def test_assigned_items__pages_of_20_and_a_page_past_the_end(client, conn, admin, make_rfp):
    first = await deadline_rfp(conn, make_rfp, admin, "First", "2030-01-01")
    second = await deadline_rfp(conn, make_rfp, admin, "Second", "2030-02-01")
    ids = [*await add_items(conn, first, *[(n, admin.user_id, "pending") for n in range(1, 31)]),
           *await add_items(conn, second, *[(n, admin.user_id, "pending") for n in range(1, 16)])]

    pages = []
    for number in (1, 2, 3):
        status, body = await listed(client, admin, assignee="me", page=number)
        assert status == 200
        pages.append(body)
    assert [ids_of(body) for body in pages] == [ids[:20], ids[20:40], ids[40:]]
    assert pages[2]["pagination"] == {"current_page": 3, "total_pages": 3, "total_count": 45,
                                      "items_per_page": 20, "from": 41, "to": 45}
    status, body = await listed(client, admin, assignee="me", page=4)
    assert status == 200 and body["rfp_items"] == []
    assert body["pagination"] == {"current_page": 4, "total_pages": 3, "total_count": 45,
                                  "items_per_page": 20, "from": None, "to": None}
    for bad in ("0", "-1", "abc", "9" * 30):
        status, body = await listed(client, admin, assignee="me", page=bad)
        assert status == 400 and body["error"]["code"] == "parameter_invalid", bad
        assert body["error"]["message"].startswith("page "), bad


async def test_assigned_items__state_filters_as_the_rfp_page_s(client, conn, admin, make_rfp):
    rfp_id = await make_rfp(admin, "Acme")
    me = admin.user_id
    ids = await add_items(conn, rfp_id, (1, me, "pending"), (2, me, "auto_answered"),
                          (3, me, "needs_input"), (4, me, "approved"), (5, me, "discarded"),
                          (6, me, "auto_answered"), (7, None, "auto_answered"))
    for state, expected in [("review", [ids[1], ids[5]]), ("needs_input", [ids[2]]),
                            ("approved", [ids[3]]), ("", ids[:6])]:
        status, body = await listed(client, admin, assignee="me", state=state)
        assert status == 200 and ids_of(body) == expected, state
        assert body["pagination"]["total_count"] == len(expected), state
    for bad in ("auto_answered", "pending", "Review", "x" * 500):
        status, body = await listed(client, admin, assignee="me", state=bad)
        assert status == 400 and body["error"]["code"] == "parameter_invalid", bad
        assert body["error"]["message"].startswith(
            "state must be one of needs_input, review, approved; got "), bad
        assert len(body["error"]["message"]) < 120


async def test_assigned_items__assignee_is_required_and_none_is_refused(client, admin):
    for params in ({}, {"assignee": ""}, {"state": "review"}):
        status, body = await listed(client, admin, **params)
        assert status == 400 and body["error"]["code"] == "parameter_missing", params
        assert body["error"]["message"].startswith("assignee is required"), params
    for value in ("none", "mine", "-1", "0", "1e3", "9" * 40, str(2**63)):
        status, body = await listed(client, admin, assignee=value)
        assert status == 400 and body["error"]["code"] == "parameter_invalid", value
        assert body["error"]["message"].startswith("assignee must be me or a user id; got "), value


async def test_assigned_items__the_query_reads_the_assignee_index_not_every_item(
    conn, make_account, make_member, make_rfp,
):
    """3,000 items in 100 RFPs of two accounts, one in 40 assigned to the member: the items are
    found through rfp_items_assignee, never by reading the table."""
    admin, other = await make_account(), await make_account(name="Other")
    writer = await make_member(admin.account_id, "member")
    await _seed(conn, make_rfp, admin, other, writer, 100, 30, lambda n, p: (n * 30 + p) % 40 == 0)
    for state in ("NULL", "'auto_answered'"):
        for mode in ("auto", "force_generic_plan"):
            # Prepared and executed: EXPLAIN of the statement with its arguments bound plans for
            # those values, never generically.
            async with conn.transaction():
                await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
                await conn.execute("PREPARE assigned_items_page AS " + db.query("assigned_items_page"))
                [plan] = json.loads(await conn.fetchval(  # acc_… ids: letters and digits
                    f"EXPLAIN (FORMAT JSON) EXECUTE assigned_items_page('{admin.account_id}', "
                    f"{writer.user_id}, {state}, 20, 0, 1000)"))
                await conn.execute("DEALLOCATE assigned_items_page")
            text = json.dumps(plan)
            assert '"Index Name": "rfp_items_assignee"' in text, (state, mode, text)
            if mode == "force_generic_plan":
                assert "$1" in text or "$2" in text, text
            scans = [node for node in _nodes(plan["Plan"]) if node.get("Relation Name") == "rfp_items"]
            assert scans and all(node["Node Type"] != "Seq Scan" for node in scans), (state, mode, text)
    rows = await conn.fetch(db.query("assigned_items_page"), admin.account_id, writer.user_id,
                            None, 100, 0, 1000)
    assert rows[0]["total"] == len(rows) == sum(
        1 for n in range(1, 100, 2) for p in range(1, 31) if (n * 30 + p) % 40 == 0)


async def test_assigned_items__another_accounts_user_is_not_looked_up_item_by_item(
    conn, make_account, make_member, make_rfp,
):
    """An admin naming a user of another account as `assignee` got an empty page, after the
    query had walked that user's items in the other account (30 ms at 100,000). The membership
    is checked once first, and none of those items is read."""
    admin, other = await make_account(), await make_account(name="Other")
    stranger = await make_member(other.account_id, "member")
    await _seed(conn, make_rfp, admin, other, stranger, 60, 100, lambda n, p: n % 2 == 0)
    [plan] = json.loads(await conn.fetchval(
        "EXPLAIN (ANALYZE, FORMAT JSON) " + db.query("assigned_items_page"),
        admin.account_id, stranger.user_id, None, 20, 0, 1000))
    [mine] = [node for node in _nodes(plan["Plan"]) if node.get("Subplan Name") == "CTE mine"]
    read = sum(node.get("Actual Rows", 0) * node["Actual Loops"] for node in _nodes(mine)
               if node.get("Relation Name") == "rfp_items")
    assert read == 0, json.dumps(mine)
    theirs = await conn.fetch(db.query("assigned_items_page"), other.account_id, stranger.user_id,
                              None, 20, 0, 1000)
    assert theirs[0]["total"] == 3000


async def _seed(conn, make_rfp, admin, other, member, rfps, per_rfp, assigned) -> None:
    """`rfps` RFPs, odd ones `admin`'s account's and even ones `other`'s, of `per_rfp` items each;
    item p of RFP n assigned to `member` where assigned(n, p). Statistics taken, as in use."""
    ids = [await make_rfp(admin if n % 2 else other, f"RFP {n}") for n in range(rfps)]
    await conn.executemany(
        "INSERT INTO rfp_items (id, rfp_id, question, position, assignee_id) VALUES ($1, $2, 'Q?', $3, $4)",
        [(f"item_{n}_{p}", rfp_id, p, member.user_id if assigned(n, p) else None)
         for n, rfp_id in enumerate(ids) for p in range(1, per_rfp + 1)])
    await conn.execute("ANALYZE")


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(found for child in node.get("Plans", []) for found in _nodes(child))]
