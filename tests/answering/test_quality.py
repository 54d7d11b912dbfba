"""Answer quality through the real pipeline: vocabulary, pointers, Yes/No first, not covered,
learning from review, and the eval CLI's --json shape. Small fixtures of our own."""

from __future__ import annotations

import json

from cli_runner import cli
from helpers_questions import ask, wait_complete

from service.answering.engines.local import NOT_COVERED
from service.domain.knowledge import import_csv

KB = (
    "id,question,answer\n"
    'IAM-1,Is multi-factor authentication enforced for administrators?,"Yes, administrators '
    'sign in with multi-factor authentication using hardware keys."\n'
    'CEK-1,Are encryption keys rotated?,Please see CEK-2.\n'
    'CEK-2,How are cryptographic keys managed?,"Keys live in a KMS and rotate every 90 days."\n'
    'HRS-1,Is background screening performed for new hires?,"Yes. Every hire is screened '
    'before starting."\n'
    'LOG-1,Are audit logs retained?,"Audit logs are kept for one year in a central store."\n'
    'OFF-1,Where is your office?,"Our office is in Lisbon."\n'
)


async def _ask(client, admin, text: str) -> dict:
    body = await (await ask(client, admin.headers, text)).json()
    return await wait_complete(client, body["id"], admin.headers)


