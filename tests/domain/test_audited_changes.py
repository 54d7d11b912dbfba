"""The domain functions behind the RFP, item and knowledge views write their change, its audit
event and its webhooks in one transaction (issue 15: views run no SQL), so any caller (a view,
the web app's pages, the CLI) gets the same record; without an actor they only change."""

from __future__ import annotations

import pytest

from service.domain import audit, knowledge, rfp_items, rfps
from service.domain.audit import Actor
from service.domain.errors import ValidationFailed
from service.domain.knowledge import KnowledgeItemInput


def member(who) -> Actor:
    return Actor(type="member", id=who.member_id, label=who.email, account_id=who.account_id)


async def actions(conn, account_id):
    rows = await conn.fetch(
        "SELECT action, record_id FROM audit_events WHERE account_id = $1 ORDER BY id", account_id
    )
    return [(row["action"], row["record_id"]) for row in rows]


async def test_review__item_and_rfp_approval_audited_in_the_reviews_transaction(conn, admin, make_rfp):
    rfp_id = await make_rfp(admin)
    _, rows = await rfps.append_items(conn, admin.account_id, rfp_id, ["Do you encrypt?"], [None],
                                      returning=True, actor=member(admin))
    item_id = rows[0]["id"]
    with pytest.raises(ValidationFailed):  # no answer: refused, and nothing audited
        await rfp_items.review(conn, admin.account_id, rfp_id, item_id, {"state": "approved"},
                               admin.member_id, actor=member(admin))
    assert await actions(conn, admin.account_id) == [("rfp_items.created", rfp_id)]

    reviewed = await rfp_items.review(
        conn, admin.account_id, rfp_id, item_id, {"answer": "Yes.", "state": "approved"},
        admin.member_id, actor=member(admin), web_base_url="https://app.example.test",
    )
    assert (reviewed.row["state"], reviewed.queued) == ("approved", 0)  # no endpoint: none queued
    assert await actions(conn, admin.account_id) == [
        ("rfp_items.created", rfp_id), ("rfp_item.updated", item_id),
        ("rfp_item.approved", item_id), ("rfp.approved", rfp_id),
    ]


async def test_without_an_actor__the_change_alone(conn, admin, make_rfp):
    rfp_id = await make_rfp(admin)
    _, rows = await rfps.append_items(conn, admin.account_id, rfp_id, ["Q?"], [None], returning=True)
    reviewed = await rfp_items.review(conn, admin.account_id, rfp_id, rows[0]["id"],
                                      {"answer": "A.", "state": "approved"}, admin.member_id)
    item = await knowledge.create_item(conn, admin.account_id, KnowledgeItemInput(answer="A."))
    await knowledge.delete_item(conn, admin.account_id, item.id)
    assert reviewed.row["state"] == "approved"
    assert await actions(conn, admin.account_id) == []


async def test_knowledge_delete__rolled_back_with_its_audit_event(conn, admin):
    item = await knowledge.create_item(conn, admin.account_id, KnowledgeItemInput(answer="A."),
                                       actor=member(admin))
    with pytest.raises(RuntimeError):
        async with conn.transaction():
            await knowledge.delete_item(conn, admin.account_id, item.id, actor=member(admin))
            raise RuntimeError("the caller's transaction fails after the delete")
    assert (await knowledge.fetch_item(conn, admin.account_id, item.id)).id == item.id
    assert await actions(conn, admin.account_id) == [("knowledge_base_item.created", item.id)]


def test_no_event__has_the_shape_of_an_events_values():
    # The ask's statement takes either in the same parameter places ($15-$24 of ask_question).
    event = audit.values(audit.Actor(type="operator", id="cli"), "question.asked", record_id="q_1")
    assert len(audit.NO_EVENT) == len(event) and set(audit.NO_EVENT) == {None}
