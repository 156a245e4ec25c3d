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

A user's edit or delete of a message comes into the partition as it is, behind the message it
changes, so what waits behind a message also tells whether its sender changed it before its
turn started. As the single process's intake decides (`gateway.turn.intake`):

- a delete of it waiting behind: it is dropped, answered by nothing, and the delete is closed
  with it (both rows `deleted`: a redelivery after a crash runs neither);
- with `edits: replace`, an edit of it into other text: its turn runs once, on the last such
  edit's text, and the edits are recorded as joined into that turn (never a turn of their own);
- a waiting message deleted or edited behind it counts as gone, or as its new text, for the
  stop, interrupt and collect decisions above; an edit that will be a turn of its own (its
  message's turn started, or `edits: new_turn`) counts as a text.

An edit or a delete the worker takes on its own, having changed no waiting message, is what
one process makes of a change that came too late (`edit_alone`): an edit runs as a message of
its own marked as an edit, unless `edits: ignore` or its new text is a command; a delete
changes nothing.

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

Edits and deletes are announced on the same subject (`ChatChanged`), so the same memory tells
whether one of the chat's is stored behind a message: only then is what waits read in
`followup` and `interrupt` mode. An edit is never a `Cancel`: no ingress knows whether the
message it changes is running or still waits, and a running turn is ended by no edit, only
followed by it. The window: a change whose notice comes after its message's worker looked is
answered as one that came after the turn started.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Generic, Literal, TypeVar

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import BaseModel, TypeAdapter

from bus import EDIT, InboundMessage
from config.profile import EditsMode, QueueMode
from gateway.cluster.codec import CodecError, InboundEnvelope
from gateway.cluster.connection import NATS_ERRORS
from gateway.cluster.pull import SubjectFollower, read_notice
from gateway.cluster.streams import chat_base_key, stored_on
from gateway.cluster.turn_records import TurnRecords
from gateway.turn.triage import MessageKind, edit_as_new_turn, edit_runs, triage

log = structlog.get_logger(__name__)

#: Why a turn is cancelled: a stop (or abort trigger), or a newer message in interrupt mode.
CancelReason = Literal["stop", "interrupt"]
#: Why a message is answered by nothing: cancelled, or deleted by its sender while it waited.
DropReason = Literal["stop", "interrupt", "deleted"]
T = TypeVar("T")


class Cancel(BaseModel):
    """Cancel the agent turn of `chat` (a session base key) of `profile` running from a
    stream sequence below `before_seq` (the sequence of the message asking for it)."""

    profile: str
    chat: str
    before_seq: int
    reason: CancelReason


class ChatChanged(BaseModel):
    """A user's edit or delete of a message of `chat` (a session base key) of `profile`, stored
    at stream sequence `seq`: a worker taking a message of that chat stored before it reads
    what waits behind it, where the change may be."""

    profile: str
    chat: str
    seq: int


#: What comes on the cancel subject (each has a required field the other lacks: neither is
#: read as the other).
ChatNotice = Cancel | ChatChanged
_NOTICE: TypeAdapter[ChatNotice] = TypeAdapter(ChatNotice)


async def publish_notice(client: Client, subject: str, notice: ChatNotice) -> None:
    """Best effort: the message it is about is durable already and is answered anyway."""
    try:
        await client.publish(subject, notice.model_dump_json().encode("utf-8"))
    except NATS_ERRORS as error:
        log.warning("cluster.notice_not_published", chat=notice.chat, error=str(error))


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
        #: The stream sequence of each chat's latest edit or delete (`ChatChanged`).
        self._changed: OrderedDict[tuple[str, str], int] = OrderedDict()
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

    async def knows_what_waits(self, profile: str, chat: str, seq: int) -> bool:
        """Whether what waits behind the message at stream sequence `seq` of `chat` needs no
        reading: every stop or interrupt behind it comes as a notice, and no edit or delete of
        the chat is stored after it."""
        if not await self.knows_cancels_behind(seq):
            return False
        return self._changed.get((profile, chat), 0) <= seq

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
            self._forget_before(forgotten.before_seq)
        turn = self._taken.get(key)
        if turn is None or turn.seq >= cancel.before_seq or turn.reason is not None:
            return False
        _cancelled(turn, cancel)
        return True

    def changed(self, change: ChatChanged) -> None:
        """Remember the chat's latest edit or delete (notices may come out of order)."""
        key = (change.profile, change.chat)
        self._changed[key] = max(change.seq, self._changed.get(key, 0))
        self._changed.move_to_end(key)
        while len(self._changed) > self.REMEMBERED:
            _key, forgotten = self._changed.popitem(last=False)
            self._forget_before(forgotten)

    def _forget_before(self, seq: int) -> None:
        """A notice about the messages before stream sequence `seq` is forgotten: what waits
        behind them is to be read from the stream again."""
        if self._complete_from is not None:
            self._complete_from = max(self._complete_from, seq)

    async def _on_message(self, msg: Msg) -> None:
        notice = read_notice(msg, _NOTICE.validate_json, "cluster.notice_unreadable")
        if isinstance(notice, Cancel):
            self.cancel(notice)
        elif notice is not None:
            self.changed(notice)


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

    def reading(self, message: InboundMessage) -> Waiting:
        """The same stored message, as an edit left it (or as it runs as a turn of its own)."""
        return Waiting(self.seq, dataclasses.replace(self.envelope, message=message))


@dataclass(frozen=True, slots=True)
class QueuePlan:
    """What to do with the message in hand: drop it, or answer it with `joined` after it."""

    dropped_by: DropReason | None = None
    joined: list[Waiting] = field(default_factory=list)
    #: The message in hand as its sender's last edit waiting behind it left it, if any.
    edited: InboundMessage | None = None
    #: The edits and deletes waiting behind that this plan uses up: closed with the message in
    #: hand (settled with it, or recorded as joined into its turn), never run on their own.
    absorbed: list[Waiting] = field(default_factory=list)

    @property
    def closed_with(self) -> list[Waiting]:
        """Every waiting message whose row is closed with the row of the message in hand."""
        return [*self.joined, *self.absorbed]


async def queue_plan(
    js: JetStreamContext,
    stream: str,
    msg: Msg,
    envelope: InboundEnvelope,
    mode: QueueMode,
    records: TurnRecords,
    knows_what_waits: Callable[[str, str, int], Awaitable[bool]],
    *,
    edits: EditsMode = "replace",
) -> QueuePlan:
    """What `mode`, a waiting stop and the sender's waiting edits and deletes make of the
    message in hand (`msg`). Nothing is read when nothing waits in the partition, nor for a
    text outside `collect` mode when the worker's memory of notices covers what waits
    (`knows_what_waits`: a stop or, in interrupt mode, a newer message behind it has cancelled
    it as it was taken, or will as it runs, and no edit or delete of the chat is stored after
    it); a collected message with a row already (a platform's retry of one seen before) is
    left out: it is dropped as a duplicate when its turn comes."""
    if not msg.metadata.num_pending:
        return QueuePlan()
    seq = msg.metadata.sequence.stream
    text = triage(envelope.message.content).kind == "text"
    if (
        mode != "collect"
        and text
        and await knows_what_waits(envelope.profile, chat_of(envelope), seq)
    ):
        return QueuePlan()
    waiting = await waiting_behind(js, stream, msg.subject, envelope, seq)
    planned = plan(mode, envelope, waiting, edits=edits)
    if not planned.joined:
        return planned
    ids = [w.envelope.inbound_id for w in planned.joined]
    known = await records.known(envelope.profile, ids)
    joined = [w for w in planned.joined if w.envelope.inbound_id not in known]
    return dataclasses.replace(planned, joined=joined)


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


def plan(
    mode: QueueMode,
    envelope: InboundEnvelope,
    waiting: list[Waiting],
    *,
    edits: EditsMode = "replace",
) -> QueuePlan:
    """What the single process's lanes would do with `envelope` given what waits behind it, and
    its intake with the edits and deletes among that."""
    kind = triage(envelope.message.content).kind
    if kind in ("stop", "immediate"):
        return QueuePlan()  # never queued behind a turn in one process: never dropped
    behind = _Behind(envelope.message, kind, edits)
    for stored in waiting:
        behind.add(stored)
    if behind.deleted:
        return QueuePlan(dropped_by="deleted", absorbed=behind.own)
    present = [item for item in behind.items if not item.gone]
    kinds = [item.kind for item in present]
    if "stop" in kinds:
        return QueuePlan(dropped_by="stop", absorbed=behind.own)
    if kind != "text":
        return QueuePlan()
    if mode == "interrupt" and "text" in kinds:
        return QueuePlan(dropped_by="interrupt", absorbed=behind.own)
    if mode != "collect" or envelope.request:
        return QueuePlan(edited=behind.edited, absorbed=behind.own)
    joined: list[Waiting] = []
    absorbed = list(behind.own)
    seen = {envelope.inbound_id}
    for item in present:
        if item.kind != "text" or item.waiting.envelope.request:
            break
        if item.waiting.envelope.inbound_id not in seen:  # a platform's retry is not asked twice
            seen.add(item.waiting.envelope.inbound_id)
            joined.append(item.waiting)
            absorbed.extend(item.edits)
    return QueuePlan(joined=joined, edited=behind.edited, absorbed=absorbed)


def edit_alone(message: InboundMessage, edits: EditsMode) -> InboundMessage | None:
    """An edit or a delete taken on its own (the message it changes had its turn, or is not
    known): an edit as the message of its own it runs as, marked as an edit; None for a
    delete, which changes nothing then, and for an edit that is not to run (`edits: ignore`,
    or its new text is a command or a stop)."""
    if message.deleted_id() is not None:
        return None
    if edits == "ignore" or not edit_runs(message):
        return None
    previous = message.metadata[EDIT].get("previous")
    return edit_as_new_turn(message, str(previous) if previous else None)


@dataclass(slots=True)
class _Item:
    """A message waiting behind the one in hand, as it will read when its turn comes."""

    waiting: Waiting
    #: What it is (`triage`), or "send" for an owner's send.
    kind: MessageKind | Literal["send"]
    #: Its sender's edits waiting behind it, whose text it now reads (`edits: replace`).
    edits: list[Waiting] = field(default_factory=list)
    #: Deleted by its sender: it will be answered by nothing.
    gone: bool = False


class _Behind:
    """What waits behind the message in hand, its sender's edits and deletes applied to the
    messages they change where one process's intake would (`gateway.turn.intake`)."""

    def __init__(self, own: InboundMessage, kind: MessageKind, edits: EditsMode) -> None:
        changes = own.edited_id() is not None or own.deleted_id() is not None
        #: The platform id the edits and deletes of the message in hand name.
        self._own_id = None if changes else own.message_id
        self._own_kind = kind
        self._edits = edits
        #: The message in hand's own edits and deletes: used up with it.
        self.own: list[Waiting] = []
        self.deleted = False
        self.edited: InboundMessage | None = None
        self._own = own
        self.items: list[_Item] = []
        self._by_id: dict[str, _Item] = {}

    def add(self, waiting: Waiting) -> None:
        message = waiting.envelope.message
        if waiting.envelope.send is not None:
            # An owner's send: neither a stop nor a text; it ends a collected run, as a
            # command does, and is sent in its place whatever the mode.
            self.items.append(_Item(waiting, "send"))
            return
        deleted_id = message.deleted_id()
        if deleted_id is not None:
            self._delete(waiting, deleted_id)
            return
        edited_id = message.edited_id()
        if edited_id is not None:
            self._edit(waiting, edited_id)
            return
        item = _Item(waiting, triage(message.content).kind)
        self.items.append(item)
        if message.message_id is not None:
            self._by_id[message.message_id] = item

    def _delete(self, delete: Waiting, target: str) -> None:
        """A delete drops a text or a command still waiting; any other changes nothing."""
        if target == self._own_id and self._own_kind in ("text", "command"):
            self.deleted = True
            self.own.append(delete)
            return
        item = self._by_id.get(target)
        if item is not None and item.kind in ("text", "command"):
            item.gone = True  # its own turn finds the delete behind it and settles both
            del self._by_id[target]

    def _edit(self, edit: Waiting, target: str) -> None:
        message = edit.envelope.message
        if self._edits == "ignore" or not edit_runs(message):
            return  # goes no further when its turn comes
        if self._edits == "replace":
            if target == self._own_id and self._own_kind == "text":
                self.edited = self._own.model_copy(update={"content": message.content})
                self.own.append(edit)
                return
            item = self._by_id.get(target)
            if item is not None and item.kind == "text":
                edited = item.waiting.envelope.message.model_copy(
                    update={"content": message.content}
                )
                item.waiting = item.waiting.reading(edited)
                item.edits.append(edit)
                return
        as_turn = edit_alone(message, self._edits)
        assert as_turn is not None  # an edit that runs
        self.items.append(_Item(edit.reading(as_turn), "text"))
