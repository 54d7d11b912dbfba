"""The question pipeline: a state machine run by aiojobs, persisted in PostgreSQL.

The whole machine is TRANSITIONS below: (from state, to state, step). Steps compute; the runner
persists each step's output together with the next state in one guarded update
(`WHERE id = $1 AND state = $2 AND lease_owner = $3`), so a step that runs twice after a crash
can only be recorded once. Consecutive quick steps share one such update (and one commit); a
step that may wait long (a remote engine) starts only after the progress before it is committed.
Questions are claimed with `FOR UPDATE SKIP LOCKED` plus a lease, so several processes share the
work and a crashed process's questions are resumed elsewhere. Claims take turns between accounts
(round-robin, each account's oldest first), so one account's backlog never holds up another's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiojobs
import asyncpg
import attrs
import orjson

from .. import db
from ..config import QuestionsConfig
from ..domain import bands, webhooks
from ..domain.accounts import change_credits
from ..domain.convert import unstructure
from ..domain.models import rfp_json
from ..domain.questions import Question
from ..domain.rfps import MAX_TEXT
from ..metrics import Metrics
from . import decision as coverage
from . import staleness
from .engines import AnswerEngine, AnswerRequest, EngineFailure
from .retrieval import Reference, find_references

log = logging.getLogger(__name__)

# Completed questions whose row each process keeps for its event streams (a stream usually
# opens right after its ask; a fast answer may already be complete by then).
RECENTLY_COMPLETED = 256



@attrs.frozen(kw_only=True)
class Work:
    """A question as the pipeline sees it: its input and every step's output so far."""

    id: str
    account_id: str
    rfp_id: str | None
    rfp_item_id: str | None
    question: str
    custom_prompt: str | None
    detail_level: int
    state: str
    charged_credits: int
    refunded: bool
    context: str | None = None
    references: tuple[Reference, ...] = ()
    used: tuple[str, ...] = ()
    draft_answer: str | None = None
    verbatim_answer: bool = False
    sufficient_context: bool | None = None
    engine_points: tuple[str, ...] = ()
    engine_failure: str | None = None
    confidence: float | None = None
    confidence_rationale: str | None = None
    requires_attention: bool = False
    attention_points: tuple[str, ...] = ()
    answer: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Work:
        stored = orjson.loads(row["references"]) if row["references"] else []
        return cls(
            id=row["id"],
            account_id=row["account_id"],
            rfp_id=row["rfp_id"],
            rfp_item_id=row["rfp_item_id"],
            question=row["question"],
            custom_prompt=row["custom_prompt"],
            detail_level=row["answer_detail_level"],
            state=row["state"],
            charged_credits=row["charged_credits"],
            refunded=row["refunded"],
            context=row["context"],
            references=tuple(
                # Fields added to Reference since a question was stored keep their defaults.
                Reference(**{f.name: ref[f.name] for f in attrs.fields(Reference) if f.name in ref})
                for ref in stored
            ),
            used=tuple(ref["kb_item_id"] for ref in stored if ref.get("used")),
            draft_answer=row["draft_answer"],
            verbatim_answer=row["verbatim_answer"],
            sufficient_context=row["sufficient_context"],
            engine_points=tuple(row["engine_points"] or ()),
            engine_failure=row["engine_failure"],
            confidence=row["confidence"],
            confidence_rationale=row["confidence_rationale"],
            requires_attention=row["requires_attention"],
            attention_points=tuple(row["attention_points"] or ()),
            answer=row["answer"],
        )

    def references_json(self) -> str | None:
        if self.state in ("new", "ready_to_answer") and not self.references:
            return None
        used = set(self.used)
        # orjson, and no recursion into a Reference's plain values: ~12 µs rather than ~32.
        return orjson.dumps(
            [attrs.asdict(ref, recurse=False) | {"used": ref.kb_item_id in used} for ref in self.references]
        ).decode()


@attrs.frozen(kw_only=True)
class StepContext:
    pool: asyncpg.Pool
    engine: AnswerEngine
    config: QuestionsConfig
    embedder: Any = None  # service.embeddings.Embedder, when dense retrieval is configured


Step = Callable[[StepContext, Work], Awaitable[Work]]


# -- the steps: each returns the question with its output filled in ------------------------------


