"""Switching a web session to another of the user's accounts (domain/sessions.py
`switch_account`) while that membership is being removed: whichever commits first, the switch
either is refused as for an account the user never belonged to, or its session goes with the
membership; never a 500 (a session pointing at a deleted membership)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from conftest import CONNECT

from service.domain import accounts
from service.domain.errors import NotFound, ServiceError
from service.domain.members import remove_member
from service.domain.sessions import end_session, find_session, start_session, switch_account


async def two_memberships(conn: asyncpg.Connection, make_account) -> tuple[str, str, int, str]:
    alpha = await make_account("Alpha Corp")
    beta = await make_account("Beta Ltd")
    member = await accounts.add_member(conn, beta.account_id, alpha.email, "member")
    cookie = await start_session(conn, alpha.member_id, 3600)
    return cookie, beta.account_id, alpha.user_id, member["id"]


async def test_switch__waits_for_a_removal_under_way_then_is_refused(conn, make_account, database_url):
    cookie, beta_id, user_id, member_id = await two_memberships(conn, make_account)
    other = await asyncpg.connect(database_url, **CONNECT)
    try:
        removing = other.transaction()
        await removing.start()
        await remove_member(other, beta_id, member_id)  # not committed yet: the row stays locked
        switching = asyncio.ensure_future(switch_account(conn, cookie, user_id, beta_id, 3600))
        await asyncio.sleep(0.3)
        assert not switching.done()  # FOR KEY SHARE waits for the removal
        await removing.commit()
        with pytest.raises(NotFound):
            await switching
    finally:
        await other.close()
    session = await find_session(conn, cookie)  # the old session goes on, in its account
    assert session is not None and session.memberships == 1


async def test_switch__a_removal_after_it_ends_the_new_session(conn, make_account):
    cookie, beta_id, user_id, member_id = await two_memberships(conn, make_account)
    new_cookie, membership, _ = await switch_account(conn, cookie, user_id, beta_id, 3600)
    assert membership["id"] == member_id and await find_session(conn, cookie) is None
    assert (await find_session(conn, new_cookie)).principal.account_id == beta_id
    await remove_member(conn, beta_id, member_id)
    assert await find_session(conn, new_cookie) is None


async def test_switch__of_a_session_ended_meanwhile_starts_none(conn, make_account, database_url):
    """A sign-out (or another tab's switch) that ends the session after the page checked it but
    before its switch: the switch started a session all the same, so a user who had just signed
    out was signed in again (the switch's cookie arriving last), and a double-click left two live
    sessions, one of them nobody's. Now only the switch that ends a live session starts one."""
    cookie, beta_id, user_id, _ = await two_memberships(conn, make_account)
    other = await asyncpg.connect(database_url, **CONNECT)
    try:
        results = await asyncio.gather(switch_account(conn, cookie, user_id, beta_id, 3600),
                                       switch_account(other, cookie, user_id, beta_id, 3600),
                                       return_exceptions=True)
    finally:
        await other.close()
    refused = [r for r in results if isinstance(r, ServiceError)]
    assert len(refused) == 1 and sum(isinstance(r, tuple) for r in results) == 1, results
    assert refused[0].code == "unauthorized"
    assert await conn.fetchval("SELECT count(*) FROM web_sessions WHERE revoked_at IS NULL") == 1
    await end_session(conn, next(r for r in results if isinstance(r, tuple))[0])  # signed out
    with pytest.raises(ServiceError):
        await switch_account(conn, cookie, user_id, beta_id, 3600)
    assert await conn.fetchval("SELECT count(*) FROM web_sessions WHERE revoked_at IS NULL") == 0


async def test_switch__keeps_the_sessions_end_and_never_extends_it(conn, make_account):
    """A session lasts web.session_ttl_hours from its sign-in; a switch started the other
    account's session with a whole new TTL, so switching back and forth kept a browser (or a
    stolen cookie) signed in for ever without the password. The new session ends when the old
    one would have."""
    cookie, beta_id, user_id, _ = await two_memberships(conn, make_account)
    await conn.execute("UPDATE web_sessions SET expires_at = now() + interval '10 minutes'")
    ends = await conn.fetchval("SELECT expires_at FROM web_sessions")
    new_cookie, _, lifetime = await switch_account(conn, cookie, user_id, beta_id, 12 * 3600)
    assert await conn.fetchval("SELECT expires_at FROM web_sessions WHERE revoked_at IS NULL") == ends
    assert 590 < lifetime <= 600
    assert (await find_session(conn, new_cookie)).principal.account_id == beta_id
