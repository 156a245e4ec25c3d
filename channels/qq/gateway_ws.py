"""QQ's websocket gateway (`mode: websocket`), which QQ is retiring in favour of webhooks.

`GET /gateway` names the websocket; the server opens with op 10 (Hello, the heartbeat interval),
the client identifies (op 2: `QQBot <access token>`, intents for C2C and group messages) or
resumes a session it had (op 6), then receives dispatches (op 0) and heartbeats (op 1, carrying
the last sequence number; answered op 11) until the server asks for a reconnect (op 7), calls
the session invalid (op 9) or closes.

There is no per-event acknowledgement in this protocol: the sequence number the heartbeat
reports, and a resume continues from, is what tells QQ how far the bot got. So it moves past an
event only once the channel's handler returned, i.e. once the message is durable.

The session and that sequence are kept on disk (`SessionFile`), so a restart resumes the session
and QQ replays what was sent while the daemon was away, for as long as QQ keeps the session
(a short while: then it answers op 9, and the gap is logged as `qq.gap_unfilled`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from channels.errors import AuthError, TransientError
from channels.qq.api import CHANNEL
from channels.web.webhook import UnreadableJson, json_payload
from sessions.durable import read_state_json, write_state_json

log = structlog.get_logger(__name__)

OP_DISPATCH, OP_HEARTBEAT, OP_IDENTIFY, OP_RESUME = 0, 1, 2, 6
OP_RECONNECT, OP_INVALID_SESSION, OP_HELLO, OP_HEARTBEAT_ACK = 7, 9, 10, 11
#: C2C messages and group @-mentions (GROUP_AND_C2C_EVENT).
INTENTS = 1 << 25
#: Close codes after which identifying again with the same credentials cannot help.
FATAL_CLOSE_CODES = frozenset({4004, 4010, 4011, 4012, 4013, 4014, 4914, 4915})
MISSED_HEARTBEATS_ALLOWED = 2

DispatchHandler = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class SessionState:
    """What a resume needs: the session and the last event handled."""

    session_id: str | None = None
    seq: int | None = None


class SessionFile:
    """The gateway session, kept across restarts; written atomically in a worker thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._saved: tuple[str | None, int | None] = (None, None)

    async def load(self) -> SessionState:
        data = await asyncio.to_thread(
            read_state_json, self.path, unreadable_event="qq.session_unreadable"
        )
        session_id = data.get("session_id") if isinstance(data, dict) else None
        seq = data.get("seq") if isinstance(data, dict) else None
        state = SessionState(
            session_id if isinstance(session_id, str) and session_id else None,
            seq if isinstance(seq, int) else None,
        )
        self._saved = (state.session_id, state.seq)
        return state

    async def save(self, state: SessionState) -> None:
        current = (state.session_id, state.seq)
        if current == self._saved:
            return
        data = {"session_id": state.session_id, "seq": state.seq}
        # Shielded: a cancellation mid-write must not leave the file behind the events.
        await asyncio.shield(asyncio.to_thread(write_state_json, self.path, data))
        self._saved = current


