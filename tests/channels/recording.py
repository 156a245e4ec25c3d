"""An in-process channel that records every call, for tests of the manager and the contract.

It implements the three required members and, when asked, edits (`editable=True`). Every call
is recorded with a timestamp from an injectable clock, failed ones too. `fail(kind, *errors)`
makes the next calls of that kind raise the given errors, one each (None: that call succeeds).
`start()` follows a script: an exception is raised, `RETURN` returns at once, and when the
script is empty it runs until `stop()` (or forever with `ignore_stop=True`)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from bus import InboundMessage, InboundSender, OutboundMessage
from channels.base import FORMATTED, Channel
from channels.split.limits import PlatformLimit

CallKind = Literal[
    "start", "stop", "send", "send_with_id", "edit", "finish", "delete", "typing", "stop_typing"
]

#: A `start_script` step: `start()` returns at once instead of running.
RETURN = "return"


@dataclass(frozen=True, slots=True)
class Call:
    kind: CallKind
    chat_id: str = ""
    content: str = ""
    message_id: str | None = None
    message: OutboundMessage | None = None
    at: float = 0.0
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def formatted(self) -> bool:
        return self.message is not None and bool(self.message.metadata.get(FORMATTED))


class RecordingChannel(Channel):
    #: Its `send` and `send_with_id` are recorded apart (a reply is a `send`, a stream's first
    #: message a `send_with_id`), as the manager's tests expect.
    send_with_id_sends_whole = False

    def __init__(
        self,
        name: str = "rec",
        *,
        clock: Callable[[], float] = time.monotonic,
        limit: PlatformLimit | None = None,
        editable: bool = False,
        edit_interval_s: float | None = None,
        formatter: Callable[[str], str] | None = None,
        returns_ids: bool = True,
        start_script: Iterable[BaseException | str] = (),
        ignore_stop: bool = False,
        on_start: Callable[[], None] | None = None,
    ) -> None:
        self._name = name
        self._clock = clock
        if limit is not None:
            self.limit = limit  # type: ignore[misc]  # a per-instance limit, for tests only
        if edit_interval_s is not None:
            self.edit_interval_s = edit_interval_s  # type: ignore[misc]
        self._editable = editable
        self._formatter = formatter
        self._returns_ids = returns_ids
        self._start_script: deque[BaseException | str] = deque(start_script)
        self._ignore_stop = ignore_stop
        self._on_start = on_start
        self._failures: dict[CallKind, deque[BaseException | None]] = {}
        self._stopped = asyncio.Event()
        self._changed = asyncio.Event()
        self._next_id = 0
        self.calls: list[Call] = []
        self.inbound: InboundSender | None = None
        #: Held during `send`, per chat: a test can block one chat's deliveries.
        self.gates: dict[str, asyncio.Event] = {}
        #: Chats whose `send` is waiting at its gate right now.
        self.held: set[str] = set()

    @property
    def name(self) -> str:
        return self._name

    # -- test controls ----------------------------------------------------------------------

    def fail(self, kind: CallKind, *errors: BaseException | None) -> None:
        """The next calls of `kind` raise these, in turn; a None lets its call succeed."""
        self._failures.setdefault(kind, deque()).extend(errors)

    def of(self, *kinds: CallKind, ok: bool = True) -> list[Call]:
        """Recorded calls of these kinds (only successful ones unless `ok=False`)."""
        return [c for c in self.calls if c.kind in kinds and (c.ok or not ok)]

    @property
    def delivered(self) -> list[str]:
        """The contents of successful sends, in order."""
        return [c.content for c in self.of("send", "send_with_id")]

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

    async def receive(self, content: str, *, chat_id: str = "c1", sender_id: str = "u1") -> None:
        """A platform user writes to the bot."""
        assert self.inbound is not None, "receive() before start()"
        await self.inbound.send(
            InboundMessage(channel=self.name, sender_id=sender_id, chat_id=chat_id, content=content)
        )

    # -- Channel ---------------------------------------------------------------------------

    async def start(self, inbound: InboundSender) -> None:
        self._record(Call("start", at=self._clock()))
        self.inbound = inbound
        self._stopped.clear()
        if self._on_start is not None:
            self._on_start()
        if self._start_script:
            step = self._start_script.popleft()
            if isinstance(step, BaseException):
                raise step
            if step == RETURN:
                return
        if self._ignore_stop:
            await asyncio.Event().wait()
        await self._stopped.wait()

    def hold(self, chat_id: str) -> asyncio.Event:
        """Deliveries to `chat_id` wait (in `held`) until the returned event is set."""
        gate = self.gates[chat_id] = asyncio.Event()
        return gate

    async def stop(self) -> None:
        self._record(Call("stop", at=self._clock()))
        self._stopped.set()

    async def send(self, message: OutboundMessage) -> None:
        gate = self.gates.get(message.chat_id)
        if gate is not None and not gate.is_set():
            self.held.add(message.chat_id)
            self._changed.set()
            try:
                await gate.wait()
            finally:
                self.held.discard(message.chat_id)
        self._attempt(Call("send", message.chat_id, message.content, message=message))

    def supports_edit(self) -> bool:
        return self._editable

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        self._next_id += 1
        message_id = f"m{self._next_id}" if self._returns_ids else None
        self._attempt(
            Call("send_with_id", message.chat_id, message.content, message_id, message=message)
        )
        return message_id

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        self._attempt(Call("edit", chat_id, content, message_id))

    async def send_typing(self, chat_id: str) -> None:
        self._attempt(Call("typing", chat_id))

    async def stop_typing(self, chat_id: str) -> None:
        self._attempt(Call("stop_typing", chat_id))

    def format_outbound(self, content: str) -> str:
        return content if self._formatter is None else self._formatter(content)

    # -- recording -------------------------------------------------------------------------

    def _attempt(self, call: Call) -> None:
        failures = self._failures.get(call.kind)
        error = failures.popleft() if failures else None
        self._record(
            Call(
                call.kind,
                call.chat_id,
                call.content,
                call.message_id,
                call.message,
                self._clock(),
                error,
            )
        )
        if error is not None:
            raise error

    def _record(self, call: Call) -> None:
        self.calls.append(call)
        self._changed.set()


class FinishingChannel(RecordingChannel):
    """A channel whose platform must hear the end of a stream (it overrides `finish_stream`)."""

    async def finish_stream(self, chat_id: str, message_id: str, content: str) -> None:
        self._attempt(Call("finish", chat_id, content, message_id))


class WholeSendChannel(RecordingChannel):
    """A platform whose `send_with_id` is its send (Telegram, Discord, Slack, ...)."""

    send_with_id_sends_whole = True


class DeletingChannel(WholeSendChannel):
    """A platform whose bot may delete its own messages (Telegram, Discord, Slack)."""

    async def delete_message(self, chat_id: str, message_id: str) -> None:
        self._attempt(Call("delete", chat_id, message_id=message_id))
