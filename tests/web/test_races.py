"""Races between concurrent requests (helper-66's probe): what one request changes while another,
already past its checks, is writing. Each test crosses the two deterministically by holding a
row lock the second request waits on while the first commits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest
from conftest import CONNECT, lock_waiters

from service import db
from service.domain.knowledge import import_csv


@contextlib.asynccontextmanager
async def holding(database_url: str, sql: str, *args: object) -> AsyncIterator[None]:
    """A transaction of another connection that ran `sql` (a row lock) and commits on exit."""
    holder = await asyncpg.connect(database_url, **CONNECT)
    try:
        async with holder.transaction():
            await holder.execute(sql, *args)
            yield
    finally:
        await holder.close()


async def test_ask__its_member_removed_while_it_waits_for_the_account_is_503_then_401(
    client, conn, database_url, admin, make_member
):
    """An ask waits for its account's row while another ask or an "answer all" of the account
    holds it (half a second for 10,000 items). A probe: removing the asking member meanwhile
    made the ask's INSERT fail on questions.member_id's foreign key, a 500. It is the same kind
    of conflict as a deadlock: rolled back, nothing charged, 503 with Retry-After; the retry is
    401, the member's token being gone with them."""
    member = await make_member(admin.account_id)
    ask = {"question": {"question": "Is data encrypted at rest?"}}
    async with holding(database_url, "SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE",
                       admin.account_id):
        asking = asyncio.create_task(client.post("/api/v1/questions", json=ask, headers=member.headers))
        await lock_waiters(conn, 1)
        removed = await client.delete(f"/api/v1/members/{member.member_id}", headers=admin.headers)
        assert removed.status == 204, await removed.text()
    response = await asking
    assert response.status == 503, await response.text()
    assert response.headers["Retry-After"] == "1"
    assert await conn.fetchval("SELECT count(*) FROM questions") == 0
    assert await conn.fetchval("SELECT credits FROM accounts WHERE id = $1", admin.account_id) == 10
    again = await client.post("/api/v1/questions", json=ask, headers=member.headers)
    assert again.status == 401


async def test_item_review__its_reviewer_removed_while_it_waits_for_the_rfp_is_503(
    client, conn, database_url, admin, make_member, make_rfp
):
    """The same for a review saving its answer to the knowledge base, waiting for its RFP's row
    (an "answer all" or a completing question holds it): the entry's owner, the reviewer, was
    gone at the INSERT, a 500. Now 503, and nothing of the review is stored."""
    member = await make_member(admin.account_id)
    rfp_id = await make_rfp(admin, "Acme")
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position)"
                       " VALUES ('item_race', $1, 'Do you enforce MFA?', 1)", rfp_id)
    review = {"rfp_item": {"answer": "Yes.", "state": "approved", "save_to_knowledge_base": True}}
    async with holding(database_url, "SELECT 1 FROM rfps WHERE id = $1 FOR UPDATE", rfp_id):
        reviewing = asyncio.create_task(client.patch(
            f"/api/v1/rfps/{rfp_id}/rfp_items/item_race", json=review, headers=member.headers))
        await lock_waiters(conn, 1)
        removed = await client.delete(f"/api/v1/members/{member.member_id}", headers=admin.headers)
        assert removed.status == 204, await removed.text()
    response = await reviewing
    assert response.status == 503, await response.text()
    assert await conn.fetchval("SELECT state::text FROM rfp_items WHERE id = 'item_race'") == "pending"
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 0


async def test_merge__two_entries_merged_into_each_other_at_once_never_deadlock(
    client, conn, database_url, admin
):
    """A probe: merging A into B while B is merged into A deadlocked four times in ten (each
    merge locked its kept entry, then its duplicate), one of them a 503. Both now lock the two
    entries in one order: one merge wins, the other finds its entry gone (404 or 422)."""
    ids = []
    for text in ("Do you encrypt backups?", "Are backups encrypted?"):
        made = await client.post("/api/v1/knowledge_base_items", headers=admin.headers,
                                 json={"knowledge_base_item": {"question": text, "answer": "Yes."}})
        ids.append((await made.json())["id"])
    first, second = sorted(ids)

    def merge(keep: str, duplicate: str) -> asyncio.Task:
        return asyncio.create_task(client.post(
            f"/api/v1/knowledge_base_items/{keep}/merge", json={"duplicate_id": duplicate},
            headers=admin.headers))

    # Both wait on `first`: one merge keeps it, the other (keeping `second`) has locked `second`.
    async with holding(database_url, "SELECT 1 FROM knowledge_items WHERE id = $1 FOR UPDATE", first):
        keeping_first = merge(first, second)
        await lock_waiters(conn, 1)
        keeping_second = merge(second, first)
        await lock_waiters(conn, 2)
    statuses = sorted([(await keeping_first).status, (await keeping_second).status])
    assert statuses[0] == 200 and statuses[1] in (404, 422), statuses
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 1