@dataclass(eq=False)
class GatewaySession:
    """One websocket connection; `run` returns when it ends and the caller should reconnect."""

    socket: aiohttp.ClientWebSocketResponse
    state: SessionState
    _: KW_ONLY
    token: str
    on_dispatch: DispatchHandler
    #: What the session asks to be sent (`INTENTS`, and the taps' intent where buttons show).
    intents: int = INTENTS
    on_ready: Callable[[], None]
    #: Called whenever the session or its sequence changed (to keep them on disk).
    on_progress: Callable[[SessionState], Awaitable[None]] | None = None
    hello_timeout_s: float = 10.0
    #: Heartbeats sent since the last op 11; two unanswered count the connection as dead.
    _unanswered: int = field(default=0, init=False, repr=False)

    async def run(self) -> None:
        hello = await asyncio.wait_for(self._receive(), self.hello_timeout_s)
        if hello is None or hello.get("op") != OP_HELLO:
            raise TransientError(f"expected op 10 Hello, got {hello!r}", channel=CHANNEL)
        interval_ms = (hello.get("d") or {}).get("heartbeat_interval", 41250)
        await self._hand_in()
        beater = asyncio.create_task(
            self._heartbeats(float(interval_ms) / 1000), name="qq:heartbeat"
        )
        try:
            await self._read()
        finally:
            beater.cancel()
            await asyncio.gather(beater, return_exceptions=True)

    async def _hand_in(self) -> None:
        token = f"QQBot {self.token}"
        if self.state.session_id is not None and self.state.seq is not None:
            payload: dict[str, Any] = {
                "op": OP_RESUME,
                "d": {"token": token, "session_id": self.state.session_id, "seq": self.state.seq},
            }
        else:
            payload = {
                "op": OP_IDENTIFY,
                "d": {"token": token, "intents": self.intents, "shard": [0, 1], "properties": {}},
            }
        await self._send(payload)

    async def _send(self, payload: dict[str, Any]) -> None:
        await asyncio.wait_for(self.socket.send_str(json.dumps(payload)), 10.0)

    async def _receive(self) -> dict[str, Any] | None:
        message = await self.socket.receive()
        if message.type != aiohttp.WSMsgType.TEXT:
            self._check_close()
            return None
        try:
            payload = json_payload(message.data)
        except UnreadableJson:
            log.warning("qq.malformed_gateway_frame_skipped", frame=str(message.data)[:200])
            return {}
        return payload if isinstance(payload, dict) else {}

    def _check_close(self) -> None:
        code = self.socket.close_code
        if code in FATAL_CLOSE_CODES:
            raise AuthError(
                f"the QQ gateway closed the connection with code {code}",
                channel=CHANNEL,
                suggestion="check app_id, app_secret and the bot's intents (C2C and groups)",
            )

    async def _read(self) -> None:
        while True:
            payload = await self._receive()
            if payload is None:
                return
            op = payload.get("op")
            if op == OP_DISPATCH:
                await self._dispatch(payload)
            elif op == OP_HEARTBEAT_ACK:
                self._unanswered = 0
            elif op == OP_RECONNECT:
                log.info("qq.gateway_reconnect_requested")
                return
            elif op == OP_INVALID_SESSION:
                if self.state.session_id is not None and self.state.seq is not None:
                    log.warning(
                        "qq.gap_unfilled",
                        after_seq=self.state.seq,
                        detail="QQ no longer holds the session: events it sent after this "
                        "sequence while the bot was away are not replayed",
                    )
                else:
                    log.info("qq.gateway_session_invalid")
                self.state.session_id, self.state.seq = None, None
                await self._progressed()
                return

    async def _dispatch(self, payload: dict[str, Any]) -> None:
        kind = payload.get("t")
        if kind == "READY":
            data = payload.get("d") or {}
            self.state.session_id = str(data.get("session_id") or "") or None
            self.state.seq = None  # a new session counts from its own start
            self.on_ready()
            log.info("qq.gateway_ready")
        elif kind == "RESUMED":
            self.on_ready()
            log.info("qq.gateway_resumed")
        else:
            await self.on_dispatch(payload)
        seq = payload.get("s")
        if isinstance(seq, int) and (self.state.seq is None or seq > self.state.seq):
            # Past this event only now that it is handled (durable); never back, as a RESUMED
            # frame's own number may be.
            self.state.seq = seq
        await self._progressed()

    async def _progressed(self) -> None:
        if self.on_progress is not None:
            await self.on_progress(self.state)

    async def _heartbeats(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            if self._unanswered >= MISSED_HEARTBEATS_ALLOWED:
                log.warning("qq.gateway_heartbeats_unanswered", missed=self._unanswered)
                with contextlib.suppress(TimeoutError, aiohttp.ClientError):
                    await asyncio.wait_for(self.socket.close(), 2.0)
                return
            self._unanswered += 1
            with contextlib.suppress(ConnectionResetError):
                await self._send({"op": OP_HEARTBEAT, "d": self.state.seq})
