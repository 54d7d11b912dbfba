"""The audit log: an end-to-end workflow read back complete (and its webhooks received), sign-ins,
the admin API's filters and pages, the operator's CLI actions and the JSON-lines export."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest
from cli_runner import POOLER_ENV, cli, cli_json
from conftest import ROOT, with_config
from helpers_questions import add_entry, wait_all_complete
from webhook_receiver import fast_webhooks, verify

from service.web.app import create_app

QUESTIONNAIRE = (
    b"Section,Question\n"
    b"Encryption,Do you encrypt customer data at rest?\n"
    b"Encryption,Is data encrypted in transit with TLS?\n"
)
EVENTS = ["rfp.items_imported", "question.completed", "rfp.answered", "rfp_item.approved",
          "rfp.approved", "member.created", "knowledge_base_item.created"]


async def audit_events(client, reader, **query) -> dict:
    response = await client.get("/api/v1/audit_events", params=query, headers=reader.headers)
    assert response.status == 200, await response.text()
    return await response.json()


async def test_workflow__audit_trail_complete_and_webhooks_received(
    aiohttp_client, config, conn, make_account, make_member, receiver
):
    client = await aiohttp_client(create_app(with_config(config, webhooks=fast_webhooks())))
    admin = await make_account(credits=10)
    response = await client.post("/api/v1/webhook_endpoints", headers=admin.headers, json={
        "webhook_endpoint": {"url": receiver.url, "event_types": EVENTS}})
    endpoint = await response.json()
    await add_entry(conn, admin.account_id, "Do you encrypt customer data at rest?",
                    "Yes. Customer data at rest is encrypted with AES-256.")
    headers = {**admin.headers, "X-Request-Id": "req-create-1"}

    response = await client.post("/api/v1/rfps", headers=headers,
                                 json={"rfp": {"title": "Acme review"}})
    rfp_id = (await response.json())["id"]
    response = await client.post(f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=QUESTIONNAIRE,
                                 headers={**admin.headers, "Content-Type": "text/csv"})
    assert response.status == 201
    response = await client.post(f"/api/v1/rfps/{rfp_id}/answer", headers=admin.headers)
    assert response.status == 202
    await wait_all_complete(conn, 30)
    items = (await (await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items",
                                     headers=admin.headers)).json())["rfp_items"]
    first, second = items
    response = await client.patch(f"/api/v1/rfps/{rfp_id}/rfp_items/{first['id']}",
                                  headers=admin.headers,
                                  json={"rfp_item": {"answer": "Yes, AES-256 at rest."}})
    assert response.status == 200
    for item in items:
        response = await client.patch(f"/api/v1/rfps/{rfp_id}/rfp_items/{item['id']}",
                                      headers=admin.headers,
                                      json={"rfp_item": {"state": "approved",
                                                         "answer": item["answer"] or "Yes."}})
        assert response.status == 200, await response.text()
    response = await client.get(f"/api/v1/rfps/{rfp_id}/export", headers=admin.headers)
    assert response.status == 200
    await response.read()
    colleague = await make_member(admin.account_id, "member")
    tokens = await (await client.get(f"/api/v1/members/{colleague.member_id}/tokens",
                                     headers=admin.headers)).json()
    token_id = tokens["tokens"][0]["id"]
    response = await client.delete(f"/api/v1/tokens/{token_id}", headers=admin.headers)
    assert response.status == 200
    revoked = await audit_events(client, admin, action="token.revoked")
    [event] = revoked["audit_events"]
    assert event["record_id"] == str(token_id) and event["actor"]["id"] == admin.member_id

    trail = await audit_events(client, admin, record_id=rfp_id)
    actions = [e["action"] for e in reversed(trail["audit_events"])]
    assert actions == ["rfp.created", "rfp.items_imported", "rfp.answer_started", "rfp.approved",
                       "rfp.exported"]
    created = trail["audit_events"][-1]
    assert created["actor"] == {"type": "member", "id": admin.member_id, "label": admin.email}
    assert created["request_id"] == "req-create-1" and created["client_address"] == "127.0.0.1"
    assert created["after"]["title"] == "Acme review"
    edits = await audit_events(client, admin, record_id=first["id"])
    edit = edits["audit_events"][-1]
    assert edit["action"] == "rfp_item.updated"
    assert edit["before"] == {"answer": first["answer"]}
    assert edit["after"] == {"answer": "Yes, AES-256 at rest."}
    approvals = await audit_events(client, admin, action="rfp_item.approved")
    assert {e["record_id"] for e in approvals["audit_events"]} == {first["id"], second["id"]}

    # Every event type of the workflow reached the receiver, signed.
    got = await receiver.wait_for(7)  # imported, 2 completed, answered, 2 approved, rfp approved
    await asyncio.sleep(0.3)
    assert all(verify(endpoint["secret"], r.headers, r.body) for r in receiver.received)
    types = [r.event["type"] for r in receiver.received]
    assert sorted(types) == sorted(["rfp.items_imported", "question.completed",
                                    "question.completed", "rfp.answered", "rfp_item.approved",
                                    "rfp_item.approved", "rfp.approved"])
    by_rfp = [r.event["type"] for r in got if r.event["data"].get("id") == rfp_id]
    assert by_rfp == ["rfp.answered", "rfp.approved"]  # in order for the record
    answered = next(r.event["data"] for r in got if r.event["type"] == "rfp.answered")
    assert answered["state"] != "processing_items"
    imported = next(r.event["data"] for r in got if r.event["type"] == "rfp.items_imported")
    assert imported["imported"] == 2


async def test_sign_in__success_and_failure_are_audited(client, admin, conn):
    from service.domain.passwords import Passwords

    password = "correct horse battery staple"
    await conn.execute("UPDATE users SET password_hash = $1, confirmed_at = now(),"
                       " password_chosen_by_user = true WHERE id = $2",
                       await (await Passwords.create()).hash(password), admin.user_id)
    bad = await client.post("/api/v1/tokens", json={"email": admin.email, "password": "wrong" * 3})
    assert bad.status == 401
    unknown = await client.post("/api/v1/tokens", json={"email": "nobody@example.test",
                                                         "password": "wrong" * 3})
    assert unknown.status == 401
    good = await client.post("/api/v1/tokens", json={"email": admin.email, "password": password})
    assert good.status == 201
    token = (await good.json())["token"]
    body = await audit_events(client, admin)
    actions = [e["action"] for e in reversed(body["audit_events"])]
    assert actions == ["auth.sign_in_failed", "auth.signed_in", "token.created"]
    failed = body["audit_events"][-1]
    assert failed["actor"] == {"type": "anonymous", "id": None, "label": admin.email}
    created = body["audit_events"][0]
    assert created["after"]["scopes"] == ["read", "write"]
    assert token not in json.dumps(body)  # never a secret
    # The unknown address's attempt belongs to no account, so no admin sees it.
    assert await conn.fetchval(
        "SELECT count(*) FROM audit_events WHERE account_id IS NULL AND action = 'auth.sign_in_failed'"
        " AND actor_label = 'nobody@example.test'") == 1


async def test_members__role_change_and_removal_audited(client, admin, make_member):
    member = await make_member(admin.account_id, "member")
    response = await client.patch(f"/api/v1/members/{member.member_id}", headers=admin.headers,
                                  json={"member": {"role": "viewer"}})
    assert response.status == 200
    response = await client.delete(f"/api/v1/members/{member.member_id}", headers=admin.headers)
    assert response.status == 204
    body = await audit_events(client, admin, record_id=member.member_id)
    changed, removed = reversed(body["audit_events"])
    assert (changed["action"], changed["before"], changed["after"]) == (
        "member.role_changed", {"role": "member"}, {"role": "viewer"})
    assert (removed["action"], removed["before"]) == ("member.removed", {"role": "viewer"})


@pytest.mark.parametrize(("name", "value"), [
    ("since", "0001-01-01T00:00:00+14:00"), ("until", "9999-12-31T23:59:59-14:00"),
])
async def test_audit_events__a_time_past_the_years_in_utc_is_400_not_500(client, admin, name, value):
    """A valid RFC 3339 time whose UTC falls before year 1 or after 9999 cannot be sent to
    PostgreSQL (asyncpg converts it to UTC): it was a 500."""
    response = await client.get("/api/v1/audit_events", params={name: value}, headers=admin.headers)
    assert response.status == 400
    assert name in (await response.json())["error"]["message"]


async def test_audit_events__admin_only_filters_and_pages(client, admin, make_member, make_account):
    member = await make_member(admin.account_id, "member")
    assert (await client.get("/api/v1/audit_events", headers=member.headers)).status == 403
    for n in range(22):
        await client.post("/api/v1/rfps", headers=member.headers, json={"rfp": {"title": f"R{n}"}})
    await client.post("/api/v1/rfps", headers=admin.headers, json={"rfp": {"title": "Mine"}})
    page1 = await audit_events(client, admin, actor=member.member_id)
    assert page1["pagination"]["total_count"] == 22 and len(page1["audit_events"]) == 20
    page2 = await audit_events(client, admin, actor=member.member_id, page=2)
    assert [e["after"]["title"] for e in page2["audit_events"]] == ["R1", "R0"]
    assert (await audit_events(client, admin, since="2999-01-01T00:00:00Z"))["audit_events"] == []
    assert len((await audit_events(client, admin, until="2999-01-01T00:00:00Z"))["audit_events"]) == 20
    bad = await client.get("/api/v1/audit_events", params={"since": "yesterday"}, headers=admin.headers)
    assert bad.status == 400 and "since" in (await bad.json())["error"]["message"]
    other = await make_account("Other")
    assert (await audit_events(client, other))["pagination"]["total_count"] == 0


async def test_cli__operator_actions_audited_and_exported_as_json_lines(database_url, admin, conn):
    member = cli_json(database_url, "member", "create", "--account", admin.account_id,
                      "--email", "ops@example.test", "--role", "member")["member"]
    cli_json(database_url, "token", "create", "--account", admin.account_id,
             "--email", "ops@example.test")
    cli_json(database_url, "credits", "add", "--account", admin.account_id, "--amount", "5")
    result = cli(database_url, "audit", "export", "--account", admin.account_id,
                 "--since", "2000-01-01")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["action"] for e in lines] == ["member.created", "token.created", "credits.changed"]
    assert all(e["actor"]["type"] == "operator" and e["actor"]["id"] for e in lines)
    assert lines[0]["record_id"] == member["id"]
    assert lines[2]["after"] == {"amount": 5, "balance": 15}
    assert "rfpk_" not in result.stdout
    # Where the next export goes on from: it repeats none of these.
    until = re.search(r"complete up to (\S+Z): export what follows with --since \1$", result.stderr.strip())
    assert until is not None, result.stderr
    following = cli(database_url, "audit", "export", "--account", admin.account_id, "--since", until[1])
    assert following.returncode == 0 and following.stdout == "", following.stderr
    later = cli(database_url, "audit", "export", "--account", admin.account_id,
                "--since", "2999-01-01T00:00:00Z")
    assert later.returncode == 0 and later.stdout == ""
    wrong = cli(database_url, "audit", "export", "--account", "acct_nope", "--since", "2000-01-01")
    assert wrong.returncode == 1 and "no account" in wrong.stderr


async def test_cli__a_since_past_the_years_in_utc_is_refused_not_a_traceback(database_url, admin):
    result = cli(database_url, "audit", "export", "--account", admin.account_id,
                 "--since", "0001-01-01T00:00:00+14:00")
    assert result.returncode == 1, result.stderr
    assert "--since" in result.stderr and "Traceback" not in result.stderr


async def test_refused_change__no_audit_event_and_no_webhook(aiohttp_client, config, admin, conn,
                                                             receiver):
    """A change that does not happen is neither logged nor reported: the audit event and the
    outbox row are in its transaction."""
    client = await aiohttp_client(create_app(with_config(config, webhooks=fast_webhooks())))
    await client.post("/api/v1/webhook_endpoints", headers=admin.headers, json={
        "webhook_endpoint": {"url": receiver.url, "event_types": ["rfp_item.approved"]}})
    response = await client.post("/api/v1/rfps", headers=admin.headers, json={
        "rfp": {"title": "T", "items": [{"question": "MFA?"}]}})
    rfp_id = (await response.json())["id"]
    items = await (await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", headers=admin.headers)).json()
    item_id = items["rfp_items"][0]["id"]
    response = await client.patch(f"/api/v1/rfps/{rfp_id}/rfp_items/{item_id}", headers=admin.headers,
                                  json={"rfp_item": {"state": "approved"}})  # no answer: refused
    assert response.status == 422
    assert (await audit_events(client, admin, record_id=item_id))["audit_events"] == []
    assert await conn.fetchval("SELECT count(*) FROM webhook_events") == 0
    response = await client.patch(f"/api/v1/rfps/{rfp_id}/rfp_items/{item_id}", headers=admin.headers,
                                  json={"rfp_item": {"state": "approved", "answer": "Yes."}})
    assert response.status == 200
    [got] = await receiver.wait_for(1)
    assert got.event["data"]["state"] == "approved"


async def test_password_change__audited_without_the_password(client, admin, conn):
    from service.domain.passwords import Passwords

    old, new = "correct horse battery staple", "another long passphrase 42"
    await conn.execute("UPDATE users SET password_hash = $1, confirmed_at = now(),"
                       " password_chosen_by_user = true WHERE id = $2",
                       await (await Passwords.create()).hash(old), admin.user_id)
    response = await client.post("/api/v1/users/password", headers=admin.headers,
                                 json={"current_password": old, "new_password": new})
    assert response.status == 200, await response.text()
    body = await audit_events(client, admin, action="password.changed")
    [event] = body["audit_events"]
    assert event["record_id"] == str(admin.user_id) and event["actor"]["id"] == admin.member_id
    assert new not in json.dumps(body) and old not in json.dumps(body)


async def test_cli__an_export_piped_into_a_reader_that_stops_ends_without_a_traceback(
    database_url, admin, conn,
):
    """`audit export | head`: head closes the pipe after its lines, and the export stopped with
    a BrokenPipeError traceback."""
    await conn.execute(
        "INSERT INTO audit_events (account_id, actor_type, actor_id, action, record_id) "
        "SELECT $1, 'operator', 'ops', 'credits.changed', 'rec_' || n FROM generate_series(1, 5000) AS n",
        admin.account_id)
    returncode, stderr = _export_read_one_line_then_closed(database_url, admin.account_id)
    assert returncode == 1
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr, stderr.decode()


def _export_read_one_line_then_closed(database_url: str, account_id: str) -> tuple[int, bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "audit", "export", "--account", account_id,
         "--since", "2000-01-01"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": database_url, **POOLER_ENV},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert json.loads(proc.stdout.readline())["action"] == "credits.changed"
    proc.stdout.close()  # 5,000 lines are more than the pipe holds: the export is still writing
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr
