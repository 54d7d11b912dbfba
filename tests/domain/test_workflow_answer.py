"""Answering every item of an RFP through the question pipeline, then review and export."""

from __future__ import annotations

import asyncio
import csv
import io

from conftest import ROOT
from helpers_questions import add_entry, balance_and_ledger, wait_all_complete

from service.answering.engines.local import NOT_COVERED

QUESTIONNAIRE = (
    b"Section,Question\n"
    b"Encryption,Do you encrypt customer data at rest?\n"
    b"Encryption,Is data encrypted in transit with TLS?\n"
    b"Continuity,How often are backups tested?\n"
)


async def imported_rfp(client, actor, context="Bid for Acme; EU hosting only.") -> str:
    response = await client.post("/api/v1/rfps", json={"rfp": {"title": "Acme", "context": context}},
                                 headers=actor.headers)
    rfp_id = (await response.json())["id"]
    response = await client.post(f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=QUESTIONNAIRE,
                                 headers={**actor.headers, "Content-Type": "text/csv"})
    assert response.status == 201
    return rfp_id


async def knowledge(conn, account_id) -> None:
    await add_entry(conn, account_id, "Do you encrypt customer data at rest?",
                    "Yes. Customer data at rest is encrypted with AES-256.")
    await add_entry(conn, account_id, "Is data encrypted in transit?",
                    "Yes. All traffic uses TLS 1.2 or later.")


async def items_of(client, actor, rfp_id) -> list[dict]:
    response = await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", headers=actor.headers)
    return (await response.json())["rfp_items"]


async def answer(client, actor, rfp_id, **body):
    return await client.post(f"/api/v1/rfps/{rfp_id}/answer", json=body or None, headers=actor.headers)


async def test_answer__end_to_end_answered_reviewed_exported(client, conn, make_account):
    actor = await make_account(credits=10)
    await knowledge(conn, actor.account_id)
    rfp_id = await imported_rfp(client, actor)

    response = await answer(client, actor, rfp_id)
    body = await response.json()
    assert response.status == 202, body
    assert body["answering"]["started"] == 3
    assert body["answering"]["credits_charged"] == 3
    assert body["rfp"]["id"] == rfp_id
    await wait_all_complete(conn, 30)

    items = await items_of(client, actor, rfp_id)
    assert {i["state"] for i in items} <= {"auto_answered", "needs_input"}
    assert all(i["confidence"] is not None and i["question_id"] for i in items)
    assert "AES-256" in items[0]["answer"] and "TLS" in items[1]["answer"]
    # Nothing answers the third: its question says so, and the item has no answer to approve or
    # export (the question's "does not cover" sentence was approved and exported as if one).
    uncovered = await (await client.get(f"/api/v1/questions/{items[2]['question_id']}",
                                        headers=actor.headers)).json()
    assert uncovered["sufficient_context"] is False and uncovered["answer"] == NOT_COVERED
    assert (items[2]["answer"], items[2]["state"]) == (None, "needs_input")
    refused = await client.patch(f"/api/v1/rfps/{rfp_id}/rfp_items/{items[2]['id']}",
                                 json={"rfp_item": {"state": "approved"}}, headers=actor.headers)
    assert refused.status == 422
    # The RFP context reached the pipeline, and every question is linked to its item.
    linked = await conn.fetch("SELECT rfp_id, rfp_item_id, context FROM questions ORDER BY created_at")
    assert {(q["rfp_id"], q["context"]) for q in linked} == {(rfp_id, "Bid for Acme; EU hosting only.")}
    assert {q["rfp_item_id"] for q in linked} == {i["id"] for i in items}
    assert await balance_and_ledger(conn, actor.account_id) in ((7, 7), (8, 8), (9, 9), (10, 10))

    rfp = await (await client.get(f"/api/v1/rfps/{rfp_id}", headers=actor.headers)).json()
    assert rfp["state"] in ("needs_input", "items_generated")
    assert rfp["stats"]["auto_answered_items"] + rfp["stats"]["needs_input_items"] == 3

    first, second, third = items
    for item in (first, second):
        response = await client.patch(f"/api/v1/rfps/{rfp_id}/rfp_items/{item['id']}",
                                      json={"rfp_item": {"state": "approved"}}, headers=actor.headers)
        assert response.status == 200
    await client.patch(f"/api/v1/rfps/{rfp_id}/rfp_items/{third['id']}",
                       json={"rfp_item": {"state": "discarded"}}, headers=actor.headers)
    rfp = await (await client.get(f"/api/v1/rfps/{rfp_id}", headers=actor.headers)).json()
    assert rfp["state"] == "approved"
    assert rfp["stats"]["overall_completion_percentage"] == 100

    exported = await client.get(f"/api/v1/rfps/{rfp_id}/export?format=csv", headers=actor.headers)
    rows = list(csv.DictReader(io.StringIO(await exported.text())))
    assert [(r["question"], r["state"], r["section"]) for r in rows] == [
        ("Do you encrypt customer data at rest?", "approved", "Encryption"),
        ("Is data encrypted in transit with TLS?", "approved", "Encryption"),
        ("How often are backups tested?", "discarded", "Continuity"),
    ]
    assert rows[0]["answer"] == first["answer"]


