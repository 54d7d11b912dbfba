"""Library care: owners, review dates, stale entries, versions, duplicates, conflicts and merges."""

from __future__ import annotations

import asyncio
import random
import string
import time
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from helpers_questions import add_entry, ask, wait_all_complete, wait_complete

from service import db
from service.config import QuestionsConfig
from service.domain.bands import band
from service.domain.knowledge import import_csv
from service.domain.library import (
    MAX_FINDINGS,
    classify,
    duplicate_report,
    find_duplicates,
    quantities,
    yes_no_lead,
)
from service.domain.models import Page
from service.web.keys import LIBRARY_JOBS
from tests.conftest import CONNECT

ITEMS = "/api/v1/knowledge_base_items"


def today():
    return datetime.now(UTC).date()


async def _create(client, actor, **fields):
    response = await client.post(ITEMS, json={"knowledge_base_item": fields}, headers=actor.headers)
    assert response.status == 201, await response.text()
    return await response.json()


async def test_new_entry__review_date_one_period_ahead_not_stale_version_1(client, admin):
    item = await _create(client, admin, question="Do you encrypt backups?", answer="Yes.")
    assert item["review_by"] == (today() + timedelta(days=365)).isoformat()
    assert (item["stale"], item["version"], item["owner_id"], item["reviewed_at"]) == (
        False, 1, None, None)


async def test_stale_filter__lists_only_entries_past_their_review_date(client, conn, admin):
    fresh = await _create(client, admin, answer="fresh")
    old = await _create(client, admin, answer="old")
    older = await _create(client, admin, answer="older")
    await conn.execute("UPDATE knowledge_items SET review_by = current_date - 3 WHERE id = $1", old["id"])
    await conn.execute("UPDATE knowledge_items SET review_by = current_date - 9 WHERE id = $1",
                       older["id"])
    body = await (await client.get(f"{ITEMS}?stale=true", headers=admin.headers)).json()
    assert [i["id"] for i in body["knowledge_base_items"]] == [older["id"], old["id"]]
    assert all(i["stale"] for i in body["knowledge_base_items"])
    assert body["pagination"]["total_count"] == 2
    everything = await (await client.get(ITEMS, headers=admin.headers)).json()
    assert fresh["id"] in {i["id"] for i in everything["knowledge_base_items"]}
    bad = await client.get(f"{ITEMS}?stale=maybe", headers=admin.headers)
    assert bad.status == 400 and "stale" in (await bad.json())["error"]["message"]


async def test_owner__set_by_patch_filtered_by_owner_and_me(client, admin, make_member):
    colleague = await make_member(admin.account_id)
    mine = await _create(client, admin, answer="mine")
    theirs = await _create(client, admin, answer="theirs")
    for item, owner in ((mine, admin.member_id), (theirs, colleague.member_id)):
        response = await client.patch(f"{ITEMS}/{item['id']}",
                                      json={"knowledge_base_item": {"owner_id": owner}},
                                      headers=admin.headers)
        assert response.status == 200
        assert (await response.json())["owner_id"] == owner
    body = await (await client.get(f"{ITEMS}?owner={colleague.member_id}", headers=admin.headers)).json()
    assert [i["id"] for i in body["knowledge_base_items"]] == [theirs["id"]]
    body = await (await client.get(f"{ITEMS}?owner=me", headers=admin.headers)).json()
    assert [i["id"] for i in body["knowledge_base_items"]] == [mine["id"]]


async def test_owner_filter__neither_me_nor_a_member_id_is_400(client, admin):
    # The RFP items' assignee filter takes user ids (7); an entry's owner is a member (mbr_…).
    # owner=7 was a 200 with no entries, as if nobody owned any, rather than a mistake named.
    await _create(client, admin, answer="x")
    for value in ("7", "bogus", "ME"):
        response = await client.get(f"{ITEMS}?owner={value}", headers=admin.headers)
        assert response.status == 400
        assert (await response.json())["error"] == {
            "code": "parameter_invalid",
            "message": f"owner must be me or a member id (mbr_…, as owner_id shows it); got {value!r}",
        }
    unknown = await client.get(f"{ITEMS}?owner=mbr_nobody", headers=admin.headers)
    assert unknown.status == 200 and (await unknown.json())["knowledge_base_items"] == []
    everything = await client.get(f"{ITEMS}?owner=", headers=admin.headers)
    assert len((await everything.json())["knowledge_base_items"]) == 1


