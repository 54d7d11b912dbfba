from __future__ import annotations

import json
import subprocess
import sys

import aiohttp
from cli_runner import POOLER_ENV

from service.answering.retrieval import find_references
from service.domain.knowledge import MAX_IMPORT_ROWS
from service.domain.uploads import decode

ITEMS = "/api/v1/knowledge_base_items"


async def _create(client, actor, **fields):
    return await client.post(ITEMS, json={"knowledge_base_item": fields}, headers=actor.headers)


async def test_create_item__201_with_fields_and_readable(client, admin):
    response = await _create(
        client, admin, question="Do you encrypt backups?", answer="Yes, AES-256.",
        title="Backups", tags=["encryption", "backup"], source="policy.pdf",
    )
    assert response.status == 201
    created = await response.json()
    assert created["id"].startswith("kb_")
    assert response.headers["Location"] == f"{ITEMS}/{created['id']}"
    assert created["tags"] == ["encryption", "backup"]
    read = await client.get(f"{ITEMS}/{created['id']}", headers=admin.headers)
    assert read.status == 200
    assert await read.json() == created


async def test_create_item__answer_required_and_types_checked_per_field(client, admin):
    response = await _create(client, admin, question=5, tags="x")
    body = await response.json()
    assert response.status == 422
    assert sorted(body["error"]["details"]) == [
        "knowledge_base_item.answer: is required",
        "knowledge_base_item.question: must be a string, got number",
        "knowledge_base_item.tags: must be an array of strings",
    ]


async def test_create_item__overlong_answer_is_422(client, admin):
    response = await _create(client, admin, answer="x" * 100_001)
    assert response.status == 422
    assert "at most 100000 characters" in (await response.json())["error"]["details"][0]


async def test_create_item__viewer_is_forbidden(client, admin, make_member):
    viewer = await make_member(admin.account_id, role="viewer")
    response = await _create(client, viewer, answer="Yes")
    assert response.status == 403
    assert (await response.json())["error"]["code"] == "forbidden"


async def test_list_items__paginated_newest_first_and_own_account_only(client, admin, make_account):
    other = await make_account()
    await _create(client, other, answer="not mine")
    for n in range(3):
        await _create(client, admin, answer=f"answer {n}")
    response = await client.get(ITEMS, headers=admin.headers)
    body = await response.json()
    assert [item["answer"] for item in body["knowledge_base_items"]] == [
        "answer 2", "answer 1", "answer 0",
    ]
    assert body["pagination"]["total_count"] == 3
    past = await (await client.get(f"{ITEMS}?page=2", headers=admin.headers)).json()
    assert past["knowledge_base_items"] == [] and past["pagination"]["from"] is None


async def test_get_and_delete__other_account_is_404(client, admin, make_account):
    other = await make_account()
    item_id = (await (await _create(client, admin, answer="mine")).json())["id"]
    assert (await client.get(f"{ITEMS}/{item_id}", headers=other.headers)).status == 404
    assert (await client.delete(f"{ITEMS}/{item_id}", headers=other.headers)).status == 404
    assert (await client.get(f"{ITEMS}/{item_id}", headers=admin.headers)).status == 200


async def test_delete_item__204_then_404_and_no_longer_retrieved(client, conn, admin):
    item_id = (await (await _create(client, admin, answer="Quarterly penetration tests")).json())["id"]
    assert (await client.delete(f"{ITEMS}/{item_id}", headers=admin.headers)).status == 204
    assert (await client.get(f"{ITEMS}/{item_id}", headers=admin.headers)).status == 404
    assert await find_references(conn, admin.account_id, "penetration tests") == []


CSV = (
    "id,question,answer,title,tags,source,vendor_note\n"
    "E-1,Do you support MFA?,Yes; TOTP and WebAuthn.,MFA,auth;identity,sheet,x\n"
    'E-2,"Is data encrypted\nat rest?","Yes, AES-256.",,,,\n'
    "E-3,Blank answer,,,,,\n"
    "E-4,Too few fields\n"
    "E-1,Duplicate id,Yes,,,,\n"
)


async def test_import_csv__good_rows_committed_bad_rows_reported_by_row(client, admin):
    response = await client.post(
        f"{ITEMS}/import", data=CSV.encode(), headers={**admin.headers, "Content-Type": "text/csv"}
    )
    body = await response.json()
    assert response.status == 200
    assert (body["imported"], body["created"], body["updated"]) == (2, 2, 0)
    assert body["ignored_columns"] == ["vendor_note"]
    assert [(r["row"], r["reason"]) for r in body["rejected"]] == [
        (4, "answer: must not be blank"),
        (5, "has 2 fields; the header has 7"),
        (6, "id 'E-1' already appears on row 2"),
    ]
    listed = await (await client.get(ITEMS, headers=admin.headers)).json()
    by_id = {item["external_id"]: item for item in listed["knowledge_base_items"]}
    assert by_id["E-1"]["tags"] == ["auth", "identity"]
    assert by_id["E-2"]["question"] == "Is data encrypted\nat rest?"


