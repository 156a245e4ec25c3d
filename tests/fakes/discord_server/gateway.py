"""The fake's gateway websocket, speaking Discord's protocol.

HELLO on connect; IDENTIFY -> READY (+ GUILD_CREATE per guild) or close 4004 for a bad token;
HEARTBEAT -> HEARTBEAT_ACK; RESUME -> the events the client missed, then RESUMED, or
INVALID_SESSION for a session the fake does not know. Dispatches carry sequence numbers, and a
session keeps what it sent so a client that lost its connection gets it on RESUME, as from
Discord. `compress=zlib-stream` compresses the connection as one zlib stream, every frame flushed
with Z_SYNC_FLUSH (so each ends in 00 00 ff ff), which is what discord.py asks for unless
zstandard is installed (`zstd-stream` is refused here).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import zlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.discord_server.models import JsonObject
from tests.fakes.discord_server.world import World

OP_DISPATCH, OP_HEARTBEAT, OP_IDENTIFY, OP_RESUME = 0, 1, 2, 6
OP_INVALID_SESSION, OP_HELLO, OP_HEARTBEAT_ACK = 9, 10, 11


class Connection:
    """One websocket; sends are serialised so the zlib stream stays in order."""

    def __init__(self, ws: web.WebSocketResponse, request: web.Request, zlib_stream: bool) -> None:
        self.ws = ws
        self.request = request
        self.compressor = zlib.compressobj() if zlib_stream else None
        self.session: Session | None = None
        self._lock = asyncio.Lock()

    async def send_text(self, text: str) -> None:
        async with self._lock:
            if self.ws.closed:
                return
            try:
                if self.compressor is None:
                    await self.ws.send_str(text)
                else:
                    data = self.compressor.compress(text.encode())
                    await self.ws.send_bytes(data + self.compressor.flush(zlib.Z_SYNC_FLUSH))
            except (ConnectionError, RuntimeError):
                pass  # cut under us: the session keeps the event for RESUME

    async def send(self, payload: JsonObject) -> None:
        await self.send_text(json.dumps(payload))

    def abort(self) -> None:
        """Cut the TCP connection: no close frame, as when a network path dies."""
        transport = self.request.transport
        if transport is not None:
            transport.abort()


@dataclass
class Session:
    id: str
    seq: int = 0
    connection: Connection | None = None
    sent: deque[JsonObject] = field(default_factory=lambda: deque(maxlen=1000))

    async def dispatch(self, event: str, data: Any) -> None:
        self.seq += 1
        frame = {"op": OP_DISPATCH, "t": event, "s": self.seq, "d": data}
        self.sent.append(frame)
        if self.connection is not None:
            await self.connection.send(frame)


class Gateway:
    def __init__(
        self,
        world: World,
        gateway_url: Callable[[], str],
        on_change: Callable[[], Awaitable[None]],
        *,
        heartbeat_interval_ms: int,
    ) -> None:
        self.world = world
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.available = True
        self.refused_count = 0
        #: When set, IDENTIFY is answered by closing with this code (4014: disallowed intents).
        self.identify_close_code: int | None = None
        self.connect_queries: list[dict[str, str]] = []
        self.identify_payloads: list[JsonObject] = []
        self.resume_count = 0
        self.sessions: dict[str, Session] = {}
        self.connections: set[Connection] = set()
        self._gateway_url = gateway_url
        self._on_change = on_change

    @property
    def live_sessions(self) -> list[str]:
        return [
            session.id
            for session in self.sessions.values()
            if session.connection is not None and not session.connection.ws.closed
        ]

    async def dispatch(self, event: str, data: Any) -> None:
        for session in list(self.sessions.values()):
            await session.dispatch(event, data)

    async def close_all(self) -> None:
        for connection in list(self.connections):
            await connection.ws.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not self.available:
            self.refused_count += 1
            await self._on_change()
            return web.Response(status=503, text="gateway unavailable")
        self.connect_queries.append(dict(request.query))
        compress = request.query.get("compress")
        if compress not in (None, "zlib-stream"):
            return web.Response(status=400, text=f"unsupported compress={compress}")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        connection = Connection(ws, request, zlib_stream=compress == "zlib-stream")
        self.connections.add(connection)
        await connection.send(
            {"op": OP_HELLO, "d": {"heartbeat_interval": self.heartbeat_interval_ms}}
        )
        try:
            async for frame in ws:
                if frame.type is WSMsgType.TEXT:
                    await self._on_frame(connection, json.loads(frame.data))
        finally:
            self._forget(connection)
            await self._on_change()
        return ws

    def _forget(self, connection: Connection) -> None:
        self.connections.discard(connection)
        session = connection.session
        if session is None or session.connection is not connection:
            return
        session.connection = None
        if connection.ws.close_code in (1000, 1001):
            # A client that closes cleanly ends its session, as with Discord.
            self.sessions.pop(session.id, None)

    async def _on_frame(self, connection: Connection, frame: JsonObject) -> None:
        op, data = frame.get("op"), frame.get("d")
        if op == OP_HEARTBEAT:
            await connection.send({"op": OP_HEARTBEAT_ACK})
        elif op == OP_IDENTIFY and isinstance(data, dict):
            await self._identify(connection, data)
        elif op == OP_RESUME and isinstance(data, dict):
            await self._resume(connection, data)

    async def _identify(self, connection: Connection, data: JsonObject) -> None:
        if data.get("token") != self.world.token:
            await connection.ws.close(code=4004, message=b"Authentication failed.")
            return
        if self.identify_close_code is not None:
            await connection.ws.close(code=self.identify_close_code, message=b"Refused.")
            return
        self.identify_payloads.append(data)
        session = Session(id=secrets.token_hex(16), connection=connection)
        connection.session = session
        self.sessions[session.id] = session
        ready = {
            "v": 10,
            "user": self.world.bot_payload(),
            "guilds": [{"id": str(g), "unavailable": True} for g in self.world.guilds],
            "session_id": session.id,
            "resume_gateway_url": self._gateway_url(),
            "shard": [0, 1],
            "application": {"id": str(self.world.bot.id), "flags": 0},
            "private_channels": [],
            "relationships": [],
            "session_type": "normal",
        }
        await session.dispatch("READY", ready)
        for guild in self.world.guilds.values():
            await session.dispatch("GUILD_CREATE", self.world.guild_create(guild))
        await self._on_change()

    async def _resume(self, connection: Connection, data: JsonObject) -> None:
        session = self.sessions.get(str(data.get("session_id")))
        if session is None or data.get("token") != self.world.token:
            await connection.send({"op": OP_INVALID_SESSION, "d": False})
            return
        self.resume_count += 1
        session.connection = connection
        connection.session = session
        last_seen = data.get("seq") or 0
        for frame in list(session.sent):
            if frame["s"] > last_seen:
                await connection.send(frame)
        await session.dispatch("RESUMED", {})
        await self._on_change()
