"""The test side of `SocketChannel`: a TCP hub that plays the chat platform."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

from bus import InboundMessage, OutboundMessage

WAIT_S = 20.0


class ChannelHub:
    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._writers: dict[str, asyncio.StreamWriter] = {}
        self._all_writers: set[asyncio.StreamWriter] = set()
        self._outbound: asyncio.Queue[OutboundMessage] = asyncio.Queue()
        self._hellos: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._connected: dict[str, asyncio.Event] = {}
        self._scripted_errors: deque[dict[str, Any]] = deque()
        self.port = 0
        self.refused_sends = 0

    async def __aenter__(self) -> ChannelHub:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._all_writers):
            writer.close()
        await self._server.wait_closed()

    def connected(self, name: str) -> asyncio.Event:
        return self._connected.setdefault(name, asyncio.Event())

    def fail_next_send(self, kind: str = "rate_limited", retry_after_s: float = 0.5) -> None:
        self._scripted_errors.append({"op": "error", "kind": kind, "retry_after_s": retry_after_s})

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._all_writers.add(writer)
        try:
            await self._serve_connection(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the daemon went away (killed, or restarting the channel): a normal ending
        finally:
            self._all_writers.discard(writer)
            writer.close()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        name = ""
        while line := await reader.readline():
            frame = json.loads(line)
            if frame["op"] == "hello":
                name = frame["name"]
                self._writers[name] = writer
                self.connected(name).set()
                await self._hellos.put(frame)
            elif frame["op"] == "send":
                if self._scripted_errors:
                    self.refused_sends += 1
                    answer = self._scripted_errors.popleft()
                else:
                    answer = {"op": "ack"}
                    await self._outbound.put(OutboundMessage.model_validate(frame["message"]))
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        if name and self._writers.get(name) is writer:
            del self._writers[name]
            self.connected(name).clear()

    async def next_hello(self) -> dict[str, Any]:
        return await asyncio.wait_for(self._hellos.get(), WAIT_S)

    async def say(
        self,
        text: str,
        *,
        chat_id: str = "chat-1",
        sender_id: str = "alice",
        channel: str = "test",
        message_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        await asyncio.wait_for(self.connected(channel).wait(), WAIT_S)
        message = InboundMessage(
            channel=channel,
            sender_id=sender_id,
            chat_id=chat_id,
            content=text,
            message_id=message_id,
            metadata=metadata or {},
        )
        writer = self._writers[channel]
        writer.write(json.dumps({"op": "inbound", "message": message.to_dict()}).encode() + b"\n")
        await writer.drain()

    async def reply(self, timeout_s: float = WAIT_S) -> OutboundMessage:
        return await asyncio.wait_for(self._outbound.get(), timeout_s)

    def pending_replies(self) -> int:
        return self._outbound.qsize()