async def test_import_csv__reimport_same_id_updates_the_entry(client, admin):
    headers = {**admin.headers, "Content-Type": "text/csv"}
    first = "id,question,answer\nE-1,Do you support SSO?,No.\n"
    again = "id,question,answer\nE-1,Do you support SSO?,Yes: SAML 2.0.\n"
    await client.post(f"{ITEMS}/import", data=first, headers=headers)
    body = await (await client.post(f"{ITEMS}/import", data=again, headers=headers)).json()
    assert (body["created"], body["updated"]) == (0, 1)
    listed = await (await client.get(ITEMS, headers=admin.headers)).json()
    assert [i["answer"] for i in listed["knowledge_base_items"]] == ["Yes: SAML 2.0."]


async def test_import_csv__every_leading_bom_is_dropped_from_the_first_header(client, admin):
    """A file saved twice by tools that each add a BOM: the decoder dropped one, the other stayed
    in the first header, and `question` was reported as an ignored column (the entry had none)."""
    headers = {**admin.headers, "Content-Type": "text/csv"}
    for body in (b"\xef\xbb\xbf\xef\xbb\xbfquestion,answer\nDo you support SSO?,Yes.\n",
                 b'\xef\xbb\xbf\xef\xbb\xbf\xef\xbb\xbf"question",answer\nDo you support SSO?,Yes.\n'):
        response = await client.post(f"{ITEMS}/import", data=body, headers=headers)
        report = await response.json()
        assert response.status == 200, report
        assert report["ignored_columns"] == [] and report["imported"] == 1, report
    listed = await (await client.get(ITEMS, headers=admin.headers)).json()
    assert [i["question"] for i in listed["knowledge_base_items"]] == ["Do you support SSO?"] * 2


def test_decode__drops_every_leading_bom():
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfquestion,answer\n") == "question,answer\n"


async def test_import_csv__multipart_file_field(client, admin):
    form = aiohttp.FormData()
    form.add_field("file", b"question,answer\nQ?,A.\n", filename="kb.csv", content_type="text/csv")
    response = await client.post(f"{ITEMS}/import", data=form, headers=admin.headers)
    assert response.status == 200
    assert (await response.json())["imported"] == 1


