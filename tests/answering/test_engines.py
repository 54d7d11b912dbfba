from __future__ import annotations

import asyncio
import json
import logging
import time

import attrs
import pytest
from aiohttp import web
from conftest import with_config
from helpers_questions import add_entry, ask, balance_and_ledger, wait_complete

from service.answering.engines import AnswerRequest
from service.answering.engines.local import NOT_COVERED, LocalEngine
from service.answering.retrieval import Reference
from service.web.app import create_app

ENCRYPTION = Reference(
    kb_item_id="kb_enc", external_id="SEC-7", title="Encryption at rest",
    question="Is customer data encrypted at rest?",
    answer="Yes. Customer data is encrypted at rest with AES-256. Keys are rotated every 90 days "
           "in a managed KMS. Backups are encrypted the same way.",
    source=None, score=0.4, question_match=0.6, coverage=0.7,  # as retrieval would rate them
)
BACKUPS = Reference(
    kb_item_id="kb_bak", external_id=None, title="Backups",
    question="How often are backups taken?",
    answer="Backups of customer data are taken every night. They are kept for 35 days.",
    source=None, score=0.2, question_match=0.3, coverage=0.4,
)
OFFICE = Reference(
    kb_item_id="kb_off", external_id=None, title="Office", question="Where is your office?",
    answer="Our office is in Lisbon.", source=None, score=0.05,
)


def request(question: str, *refs: Reference, level: int = 1, **extra) -> AnswerRequest:
    return AnswerRequest(question=question, references=refs, detail_level=level, **extra)


async def test_local__reuses_the_entry_that_answers_the_question_verbatim():
    draft = await LocalEngine().answer(request("Is customer data encrypted at rest?", ENCRYPTION, BACKUPS))
    assert draft.text == ENCRYPTION.answer
    assert draft.used == ("kb_enc",) and draft.sufficient_context


async def test_local__detail_level_changes_length():
    question = "Is customer data encrypted at rest?"
    low = await LocalEngine().answer(request(question, ENCRYPTION, BACKUPS, level=0))
    normal = await LocalEngine().answer(request(question, ENCRYPTION, BACKUPS, level=1))
    assert low.text == "Yes." or len(low.text) < len(normal.text)
    assert ENCRYPTION.answer.startswith(low.text)
    backups_too = attrs.evolve(BACKUPS, question="Are customer data backups encrypted?")
    high = await LocalEngine().answer(request(question, ENCRYPTION, backups_too, level=2))
    assert len(high.text) > len(normal.text) and high.text.startswith(ENCRYPTION.answer)


async def test_local__extracts_from_several_entries_when_none_answers_alone():
    draft = await LocalEngine().answer(
        request("How are customer data backups encrypted and how long are they kept?", ENCRYPTION, BACKUPS)
    )
    assert draft.sufficient_context
    assert draft.text not in (ENCRYPTION.answer, BACKUPS.answer)
    assert "35 days" in draft.text and "encrypted" in draft.text
    assert set(draft.used) == {"kb_enc", "kb_bak"}


async def test_local__says_plainly_when_nothing_covers_the_question():
    draft = await LocalEngine().answer(request("Do you have a rooftop garden for staff?", OFFICE))
    assert draft.text == NOT_COVERED and not draft.sufficient_context and draft.used == ()
    empty = await LocalEngine().answer(request("Anything?"))
    assert not empty.sufficient_context


async def test_local__custom_prompt_it_cannot_follow_is_flagged():
    draft = await LocalEngine().answer(
        request("Is customer data encrypted at rest?", ENCRYPTION, custom_prompt="answer in French")
    )
    assert any("French" in point for point in draft.attention_points)


async def test_local__extract_from_a_long_entry_is_linear_in_its_sentences():
    """An entry of the largest size (100,000 characters: 11,000 one-word sentences) quoted for a
    question of the largest size (10,000 characters of distinct words): each sentence's similarity
    worked the question's words out again, 12 s of CPU on the event loop for one entry."""
    words = [f"w{n:05d}x" for n in range(1300)]
    question = ("Do you " + " ".join(words))[:10000]
    answer = " ".join(f"{words[n % 1240]}." for n in range(20000))[:100000]
    long_entry = attrs.evolve(ENCRYPTION, question="Something else", title=None, answer=answer,
                              score=0.9, coverage=0.9)
    started = time.process_time()
    draft = await LocalEngine().answer(request(question, long_entry, level=2))
    assert time.process_time() - started < 2.0
    assert draft.sufficient_context and draft.used == ("kb_enc",) and draft.text


async def test_local_end_to_end__not_covered_requires_attention(client, conn, admin):
    await add_entry(conn, admin.account_id, "Where is your office?", "Our office is in Lisbon.")
    body = await (await ask(client, admin.headers, "Do you have a rooftop garden for staff?")).json()
    done = await wait_complete(client, body["id"], admin.headers)
    assert done["sufficient_context"] is False and done["requires_attention"] is True
    assert done["answer"] == NOT_COVERED and done["verbatim_answer"] is False
    assert done["confidence"] <= 0.2 and "Not covered" in done["confidence_rationale"]
    assert done["attention_points"] and done["references"] == []


async def test_local_end_to_end__extractive_answer_names_what_to_check(client, conn, admin):
    await add_entry(conn, admin.account_id, ENCRYPTION.question, ENCRYPTION.answer, title="Encryption")
    await add_entry(conn, admin.account_id, BACKUPS.question, BACKUPS.answer, title="Backups")
    body = await (await ask(
        client, admin.headers, "How are customer data backups encrypted and how long are they kept?"
    )).json()
    done = await wait_complete(client, body["id"], admin.headers)
    assert done["verbatim_answer"] is False and done["sufficient_context"] is True
    assert 0 < done["confidence"] < 1
    assert any("Encryption" in p and "Backups" in p for p in done["attention_points"])
    assert {ref["title"] for ref in done["references"]} == {"Encryption", "Backups"}