async def prepare(ctx: StepContext, work: Work) -> Work:
    """Capture what the engine needs besides the question: the RFP's background, if any."""
    context = None
    if work.rfp_id:
        async with ctx.pool.acquire() as conn:
            context = await conn.fetchval(db.query("rfp_context"), work.rfp_id)
    return attrs.evolve(work, context=context)


async def fetch_references(ctx: StepContext, work: Work) -> Work:
    # Retrieval reads as much of a question as the ask API accepts. An RFP item's question may be
    # ten times longer (an imported cell), and ranking its words against entries that hold them
    # cost ~2 s of CPU on the event loop, every request of the process waiting.
    question = work.question[:ctx.config.max_question_chars]
    async with ctx.pool.acquire() as conn:
        found = await find_references(
            conn, work.account_id, question, ctx.config.references_limit, ctx.embedder
        )
    return attrs.evolve(work, references=tuple(found))


# A drafted answer is at most what an RFP item's answer may hold, so that approving it as drafted
# never fails: the local engine at high detail joins three entries' answers (each up to that
# size), a remote model writes what it likes.
CUT_POINT = (f"The drafted answer was longer than an answer may be ({MAX_TEXT:,} characters) and "
             "was cut short; check how it ends.")


def within_limit(text: str) -> str:
    """`text` cut to at most MAX_TEXT characters with an ellipsis saying so: after the last
    sentence that fits, else at the last break between words (a text without either in its
    second half is cut where it must be)."""
    head = text[:MAX_TEXT - 1]
    sentence_end = max(head.rfind(end) for end in (". ", "? ", "! ", "\n")) + 1
    word_end = head.rfind(" ")
    for end in (sentence_end, word_end):
        if end > MAX_TEXT // 2:
            return head[:end].rstrip() + "…"
    return head + "…"


async def draft_answer(ctx: StepContext, work: Work) -> Work:
    """The engine's answer from the references; its failure is an outcome, not an error."""
    request = AnswerRequest(
        question=work.question,
        references=work.references,
        detail_level=work.detail_level,
        custom_prompt=work.custom_prompt,
        context=work.context,
    )
    try:
        draft = await ctx.engine.answer(request)
    except EngineFailure as exc:
        return attrs.evolve(
            work, draft_answer=None, verbatim_answer=False, sufficient_context=None, used=(),
            engine_points=(), engine_failure=str(exc),
        )
    text, points = draft.text, draft.attention_points
    if len(text) > MAX_TEXT:
        text, points = within_limit(text), (*points, CUT_POINT)
    # Verbatim only when the text is exactly one entry's answer, whatever the engine did.
    verbatim = any(text == ref.answer for ref in work.references)
    return attrs.evolve(
        work,
        draft_answer=text,
        verbatim_answer=verbatim,
        sufficient_context=draft.sufficient_context,
        used=draft.used if draft.sufficient_context else (),
        engine_points=points,
        engine_failure=None,
    )


async def calculate_confidence(ctx: StepContext, work: Work) -> Work:
    assessment = coverage.assess(
        work.question,
        list(work.references),
        answer=work.draft_answer,
        verbatim=work.verbatim_answer,
        sufficient_context=bool(work.sufficient_context),
        used=work.used,
        engine_points=work.engine_points,
        failure=work.engine_failure,
        attention_below=ctx.config.auto_answer_confidence,
    )
    # An answer drawn from a stale entry asks for attention and its confidence stays under the
    # auto-answer band, so neither the question nor its RFP item (which keeps only the confidence)
    # is ever auto-answered (issue 20).
    stale = staleness.stale_points(work.references, work.used) if work.draft_answer else ()
    confidence = assessment.confidence
    if stale and confidence is not None:
        confidence = staleness.below_auto_answer(confidence, ctx.config)
    return attrs.evolve(
        work,
        confidence=confidence,
        confidence_rationale=assessment.rationale,
        requires_attention=assessment.requires_attention or bool(stale),
        attention_points=(*assessment.attention_points, *stale),
    )


async def publish(ctx: StepContext, work: Work) -> Work:
    """Make the answer visible (the runner also answers a linked RFP item in the same commit)."""
    answer = work.draft_answer
    if answer is None:
        answer = ("No answer could be drafted: the answer engine failed. The credit for this "
                  "question was refunded; ask again later or answer it by hand.")
    return attrs.evolve(work, answer=answer)


