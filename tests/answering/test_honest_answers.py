"""Honest answers from the local engine (issue 16, item 4), on a small fixture of our own: a
"Yes." leads only when the entry's own yes/no answers the question asked; an entry that mentions
the question's subject in passing is quoted at most where it bears on it, never answered "Yes.";
the extract is the entry's sentences that bear on the question; the rationale says "verbatim"
exactly when verbatim_answer is true."""

from __future__ import annotations

from helpers_questions import ask, wait_complete

from service.answering.engines import AnswerRequest
from service.answering.engines.local import LocalEngine
from service.answering.retrieval import Reference
from service.domain.knowledge import import_csv

# A small knowledge base in the shape of the one where the trap was found: every word of the MFA
# question occurs somewhere, MFA itself only in passing, in a training entry that says "Yes".
KB = (
    "id,question,answer,yes_no\n"
    'TRN-1,Is security awareness training provided to all employees?,"The content of this '
    "training includes all relevant areas of security, from phishing to password hygiene and MFA. "
    'Employees complete it when hired and every year after.",Yes\n'
    'ACC-1,Are user accounts reviewed every quarter?,"Managers review the accounts of their teams '
    'every quarter.",Yes\n'
    'ADM-1,Are administrator actions logged?,"Every admin action is logged to a central store '
    'kept for a year.",Yes\n'
    'PWD-1,Do you enforce a password policy?,"Passwords must be at least 12 characters long.",Yes\n'
    'ENC-1,Is customer data encrypted at rest?,"Customer data is encrypted with AES-256.",Yes\n'
    'BCK-1,How often are backups taken?,"Backups are taken every night and kept for 35 days.",\n'
)
MFA_QUESTION = "Do you enforce MFA for all admin accounts?"


async def _ask(client, admin, text: str, **extra) -> dict:
    body = await (await ask(client, admin.headers, text, **extra)).json()
    return await wait_complete(client, body["id"], admin.headers)


async def test_trap__an_entry_mentioning_mfa_in_passing_is_not_a_yes(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    done = await _ask(client, admin, MFA_QUESTION)
    assert done["references"][0]["external_id"] == "TRN-1"  # the trap is set: it ranks first
    assert not (done["answer"].startswith("Yes") and done["sufficient_context"] is True), done
    assert not done["answer"].startswith("Yes"), done
    # Whatever it says, it is not the whole training entry passed off as an answer.
    assert "Employees complete it when hired" not in done["answer"]


async def test_yes_no__the_entrys_own_question_asked_again_leads_with_its_yes(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    done = await _ask(client, admin, "Do you enforce a password policy?")
    assert done["answer"] == "Yes. Passwords must be at least 12 characters long."
    # Not a yes/no question: no "Yes." even from a Yes entry.
    done = await _ask(client, admin, "How often are user accounts reviewed?")
    assert not done["answer"].startswith("Yes"), done


async def test_rationale__says_verbatim_exactly_when_the_answer_is_verbatim(client, conn, admin):
    await import_csv(conn, admin.account_id, KB)
    for text in (MFA_QUESTION, "Do you enforce a password policy?",
                 "How often are backups taken?", "How long are backups kept?",
                 "Is customer data encrypted at rest?", "Are admin actions logged centrally?"):
        done = await _ask(client, admin, text)
        says = (done["confidence_rationale"] or "").lower().startswith("verbatim")
        assert says == done["verbatim_answer"], done


ENTRY = Reference(
    kb_item_id="kb_1", external_id="SEC-1", title=None,
    question="Describe your information security program.",
    answer="Our security team reports to the CISO. Firewalls filter all inbound traffic. "
           "Vulnerability scans run weekly against every host. Staff are trained every year. "
           "Critical vulnerabilities found by scans are patched within 7 days.",
    source=None, score=0.5, question_match=0.1, coverage=0.6,
)


async def test_extract__quotes_the_sentences_that_bear_on_the_question_by_detail_level():
    question = "How often do you run vulnerability scans, and how fast are critical findings patched?"
    engine = LocalEngine()
    texts = []
    for level in (0, 1, 2):
        draft = await engine.answer(AnswerRequest(question=question, references=(ENTRY,),
                                                  detail_level=level))
        assert draft.sufficient_context is True
        texts.append(draft.text)
    low, normal, high = texts
    # Low: the one sentence that bears most; normal: those that bear, in the entry's order.
    assert low == "Critical vulnerabilities found by scans are patched within 7 days."
    assert normal == ("Vulnerability scans run weekly against every host. Critical vulnerabilities "
                      "found by scans are patched within 7 days.")
    assert "CISO" not in normal and "Firewalls" not in normal
    assert len(high) >= len(normal)

