from __future__ import annotations

import pytest

from tests.conftest import with_config

FULL = {
    "title": "Acme security review",
    "description": "Annual review",
    "deadline": "2030-06-30",
    "framework": "hecvat-4.1",
    "portal_url": "https://portal.acme.test/rfp/7",
    "context": "We bid for the Acme contract.",
}


async def create(client, actor, rfp, **kwargs):
    response = await client.post("/api/v1/rfps", json={"rfp": rfp}, headers=actor.headers, **kwargs)
    return response, await response.json()


async def patch(client, actor, rfp_id, rfp):
    response = await client.patch(f"/api/v1/rfps/{rfp_id}", json={"rfp": rfp}, headers=actor.headers)
    return response, await response.json()


async def test_create__201_with_location_owner_is_caller_and_all_fields(client, admin, make_member):
    member = await make_member(admin.account_id, role="member")
    response, body = await create(client, member, FULL)

    assert response.status == 201
    assert response.headers["Location"] == f"/api/v1/rfps/{body['id']}"
    assert body["id"].startswith("rfp_")
    assert {k: body[k] for k in FULL} == FULL
    assert body["owner"]["id"] == member.user_id
    assert body["owner"]["email"] == member.email
    assert body["state"] == "new"
    assert body["created_at"].endswith("Z")
    fetched = await client.get(f"/api/v1/rfps/{body['id']}", headers=admin.headers)
    assert await fetched.json() == body


async def test_create__optional_fields_default_to_null(client, admin):
    response, body = await create(client, admin, {"title": "Only a title"})
    assert response.status == 201
    assert [body[k] for k in ("description", "deadline", "framework", "portal_url", "context")] == [
        None, None, None, None, None,
    ]


async def test_create__items_are_stored_in_order_and_counted(client, admin):
    items = [{"question": f"Q{n}?", "section": "Access" if n % 2 else None} for n in range(1, 4)]
    response, body = await create(client, admin, {"title": "With items", "items": items})

    assert response.status == 201
    assert body["stats"]["total_items"] == 3
    assert body["state"] == "items_generated"
    listed = await (await client.get(f"/api/v1/rfps/{body['id']}/rfp_items", headers=admin.headers)).json()
    assert [(i["question"], i["section"], i["position"]) for i in listed["rfp_items"]] == [
        ("Q1?", "Access", 1), ("Q2?", None, 2), ("Q3?", "Access", 3),
    ]
    assert {i["state"] for i in listed["rfp_items"]} == {"pending"}


async def test_create__viewer_is_403_forbidden(client, admin, make_member):
    viewer = await make_member(admin.account_id, role="viewer", scopes="read,write")
    response, body = await create(client, viewer, {"title": "x"})
    assert response.status == 403
    assert body["error"]["code"] == "forbidden"


async def test_create__read_only_token_is_403_insufficient_scope(client, admin, make_member):
    reader = await make_member(admin.account_id, role="admin", scopes="read")
    response, body = await create(client, reader, {"title": "x"})
    assert response.status == 403
    assert body["error"]["code"] == "insufficient_scope"
    assert response.headers["WWW-Authenticate"] == (
        'Bearer realm="api", error="insufficient_scope", scope="write"'
    )


async def test_create__422_lists_one_detail_per_failed_rule(client, admin):
    response, body = await create(
        client,
        admin,
        {
            "title": "   ",
            "deadline": "2030-13-01",
            "framework": "iso-27001",
            "portal_url": "ftp://files.acme.test",
            "description": 7,
            "colour": "blue",
            "items": [{"question": ""}],
        },
    )
    assert response.status == 422
    error = body["error"]
    assert error["code"] == "validation_failed"
    details = sorted(error["details"])
    assert len(details) == 7, details
    for field in (
        "rfp.title:", "rfp.deadline:", "rfp.framework:", "rfp.portal_url:", "rfp.description:",
        "rfp.items[0].question:", "rfp: unknown field(s): colour",
    ):
        assert any(d.startswith(field) for d in details), (field, details)


