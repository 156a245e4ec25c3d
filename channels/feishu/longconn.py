"""Websocket mode: Feishu's long connection, over aiohttp under the daemon's own event loop.

lark-oapi's client captures an event loop when imported and runs its own, so it cannot live in
a running daemon; this client speaks the same protocol: `POST /callback/ws/endpoint` with the
app's credentials gives a `wss://` URL (its query names `service_id`) and client settings; the
socket carries protobuf frames (`py`). Pings go out every `PingInterval` seconds; an
event frame is acknowledged only after `on_event` returns True (the message is durable), so a
crash before that leaves Feishu to redeliver. A connection that fails or goes silent is
replaced, with exponential backoff and jitter; refused credentials are fatal.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import structlog
from google.protobuf.message import DecodeError

from channels.errors import AuthError, ChannelError, TransientError
from channels.feishu.api import CHANNEL, FeishuApi
from channels.feishu.pbbp2_pb2 import Frame, Header
from channels.health import ChannelHealth
from channels.lifecycle.bounded import AgedMap
from channels.lifecycle.reconnect import ReconnectPolicy, reconnecting
from channels.retry import full_jitter
from channels.web.webhook import UnreadableJson, json_payload

# Frames of Feishu's long connection: protobuf `pbbp2.Frame`s (generated from pbbp2.proto).
#
# A frame is a control frame (`method` 0: ping, pong) or a data frame (`method` 1: an event).
# Headers say the data frame's `type` (event, card), its `message_id`, and for a payload cut into
# parts `sum` and `seq`; the parts are joined before the event is read. Every event frame is
# answered by sending the frame back with the payload `{"code": 200}` and a `biz_rt` header
# (milliseconds spent): without it Feishu delivers the event again.
CONTROL, DATA = 0, 1


def header(frame: Frame, key: str, default: str = "") -> str:
    for item in frame.headers:
        if item.key == key:
            return str(item.value)
    return default


def parse(data: bytes) -> Frame:
    frame = Frame()
    frame.ParseFromString(data)
    return frame


def ping(service_id: int) -> bytes:
    frame = Frame(
        SeqID=0,
        LogID=0,
        service=service_id,
        method=CONTROL,
        headers=[Header(key="type", value="ping")],
    )
    return bytes(frame.SerializeToString())


def acknowledgement(frame: Frame, elapsed_ms: int, code: int = 200) -> bytes:
    """The answer to a data frame: the same frame, `biz_rt` added, the payload `{"code"}`."""
    answer = Frame()
    answer.CopyFrom(frame)
    answer.headers.append(Header(key="biz_rt", value=str(elapsed_ms)))
    answer.payload = json.dumps({"code": code}).encode()
    return bytes(answer.SerializeToString())


#: Payloads whose parts are awaited at once, at most, and how long the first part waits for
#: the rest before the payload is forgotten.
MAX_PENDING_PAYLOADS = 64
PARTS_TTL_S = 10.0


class Reassembler:
    """Joins the parts of a payload Feishu cut into `sum` frames; bounded in count and age."""

    def __init__(self) -> None:
        #: message_id -> its parts so far, None where one has not come yet.
        self._pending: AgedMap[str, list[bytes | None]] = AgedMap(MAX_PENDING_PAYLOADS, PARTS_TTL_S)

    def add(self, frame: Frame) -> bytes | None:
        """The whole payload once every part has come; None while parts are missing."""
        total = int(header(frame, "sum", "1") or 1)
        if total <= 1:
            return bytes(frame.payload)
        seq = int(header(frame, "seq", "0") or 0)
        if not 0 <= seq < total:
            raise ValueError(f"part {seq} of {total}")
        key = header(frame, "message_id")
        pieces = self._pending.get(key)
        if pieces is None or len(pieces) != total:
            pieces = [None] * total
            self._pending.put(key, pieces)
        pieces[seq] = bytes(frame.payload)
        if any(piece is None for piece in pieces):
            return None
        self._pending.pop(key)
        return b"".join(piece for piece in pieces if piece is not None)


log = structlog.get_logger(__name__)

EventHandler = Callable[[bytes], Awaitable[bool]]
HealthListener = Callable[[ChannelHealth], None]

DEFAULT_PING_INTERVAL_S = 120.0
CONNECT_TIMEOUT_S = 15.0
SEND_TIMEOUT_S = 10.0
#: A connection that says nothing (not even a pong) for this many ping intervals is dead.
SILENT_PINGS = 3
#: Jittered: every app's connections that dropped together should not all return at once.
RECONNECT = ReconnectPolicy(base_s=1.0, cap_s=60.0, jitter=full_jitter)


@dataclass(eq=False)
class LongConnection:
    api: FeishuApi
    on_event: EventHandler
    _: KW_ONLY
    on_health: HealthListener
    reconnect: ReconnectPolicy = RECONNECT
    #: Set while connected (the channel passes its run state's `receiving`).
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    #: How many connections were made so far.
    connections: int = field(default=0, init=False)
    _ping_interval_s: float = field(default=DEFAULT_PING_INTERVAL_S, init=False, repr=False)
    _parts: Reassembler = field(default_factory=Reassembler, init=False, repr=False)

    async def run(self, stopping: asyncio.Event) -> None:
        """Stay connected until `stopping` is set or this task is cancelled."""
        await reconnecting(
            self._connect_once,
            stopping,
            channel=CHANNEL,
            failed_event="feishu.ws_failed",
            policy=self.reconnect,
            # Any refusal Feishu gives a connection (a bad endpoint answer) is worth another try.
            retry_on=(ChannelError, aiohttp.ClientError, OSError),
            refused="Feishu refused the app credentials",
            suggestion="check app_id and app_secret",
            on_ended=self._ended,
        )

    def _ended(self) -> None:
        self.connected.clear()
        self.on_health(ChannelHealth.degraded("reconnecting to Feishu"))

    async def _connect_once(self) -> None:
        endpoint = await self.api.ws_endpoint()
        url = str(endpoint["URL"])
        self._configure(endpoint.get("ClientConfig"))
        service_id = int(parse_qs(urlsplit(url).query).get("service_id", ["0"])[0] or 0)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                ws = await self.api.http().ws_connect(url, autoping=True, heartbeat=None)
        except aiohttp.WSServerHandshakeError as exc:
            raise handshake_error(exc) from exc
        async with ws:
            self.connections += 1
            self.connected.set()
            self.on_health(ChannelHealth.healthy())
            log.info("feishu.ws_connected", service_id=service_id)
            pinger = asyncio.create_task(self._ping(ws, service_id), name="feishu-ws-ping")
            try:
                await self._receive(ws)
            finally:
                pinger.cancel()
                await asyncio.gather(pinger, return_exceptions=True)
        log.info("feishu.ws_closed", code=ws.close_code)

    def _configure(self, config: Any) -> None:
        if isinstance(config, dict):
            interval = config.get("PingInterval")
            if isinstance(interval, int | float) and interval > 0:
                self._ping_interval_s = float(interval)

    async def _ping(self, ws: aiohttp.ClientWebSocketResponse, service_id: int) -> None:
        while True:
            async with asyncio.timeout(SEND_TIMEOUT_S):
                await ws.send_bytes(ping(service_id))
            await asyncio.sleep(self._ping_interval_s)

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while True:
            message = await ws.receive(timeout=SILENT_PINGS * self._ping_interval_s)
            if message.type == aiohttp.WSMsgType.BINARY:
                await self._frame(ws, message.data)
            elif message.type in (
                aiohttp.WSMsgType.CLOSE,
                aiohttp.WSMsgType.CLOSING,
                aiohttp.WSMsgType.CLOSED,
                aiohttp.WSMsgType.ERROR,
            ):
                return
            else:
                log.debug("feishu.ws_frame_ignored", kind=message.type.name)

    async def _frame(self, ws: aiohttp.ClientWebSocketResponse, data: bytes) -> None:
        try:
            frame = parse(data)
            if frame.method == CONTROL:
                if header(frame, "type") == "pong" and frame.payload:
                    self._configure(_json(frame.payload))
                return
            payload = self._parts.add(frame)
        except (DecodeError, ValueError) as exc:
            log.warning("feishu.malformed_frame_skipped", error=str(exc))
            return
        if payload is None:
            return
        started = time.monotonic()
        # A card frame is a card's callback (a button tapped), read like an event; its
        # acknowledgement is the answer Feishu wants within 3 s.
        taken = header(frame, "type") in ("event", "card")
        durable = await self.on_event(payload) if taken else True
        if durable:
            elapsed_ms = int((time.monotonic() - started) * 1000)
            async with asyncio.timeout(SEND_TIMEOUT_S):
                await ws.send_bytes(acknowledgement(frame, elapsed_ms))


def handshake_error(exc: aiohttp.WSServerHandshakeError) -> ChannelError:
    """Feishu refuses an upgrade with `handshake-status` (403: the app may not use the long
    connection; 514: authentication failed) and `handshake-msg` headers."""
    headers: Mapping[str, str] = exc.headers or {}
    status, message = headers.get("handshake-status", ""), headers.get("handshake-msg", "")
    detail = f"long connection refused: HTTP {exc.status}, handshake-status {status} ({message})"
    if status == "403":
        return AuthError(
            detail,
            channel=CHANNEL,
            suggestion="enable event delivery over a persistent connection for the app, "
            "or use mode: webhook",
        )
    # 514 with too many connections, or Feishu's own trouble: worth another try later.
    return TransientError(detail, channel=CHANNEL)


def _json(payload: bytes) -> Any:
    try:
        return json_payload(payload)
    except UnreadableJson:
        return None
