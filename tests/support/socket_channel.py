"""A channel for daemon tests: it talks JSON lines over TCP to a hub the test runs.

It implements only the three required members of `Channel`, as a third-party channel would, and
is loaded by the daemon as a `plugin` channel. Each outbound message is acknowledged by the hub,
which can answer with an error to exercise the retry policy.

Wire format, one JSON object per line:
  hub -> channel: {"op": "inbound", "message": {...InboundMessage...}}
  channel -> hub: {"op": "hello", "name": ...} once connected, {"op": "send", "message": {...}}
  hub -> channel: {"op": "ack"} or {"op": "error", "kind": "rate_limited", "retry_after_s": 1.5}
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bus import InboundMessage, InboundSender, OutboundMessage
from channels.base import Channel
from channels.errors import FatalChannelError, RateLimited, TransientError


class SocketChannel(Channel):
    def __init__(self, config: Any, context: Any) -> None:
        options: dict[str, Any] = config.options
        self._name = str(options.get("name", "test"))
        self._host = str(options.get("host", "127.0.0.1"))
        self._port = int(options["port"])
        self._fail_starts = int(options.get("fail_starts", 0))
        self._fatal = bool(options.get("fatal", False))
        self._starts = 0
        self._writer: asyncio.StreamWriter | None = None
        self._acks: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._send_lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return self._name

    async def start(self, inbound: InboundSender) -> None:
        self._starts += 1
        reader, writer = await asyncio.open_connection(self._host, self._port)
        self._writer = writer
        try:
            await self._write({"op": "hello", "name": self._name, "start": self._starts})
            if self._fatal:
                raise FatalChannelError("the test asked for a fatal start", channel=self._name)
            if self._starts <= self._fail_starts:
                raise RuntimeError(f"start attempt {self._starts} fails on purpose")
            while line := await reader.readline():
                frame = json.loads(line)
                if frame["op"] == "inbound":
                    await inbound.send(InboundMessage.model_validate(frame["message"]))
                else:
                    await self._acks.put(frame)
            raise ConnectionError("the hub closed the connection")
        finally:
            # Each start has its own connection: a restart or a cancellation must not leak it.
            writer.close()

    async def _write(self, frame: dict[str, Any]) -> None:
        assert self._writer is not None, "send before start"
        self._writer.write(json.dumps(frame).encode() + b"\n")
        await self._writer.drain()

    async def send(self, message: OutboundMessage) -> None:
        async with self._send_lock:
            await self._write({"op": "send", "message": message.to_dict()})
            answer = await asyncio.wait_for(self._acks.get(), timeout=30)
        if answer["op"] == "ack":
            return
        if answer.get("kind") == "rate_limited":
            raise RateLimited(float(answer["retry_after_s"]), channel=self._name)
        raise TransientError(str(answer.get("detail", "hub refused")), channel=self._name)


class FlakySocketChannel(SocketChannel):
    """A second plugin class, so a profile can hold a failing channel beside a healthy one."""