async def test_create__a_length_limit_is_a_detail_of_its_field_beside_the_other_fields_failures(
    client, admin
):
    # A field's own limit (attrs validators: lengths, tags, event types) failed alone, without
    # its field's path ("rfp: title must be …"), and was left out when another field failed too.
    response, body = await create(client, admin, {
        "title": "t" * 501, "portal_url": "https://portal.acme.test:70000/",
        "items": [{"question": "Q?", "section": "s" * 501}, {"question": " "}],
    })
    assert response.status == 422
    assert sorted(body["error"]["details"]) == [
        "rfp.items[0].section: must be at most 500 characters",
        "rfp.items[1].question: must not be blank",
        "rfp.portal_url: has an invalid port (must be a number from 1 to 65535); "
        "got 'https://portal.acme.test:70000/'",
        "rfp.title: must be at most 500 characters",
    ]
    response, body = await create(client, admin, {"title": "t" * 501, "description": "d" * 100_001})
    assert sorted(body["error"]["details"]) == [
        "rfp.description: must be at most 100000 characters", "rfp.title: must be at most 500 characters"]
    entry = await client.post("/api/v1/knowledge_base_items", headers=admin.headers, json={
        "knowledge_base_item": {"answer": " ", "title": "t" * 501, "tags": ["x"] * 51}})
    assert entry.status == 422
    assert sorted((await entry.json())["error"]["details"]) == [
        "knowledge_base_item.answer: must not be blank",
        "knowledge_base_item.tags: at most 50 tags",
        "knowledge_base_item.title: must be at most 500 characters",
    ]


async def test_create__an_item_that_is_not_an_object_is_422_saying_so(client, admin):
    """A string or an array where an item's object belongs was 'unknown error ('str' object
    has no attribute 'keys')', cattrs' words; a number or null was already 'must be an object'."""
    response, body = await create(client, admin, {"title": "T", "items": ["x", [], 5, None]})
    assert response.status == 422
    assert body["error"]["details"] == [f"rfp.items[{n}]: must be an object" for n in range(4)]


async def test_create__a_list_field_given_a_string_is_422_must_be_an_array(client, admin):
    """cattrs takes any iterable for a list: a string was read as its characters, one detail
    each ('rfp.items[0]: …' for every character; 100,000 of them took 7 s to say so)."""
    response, body = await create(client, admin, {"title": "T", "items": "x" * 1000})
    assert response.status == 422
    assert body["error"]["details"] == ["rfp.items: must be an array"]
    endpoint = await client.post("/api/v1/webhook_endpoints", headers=admin.headers, json={
        "webhook_endpoint": {"url": "https://example.com/hook", "event_types": "rfp.approved"}})
    assert endpoint.status == 422
    assert (await endpoint.json())["error"]["details"] == [
        "webhook_endpoint.event_types: must be an array"]


async def test_create__too_many_items_is_refused_before_they_are_read(client, admin):
    """The count was checked after every item was structured: 100,000 empty objects (300 KB)
    took 5 s and came back as 100,000 details ("is required")."""
    from service.domain.rfps import MAX_ITEMS_PER_CREATE

    response, body = await create(client, admin, {"title": "T", "items": [{}] * (MAX_ITEMS_PER_CREATE + 1)})
    assert response.status == 422
    assert body["error"]["details"] == [f"rfp.items: at most {MAX_ITEMS_PER_CREATE} items per request"]


async def test_create__missing_title_is_422(client, admin):
    response, body = await create(client, admin, {"description": "no title"})
    assert response.status == 422
    assert body["error"]["details"] == ["rfp.title: is required"]


