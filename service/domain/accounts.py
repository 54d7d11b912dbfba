"""Operator actions on accounts: create one with its admin, add members, credits, subscription.

Shared by the CLI (`python -m service account create …`) and the first-start demo account.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

import asyncpg

from .. import db
from . import members
from .ids import new_id
from .tokens import (
    ROLES,
    SCOPES,
    Principal,
    TokenInfo,
    expiry,
    issue_token,
    list_tokens,
    revoke_token,
)


class OperatorError(Exception):
    """An operator command cannot be carried out; the message says why."""


async def require_account(conn: asyncpg.Connection, account_id: str) -> None:
    if not await conn.fetchval(db.query("account_exists"), account_id):
        raise OperatorError(f"no account {account_id}")


async def change_credits(
    conn: asyncpg.Connection, account_id: str, amount: int, reason: str, subject_id: str | None = None
) -> int:
    """Add (or, negative, remove) credits and record it in the ledger; returns the new balance."""
    async with conn.transaction():  # the balance and its ledger entry change together
        balance = await conn.fetchval(db.query("add_credits"), account_id, amount)
        if balance is None:
            raise OperatorError(f"no account {account_id}")
        await conn.execute(db.query("insert_ledger_entry"), account_id, amount, reason, subject_id)
    return balance


async def add_member(
    conn: asyncpg.Connection, account_id: str, email: str, role: str, *, owner: bool = False
) -> dict:
    if role not in ROLES:
        raise OperatorError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
    if "@" not in email or email.strip() != email or len(email) > 254:
        raise OperatorError(f"not an e-mail address: {email!r}")
    await require_account(conn, account_id)
    async with conn.transaction():
        user_id = await conn.fetchval(db.query("upsert_user"), email, "", "")
        if await conn.fetchrow(db.query("member_by_email"), account_id, email):
            raise OperatorError(f"{email} is already a member of {account_id}")
        row = await conn.fetchrow(
            db.query("insert_member"), new_id("mbr"), account_id, user_id, role, owner
        )
    return {"id": row["id"], "user_id": row["user_id"], "email": email, "role": row["role"]}


async def create_token(
    conn: asyncpg.Connection,
    account_id: str,
    email: str,
    scopes: Iterable[str],
    ttl_days: int = 0,
    source: str = "cli",
) -> str:
    """A token for a member, expiring after `ttl_days` (0: never; config auth.cli_token_ttl_days
    is the CLI's default)."""
    scopes = list(scopes)
    unknown = set(scopes) - set(SCOPES)
    if unknown or not scopes:
        raise OperatorError(f"scopes must be some of {', '.join(SCOPES)}; got {','.join(scopes)}")
    await require_account(conn, account_id)
    member = await conn.fetchrow(db.query("member_by_email"), account_id, email)
    if member is None:
        raise OperatorError(f"{email} is not a member of {account_id}")
    if ttl_days < 0:
        raise OperatorError("ttl-days must not be negative")
    return await issue_token(conn, member["id"], scopes, expiry(ttl_days), source)


async def _member_id(conn: asyncpg.Connection, account_id: str, email: str) -> str:
    await require_account(conn, account_id)
    member = await conn.fetchrow(db.query("member_by_email"), account_id, email)
    if member is None:
        raise OperatorError(f"{email} is not a member of {account_id}")
    return member["id"]


async def list_member_tokens(conn: asyncpg.Connection, account_id: str, email: str) -> list[TokenInfo]:
    member_id = await _member_id(conn, account_id, email)
    return await list_tokens(conn, _operator(account_id), member_id)


async def revoke_member_token(conn: asyncpg.Connection, account_id: str, token_id: int) -> TokenInfo:
    await require_account(conn, account_id)
    return await revoke_token(conn, _operator(account_id), token_id)


async def remove_member_by_email(conn: asyncpg.Connection, account_id: str, email: str) -> None:
    await members.remove_member(conn, account_id, await _member_id(conn, account_id, email))


async def change_role_by_email(
    conn: asyncpg.Connection, account_id: str, email: str, role: str
) -> members.Member:
    return await members.change_role(conn, account_id, await _member_id(conn, account_id, email), role)


def _operator(account_id: str) -> Principal:
    # The operator acts as an admin of the account, with no membership of their own.
    return Principal(
        member_id="", user_id=0, account_id=account_id, role="admin", scopes=frozenset(SCOPES),
        name="operator", email="",
    )


async def create_account(
    conn: asyncpg.Connection, name: str, admin_email: str, credits: int = 0, token_ttl_days: int = 0,
    token_source: str = "cli",
) -> dict:
    """An account with an active subscription, its admin (owner, confirmed) and a read+write token."""
    if not name.strip():
        raise OperatorError("the account name must not be blank")
    # Mails name the account in their Subject and sentences, the web app in every header.
    if len(name) > 200 or any(unicodedata.category(c) == "Cc" for c in name):
        raise OperatorError("the account name must be at most 200 characters, without line breaks "
                            "or other control characters")
    if credits < 0:
        raise OperatorError("credits must not be negative")
    async with conn.transaction():
        account = await conn.fetchrow(db.query("insert_account"), new_id("acct"), name, 0)
        if credits:
            await change_credits(conn, account["id"], credits, "grant")
        member = await add_member(conn, account["id"], admin_email, "admin", owner=True)
        token = await issue_token(
            conn, member["id"], SCOPES, expiry(token_ttl_days), token_source
        )
    return {
        "account": {"id": account["id"], "name": account["name"], "credits": credits},
        "member": member,
        "token": token,
    }


async def set_subscription(conn: asyncpg.Connection, account_id: str, status: str) -> None:
    if status not in ("active", "inactive"):
        raise OperatorError(f"status must be active or inactive; got {status!r}")
    if await conn.fetchval(db.query("set_subscription"), account_id, status) is None:
        raise OperatorError(f"no account {account_id}")


async def set_password(conn: asyncpg.Connection, user_id: int, password: str) -> None:
    """Give a user a password (argon2id, as sign-up stores it) shown only to them: the first
    start prints the demo admin's, whom no invitation or reset e-mail reaches. Counted as the
    user's own (sign-in refuses passwords an administrator chose for someone else)."""
    from .passwords import hasher

    await conn.execute(db.query("set_own_password"), user_id, hasher().hash(password), False)
