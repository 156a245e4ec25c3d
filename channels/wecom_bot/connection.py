"""One authenticated websocket connection to the WeCom AI bot server.

`AibotConnection` sends frames and waits for their acknowledgements (matched by `req_id`), and
hands every message and event callback to the channel. Frames answering one callback (`req_id`)
go out one at a time: the next is sent only once the previous one's acknowledgement came back,
as the official SDK does; different `req_id`s (concurrent turns) do not wait for each other.

`run()` reads until the connection closes and pings every `timeouts.ping_interval_s`; two pings
in a row without an acknowledgement count the connection as dead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import structlog

from channels.errors import AuthError, ChannelError, RateLimited, TransientError
from channels.lifecycle.reconnect import ReconnectPolicy
from channels.wecom_bot import frames
from channels.wecom_bot.frames import Frame, MalformedFrame

log = structlog.get_logger(__name__)

CHANNEL = "wecom-bot"
#: The server's "API freq out of limit" code.
RATE_LIMIT_CODES = frozenset({45009, 45033})
#: WeCom does not say how long to wait on a rate limit; a conservative pause.
RATE_LIMIT_WAIT_S = 2.0
MISSED_PINGS_ALLOWED = 2
#: After the websocket ends: 1 s, doubling to 30 s while it keeps failing.
RECONNECT = ReconnectPolicy(base_s=1.0, cap_s=30.0)

FrameHandler = Callable[[Frame], Awaitable[None]]


@dataclass(eq=False)
class _ReplyLane:
    """Serialises the frames answering one callback; forgotten when nobody uses it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class ConnectionClosed(TransientError):
    """The websocket went away while a frame waited for its acknowledgement."""


def ack_error(frame: Frame, action: str) -> ChannelError:
    code, message = frame.errcode, frame.errmsg or "no message"
    text = f"{action} refused: errcode {code} ({message})"
    if code in RATE_LIMIT_CODES:
        return RateLimited(RATE_LIMIT_WAIT_S, text, channel=CHANNEL)
    return ChannelError(text, channel=CHANNEL)


@dataclass(frozen=True, slots=True)
class WecomBotTimeouts:
    """How long the bot waits on WeCom, and before connecting again; the tests shorten them."""

    #: Opening the websocket.
    connect_s: float = 10.0
    #: How long a frame may take to go out, and its acknowledgement to come back.
    ack_s: float = 5.0
    #: How often `run()` pings (MISSED_PINGS_ALLOWED unanswered in a row end the connection).
    ping_interval_s: float = 30.0
    #: The pause before the channel connects again after the websocket ended.
    reconnect: ReconnectPolicy = RECONNECT


