"""Webhook endpoints (admin CRUD, the secret shown once, URL safety) and delivery to a real
receiver on loopback: Standard Webhooks headers, signatures that verify as docs/webhooks.md
says, order per record, retries, disabling, the delivery log and a manual retry."""

from __future__ import annotations

import asyncio
import logging
import socket
from datetime import datetime

import asyncpg
import pytest
from aiohttp.abc import AbstractResolver
from conftest import CONNECT, with_config
from standardwebhooks.webhooks import Webhook
from webhook_receiver import fast_webhooks, verify

from service.domain import housekeeping, webhooks
from service.web.app import create_app

ENDPOINTS = "/api/v1/webhook_endpoints"


@pytest.fixture
async def hook_client(aiohttp_client, config):
    """A client whose app may deliver to loopback, with quick retries."""
    return await aiohttp_client(create_app(with_config(config, webhooks=fast_webhooks())))


async def register(client, actor, url, types=("knowledge_base_item.created",), **extra):
    response = await client.post(ENDPOINTS, headers=actor.headers, json={
        "webhook_endpoint": {"url": url, "event_types": list(types), **extra}})
    return response, await response.json()


async def poll(read, done, within_seconds: float = 10.0):
    """`await read()` until `done(value)`; the value."""
    async with asyncio.timeout(within_seconds):
        while True:
            value = await read()
            if done(value):
                return value
            await asyncio.sleep(0.05)


async def add_entry(client, actor, answer="We enforce MFA."):
    response = await client.post("/api/v1/knowledge_base_items", headers=actor.headers,
                                 json={"knowledge_base_item": {"answer": answer}})
    assert response.status == 201
    return await response.json()


async def test_create__secret_shown_once_then_never(hook_client, admin, receiver):
    response, body = await register(hook_client, admin, receiver.url)
    assert response.status == 201
    assert response.headers["Location"] == f"{ENDPOINTS}/{body['id']}"
    assert body["secret"].startswith("whsec_") and body["enabled"] is True
    read = await (await hook_client.get(f"{ENDPOINTS}/{body['id']}", headers=admin.headers)).json()
    listed = await (await hook_client.get(ENDPOINTS, headers=admin.headers)).json()
    assert "secret" not in read and "secret" not in listed["webhook_endpoints"][0]
    assert listed["pagination"]["total_count"] == 1


async def test_endpoints__admin_only_and_per_account(hook_client, admin, make_member, make_account,
                                                     receiver):
    member = await make_member(admin.account_id, "member")
    response, _ = await register(hook_client, member, receiver.url)
    assert response.status == 403
    _, body = await register(hook_client, admin, receiver.url)
    other = await make_account("Other")
    response = await hook_client.get(f"{ENDPOINTS}/{body['id']}", headers=other.headers)
    assert response.status == 404


async def test_create__endpoints_per_account_are_bounded_even_at_once(
    aiohttp_client, config, admin, make_account, receiver
):
    """Every event is queued once per endpoint that wants it, in the transaction of the change:
    with no bound, an admin's 200 endpoints made an import of 2,000 knowledge-base entries write
    400,000 deliveries (233 MB) in one transaction of 24 s instead of 0.3 s."""
    app = create_app(with_config(config, webhooks=fast_webhooks(max_endpoints_per_account=2)))
    client = await aiohttp_client(app)
    made = await asyncio.gather(*(register(client, admin, receiver.url) for _ in range(6)))
    assert sorted(response.status for response, _ in made) == [201, 201, 422, 422, 422, 422]
    refused = next(body for response, body in made if response.status == 422)
    assert "webhooks.max_endpoints_per_account" in refused["error"]["details"][0]
    listed = await (await client.get(ENDPOINTS, headers=admin.headers)).json()
    assert listed["pagination"]["total_count"] == 2
    other = await make_account("Other")  # per account
    assert (await register(client, other, receiver.url))[0].status == 201
    kept = next(body for response, body in made if response.status == 201)
    assert (await client.delete(f"{ENDPOINTS}/{kept['id']}", headers=admin.headers)).status == 204
    assert (await register(client, admin, receiver.url))[0].status == 201