class WorkerLost(Exception):
    """A question's process died while answering it (a crash, the OOM killer), again and again."""


def given_up(work: Work, attempts: int, exc: Exception) -> Work:
    """The question completed unanswered after failing `attempts` times: confidence 0, needing
    attention, and (persist refunds an engine failure) its credit back. Only the exception's
    type is shown; the rest is in the log."""
    why = (f"No answer could be drafted: answering failed {attempts} times ({type(exc).__name__}). "
           "The credit for this question was refunded; answer it by hand.")
    return attrs.evolve(
        work, state="complete", draft_answer=None, verbatim_answer=False, sufficient_context=None,
        used=(), engine_points=(), engine_failure=f"failed {attempts} times: {type(exc).__name__}",
        confidence=0.0, confidence_rationale=why, requires_attention=True, attention_points=(why,),
        answer=why,
    )


TRANSITIONS: tuple[tuple[str, str, Step], ...] = (
    ("new", "ready_to_answer", prepare),
    ("ready_to_answer", "references_fetched", fetch_references),
    ("references_fetched", "answered", draft_answer),
    ("answered", "confidence_calculated", calculate_confidence),
    ("confidence_calculated", "complete", publish),
)
NEXT: dict[str, tuple[str, Step]] = {source: (target, step) for source, target, step in TRANSITIONS}


# -- persisting a transition ---------------------------------------------------------------------


def _advance_args(owner: str, before: Work, after: Work, lease_seconds: float) -> tuple:
    return (
        after.id, before.state, owner, after.state,
        after.context, after.references_json(), after.draft_answer, after.verbatim_answer,
        after.sufficient_context, list(after.engine_points), after.engine_failure,
        after.confidence, after.confidence_rationale, after.requires_attention,
        list(after.attention_points), after.answer, lease_seconds,
    )


def item_answer(work: Work) -> str | None:
    """What an RFP item takes as its answer: the draft, when the engine found the knowledge base
    answers the question. Otherwise the question's answer only says why none was drafted ("The
    knowledge base does not cover this question…", an engine failure), which is no answer to give a
    customer: in the item's answer box a reviewer approved it and every export wrote it out. The
    item has none then (its question and attention points say why), so approving needs one."""
    return work.answer if work.sufficient_context else None


def rfp_item_state(work: Work, config: QuestionsConfig) -> str:
    """The state an RFP item takes from its question's answer: needs_input when nothing answers
    it, it asks for attention (a stale entry, a partial answer), or its confidence is below the
    review band (a person must write it), else auto_answered (the band, auto-answer or review, is
    shown beside it)."""
    if not work.sufficient_context or work.engine_failure is not None or work.requires_attention:
        return "needs_input"
    if bands.band(work.confidence, work.requires_attention, config) == "needs_input":
        return "needs_input"
    return "auto_answered"


