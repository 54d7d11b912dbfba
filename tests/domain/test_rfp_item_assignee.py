"""Assigning RFP items to members: the API, the filter, what keeps an assignee a writer of the
account, and the e-mail the assignee gets."""

from __future__ import annotations

import asyncio
import json
import logging
import tracemalloc

import asyncpg
import attrs
import pytest
from conftest import CONNECT, lock_waiters, mail_settings, with_config
from test_workflow import item_ids, new_rfp, review  # the workflow tests' API steps
from webhook_receiver import fast_webhooks

from service import db
from service.domain import accounts
from service.domain.errors import ValidationFailed
from service.domain.members import remove_member
from service.domain.rfp_items import review as review_item
from service.domain.rfp_items import unassign_member_items
from service.web.app import create_app
from service.web.openapi import document


async def items_of(client, actor, rfp_id, assignee):
    response = await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", params={"assignee": assignee},
                                headers=actor.headers)
    return response.status, await response.json()


async def assignee_of(client, actor, rfp_id, item_id):
    response = await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items/{item_id}", headers=actor.headers)
    return (await response.json())["assignee"]


async def test_assign__the_item_shows_its_assignee_and_null_unassigns(client, admin, make_member):
    writer = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(client, admin, ["Q1?", "Q2?"])
    first, _ = await item_ids(client, admin, rfp_id)
    assert await assignee_of(client, admin, rfp_id, first) is None

    response = await review(client, admin, rfp_id, first, assignee_id=writer.user_id)
    assert response.status == 200
    shown = {"id": writer.user_id, "name": writer.email.split("@")[0], "email": writer.email}
    assert (await response.json())["assignee"] == shown
    assert await assignee_of(client, admin, rfp_id, first) == shown
    # Another field's review keeps the assignee.
    kept = await review(client, writer, rfp_id, first, answer="Yes.")
    assert (await kept.json())["assignee"] == shown

    response = await review(client, writer, rfp_id, first, assignee_id=None)
    assert response.status == 200
    assert (await response.json())["assignee"] is None
    assert await assignee_of(client, admin, rfp_id, first) is None


async def test_assign__is_audited_as_an_item_update(client, admin, make_member, conn):
    writer = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    await review(client, admin, rfp_id, item_id, assignee_id=writer.user_id)
    event = await conn.fetchrow(
        "SELECT before, after FROM audit_events WHERE action = 'rfp_item.updated' AND record_id = $1",
        item_id)
    assert '"assignee_id": null' in event["before"]
    assert f'"assignee_id": {writer.user_id}' in event["after"]


async def test_assign__a_viewer_another_account_s_user_or_an_unknown_one_is_422(
    client, admin, make_account, make_member,
):
    viewer = await make_member(admin.account_id, "viewer")
    stranger = await make_account(name="Other")
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    for user_id in (viewer.user_id, stranger.user_id, 2**62):
        response = await review(client, admin, rfp_id, item_id, assignee_id=user_id)
        assert response.status == 422, user_id
        [detail] = (await response.json())["error"]["details"]
        assert detail.startswith(f"rfp_item.assignee_id: user {user_id} is not a member of this account")
    assert await assignee_of(client, admin, rfp_id, item_id) is None