async def test_answer__twice_at_once_charges_each_item_once(client, conn, make_account):
    actor = await make_account(credits=10)
    rfp_id = await imported_rfp(client, actor)
    responses = await asyncio.gather(answer(client, actor, rfp_id), answer(client, actor, rfp_id))
    assert [r.status for r in responses] == [202, 202]
    started = sorted([(await r.json())["answering"]["started"] for r in responses])
    assert started == [0, 3]
    assert await conn.fetchval("SELECT count(*) FROM questions") == 3
    assert (await conn.fetchval(
        "SELECT -sum(amount) FROM credit_ledger WHERE account_id = $1 AND reason = 'question'",
        actor.account_id,
    )) == 3
    await wait_all_complete(conn, 30)
    again = await answer(client, actor, rfp_id)
    assert (await again.json())["answering"] == {"started": 0, "in_flight": 0, "credits_charged": 0}


async def test_answer__in_flight_shows_as_processing_items(client, conn, make_account):
    actor = await make_account(credits=10)
    rfp_id = await imported_rfp(client, actor)
    # Hold the questions' rows so that the pipeline cannot move them while we look.
    async with conn.transaction():
        response = await answer(client, actor, rfp_id)
        assert response.status == 202
        await conn.execute("SELECT 1 FROM questions FOR UPDATE")
        rfp = await (await client.get(f"/api/v1/rfps/{rfp_id}", headers=actor.headers)).json()
        in_flight = await conn.fetchval(
            "SELECT count(*) FROM rfp_items WHERE rfp_id = $1 AND state = 'pending'", rfp_id
        )
    if in_flight:  # the pipeline may have finished some before the lock; any pending one is in flight
        assert rfp["state"] == "processing_items"
    await wait_all_complete(conn, 30)
    rfp = await (await client.get(f"/api/v1/rfps/{rfp_id}", headers=actor.headers)).json()
    assert rfp["state"] != "processing_items"


async def test_answer__not_enough_credits_is_403_and_charges_nothing(client, conn, make_account):
    actor = await make_account(credits=2)
    rfp_id = await imported_rfp(client, actor)
    response = await answer(client, actor, rfp_id)
    body = await response.json()
    assert response.status == 403
    assert body["error"]["code"] == "usage_blocked"
    assert "3" in body["error"]["message"] and "2" in body["error"]["message"]
    assert await balance_and_ledger(conn, actor.account_id) == (2, 2)
    assert await conn.fetchval("SELECT count(*) FROM questions") == 0
    assert {i["question_id"] for i in await items_of(client, actor, rfp_id)} == {None}


async def test_answer__max_items_answers_the_first_pending_ones_the_credits_pay_for(
    client, conn, make_account
):
    """With 2 credits and 3 pending items "answer all" is refused whole; `max_items` answers the
    first two by position, and a second call the next pending one once credits allow."""
    actor = await make_account(credits=2)
    rfp_id = await imported_rfp(client, actor)
    response = await answer(client, actor, rfp_id, max_items=2)
    body = await response.json()
    assert response.status == 202, body
    assert (body["answering"]["started"], body["answering"]["credits_charged"]) == (2, 2)
    items = await items_of(client, actor, rfp_id)
    assert [bool(i["question_id"]) for i in items] == [True, True, False]
    assert await balance_and_ledger(conn, actor.account_id) == (0, 0)
    refused = await answer(client, actor, rfp_id, max_items=1)
    assert refused.status == 403 and "1" in (await refused.json())["error"]["message"]
    for bad in (0, -1, True, "2", 2.5, 20_001, 10**30):
        invalid = await answer(client, actor, rfp_id, max_items=bad)
        error = (await invalid.json())["error"]
        assert invalid.status == 422 and "max_items" in " ".join(error["details"]), (bad, error)
    assert await conn.fetchval("SELECT count(*) FROM questions") == 2