async def test_owner__must_be_a_member_of_the_account(client, admin, make_account):
    stranger = await make_account()
    item = await _create(client, admin, answer="x")
    response = await client.patch(f"{ITEMS}/{item['id']}",
                                  json={"knowledge_base_item": {"owner_id": stranger.member_id}},
                                  headers=admin.headers)
    assert response.status == 422
    assert "is not a member of this account" in (await response.json())["error"]["details"][0]


async def test_reviewed__clears_staleness_and_records_when(client, conn, admin):
    item = await _create(client, admin, answer="Yes.")
    await conn.execute("UPDATE knowledge_items SET review_by = current_date - 1 WHERE id = $1", item["id"])
    assert (await (await client.get(f"{ITEMS}/{item['id']}", headers=admin.headers)).json())["stale"]
    response = await client.post(f"{ITEMS}/{item['id']}/reviewed", headers=admin.headers)
    assert response.status == 200
    reviewed = await response.json()
    assert reviewed["stale"] is False and reviewed["reviewed_at"] is not None
    assert reviewed["review_by"] == (today() + timedelta(days=365)).isoformat()
    response = await client.post(f"{ITEMS}/{item['id']}/reviewed", json={"review_by": "2031-01-31"},
                                 headers=admin.headers)
    assert (await response.json())["review_by"] == "2031-01-31"
    missing = await client.post(f"{ITEMS}/kb_nope/reviewed", headers=admin.headers)
    assert missing.status == 404


async def test_versions__every_change_keeps_the_previous_version_who_and_when(
    client, admin, make_member
):
    colleague = await make_member(admin.account_id)
    item = await _create(client, admin, question="Retention?", answer="We keep logs 30 days.")
    await client.patch(f"{ITEMS}/{item['id']}",
                       json={"knowledge_base_item": {"answer": "We keep logs 90 days."}},
                       headers=colleague.headers)
    changed = await (await client.patch(f"{ITEMS}/{item['id']}",
                                        json={"knowledge_base_item": {"title": "Logs"}},
                                        headers=admin.headers)).json()
    assert changed["version"] == 3 and changed["answer"] == "We keep logs 90 days."
    response = await client.get(f"{ITEMS}/{item['id']}/versions", headers=admin.headers)
    assert response.status == 200
    versions = (await response.json())["versions"]
    assert [(v["version"], v["current"], v["answer"], v["title"]) for v in versions] == [
        (3, True, "We keep logs 90 days.", "Logs"),
        (2, False, "We keep logs 90 days.", None),
        (1, False, "We keep logs 30 days.", None),
    ]
    assert [v["written_by"] for v in versions] == [admin.member_id, colleague.member_id, admin.member_id]
    assert [v["replaced_by"] for v in versions[1:]] == [admin.member_id, colleague.member_id]
    assert versions[2]["change"] == "updated"