# -- the OpenAI-compatible engine, against a local fake server ------------------------------------


class FakeModel:
    """Speaks chat-completions; `script` says what each call does: a reply text, a status, 'hang'."""

    def __init__(self) -> None:
        self.script: list = []
        self.calls: list[dict] = []
        self.headers: list[dict] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.calls.append(await request.json())
        self.headers.append(dict(request.headers))
        action = self.script.pop(0) if self.script else "ok"
        if action == "hang":
            await asyncio.sleep(5)
        if isinstance(action, int):
            return web.json_response({"error": {"message": "down"}}, status=action)
        if action == "not-json":
            return web.Response(text="<html>gateway</html>", content_type="text/html")
        if action == "no-choices":
            return web.json_response({"object": "chat.completion", "choices": []})
        content = action if action != "ok" else json.dumps({
            "answer": "Yes, AES-256 (from the model).", "sufficient_context": True,
            "used": ["unknown-id"], "attention_points": ["Confirm the key rotation period."],
        })
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
        })


@pytest.fixture
async def fake_model(aiohttp_server):
    model = FakeModel()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", model.handle)
    server = await aiohttp_server(app)
    model.url = str(server.make_url("/v1"))
    return model


@pytest.fixture
async def openai_client(database_url, aiohttp_client, config, fake_model, monkeypatch):
    monkeypatch.setenv("TEST_MODEL_KEY", "sk-test")
    settings = with_config(
        config,
        questions={"engine": "openai"},
        openai={"base_url": fake_model.url, "model": "test-model", "api_key_env": "TEST_MODEL_KEY",
                "timeout_seconds": 0.5, "max_attempts": 3, "backoff_seconds": 0.01},
    )
    return await aiohttp_client(create_app(settings))


async def test_openai__grounded_prompt_with_prompt_detail_and_rfp_context(
    openai_client, conn, admin, fake_model
):
    await add_entry(conn, admin.account_id, ENCRYPTION.question, ENCRYPTION.answer, title="Encryption")
    rfp = await (await openai_client.post(
        "/api/v1/rfps", headers=admin.headers,
        json={"rfp": {"title": "Bank", "context": "A regional bank in Ohio."}},
    )).json()
    from service.domain.questions import create_question

    async with conn.transaction():
        question_id = await create_question(
            conn, account_id=admin.account_id, user_id=admin.user_id,
            text="Is customer data encrypted at rest?", detail_level=2, custom_prompt="Be formal.",
            rfp_id=rfp["id"],
        )
    done = await wait_complete(openai_client, question_id, admin.headers)
    assert done["answer"] == "Yes, AES-256 (from the model)."
    assert done["verbatim_answer"] is False
    assert "Confirm the key rotation period." in done["attention_points"]
    call = fake_model.calls[0]
    assert call["model"] == "test-model"
    prompt = call["messages"][-1]["content"]
    assert ENCRYPTION.answer in prompt and "Be formal." in prompt
    assert "A regional bank in Ohio." in prompt and "high" in prompt
    assert fake_model.headers[0]["Authorization"] == "Bearer sk-test"


async def test_openai__retries_server_errors_and_malformed_replies(openai_client, conn, admin, fake_model):
    fake_model.script = [500, "not-json"]
    body = await (await ask(openai_client, admin.headers, "Is customer data encrypted at rest?")).json()
    done = await wait_complete(openai_client, body["id"], admin.headers)
    assert len(fake_model.calls) == 3
    assert done["answer"] == "Yes, AES-256 (from the model)."
    assert await balance_and_ledger(conn, admin.account_id) == (9, 9)


@pytest.mark.parametrize("failure", [
    "hang", 503, "no-choices", '{"answer": 42}',
    # Issue 17, finding 4: fields of the wrong type raised outside the engine's retry.
    '{"answer": "Yes.", "used": 5}', '{"answer": "Yes.", "attention_points": {"a": 1}}', "null",
])
async def test_openai__retries_exhausted_complete_with_attention_and_one_refund(
    openai_client, conn, admin, fake_model, failure
):
    fake_model.script = [failure] * 3
    body = await (await ask(openai_client, admin.headers, "Is customer data encrypted at rest?")).json()
    done = await wait_complete(openai_client, body["id"], admin.headers)
    assert len(fake_model.calls) == 3
    assert done["state"] == "complete" and done["requires_attention"] is True
    assert done["confidence"] == 0
    assert any("engine failed" in p and "refunded" in p for p in done["attention_points"])
    refunds = await conn.fetch(
        "SELECT amount FROM credit_ledger WHERE reason = 'refund' AND subject_id = $1", body["id"]
    )
    assert [r["amount"] for r in refunds] == [1]
    assert await balance_and_ledger(conn, admin.account_id) == (10, 10)


async def test_openai__client_error_body_goes_to_the_log_not_to_attention_points(
    openai_client, conn, admin, fake_model, caplog
):
    fake_model.script = [400]  # its body: {"error": {"message": "down"}}
    with caplog.at_level(logging.WARNING, logger="service.answering"):
        body = await (await ask(openai_client, admin.headers, "Is customer data encrypted?")).json()
        done = await wait_complete(openai_client, body["id"], admin.headers)
    assert done["requires_attention"] is True
    assert any("HTTP 400" in p for p in done["attention_points"])
    assert not any("down" in p for p in done["attention_points"]), done["attention_points"]
    assert '"message": "down"' in caplog.text
