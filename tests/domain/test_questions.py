from __future__ import annotations

import asyncio
import json

import asyncpg
import attrs
from conftest import CONNECT
from helpers_questions import add_entry, ask, balance_and_ledger, question_held, wait_complete

from service.web.app import create_app

MFA_Q = "Do you enforce multi-factor authentication for all employees?"
MFA_A = "Yes. All employees must use multi-factor authentication with hardware keys for every system."


async def test_ask__accepted_in_state_new_with_location_then_completes(client, conn, admin):
    await add_entry(conn, admin.account_id, MFA_Q, MFA_A, title="MFA", external_id="SEC-1")
    response = await ask(client, admin.headers, MFA_Q)
    assert response.status == 202
    body = await response.json()
    assert body["state"] == "new"
    assert body["id"].startswith("q_")
    assert response.headers["Location"] == f"/api/v1/questions/{body['id']}"
    assert body["answer"] is None and body["answer_detail_level"] == "normal"
    assert body["user"] == {"id": admin.user_id, "name": admin.email.split("@")[0], "email": admin.email}
    assert body["created_at"].endswith("Z")
    done = await wait_complete(client, body["id"], admin.headers)
    assert done["answer"] == MFA_A
    assert done["verbatim_answer"] is True
    assert done["sufficient_context"] is True
    assert 0 < done["confidence"] <= 1
    assert "MFA" in done["confidence_rationale"]
    assert [ref["external_id"] for ref in done["references"]] == ["SEC-1"]
    # `version`: the entry version the answer used (issue 20).
    assert set(done["references"][0]) == {"id", "external_id", "title", "score", "version"}


async def test_ask__options_inside_or_beside_the_question(client, admin):
    inside = await ask(client, admin.headers, "x?", answer_detail_level=0, custom_prompt="be brief")
    beside = await client.post(
        "/api/v1/questions", headers=admin.headers,
        json={"question": {"question": "x?"}, "answer_detail_level": 2, "custom_prompt": "formal"},
    )
    both_same = await client.post(
        "/api/v1/questions", headers=admin.headers,
        json={"question": {"question": "x?", "answer_detail_level": 2}, "answer_detail_level": 2},
    )
    assert [r.status for r in (inside, beside, both_same)] == [202, 202, 202]
    assert (await inside.json())["answer_detail_level"] == "low"
    assert (await inside.json())["custom_prompt"] == "be brief"
    assert (await beside.json())["answer_detail_level"] == "high"
    assert (await beside.json())["custom_prompt"] == "formal"
    assert (await both_same.json())["answer_detail_level"] == "high"


async def test_ask__different_values_inside_and_beside_are_rejected(client, admin):
    response = await client.post(
        "/api/v1/questions", headers=admin.headers,
        json={"question": {"question": "x?", "answer_detail_level": 0}, "answer_detail_level": 2},
    )
    assert response.status == 422
    assert (await response.json())["error"]["details"] == [
        "answer_detail_level: given inside and beside the question object with different values"
    ]


async def test_ask__every_validation_failure_is_listed(client, conn, admin):
    response = await client.post(
        "/api/v1/questions", headers=admin.headers,
        json={"question": {"question": "   ", "answer_detail_level": 5, "custom_prompt": 3}},
    )
    assert response.status == 422
    error = (await response.json())["error"]
    assert error["code"] == "validation_failed"
    assert len(error["details"]) == 3, error["details"]
    assert any(d.startswith("question.question: must not be blank") for d in error["details"])
    too_long = await ask(client, admin.headers, "a" * 10_001)
    assert too_long.status == 422
    assert (await too_long.json())["error"]["details"] == [
        "question.question: must be at most 10000 characters"
    ]
    wrong_type = await client.post("/api/v1/questions", headers=admin.headers, json={"question": "hi"})
    assert wrong_type.status == 422
    missing = await client.post("/api/v1/questions", headers=admin.headers, json={"question": {}})
    assert (await missing.json())["error"]["details"] == ["question.question: is required"]
    # nothing was stored or charged
    assert await conn.fetchval("SELECT count(*) FROM questions") == 0
    assert (await balance_and_ledger(conn, admin.account_id))[0] == 10