async def test_versions__paginated_newest_first_the_current_one_first(client, conn, admin):
    item = await _create(client, admin, answer="v1")
    for n in range(2, 24):  # 23 versions: 20 a page
        await client.patch(f"{ITEMS}/{item['id']}", headers=admin.headers,
                           json={"knowledge_base_item": {"answer": f"v{n}"}})

    async def page(number):
        response = await client.get(f"{ITEMS}/{item['id']}/versions?page={number}",
                                    headers=admin.headers)
        assert response.status == 200
        return await response.json()

    first, second, beyond = await page(1), await page(2), await page(3)
    assert [v["version"] for v in first["versions"]] == list(range(23, 3, -1))
    assert first["versions"][0]["current"] and not any(v["current"] for v in first["versions"][1:])
    assert [v["version"] for v in second["versions"]] == [3, 2, 1]
    assert beyond["versions"] == []
    assert first["pagination"] == {"current_page": 1, "total_pages": 2, "total_count": 23,
                                   "items_per_page": 20, "from": 1, "to": 20}
    assert (second["pagination"]["from"], second["pagination"]["to"]) == (21, 23)
    # Deleted: only kept versions, the newest (the deletion's) first.
    assert (await client.delete(f"{ITEMS}/{item['id']}", headers=admin.headers)).status == 204
    gone = await page(2)
    assert [v["version"] for v in gone["versions"]] == [3, 2, 1]
    assert gone["pagination"]["total_count"] == 23
    bad = await client.get(f"{ITEMS}/{item['id']}/versions?page=0", headers=admin.headers)
    assert bad.status == 400


async def test_versions__kept_after_delete(client, admin):
    item = await _create(client, admin, answer="gone soon")
    assert (await client.delete(f"{ITEMS}/{item['id']}", headers=admin.headers)).status == 204
    versions = (await (await client.get(f"{ITEMS}/{item['id']}/versions",
                                        headers=admin.headers)).json())["versions"]
    assert [(v["version"], v["change"], v["answer"]) for v in versions] == [(1, "deleted", "gone soon")]


async def test_versions__name_the_member_who_created_and_who_deleted_the_entry(client, admin, make_member):
    colleague = await make_member(admin.account_id)
    item = await _create(client, admin, answer="Written by the admin.")
    assert (await client.delete(f"{ITEMS}/{item['id']}", headers=colleague.headers)).status == 204
    versions = (await (await client.get(f"{ITEMS}/{item['id']}/versions",
                                        headers=admin.headers)).json())["versions"]
    assert [(v["written_by"], v["replaced_by"], v["change"]) for v in versions] == [
        (admin.member_id, colleague.member_id, "deleted")]


async def test_stale_entry__answer_asks_for_attention_never_auto_answer(client, conn, admin):
    fresh_id = await add_entry(conn, admin.account_id, "Is data encrypted at rest?", "Yes, with AES-256.")
    first = await wait_complete(client, (await (await ask(
        client, admin.headers, "Is data encrypted at rest?")).json())["id"], admin.headers)
    settings = QuestionsConfig()
    assert band(first["confidence"], first["requires_attention"], settings) == "auto_answer"
    assert first["references"][0] == {**first["references"][0], "id": fresh_id, "version": 1}

    await conn.execute("UPDATE knowledge_items SET review_by = current_date - 1 WHERE id = $1", fresh_id)
    second = await wait_complete(client, (await (await ask(
        client, admin.headers, "Is data encrypted at rest?")).json())["id"], admin.headers)
    assert second["answer"] == "Yes, with AES-256."
    assert second["requires_attention"] is True
    assert any(fresh_id in point and "past its review date" in point
               for point in second["attention_points"])
    assert band(second["confidence"], second["requires_attention"], settings) != "auto_answer"
    # The question points at the version it used, which a change does not move.
    assert second["references"][0]["version"] == 2  # the review_by change was version 2


async def test_stale_entry__rfp_item_confidence_stays_under_the_auto_answer_band(client, conn, admin):
    kb_id = await add_entry(conn, admin.account_id, "Is data encrypted at rest?", "Yes, with AES-256.")
    await conn.execute("UPDATE knowledge_items SET review_by = current_date - 1 WHERE id = $1", kb_id)
    rfp = await (await client.post("/api/v1/rfps", headers=admin.headers, json={"rfp": {
        "title": "Bank", "items": [{"question": "Is data encrypted at rest?"}]}})).json()
    response = await client.post(f"/api/v1/rfps/{rfp['id']}/answer", headers=admin.headers)
    assert response.status == 202
    await wait_all_complete(conn, 20)
    item = await conn.fetchrow("SELECT state::text, confidence FROM rfp_items WHERE rfp_id = $1",
                               rfp["id"])
    assert item["state"] in ("auto_answered", "needs_input")  # auto_answered: the review band here
    assert band(item["confidence"], False, QuestionsConfig()) != "auto_answer"