async def test_import_csv__without_answer_column_is_422(client, admin):
    response = await client.post(
        f"{ITEMS}/import", data="question,title\nQ?,T\n",
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    assert response.status == 422
    error = (await response.json())["error"]
    assert error["details"] == ["csv: the header must have an answer column"]
    assert error["message"] == "the header row is not usable"


async def test_import_csv__more_rows_than_an_import_takes_is_422_naming_it_and_stores_nothing(
    client, admin, conn
):
    rows = "".join(f"Q{n}?,A{n}.\n" for n in range(MAX_IMPORT_ROWS + 1))
    response = await client.post(
        f"{ITEMS}/import", data=f"question,answer\n{rows}",
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    assert response.status == 422
    error = (await response.json())["error"]
    assert error["message"] == "the file has too many rows"  # it was "the record could not be saved"
    assert error["details"] == [f"csv: at most {MAX_IMPORT_ROWS} rows per import; split the file"]
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items WHERE account_id = $1",
                               admin.account_id) == 0


async def test_import_csv__json_body_is_415_and_viewer_403(client, admin, make_member):
    response = await client.post(f"{ITEMS}/import", json={"x": 1}, headers=admin.headers)
    assert response.status == 415
    viewer = await make_member(admin.account_id, role="viewer")
    response = await client.post(
        f"{ITEMS}/import", data="answer\nA\n", headers={**viewer.headers, "Content-Type": "text/csv"}
    )
    assert response.status == 403


async def test_import_csv__too_many_rows_is_422(client, admin):
    body = "answer\n" + "A\n" * 10_001
    response = await client.post(
        f"{ITEMS}/import", data=body, headers={**admin.headers, "Content-Type": "text/csv"}
    )
    assert response.status == 422
    assert "at most 10000 rows" in (await response.json())["error"]["details"][0]


async def test_cli_kb_import__json_prints_one_object(tmp_path, config, conn, admin):
    path = tmp_path / "kb.csv"
    path.write_text("id,question,answer\nE-1,Q?,A.\nE-2,Q2?,\n")
    done = subprocess.run(  # noqa: ASYNC221 (the CLI is its own process; the test just waits)
        [sys.executable, "-m", "service", "kb", "import", "--account", admin.account_id, str(path),
         "--json"],
        capture_output=True, text=True,
        env={"DATABASE_URL": config.database.url, "PATH": "", **POOLER_ENV},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["imported"] == 1
    assert report["rejected"] == [{"row": 3, "reason": "answer: must not be blank"}]
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items WHERE account_id = $1",
                               admin.account_id) == 1


async def test_import_csv__nul_character_is_422_naming_the_cell_and_nothing_stored(client, admin, conn):
    # The knowledge-base import reads through the questionnaires' CSV layer (domain/uploads.py):
    # a NUL (PostgreSQL text cannot hold one) is refused whole, naming the cell.
    body = "\ufeffquestion,answer\nQ1?,Fine.\nQ2?,Bro\x00ken\n".encode()
    response = await client.post(
        f"{ITEMS}/import", data=body, headers={**admin.headers, "Content-Type": "text/csv"}
    )
    assert response.status == 422, await response.text()
    assert "cell B3 holds a NUL character" in (await response.json())["error"]["details"][0]
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 0


async def test_import_csv__cell_past_the_upload_limit_is_413_naming_the_setting(
    config, aiohttp_client, admin, conn
):
    from conftest import with_config

    from service.web.app import create_app

    client = await aiohttp_client(create_app(with_config(config, uploads={"max_cell_chars": 50})))
    body = "question,answer\nQ?," + "x" * 51 + "\n"
    response = await client.post(
        f"{ITEMS}/import", data=body, headers={**admin.headers, "Content-Type": "text/csv"}
    )
    assert response.status == 413, await response.text()
    assert "uploads.max_cell_chars = 50" in (await response.json())["error"]["message"]
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 0



async def test_save_reviewed_answer__two_first_saves_at_once_make_one_entry(database_url, conn, admin):
    # The second save waits on the first's uncommitted insert, then updates that entry.
    import asyncio

    import asyncpg
    from conftest import CONNECT

    from service.domain.knowledge import save_reviewed_answer

    other = await asyncpg.connect(database_url, **CONNECT)
    try:
        first = conn.transaction()
        await first.start()
        saved, created = await save_reviewed_answer(
            conn, admin.account_id, question="Q?", answer="First.", source="rfp:r1",
            external_id="rfp_item:i1",
        )
        assert created
        second = asyncio.create_task(save_reviewed_answer(
            other, admin.account_id, question="Q?", answer="Second.", source="rfp:r1",
            external_id="rfp_item:i1",
        ))
        await asyncio.sleep(0.3)
        assert not second.done()  # waiting on the first's row
        await first.commit()
        again, created_again = await asyncio.wait_for(second, 10)
    finally:
        await other.close()
    assert (again.id, created_again, again.answer) == (saved.id, False, "Second.")
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 1


async def test_save_reviewed_answer__two_questions_of_one_text_reviewed_at_once_make_one_entry(
    database_url, conn, admin
):
    """Reviewing a question asked again (same text, case aside) updates the entry the first
    review saved. A probe: two such reviews at once each found no entry (neither saw the other's
    uncommitted insert, and no unique index spans two questions) and made two. The second now
    waits for the first, then updates its entry."""
    import asyncio

    import asyncpg
    from conftest import CONNECT, lock_waiters

    from service.domain.knowledge import save_reviewed_answer

    for question_id in ("q_one", "q_two"):
        await conn.execute("INSERT INTO questions (id, account_id, user_id, question)"
                           " VALUES ($1, $2, $3, 'Do you encrypt backups?')",
                           question_id, admin.account_id, admin.user_id)
    # `watch` looks for the waiter: within a transaction pg_stat_activity stays as first read.
    other, watch = [await asyncpg.connect(database_url, **CONNECT) for _ in range(2)]
    try:
        async with other.transaction():
            saved, created = await save_reviewed_answer(
                other, admin.account_id, question="Do you encrypt backups?", answer="First.",
                source="review of question q_one", reviewed_question="q_one",
            )
            assert created
            second = asyncio.create_task(save_reviewed_answer(
                conn, admin.account_id, question="do you encrypt backups?", answer="Second.",
                source="review of question q_two", reviewed_question="q_two",
            ))
            await lock_waiters(watch, 1)  # the second waits for the first
        again, created_again = await asyncio.wait_for(second, 10)
    finally:
        await other.close()
        await watch.close()
    assert (again.id, created_again, again.answer) == (saved.id, False, "Second.")
    assert await conn.fetchval("SELECT count(*) FROM knowledge_items") == 1