async def test_ask__charges_one_credit_with_a_ledger_row(client, conn, admin):
    body = await (await ask(client, admin.headers, "Anything?")).json()
    rows = await conn.fetch(
        "SELECT amount, reason, subject_id FROM credit_ledger WHERE account_id = $1 AND reason <> 'grant'",
        admin.account_id,
    )
    assert [tuple(r) for r in rows] == [(-1, "question", body["id"])]
    assert await balance_and_ledger(conn, admin.account_id) == (9, 9)


async def test_ask__out_of_credits_is_usage_blocked_and_stores_nothing(client, conn, make_account):
    poor = await make_account(credits=0)
    response = await ask(client, poor.headers, "Anything?")
    assert response.status == 403
    assert (await response.json())["error"]["code"] == "usage_blocked"
    assert await conn.fetchval("SELECT count(*) FROM questions") == 0
    assert await balance_and_ledger(conn, poor.account_id) == (0, 0)
    # Its audit event, written before the debit in the same transaction, went with it.
    assert await conn.fetchval("SELECT count(*) FROM audit_events WHERE action = 'question.asked'") == 0


async def test_ask__is_audited_with_the_question(client, conn, admin):
    body = await (await ask(client, admin.headers, "Do you encrypt backups?")).json()
    rows = await conn.fetch(
        "SELECT record_id, actor_id, after FROM audit_events WHERE action = 'question.asked'"
    )
    assert [(r["record_id"], r["actor_id"]) for r in rows] == [(body["id"], admin.member_id)]


async def test_ask__inactive_subscription_is_usage_blocked(client, conn, admin):
    await conn.execute("UPDATE accounts SET subscription_status = 'inactive' WHERE id = $1", admin.account_id)
    response = await ask(client, admin.headers, "Anything?")
    assert response.status == 403
    assert (await response.json())["error"]["code"] == "usage_blocked"
    assert await balance_and_ledger(conn, admin.account_id) == (10, 10)


async def test_ask__viewer_may_ask_but_not_with_a_read_only_token(client, admin, make_member):
    viewer = await make_member(admin.account_id, role="viewer")
    assert (await ask(client, viewer.headers, "Anything?")).status == 202
    read_only = await make_member(admin.account_id, role="viewer", scopes="read")
    response = await ask(client, read_only.headers, "Anything?")
    assert response.status == 403
    assert (await response.json())["error"]["code"] == "insufficient_scope"


async def test_get_question__another_accounts_question_is_not_found(client, admin, make_account):
    body = await (await ask(client, admin.headers, "Anything?")).json()
    other = await make_account()
    response = await client.get(f"/api/v1/questions/{body['id']}", headers=other.headers)
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "not_found"
    events = await client.get(f"/api/v1/questions/{body['id']}/events", headers=other.headers)
    assert events.status == 404


async def test_ask__rate_limited_after_ten_per_minute_with_headers(client, admin):
    statuses = []
    for _ in range(11):
        response = await ask(client, admin.headers, "Anything?")
        statuses.append(response.status)
    assert statuses == [202] * 10 + [429]
    assert response.headers["RateLimit-Limit"] == "10"
    assert response.headers["RateLimit-Remaining"] == "0"
    assert int(response.headers["Retry-After"]) >= 1
    assert int(response.headers["RateLimit-Reset"]) >= 1
    assert (await response.json())["error"]["code"] == "rate_limited"


async def test_idempotency__retry_returns_the_first_question_and_charges_once(client, conn, admin):
    headers = {**admin.headers, "Idempotency-Key": "order-42"}
    first = await ask(client, headers, "Anything?")
    first_body = await first.json()
    await wait_complete(client, first_body["id"], admin.headers)
    again = await ask(client, headers, "Anything?")
    assert again.status == 202
    assert await again.json() == first_body
    assert again.headers["Location"] == first.headers["Location"]
    assert await conn.fetchval("SELECT count(*) FROM questions") == 1
    assert await balance_and_ledger(conn, admin.account_id) == (9, 9)