async def persist(
    conn: asyncpg.Connection, owner: str, before: Work, after: Work, lease_seconds: float,
    metrics: Metrics | None = None, config: QuestionsConfig | None = None,
    web_base_url: str = "http://localhost:8080", queued: Callable[[], None] | None = None,
) -> asyncpg.Record | None:
    """Store `after` if `before` is still what the database holds and we hold the lease.

    A refund (engine failure), the answer of a linked RFP item and the webhook deliveries of a
    completion (question.completed, rfp.answered) commit with the transition; the refund is also
    guarded in SQL, so it happens at most once per question. `queued` is called once that commit
    has queued deliveries (the deliverer's wake).
    Returns the question as stored (as `get_question` reads it), or None when another worker
    moved it: drop it then.
    """
    config = config or QuestionsConfig()
    answers_item = after.state == "complete" and after.rfp_item_id is not None
    args = _advance_args(owner, before, after, lease_seconds)
    if after.engine_failure is None and not answers_item:
        # One statement commits on its own: a step's output, or a completion that no endpoint
        # wants (most), with no BEGIN, enqueue and COMMIT round trips and no deliverer wake.
        unwanted = "question.completed" if after.state == "complete" else None
        moved = await conn.fetchrow(db.query("advance_question"), *args, unwanted)
        if moved is not None or unwanted is None:
            return moved
        # Not stored: an endpoint wants the event (or another worker moved the question, which
        # the guarded update below finds again).
    refund = None
    deliveries = 0
    async with conn.transaction():
        moved = await conn.fetchrow(db.query("advance_question"), *args, None)
        if moved is None:
            return None
        if after.engine_failure is not None:
            # Guarded in SQL (`AND NOT refunded`): however often this runs, one refund.
            refund = await conn.fetchval(db.query("mark_question_refunded"), after.id)
            if refund:
                await change_credits(conn, after.account_id, refund, "refund", after.id)
        if answers_item:
            # The RFP before its item, the order "answer all" and reviews take them in.
            await conn.fetchval(db.query("lock_rfp_before_items"), after.rfp_id, after.account_id)
            item_state = rfp_item_state(after, config)
            rfp_id = await conn.fetchval(
                db.query("answer_rfp_item"), after.rfp_item_id, item_answer(after), after.confidence,
                item_state, after.id,
            )
            if rfp_id is not None:
                await conn.execute(db.query("touch_rfp"), rfp_id)
                # The RFP row lock taken above orders the completions of its items: the last
                # one sees no other in flight, and says so once.
                if await conn.fetchval(db.query("first_rfp_item_in_flight"), rfp_id) is None:
                    deliveries += await _rfp_answered(conn, after.account_id, rfp_id, web_base_url)
        if after.state == "complete":
            deliveries += await webhooks.emit(conn, after.account_id, "question.completed",
                                              after.id, unstructure(Question.from_row(moved)))
    if refund and metrics is not None:  # counted once committed
        metrics.credits_refunded.labels("engine_failure").inc(refund)
    if deliveries and queued is not None:
        queued()
    return moved


async def _rfp_answered(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, web_base_url: str
) -> int:
    """rfp.answered: every item of an answer-all run has its draft. Returns the deliveries queued."""
    if not await webhooks.wanted(conn, account_id, "rfp.answered"):
        return 0
    row = await conn.fetchrow(db.query("get_rfp"), rfp_id, account_id)
    return await webhooks.emit(conn, account_id, "rfp.answered", rfp_id,
                               rfp_json(row, web_base_url, with_context=True))


# -- the runner ----------------------------------------------------------------------------------