INACTIVE = {"code": "usage_blocked",
            "message": "the account has no active subscription; items cannot be answered"}


async def test_answer__inactive_subscription_is_403(client, conn, make_account):
    actor = await make_account(credits=10)
    rfp_id = await imported_rfp(client, actor)
    await conn.execute("UPDATE accounts SET subscription_status = 'inactive' WHERE id = $1",
                       actor.account_id)
    response = await answer(client, actor, rfp_id)
    assert response.status == 403
    assert (await response.json())["error"] == INACTIVE


async def test_answer__inactive_subscription_with_nothing_pending_is_403_too(client, conn, make_account):
    """It was 202 "0 started": refused only when there was something to charge for."""
    actor = await make_account(credits=10)
    empty = (await (await client.post("/api/v1/rfps", json={"rfp": {"title": "Empty"}},
                                      headers=actor.headers)).json())["id"]
    asked = await imported_rfp(client, actor)
    assert (await answer(client, actor, asked)).status == 202  # every item now being answered
    await conn.execute("UPDATE accounts SET subscription_status = 'inactive' WHERE id = $1",
                       actor.account_id)
    for rfp_id in (empty, asked):
        response = await answer(client, actor, rfp_id)
        assert response.status == 403, rfp_id
        assert (await response.json())["error"] == INACTIVE
    audited = await conn.fetchval("SELECT count(*) FROM audit_events WHERE account_id = $1 AND "
                                  "action = 'rfp.answer_started'", actor.account_id)
    assert audited == 1
    assert (await answer(client, actor, "rfp_none")).status == 404  # no RFP reads as before


async def test_answer__viewer_forbidden_other_account_404(client, make_account, make_member):
    actor = await make_account(credits=10)
    rfp_id = await imported_rfp(client, actor)
    viewer = await make_member(actor.account_id, role="viewer")
    assert (await answer(client, viewer, rfp_id)).status == 403
    stranger = await make_account(credits=10)
    assert (await answer(client, stranger, rfp_id)).status == 404


async def test_answer__options_validated(client, make_account):
    actor = await make_account(credits=10)
    rfp_id = await imported_rfp(client, actor)
    response = await answer(client, actor, rfp_id, answer_detail_level=5, tone="formal")
    body = await response.json()
    assert response.status == 422
    assert len(body["error"]["details"]) == 2


async def test_answer__each_item_gets_its_question_with_the_options_and_a_ledger_entry(
    client, conn, make_account
):
    # Answer all stores every question in one statement: each carries its own item and text,
    # the options, its asker and one ledger entry; the account is debited once for all.
    actor = await make_account(credits=10)
    rfp_id = await imported_rfp(client, actor)
    response = await answer(client, actor, rfp_id, answer_detail_level=2, custom_prompt="Be brief.")
    assert response.status == 202
    questions = await conn.fetch(
        "SELECT q.id, q.question, q.rfp_item_id, q.member_id, q.user_id, q.custom_prompt,"
        "       q.answer_detail_level, q.charged_credits, i.question AS item_question,"
        "       i.question_id AS item_question_id"
        "  FROM questions q JOIN rfp_items i ON i.id = q.rfp_item_id WHERE q.rfp_id = $1", rfp_id)
    assert sorted(q["item_question"] for q in questions) == sorted(
        line.split(",", 1)[1] for line in QUESTIONNAIRE.decode().splitlines()[1:])
    assert len({q["rfp_item_id"] for q in questions}) == 3
    for q in questions:
        assert q["question"] == q["item_question"] and q["item_question_id"] == q["id"]
        assert (q["member_id"], q["custom_prompt"], q["answer_detail_level"], q["charged_credits"]) \
            == (actor.member_id, "Be brief.", 2, 1)
    charged = await conn.fetch("SELECT amount, subject_id FROM credit_ledger"
                               " WHERE account_id = $1 AND reason = 'question'", actor.account_id)
    assert sorted(charged) == sorted((-1, q["id"]) for q in questions)
    balance, ledger = await balance_and_ledger(conn, actor.account_id)
    assert balance == ledger  # the one debit is the three entries' sum (and any refund's)