async def test_merge__a_question_mid_pipeline_citing_the_duplicate_cites_the_kept_entry(
    aiohttp_client, config, conn, admin
):
    """A probe: a merge repointed the stored references of a question being answered (the merge
    counted it in questions_repointed), and the pipeline's next step, writing the references it
    held in memory, put the removed duplicate back: the complete question cited an entry that
    no longer exists. The step's write now repoints them as the merge did."""
    import json

    from conftest import with_config
    from helpers_questions import add_entry, wait_complete

    from service.web.app import create_app

    # Each step committed apart and half a second long: the merge lands between two of them.
    client = await aiohttp_client(create_app(with_config(config, questions={"step_delay_seconds": 0.5})))
    kept = await add_entry(conn, admin.account_id, "How are backups encrypted?", "With AES-256.")
    duplicate = await add_entry(conn, admin.account_id, "Are backups encrypted?", "With AES-256, yes.")
    asked = await client.post("/api/v1/questions", headers=admin.headers,
                              json={"question": {"question": "Are backups encrypted?"}})
    question_id = (await asked.json())["id"]
    stored = 'SELECT "references" FROM questions WHERE id = $1'
    async with asyncio.timeout(10):
        while await conn.fetchval("SELECT state::text FROM questions WHERE id = $1",  # noqa: ASYNC110
                                  question_id) != "references_fetched":
            await asyncio.sleep(0.02)
    assert duplicate in {ref["kb_item_id"] for ref in json.loads(await conn.fetchval(stored, question_id))}
    merged = await client.post(f"/api/v1/knowledge_base_items/{kept}/merge", headers=admin.headers,
                               json={"duplicate_id": duplicate})
    assert (await merged.json())["questions_repointed"] == 1
    done = await wait_complete(client, question_id, admin.headers)
    assert duplicate not in {ref["id"] for ref in done["references"]}
    references = json.loads(await conn.fetchval(stored, question_id))
    assert {(ref["kb_item_id"], ref.get("merged_from")) for ref in references} == {
        (kept, duplicate), (kept, None)}


async def test_merge__and_an_import_updating_both_entries_at_once_never_deadlock(
    client, conn, database_url, admin
):
    """An import updates existing entries in external-id order (upsert_knowledge_items); a merge
    locked its two entries in id order. With the orders crossed (kb_1 is "b", kb_2 is "a"), the
    import held "a" and waited for "b" while the merge held kb_1 ("b") and waited for kb_2: a
    deadlock, one of the two a 503. The merge now locks in the import's order."""
    for entry_id, external_id in (("kb_1", "b"), ("kb_2", "a")):
        await conn.execute(
            "INSERT INTO knowledge_items (id, account_id, question, answer, external_id)"
            " VALUES ($1, $2, $3, 'Yes.', $4)", entry_id, admin.account_id, f"Question {external_id}?",
            external_id)
    csv = "id,question,answer\na,Question a?,Updated a.\nb,Question b?,Updated b.\n"
    importer = await asyncpg.connect(database_url, **CONNECT)
    try:
        async with holding(database_url, "SELECT 1 FROM knowledge_items WHERE id = 'kb_2' FOR UPDATE"):
            importing = asyncio.create_task(import_csv(importer, admin.account_id, csv))
            await lock_waiters(conn, 1)  # the import waits for "a" (kb_2), holding nothing yet
            merging = asyncio.create_task(client.post(
                "/api/v1/knowledge_base_items/kb_2/merge", json={"duplicate_id": "kb_1"},
                headers=admin.headers))
            await lock_waiters(conn, 2)
        async with asyncio.timeout(20):
            report, merged = await asyncio.gather(importing, merging)
    finally:
        await importer.close()
    assert merged.status == 200, await merged.text()
    assert report.imported == 2
    answers = await conn.fetch("SELECT id, answer FROM knowledge_items ORDER BY external_id")
    assert answers[0]["id"] == "kb_2" and answers[0]["answer"] == "Updated a."


