"""Adding items, reviewing them, and the RFP state and stats that follow from them."""

from __future__ import annotations

from service import db


async def new_rfp(client, actor, items=()) -> str:
    response = await client.post(
        "/api/v1/rfps", json={"rfp": {"title": "Review", "items": [{"question": q} for q in items]}},
        headers=actor.headers,
    )
    return (await response.json())["id"]


async def item_ids(client, actor, rfp_id) -> list[str]:
    response = await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", headers=actor.headers)
    return [i["id"] for i in (await response.json())["rfp_items"]]


async def rfp_of(client, actor, rfp_id) -> dict:
    return await (await client.get(f"/api/v1/rfps/{rfp_id}", headers=actor.headers)).json()


async def review(client, actor, rfp_id, item_id, **fields):
    return await client.patch(
        f"/api/v1/rfps/{rfp_id}/rfp_items/{item_id}", json={"rfp_item": fields}, headers=actor.headers
    )


async def test_create_item__single_returns_item_with_location(client, admin):
    rfp_id = await new_rfp(client, admin, ["Existing?"])
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items",
        json={"rfp_item": {"question": "  Do you log access?  ", "section": "Logging"}},
        headers=admin.headers,
    )
    body = await response.json()
    assert response.status == 201
    assert response.headers["Location"] == f"/api/v1/rfps/{rfp_id}/rfp_items/{body['id']}"
    assert body["id"].startswith("item_")
    assert (body["question"], body["section"], body["position"], body["state"]) == (
        "Do you log access?", "Logging", 2, "pending",
    )
    assert body["answer"] is None and body["confidence"] is None


async def test_create_items__list_keeps_order(client, admin):
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items",
        json={"rfp_items": [{"question": "A?"}, {"question": "B?", "section": "S"}]},
        headers=admin.headers,
    )
    body = await response.json()
    assert response.status == 201
    assert [(i["question"], i["position"]) for i in body["rfp_items"]] == [("A?", 1), ("B?", 2)]


async def test_create_items__blank_question_is_422_with_path(client, admin):
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items",
        json={"rfp_items": [{"question": "ok?"}, {"question": " "}]},
        headers=admin.headers,
    )
    assert response.status == 422
    assert (await response.json())["error"]["details"] == ["rfp_items[1].question: must not be blank"]


async def test_review__approving_without_answer_is_422(client, admin):
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    response = await review(client, admin, rfp_id, item_id, state="approved")
    assert response.status == 422
    assert "answer" in (await response.json())["error"]["details"][0]


async def test_review__unknown_state_is_422(client, admin):
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    response = await review(client, admin, rfp_id, item_id, state="auto_answered")
    assert response.status == 422
    assert (await response.json())["error"]["details"] == [
        "rfp_item.state: must be one of approved, discarded, pending; got 'auto_answered'"
    ]


async def test_review__edit_and_approve_saves_to_knowledge_base_once(client, admin, conn):
    rfp_id = await new_rfp(client, admin, ["Do you encrypt backups?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    response = await review(client, admin, rfp_id, item_id, answer="Yes, AES-256.", state="approved",
                            save_to_knowledge_base=True)
    body = await response.json()
    assert response.status == 200, body
    assert (body["state"], body["answer"]) == ("approved", "Yes, AES-256.")
    kb = await conn.fetchrow("SELECT * FROM knowledge_items WHERE id = $1", body["knowledge_item_id"])
    assert (kb["account_id"], kb["question"], kb["answer"], kb["source"]) == (
        admin.account_id, "Do you encrypt backups?", "Yes, AES-256.", f"rfp:{rfp_id}",
    )
    # Saving the edited answer again updates the same entry instead of adding another.
    again = await review(client, admin, rfp_id, item_id, answer="Yes, AES-256-GCM.",
                         save_to_knowledge_base=True)
    assert (await again.json())["knowledge_item_id"] == body["knowledge_item_id"]
    rows = await conn.fetch("SELECT answer FROM knowledge_items WHERE account_id = $1", admin.account_id)
    assert [r["answer"] for r in rows] == ["Yes, AES-256-GCM."]


async def test_review__saving_unapproved_answer_to_knowledge_base_is_422(client, admin, conn):
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    response = await review(client, admin, rfp_id, item_id, answer="A.", save_to_knowledge_base=True)
    assert response.status == 422
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 0
    item = await conn.fetchrow("SELECT answer FROM rfp_items WHERE id = $1", item_id)
    assert item["answer"] is None  # nothing of a refused review is stored


async def test_review__viewer_forbidden_and_other_account_404(client, admin, make_member, make_account):
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    viewer = await make_member(admin.account_id, role="viewer")
    assert (await review(client, viewer, rfp_id, item_id, state="discarded")).status == 403
    stranger = await make_account()
    assert (await review(client, stranger, rfp_id, item_id, state="discarded")).status == 404
    assert (await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items/{item_id}",
                             headers=stranger.headers)).status == 404