# -- duplicates and conflicts --------------------------------------------------------------------

LIBRARY = [
    ("dup1", "Do you encrypt customer data at rest?", "Yes, all customer data is encrypted with AES-256."),
    ("dup2", "Do you encrypt customer data at rest ?", "We use AES-256 for stored data."),
    ("yes", "Do you support single sign-on with SAML?", "Yes, SAML 2.0 and OIDC."),
    ("no", "Do you support single sign-on via SAML?", "No, not at this time."),
    ("r30", "How long do you retain audit logs?", "Audit logs are retained for 30 days."),
    ("r90", "How long are audit logs retained?", "Audit logs are retained for 90 days."),
    ("ans1", "Describe your backup schedule.",
     "Backups run nightly and are kept for one year in a second region."),
    ("ans2", "How often do you back up?",
     "Backups run nightly and are kept for one year in a second region!"),
    ("lone", "Do you have a bug bounty?", "Yes, through a public programme."),
]


async def _library(conn, account_id) -> dict[str, str]:
    return {name: await add_entry(conn, account_id, q, a) for name, q, a in LIBRARY}


async def test_find_duplicates__finds_duplicates_and_conflicts_with_reasons(conn, admin):
    ids = await _library(conn, admin.account_id)
    run = await find_duplicates(conn, admin.account_id, duplicate_similarity=0.8, conflict_similarity=0.5)
    assert run is not None and run.entries == len(LIBRARY)
    rows = await conn.fetch("SELECT * FROM knowledge_duplicates WHERE account_id = $1", admin.account_id)
    name = {v: k for k, v in ids.items()}
    found = {frozenset((name[r["item_a"]], name[r["item_b"]])): (r["kind"], r["reason"]) for r in rows}
    assert found[frozenset(("dup1", "dup2"))] == ("duplicate", "near-identical questions")
    assert found[frozenset(("yes", "no"))][0] == "conflict"
    assert found[frozenset(("yes", "no"))][1] == (
        f"same question answered Yes by {ids['yes']} and No by {ids['no']}")
    assert found[frozenset(("r30", "r90"))] in {
        ("conflict", f"same question, different numbers: {x} day vs {y} day")
        for x, y in ((30, 90), (90, 30))}
    assert found[frozenset(("ans1", "ans2"))] == ("duplicate", "near-identical answers")
    assert not any("lone" in pair for pair in found)


async def test_duplicates_endpoint__computed_in_the_background_then_fresh(client, conn, admin):
    await _library(conn, admin.account_id)
    first = await client.get(f"{ITEMS}/duplicates", headers=admin.headers)
    assert first.status == 200
    assert (await first.json())["state"] == "computing"
    deadline = time.monotonic() + 20
    while True:
        body = await (await client.get(f"{ITEMS}/duplicates", headers=admin.headers)).json()
        if body["state"] == "fresh":
            break
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    kinds = sorted(pair["kind"] for pair in body["pairs"])
    assert kinds == ["conflict", "conflict", "duplicate", "duplicate"]
    assert body["pairs"][0]["kind"] == "conflict"  # conflicts first
    assert body["entries"] == len(LIBRARY)
    assert all(0 < pair["similarity"] <= 1 and len(pair["items"]) == 2 for pair in body["pairs"])
    await _create(client, admin, answer="a change")
    assert (await (await client.get(f"{ITEMS}/duplicates", headers=admin.headers)).json())["state"] == (
        "outdated")


