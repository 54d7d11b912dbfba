from __future__ import annotations


async def test_get_rfp__returns_spec_fields_with_context(client, admin):
    created = await client.post(
        "/api/v1/rfps",
        json={"rfp": {"title": "Acme review", "context": "bid for Acme", "framework": "cjis-6"}},
        headers=admin.headers,
    )
    assert created.status == 201
    rfp_id = (await created.json())["id"]

    response = await client.get(f"/api/v1/rfps/{rfp_id}", headers=admin.headers)
    body = await response.json()
    assert response.status == 200
    assert body["context"] == "bid for Acme"
    assert body["web_link"] == f"https://app.example.test/rfps/{rfp_id}"
    assert body["owner"] == {"id": admin.user_id, "name": body["owner"]["name"], "email": admin.email}
    assert body["state"] == "new"
    assert body["stats"] == {
        "total_items": 0, "needs_input_items": 0, "auto_answered_items": 0,
        "approved_items": 0, "overall_completion_percentage": 0,
    }


async def test_get_rfp__other_account_is_404(client, make_account):
    mine, theirs = await make_account(), await make_account()
    created = await client.post("/api/v1/rfps", json={"rfp": {"title": "x"}}, headers=mine.headers)
    rfp_id = (await created.json())["id"]
    response = await client.get(f"/api/v1/rfps/{rfp_id}", headers=theirs.headers)
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "not_found"


async def test_get_rfp__unknown_id_is_404_not_found(client, admin):
    response = await client.get("/api/v1/rfps/rfp_doesnotexist", headers=admin.headers)
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "not_found"


async def test_get_rfp__viewer_with_read_token_may_read(client, admin, make_member, make_rfp):
    viewer = await make_member(admin.account_id, role="viewer", scopes="read")
    rfp_id = await make_rfp(admin, "Acme")
    response = await client.get(f"/api/v1/rfps/{rfp_id}", headers=viewer.headers)
    assert response.status == 200
    assert (await response.json())["id"] == rfp_id


async def test_get_rfp__token_without_read_scope_is_403_and_shows_nothing(
    client, admin, make_member, make_rfp
):
    # The principal and the RFP are read in one statement: the scope check still comes first.
    writer = await make_member(admin.account_id, role="member", scopes="write")
    rfp_id = await make_rfp(admin, "Acme secret title")
    response = await client.get(f"/api/v1/rfps/{rfp_id}", headers=writer.headers)
    assert response.status == 403
    body = await response.text()
    assert "insufficient_scope" in body and "Acme" not in body and rfp_id not in body


async def test_get_rfp__with_a_body_reads_it_the_plain_way(client, admin, make_rfp):
    # A request with a body is authenticated without the prefetch; the handler reads the RFP.
    rfp_id = await make_rfp(admin, "Acme")
    response = await client.get(f"/api/v1/rfps/{rfp_id}", data=b"x", headers=admin.headers)
    assert response.status == 200
    assert (await response.json())["title"] == "Acme"
    missing = await client.get("/api/v1/rfps/rfp_nope", data=b"x", headers=admin.headers)
    assert missing.status == 404


async def test_get_rfp__same_body_with_and_without_the_prefetch(client, admin, conn):
    items = [{"question": "q1"}, {"question": "q2"}]
    created = await client.post(
        "/api/v1/rfps",
        json={"rfp": {"title": "Acme", "description": "d", "deadline": "2030-01-02",
                      "framework": "cjis-6", "portal_url": "https://x.example/p", "context": "c",
                      "items": items}},
        headers=admin.headers,
    )
    rfp_id = (await created.json())["id"]
    await conn.execute("UPDATE rfp_items SET state = 'approved' WHERE position = 1")
    prefetched = await client.get(f"/api/v1/rfps/{rfp_id}", headers=admin.headers)
    plain = await client.get(f"/api/v1/rfps/{rfp_id}", data=b"x", headers=admin.headers)
    assert await prefetched.json() == await plain.json()
    assert (await prefetched.json())["stats"]["overall_completion_percentage"] == 50