@pytest.mark.parametrize("change", ["delete", "merge"])
async def test_deleting_or_merging_an_entry__takes_its_saved_items_before_the_entry(
    client, conn, database_url, admin, make_rfp, change
):
    """An approval saving an RFP item takes the item, then its entry; deleting the entry (its
    foreign key sets the item's reference to null) or merging it (repoint_rfp_items) took the
    entry, then the item: the two could deadlock, one a 503. Now the item first: while another
    transaction holds the item, the waiting delete or merge holds nothing of the entry yet."""
    for entry_id in ("kb_saved", "kb_other"):
        await conn.execute("INSERT INTO knowledge_items (id, account_id, question, answer)"
                           " VALUES ($1, $2, 'Do you encrypt backups?', 'Yes.')", entry_id, admin.account_id)
    rfp_id = await make_rfp(admin, "Acme")
    await conn.execute(
        "INSERT INTO rfp_items (id, rfp_id, question, position, state, answer, knowledge_item_id)"
        " VALUES ('item_saved', $1, 'Backups encrypted?', 1, 'approved', 'Yes.', 'kb_saved')", rfp_id)
    path, body = (("/api/v1/knowledge_base_items/kb_saved", None) if change == "delete" else
                  ("/api/v1/knowledge_base_items/kb_other/merge", {"duplicate_id": "kb_saved"}))
    method = client.delete if change == "delete" else client.post
    async with holding(database_url, "SELECT 1 FROM rfp_items WHERE id = 'item_saved' FOR UPDATE"):
        changing = asyncio.create_task(method(path, json=body, headers=admin.headers))
        await lock_waiters(conn, 1)
        probe = await asyncpg.connect(database_url, **CONNECT)
        try:
            async with probe.transaction():
                free = await probe.fetchval(
                    "SELECT id FROM knowledge_items WHERE id = 'kb_saved' FOR UPDATE NOWAIT")
        finally:
            await probe.close()
        assert free == "kb_saved"
    response = await changing
    assert response.status in (200, 204), await response.text()
    saved_as = await conn.fetchval("SELECT knowledge_item_id FROM rfp_items WHERE id = 'item_saved'")
    assert saved_as == (None if change == "delete" else "kb_other")


@pytest.mark.pgvector
async def test_merge__and_the_indexer_claiming_both_entries_at_once_never_deadlock(
    client, conn, database_url, admin
):
    """The indexer claims entries to embed in creation order, each held FOR KEY SHARE
    (embeddings_pending); a merge locked its two entries FOR UPDATE in external-id order, which
    conflicts with that. With the orders crossed (kb_b made first, kb_a's external id first), the
    indexer held kb_b and waited for kb_a while the merge held kb_a and waited for kb_b: a
    deadlock, the merge a 503 (or the indexer's round lost). The merge now locks both FOR NO KEY
    UPDATE, which a KEY SHARE claim does not wait for; only deleting the duplicate waits for it."""
    for entry_id, external_id, age in (("kb_b", "b", "2 minutes"), ("kb_a", "a", "1 minute")):
        await conn.execute(
            "INSERT INTO knowledge_items (id, account_id, question, answer, external_id, created_at)"
            " VALUES ($1, $2, $3, 'Yes.', $4, now() - $5::text::interval)",
            entry_id, admin.account_id, f"Question {external_id}?", external_id, age)
    indexer = await asyncpg.connect(database_url, **CONNECT)
    try:
        # Another claim on kb_b (the merge's second lock) holds the merge there, kb_a locked.
        async with holding(database_url, "SELECT 1 FROM knowledge_items WHERE id = 'kb_b' FOR KEY SHARE"):
            merging = asyncio.create_task(client.post(
                "/api/v1/knowledge_base_items/kb_a/merge", json={"duplicate_id": "kb_b"},
                headers=admin.headers))
            await lock_waiters(conn, 1)
            claiming = asyncio.create_task(indexer.fetch(db.query("embeddings_pending"), "m", 10, 60.0, True))
            await asyncio.sleep(0.3)  # the indexer claims kb_b, then kb_a (or waits for it)
        async with asyncio.timeout(20):
            merged, claimed = await asyncio.gather(merging, claiming)
    finally:
        await indexer.close()
    assert merged.status == 200, await merged.text()
    assert {row["id"] for row in claimed} <= {"kb_a", "kb_b"}
    assert [r["id"] for r in await conn.fetch("SELECT id FROM knowledge_items")] == ["kb_a"]


ENTRIES = "/api/v1/knowledge_base_items"
_ENCRYPTION = ("Do you encrypt customer data at rest?", "Yes, all customer data is encrypted with AES-256.")


async def _duplicates_fresh(client, admin) -> dict:
    """The duplicate report once a run has finished and nothing changed since (GET starts runs)."""
    async with asyncio.timeout(20):
        while True:
            report = await (await client.get(f"{ENTRIES}/duplicates", headers=admin.headers)).json()
            if report["state"] == "fresh" and not report["running"]:
                return report
            await asyncio.sleep(0.05)