def test_classify__leads_and_quantities():
    assert yes_no_lead("Yes, always.") is True and yes_no_lead("No.") is False
    assert yes_no_lead("Not applicable") is None and yes_no_lead("anything", False) is False
    assert quantities("kept 90 days and 1 year, 99.9% uptime") == {
        "day": {90.0}, "year": {1.0}, "%": {99.9}}
    a = {"id": "a", "answer": "Retained 12 months.", "yes_no": None}
    b = {"id": "b", "answer": "Retained 12 months.", "yes_no": None}
    assert classify(a, b, 0.7, None, 0.8) is None  # similar enough to compare, same numbers
    assert classify(a, b, 0.9, None, 0.8).kind == "duplicate"


# -- merging -------------------------------------------------------------------------------------


async def test_merge__questions_citing_the_duplicate_cite_the_kept_entry(client, conn, admin):
    kept = await add_entry(conn, admin.account_id, "Is data encrypted at rest?", "Yes, with AES-256.")
    question = await wait_complete(client, (await (await ask(
        client, admin.headers, "Is data encrypted at rest?")).json())["id"], admin.headers)
    assert question["references"][0]["id"] == kept
    keeper = await add_entry(conn, admin.account_id, "Is customer data encrypted at rest?",
                             "Yes, AES-256 at rest.")
    response = await client.post(f"{ITEMS}/{keeper}/merge", json={"duplicate_id": kept},
                                 headers=admin.headers)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["merged_id"] == kept and body["questions_repointed"] == 1
    after = await (await client.get(f"/api/v1/questions/{question['id']}", headers=admin.headers)).json()
    assert after["references"][0]["id"] == keeper
    stored = await conn.fetchval("SELECT \"references\" FROM questions WHERE id = $1", question["id"])
    assert f'"merged_from": "{kept}"' in stored
    assert (await client.get(f"{ITEMS}/{kept}", headers=admin.headers)).status == 404
    versions = (await (await client.get(f"{ITEMS}/{kept}/versions", headers=admin.headers)).json())[
        "versions"]
    assert versions[0]["change"] == "merged" and versions[0]["replaced_by"] == admin.member_id


async def test_merge__rfp_items_saved_as_the_duplicate_follow_and_bad_ids_are_422(client, conn, admin):
    kept = await add_entry(conn, admin.account_id, "A?", "Yes.")
    dup = await add_entry(conn, admin.account_id, "A ?", "Yes!")
    rfp = await (await client.post("/api/v1/rfps", headers=admin.headers, json={"rfp": {
        "title": "T", "items": [{"question": "A?"}]}})).json()
    await conn.execute("UPDATE rfp_items SET knowledge_item_id = $1 WHERE rfp_id = $2", dup, rfp["id"])
    response = await client.post(f"{ITEMS}/{kept}/merge", json={"duplicate_id": dup}, headers=admin.headers)
    assert response.status == 200
    assert await conn.fetchval("SELECT knowledge_item_id FROM rfp_items WHERE rfp_id = $1", rfp["id"]) == kept
    same = await client.post(f"{ITEMS}/{kept}/merge", json={"duplicate_id": kept}, headers=admin.headers)
    assert same.status == 422
    gone = await client.post(f"{ITEMS}/{kept}/merge", json={"duplicate_id": dup}, headers=admin.headers)
    assert gone.status == 422


# -- the operator CLI ----------------------------------------------------------------------------


async def test_cli__kb_stale_and_kb_duplicates(database_url, conn, admin):
    from cli_runner import cli, cli_json

    ids = await _library(conn, admin.account_id)
    await conn.execute("UPDATE knowledge_items SET review_by = current_date - 5 WHERE id = $1", ids["lone"])
    stale = await asyncio.to_thread(cli_json, database_url, "kb", "stale", "--account", admin.account_id)
    assert [entry["id"] for entry in stale["stale"]] == [ids["lone"]]
    text = await asyncio.to_thread(cli, database_url, "kb", "stale", "--account", admin.account_id)
    assert text.returncode == 0 and text.stdout.startswith("1 stale entry")
    found = await asyncio.to_thread(cli_json, database_url, "kb", "duplicates", "--account",
                                    admin.account_id)
    assert found["state"] == "fresh"
    assert sorted(pair["kind"] for pair in found["pairs"]) == ["conflict", "conflict", "duplicate",
                                                              "duplicate"]
    missing = await asyncio.to_thread(cli, database_url, "kb", "stale", "--account", "acct_nope")
    assert missing.returncode == 1