async def test_create__unknown_event_type_and_bad_url_are_422(hook_client, admin):
    response, body = await register(hook_client, admin, "ftp://example.com/x")
    assert response.status == 422 and "http(s)" in body["error"]["details"][0]
    response, body = await register(hook_client, admin, "https://example.com/x", ["rfp.exploded"])
    assert response.status == 422 and "rfp.exploded" in body["error"]["details"][0]
    # The refusal names the first few, each cut short: it repeated every value given, whole.
    given = [f"custom.{n}" for n in range(1000)] + ["x" * 10_000]
    response, body = await register(hook_client, admin, "https://example.com/x", given)
    [detail] = body["error"]["details"]
    assert response.status == 422 and len(detail) < 1000, len(detail)
    assert detail.startswith("webhook_endpoint.event_types: unknown event types 'custom.0', ")
    assert "'custom.4' and 996 more; known: question.completed" in detail


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/x", "http://[::1]/x", "http://169.254.169.254/latest/meta-data",
    "http://10.0.0.5/x", "http://192.168.1.1/x", "http://localhost:8080/x",
    "http://[::ffff:127.0.0.1]/x", "http://100.64.0.1/x", "http://LOCALHOST./x",
    # Written in other digits or dots, which IDNA normalises: aiohttp connects to 127.0.0.1 (a
    # probe read a loopback service's answer through the delivery log).
    "http://127\u30020\u30020\u30021:9/x", "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/x",
    "http://\u2460\u2461\u2466.\u24ea.\u24ea.\u2460/x", "http://169\u3002254\u3002169\u3002254/x",
    "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/x",
])
async def test_create__private_addresses_refused_by_default(client, admin, url):
    response, body = await register(client, admin, url)
    assert response.status == 422, body
    assert "public addresses only" in body["error"]["details"][0]


async def test_patch_and_delete(hook_client, admin, receiver):
    _, created = await register(hook_client, admin, receiver.url)
    path = f"{ENDPOINTS}/{created['id']}"
    response = await hook_client.patch(path, headers=admin.headers, json={"webhook_endpoint": {
        "event_types": ["rfp.approved", "member.created"], "enabled": False}})
    body = await response.json()
    assert response.status == 200
    assert body["event_types"] == ["member.created", "rfp.approved"] and body["enabled"] is False
    assert body["url"] == receiver.url
    assert (await hook_client.delete(path, headers=admin.headers)).status == 204
    assert (await hook_client.get(path, headers=admin.headers)).status == 404


async def test_delivery__standard_webhooks_headers_and_signature_verify(hook_client, admin, receiver):
    _, endpoint = await register(hook_client, admin, receiver.url)
    entry = await add_entry(hook_client, admin)
    [got] = await receiver.wait_for(1)
    # The documented procedure (docs/webhooks.md) and the reference library both accept it.
    assert verify(endpoint["secret"], got.headers, got.body)
    assert Webhook(endpoint["secret"]).verify(got.body, got.headers) == got.event
    assert got.headers["webhook-id"].startswith("msg_")
    assert got.event["type"] == "knowledge_base_item.created"
    assert got.event["timestamp"].endswith("Z")
    assert got.event["data"] == entry  # the shape the API returns
    # A tampered body or another secret does not verify.
    assert not verify(endpoint["secret"], got.headers, got.body.replace(b"MFA", b"SSO"))
    _, other = await register(hook_client, admin, receiver.url)
    assert not verify(other["secret"], got.headers, got.body)


async def test_delivery__only_wanted_types_and_enabled_endpoints(hook_client, admin, receiver):
    await register(hook_client, admin, receiver.url, ["member.created"])
    _, off = await register(hook_client, admin, receiver.url, enabled=False)
    await add_entry(hook_client, admin)
    await asyncio.sleep(0.5)
    assert receiver.received == []
    log = await (await hook_client.get(f"{ENDPOINTS}/{off['id']}/deliveries",
                                       headers=admin.headers)).json()
    assert log["deliveries"] == []


