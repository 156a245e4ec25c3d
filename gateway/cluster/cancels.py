"""Cancelling a chat's running turn on whichever worker runs it: a notice on core NATS.

A partition's consumer holds one message at a time (`max_ack_pending=1`), so a `/stop`, an
abort trigger or, in `queue_mode: interrupt`, a newer message waits behind the turn it should
end. The ingress that received it therefore also publishes a `Cancel` on `{prefix}.cancel`
once the message is durable; every worker follows that subject, and the one running an agent
turn of that chat from an earlier stream sequence cancels it. The turn is then settled without
a reply, like a single-process abort, and the partition moves on to the stop itself.

A notice that comes before its worker has taken the message (still fetching it, claiming its
row) is remembered and cancels the message as it is taken. A worker's memory is complete from
the stream sequence its subscription began at (read once it was in place, again after a
reconnect): for a message stored after that, every stop or interrupt behind it has come as a
notice (or is coming, and ends the turn as it runs), so in `followup` and `interrupt` mode the
worker need not read what waits behind it (`chat_queue`). For a message stored before,
after a gap (a reconnect, a forgotten chat), or in `collect` mode, what waits is read from the
stream. The window left: an ingress killed between storing a stop and announcing it leaves
that stop to end only what comes after the worker next reads the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Coroutine, Iterator
from typing import ClassVar, Generic, Literal, TypeVar

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import BaseModel

from gateway.cluster.connection import NATS_ERRORS
from gateway.cluster.pull import SubjectFollower, read_notice

log = structlog.get_logger(__name__)

#: Why a turn is cancelled: a stop (or abort trigger), or a newer message in interrupt mode.
CancelReason = Literal["stop", "interrupt"]
T = TypeVar("T")


class Cancel(BaseModel):
    """Cancel the agent turn of `chat` (a session base key) of `profile` running from a
    stream sequence below `before_seq` (the sequence of the message asking for it)."""

    profile: str
    chat: str
    before_seq: int
    reason: CancelReason


async def publish_cancel(client: Client, subject: str, cancel: Cancel) -> None:
    """Best effort: the message asking for it is durable already and is answered anyway."""
    try:
        await client.publish(subject, cancel.model_dump_json().encode("utf-8"))
    except NATS_ERRORS as error:
        log.warning("cluster.cancel_not_published", chat=cancel.chat, error=str(error))


class TakenTurn(Generic[T]):
    """A message of a chat taken by this worker: its agent turn, cancellable by a `Cancel`
    that comes before the turn starts (it then never starts) or while it runs."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        #: Why it was cancelled, once it was.
        self.reason: CancelReason | None = None
        self._task: asyncio.Task[T] | None = None

    def cancel(self, reason: CancelReason) -> None:
        if self.reason is None:
            self.reason = reason
            if self._task is not None:
                self._task.cancel()

    async def run(self, work: Coroutine[object, object, T], name: str) -> T | None:
        """`work`'s result; None when a `Cancel` ended it (or came before it began)."""
        if self.reason is not None:
            work.close()
            return None
        self._task = asyncio.create_task(work, name=name)
        try:
            return await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.reason is None or (current is not None and current.cancelling()):
                raise  # shutdown, not (only) a cancel
            return None
        finally:
            self._task = None


class RunningTurns(SubjectFollower, Generic[T]):
    """The chats' messages this worker holds, by (profile, chat), for `Cancel`s to find
    (following the cancel subject).

    The latest cancels are remembered too: one that comes before the message it cancels is
    taken (its worker was still fetching it, or claiming its row) cancels it as it is taken.
    Stream sequences only grow, so a remembered cancel never reaches a later message.
    """

    #: Chats whose latest cancel is remembered.
    REMEMBERED: ClassVar[int] = 4096

    def __init__(self) -> None:
        super().__init__()
        self._taken: dict[tuple[str, str], TakenTurn[T]] = {}
        self._latest: OrderedDict[tuple[str, str], Cancel] = OrderedDict()
        #: The connection and inbound stream `knows_cancels_behind` reads the start from.
        self._source: tuple[Client, JetStreamContext, str] | None = None
        #: From this stream sequence on, every cancel is remembered; None: to be read.
        self._complete_from: int | None = None
        #: The connection's reconnect count when `_complete_from` was read.
        self._reconnects = -1

    async def follow_for(
        self, client: Client, subject: str, js: JetStreamContext, stream: str
    ) -> None:
        """Follow the cancels of the messages of `stream` (see `knows_cancels_behind`)."""
        await self.follow(client, subject)
        self._source = (client, js, stream)
        await self._read_start()

    async def knows_cancels_behind(self, seq: int) -> bool:
        """Whether every stop or interrupt stored after stream sequence `seq` has come, or is
        coming, as a notice: `seq` is at or after the start of this memory, with no gap since."""
        if self._source is None or not self._source[0].is_connected:
            return False
        if self._complete_from is None or self._source[0].stats["reconnects"] != self._reconnects:
            await self._read_start()
        return self._complete_from is not None and seq >= self._complete_from

    async def _read_start(self) -> None:
        """Where the memory starts: past the stream's last message, once the subscription is in
        place on the server; unknown (None) when the server cannot be asked."""
        assert self._source is not None
        client, js, stream = self._source
        reconnects = client.stats["reconnects"]
        try:
            await client.flush()
            info = await js.stream_info(stream)
        except NATS_ERRORS as error:
            log.warning("cluster.cancel_memory_unknown", error=str(error))
            self._complete_from = None
            return
        self._complete_from = max(info.state.last_seq + 1, self._complete_from or 0)
        self._reconnects = reconnects

    @contextlib.contextmanager
    def taken(
        self, profile: str, chat: str, seq: int, *, cancellable: bool = True
    ) -> Iterator[TakenTurn[T]]:
        """The message at stream sequence `seq` is this worker's while inside. Taken before
        the worker looks at what waits behind it: a `Cancel` sent after a stop was stored
        finds the stop in the stream, or this, or its memory when this is taken. A message
        that is not `cancellable` (a command, a stop) is never cancelled."""
        turn: TakenTurn[T] = TakenTurn(seq)
        if not cancellable:
            yield turn
            return
        key = (profile, chat)
        latest = self._latest.get(key)
        if latest is not None and seq < latest.before_seq:
            _cancelled(turn, latest)
        self._taken[key] = turn
        try:
            yield turn
        finally:
            if self._taken.get(key) is turn:
                del self._taken[key]

    def cancel(self, cancel: Cancel) -> bool:
        """Cancel the matching turn; True when there was one to cancel."""
        key = (cancel.profile, cancel.chat)
        self._latest[key] = cancel
        self._latest.move_to_end(key)
        while len(self._latest) > self.REMEMBERED:
            _key, forgotten = self._latest.popitem(last=False)
            if self._complete_from is not None:
                # The messages it cancels are to be read from the stream again.
                self._complete_from = max(self._complete_from, forgotten.before_seq)
        turn = self._taken.get(key)
        if turn is None or turn.seq >= cancel.before_seq or turn.reason is not None:
            return False
        _cancelled(turn, cancel)
        return True

    async def _on_message(self, msg: Msg) -> None:
        cancel = read_notice(msg, Cancel.model_validate_json, "cluster.cancel_unreadable")
        if cancel is not None:
            self.cancel(cancel)


def _cancelled(turn: TakenTurn[T], cancel: Cancel) -> None:
    log.info("cluster.turn_cancelled", chat=cancel.chat, seq=turn.seq, reason=cancel.reason)
    turn.cancel(cancel.reason)
