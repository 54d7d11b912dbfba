"""mail.account_mails_per_hour: what the members of one account make the service send in an hour
(invitations, "you were added", confirmations of users an admin created, assignments), on the
one SMTP account and quota every account shares."""

from __future__ import annotations

import asyncio
import json
import logging

import asyncpg
import pytest
from conftest import CONNECT, lock_waiters, with_config
from test_workflow import item_ids, new_rfp, review  # the workflow tests' API steps

from service import db
from service.domain import members
from service.domain.errors import RateLimited
from service.domain.tokens import Principal
from service.web.app import create_app

PASSWORD = "correct horse battery"


async def bounded_client(aiohttp_client, config, limit):
    return await aiohttp_client(create_app(with_config(
        config, mail={"account_mails_per_hour": limit})))


async def invite(client, admin, email):
    return await client.post("/api/v1/invitations", json={"invitation": {"email": email}},
                             headers=admin.headers)


async def create_user(client, admin, email):
    return await client.post("/api/v1/users", headers=admin.headers, json={"user": {
        "email": email, "password": PASSWORD, "terms_of_service": "accepted"}})


async def outbox(conn):
    return [tuple(row) for row in await conn.fetch(
        "SELECT recipient, kind, account_id FROM mail_outbox ORDER BY id")]


async def test_account_bound__an_invitation_or_new_user_past_it_is_429_and_writes_nothing(
    aiohttp_client, config, admin, conn,
):
    client = await bounded_client(aiohttp_client, config, 2)
    assert (await invite(client, admin, "one@example.test")).status == 201
    assert (await create_user(client, admin, "two@example.test")).status == 201
    for refused in (await invite(client, admin, "three@example.test"),
                    await create_user(client, admin, "four@example.test")):
        body = await refused.json()
        assert refused.status == 429, body
        assert body["error"]["code"] == "rate_limited"
        assert "mail.account_mails_per_hour" in body["error"]["message"]
        assert 3590 <= int(refused.headers["Retry-After"]) <= 3600
    # Neither the invitation nor the user (nor a membership) without its e-mail.
    assert await outbox(conn) == [("one@example.test", "invitation", admin.account_id),
                                  ("two@example.test", "confirmation", admin.account_id)]
    assert await conn.fetchval("SELECT count(*) FROM invitations WHERE email = 'three@example.test'") == 0
    assert await conn.fetchval("SELECT count(*) FROM users WHERE email = 'four@example.test'") == 0


async def test_account_bound__retry_after_is_when_one_leaves_the_hour_and_then_it_passes(
    aiohttp_client, config, admin, conn,
):
    client = await bounded_client(aiohttp_client, config, 2)
    for email in ("one@example.test", "two@example.test"):
        assert (await invite(client, admin, email)).status == 201
    await conn.execute("UPDATE mail_outbox SET created_at = now() - interval '3590 s'"
                       " WHERE recipient = 'one@example.test'")
    refused = await invite(client, admin, "three@example.test")
    assert refused.status == 429
    assert 9 <= int(refused.headers["Retry-After"]) <= 11
    await conn.execute("UPDATE mail_outbox SET created_at = now() - interval '3601 s'"
                       " WHERE recipient = 'one@example.test'")
    assert (await invite(client, admin, "three@example.test")).status == 201


async def test_account_bound__another_account_and_password_resets_are_unaffected(
    aiohttp_client, config, make_account, conn,
):
    client = await bounded_client(aiohttp_client, config, 1)
    first, second = await make_account(), await make_account(name="Other")
    assert (await invite(client, first, "one@example.test")).status == 201
    assert (await invite(client, first, "two@example.test")).status == 429
    assert (await invite(client, second, "two@example.test")).status == 201
    # A user's own reset is not their account's doing: neither counted nor refused.
    asked = await client.post("/api/v1/users/password/reset", json={"email": first.email})
    assert asked.status == 202
    assert await outbox(conn) == [("one@example.test", "invitation", first.account_id),
                                  ("two@example.test", "invitation", second.account_id),
                                  (first.email, "password_reset", None)]