async def test_assign__a_malformed_id_is_422_naming_the_field(client, admin):
    rfp_id = await new_rfp(client, admin, ["Q?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    for value in ("7", True, 0, -3, 1.5, 2**63, {"id": 1}):
        response = await review(client, admin, rfp_id, item_id, assignee_id=value)
        assert response.status == 422, value
        [detail] = (await response.json())["error"]["details"]
        assert detail.startswith("rfp_item.assignee_id: must be a user id"), detail


async def test_list__assignee_filter_me_none_and_a_user_id(client, admin, make_member):
    writer = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(client, admin, ["Mine?", "Theirs?", "Nobody's?"])
    mine, theirs, nobodys = await item_ids(client, admin, rfp_id)
    await review(client, admin, rfp_id, mine, assignee_id=admin.user_id)
    await review(client, admin, rfp_id, theirs, assignee_id=writer.user_id)

    for actor, value, expected in [
        (admin, "me", [mine]), (writer, "me", [theirs]), (admin, "none", [nobodys]),
        (admin, str(writer.user_id), [theirs]), (admin, "", [mine, theirs, nobodys]),
        (admin, "123456789", []),
    ]:
        status, body = await items_of(client, actor, rfp_id, value)
        assert status == 200
        assert [i["id"] for i in body["rfp_items"]] == expected, value
        assert body["pagination"]["total_count"] == len(expected), value


async def test_list__a_bad_assignee_value_is_400_naming_it(client, admin):
    rfp_id = await new_rfp(client, admin, ["Q?"])
    for value in ("mine", "-1", "0", "1e3", "9" * 40):
        status, body = await items_of(client, admin, rfp_id, value)
        assert status == 400, value
        assert body["error"]["code"] == "parameter_invalid"
        assert body["error"]["message"].startswith("assignee must be me, none or a user id")


async def test_removing_a_member__unassigns_their_items(client, admin, make_member, conn):
    writer = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(client, admin, ["A?", "B?"])
    first, second = await item_ids(client, admin, rfp_id)
    await review(client, admin, rfp_id, first, assignee_id=writer.user_id)
    await review(client, admin, rfp_id, second, assignee_id=admin.user_id)

    response = await client.delete(f"/api/v1/members/{writer.member_id}", headers=admin.headers)
    assert response.status == 204
    assert await assignee_of(client, admin, rfp_id, first) is None
    assert (await assignee_of(client, admin, rfp_id, second))["id"] == admin.user_id
    # The audit event says how many items the removal unassigned.
    after = await conn.fetchval("SELECT after FROM audit_events WHERE action = 'member.removed'"
                                " AND record_id = $1", writer.member_id)
    assert json.loads(after) == {"items_unassigned": 1}


async def test_removing_a_member__leaves_their_items_in_another_account(
    client, admin, make_account, conn,
):
    """The same person in two accounts: leaving one unassigns only that account's items."""
    other = await make_account(name="Other")
    both = await make_member_by_email(conn, admin.account_id, other.email)
    rfp_id = await new_rfp(client, other, ["Theirs?"])
    [item_id] = await item_ids(client, other, rfp_id)
    await review(client, other, rfp_id, item_id, assignee_id=other.user_id)
    await accounts.remove_member_by_email(conn, admin.account_id, other.email)
    assert both["user_id"] == other.user_id
    assert (await assignee_of(client, other, rfp_id, item_id))["id"] == other.user_id


async def make_member_by_email(conn, account_id, email):
    return await accounts.add_member(conn, account_id, email, "member")


async def test_making_a_member_a_viewer__unassigns_their_items(client, admin, make_member, conn):
    writer = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(client, admin, ["A?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    await review(client, admin, rfp_id, item_id, assignee_id=writer.user_id)

    await client.patch(f"/api/v1/members/{writer.member_id}", json={"member": {"role": "admin"}},
                       headers=admin.headers)
    assert (await assignee_of(client, admin, rfp_id, item_id))["id"] == writer.user_id
    response = await client.patch(f"/api/v1/members/{writer.member_id}",
                                  json={"member": {"role": "viewer"}}, headers=admin.headers)
    assert response.status == 200
    assert await assignee_of(client, admin, rfp_id, item_id) is None
    changed = await conn.fetch("SELECT after FROM audit_events WHERE action = 'member.role_changed'"
                               " AND record_id = $1 ORDER BY id", writer.member_id)
    assert [json.loads(row["after"]) for row in changed] == [
        {"role": "admin"}, {"role": "viewer", "items_unassigned": 1}]


async def test_assign_and_removal_at_once__the_removed_member_is_never_left_assigned(
    client, admin, make_member, conn, database_url,
):
    """Either order: an assignment waits for a removal in progress and is then refused (422), and
    a removal waits for an assignment in progress and then unassigns the item. Checked without
    the membership locked, both committed a removed member as the assignee."""
    rfp_id = await new_rfp(client, admin, ["A?", "B?"])
    first, second = await item_ids(client, admin, rfp_id)
    holder, waiter = [await asyncpg.connect(database_url, **CONNECT) for _ in range(2)]
    try:
        # The removal first: the assignment waits, then finds no member to assign.
        writer = await make_member(admin.account_id, "member")
        holding = holder.transaction()
        await holding.start()
        await remove_member(holder, admin.account_id, writer.member_id)
        assigning = asyncio.create_task(review_item(
            waiter, admin.account_id, rfp_id, first, {"assignee_id": writer.user_id}, admin.member_id))
        await lock_waiters(conn, 1)
        await holding.commit()
        async with asyncio.timeout(20):
            results = await asyncio.gather(assigning, return_exceptions=True)
        assert isinstance(results[0], ValidationFailed), results
        assert await assignee_of(client, admin, rfp_id, first) is None

        # The assignment first: the removal waits, then unassigns the item.
        writer = await make_member(admin.account_id, "member")
        holding = holder.transaction()
        await holding.start()
        await review_item(holder, admin.account_id, rfp_id, second, {"assignee_id": writer.user_id},
                          admin.member_id)
        removing = asyncio.create_task(remove_member(waiter, admin.account_id, writer.member_id))
        await lock_waiters(conn, 1)
        await holding.commit()
        async with asyncio.timeout(20):
            await removing
        assert await assignee_of(client, admin, rfp_id, second) is None
    finally:
        for connection in (holder, waiter):
            await connection.close()


# -- the assignee's e-mail -----------------------------------------------------------------------


async def test_assign__mails_the_assignee_a_link_to_the_item_alone(mail_client, admin, make_member,
                                                                   smtp, config, conn):
    writer = await make_member(admin.account_id, "member")
    await name(conn, admin, "Grace", "Hopper")
    rfp_id = await new_rfp(mail_client, admin, ["Do you encrypt backups?"])
    [item_id] = await item_ids(mail_client, admin, rfp_id)
    response = await review(mail_client, admin, rfp_id, item_id, assignee_id=writer.user_id)
    assert response.status == 200

    [message] = await smtp.wait_for(1)
    assert message["To"] == writer.email
    assert "Review" in message["Subject"] and "item 1" in message["Subject"]
    body = message.get_content()
    link = f"{config.server.web_base_url.rstrip('/')}/rfps/{rfp_id}?item={item_id}"
    assert link in body
    assert "Do you encrypt backups?" in body
    # The assigner by the name the app shows everywhere (display_name), the address beside it.
    assert f"Grace Hopper ({admin.email}) assigned you item 1" in body


async def test_assign__line_breaks_in_the_title_or_the_assigner_s_name_stay_on_one_line(
    mail_client, admin, make_member, smtp, conn,
):
    """A title with a line break (the API keeps it) made the Subject unbuildable: the message
    failed every attempt and never arrived. The assigner's name (their own to choose) wrote
    lines of its own into the body, a link of theirs before the item's."""
    writer = await make_member(admin.account_id, "member")
    await name(conn, admin, "Grace", "\n\nReview it here:\n\nhttps://evil.example/\n\n")
    created = await mail_client.post("/api/v1/rfps", headers=admin.headers, json={"rfp": {
        "title": "Acme\r\nBcc: someone@evil.example", "items": [{"question": "A?"}]}})
    rfp_id = (await created.json())["id"]
    [item_id] = await item_ids(mail_client, admin, rfp_id)
    assert (await review(mail_client, admin, rfp_id, item_id, assignee_id=writer.user_id)).status == 200

    [message] = await smtp.wait_for(1)
    assert message["To"] == writer.email and message["Bcc"] is None
    assert message["Subject"] == "Assigned to you: item 1 of Acme Bcc: someone@evil.example"
    body = message.get_content()
    assert f"Grace Review it here: https://evil.example/ ({admin.email}) assigned you item 1" in body
    assert '"Acme Bcc: someone@evil.example"' in body
    assert "https://evil.example/" not in body.splitlines()


async def test_assign__oneself_or_the_same_assignee_again_mails_nobody(
    mail_client, admin, make_member, smtp, conn,
):
    writer = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(mail_client, admin, ["A?", "B?", "C?"])
    first, second, third = await item_ids(mail_client, admin, rfp_id)
    assert (await review(mail_client, admin, rfp_id, first, assignee_id=admin.user_id)).status == 200
    assert (await review(mail_client, writer, rfp_id, second, assignee_id=writer.user_id)).status == 200
    assert (await review(mail_client, admin, rfp_id, second, assignee_id=writer.user_id)).status == 200
    assert await conn.fetchval("SELECT count(*) FROM mail_outbox") == 0
    # One assignment to another member: one message, the only one.
    assert (await review(mail_client, writer, rfp_id, third, assignee_id=admin.user_id)).status == 200
    [message] = await smtp.wait_for(1)
    assert message["To"] == admin.email
    await asyncio.sleep(0.3)
    assert len(smtp.messages) == 1


async def test_assign__a_refused_assignment_queues_no_mail_an_accepted_one_queues_one(
    mail_client, admin, make_member, conn,
):
    viewer = await make_member(admin.account_id, "viewer")
    rfp_id = await new_rfp(mail_client, admin, ["A?"])
    [item_id] = await item_ids(mail_client, admin, rfp_id)
    # Approving without an answer fails after the assignee was checked: nothing is kept.
    writer = await make_member(admin.account_id, "member")
    response = await review(mail_client, admin, rfp_id, item_id, assignee_id=writer.user_id,
                            state="approved")
    assert response.status == 422
    response = await review(mail_client, admin, rfp_id, item_id, assignee_id=viewer.user_id)
    assert response.status == 422
    assert await conn.fetchval("SELECT count(*) FROM mail_outbox") == 0
    response = await review(mail_client, admin, rfp_id, item_id, assignee_id=writer.user_id)
    assert response.status == 200
    assert await conn.fetchval("SELECT recipient FROM mail_outbox") == writer.email


async def test_assign__an_address_gets_at_most_assignment_mails_per_hour_then_items_go_unmailed(
    aiohttp_client, config, smtp, admin, make_member, conn, caplog,
):
    # Whoever may assign could assign and unassign a colleague's item in a loop: 150 e-mails in
    # 0.7 s, on the SMTP quota every account shares.
    client = await aiohttp_client(create_app(with_config(
        config, mail={**mail_settings(smtp.port), "assignment_mails_per_hour": 3})))
    writer = await make_member(admin.account_id, "member")
    other = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(client, admin, ["A?", "B?"])
    first, second = await item_ids(client, admin, rfp_id)
    caplog.set_level(logging.INFO, logger="service.domain.rfp_items")
    for _ in range(6):
        assert (await review(client, admin, rfp_id, first, assignee_id=writer.user_id)).status == 200
        assert (await review(client, admin, rfp_id, first, assignee_id=None)).status == 200
    # Assigned every time (the last one stays), mailed three times.
    assert (await review(client, admin, rfp_id, first, assignee_id=writer.user_id)).status == 200
    assert (await assignee_of(client, admin, rfp_id, first))["id"] == writer.user_id
    rows = await conn.fetch("SELECT recipient, kind FROM mail_outbox")
    assert [(row["recipient"], row["kind"]) for row in rows] == [(writer.email, "assignment")] * 3
    assert "its assigner sent" in caplog.text and "3 assignment e-mails" in caplog.text
    # Another address has a budget of its own; and so has another assigner: the loop above did
    # not silence the others' assignments to the writer.
    assert (await review(client, admin, rfp_id, second, assignee_id=other.user_id)).status == 200
    assert await conn.fetchval("SELECT count(*) FROM mail_outbox WHERE recipient = $1", other.email) == 1
    assert (await review(client, other, rfp_id, second, assignee_id=writer.user_id)).status == 200
    assert await conn.fetchval("SELECT count(*) FROM mail_outbox WHERE recipient = $1 AND requested_by = $2",
                               writer.email, other.member_id) == 1
    await smtp.wait_for(5)


async def test_assign__assignments_at_once_keep_to_assignment_mails_per_hour(
    client, config, admin, make_member, conn, database_url,
):
    """Each transaction counted the address's e-mails without the others' uncommitted ones: as
    many assignments at once as reached the service (in as many RFPs, which do not wait for each
    other) were each mailed, past the limit."""
    mail_config = attrs.evolve(config.mail, assignment_mails_per_hour=1)
    writer = await make_member(admin.account_id, "member")
    first_rfp, second_rfp = [await new_rfp(client, admin, ["A?"]) for _ in range(2)]
    [first] = await item_ids(client, admin, first_rfp)
    [second] = await item_ids(client, admin, second_rfp)
    holder, waiter = [await asyncpg.connect(database_url, **CONNECT) for _ in range(2)]
    try:
        holding = holder.transaction()
        await holding.start()
        reviewed = await review_item(holder, admin.account_id, first_rfp, first,
                                     {"assignee_id": writer.user_id}, admin.member_id,
                                     mail_config=mail_config)
        assert reviewed.mailed
        assigning = asyncio.create_task(review_item(
            waiter, admin.account_id, second_rfp, second, {"assignee_id": writer.user_id},
            admin.member_id, mail_config=mail_config))
        await lock_waiters(conn, 1)  # the second one's count waits for the first one's e-mail
        await holding.commit()
        async with asyncio.timeout(20):
            assert not (await assigning).mailed
    finally:
        for connection in (holder, waiter):
            await connection.close()
    assert await conn.fetchval("SELECT count(*) FROM mail_outbox WHERE recipient = $1",
                               writer.email) == 1


# -- the rfp_item.assigned webhook -----------------------------------------------------------------


async def name(conn, actor, first, last):
    await conn.execute("UPDATE users SET first_name = $2, last_name = $3 WHERE id = $1",
                       actor.user_id, first, last)


def ref(actor, shown_name=None):
    """A member as an item shows its assignee."""
    return {"id": actor.user_id, "name": shown_name or actor.email.split("@")[0], "email": actor.email}


@pytest.fixture
async def hooked(aiohttp_client, config, admin, receiver):
    """A client whose app delivers webhooks to `receiver`, with an endpoint of the admin's account
    that wants rfp_item.assigned (and rfp_item.approved, to see that it is another type)."""
    client = await aiohttp_client(create_app(with_config(config, webhooks=fast_webhooks())))
    response = await client.post("/api/v1/webhook_endpoints", headers=admin.headers, json={
        "webhook_endpoint": {"url": receiver.url,
                             "event_types": ["rfp_item.assigned", "rfp_item.approved"]}})
    assert response.status == 201, await response.text()
    return client


async def assigned_events(conn):
    rows = await conn.fetch("SELECT record_id, body FROM webhook_events"
                            " WHERE type = 'rfp_item.assigned' ORDER BY created_at, record_id")
    return [(row["record_id"], json.loads(row["body"])["data"]) for row in rows]


async def test_assign__sends_rfp_item_assigned_with_the_item_its_assignee_and_who_assigned_it(
    hooked, admin, make_member, receiver, conn,
):
    writer = await make_member(admin.account_id, "member")
    await name(conn, admin, "Grace", "Hopper")
    rfp_id = await new_rfp(hooked, admin, ["A?", "B?"])
    first, _ = await item_ids(hooked, admin, rfp_id)

    assert (await review(hooked, admin, rfp_id, first, assignee_id=writer.user_id)).status == 200
    [got] = await receiver.wait_for(1)
    assert got.event["type"] == "rfp_item.assigned"
    data = got.event["data"]
    assert data["id"] == first and data["rfp_id"] == rfp_id and data["question"] == "A?"
    assert data["assignee"] == ref(writer)
    assert data["previous_assignee"] is None
    assert data["assigned_by"] == ref(admin, "Grace Hopper")

    # A review that leaves the assignee, or assigns the same member again, sends none.
    assert (await review(hooked, writer, rfp_id, first, answer="Yes.")).status == 200
    assert (await review(hooked, admin, rfp_id, first, assignee_id=writer.user_id)).status == 200
    # Unassigning is a change of assignee too: to nobody.
    assert (await review(hooked, writer, rfp_id, first, assignee_id=None)).status == 200
    [_, got] = await receiver.wait_for(2)
    data = got.event["data"]
    assert (data["assignee"], data["previous_assignee"], data["assigned_by"]) == (
        None, ref(writer), ref(writer))
    await asyncio.sleep(0.3)
    assert len(receiver.received) == 2
    assert len(await assigned_events(conn)) == 2


async def test_assign__a_refused_assignment_sends_nothing(hooked, admin, make_member, conn):
    viewer = await make_member(admin.account_id, "viewer")
    rfp_id = await new_rfp(hooked, admin, ["A?"])
    [item_id] = await item_ids(hooked, admin, rfp_id)
    assert (await review(hooked, admin, rfp_id, item_id, assignee_id=viewer.user_id)).status == 422
    writer = await make_member(admin.account_id, "member")
    assert (await review(hooked, admin, rfp_id, item_id, assignee_id=writer.user_id,
                         state="approved")).status == 422  # no answer: nothing is kept
    assert await assigned_events(conn) == []


async def test_removing_a_member__sends_rfp_item_assigned_for_each_item_it_unassigns(
    hooked, admin, make_member, conn,
):
    writer = await make_member(admin.account_id, "member")
    other = await make_member(admin.account_id, "member")
    rfp_a = await new_rfp(hooked, admin, ["A1?", "A2?"])
    rfp_b = await new_rfp(hooked, admin, ["B1?"])
    a1, a2 = await item_ids(hooked, admin, rfp_a)
    [b1] = await item_ids(hooked, admin, rfp_b)
    for item_id, rfp_id in ((a1, rfp_a), (b1, rfp_b)):
        await review(hooked, admin, rfp_id, item_id, assignee_id=writer.user_id)
    await review(hooked, admin, rfp_a, a2, assignee_id=other.user_id)
    await conn.execute("DELETE FROM webhook_events")

    response = await hooked.delete(f"/api/v1/members/{writer.member_id}", headers=admin.headers)
    assert response.status == 204
    events = await assigned_events(conn)
    assert sorted(record_id for record_id, _ in events) == sorted([a1, b1])
    for record_id, data in events:
        assert data["id"] == record_id and data["assignee"] is None
        assert data["previous_assignee"] == ref(writer)
        assert data["assigned_by"] == ref(admin)

    # Made a viewer: the same.
    await review(hooked, admin, rfp_a, a1, assignee_id=other.user_id)
    await conn.execute("DELETE FROM webhook_events")
    response = await hooked.patch(f"/api/v1/members/{other.member_id}",
                                  json={"member": {"role": "viewer"}}, headers=admin.headers)
    assert response.status == 200
    assert sorted(record_id for record_id, _ in await assigned_events(conn)) == sorted([a1, a2])


async def test_removing_or_demoting_a_member__delivers_rfp_item_assigned_at_once_not_at_the_next_poll(
    aiohttp_client, config, admin, make_member, receiver,
):
    # A poll interval far longer than the waits below: only the change's wake-up sends them.
    client = await aiohttp_client(create_app(with_config(
        config, webhooks=fast_webhooks(poll_interval_seconds=60))))
    response = await client.post("/api/v1/webhook_endpoints", headers=admin.headers, json={
        "webhook_endpoint": {"url": receiver.url, "event_types": ["rfp_item.assigned"]}})
    assert response.status == 201, await response.text()
    removed = await make_member(admin.account_id, "member")
    demoted = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(client, admin, ["A?", "B?"])
    first, second = await item_ids(client, admin, rfp_id)
    await review(client, admin, rfp_id, first, assignee_id=removed.user_id)
    await review(client, admin, rfp_id, second, assignee_id=demoted.user_id)
    await receiver.wait_for(2, within_seconds=20)  # the assignments' own (their review wakes it)
    await asyncio.sleep(0.2)  # the deliverer sleeps now, for its 60 s

    response = await client.delete(f"/api/v1/members/{removed.member_id}", headers=admin.headers)
    assert response.status == 204
    got = await receiver.wait_for(3, within_seconds=20)
    assert got[2].event["data"]["id"] == first and got[2].event["data"]["assignee"] is None
    response = await client.patch(f"/api/v1/members/{demoted.member_id}",
                                  json={"member": {"role": "viewer"}}, headers=admin.headers)
    assert response.status == 200
    got = await receiver.wait_for(4, within_seconds=20)
    assert got[3].event["data"]["id"] == second and got[3].event["data"]["assignee"] is None


async def test_an_admin_leaving__names_them_as_who_unassigned_their_items(
    hooked, admin, make_member, conn,
):
    """An admin may remove their own membership (another admin staying): their items' events
    named nobody as `assigned_by` (the membership was gone before they were read), which the
    events' readers take for the operator's CLI."""
    leaving = await make_member(admin.account_id, "admin")
    rfp_id = await new_rfp(hooked, admin, ["A?"])
    [item_id] = await item_ids(hooked, admin, rfp_id)
    await review(hooked, admin, rfp_id, item_id, assignee_id=leaving.user_id)
    await conn.execute("DELETE FROM webhook_events")

    response = await hooked.delete(f"/api/v1/members/{leaving.member_id}", headers=leaving.headers)
    assert response.status == 204
    [(record_id, data)] = await assigned_events(conn)
    assert record_id == item_id and data["assignee"] is None
    assert data["previous_assignee"] == ref(leaving) and data["assigned_by"] == ref(leaving)


async def test_removing_a_member__reads_their_large_items_a_few_megabytes_at_a_time(
    hooked, admin, make_member, conn,
):
    """The unassigned items' events were built 500 items at a time whatever the items' size: a
    question and an answer hold up to 100,000 characters each, and 500 such items took 0.5 GB
    of the service's memory at once (one removal, through an endpoint wanting the type)."""
    writer = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(hooked, admin, ["A?"])
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, answer, position, assignee_id)"
        " SELECT 'item_large_' || n, $1, repeat('Q', 100000), repeat('A', 100000), n + 1, $2"
        "   FROM generate_series(1, 200) AS n", rfp_id, writer.user_id)
    tracemalloc.start()
    try:
        async with conn.transaction():
            count, queued = await unassign_member_items(conn, admin.account_id, writer.user_id)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (count, queued) == (200, 200)
    assert peak < 60_000_000, f"{peak / 1e6:.0f} MB at once for 40 MB of items"  # before: ~200 MB
    assert await conn.fetchval("SELECT count(*) FROM webhook_events WHERE type = 'rfp_item.assigned'"
                               " AND record_id LIKE 'item_large_%'") == 200


async def test_removing_a_member__without_an_endpoint_for_it_queues_nothing(
    client, admin, make_member, conn,
):
    writer = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(client, admin, ["A?"])
    [item_id] = await item_ids(client, admin, rfp_id)
    await review(client, admin, rfp_id, item_id, assignee_id=writer.user_id)
    assert (await client.delete(f"/api/v1/members/{writer.member_id}",
                                headers=admin.headers)).status == 204
    assert await assignee_of(client, admin, rfp_id, item_id) is None
    assert await conn.fetchval("SELECT count(*) FROM webhook_events") == 0


def test_openapi__names_rfp_item_assigned():
    schemas = document()["components"]["schemas"]
    assert "rfp_item.assigned" in schemas["WebhookEndpoint"]["properties"]["event_types"]["items"]["enum"]


async def test_assign__an_item_being_answered_keeps_its_question_and_its_coming_answer(
    conn, make_account, make_member, make_rfp,
):
    """Assigning touches nothing else of the item. The review wrote the question back stripped:
    a question stored with spaces or a line break around it (the API keeps them) was rewritten, and
    an item being answered was taken over as if the reviewer had rewritten it, its machine answer
    dropped when it came."""
    from service.domain.rfp_items import AnswerOptions, answer_pending_items
    from service.domain.tokens import Principal

    actor = await make_account(credits=10)
    writer = await make_member(actor.account_id, "member")
    rfp_id = await make_rfp(actor, "Acme")
    question = "  Is data encrypted at rest?\n"
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position)"
                       " VALUES ('item_a', $1, $2, 1)", rfp_id, question)
    who = Principal(member_id=actor.member_id, user_id=actor.user_id, account_id=actor.account_id,
                    role="admin", scopes=frozenset({"read", "write"}), name="admin", email=actor.email)
    assert (await answer_pending_items(conn, who, rfp_id, AnswerOptions(), 1))["started"] == 1
    asked = await conn.fetchval("SELECT question_id FROM rfp_items WHERE id = 'item_a'")
    await review_item(conn, actor.account_id, rfp_id, "item_a", {"assignee_id": writer.user_id},
                      actor.member_id)
    item = await conn.fetchrow("SELECT question, question_id, assignee_id FROM rfp_items WHERE id = 'item_a'")
    assert (item["question"], item["question_id"], item["assignee_id"]) == (question, asked, writer.user_id)
    # The question completes as the pipeline completes it (answer_rfp_item): the item takes it.
    await conn.fetchval(db.query("answer_rfp_item"), "item_a", "Yes, AES-256.", 0.6, "auto_answered", asked)
    assert await conn.fetchval("SELECT answer FROM rfp_items WHERE id = 'item_a'") == "Yes, AES-256."