async def test_review__reopen_unlinks_question_so_it_is_answered_again(client, admin, conn):
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    await conn.execute(
        "UPDATE rfp_items SET question_id = 'q_1', answer = 'A.', state = 'needs_input' WHERE id = $1",
        item_id,
    )
    response = await review(client, admin, rfp_id, item_id, state="pending")
    body = await response.json()
    assert (body["state"], body["question_id"], body["answer"]) == ("pending", None, "A.")


async def test_rfp_state__follows_items_through_the_workflow(client, admin, conn):
    rfp_id = await new_rfp(client, admin)
    assert (await rfp_of(client, admin, rfp_id))["state"] == "new"

    await client.post(f"/api/v1/rfps/{rfp_id}/rfp_items",
                      json={"rfp_items": [{"question": "A?"}, {"question": "B?"}, {"question": "C?"}]},
                      headers=admin.headers)
    a, b, c = await item_ids(client, admin, rfp_id)
    assert (await rfp_of(client, admin, rfp_id))["state"] == "items_generated"

    # Answering under way: items linked to a question that has not completed.
    await conn.execute("UPDATE rfp_items SET question_id = 'q_' || id WHERE rfp_id = $1", rfp_id)
    assert (await rfp_of(client, admin, rfp_id))["state"] == "processing_items"

    # The pipeline completes them (through the guarded update it uses).
    await conn.execute(db.query("answer_rfp_item"), a, "Yes.", 0.9, "auto_answered", "q_" + a)
    await conn.execute(db.query("answer_rfp_item"), b, "Unsure.", 0.2, "needs_input", "q_" + b)
    assert (await rfp_of(client, admin, rfp_id))["state"] == "processing_items"
    await conn.execute(db.query("answer_rfp_item"), c, "No.", 0.8, "auto_answered", "q_" + c)
    rfp = await rfp_of(client, admin, rfp_id)
    assert rfp["state"] == "needs_input"
    assert rfp["stats"] == {"total_items": 3, "needs_input_items": 1, "auto_answered_items": 2,
                            "approved_items": 0, "overall_completion_percentage": 0}

    await review(client, admin, rfp_id, a, state="approved")
    await review(client, admin, rfp_id, b, state="discarded")
    rfp = await rfp_of(client, admin, rfp_id)
    assert rfp["state"] == "items_generated"
    assert rfp["stats"] == {"total_items": 2, "needs_input_items": 0, "auto_answered_items": 1,
                            "approved_items": 1, "overall_completion_percentage": 50}

    await review(client, admin, rfp_id, c, answer="No, never.", state="approved")
    rfp = await rfp_of(client, admin, rfp_id)
    assert rfp["state"] == "approved"
    assert rfp["stats"]["overall_completion_percentage"] == 100


async def test_pipeline_answer__does_not_overwrite_a_reviewed_item(client, admin, conn):
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    await conn.execute("UPDATE rfp_items SET question_id = 'q_x' WHERE id = $1", item_id)
    await review(client, admin, rfp_id, item_id, answer="Mine.", state="approved")
    stored = await conn.fetchrow(
        db.query("answer_rfp_item"), item_id, "Engine's.", 0.9, "auto_answered", "q_x"
    )
    assert stored is None
    item = await conn.fetchrow("SELECT answer, state::text FROM rfp_items WHERE id = $1", item_id)
    assert (item["answer"], item["state"]) == ("Mine.", "approved")


async def test_pipeline_answer__an_earlier_question_does_not_answer_a_reopened_item(
    client, admin, conn
):
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    # Reopened and asked anew: the item now waits for q_new; q_old is still in the pipeline.
    await conn.execute("UPDATE rfp_items SET question_id = 'q_new' WHERE id = $1", item_id)
    stale = await conn.fetchrow(
        db.query("answer_rfp_item"), item_id, "Old answer.", 0.9, "auto_answered", "q_old"
    )
    assert stale is None
    fresh = await conn.fetchrow(
        db.query("answer_rfp_item"), item_id, "New answer.", 0.9, "auto_answered", "q_new"
    )
    assert fresh is not None
    item = await conn.fetchrow("SELECT answer, state::text FROM rfp_items WHERE id = $1", item_id)
    assert (item["answer"], item["state"]) == ("New answer.", "auto_answered")