async def test_delivery__receiver_down_then_up_gets_each_event_once_in_order(
    hook_client, admin, receiver
):
    await register(hook_client, admin, receiver.url, ["knowledge_base_item.created",
                                                      "knowledge_base_item.deleted"])
    receiver.fail_with = 503
    entries = [await add_entry(hook_client, admin, f"Answer {n}") for n in range(3)]
    for entry in entries:
        response = await hook_client.delete(f"/api/v1/knowledge_base_items/{entry['id']}",
                                            headers=admin.headers)
        assert response.status == 204
    await asyncio.sleep(1.0)  # several failed attempts
    assert receiver.received == []
    receiver.fail_with = None
    got = await receiver.wait_for(6)
    await asyncio.sleep(0.5)
    assert len(receiver.received) == 6
    assert len({r.headers["webhook-id"] for r in got}) == 6  # each once
    for entry in entries:  # per record: created before deleted
        types = [r.event["type"] for r in got if r.event["data"]["id"] == entry["id"]]
        assert types == ["knowledge_base_item.created", "knowledge_base_item.deleted"]


async def test_delivery__log_shows_failures_and_manual_retry_redelivers(
    aiohttp_client, config, admin, receiver
):
    # Retries for 1 s: at 0.3 s a first attempt slower than 0.2 s (a loaded machine) used up the
    # window alone, and the delivery failed after one attempt.
    app = create_app(with_config(config, webhooks=fast_webhooks(retry_for_seconds=1.0)))
    client = await aiohttp_client(app)
    _, endpoint = await register(client, admin, receiver.url)
    receiver.fail_with = 500
    await add_entry(client, admin)
    path = f"{ENDPOINTS}/{endpoint['id']}"
    async def read():
        return await (await client.get(path, headers=admin.headers)).json()

    disabled = await poll(read, lambda e: not e["enabled"])
    assert "failed" in disabled["disabled_reason"] and "HTTP 500" in disabled["disabled_reason"]
    log = await (await client.get(f"{path}/deliveries", headers=admin.headers)).json()
    [delivery] = log["deliveries"]
    assert delivery["state"] == "failed" and delivery["attempts"] >= 2
    assert delivery["last_status"] == 500 and delivery["last_response"] == "not now"

    receiver.fail_with = None
    response = await client.post(f"{path}/deliveries/{delivery['id']}/retry", headers=admin.headers)
    assert response.status == 202
    await asyncio.sleep(0.3)
    assert receiver.received == []  # the endpoint is still disabled: nothing goes out
    response = await client.patch(path, headers=admin.headers,
                                  json={"webhook_endpoint": {"enabled": True}})
    assert (await response.json())["disabled_reason"] is None
    await receiver.wait_for(1)
    # The receiver keeps the request before it answers, so the deliverer may not have recorded
    # the answer yet.
    async def deliveries():
        return await (await client.get(f"{path}/deliveries", headers=admin.headers)).json()

    log = await poll(deliveries, lambda log: log["deliveries"][0]["state"] != "pending")
    assert log["deliveries"][0]["state"] == "delivered"
    again = await client.post(f"{path}/deliveries/999999/retry", headers=admin.headers)
    assert again.status == 404
    bad = await client.post(f"{path}/deliveries/abc/retry", headers=admin.headers)
    assert bad.status == 400


async def test_delivery__redirect_not_followed_and_body_read_up_to_limit(
    aiohttp_client, config, admin, receiver
):
    app = create_app(with_config(config, webhooks=fast_webhooks(max_response_bytes=10)))
    client = await aiohttp_client(app)
    _, endpoint = await register(client, admin, receiver.url)
    receiver.extra["pad"] = 100_000
    await add_entry(client, admin)
    await receiver.wait_for(1)
    path = f"{ENDPOINTS}/{endpoint['id']}/deliveries"
    async def read():
        return await (await client.get(path, headers=admin.headers)).json()

    log = await poll(read, lambda log: log["deliveries"][0]["state"] == "delivered")
    assert log["deliveries"][0]["last_response"] == "ok xxxxxxx"  # 10 bytes kept

    receiver.extra = {"redirect": "http://169.254.169.254/latest/meta-data"}
    await add_entry(client, admin, "second")
    log = await poll(read, lambda log: log["deliveries"][0]["last_status"] is not None)
    latest = log["deliveries"][0]
    assert latest["state"] == "pending" and latest["last_status"] == 302
    assert "not followed" in latest["last_error"]


