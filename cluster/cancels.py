"""Cancelling a chat's running turn on whichever worker runs it: a notice on core NATS.

A partition's consumer holds one message at a time (`max_ack_pending=1`), so a `/stop`, an
abort trigger or, in `queue_mode: interrupt`, a newer message waits behind the turn it should
end. The ingress that received it therefore also publishes a `Cancel` on `{prefix}.cancel`
once the message is durable; every worker follows that subject, and the one running an agent
turn of that chat from an earlier stream sequence cancels it. The turn is then settled without
a reply, like a single-process abort, and the partition moves on to the stop itself.

The notice is only a shortcut: one that is lost (core NATS, a worker that was not connected)
leaves the turn to finish, and what waits behind a stop is still found in the stream by the
worker (`cluster.chat_queue`). One that comes before its worker has taken the message (still
fetching it, claiming its row) is remembered and cancels the message as it is taken.
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
from pydantic import BaseModel

from cluster.connection import NATS_ERRORS
from cluster.follower import SubjectFollower, read_notice

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
            self._latest.popitem(last=False)
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