async def test_idempotency__same_key_different_body_is_rejected(client, conn, admin):
    headers = {**admin.headers, "Idempotency-Key": "order-43"}
    assert (await ask(client, headers, "Anything?")).status == 202
    response = await ask(client, headers, "Something else?")
    assert response.status == 422
    assert "Idempotency-Key" in (await response.json())["error"]["details"][0]
    assert await balance_and_ledger(conn, admin.account_id) == (9, 9)


async def test_idempotency__concurrent_retries_store_one_question(client, conn, admin):
    headers = {**admin.headers, "Idempotency-Key": "burst"}
    responses = await asyncio.gather(*(ask(client, headers, "Anything?") for _ in range(5)))
    bodies = [await r.json() for r in responses]
    assert {r.status for r in responses} == {202}
    assert len({b["id"] for b in bodies}) == 1
    assert await balance_and_ledger(conn, admin.account_id) == (9, 9)


async def test_idempotency__keys_are_per_member(client, conn, admin, make_member):
    other = await make_member(admin.account_id)
    a = await ask(client, {**admin.headers, "Idempotency-Key": "k"}, "Anything?")
    b = await ask(client, {**other.headers, "Idempotency-Key": "k"}, "Anything?")
    assert (await a.json())["id"] != (await b.json())["id"]


async def read_events(response) -> list[tuple[str, dict]]:
    return await read_events_text((await response.read()).decode())


async def read_events_text(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith(":")]
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        events.append((fields["event"], json.loads(fields["data"])))
    return events


async def _stored_question(conn, admin, text: str) -> str:
    """A question stored as an ask stores it, unleased: the next claim of a pipeline takes it."""
    from service.domain.questions import create_question

    async with conn.transaction():
        return await create_question(conn, account_id=admin.account_id, user_id=admin.user_id,
                                     text=text)


def _quick_claims(config, step_delay_seconds: float):
    """Steps slowed down, so each state is its own commit; claims every 0.05 s."""
    return attrs.evolve(config, questions=attrs.evolve(
        config.questions, step_delay_seconds=step_delay_seconds, poll_seconds=0.05))


async def test_events__one_event_per_state_then_close(
    aiohttp_client, config, conn, admin, database_url
):
    await add_entry(conn, admin.account_id, MFA_Q, MFA_A)
    question_id = await _stored_question(conn, admin, MFA_Q)
    async with question_held(database_url, question_id):
        client = await aiohttp_client(create_app(_quick_claims(config, 0.05)))
        response = await client.get(
            f"/api/v1/questions/{question_id}/events",
            headers={**admin.headers, "X-Request-Id": "sse-1"},
        )
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        assert response.headers["X-Request-Id"] == "sse-1"
        first = await response.content.readuntil(b"\n\n")
    events = await read_events_text(first.decode() + (await response.read()).decode())
    assert [name for name, _ in events] == [
        "new", "ready_to_answer", "references_fetched", "answered", "confidence_calculated", "complete",
    ]
    assert [data["state"] for _, data in events] == [name for name, _ in events]
    assert events[-1][1]["answer"] == MFA_A


async def test_events__after_completion_sends_the_current_state_and_closes(client, admin):
    body = await (await ask(client, admin.headers, "Anything?")).json()
    done = await wait_complete(client, body["id"], admin.headers)
    response = await client.get(f"/api/v1/questions/{body['id']}/events", headers=admin.headers)
    events = await read_events(response)
    assert events == [("complete", done)]


def event_ids(text: str) -> list[tuple[str, str]]:
    """(id, event) of every event in an SSE body."""
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if fields:
            out.append((fields["id"], fields["event"]))
    return out


ALL_EVENTS = [("1", "new"), ("2", "ready_to_answer"), ("3", "references_fetched"),
              ("4", "answered"), ("5", "confidence_calculated"), ("6", "complete")]


