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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from config.profile import QueueMode
from gateway.cluster.cancels import CancelReason
from gateway.cluster.codec import CodecError, InboundEnvelope
from gateway.cluster.streams import chat_base_key, stored_on
from gateway.cluster.turn_records import TurnRecords
from gateway.turn.triage import triage

log = structlog.get_logger(__name__)

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