class Pipeline:
    """Claims unfinished questions and runs them to `complete`, a bounded number at a time.

    A question asked in this process is usually handed over directly (`reserve`, then `adopt`):
    it is stored already leased to this pipeline, so no claim round trip and no announcement to
    the other processes are needed; the lease guards it exactly as if it had been claimed.
    """

    def __init__(
        self, pool: asyncpg.Pool, engine: AnswerEngine, config: QuestionsConfig,
        scheduler: aiojobs.Scheduler, embedder: Any = None, metrics: Metrics | None = None,
    ) -> None:
        self.pool = pool
        # Counting costs nothing when nobody scrapes; a private instance when none is given.
        self.metrics = metrics or Metrics()
        self.config = config
        self.scheduler = scheduler
        self.ctx = StepContext(pool=pool, engine=engine, config=config, embedder=embedder)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.active: set[str] = set()
        # The last committed row (as `get_question` reads it) of questions this process works on,
        # when it has one with the asker's fields, and of the last few it completed (a complete
        # question no longer changes): this process's event streams start from it.
        self.committed: dict[str, Mapping[str, Any]] = {}
        self.completed: collections.OrderedDict[str, Mapping[str, Any]] = collections.OrderedDict()
        # Whether unclaimed questions may be waiting (one was announced, or the last claim took
        # as many as it could): then a finished question's place goes to them first.
        self._more = False
        # The account this pipeline last claimed a question of: the next claim starts with the
        # account after it (claim_questions takes turns between accounts).
        self._last_account = ""
        # Called with each row this pipeline commits, and with None when it lets go of a question
        # unfinished (QuestionEvents.deliver: this process's event streams).
        self.on_commit: Callable[[str, Mapping[str, Any] | None], None] | None = None
        # Called after a commit that queued webhook deliveries (Deliverer.wake: sent now rather
        # than at the deliverer's next poll).
        self.on_webhooks: Callable[[], None] | None = None
        self.stopping = False
        self._wake = asyncio.Event()
        # The base of the RFP web_link in webhook bodies (server.web_base_url; set by the app).
        self.web_base_url = "http://localhost:8080"

    def wake(self) -> None:
        """Look for work now (a question was asked unleased, here or in another process)."""
        self._more = True
        self._wake.set()

    def reserve(self, question_id: str) -> str | None:
        """A place for a question about to be asked here: our lease owner to store it with, or
        None when this pipeline is full or stopping, or older questions may be waiting unclaimed
        (they go first) — then it is stored unleased, announced, and any process claims it.
        Follow with `adopt` once stored, or `unreserve` if not."""
        if self.stopping or self._more or len(self.active) >= self.config.concurrency:
            return None
        self.active.add(question_id)
        self.metrics.pipeline_queue_depth.set(len(self.active))
        return self.owner

    def unreserve(self, question_id: str) -> None:
        self.active.discard(question_id)
        self.metrics.pipeline_queue_depth.set(len(self.active))

    async def adopt(self, row: Mapping[str, Any]) -> None:
        """Run a question stored (and committed) leased to us by `reserve`."""
        self.committed[row["id"]] = row
        await self._spawn(row)

    def last_committed(self, question_id: str) -> Mapping[str, Any] | None:
        """The question as this process last committed it, if it is working on it or just
        completed it; None otherwise (read it from the database)."""
        return self.committed.get(question_id) or self.completed.get(question_id)

    def stop(self) -> None:
        """Shutdown: claim nothing more; every question stops after the step it is in."""
        self.stopping = True
        self._wake.set()

    async def drain(self, seconds: float) -> None:
        """Wait (at most `seconds`) until no question is in a step any more."""
        deadline = time.monotonic() + seconds
        while self.active and time.monotonic() < deadline:  # noqa: ASYNC110 (a short bounded wait)
            await asyncio.sleep(0.02)

    async def run(self) -> None:
        """The claim loop: at start-up, on every wake-up and every `poll_seconds`."""
        while not self.stopping:
            self._wake.clear()
            free = self.config.concurrency - len(self.active)
            claimed = 0
            if free > 0:
                try:
                    claimed = await self.claim(free)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    log.warning("could not claim questions: %s", exc)
                else:
                    self._more = claimed == free
            if claimed and claimed == free:
                continue  # there may be more waiting
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.poll_seconds)

    async def claim(self, limit: int) -> int:
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                db.query("claim_questions"), self.owner, limit, self.config.lease_seconds,
                self._last_account,
            )
        if rows:
            last = max(rows, key=lambda row: (row["claim_place"], row["claim_turn"]))
            self._last_account = last["account_id"]
        for row in rows:
            self.active.add(row["id"])
            self.metrics.pipeline_queue_depth.set(len(self.active))
            await self._spawn(row)
        return len(rows)

    async def _spawn(self, row: Mapping[str, Any]) -> None:
        work = self.process(Work.from_row(row), row.get("attempts", 0))
        try:
            await self.scheduler.spawn(work, name=row["id"])
        except RuntimeError:
            # The scheduler closed under us (shutdown between a claim and its hand-off): the
            # question stays in `active`, which shutdown releases for another process.
            work.close()  # never started; closing it says so instead of "never awaited"
            raise

    def _waits(self, step: Step) -> bool:
        """Whether a step may take long (a remote engine's answer; any step when steps are slowed
        down on purpose). Progress is committed before such a step, so others see it meanwhile."""
        if self.config.step_delay_seconds:
            return True
        return step is draft_answer and self.ctx.engine.name != "local"

    async def process(self, work: Work, claims: int = 0) -> None:
        """Answer a question claimed for the `claims`-th time (adopted ones: once)."""
        try:
            if claims > self.config.max_claims:
                # Claims count shutdowns' hand-backs and counted failures too, but this many
                # without completing means its process died answering it: a question that kills
                # its process would otherwise do so again after every restart, for ever.
                log.error("question %s was claimed %d times and never completed (its process died "
                          "each time?); completing it unanswered", work.id, claims - 1)
                await self._give_up(work, claims - 1, WorkerLost())
                return
            while work.state != "complete":
                if self.stopping:
                    # Shutdown, between steps: hand the question back at once; another process
                    # resumes it without waiting for the lease to expire.
                    async with self.pool.acquire() as conn:
                        await conn.execute(db.query("release_lease"), work.id, self.owner, 0.0)
                    return
                # A run of quick steps is persisted with one guarded update: each step's output
                # still commits together with the state that has it, in one commit instead of one
                # per step (every commit is a WAL flush, serialised by the NOTIFY it carries).
                # A crash before the commit just runs the run again.
                after = work
                async with self._holding(work.id):
                    while True:
                        target, step = NEXT[after.state]
                        if self.config.step_delay_seconds:
                            await asyncio.sleep(self.config.step_delay_seconds)
                        after = attrs.evolve(await self._timed(step, after), state=target)
                        if after.state == "complete" or self._waits(NEXT[after.state][1]):
                            break
                        if self.stopping:
                            break  # store what is done; the next turn hands the question back
                async with self.pool.acquire() as conn:
                    stored = await persist(
                        conn, self.owner, work, after, self.config.lease_seconds, self.metrics,
                        self.config, self.web_base_url, self.on_webhooks,
                    )
                if stored is None:
                    log.info("question %s was moved by another worker; leaving it", work.id)
                    return
                self.committed[work.id] = stored
                if self.on_commit is not None:
                    self.on_commit(work.id, stored)
                work = after
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            with contextlib.suppress(Exception):
                await self._failed(work, exc)
        finally:
            self.active.discard(work.id)
            row = self.committed.pop(work.id, None)
            if row is not None and row["state"] == "complete":
                self.completed[work.id] = row
                if len(self.completed) > RECENTLY_COMPLETED:
                    self.completed.popitem(last=False)
            elif self.on_commit is not None:
                self.on_commit(work.id, None)  # unfinished: whoever moves it on, streams must look
            self.metrics.pipeline_queue_depth.set(len(self.active))
            if self._more:
                self._wake.set()  # a place is free and questions may be waiting for it

    async def _failed(self, work: Work, exc: Exception) -> None:
        """A step raised: the question is retried later, unless that was its
        max_failed_attempts-th failure; then it completes needing attention, refunded."""
        async with self.pool.acquire() as conn:
            attempts = await conn.fetchval(db.query("count_failed_attempt"), work.id, self.owner)
            if attempts is None or attempts < self.config.max_failed_attempts:
                log.error("question %s failed in state %s (attempt %s); it will be retried",
                          work.id, work.state, attempts, exc_info=exc)
                await conn.execute(
                    db.query("release_lease"), work.id, self.owner, self.config.poll_seconds
                )
                return
            log.error("question %s failed in state %s %s times; completing it unanswered",
                      work.id, work.state, attempts, exc_info=exc)
        await self._give_up(work, attempts, exc)

    async def _give_up(self, work: Work, attempts: int, exc: Exception) -> None:
        """Complete the question unanswered, needing attention, its credit refunded."""
        async with self.pool.acquire() as conn:
            stored = await persist(conn, self.owner, work, given_up(work, attempts, exc),
                                   self.config.lease_seconds, self.metrics, self.config,
                                   self.web_base_url, self.on_webhooks)
        if stored is not None:
            self.committed[work.id] = stored
            if self.on_commit is not None:
                self.on_commit(work.id, stored)

    async def _timed(self, step: Step, work: Work) -> Work:
        """Run one step, timing it by step name and outcome (ok, failed)."""
        started = time.perf_counter()
        outcome = "failed"
        try:
            result = await step(self.ctx, work)
            outcome = "ok"
            return result
        finally:
            self.metrics.pipeline_step_duration.labels(step.__name__, outcome).observe(
                time.perf_counter() - started
            )

    @contextlib.asynccontextmanager
    async def _holding(self, question_id: str) -> AsyncIterator[None]:
        """Renew the lease while a (possibly slow) step runs, so nobody else takes the question."""

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.config.lease_seconds / 3)
                async with self.pool.acquire() as conn:
                    await conn.fetchval(
                        db.query("renew_lease"), question_id, self.owner, self.config.lease_seconds
                    )

        renewer = asyncio.create_task(renew())
        try:
            yield
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await renewer

    async def release(self, question_ids: set[str]) -> None:
        """On shutdown: hand our questions back at once instead of waiting for the leases."""
        if not question_ids:
            return
        async with self.pool.acquire() as conn:
            for question_id in question_ids:
                await conn.execute(db.query("release_lease"), question_id, self.owner, 0.0)
