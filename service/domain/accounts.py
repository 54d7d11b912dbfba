"""Operator actions on accounts: create one with its admin, add members, credits, subscription.

Shared by the CLI (`python -m service account create …`) and the first-start demo account.
"""

from __future__ import annotations

from collections.abc import Iterable

import asyncpg

from .. import db
from .ids import new_id
from .tokens import ROLES, SCOPES, issue_token


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
    conn: asyncpg.Connection, account_id: str, email: str, scopes: Iterable[str]
) -> str:
    scopes = list(scopes)
    unknown = set(scopes) - set(SCOPES)
    if unknown or not scopes:
        raise OperatorError(f"scopes must be some of {', '.join(SCOPES)}; got {','.join(scopes)}")
    await require_account(conn, account_id)
    member = await conn.fetchrow(db.query("member_by_email"), account_id, email)
    if member is None:
        raise OperatorError(f"{email} is not a member of {account_id}")
    return await issue_token(conn, member["id"], scopes)


async def create_account(
    conn: asyncpg.Connection, name: str, admin_email: str, credits: int = 0
) -> dict:
    """An account with an active subscription, its admin (owner, confirmed) and a read+write token."""
    if not name.strip():
        raise OperatorError("the account name must not be blank")
    if credits < 0:
        raise OperatorError("credits must not be negative")
    async with conn.transaction():
        account = await conn.fetchrow(db.query("insert_account"), new_id("acct"), name, 0)
        if credits:
            await change_credits(conn, account["id"], credits, "grant")
        member = await add_member(conn, account["id"], admin_email, "admin", owner=True)
        token = await issue_token(conn, member["id"], SCOPES)
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
    """Give a user a password (argon2id, as sign-up stores it): the operator's way in for the
    demo admin, whom no invitation or confirmation e-mail reaches."""
    from .passwords import hasher

    await conn.execute(db.query("update_password_hash"), user_id, hasher().hash(password))