async def test_find_duplicates__a_second_run_replaces_the_first(conn, admin):
    await _library(conn, admin.account_id)
    for _ in range(2):
        run = await find_duplicates(conn, admin.account_id, duplicate_similarity=0.8,
                                    conflict_similarity=0.5)
        assert run is not None and run.findings == 4
    assert await conn.fetchval("SELECT count(*) FROM knowledge_duplicates") == 4


def _alike_groups(groups: int, size: int = 21) -> list[tuple[str, str]]:
    """Groups of entries asking one thing in words of their own (each entry is near-identical to
    the 20 others of its group: 210 pairs a group), the first group answered Yes and No in turn."""
    return [(f"How are grp{g}alpha grp{g}beta grp{g}gamma records protected case {k}?",
             f"{('Yes' if k % 2 else 'No') if g == 0 else 'We'} protect them case {k}.")
            for g in range(groups) for k in range(size)]


async def test_find_duplicates__keeps_only_the_findings_pages_reach(conn, admin):
    """Finding (helper-95's probe): a run stored every finding, and every GET /duplicates (any
    reader's) and /kb/care sorted and counted them all, though pages reach only the first 10,000:
    100,000 entries' 450,224 findings took 0.5-0.55 s of database time a GET (page 100: 0.95 s).
    A run keeps the first MAX_FINDINGS in the report's order, conflicts first."""
    entries = _alike_groups(30)
    text = "question,answer\n" + "".join(f"{q},{a}\n" for q, a in entries)
    assert (await import_csv(conn, admin.account_id, text)).imported == len(entries)
    run = await find_duplicates(conn, admin.account_id, duplicate_similarity=0.8,
                                conflict_similarity=0.6)
    assert run is not None and run.findings > MAX_FINDINGS  # found, as before
    kinds = [r["kind"] for r in await conn.fetch(
        "SELECT kind FROM knowledge_duplicates WHERE account_id = $1", admin.account_id)]
    assert len(kinds) == MAX_FINDINGS
    assert kinds.count("conflict") == 110  # group 0's Yes/No pairs: every one kept
    report = await duplicate_report(conn, admin.account_id, page=Page(number=1, size=100))
    assert report["pagination"]["total_count"] == MAX_FINDINGS


async def test_versions__a_reimport_keeps_the_imported_version_and_who_imported_it(client, admin,
                                                                                   make_member):
    colleague = await make_member(admin.account_id)
    for actor, answer in ((admin, "Kept 30 days."), (colleague, "Kept 90 days.")):
        response = await client.post(f"{ITEMS}/import", data=f"id,question,answer\nR1,Retention?,{answer}\n",
                                     headers={**actor.headers, "Content-Type": "text/csv"})
        assert response.status == 200
    listed = (await (await client.get(ITEMS, headers=admin.headers)).json())["knowledge_base_items"]
    versions = (await (await client.get(f"{ITEMS}/{listed[0]['id']}/versions",
                                        headers=admin.headers)).json())["versions"]
    assert [(v["version"], v["answer"], v["written_by"]) for v in versions] == [
        (2, "Kept 90 days.", colleague.member_id), (1, "Kept 30 days.", admin.member_id)]


async def test_review_period__from_config_for_every_write_path(aiohttp_client, config, conn, admin):
    from conftest import with_config

    from service.web.app import create_app

    client = await aiohttp_client(create_app(with_config(config, library={"review_period_days": 30})))
    item = await _create(client, admin, answer="API")
    assert item["review_by"] == (today() + timedelta(days=30)).isoformat()
    imported = await add_entry(conn, admin.account_id, "Q?", "written without the API")
    review_by = await conn.fetchval("SELECT review_by FROM knowledge_items WHERE id = $1", imported)
    assert review_by == today() + timedelta(days=30)