async def test_answer__reopened_item_is_answered_again(client, conn, make_account):
    actor = await make_account(credits=10)
    await knowledge(conn, actor.account_id)
    rfp_id = await imported_rfp(client, actor)
    await answer(client, actor, rfp_id)
    await wait_all_complete(conn, 30)
    first = (await items_of(client, actor, rfp_id))[0]
    response = await client.patch(f"/api/v1/rfps/{rfp_id}/rfp_items/{first['id']}",
                                  json={"rfp_item": {"state": "pending"}}, headers=actor.headers)
    assert (await response.json())["question_id"] is None
    again = await answer(client, actor, rfp_id, answer_detail_level=0)
    assert (await again.json())["answering"]["started"] == 1
    await wait_all_complete(conn, 30)
    item = (await items_of(client, actor, rfp_id))[0]
    assert item["state"] in ("auto_answered", "needs_input")
    assert item["question_id"] not in (None, first["question_id"])


async def test_answer_all_and_a_review_at_once__neither_deadlocks(client, conn, database_url, make_account):
    """"Answer all" locked the RFP, then its pending items in order; a review locked its item,
    then the RFP (touch_rfp): a review of a pending item late in the list, saved while an answer
    all was under way, deadlocked with it (one of the two a 500). A third transaction holding an
    earlier item keeps the answer all between the two until the review has its item."""
    import asyncpg
    from conftest import CONNECT, lock_waiters

    from service.domain.rfp_items import AnswerOptions, answer_pending_items, review
    from service.domain.tokens import Principal

    actor = await make_account(credits=10)
    response = await client.post("/api/v1/rfps", json={"rfp": {"title": "Acme", "items": [
        {"question": f"Question {n}?"} for n in range(3)]}}, headers=actor.headers)
    rfp_id = (await response.json())["id"]
    first, _, last = [i["id"] for i in await items_of(client, actor, rfp_id)]
    who = Principal(member_id=actor.member_id, user_id=actor.user_id, account_id=actor.account_id,
                    role="admin", scopes=frozenset({"read", "write"}), name="admin", email=actor.email)
    holder, answering, reviewing = [await asyncpg.connect(database_url, **CONNECT) for _ in range(3)]

    try:
        holding = holder.transaction()
        await holding.start()
        await holder.execute("SELECT 1 FROM rfp_items WHERE id = $1 FOR UPDATE", first)
        answer_all = asyncio.create_task(
            answer_pending_items(answering, who, rfp_id, AnswerOptions(), 1))
        await lock_waiters(conn, 1)
        reviewed = asyncio.create_task(
            review(reviewing, actor.account_id, rfp_id, last, {"answer": "A draft."}, actor.member_id))
        await lock_waiters(conn, 2)
        await holding.rollback()
        async with asyncio.timeout(20):
            results = await asyncio.gather(answer_all, reviewed, return_exceptions=True)
        assert not [r for r in results if isinstance(r, BaseException)], results
    finally:
        for connection in (holder, answering, reviewing):
            await connection.close()
    assert results[0]["started"] == 3
    assert await conn.fetchval("SELECT answer FROM rfp_items WHERE id = $1", last) == "A draft."


async def test_review__what_a_reviewer_writes_on_an_item_being_answered_is_not_replaced(
    conn, make_account, make_rfp
):
    # Found when the test above failed by chance: its review's "A draft." was replaced by the
    # item's question's answer when that question completed a moment later.
    from service import db
    from service.domain.rfp_items import AnswerOptions, answer_pending_items, review
    from service.domain.tokens import Principal

    actor = await make_account(credits=10)
    rfp_id = await make_rfp(actor, "Acme")
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position)"
                       " VALUES ('item_a', $1, 'Is data encrypted?', 1),"
                       "        ('item_b', $1, 'Is MFA enforced?', 2)", rfp_id)
    who = Principal(member_id=actor.member_id, user_id=actor.user_id, account_id=actor.account_id,
                    role="admin", scopes=frozenset({"read", "write"}), name="admin", email=actor.email)
    assert (await answer_pending_items(conn, who, rfp_id, AnswerOptions(), 1))["started"] == 2
    asked = dict(await conn.fetch("SELECT id, question_id FROM rfp_items WHERE rfp_id = $1", rfp_id))
    await review(conn, actor.account_id, rfp_id, "item_a", {"answer": "Yes, AES-256."})
    await review(conn, actor.account_id, rfp_id, "item_b", {"section": "Access"})  # no rewrite
    # The questions complete as the pipeline completes them (answer_rfp_item).
    for item_id, question_id in asked.items():
        await conn.fetchval(db.query("answer_rfp_item"), item_id, "Machine answer.", 0.6,
                            "auto_answered", question_id)
    items = {r["id"]: r for r in await conn.fetch(
        "SELECT id, answer, state, question_id FROM rfp_items WHERE rfp_id = $1", rfp_id)}
    assert (items["item_a"]["answer"], items["item_a"]["state"]) == ("Yes, AES-256.", "pending")
    assert items["item_a"]["question_id"] is None  # no longer in flight: the reviewer has it
    assert (items["item_b"]["answer"], items["item_b"]["state"]) == ("Machine answer.", "auto_answered")