async def test_events__last_event_id_resumes_after_that_event(client, conn, admin):
    await add_entry(conn, admin.account_id, MFA_Q, MFA_A)
    body = await (await ask(client, admin.headers, MFA_Q)).json()
    done = await wait_complete(client, body["id"], admin.headers)
    path = f"/api/v1/questions/{body['id']}/events"
    for seen in ("3", "references_fetched", " 3 "):
        response = await client.get(path, headers={**admin.headers, "Last-Event-ID": seen})
        assert response.status == 200
        text = (await response.read()).decode()
        assert event_ids(text) == ALL_EVENTS[3:]
        events = await read_events_text(text)
        assert events[0][1] == {"id": body["id"], "state": "answered"}  # passed while away
        assert events[-1] == ("complete", done)
    # unknown ids are ignored: the stream starts from the current state
    for junk in ("0", "7", "abc", "", "\u00b2", "9" * 5000, "03"):  # "²" and 5,000 digits: not int()
        response = await client.get(path, headers={**admin.headers, "Last-Event-ID": junk})
        assert event_ids((await response.read()).decode()) == [("6", "complete")], junk


async def test_events__last_event_id_of_complete_is_204(client, admin):
    body = await (await ask(client, admin.headers, "Anything?")).json()
    await wait_complete(client, body["id"], admin.headers)
    for seen in ("6", "complete"):
        response = await client.get(
            f"/api/v1/questions/{body['id']}/events", headers={**admin.headers, "Last-Event-ID": seen}
        )
        assert response.status == 204
        assert await response.read() == b""
    other = await client.get(  # still 404 for an unknown question
        "/api/v1/questions/q_nope/events", headers={**admin.headers, "Last-Event-ID": "6"}
    )
    assert other.status == 404


async def test_events__reconnecting_mid_pipeline_misses_nothing_and_repeats_nothing(
    aiohttp_client, config, conn, admin, database_url
):
    await add_entry(conn, admin.account_id, MFA_Q, MFA_A)
    question_id = await _stored_question(conn, admin, MFA_Q)
    path = f"/api/v1/questions/{question_id}/events"
    async with question_held(database_url, question_id):
        client = await aiohttp_client(create_app(_quick_claims(config, 0.1)))
        first = await client.get(path, headers=admin.headers)
        seen = event_ids((await first.content.readuntil(b"\n\n")).decode())
        first.close()  # the connection drops after the first event
    assert seen == [("1", "new")]
    await asyncio.sleep(0.25)  # a state or two pass meanwhile
    again = await client.get(path, headers={**admin.headers, "Last-Event-ID": seen[-1][0]})
    rest = event_ids((await again.read()).decode())
    assert seen + rest == ALL_EVENTS


async def test_events__a_stream_in_another_process_follows_the_question(
    aiohttp_client, config, conn, admin, database_url
):
    # Two apps on one database: the asking one answers (the question is handed to its pipeline);
    # the other one's stream learns of each state from the database's announcements. The question
    # is held at `new` until the stream is open (with slowed steps alone, a loaded machine once
    # opened it after the first step, and it missed that event).
    slow = attrs.evolve(config, questions=attrs.evolve(config.questions, step_delay_seconds=0.25))
    asking = await aiohttp_client(create_app(slow))
    watching = await aiohttp_client(create_app(slow))
    await add_entry(conn, admin.account_id, MFA_Q, MFA_A)
    locker = await asyncpg.connect(database_url, **CONNECT)
    try:
        body = await (await ask(asking, admin.headers, MFA_Q)).json()
        async with question_held(locker, body["id"]):
            response = await watching.get(f"/api/v1/questions/{body['id']}/events", headers=admin.headers)
    finally:
        await locker.close()
    text = (await response.read()).decode()
    assert event_ids(text) == ALL_EVENTS
    events = await read_events_text(text)
    assert events[-1][1]["answer"] == MFA_A
    assert events[-1][1] == await (await watching.get(
        f"/api/v1/questions/{body['id']}", headers=admin.headers)).json()
    owner = await conn.fetchval("SELECT lease_owner FROM questions WHERE id = $1", body["id"])
    assert owner is None  # released on completion