@pytest.mark.parametrize(("role", "scopes", "says"), [
    ("viewer", "read", "needs a token with the 'write' scope"),
    ("admin", "read", "needs a token with the 'write' scope"),
    ("viewer", "read,write", "needs the admin or member role; yours is viewer"),
])
async def test_duplicates_endpoint__refresh_needs_who_may_edit(
    client, conn, admin, make_member, role, scopes, says
):
    """A probe: a viewer's or read token's GET ?refresh=true started a detection run (~1.3 s of
    CPU at 5,100 entries), as often as it liked."""
    await _library(conn, admin.account_id)
    reader = await make_member(admin.account_id, role, scopes)
    refused = await client.get(f"{ITEMS}/duplicates?refresh=true", headers=reader.headers)
    assert refused.status == 403
    assert says in (await refused.json())["error"]["message"]
    assert client.app[LIBRARY_JOBS] == {}  # no run started
    assert (await client.get(f"{ITEMS}/duplicates", headers=reader.headers)).status == 200
    member = await make_member(admin.account_id, "member", "read,write")
    started = await client.get(f"{ITEMS}/duplicates?refresh=true", headers=member.headers)
    assert started.status == 200


def test_classify_library__many_copies_of_one_entry_cost_as_many_findings_not_their_square():
    """3,000 copies of one entry (a 100 KB CSV) were 4.5 million pairs: 41 s of CPU and 1.8 GB in
    the service process, and 10,000 copies exhausted its memory. Copies now pair with the first of
    them, and near-copies each with at most MAX_CANDIDATES others."""
    from service.domain.library import MAX_CANDIDATES, classify_library

    copies = [{"id": f"kb_{i:05d}", "question": "Do you encrypt data at rest?",
               "answer": "Yes, with AES-256.", "yes_no": True} for i in range(3000)]
    started = time.process_time()
    found = classify_library(copies, 0.9, 0.8)
    assert time.process_time() - started < 2.0
    assert len(found) == 2999 and {f.item_a for f in found} == {"kb_00000"}
    near = [{"id": f"kb_{i:05d}", "question": "Do you encrypt customer data at rest with managed "
             f"keys rotated every year by the security team, number {i}?", "answer": f"Yes {i}.",
             "yes_no": None} for i in range(200)]
    found = classify_library(near, 0.9, 0.8)
    assert 0 < len(found) <= 200 * MAX_CANDIDATES  # every pair of the 200 was 19,900


