"""What a worker asks of a profile: its queue mode, its answer to a chat's messages, and the
transactions its answer is stored in (built in `gateway.cluster_worker`)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol

from bus import InboundMessage, Message
from cluster.answer import Answer
from cluster.live import LiveTurn
from config.profile import QueueMode

if TYPE_CHECKING:
    from sessions.postgres.connect import Connection


class ProfileWorker(Protocol):
    """One profile's agent side, as the worker uses it (built in `gateway.cluster_worker`)."""

    @property
    def queue_mode(self) -> QueueMode: ...

    async def answer(
        self, messages: Sequence[InboundMessage], turn_id: str, live: LiveTurn | None = None
    ) -> Answer:
        """The answer to `messages`: one, or several of a chat collected into one turn;
        `live`: where the turn shows its snapshots and typing (None: nowhere)."""
        ...

    def effect_transaction(
        self, message: InboundMessage
    ) -> AbstractAsyncContextManager[Connection | None]:
        """For a message whose answer changes chat state (a command), the transaction its
        effect and its stored reply commit in; None for the others (an agent turn's messages
        are stored with its reply, and no transaction is held across the agent's call)."""
        ...

    def turn_transaction(self) -> AbstractAsyncContextManager[Connection]:
        """A transaction of the profile's session store, that `append` joins: a turn's stored
        reply and its session messages commit in it together (a savepoint inside a command's
        `effect_transaction`)."""
        ...

    async def append(self, session_key: str, messages: Sequence[Message]) -> None:
        """Append to the session (idempotent), inside `turn_transaction` when in one."""
        ...