async def test_delivery__a_cookie_a_receiver_sets_goes_to_no_delivery(
    hook_client, admin, make_account, receiver
):
    """The deliverer's HTTP session kept aiohttp's default cookie jar, shared by every delivery of
    every account: a cookie one account's receiver set went with the next account's deliveries to
    the same host (a receiving service's tenants each see their requests' headers), and one
    account's receiver could set the cookies another's deliveries carried."""
    other = await make_account("Other")
    url = f"http://localhost:{receiver.port}/hooks"  # a host name: a jar keeps no IP address's
    await register(hook_client, admin, url)
    await register(hook_client, other, url)
    receiver.extra = {"cookie": ("session", "of-the-first-account")}
    await add_entry(hook_client, admin)
    await receiver.wait_for(1)
    await add_entry(hook_client, other)
    await add_entry(hook_client, admin, "again")
    got = await receiver.wait_for(3)
    assert [r.headers.get("Cookie") for r in got] == [None, None, None]


async def test_delivery__a_nul_in_the_answer_is_recorded_not_sent_again_forever(
    hook_client, admin, receiver
):
    """PostgreSQL text cannot hold NUL: a receiver answering with one made recording the attempt
    fail, so the delivery stayed pending and was sent again at every lease (each time an ERROR
    with a traceback), never marked delivered nor given up."""
    _, endpoint = await register(hook_client, admin, receiver.url)
    receiver.extra = {"body": b"ok\x00\xff"}
    await add_entry(hook_client, admin)
    path = f"{ENDPOINTS}/{endpoint['id']}/deliveries"

    async def read():
        return await (await hook_client.get(path, headers=admin.headers)).json()

    log = await poll(read, lambda log: log["deliveries"][0]["state"] == "delivered")
    assert log["deliveries"][0]["last_response"] == "ok\ufffd\ufffd"
    receiver.extra = {"body": b"busy\x00", "status": 503}
    await add_entry(hook_client, admin, "second")
    log = await poll(read, lambda log: log["deliveries"][0]["last_status"] == 503)
    assert log["deliveries"][0]["state"] == "pending"
    assert log["deliveries"][0]["last_response"] == "busy\ufffd"


@pytest.mark.parametrize(("address", "public"), [
    ("8.8.8.8", True), ("2606:4700:4700::1111", True), ("127.0.0.1", False), ("::1", False),
    ("10.1.2.3", False), ("172.16.0.1", False), ("192.168.0.1", False), ("169.254.169.254", False),
    ("fe80::1", False), ("fc00::1", False), ("100.64.0.1", False), ("0.0.0.0", False),
    ("::ffff:10.0.0.1", False), ("224.0.0.1", False),
])
def test_address_is_public(address, public):
    from service.domain.webhooks import address_is_public

    assert address_is_public(address) is public


async def test_delivery__host_resolving_to_loopback_refused_at_connect(client, admin, conn, receiver):
    """DNS rebinding: a name that passed registration but now resolves to loopback (here
    `localhost`, stored directly) is refused by the resolver the deliverer connects through, and
    an IP literal is refused before any connection; the receiver on loopback gets nothing."""
    # (0x7f000001 is 127.0.0.1 to the system resolver, though not an IP literal to a URL parser.)
    urls = [f"http://localhost:{receiver.port}/hooks", receiver.url,
            f"http://0x7f000001:{receiver.port}/hooks",
            f"http://127\u30020\u30020\u30021:{receiver.port}/hooks"]  # ideographic full stops
    for n, url in enumerate(urls):
        await conn.execute(
            "INSERT INTO webhook_endpoints (id, account_id, url, event_types, secret)"
            " VALUES ($1, $2, $3, '{knowledge_base_item.created}', 'whsec_AAAA')",
            f"whep_rebind{n}", admin.account_id, url)
    await add_entry(client, admin)

    async def errors():
        return await conn.fetch("SELECT last_error FROM webhook_deliveries WHERE last_error IS NOT"
                                " NULL ORDER BY endpoint_id")

    rows = await poll(errors, lambda rows: len(rows) == 4)
    assert rows[0]["last_error"] == "refused: localhost resolves to no public address"
    assert rows[1]["last_error"] == "refused: 127.0.0.1 is not a public address"
    # The internal addresses a name resolves to are the service's network's, not the tenant's to
    # learn: the delivery log (shown to the account's admins) does not list them.
    assert rows[2]["last_error"] == "refused: 0x7f000001 resolves to no public address"
    assert rows[3]["last_error"] == "refused: 127.0.0.1 is not a public address"
    assert receiver.received == []


