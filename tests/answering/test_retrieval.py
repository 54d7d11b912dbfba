from __future__ import annotations

from service.answering.retrieval import find_references
from service.domain.ids import new_id
from tests.helpers_plans import explained


async def test_find_references__matches_on_some_words_and_ranks_question_first(conn, admin):
    rows = [
        ("Do you enforce multi-factor authentication?", "Yes, for all staff."),
        (None, "Our office has a multi-purpose room."),
        ("Is data encrypted at rest?", "Yes, AES-256."),
    ]
    for question, answer in rows:
        await conn.execute(
            "INSERT INTO knowledge_items (id, account_id, question, answer) VALUES ($1, $2, $3, $4)",
            new_id("kb"), admin.account_id, question, answer,
        )
    found = await find_references(conn, admin.account_id, "Which authentication factors do you require?")
    assert [ref.question for ref in found] == ["Do you enforce multi-factor authentication?"]
    assert 0 < found[0].score < 1


async def test_find_references__other_account_entries_are_invisible(conn, make_account):
    mine, theirs = await make_account(), await make_account()
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, answer) VALUES ($1, $2, 'encryption at rest')",
        new_id("kb"), theirs.account_id,
    )
    assert await find_references(conn, mine.account_id, "encryption") == []


async def test_find_references__leaves_no_session_setting_behind(conn, admin):
    # Pooled connections are not reset: the scan settings live on the function, and the
    # custom-plan setting it sets for one query is put back, in a transaction too.
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, answer) VALUES ($1, $2, 'encryption at rest')",
        new_id("kb"), admin.account_id,
    )
    for _ in range(7):  # past the five runs after which a generic plan may be cached
        assert (await find_references(conn, admin.account_id, "encryption"))[0].answer
    assert await conn.fetchval("SHOW plan_cache_mode") == "auto"
    async with conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        assert (await find_references(conn, admin.account_id, "encryption"))[0].answer
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
    assert await conn.fetchval("SELECT proconfig FROM pg_proc WHERE proname = 'knowledge_retrieve'") == [
        "enable_seqscan=off", "enable_indexscan=off"]
    assert await conn.fetchval("SHOW enable_seqscan") == "on"


async def test_find_references__any_text_is_safe_and_stop_words_find_nothing(conn, admin):
    assert await find_references(conn, admin.account_id, "encryption") == []  # no entries yet
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, question, answer) VALUES ($1, $2, $3, $4)",
        new_id("kb"), admin.account_id, "Isn't O'Brien's key rotated?", "Yes: every 90 days.",
    )
    assert await find_references(conn, admin.account_id, "the and of is") == []
    for text in ("O'Brien's key: rotated?", "key & | ! :* ( ) <-> \\ '' \"", "ключ rotated"):
        found = await find_references(conn, admin.account_id, text)
        assert found and found[0].question == "Isn't O'Brien's key rotated?", text


async def test_find_references__candidates_come_in_table_order_from_a_bitmap_scan(conn, admin):
    # The candidates are the first matches in the order the scan meets them, so the plan must not
    # choose which: never an index's order. Nor a sequential scan, which tests every entry's
    # tsvector; many entries sharing common words are what made the planner prefer one.
    topics = ["backup retention", "disaster recovery", "access reviews", "data deletion",
              "key management", "incident response", "vendor risk", "code review"]
    units = ["production", "staging", "corporate", "partner integrations", "mobile apps"]
    rows = [
        (new_id("kb"), admin.account_id, f"How do you handle {topics[i % 8]} {i % 7} across {units[i % 5]}?",
         f"Our {topics[i % 8]} policy for {units[i % 5]} data is reviewed yearly (ref {i}).")
        for i in range(3000)
    ]
    await conn.copy_records_to_table(
        "knowledge_items", records=rows, columns=["id", "account_id", "question", "answer"]
    )
    await conn.execute("ANALYZE knowledge_items")
    for n in range(6):  # past the five runs after which a generic plan may be cached
        await find_references(conn, admin.account_id, f"How do you handle {topics[n]}?")
    async with explained(conn) as plans:
        found = await find_references(
            conn, admin.account_id, "How do you handle backup retention across partner integrations?"
        )
    assert found and "backup retention" in found[0].question
    [candidates] = [plan for plan in plans if "LIMIT candidate_limit" in plan]
    scans = [line.strip() for line in candidates.splitlines()
             if "Scan" in line and " on knowledge_items " in line]
    assert scans and all(scan.startswith("->  Bitmap Heap Scan") for scan in scans), scans
    # Planned for this account and question (a custom plan: the values, not parameters, in its
    # conditions), though a generic plan may be cached after five runs.
    conditions = [line.strip() for line in candidates.splitlines()
                  if ("Cond:" in line or "Filter:" in line) and "account_id =" in line]
    assert conditions and not any("$" in condition for condition in conditions), conditions


async def test_knowledge_retrieve__a_candidate_carries_the_questions_lexemes_with_every_position(
    conn, admin
):
    # The ranking reads positions and weights of the question's lexemes only: the rest of an
    # entry's vector is not sent.
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, question, answer) VALUES ($1, $2, $3, $4)",
        new_id("kb"), admin.account_id, "Do you encrypt backups at rest?",
        "Yes: every backup is encrypted with AES-256, and backups are tested yearly.",
    )
    rows = await conn.fetch("SELECT * FROM knowledge_retrieve($1, $2, 300, 400, 200, '{}')",
                            admin.account_id, "Are the backups encrypted?")
    [candidate] = rows[1:]
    assert rows[0]["lexemes"] == ["backup", "encrypt"]
    assert candidate["vector"] == "'backup':4A,9C,16C 'encrypt':3A,11C"
    assert (candidate["question_lexemes"], candidate["answer_lexemes"]) == (3, 8)  # of the whole entry
    # What an answer's references carry (staleness.py): read here, not in a statement of their own.
    assert (candidate["version"], candidate["stale"]) == (1, False) and candidate["review_by"]
    await conn.execute("UPDATE knowledge_items SET review_by = current_date - 1")
    rows = await conn.fetch("SELECT * FROM knowledge_retrieve($1, $2, 300, 400, 200, '{}')",
                            admin.account_id, "Are the backups encrypted?")
    assert (rows[1]["version"], rows[1]["stale"]) == (2, True)
    assert rows[0]["version"] is None  # the question's row