async def test_events__a_question_its_pipeline_lets_go_of_is_read_again(
    aiohttp_client, config, conn, admin, database_url
):
    # The stream's process answers the question, so the stream trusts its pipeline over the
    # database's announcements; when that pipeline loses the question (here: someone else moves
    # it on), the stream must look in the database at once, not at its next periodic re-read.
    slow = attrs.evolve(config, questions=attrs.evolve(config.questions, step_delay_seconds=0.3))
    client = await aiohttp_client(create_app(slow))
    locker = await asyncpg.connect(database_url, **CONNECT)
    try:
        body = await (await ask(client, admin.headers, "Anything?")).json()
        async with question_held(locker, body["id"]):  # at `new` until the stream has said so
            response = await client.get(f"/api/v1/questions/{body['id']}/events", headers=admin.headers)
            first = event_ids((await response.content.readuntil(b"\n\n")).decode())
    finally:
        await locker.close()
    assert first == [("1", "new")]
    async with asyncio.timeout(5):
        while await conn.fetchval(  # noqa: ASYNC110 (polls the database)
            "SELECT state::text FROM questions WHERE id = $1", body["id"]
        ) == "new":
            await asyncio.sleep(0.01)
    await conn.execute(
        "UPDATE questions SET state = 'complete', answer = 'by hand', lease_owner = 'elsewhere',"
        " updated_at = now() WHERE id = $1", body["id"],
    )
    async with asyncio.timeout(4):  # periodic re-reads come only every 5 polls (10 s)
        text = (await response.read()).decode()
    events = await read_events_text(text)
    assert events[-1][0] == "complete" and events[-1][1]["answer"] == "by hand"


class _Places:
    """A pipeline's reservations as `questions.ask` sees them: one place, handed out once."""

    def __init__(self, free: int) -> None:
        self.free, self.held, self.released = free, [], []

    def reserve(self, question_id):
        if len(self.held) >= self.free:
            return None
        self.held.append(question_id)
        return "owner-1"

    def unreserve(self, question_id):
        self.released.append(question_id)


async def test_ask_domain__stores_leased_then_replays_the_first_response_and_refusals_release(
    conn, admin, make_account
):
    # Asking (charge, idempotency, lease) is one domain function; the view only parses and responds.
    from service.domain.errors import UsageBlocked, ValidationFailed
    from service.domain.questions import Ask, ask
    from service.domain.tokens import Principal

    who = Principal(member_id=admin.member_id, user_id=admin.user_id, account_id=admin.account_id,
                    role="admin", scopes=frozenset({"read", "write"}), name="A", email=admin.email)
    places = _Places(free=1)
    question = Ask(question="Do you encrypt backups?", detail_level=1, custom_prompt=None)
    first = await ask(conn, who, question, "k-1", cost=1, lease_seconds=30, reservations=places)
    assert first.stored is not None and first.lease_owner == "owner-1"
    assert first.row["id"] == first.stored["id"] == places.held[0]
    await conn.execute("UPDATE questions SET state = 'complete', answer = 'Yes.' WHERE id = $1",
                       first.row["id"])
    again = await ask(conn, who, question, "k-1", cost=1, lease_seconds=30, reservations=places)
    assert again.stored is None and again.row["id"] == first.row["id"]
    assert (again.row["state"], again.row["answer"]) == ("new", None)  # as first accepted
    assert await conn.fetchval("SELECT credits FROM accounts WHERE id = $1", admin.account_id) == 9
    try:
        await ask(conn, who, attrs.evolve(question, question="Other?"), "k-1", cost=1,
                  lease_seconds=30, reservations=places)
        raise AssertionError("a reused key for another question must be refused")
    except ValidationFailed:
        pass
    poor = await make_account(credits=0)
    broke = attrs.evolve(who, member_id=poor.member_id, user_id=poor.user_id, account_id=poor.account_id)
    places.free = 2
    try:
        await ask(conn, broke, question, None, cost=1, lease_seconds=30, reservations=places)
        raise AssertionError("out of credits must be refused")
    except UsageBlocked:
        pass
    assert places.released == [places.held[1]]  # the refused question's place is given back