async def test_create_items__other_accounts_rfp_is_404(client, make_account):
    mine, theirs = await make_account(), await make_account()
    rfp_id = await new_rfp(client, mine)
    response = await client.post(f"/api/v1/rfps/{rfp_id}/rfp_items",
                                 json={"rfp_item": {"question": "Mine?"}}, headers=theirs.headers)
    assert response.status == 404
    assert await item_ids(client, mine, rfp_id) == []


async def test_review__unknown_field_is_422(client, admin):
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    response = await review(client, admin, rfp_id, item_id, confidence=1)
    assert response.status == 422
    assert (await response.json())["error"]["details"] == ["rfp_item: unknown field(s): confidence"]


async def test_review__saved_entry_owned_by_reviewer_and_a_later_save_keeps_owner_and_review_date(
    client, admin, make_member, conn
):
    # Both reviews (RFP item and question) save through knowledge.save_reviewed_answer: a new entry
    # is owned by whoever approved it; saving again, by someone else, keeps the owner and review date
    # the library set.
    rfp_id = await new_rfp(client, admin, ["Do you rotate keys?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    first = await review(client, admin, rfp_id, item_id, answer="Yearly.", state="approved",
                         save_to_knowledge_base=True)
    kb_id = (await first.json())["knowledge_item_id"]
    kb = await conn.fetchrow("SELECT * FROM knowledge_items WHERE id = $1", kb_id)
    assert (kb["owner_member_id"], kb["external_id"], kb["version"]) == (
        admin.member_id, f"rfp_item:{item_id}", 1)
    await conn.execute("UPDATE knowledge_items SET review_by = DATE '2031-01-01' WHERE id = $1", kb_id)
    colleague = await make_member(admin.account_id, role="member")
    again = await review(client, colleague, rfp_id, item_id, answer="Every 90 days.",
                         save_to_knowledge_base=True)
    assert (await again.json())["knowledge_item_id"] == kb_id
    kb = await conn.fetchrow("SELECT * FROM knowledge_items WHERE id = $1", kb_id)
    assert (kb["owner_member_id"], str(kb["review_by"]), kb["answer"], kb["title"]) == (
        admin.member_id, "2031-01-01", "Every 90 days.", None)
    assert kb["version"] == 3  # the review date change, then the second save: both versioned


async def test_review__saving_again_after_a_merge_updates_the_entry_kept(client, conn, admin):
    """An item saved as entry E, E merged into K: the item is saved as K now, and saving it again
    updates K (the README's "saving again updates that entry"). It made a third entry: the save
    looked for E's external id rfp_item:<id>, gone with E."""
    rfp_id = await new_rfp(client, admin, ["Do you encrypt backups?"])
    [item] = await item_ids(client, admin, rfp_id)
    saved = await review(client, admin, rfp_id, item, answer="Yes.", state="approved",
                         save_to_knowledge_base=True)
    assert saved.status == 200, await saved.text()
    first = await conn.fetchval("SELECT knowledge_item_id FROM rfp_items WHERE id = $1", item)
    kept = await client.post("/api/v1/knowledge_base_items", headers=admin.headers, json={
        "knowledge_base_item": {"question": "Are backups encrypted?", "answer": "Yes, AES."}})
    kept_id = (await kept.json())["id"]
    merged = await client.post(f"/api/v1/knowledge_base_items/{kept_id}/merge",
                               json={"duplicate_id": first}, headers=admin.headers)
    assert merged.status == 200, await merged.text()
    again = await review(client, admin, rfp_id, item, answer="Yes, with AES-256.", state="approved",
                         save_to_knowledge_base=True)
    assert again.status == 200, await again.text()
    entries = await conn.fetch("SELECT id, answer FROM knowledge_items")
    assert [(e["id"], e["answer"]) for e in entries] == [(kept_id, "Yes, with AES-256.")]
    assert await conn.fetchval("SELECT knowledge_item_id FROM rfp_items WHERE id = $1", item) == kept_id
