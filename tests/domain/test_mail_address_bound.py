"""mail.invitation_mails_per_hour: invitations, "you were added" and confirmations one account's
members have written to one address in an hour. mail.account_mails_per_hour bounds the account
(200), assignment_mails_per_hour an assigner's assignments to an address; without this an admin
could send one address invitation after invitation (re-invite, or remove and add again), up to
the account's whole hourly bound."""

from __future__ import annotations

from conftest import with_config
from test_mail_account_bound import create_user, invite, prepared_plan  # the account bound's steps

from service import db
from service.web.app import create_app


async def bounded_client(aiohttp_client, config, **mail):
    return await aiohttp_client(create_app(with_config(config, mail=mail)))


async def remove(client, admin, member_id):
    response = await client.delete(f"/api/v1/members/{member_id}", headers=admin.headers)
    assert response.status == 204


async def mails_to(conn, address):
    return await conn.fetchval("SELECT count(*) FROM mail_outbox WHERE lower(recipient) = $1",
                               address)


async def test_address_bound__reinviting_one_address_stops_at_the_default(
    aiohttp_client, config, admin, conn,
):
    """Re-invitations to one address, in any case: the 6th is 429 naming the setting, with
    Retry-After, and writes nothing (the pending invitation stays)."""
    client = await bounded_client(aiohttp_client, config)
    for n in range(5):
        email = "Target@Example.test" if n % 2 else "target@example.test"
        assert (await invite(client, admin, email)).status == 201
    refused = await invite(client, admin, "TARGET@example.test")
    body = await refused.json()
    assert refused.status == 429, body
    assert body["error"]["code"] == "rate_limited"
    assert "mail.invitation_mails_per_hour" in body["error"]["message"]
    assert 3590 <= int(refused.headers["Retry-After"]) <= 3600
    assert await mails_to(conn, "target@example.test") == 5
    assert await conn.fetchval(
        "SELECT count(*) FROM invitations WHERE lower(email) = 'target@example.test'"
        " AND state = 'pending'") == 1
    # Another address is still invited: the account's bound is far off.
    assert (await invite(client, admin, "other@example.test")).status == 201


async def test_address_bound__adding_and_removing_one_address_counts_too(
    aiohttp_client, config, admin, conn,
):
    client = await bounded_client(aiohttp_client, config, invitation_mails_per_hour=2)
    assert (await invite(client, admin, "target@example.test")).status == 201
    created = await create_user(client, admin, "target@example.test")  # a confirmation
    assert created.status == 201
    await remove(client, admin, (await created.json())["id"])
    refused = await create_user(client, admin, "target@example.test")
    assert refused.status == 429
    assert "mail.invitation_mails_per_hour" in (await refused.json())["error"]["message"]
    assert await mails_to(conn, "target@example.test") == 2
    assert await conn.fetchval("SELECT count(*) FROM members m JOIN users u ON u.id = m.user_id"
                               " WHERE u.email = 'target@example.test'") == 0


async def test_address_bound__per_account_retry_after_and_zero(
    aiohttp_client, config, admin, make_account, conn,
):
    client = await bounded_client(aiohttp_client, config, invitation_mails_per_hour=1)
    other = await make_account(name="Other")
    assert (await invite(client, admin, "target@example.test")).status == 201
    assert (await invite(client, other, "target@example.test")).status == 201  # its own hour
    await conn.execute("UPDATE mail_outbox SET created_at = now() - interval '3590 s'"
                       " WHERE account_id = $1", admin.account_id)
    refused = await invite(client, admin, "target@example.test")
    assert refused.status == 429
    assert 9 <= int(refused.headers["Retry-After"]) <= 11
    await conn.execute("UPDATE mail_outbox SET created_at = now() - interval '3601 s'"
                       " WHERE account_id = $1", admin.account_id)
    assert (await invite(client, admin, "target@example.test")).status == 201
    unbounded = await bounded_client(aiohttp_client, config, invitation_mails_per_hour=0)
    for _ in range(3):
        assert (await invite(unbounded, admin, "target@example.test")).status == 201


async def test_address_bound__assignments_neither_count_nor_are_refused(
    aiohttp_client, config, admin, make_member, conn,
):
    """An assigner's assignments are bounded per assigner (assignment_mails_per_hour), so that one
    cannot silence another's: they are not counted here."""
    from test_workflow import item_ids, new_rfp, review

    client = await bounded_client(aiohttp_client, config, invitation_mails_per_hour=1)
    writer = await make_member(admin.account_id, "member")
    rfp_id = await new_rfp(client, admin, ["A?", "B?"])
    for item in await item_ids(client, admin, rfp_id):
        response = await review(client, admin, rfp_id, item, assignee_id=writer.user_id)
        assert response.status == 200
    assert await mails_to(conn, writer.email.lower()) == 2
    # Nor do they count against an invitation to that address (once it is no member).
    await remove(client, admin, writer.member_id)
    assert (await invite(client, admin, writer.email)).status == 201


async def test_address_bound__is_counted_by_the_account_index(admin, make_account, conn):
    """The count reads the account's e-mails of the hour by mail_outbox_account_recent (at most
    mail.account_mails_per_hour of them), whatever other accounts wrote."""
    other = await make_account(name="Other")
    await conn.execute("""
        INSERT INTO mail_outbox (message_id, recipient, subject, body, kind, requested_by,
                                 account_id, state, created_at)
        SELECT 'm' || n || '@x', 'r' || (n % 7) || '@example.test', 's', '', 'invitation',
               'mbr_x', CASE WHEN n % 100 = 0 THEN $1 ELSE $2 END, 'sent',
               now() - n * interval '0.1 s'
          FROM generate_series(1, 20000) n""", admin.account_id, other.account_id)
    await conn.execute("ANALYZE mail_outbox")
    for mode in ("auto", "force_generic_plan"):
        plan = await prepared_plan(conn, mode, "address_mail_wait",
                                   "text, text, integer, double precision",
                                   f"'{admin.account_id}', 'R0@example.test', 5, 3600")
        scan = plan["Plan"]["Plans"][0]
        assert scan["Index Name"] == "mail_outbox_account_recent", (mode, plan)
        assert scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0) <= 200, (mode, plan)
    # The account's are n = 100, 200 … (one every 10 s); to r0@ n = 700, 1400 …: the 5th newest
    # (n = 3500, 350 s ago) leaves the hour in 3250 s, found after reading 35 of the account's.
    wait = await conn.fetchval(db.query("address_mail_wait"), admin.account_id, "R0@example.test",
                               5, 3600)
    assert 3249 <= wait <= 3251