async def _csv_import(client, admin, rows: list[tuple[str, str, str]]):
    lines = ["id,question,answer", *(",".join(f'"{cell}"' for cell in row) for row in rows)]
    return await client.post(f"{ENTRIES}/import", data="\n".join(lines) + "\n",
                             headers={**admin.headers, "Content-Type": "text/csv"})


@pytest.mark.parametrize("write", ["import", "edit"])
async def test_duplicates__an_entry_written_across_a_run_leaves_the_report_outdated(
    client, conn, database_url, admin, write
):
    """A duplicate run compares the entries one statement reads, and its report is `fresh`
    until an entry's updated_at passes the run's start. A probe: a write whose transaction began
    before the run and committed after its read was in neither, an entry's updated_at being its
    transaction's start: the report stayed fresh without the near-duplicate it wrote, and no GET
    started another run until some other entry changed. `import`: its new entry written first
    (external id order), then waiting for x2, which it leaves as it was (another write holds it):
    the run's start is held before the oldest uncommitted write. `edit`: held before writing
    anything (by a table lock, which gives the holder no transaction id, standing for any delay
    between a transaction's start and its write): the entry stamps its write's time."""
    made = await _csv_import(client, admin, [("x1", *_ENCRYPTION), ("x2", "Bug bounty?", "Yes.")])
    assert made.status == 200, await made.text()
    await client.get(f"{ENTRIES}/duplicates", headers=admin.headers)
    assert (await _duplicates_fresh(client, admin))["pairs"] == []
    entry = await conn.fetchval("SELECT id FROM knowledge_items WHERE external_id = 'x2'")
    question, answer = _ENCRYPTION[0].replace("?", " ?"), _ENCRYPTION[1].replace(".", "!")
    if write == "import":
        held = holding(database_url, "SELECT 1 FROM knowledge_items WHERE id = $1 FOR UPDATE", entry)
    else:
        held = holding(database_url, "LOCK TABLE knowledge_items IN EXCLUSIVE MODE")
    async with held:
        if write == "import":
            writing = asyncio.create_task(_csv_import(client, admin, [
                ("n1", question, answer), ("x2", "Bug bounty?", "Yes.")]))
        else:
            writing = asyncio.create_task(client.patch(
                f"{ENTRIES}/{entry}", json={"knowledge_base_item": {"question": question, "answer": answer}},
                headers=admin.headers))
        await lock_waiters(conn, 1)
        await client.get(f"{ENTRIES}/duplicates?refresh=true", headers=admin.headers)
        assert (await _duplicates_fresh(client, admin))["pairs"] == []
    written = await writing
    assert written.status == 200, await written.text()
    report = await (await client.get(f"{ENTRIES}/duplicates", headers=admin.headers)).json()
    assert report["state"] == "outdated"
    assert [pair["kind"] for pair in (await _duplicates_fresh(client, admin))["pairs"]] == ["duplicate"]


async def test_members__two_admins_changing_each_other_at_once_one_is_refused(
    client, conn, database_url, admin, make_member
):
    """Admin X makes admin Y a viewer while Y removes X. A probe: each request locked only the
    membership it changed, so both applied (every try, from two processes at once), an outcome
    neither order gives: whichever goes second is no longer an admin, or a member. Here X's
    change is held at Y's membership (locked by another transaction) while Y's removal of X is
    sent; one of the two must be refused, 403, and the other's change stand."""
    x = await make_member(admin.account_id, "admin")
    y = await make_member(admin.account_id, "admin")
    async with holding(database_url, "SELECT 1 FROM members WHERE id = $1 FOR UPDATE", y.member_id):
        demoting = asyncio.create_task(client.patch(
            f"/api/v1/members/{y.member_id}", json={"member": {"role": "viewer"}}, headers=x.headers))
        await lock_waiters(conn, 1)
        removing = asyncio.create_task(client.delete(f"/api/v1/members/{x.member_id}", headers=y.headers))
        await asyncio.wait([removing], timeout=0.5)  # done at once while it waits for nothing
    demoted, removed = await demoting, await removing
    statuses = (demoted.status, removed.status)
    assert statuses in ((200, 403), (403, 204)), (await demoted.text(), await removed.text())
    roles = dict(await conn.fetch("SELECT id, role::text FROM members WHERE id = ANY($1)",
                                  [x.member_id, y.member_id]))
    if statuses == (200, 403):
        assert roles == {x.member_id: "admin", y.member_id: "viewer"}
    else:
        assert roles == {y.member_id: "admin"}