def test_classify_library__questions_are_compared_by_their_opening():
    """A comparison costs as many trigrams as the texts hold: 10,000-character questions cost
    ~80 s of CPU per 100 MB. Questions are compared by their first QUESTION_OPENING characters,
    so two that open alike are alike whatever follows."""
    from service.domain.library import QUESTION_OPENING, classify_library

    letters = random.Random(7)
    opening = " ".join(f"control{n} evidence{n}" for n in range(QUESTION_OPENING // 10))
    entries = [
        {"id": f"kb_{i}", "answer": f"Answer {i} in its own words.", "yes_no": None,
         "question": opening[:QUESTION_OPENING] + " " + " ".join(
             "".join(letters.choices(string.ascii_lowercase, k=9)) for _ in range(1100))}
        for i in range(2)
    ]
    assert all(len(e["question"]) > 10 * QUESTION_OPENING for e in entries)
    found = classify_library(entries, 0.9, 0.8)
    assert [(f.item_a, f.item_b) for f in found] == [("kb_0", "kb_1")]


async def test_lock_items_saved_as__locks_only_the_accounts_own_items(conn, database_url, admin,
                                                                        make_account):
    """Merging or deleting locks the RFP items saved as the entries named before it finds them in
    the account: another account's entry id, sent by an admin, locked that account's items (their
    approvals waited) until the refusal's rollback."""
    other = await make_account("Other")
    theirs = await add_entry(conn, other.account_id, "MFA?", "Yes.")
    rfp_id = "rfp_theirs"
    await conn.execute("INSERT INTO rfps (id, account_id, owner_id, title) VALUES ($1, $2, $3, 'T')",
                       rfp_id, other.account_id, other.user_id)
    await conn.execute("INSERT INTO rfp_items (id, rfp_id, question, position, knowledge_item_id)"
                       " VALUES ('item_theirs', $1, 'MFA?', 1, $2)", rfp_id, theirs)
    attacker = await asyncpg.connect(database_url, **CONNECT)
    try:
        await _lock_as(attacker, conn, theirs, admin.account_id, other.account_id)
    finally:
        await attacker.close()


async def _lock_as(attacker, conn, theirs: str, account_id: str, owner_id: str) -> None:
    async with attacker.transaction():
        mine = await attacker.fetch(db.query("lock_items_saved_as"), [theirs], account_id)
        assert mine == []
        async with conn.transaction():  # the other account's approval takes its item at once
            assert await conn.fetchval(
                "SELECT id FROM rfp_items WHERE id = 'item_theirs' FOR UPDATE NOWAIT") == "item_theirs"
        owners = await attacker.fetch(db.query("lock_items_saved_as"), [theirs], owner_id)
        assert [row["id"] for row in owners] == ["item_theirs"]  # the owner's own call does lock it


def test_classify_library__a_library_of_words_found_once_is_held_in_little_memory():
    """A probe's 30,000 entries of words no other entry has held 1.5 GB in the service process:
    a list per word, every entry's word set and a copy of its words. 2,000 such entries peaked
    at 61 MB so; now a word of one entry keeps only that entry's id and words are found again
    where needed (19 MB measured)."""
    letters = random.Random(3)
    entries = [{"id": f"kb_{i:05d}", "question": _words(letters, 110, 8)[:1000],
                "answer": _words(letters, 220, 8)[:2000], "yes_no": None} for i in range(2000)]
    peak = _peak_classifying(entries)
    assert peak < 30_000_000, peak


def _words(letters: random.Random, n: int, k: int) -> str:
    """`n` random words of `k` letters: words no other entry has."""
    return " ".join("".join(letters.choices(string.ascii_lowercase, k=k)) for _ in range(n))


def _peak_classifying(entries: list[dict]) -> int:
    """The peak of memory allocated while the library's duplicates are found (none expected)."""
    import tracemalloc

    from service.domain.library import classify_library

    tracemalloc.start()
    try:
        assert classify_library(entries, 0.9, 0.8) == []
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def test_duplicate_entries__reads_only_the_opening_of_a_question(conn, admin):
    """Questions are compared by their first QUESTION_OPENING characters: the rest is not read."""
    from service.domain.library import QUESTION_OPENING

    await add_entry(conn, admin.account_id, "Do you encrypt? " * 1000, "Yes.")
    rows = await conn.fetch(db.query("duplicate_entries"), admin.account_id)
    assert [len(row["question"]) for row in rows] == [QUESTION_OPENING]


def test_classify_library__entries_compared_in_pairs_are_held_in_little_memory():
    """Each entry compared kept its trigram set (up to ~100 KB for a question's 1,000 characters)
    until the run ended: 2,000 entries in pairs sharing two words, the rest of their words their
    own, peaked at 154 MB (6,000: 462 MB). At most GRAMS_KEPT sets are kept now (24 MB)."""
    letters = random.Random(5)
    entries = [{"id": f"kb_{letters.getrandbits(40):010x}",
                "question": f"pair{i // 2}a pair{i // 2}b {_words(letters, 160, 6)}"[:1000],
                "answer": _words(letters, 5, 6), "yes_no": None} for i in range(2000)]
    peak = _peak_classifying(entries)
    assert peak < 50_000_000, peak