class _Dns(AbstractResolver):
    """The system resolver's stand-in: `db.internal` is a name of the service's own network (a
    private address), and no other name exists."""

    async def resolve(self, host, port=0, family=socket.AF_INET):
        if host != "db.internal":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [{"hostname": host, "host": "10.0.0.5", "port": port, "family": socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self):
        pass


async def register_hosts(client, admin, hosts):
    """An endpoint at http://{host}/hooks for each host (all saved: 201): their bodies by host."""
    created = {}
    for host in hosts:
        response, body = await register(client, admin, f"http://{host}/hooks")
        assert response.status == 201, body
        created[host] = body
    return created


async def first_failure(client, admin, endpoint_id):
    """The endpoint's delivery log entry, once its first attempt has failed."""
    async def read():
        path = f"{ENDPOINTS}/{endpoint_id}/deliveries"
        return (await (await client.get(path, headers=admin.headers)).json())["deliveries"]

    [entry] = await poll(read, lambda log: log and log[0]["last_error"] is not None)
    return entry


async def test_delivery__an_internal_name_and_an_unknown_one_look_alike_to_the_admin(
    aiohttp_client, config, admin, monkeypatch, caplog,
):
    """An admin naming hosts cannot tell which internal names exist: one that resolves only to
    private addresses and one that does not resolve are saved alike, and their delivery log
    entries differ by the host alone, the attempt's duration included (next_attempt_at is the
    retry delay after the claim); the service's log says which it was. The unknown one's entry
    was aiohttp's DNS error ("Cannot connect to host …: Name or service not known")."""
    monkeypatch.setattr(webhooks, "DefaultResolver", _Dns)
    client = await aiohttp_client(create_app(with_config(config, webhooks=fast_webhooks(
        allow_private_addresses=False, retry_base_seconds=60, retry_max_interval_seconds=60))))
    created = await register_hosts(client, admin, ("db.internal", "nowhere.internal"))
    assert {tuple(sorted(body)) for body in created.values()} == {tuple(sorted(created["db.internal"]))}
    with caplog.at_level(logging.WARNING, logger="service.domain.webhooks"):
        await add_entry(client, admin)
        entries = {host: await first_failure(client, admin, endpoint["id"])
                   for host, endpoint in created.items()}

    def seen(entry, host):
        shown = {k: entry[k] for k in ("state", "attempts", "last_status", "last_error",
                                       "last_response")}
        shown["last_error"] = shown["last_error"].replace(host, "HOST")
        started, retry = (datetime.fromisoformat(entry[k].replace("Z", "+00:00"))
                          for k in ("last_attempt_at", "next_attempt_at"))
        return shown, (retry - started).total_seconds()

    assert seen(entries["db.internal"], "db.internal") == seen(entries["nowhere.internal"],
                                                               "nowhere.internal")
    assert entries["db.internal"]["last_error"] == "refused: db.internal resolves to no public address"
    assert seen(entries["db.internal"], "db.internal")[1] == 60.0
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "db.internal resolves only to non-public addresses" in logged
    assert "nowhere.internal does not resolve" in logged
    assert "10.0.0.5" not in logged  # the addresses only at DEBUG, as before


class _SlowDns(_Dns):
    """As _Dns, but `slow.internal` takes a second to be found missing (a name the resolver
    looks up under search domains, say)."""

    async def resolve(self, host, port=0, family=socket.AF_INET):
        if host == "slow.internal":
            await asyncio.sleep(1.0)
        return await super().resolve(host, port, family)


async def test_delivery__a_slow_look_up_does_not_decide_when_a_refused_delivery_gives_up(
    aiohttp_client, config, admin, monkeypatch,
):
    """Whether a refused attempt was the last (the delivery failed, its endpoint disabled) is
    judged from its claim too, as its next attempt is: a look-up that took a second ended the
    delivery where an instant one left it pending, so the delivery log showed which was slow."""
    monkeypatch.setattr(webhooks, "DefaultResolver", _SlowDns)
    client = await aiohttp_client(create_app(with_config(config, webhooks=fast_webhooks(
        allow_private_addresses=False, retry_base_seconds=60, retry_max_interval_seconds=60,
        retry_for_seconds=60.5))))
    created = await register_hosts(client, admin, ("nowhere.internal", "slow.internal"))
    await add_entry(client, admin)
    states = {host: (await first_failure(client, admin, endpoint["id"]))["state"]
              for host, endpoint in created.items()}
    assert states == {"nowhere.internal": "pending", "slow.internal": "pending"}


async def test_delivery__knowledge_import_sends_created_then_updated(hook_client, admin, receiver):
    await register(hook_client, admin, receiver.url,
                   ["knowledge_base_item.created", "knowledge_base_item.updated"])
    for answer in ("Yes MFA.", "Yes MFA everywhere."):
        response = await hook_client.post(
            "/api/v1/knowledge_base_items/import", data=f"id,answer\nmfa-1,{answer}\n".encode(),
            headers={**admin.headers, "Content-Type": "text/csv"})
        assert response.status == 200
    got = await receiver.wait_for(2)
    assert [r.event["type"] for r in got] == ["knowledge_base_item.created",
                                             "knowledge_base_item.updated"]
    assert got[1].event["data"]["answer"] == "Yes MFA everywhere."
    assert got[0].event["data"]["id"] == got[1].event["data"]["id"]


async def test_delivery__question_completed_sent_at_once_not_at_the_next_poll(
    aiohttp_client, config, admin, receiver
):
    # A poll interval far longer than the wait below: only the completion's wake-up sends it.
    app = create_app(with_config(config, webhooks=fast_webhooks(poll_interval_seconds=60)))
    client = await aiohttp_client(app)
    await register(client, admin, receiver.url, ["question.completed"])
    await asyncio.sleep(0.2)  # the deliverer's first (empty) round is over; it sleeps now
    response = await client.post("/api/v1/questions", headers=admin.headers,
                                 json={"question": {"question": "Do you enforce MFA?"}})
    assert response.status == 202
    question = await response.json()
    [got] = await receiver.wait_for(1, within_seconds=20)
    assert got.event["type"] == "question.completed"
    assert got.event["data"]["id"] == question["id"] and got.event["data"]["state"] == "complete"


async def test_prune__old_finished_events_go_with_their_deliveries(
    hook_client, admin, receiver, conn, database_url
):
    _, first = await register(hook_client, admin, receiver.url)
    _, second = await register(hook_client, admin, receiver.url + "?second")
    for answer in ("One.", "Two.", "Three."):
        await add_entry(hook_client, admin, answer)
    await receiver.wait_for(6)
    await poll(lambda: conn.fetchval("SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'"),
               lambda delivered: delivered == 6)
    old = [r["id"] for r in await conn.fetch("SELECT id FROM webhook_events ORDER BY created_at")]
    await conn.execute("UPDATE webhook_events SET created_at = now() - interval '31 days'")
    # The first event still pending to one endpoint (disabled, say): it keeps its event and the
    # other endpoint's log entry, whatever its age. The second: failed to one, delivered to the
    # other; the third delivered to both: both go.
    await conn.execute("UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = now()"
                       " + interval '1 day' WHERE event_id = $1 AND endpoint_id = $2",
                       old[0], second["id"])
    await conn.execute("UPDATE webhook_deliveries SET state = 'failed' WHERE event_id = $1"
                       " AND endpoint_id = $2", old[1], first["id"])
    await add_entry(hook_client, admin, "Four.")  # a recent event
    await receiver.wait_for(8)

    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2, **CONNECT)
    try:
        assert await housekeeping.prune_webhooks(pool, keep_days=0) == 0
        assert await conn.fetchval("SELECT count(*) FROM webhook_events") == 4
        # One row a statement: the loop goes on until no statement deletes a whole batch.
        assert await housekeeping.prune_webhooks(pool, keep_days=30, batch=1) == 2
        assert await housekeeping.prune_webhooks(pool, keep_days=30) == 0
    finally:
        await pool.close()
    left = await conn.fetch("SELECT e.id, count(d.id) AS deliveries FROM webhook_events e"
                            " LEFT JOIN webhook_deliveries d ON d.event_id = e.id"
                            " GROUP BY e.id ORDER BY min(e.created_at)")
    assert (left[0]["id"], left[0]["deliveries"]) == (old[0], 2)
    assert len(left) == 2 and left[1]["id"] not in old and left[1]["deliveries"] == 2
    log = await (await hook_client.get(f"{ENDPOINTS}/{first['id']}/deliveries",
                                       headers=admin.headers)).json()
    assert sorted(d["event_id"] for d in log["deliveries"]) == sorted([old[0], left[1]["id"]])


