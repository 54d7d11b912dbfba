"""GET /api/v1/rfps/{id}/rfp_items?query=: an RFP's items whose question or answer holds a term
(the RFP search's substring rule and limits), with the assignee filter and the pager."""

from __future__ import annotations

from test_workflow import item_ids, new_rfp, review  # the workflow tests' API steps


async def listed(client, actor, rfp_id, **params):
    response = await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", params=params, headers=actor.headers)
    return response.status, await response.json()


async def test_rfp_items_query__finds_questions_and_answers_with_the_assignee_filter(
    client, admin, make_account,
):
    # Before: the list had no search; `query` was ignored and every item came back.
    rfp_id = await new_rfp(client, admin, ["Do you encrypt backups?", "Is MFA enforced?",
                                           "How are keys kept?", "Is 100% of traffic logged?"])
    first, second, third, fourth = await item_ids(client, admin, rfp_id)
    assert (await review(client, admin, rfp_id, third, answer="Encrypted, in an HSM.")).status == 200
    assert (await review(client, admin, rfp_id, first, assignee_id=admin.user_id)).status == 200
    other = await make_account()
    theirs = await new_rfp(client, other, ["Do you encrypt everything?"])

    status, body = await listed(client, admin, rfp_id, query="ENCRYPT")
    assert status == 200 and [i["id"] for i in body["rfp_items"]] == [first, third]
    assert body["pagination"]["total_count"] == 2
    status, body = await listed(client, admin, rfp_id, query="encrypt", page="2")
    assert status == 200 and body["rfp_items"] == [] and body["pagination"]["total_count"] == 2
    status, body = await listed(client, admin, rfp_id, query="encrypt", assignee="me")
    assert [i["id"] for i in body["rfp_items"]] == [first]
    status, body = await listed(client, admin, rfp_id, query="encrypt", assignee="none")
    assert [i["id"] for i in body["rfp_items"]] == [third]
    status, body = await listed(client, admin, rfp_id, query="100%")  # % taken literally
    assert [i["id"] for i in body["rfp_items"]] == [fourth]
    status, body = await listed(client, admin, rfp_id, query="  ")  # blank: every item
    assert body["pagination"]["total_count"] == 4
    assert second in [i["id"] for i in body["rfp_items"]]
    # Another account's items are never found; its RFP is 404.
    status, _ = await listed(client, admin, theirs, query="encrypt")
    assert status == 404
    status, body = await listed(client, admin, rfp_id, query="everything")
    assert status == 200 and body["rfp_items"] == [] and body["pagination"]["total_count"] == 0
    # The RFP search's limits, named.
    status, body = await listed(client, admin, rfp_id, query="ab")
    assert status == 400 and body["error"]["code"] == "parameter_invalid"
    assert "query must hold at least 3 letters or digits in a row" in body["error"]["message"]
    status, body = await listed(client, admin, rfp_id, query="x" * 201)
    assert status == 400 and "query is too long: at most 200 characters; got 201" in body["error"]["message"]
