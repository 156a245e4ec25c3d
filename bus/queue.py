"""The in-process bus: channels publish inbound messages, the agent side answers outbound.

Outbound, the agent side sends typed events (`bus.outbound`): replies, stream snapshots and
typing signals, in the order the channels should see them.

`create_bus` returns the two ends. Nothing above the bus may depend on it being in-process:
the same two interfaces can run over a broker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from bus.envelope import InboundMessage
from bus.outbound import OutboundEvent
from bus.pipe import PipeReceiver, PipeSender, pipe

DEFAULT_CAPACITY = 4096


class AgentHandle:
    """The agent's end: receives inbound messages, sends outbound events."""

    def __init__(
        self, inbound: PipeReceiver[InboundMessage], outbound: PipeSender[OutboundEvent]
    ) -> None:
        self._inbound = inbound
        self._outbound = outbound

    async def recv(self) -> InboundMessage | None:
        """The next inbound message, or `None` once every channel's sender is closed."""
        return await self._inbound.recv()

    def __aiter__(self) -> AsyncIterator[InboundMessage]:
        return aiter(self._inbound)

    async def send(self, event: OutboundEvent) -> None:
        await self._outbound.send(event)

    def outbound_sender(self) -> PipeSender[OutboundEvent]:
        return self._outbound.clone()

    def close(self) -> None:
        """No more replies: the publisher's `recv_outbound` returns `None` once drained."""
        self._outbound.close()

    def inbound_depth(self) -> int:
        return self._inbound.depth()

    def outbound_depth(self) -> int:
        return self._outbound.depth()


# The mirror of `AgentHandle`, deliberately written out: each end holds the other halves of
# the same two pipes, and says what its side may do with them.
class BusPublisher:
    """The channels' end: publishes inbound messages, receives outbound events."""

    def __init__(
        self, inbound: PipeSender[InboundMessage], outbound: PipeReceiver[OutboundEvent]
    ) -> None:
        self._inbound = inbound
        self._outbound = outbound

    def inbound_sender(self) -> PipeSender[InboundMessage]:
        """A sender of its own for one channel; close it when the channel stops."""
        return self._inbound.clone()

    async def publish(self, message: InboundMessage) -> None:
        await self._inbound.send(message)

    async def recv_outbound(self) -> OutboundEvent | None:
        return await self._outbound.recv()

    def outbound(self) -> AsyncIterator[OutboundEvent]:
        return aiter(self._outbound)

    def close(self) -> None:
        """Closes the publisher's own inbound sender; clones handed to channels stay open."""
        self._inbound.close()

    def outbound_depth(self) -> int:
        return self._outbound.depth()


def create_bus(capacity: int = DEFAULT_CAPACITY) -> tuple[AgentHandle, BusPublisher]:
    inbound_tx: PipeSender[InboundMessage]
    inbound_rx: PipeReceiver[InboundMessage]
    inbound_tx, inbound_rx = pipe(capacity)
    outbound_tx: PipeSender[OutboundEvent]
    outbound_rx: PipeReceiver[OutboundEvent]
    outbound_tx, outbound_rx = pipe(capacity)
    return AgentHandle(inbound_rx, outbound_tx), BusPublisher(inbound_tx, outbound_rx)
