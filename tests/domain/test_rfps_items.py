from __future__ import annotations

import pytest


async def create_with_items(client, actor, count):
    items = [{"question": f"Question {n}?"} for n in range(1, count + 1)]
    response = await client.post(
        "/api/v1/rfps", json={"rfp": {"title": "Items", "items": items}}, headers=actor.headers
    )
    assert response.status == 201
    return (await response.json())["id"]


async def set_states(conn, rfp_id, states):
    """Give the items at positions 1, 2, … the states in order."""
    for position, state in enumerate(states, start=1):
        await conn.execute(
            "UPDATE rfp_items SET state = $3 WHERE rfp_id = $1 AND position = $2",
            rfp_id, position, state,
        )


async def get_rfp(client, actor, rfp_id):
    return await (await client.get(f"/api/v1/rfps/{rfp_id}", headers=actor.headers)).json()


async def test_stats__count_items_by_state_and_exclude_discarded(client, conn, admin):
    rfp_id = await create_with_items(client, admin, 6)
    await set_states(
        conn, rfp_id, ["approved", "needs_input", "auto_answered", "discarded", "pending", "discarded"]
    )
    body = await get_rfp(client, admin, rfp_id)
    assert body["stats"] == {
        "total_items": 4,
        "needs_input_items": 1,
        "auto_answered_items": 1,
        "approved_items": 1,
        "overall_completion_percentage": 25,
    }
    assert body["state"] == "needs_input"


async def test_stats__completion_is_an_integer_rounded_down(client, conn, admin):
    rfp_id = await create_with_items(client, admin, 3)
    await set_states(conn, rfp_id, ["approved", "approved", "auto_answered"])
    body = await get_rfp(client, admin, rfp_id)
    assert body["stats"]["overall_completion_percentage"] == 66
    assert body["state"] == "items_generated"


async def test_stats__all_approved_is_100_and_state_approved(client, conn, admin):
    rfp_id = await create_with_items(client, admin, 2)
    await set_states(conn, rfp_id, ["approved", "approved"])
    body = await get_rfp(client, admin, rfp_id)
    assert body["stats"]["overall_completion_percentage"] == 100
    assert body["state"] == "approved"


async def test_stats__only_discarded_items_is_0_percent(client, conn, admin):
    rfp_id = await create_with_items(client, admin, 1)
    await set_states(conn, rfp_id, ["discarded"])
    body = await get_rfp(client, admin, rfp_id)
    assert body["stats"]["total_items"] == 0
    assert body["stats"]["overall_completion_percentage"] == 0


async def test_rfp_items__paginated_in_questionnaire_order(client, admin):
    rfp_id = await create_with_items(client, admin, 45)
    pages = []
    for page in ("1", "2", "3", "4"):
        response = await client.get(
            f"/api/v1/rfps/{rfp_id}/rfp_items", params={"page": page}, headers=admin.headers
        )
        assert response.status == 200
        pages.append(await response.json())

    assert [len(p["rfp_items"]) for p in pages] == [20, 20, 5, 0]
    positions = [item["position"] for p in pages for item in p["rfp_items"]]
    assert positions == list(range(1, 46))
    assert [(p["pagination"]["from"], p["pagination"]["to"]) for p in pages] == [
        (1, 20), (21, 40), (41, 45), (None, None),
    ]
    assert {p["pagination"]["total_pages"] for p in pages} == {3}
    assert {p["pagination"]["total_count"] for p in pages} == {45}
    item = pages[0]["rfp_items"][0]
    assert set(item) == {
        "id", "rfp_id", "question", "answer", "state", "confidence", "section", "position",
        "created_at", "updated_at",
        # the workflow's extension: the question answering the item, the KB entry it was saved as
        "question_id", "knowledge_item_id",
        # the member who answers it (null: nobody)
        "assignee",
    }
    assert item["rfp_id"] == rfp_id
    assert item["id"].startswith("item_")


async def test_rfp_items__discarded_items_are_listed_with_their_state(client, conn, admin):
    rfp_id = await create_with_items(client, admin, 2)
    await set_states(conn, rfp_id, ["discarded"])
    response = await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", headers=admin.headers)
    body = await response.json()
    assert [item["state"] for item in body["rfp_items"]] == ["discarded", "pending"]


async def test_rfp_items__rfp_without_items_is_an_empty_page(client, admin):
    rfp_id = await create_with_items(client, admin, 0)
    response = await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", headers=admin.headers)
    body = await response.json()
    assert body["rfp_items"] == []
    assert body["pagination"]["total_count"] == 0


@pytest.mark.parametrize("page", ["0", "abc", "-1"])
async def test_rfp_items__bad_page_is_400_parameter_invalid(client, admin, page):
    rfp_id = await create_with_items(client, admin, 1)
    response = await client.get(
        f"/api/v1/rfps/{rfp_id}/rfp_items", params={"page": page}, headers=admin.headers
    )
    assert response.status == 400
    assert (await response.json())["error"]["code"] == "parameter_invalid"


async def test_rfp_items__other_account_rfp_is_404(client, make_account):
    mine, theirs = await make_account(), await make_account()
    rfp_id = await create_with_items(client, theirs, 1)
    response = await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", headers=mine.headers)
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "not_found"


async def test_rfp_items__unknown_rfp_is_404(client, admin):
    response = await client.get("/api/v1/rfps/rfp_nope/rfp_items", headers=admin.headers)
    assert response.status == 404


async def test_an_rfp_holds_at_most_max_items_per_rfp__additions_and_imports_past_it_are_422(
    client, conn, admin
):
    from service.domain.rfps import MAX_ITEMS_PER_CREATE, MAX_ITEMS_PER_RFP

    rfp_id = await create_with_items(client, admin, MAX_ITEMS_PER_CREATE)
    url = f"/api/v1/rfps/{rfp_id}/rfp_items"
    batch = [{"question": f"More {n}?"} for n in range(MAX_ITEMS_PER_CREATE)]
    for _ in range(MAX_ITEMS_PER_RFP // MAX_ITEMS_PER_CREATE - 1):
        response = await client.post(url, json={"rfp_items": batch}, headers=admin.headers)
        assert response.status == 201, await response.text()
    assert await conn.fetchval("SELECT count(*) FROM rfp_items WHERE rfp_id = $1", rfp_id) \
        == MAX_ITEMS_PER_RFP

    one_more = await client.post(url, json={"rfp_item": {"question": "Full?"}}, headers=admin.headers)
    assert one_more.status == 422
    error = (await one_more.json())["error"]
    assert error["code"] == "validation_failed"
    assert error["details"] == [
        f"items: the RFP holds {MAX_ITEMS_PER_RFP:,} items and these are 1 more; an RFP holds "
        f"at most {MAX_ITEMS_PER_RFP:,}"
    ]
    imported = await client.post(
        f"{url}/import", data="Question\nStill room?\n",
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    assert imported.status == 422
    assert "an RFP holds at most" in (await imported.json())["error"]["details"][0]
    assert await conn.fetchval("SELECT count(*) FROM rfp_items WHERE rfp_id = $1", rfp_id) \
        == MAX_ITEMS_PER_RFP
    audited = await conn.fetchval(
        "SELECT count(*) FROM audit_events WHERE record_id = $1 AND action LIKE 'rfp%items%'", rfp_id
    )
    assert audited == MAX_ITEMS_PER_RFP // MAX_ITEMS_PER_CREATE - 1
