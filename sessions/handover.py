"""`Handover`: commands from the event loop to a writer thread, once per loop iteration.

A writer thread woken per command costs the loop a queue put and a GIL hand-off for each:
three journal records and a session line a turn, every turn. Commands put here during one
iteration of the loop are gathered and handed over together at the next, so the thread wakes
once for everything the loop did in between (at 100 busy chats, some thirty turns), and the
order of commands is kept. Nothing waits on a timer: the hand-over is the next callback the
loop runs, or with `one_more_iteration` the one after it. The journal asks for that: the turn a
message starts runs in the iteration after the message's record was put (its lane's task is
scheduled then), and an agent that answers at once puts the turn's outcome there too, so the
message and its answer share one write and one fdatasync instead of waiting for two in turn.
A slow agent's outcome comes later whatever the hand-over does; the cost to it is one iteration.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable
from typing import Generic, TypeVar

Command = TypeVar("Command")


class Handover(Generic[Command]):
    def __init__(
        self,
        on_hand_over: Callable[[], None] | None = None,
        *,
        one_more_iteration: bool = False,
    ) -> None:
        """`on_hand_over` runs on the loop just before a gathering is handed over: after it,
        nothing put before may change (the thread may be reading it). `one_more_iteration`:
        what the callbacks made ready by this iteration put joins its gathering."""
        self._queue: queue.SimpleQueue[list[Command]] = queue.SimpleQueue()
        self._gathering: list[Command] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_hand_over = on_hand_over
        self._one_more_iteration = one_more_iteration

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop `put` is called on (the writer's `start` or `open`)."""
        self._loop = loop

    # On the loop

    def put(self, command: Command) -> None:
        gathering = self._gathering
        if gathering is None:
            if self._loop is None:
                raise RuntimeError("the writer is not running")
            gathering = self._gathering = []
            later = self._hand_over_next if self._one_more_iteration else self._hand_over
            self._loop.call_soon(later)
        gathering.append(command)

    def _hand_over_next(self) -> None:
        assert self._loop is not None
        self._loop.call_soon(self._hand_over)

    def _hand_over(self) -> None:
        if self._on_hand_over is not None:
            self._on_hand_over()
        gathering, self._gathering = self._gathering, None
        if gathering:
            self._queue.put(gathering)

    # On the writer thread

    def take(self) -> list[Command]:
        """Everything handed over so far, in order; blocks until there is something."""
        commands = self._queue.get()
        while True:
            try:
                commands.extend(self._queue.get_nowait())
            except queue.Empty:
                return commands
