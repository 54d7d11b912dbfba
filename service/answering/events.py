"""Question state changes as they happen, in any process: one LISTEN connection per process.

The database announces every state change on the `question_events` channel from the changing
transaction (a trigger, see 0004_questions.sql and 0014_question_handoff.sql). Listeners here fan
them out to the event streams of this process and wake the pipeline when a question is asked
unleased. This process's own pipeline also hands each row it commits straight to the streams
(`deliver`), so they need not read it again. Streams also poll, so a lost connection only slows
them down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import asyncpg

log = logging.getLogger(__name__)

CHANNEL = "question_events"

# What a stream's queue carries: a state announced by the database (read the question to see it),
# the committed row itself from this process's pipeline, or None when that pipeline let go of the
# question unfinished (another process may move it on: read it).
Change = str | Mapping[str, Any] | None


class QuestionEvents:
    def __init__(self, dsn: str | None, on_new: Callable[[], None]) -> None:
        """`dsn` None: no way to LISTEN (a transaction pooler without a direct URL); streams and
        the pipeline then rely on their polling."""
        self.dsn = dsn
        self.on_new = on_new
        self.conn: asyncpg.Connection | None = None
        self.connections = 0  # how many listening connections were opened (a new one may have missed some)
        self._streams: dict[str, set[asyncio.Queue[Change]]] = {}

    async def connect(self) -> None:
        """(Re)connect the listening connection; failures are logged, streams keep polling."""
        if self.dsn is None or (self.conn is not None and not self.conn.is_closed()):
            return
        try:
            conn = await asyncpg.connect(self.dsn)
            await conn.add_listener(CHANNEL, self._notified)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("cannot listen for question events: %s", exc)
            return
        self.conn = conn
        self.connections += 1

    def listening(self, since: int) -> bool:
        """Whether every notification since connection number `since` has reached us: the same
        listening connection is still open (notifications are lost only between connections)."""
        return self.connections == since and self.conn is not None and not self.conn.is_closed()

    async def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
            self.conn = None

    async def keep_connected(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            await self.connect()

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        question_id, _, state = payload.partition(" ")
        for queue in self._streams.get(question_id, ()):
            queue.put_nowait(state)
        if state == "new":
            self.on_new()

    def deliver(self, question_id: str, row: Mapping[str, Any] | None) -> None:
        """A question as this process's pipeline just committed it (None: the pipeline let go
        of it unfinished), to this process's streams."""
        for queue in self._streams.get(question_id, ()):
            queue.put_nowait(row)

    @contextlib.contextmanager
    def subscribe(self, question_id: str) -> Iterator[asyncio.Queue[Change]]:
        """A queue of the question's changes, for as long as the block runs."""
        queue: asyncio.Queue[Change] = asyncio.Queue()
        self._streams.setdefault(question_id, set()).add(queue)
        try:
            yield queue
        finally:
            streams = self._streams.get(question_id)
            if streams is not None:
                streams.discard(queue)
                if not streams:
                    del self._streams[question_id]