class AibotConnection:
    def __init__(self, socket: aiohttp.ClientWebSocketResponse, timeouts: WecomBotTimeouts) -> None:
        self._socket = socket
        self._timeouts = timeouts
        self._acks: dict[str, asyncio.Future[Frame]] = {}
        self._reply_lanes: dict[str, _ReplyLane] = {}
        self._closed = asyncio.Event()

    @classmethod
    async def open(
        cls, http: aiohttp.ClientSession, url: str, timeouts: WecomBotTimeouts
    ) -> AibotConnection:
        """Connect to `url`, not yet subscribed."""
        socket = await asyncio.wait_for(http.ws_connect(url), timeouts.connect_s)
        return cls(socket, timeouts)

    @property
    def closed(self) -> bool:
        return self._closed.is_set() or self._socket.closed

    async def subscribe(self, bot_id: str, secret: str) -> None:
        """Authenticate: the first frame of a connection, before `run()` reads. Raises
        AuthError when WeCom refuses the credentials."""
        req_id, text = frames.subscribe(bot_id, secret)
        async with asyncio.timeout(self._timeouts.ack_s):
            await self._socket.send_str(text)
            ack = await self._first_ack(req_id)
        if ack.errcode != 0:
            raise AuthError(
                f"aibot_subscribe refused: errcode {ack.errcode} ({ack.errmsg})",
                channel=CHANNEL,
                suggestion="check bot_id and secret in the WeCom admin (AI bot, API mode)",
            )

    async def _first_ack(self, req_id: str) -> Frame:
        while True:
            message = await self._socket.receive()
            if message.type != aiohttp.WSMsgType.TEXT:
                raise ConnectionClosed(
                    f"the websocket closed before aibot_subscribe was answered ({message.type})",
                    channel=CHANNEL,
                )
            try:
                frame = frames.parse_frame(message.data)
            except MalformedFrame as exc:
                log.warning("wecom_bot.malformed_frame_skipped", error=str(exc))
                continue
            if frame.req_id == req_id:
                return frame

    async def respond(self, req_id: str, text: str, *, cmd: str = frames.RESPOND) -> None:
        """Send a frame answering callback `req_id` (a reply, or `cmd` the card update that
        answers a tap), after the previous one for it was acknowledged."""
        lane = self._reply_lanes.get(req_id)
        if lane is None:
            lane = self._reply_lanes[req_id] = _ReplyLane()
        lane.users += 1
        try:
            async with lane.lock:
                ack = await self._request(req_id, text)
        finally:
            lane.users -= 1
            if lane.users == 0:
                del self._reply_lanes[req_id]
        if ack.errcode != 0:
            raise ack_error(ack, cmd)

    async def send(self, req_id: str, text: str) -> None:
        """Send a frame of the bot's own (`aibot_send_msg`) and wait for its acknowledgement."""
        ack = await self._request(req_id, text)
        if ack.errcode != 0:
            raise ack_error(ack, frames.SEND)

    async def _request(self, req_id: str, text: str) -> Frame:
        if self.closed:
            raise ConnectionClosed("the websocket is not connected", channel=CHANNEL)
        waiter: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._acks[req_id] = waiter
        try:
            await asyncio.wait_for(self._socket.send_str(text), self._timeouts.ack_s)
            return await asyncio.wait_for(asyncio.shield(waiter), self._timeouts.ack_s)
        except TimeoutError as exc:
            raise TransientError(
                f"no acknowledgement for {req_id} within {self._timeouts.ack_s:g} s",
                channel=CHANNEL,
            ) from exc
        except (ConnectionResetError, aiohttp.ClientError) as exc:
            raise ConnectionClosed(f"sending failed: {exc}", channel=CHANNEL) from exc
        finally:
            if self._acks.get(req_id) is waiter:
                del self._acks[req_id]
            waiter.cancel()

    async def run(self, on_callback: FrameHandler) -> None:
        """Read frames until the connection closes; `on_callback` gets every callback frame."""
        pinger = asyncio.create_task(self._ping_loop(), name="wecom-bot:ping")
        try:
            await self._read(on_callback)
        finally:
            self._closed.set()
            pinger.cancel()
            await asyncio.gather(pinger, return_exceptions=True)
            for waiter in self._acks.values():
                if not waiter.done():
                    waiter.set_exception(ConnectionClosed("the websocket closed", channel=CHANNEL))
            with contextlib.suppress(TimeoutError, aiohttp.ClientError, ConnectionResetError):
                await asyncio.wait_for(self._socket.close(), 2.0)

    async def _read(self, on_callback: FrameHandler) -> None:
        async for message in self._socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                if message.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSE):
                    return
                continue
            try:
                frame = frames.parse_frame(message.data)
            except MalformedFrame as exc:
                log.warning("wecom_bot.malformed_frame_skipped", error=str(exc))
                continue
            if frame.cmd in (frames.MESSAGE_CALLBACK, frames.EVENT_CALLBACK):
                await on_callback(frame)
                continue
            waiter = self._acks.get(frame.req_id)
            if waiter is not None and not waiter.done():
                waiter.set_result(frame)
            else:
                log.debug("wecom_bot.unexpected_frame", req_id=frame.req_id, cmd=frame.cmd)

    async def _ping_loop(self) -> None:
        missed = 0
        while True:
            await asyncio.sleep(self._timeouts.ping_interval_s)
            req_id, text = frames.ping()
            try:
                await self._request(req_id, text)
                missed = 0
            except TransientError as exc:
                missed += 1
                log.warning("wecom_bot.ping_unanswered", missed=missed, error=str(exc))
                if missed >= MISSED_PINGS_ALLOWED or self.closed:
                    with contextlib.suppress(TimeoutError, aiohttp.ClientError):
                        await asyncio.wait_for(self._socket.close(), 2.0)
                    return

    async def close(self) -> None:
        self._closed.set()
        await asyncio.wait_for(self._socket.close(), 2.0)