async def _old_finished_event(client, admin, receiver, conn):
    """One event 31 days old, delivered to two endpoints: its event id and its deliveries' ids
    by endpoint (first, second)."""
    _, first = await register(client, admin, receiver.url)
    _, second = await register(client, admin, receiver.url + "?second")
    await add_entry(client, admin, "One.")
    await receiver.wait_for(2)
    await poll(lambda: conn.fetchval("SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'"),
               lambda delivered: delivered == 2)
    event = await conn.fetchval("SELECT id FROM webhook_events")
    await conn.execute("UPDATE webhook_events SET created_at = now() - interval '31 days'")
    ids = [await conn.fetchval("SELECT id FROM webhook_deliveries WHERE endpoint_id = $1", e["id"])
           for e in (first, second)]
    return event, first, second, ids


async def test_prune__an_event_being_retried_is_skipped_with_every_log_entry(
    hook_client, admin, receiver, conn, database_url
):
    # A retry holds its delivery's event until it commits (here a transaction holds it the way
    # retry_webhook_delivery does). A prune meanwhile leaves the event and both log entries:
    # deleting them would lose the sibling's entry while the retried delivery turns pending.
    event, *_ = await _old_finished_event(hook_client, admin, receiver, conn)
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2, **CONNECT)
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1 FROM webhook_events WHERE id = $1 FOR KEY SHARE", event)
            assert await housekeeping.prune_webhooks(pool, keep_days=30) == 0
            assert await conn.fetchval("SELECT count(*) FROM webhook_deliveries") == 2
        assert await housekeeping.prune_webhooks(pool, keep_days=30) == 1  # once let go
    finally:
        await pool.close()
    assert await conn.fetchval("SELECT count(*) FROM webhook_deliveries") == 0


async def test_retry__waits_for_a_prune_holding_its_event_then_finds_the_delivery_gone(
    hook_client, admin, receiver, conn
):
    # A prune locks the events it deletes (lock_old_webhook_events). A retry sent meanwhile waits
    # for it and then answers 404, instead of turning the delivery pending beside a sibling whose
    # log entry the prune is deleting.
    event, first, _, [delivery, _] = await _old_finished_event(hook_client, admin, receiver, conn)
    path = f"{ENDPOINTS}/{first['id']}/deliveries/{delivery}/retry"
    async with conn.transaction():
        await conn.execute("SELECT 1 FROM webhook_events WHERE id = $1 FOR UPDATE", event)
        retry = asyncio.ensure_future(hook_client.post(path, headers=admin.headers))
        done, _ = await asyncio.wait([retry], timeout=0.5)
        assert not done, "the retry did not wait for the prune's lock on its event"
        await conn.execute("DELETE FROM webhook_events WHERE id = $1", event)
    response = await retry
    assert response.status == 404
    assert await conn.fetchval("SELECT count(*) FROM webhook_deliveries") == 0