@pytest.mark.parametrize("payload", [[1, 2], {"title": "no wrapper"}, {"rfp": "text"}])
async def test_create__body_without_an_rfp_object_is_422(client, admin, payload):
    response = await client.post("/api/v1/rfps", json=payload, headers=admin.headers)
    body = await response.json()
    assert response.status == 422
    assert body["error"]["code"] == "validation_failed"
    assert len(body["error"]["details"]) == 1


@pytest.mark.parametrize("raw", [b"{not json", b"", b'{"rfp": '])
async def test_create__malformed_json_is_400_invalid_json(client, admin, raw):
    response = await client.post(
        "/api/v1/rfps", data=raw, headers={**admin.headers, "Content-Type": "application/json"}
    )
    assert response.status == 400
    assert (await response.json())["error"]["code"] == "invalid_json"


async def test_create__non_json_media_type_is_415(client, admin):
    response = await client.post(
        "/api/v1/rfps", data=b"title=x", headers={**admin.headers, "Content-Type": "text/plain"}
    )
    assert response.status == 415
    assert (await response.json())["error"]["code"] == "unsupported_media_type"


async def test_create__body_over_the_limit_is_413(aiohttp_client, config, admin):
    from service.web.app import create_app

    client = await aiohttp_client(create_app(with_config(config, server={"max_body_bytes": 1024})))
    response, body = await create(client, admin, {"title": "x" * 2000})
    assert response.status == 413
    assert body["error"]["code"] == "payload_too_large"


async def test_patch__absent_fields_stay_unchanged(client, admin):
    _, created = await create(client, admin, FULL)
    response, body = await patch(client, admin, created["id"], {"title": "Renamed"})
    assert response.status == 200
    assert body["title"] == "Renamed"
    assert {k: body[k] for k in FULL if k != "title"} == {k: v for k, v in FULL.items() if k != "title"}
    assert body["updated_at"] > created["updated_at"]


async def test_patch__null_clears_nullable_fields(client, admin):
    _, created = await create(client, admin, FULL)
    nullable = ["description", "deadline", "framework", "portal_url", "context"]
    response, body = await patch(client, admin, created["id"], dict.fromkeys(nullable))
    assert response.status == 200
    assert [body[k] for k in nullable] == [None] * len(nullable)
    assert body["title"] == FULL["title"]


@pytest.mark.parametrize("title", ["", "  ", None])
async def test_patch__blank_or_null_title_is_422_and_changes_nothing(client, admin, title):
    _, created = await create(client, admin, FULL)
    response, body = await patch(client, admin, created["id"], {"title": title, "context": "new"})
    assert response.status == 422
    assert [d.split(":")[0] for d in body["error"]["details"]] == ["rfp.title"]
    stored = await (await client.get(f"/api/v1/rfps/{created['id']}", headers=admin.headers)).json()
    assert stored == created


async def test_patch__unknown_field_is_422(client, admin):
    _, created = await create(client, admin, FULL)
    response, body = await patch(client, admin, created["id"], {"items": []})
    assert response.status == 422
    assert body["error"]["details"] == ["rfp: unknown field(s): items"]


async def test_patch__other_account_rfp_is_404(client, make_account):
    mine, theirs = await make_account(), await make_account()
    _, created = await create(client, theirs, FULL)
    response, body = await patch(client, mine, created["id"], {"title": "hijack"})
    assert response.status == 404
    assert body["error"]["code"] == "not_found"


async def test_patch__viewer_is_403_forbidden(client, admin, make_member):
    viewer = await make_member(admin.account_id, role="viewer")
    _, created = await create(client, admin, FULL)
    response, body = await patch(client, viewer, created["id"], {"title": "x"})
    assert response.status == 403
    assert body["error"]["code"] == "forbidden"


async def test_patch__read_only_token_is_403_insufficient_scope(client, admin, make_member):
    reader = await make_member(admin.account_id, role="member", scopes="read")
    _, created = await create(client, admin, FULL)
    response, body = await patch(client, reader, created["id"], {"title": "x"})
    assert response.status == 403
    assert body["error"]["code"] == "insufficient_scope"
