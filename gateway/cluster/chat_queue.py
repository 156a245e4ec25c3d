"""What waits behind a chat's message in its partition, and what `queue_mode` makes of it.

A worker holds one message of a partition at a time; the messages after it are still in the
stream, unread by any consumer. Before answering a message the worker reads the ones of the same
chat that already wait behind it (`get_msg` by sequence: a work-queue stream allows no second
consumer on the partition's subject), and decides as the single process's lanes would:

- a stop (`/stop` or an abort trigger) waits: this message is dropped, answered by nothing (its
  own cancel notice may have come before the worker took it);
- `interrupt`, and a newer message waits: this one is dropped, the newest is answered;
- `collect`: the messages waiting right behind it (up to the first command or stop) are joined
  into its turn, and recorded as answered by it.

Only the first `SCAN_LIMIT` messages of the partition are read: a stop further behind than that
ends only the turn its cancel notice reaches.

A stop must also end the chat's running turn, on whichever worker runs it: a notice on core
NATS. A partition's consumer holds one message at a time (`max_ack_pending=1`), so a `/stop`,
an abort trigger or, in `queue_mode: interrupt`, a newer message waits behind the turn it
should end. The ingress that received it therefore also publishes a `Cancel` on `{prefix}.cancel`
once the message is durable; every worker follows that subject, and the one running an agent
turn of that chat from an earlier stream sequence cancels it. The turn is then settled without
a reply, like a single-process abort, and the partition moves on to the stop itself.

A notice that comes before its worker has taken the message (still fetching it, claiming its
row) is remembered and cancels the message as it is taken. A worker's memory is complete from
the stream sequence its subscription began at (read once it was in place, again after a
reconnect): for a message stored after that, every stop or interrupt behind it has come as a
notice (or is coming, and ends the turn as it runs), so in `followup` and `interrupt` mode the
worker need not read what waits behind it (`queue_plan`). For a message stored before,
after a gap (a reconnect, a forgotten chat), or in `collect` mode, what waits is read from the
stream. The window left: an ingress killed between storing a stop and announcing it leaves
that stop to end only what comes after the worker next reads the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Generic, Literal, TypeVar

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import BaseModel

from config.profile import QueueMode
from gateway.cluster.codec import CodecError, InboundEnvelope
from gateway.cluster.connection import NATS_ERRORS
from gateway.cluster.pull import SubjectFollower, read_notice
from gateway.cluster.streams import chat_base_key, stored_on
from gateway.cluster.turn_records import TurnRecords
from gateway.turn.triage import triage

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


#: How many waiting messages of a partition a worker reads behind the one it answers.
SCAN_LIMIT = 256


def chat_of(envelope: InboundEnvelope) -> str:
    """The session base key of the envelope's chat (what a `Cancel` names)."""
    message = envelope.message
    return chat_base_key(envelope.profile, message.channel, message.chat_id)


@dataclass(frozen=True, slots=True)
class Waiting:
    seq: int
    envelope: InboundEnvelope


@dataclass(frozen=True, slots=True)
class QueuePlan:
    """What to do with the message in hand: drop it, or answer it with `joined` after it."""

    dropped_by: CancelReason | None = None
    joined: list[Waiting] = field(default_factory=list)


async def queue_plan(
    js: JetStreamContext,
    stream: str,
    msg: Msg,
    envelope: InboundEnvelope,
    mode: QueueMode,
    records: TurnRecords,
    knows_cancels_behind: Callable[[int], Awaitable[bool]],
) -> QueuePlan:
    """What `mode` and a waiting stop make of the message in hand (`msg`). Nothing is read
    when nothing waits in the partition, nor for a text outside `collect` mode when the
    worker's memory of cancels covers what waits (`knows_cancels_behind`: a stop or, in
    interrupt mode, a newer message behind it has cancelled it as it was taken, or will as it
    runs); a collected message with a row already (a platform's retry of one seen before) is
    left out: it is dropped as a duplicate when its turn comes."""
    if not msg.metadata.num_pending:
        return QueuePlan()
    seq = msg.metadata.sequence.stream
    text = triage(envelope.message.content).kind == "text"
    if mode != "collect" and text and await knows_cancels_behind(seq):
        return QueuePlan()
    planned = plan(mode, envelope, await waiting_behind(js, stream, msg.subject, envelope, seq))
    if not planned.joined:
        return planned
    ids = [w.envelope.inbound_id for w in planned.joined]
    known = await records.known(envelope.profile, ids)
    return QueuePlan(joined=[w for w in planned.joined if w.envelope.inbound_id not in known])


async def waiting_behind(
    js: JetStreamContext, stream: str, subject: str, envelope: InboundEnvelope, seq: int
) -> list[Waiting]:
    """The messages of `envelope`'s chat waiting on `subject` after stream sequence `seq`."""
    chat = chat_of(envelope)
    found: list[Waiting] = []
    async for raw in stored_on(js, stream, subject, after_seq=seq, limit=SCAN_LIMIT):
        try:
            waiting = InboundEnvelope.decode(raw.headers, raw.data or b"")
        except CodecError:
            continue  # buried when its turn comes
        if waiting.profile == envelope.profile and chat_of(waiting) == chat:
            assert raw.seq is not None
            found.append(Waiting(raw.seq, waiting))
    return found


def plan(mode: QueueMode, envelope: InboundEnvelope, waiting: list[Waiting]) -> QueuePlan:
    """What the single process's lanes would do with `envelope` given what waits behind it."""
    kind = triage(envelope.message.content).kind
    if kind in ("stop", "immediate"):
        return QueuePlan()  # never queued behind a turn in one process: never dropped
    # An owner's send waiting is neither a stop nor a text: it ends a collected run, as a
    # command does, and is sent in its place whatever the mode.
    kinds: list[str] = [
        "send" if w.envelope.send is not None else triage(w.envelope.message.content).kind
        for w in waiting
    ]
    if "stop" in kinds:
        return QueuePlan(dropped_by="stop")
    if kind != "text":
        return QueuePlan()
    if mode == "interrupt" and "text" in kinds:
        return QueuePlan(dropped_by="interrupt")
    if mode != "collect" or envelope.request:
        return QueuePlan()
    joined: list[Waiting] = []
    seen = {envelope.inbound_id}
    for item, item_kind in zip(waiting, kinds, strict=True):
        if item_kind != "text" or item.envelope.request:
            break
        if item.envelope.inbound_id not in seen:  # a platform's retry is not asked twice
            seen.add(item.envelope.inbound_id)
            joined.append(item)
    return QueuePlan(joined=joined)
