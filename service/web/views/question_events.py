"""GET /api/v1/questions/{id}/events: a question's states as a server-sent event stream, woken by
the pipeline's commits in this process and by LISTEN/NOTIFY from the others."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from ...answering.pipeline import Pipeline
from ...domain.convert import unstructure
from ...domain.questions import STATES, Question, fetch_question, fetch_question_and_token
from ...domain.tokens import token_is_live
from ..auth import connection, principal, requires, token_hash
from ..frontdoor import stream_headers
from ..keys import CONFIG, EVENTS, OPEN_STREAMS, PIPELINE
from ..ratelimit import held_at_most

# An event stream re-reads its question on every notification, and on every RECHECK_EVERY-th
# quiet poll interval (every one when the listening connection was replaced meanwhile).
RECHECK_EVERY = 5


def position(state: str) -> int:
    """A state's event id: its position in SPEC 3's order, 1 (`new`) to 6 (`complete`)."""
    return STATES.index(state) + 1


FINAL = position("complete")


# Every Last-Event-ID understood: an event id or a state's name. A lookup, not int(): "²" is a
# digit to str.isdigit but not to int(), and 5,000 digits exceed int()'s limit.
_EVENT_IDS = {str(position(state)): position(state) for state in STATES} | {
    state: position(state) for state in STATES
}


def _event(state: str, data: dict[str, Any]) -> bytes:
    return f"event: {state}\nid: {position(state)}\ndata: {json.dumps(data)}\n\n".encode()


def _events_after(seen: int, row: Mapping[str, Any]) -> bytes:
    """The events after position `seen` up to the row's state, in one piece: states passed
    while nobody looked as {id, state}, the row's own state with the whole question."""
    out = [_event(passed, {"id": row["id"], "state": passed})
           for passed in STATES[seen : position(row["state"]) - 1]]
    out.append(_event(row["state"], unstructure(Question.from_row(row))))
    return b"".join(out)


def _working_on(pipeline: Pipeline, question_id: str, account_id: str) -> Mapping[str, Any] | None:
    """The question as last committed by this process's pipeline, if it works on it (or just
    completed it)."""
    row = pipeline.last_committed(question_id)
    return row if row is not None and row["account_id"] == account_id else None


def last_event_id(request: web.Request) -> int:
    """The position of the last event a reconnecting client saw (SSE `Last-Event-ID`), 0 when
    none; a state's name is understood too, anything else is ignored (the whole stream follows)."""
    return _EVENT_IDS.get(request.headers.get("Last-Event-ID", "").strip(), 0)


# How a stream ends when its token stopped being valid while it was open (the client's reconnect
# is then refused with 401, which tells an EventSource to stop).
TOKEN_GONE = b": this stream's token is no longer valid (revoked, expired or its member removed)\n\n"


class _EventStream(web.StreamResponse):
    # The headers go out with the first event, in one send (aiohttp's default for streams is a
    # send of their own at prepare()).
    _send_headers_immediately = False


@requires("read", hold_connection=False)
async def question_events(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: the current state at once, then one event per state change; the
    stream ends after `complete`. States passed while nobody looked are sent as {id, state}.

    Event ids are the states' positions (1-6): a client reconnecting with `Last-Event-ID` gets
    only what came after; one that has seen `complete` gets 204, which tells an EventSource to
    stop reconnecting. The question is read from the database only when this process is not the
    one answering it (its pipeline hands over every row it commits)."""
    question_id = request.match_info["id"]
    account_id = principal(request).account_id
    seen = last_event_id(request)
    poll = request.app[CONFIG].questions.poll_seconds
    server = request.app[CONFIG].server
    events = request.app[EVENTS]
    pipeline = request.app[PIPELINE]
    token = token_hash(request)
    clock = asyncio.get_running_loop().time
    checked = clock()  # the token was checked when the request was admitted
    with events.subscribe(question_id) as changes:
        listener = events.connections
        row = _working_on(pipeline, question_id, account_id)
        if row is None:
            async with connection(request) as conn:
                row = await fetch_question(conn, question_id, account_id)  # 404 before streaming
        if seen >= FINAL:
            return web.Response(status=204)
        if not seen:  # a first connection starts at the current state; a resumed one gets
            seen = position(row["state"]) - 1  # every state after the one it saw
        # Each open stream holds a socket and a task: a member gets so many at once, each for
        # so long (SECURITY.md "Connections and streams").
        ends_at = asyncio.get_running_loop().time() + server.stream_lifetime_seconds
        with held_at_most(
            request.app[OPEN_STREAMS], principal(request).member_id, server.max_streams_per_member,
            "{held} event streams are open for this member already "
            "(server.max_streams_per_member); close one first",
            retry_after=5,
        ):
            response = _EventStream(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                         "X-Accel-Buffering": "no", **stream_headers(request)}
            )
            await response.prepare(request)
            with contextlib.suppress(ConnectionResetError):  # the client went away: just stop
                if position(row["state"]) <= seen:
                    await response.write(b": resumed\n\n")  # nothing new yet; the headers go out
                quiet = 0
                while True:
                    # What one look at the question has to say goes out in one write (one send),
                    # and the last one together with the end of the stream.
                    current = position(row["state"])
                    if current > seen and clock() - checked >= server.stream_token_check_seconds:
                        # Nothing goes out on a token checked too long ago (rows handed over by
                        # this process's pipeline come without a read; a quick stream never
                        # gets here, a slow one once per stream_token_check_seconds at most).
                        async with connection(request) as conn:
                            live = await token_is_live(conn, token)
                        checked = clock()
                        if not live:
                            await response.write_eof(TOKEN_GONE)
                            break
                    if current > seen:
                        out = _events_after(seen, row)
                        seen = current
                        if seen == FINAL:
                            await response.write_eof(out)
                            break
                        await response.write(out)
                    left = ends_at - asyncio.get_running_loop().time()
                    if left <= 0:  # the client reconnects with Last-Event-ID and misses nothing
                        await response.write_eof(b": this stream's lifetime is over; reconnect\n\n")
                        break
                    try:
                        change = await asyncio.wait_for(changes.get(), min(poll, left))
                    except TimeoutError:
                        # A comment: keeps proxies from timing out.
                        await response.write(b": waiting\n\n")
                        quiet += 1
                        if events.listening(listener) and quiet % RECHECK_EVERY:
                            # Nothing can have been missed: no read (streams wait in bulk when
                            # the service is busy, and a read each per poll would add to it).
                            continue
                        # Fall through to a read: a notification may have been lost (the
                        # listening connection changed), or to be safe now and then.
                        listener = events.connections
                    else:
                        # One look covers every change so far. This process's pipeline hands
                        # over every row it commits, and says when it lets go of a question
                        # unfinished (None): while it works on it, announcements need no read.
                        changed = [change]
                        while not changes.empty():
                            changed.append(changes.get_nowait())
                        announced, let_go = 0, False
                        for item in changed:
                            if item is None:
                                let_go = True
                            elif isinstance(item, str):
                                announced = max(announced, position(item))
                            elif position(item["state"]) > position(row["state"]):
                                row = item
                        known = max(seen, position(row["state"]))
                        if not let_go and (
                            announced <= known or question_id in pipeline.active
                        ):
                            continue
                    async with connection(request) as conn:
                        row, live = await fetch_question_and_token(
                            conn, question_id, account_id, token
                        )
                    checked = clock()
                    if not live:
                        await response.write_eof(TOKEN_GONE)
                        break
    return response