async def test_account_bound__assignments_count_and_past_it_are_assigned_unmailed(
    aiohttp_client, config, admin, make_member, conn, caplog,
):
    client = await bounded_client(aiohttp_client, config, 2)
    writers = [await make_member(admin.account_id, "member") for _ in range(3)]
    rfp_id = await new_rfp(client, admin, ["A?", "B?", "C?"])
    items = await item_ids(client, admin, rfp_id)
    caplog.set_level(logging.INFO, logger="service.domain.rfp_items")
    # Two members, each within their own mail.assignment_mails_per_hour, make two e-mails.
    assert (await review(client, admin, rfp_id, items[0], assignee_id=writers[0].user_id)).status == 200
    assert (await review(client, writers[0], rfp_id, items[1], assignee_id=writers[1].user_id)).status == 200
    assert "mail.account_mails_per_hour" not in caplog.text
    # A third: assigned, unmailed, logged; an invitation is refused.
    response = await review(client, writers[1], rfp_id, items[2], assignee_id=writers[2].user_id)
    assert response.status == 200
    assert (await response.json())["assignee"]["id"] == writers[2].user_id
    assert "not mailed" in caplog.text and "mail.account_mails_per_hour" in caplog.text
    assert (await invite(client, admin, "one@example.test")).status == 429
    assert await outbox(conn) == [(writers[0].email, "assignment", admin.account_id),
                                  (writers[1].email, "assignment", admin.account_id)]


async def test_account_bound__zero_is_no_bound(aiohttp_client, config, admin, conn):
    client = await bounded_client(aiohttp_client, config, 0)
    for n in range(3):
        assert (await invite(client, admin, f"n{n}@example.test")).status == 201
    assert len(await outbox(conn)) == 3


async def test_account_bound__invitations_at_once_keep_to_it(config, admin, conn, database_url):
    """Each transaction would count the account's e-mails without the others' uncommitted ones:
    as many invitations at once (to different addresses, which do not wait for each other) as
    reached the service would each be sent, past the bound."""
    bounded = with_config(config, mail={"account_mails_per_hour": 1})
    who = Principal(member_id=admin.member_id, user_id=admin.user_id, account_id=admin.account_id,
                    role="admin", scopes=frozenset({"read", "write"}), name="", email=admin.email)
    holder, waiter = [await asyncpg.connect(database_url, **CONNECT) for _ in range(2)]
    try:
        holding = holder.transaction()
        await holding.start()
        await members.invite(holder, bounded, who, {"email": "one@example.test"})
        inviting = asyncio.create_task(
            members.invite(waiter, bounded, who, {"email": "two@example.test"}))
        await lock_waiters(conn, 1)  # the second one's count waits for the first one's e-mail
        await holding.commit()
        async with asyncio.timeout(20):
            with pytest.raises(RateLimited):
                await inviting
    finally:
        for connection in (holder, waiter):
            await connection.close()
    assert await outbox(conn) == [("one@example.test", "invitation", admin.account_id)]
    assert await conn.fetchval("SELECT count(*) FROM invitations") == 1


async def prepared_plan(conn, mode, query, types, arguments):
    """EXPLAIN ANALYZE (JSON) of db.query(`query`) run with `arguments` (SQL literals) under
    plan_cache_mode `mode`, prepared as asyncpg prepares it: EXPLAIN of the statement with its
    arguments bound would plan for them, never generically."""
    async with conn.transaction():
        await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
        await conn.execute(f"PREPARE {query} ({types}) AS " + db.query(query))
        [plan] = json.loads(await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {query}({arguments})"))
        await conn.execute(f"DEALLOCATE {query}")
    return plan


async def test_account_bound__is_counted_by_its_index_reading_at_most_the_bound(
    admin, make_account, conn,
):
    other = await make_account(name="Other")
    await conn.execute("""
        INSERT INTO mail_outbox (message_id, recipient, subject, body, kind, requested_by,
                                 account_id, state, created_at)
        SELECT 'm' || n || '@x', 'r' || n || '@example.test', 's', '', 'invitation', 'mbr_x',
               CASE WHEN n % 10 = 0 THEN $1 ELSE $2 END, 'sent', now() - n * interval '1 s'
          FROM generate_series(1, 20000) n""", admin.account_id, other.account_id)
    await conn.execute("ANALYZE mail_outbox")
    for mode in ("auto", "force_generic_plan"):
        plan = await prepared_plan(conn, mode, "account_mail_wait", "text, integer, double precision",
                                   f"'{admin.account_id}', 200, 3600")  # an acc_… id: letters, digits
        scan = plan["Plan"]["Plans"][0]
        if mode == "force_generic_plan":
            assert "$1" in scan["Index Cond"], plan
        assert scan["Index Name"] == "mail_outbox_account_recent", (mode, plan)
        assert scan["Actual Rows"] <= 200, (mode, plan)
    # 359 of the account's in the hour (one every 10 s): the 200th newest leaves it in
    # 3600 - 2000 s; under a bound of 360 one more may be written.
    wait = await conn.fetchval(db.query("account_mail_wait"), admin.account_id, 200, 3600)
    assert 1599 <= wait <= 1601
    assert await conn.fetchval(db.query("account_mail_wait"), admin.account_id, 360, 3600) is None