async def test_completing_items__whether_any_is_left_reads_only_those_in_flight(
    conn, make_account, make_rfp
):
    """Each item's completion asks whether another is still in flight (the last one says
    rfp.answered). Counting read every item of the RFP, so "answer all" of n items read n² rows:
    35 s of counting at 20,000 items. Here 3,000 items, the statistics taken while all were in
    flight (as at the start of a run), each completion followed by the question as the pipeline
    asks it; the last question reads the index of items in flight, not the RFP's items."""
    import json

    from service import db
    from service.domain.rfps import append_items

    query = "first_rfp_item_in_flight"  # as pipeline.persist asks it
    actor = await make_account()
    rfp_id = await make_rfp(actor, "Large")
    count = 3000
    await append_items(conn, actor.account_id, rfp_id, [f"Question {n}?" for n in range(count)],
                       [None] * count)
    await conn.execute("UPDATE rfp_items SET question_id = 'q_' || id WHERE rfp_id = $1", rfp_id)
    await conn.execute("ANALYZE rfp_items")
    ids = [r["id"] for r in await conn.fetch(
        "SELECT id FROM rfp_items WHERE rfp_id = $1 ORDER BY position", rfp_id)]
    for item_id in ids[:-1]:
        async with conn.transaction():
            await conn.fetchval(db.query("answer_rfp_item"), item_id, "An answer.", 0.5, "needs_input",
                                "q_" + item_id)
            await conn.fetchval(db.query(query), rfp_id)

    async def pages_read(name: str) -> tuple[int, str]:
        [plan] = json.loads(await conn.fetchval(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {db.query(name)}", rfp_id))
        return plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"], json.dumps(plan)

    # Mid-run, the statistics saying that every item is in flight, the plan still walks the index
    # of items in flight in position order and stops at the first. How many pages that reads
    # depends on when PostgreSQL may mark the answered items' dead entries dead, which depends on
    # what else the server runs (30-80 pages seen under CI's load, where counting read 120-140):
    # so the pages are measured after a VACUUM (as autovacuum's), when the index holds only the
    # item still in flight. Counting, planned from the same statistics, read every page of items.
    _, plan = await pages_read(query)
    assert '"Node Type": "Limit"' in plan and '"Index Name": "rfp_items_in_flight"' in plan, plan
    await conn.execute("VACUUM rfp_items")
    read, plan = await pages_read(query)
    assert '"Index Name": "rfp_items_in_flight"' in plan
    assert read <= 5, (read, plan)
    last = await conn.fetchval("SELECT position FROM rfp_items WHERE id = $1", ids[-1])
    assert await conn.fetchval(db.query(query), rfp_id) == last
    await conn.fetchval(db.query("answer_rfp_item"), ids[-1], "An answer.", 0.5, "needs_input",
                        "q_" + ids[-1])
    assert await conn.fetchval(db.query(query), rfp_id) is None


async def test_migration_0036__clears_the_sentence_only_from_items_as_an_older_release_left_them(
    client, conn, make_account
):
    """Items answered before 0036 took the "does not cover" sentence; the migration clears it
    where it stands unreviewed and unchanged, and leaves a member's own answer alone."""
    actor = await make_account(credits=10)
    await knowledge(conn, actor.account_id)
    rfp_id = await imported_rfp(client, actor)
    assert (await answer(client, actor, rfp_id)).status == 202
    await wait_all_complete(conn, 30)
    covered, _, uncovered = await items_of(client, actor, rfp_id)
    migration = (ROOT / "sql/migrations/0036_uncovered_item_answers.sql").read_text()

    async def migrated(answer_sql: str) -> str | None:
        await conn.execute(f"UPDATE rfp_items i SET answer = {answer_sql} FROM questions q"
                           " WHERE q.id = i.question_id AND i.id = $1", uncovered["id"])
        await conn.execute(migration)
        return await conn.fetchval("SELECT answer FROM rfp_items WHERE id = $1", uncovered["id"])

    assert await migrated("'We test backups every quarter.'") == "We test backups every quarter."
    assert await migrated("q.answer") is None  # as an older release stored it
    assert await conn.fetchval("SELECT answer FROM rfp_items WHERE id = $1",
                               covered["id"]) == covered["answer"]