async def test_quality__synonym_makes_2fa_find_the_multi_factor_entry(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    done = await _ask(client, admin, "Is 2FA enforced for administrators?")
    assert done["sufficient_context"] is True
    assert done["references"][0]["external_id"] == "IAM-1"
    assert "hardware keys" in done["answer"]


async def test_quality__please_see_entry_answers_with_its_target(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    done = await _ask(client, admin, "Are encryption keys rotated?")
    assert done["sufficient_context"] is True
    assert "rotate every 90 days" in done["answer"] and "Please see" not in done["answer"]


async def test_quality__yes_no_question_gets_yes_first(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    done = await _ask(client, admin, "Do you perform background screening of new hires?")
    assert done["sufficient_context"] is True
    assert done["answer"].startswith("Yes")
    # Low detail keeps only the first sentence, and still leads with the entry's "Yes".
    body = await (await ask(client, admin.headers, "Is background screening performed for new "
                            "hires?", answer_detail_level=0)).json()
    low = await wait_complete(client, body["id"], admin.headers)
    assert low["answer"] == "Yes."


async def test_quality__the_entrys_yes_no_column_leads_the_answer(client, conn, admin):
    report = await import_csv(conn, admin.account_id, (
        "id,question,answer,yes_no\n"
        "ENC-1,Is customer data encrypted at rest?,AES-256 on every volume and backup.,Yes\n"
        "DEV-1,Do staff use personal laptops for work?,Only company laptops are allowed.,no\n"
        "BAD-1,Is there a canteen?,There is.,maybe\n"))
    assert [r.row for r in report.rejected] == [4]
    assert report.rejected[0].reason == (
        "yes_no must be Yes, No or blank (also Y, N, true, false, N/A, NA or -; any case); got 'maybe'")
    items = {i["external_id"]: i for i in (await (await client.get(
        "/api/v1/knowledge_base_items", headers=admin.headers)).json())["knowledge_base_items"]}
    assert (items["ENC-1"]["yes_no"], items["DEV-1"]["yes_no"]) == (True, False)

    done = await _ask(client, admin, "Is customer data encrypted at rest?")
    assert done["answer"] == "Yes. AES-256 on every volume and backup."
    assert done["confidence"] == 0.95  # its own question, its own Yes: verbatim in substance
    done = await _ask(client, admin, "Do staff use personal laptops for work?")
    assert done["answer"] == "No. Only company laptops are allowed."
    # A question that does not ask for a yes or a no gets the entry's answer alone.
    done = await _ask(client, admin, "How is customer data encrypted at rest?")
    assert done["answer"].startswith("AES-256")


async def test_quality__not_covered_is_insufficient_and_needs_attention(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    done = await _ask(client, admin, "Do you sponsor a rooftop beekeeping club for staff?")
    assert done["sufficient_context"] is False and done["requires_attention"] is True
    assert done["answer"] == NOT_COVERED and done["confidence"] < 0.8


async def test_quality__below_review_threshold_always_requires_attention(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    for text in ("How long do you keep audit logs?", "Is 2FA used by admins?",
                 "Where are your offices and data centers?"):
        done = await _ask(client, admin, text)
        assert done["confidence"] >= 0.6 or done["requires_attention"] is True, done


async def test_review__approved_answer_makes_the_next_ask_verbatim_and_confident(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    question = "How long are audit trails kept before deletion?"
    first = await _ask(client, admin, question)
    assert first["confidence"] < 0.8
    corrected = "Audit trails are kept for 13 months, then deleted."
    response = await client.post(f"/api/v1/questions/{first['id']}/review",
                                 json={"approved": True, "answer": corrected}, headers=admin.headers)
    assert response.status == 201, await response.text()
    entry = await response.json()
    assert entry["question"] == question and entry["answer"] == corrected
    again = await _ask(client, admin, question)
    assert again["answer"] == corrected and again["verbatim_answer"] is True
    assert again["sufficient_context"] is True and again["confidence"] >= 0.8
    assert again["requires_attention"] is False


async def test_review__reviewing_again_updates_the_entry_instead_of_adding_one(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    question = "How long are audit trails kept before deletion?"
    first = await _ask(client, admin, question)

    async def review(question_id, answer):
        return await client.post(f"/api/v1/questions/{question_id}/review",
                                 json={"approved": True, "answer": answer}, headers=admin.headers)

    saved = await review(first["id"], "Thirteen months.")
    assert saved.status == 201
    entry = await saved.json()
    again = await review(first["id"], "Two years, then deleted.")
    assert again.status == 200, await again.text()
    updated = await again.json()
    assert updated["id"] == entry["id"] and updated["answer"] == "Two years, then deleted."
    # The same question asked again (its own question id) and reviewed: still the one entry.
    second = await _ask(client, admin, question.upper())
    assert second["answer"] == "Two years, then deleted." and second["verbatim_answer"] is True
    third = await review(second["id"], "Three years.")
    assert third.status == 200 and (await third.json())["id"] == entry["id"]
    assert await conn.fetchval(
        "SELECT count(*) FROM knowledge_items WHERE account_id = $1 AND lower(question) = lower($2)",
        admin.account_id, question) == 1
    # Another question is another entry.
    other = await _ask(client, admin, "Where are backups stored?")
    assert (await review(other["id"], "In a second region.")).status == 201


async def test_review__approving_without_an_answer_to_approve_is_422(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    done = await _ask(client, admin, "Do you sponsor a rooftop beekeeping club for staff?")
    response = await client.post(f"/api/v1/questions/{done['id']}/review",
                                 json={"approved": True}, headers=admin.headers)
    assert response.status == 422
    missing = await client.post("/api/v1/questions/q_nope/review", json={"approved": True},
                                headers=admin.headers)
    assert missing.status == 404


def test_eval_cli__json_shape_on_a_tiny_set(database_url, tmp_path):
    (tmp_path / "kb.csv").write_text(KB)
    (tmp_path / "q.csv").write_text(
        "id,question\nQ1,Is 2FA enforced for administrators?\nQ2,Do you sponsor a rooftop "
        "beekeeping club?\n"
    )
    (tmp_path / "l.csv").write_text("question_id,kb_id,alt_kb_ids,coverage\nQ1,IAM-1,,full\nQ2,,,none\n")
    result = cli(database_url, "eval", "--kb", str(tmp_path / "kb.csv"), "--questions",
                 str(tmp_path / "q.csv"), "--labels", str(tmp_path / "l.csv"), "--json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1
    out = json.loads(result.stdout)
    assert out["hit_at_1"] == 1.0 and out["hit_at_5"] == 1.0 and out["decision_accuracy"] == 1.0
    q1, q2 = out["questions"]
    assert set(q1) >= {"id", "references", "sufficient_context", "confidence", "verbatim_answer",
                       "answer"}
    assert q1["id"] == "Q1" and q1["references"][0] == "IAM-1" and q1["sufficient_context"] is True
    assert q2["sufficient_context"] is False


def test_eval_cli__review_learns_and_reviewing_twice_adds_one_entry_per_question(
    database_url, tmp_path
):
    (tmp_path / "kb.csv").write_text(KB)
    questions = {"Q1": "Is 2FA required for admins?", "Q2": "Do you screen new hires?",
                 "Q3": "How long are audit trails kept?", "Q4": "How are keys managed?",
                 "Q5": "Do you sponsor a rooftop beekeeping club?"}
    (tmp_path / "q.csv").write_text("id,question\n" + "".join(
        f"{k},{v}\n" for k, v in questions.items()))
    (tmp_path / "l.csv").write_text(
        "question_id,kb_id,alt_kb_ids,coverage\nQ1,IAM-1,,full\nQ2,HRS-1,,full\nQ3,LOG-1,,full\n"
        "Q4,CEK-2,,full\nQ5,,,none\n")
    result = cli(database_url, "eval", "--kb", str(tmp_path / "kb.csv"), "--questions",
                 str(tmp_path / "q.csv"), "--labels", str(tmp_path / "l.csv"), "--review", "--json")
    assert result.returncode == 0, result.stderr
    review = json.loads(result.stdout)["review"]
    # Half of the four answerable questions were reviewed, each twice (once after the first
    # answer, once after the second ask): one entry each, never two.
    assert review["reviewed"] == 2 and review["entries_added"] == 2
    # Asked again, each reviewed question finds the entry its review saved, word for word.
    assert review["reviewed_after_hit_at_1"] == 1.0
    assert review["reviewed_after_confidence"] >= 0.9
    assert review["after"]["hit_at_1"] >= review["before"]["hit_at_1"]
