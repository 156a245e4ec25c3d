"""Local fake servers that speak real platforms' and providers' wire formats, for tests.

`LocalHttpServer` runs an aiohttp application on 127.0.0.1 on a free port. Handlers are
cancelled when their client disconnects (`handler_cancellation`), so a fake can notice a client
that went away while it was holding a response open.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Generic, Protocol, Self, TypeVar

from aiohttp import web

from tests.fakes.outage import Outage


class LocalHttpServer:
    """`async with LocalHttpServer(app) as server: server.origin` -> "http://127.0.0.1:PORT"."""

    def __init__(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app, handler_cancellation=True)
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server is not running")
        return self._port

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._port = None
        await self._runner.cleanup()

    @asynccontextmanager
    async def connections_refused(self) -> AsyncIterator[None]:
        """The server down for the block: not listening, its open connections (long polls,
        websockets) dropped; then it listens again on the same port, as a restarted one."""
        port = self.port
        for site in list(self._runner.sites):
            await site.stop()
        assert self._runner.server is not None
        await self._runner.server.shutdown(0.1)
        try:
            yield
        finally:
            await web.TCPSite(self._runner, "127.0.0.1", port).start()


def word_by_word(text: str) -> tuple[str, ...]:
    """`text` cut as a fake streams it by default: word by word, each keeping its leading space."""
    words = text.split(" ")
    return tuple(word if i == 0 else f" {word}" for i, word in enumerate(words))


class StreamControl:
    """Lets a test pause a fake's streamed response and see whether the client went away.

    A fake calls `await control.hold()` where its script says to pause: `holding` is set, and
    the response waits for the test to set `release`. A fake sets `client_disconnected` when
    the client drops a response before its end.
    """

    def __init__(self) -> None:
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.client_disconnected = asyncio.Event()

    async def hold(self) -> None:
        self.holding.set()
        await self.release.wait()


class ServedFake:
    """Base of a fake that serves one aiohttp app on 127.0.0.1 while inside `async with`.

    A subclass builds its app and calls `ServedFake.__init__(self, app)`. Leaving the context
    first runs `_before_shutdown`, where a fake closes what it holds open (websockets, held
    responses), so the server can stop without waiting on them.

    A test takes the platform down with `async with fake.outage.down():` (every request
    answered 500) or `async with fake.connections_refused():` (the server stopped).
    """

    def __init__(self, app: web.Application) -> None:
        self.outage = Outage()
        app.middlewares.append(self.outage.middleware)
        self._server = LocalHttpServer(app)

    async def __aenter__(self) -> Self:
        await self._server.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._before_shutdown()
        await self._server.__aexit__(*exc_info)

    @property
    def origin(self) -> str:
        """`http://127.0.0.1:<port>`, where the app is served (inside `async with`): the base URL
        a channel's config points at."""
        return self._server.origin

    def connections_refused(self) -> AbstractAsyncContextManager[None]:
        return self._server.connections_refused()

    async def _before_shutdown(self) -> None:
        """Nothing is held open unless a fake says so."""


class HoldableFake(ServedFake):
    """Base of a fake that serves one aiohttp app and can hold its responses (`control`).

    Leaving the context releases any held response first, so the server can shut down.
    """

    def __init__(self, app: web.Application) -> None:
        self.control = StreamControl()
        super().__init__(app)

    async def _before_shutdown(self) -> None:
        self.control.release.set()


class Interruptible(Protocol):
    """A scripted stream that may be cut or held after some of its pieces."""

    @property
    def disconnect_after(self) -> int | None: ...

    @property
    def hold_after(self) -> int | None: ...


Script = TypeVar("Script")


class ScriptedFake(HoldableFake, Generic[Script]):
    """A `HoldableFake` whose requests take the answers a test scripted, in order (`script`),
    then `default` (the provider fakes: the OpenAI API, the webhook agent's endpoint)."""

    def __init__(self, app: web.Application, default: Script) -> None:
        self.default = default
        self._scripts: deque[Script] = deque()
        super().__init__(app)

    def script(self, *scripts: Script) -> None:
        self._scripts.extend(scripts)

    def _next_script(self) -> Script:
        """The answer for the request in hand: the next scripted one, else `default`."""
        return self._scripts.popleft() if self._scripts else self.default

    async def _cut_before(self, request: web.Request, script: Interruptible, sent: int) -> bool:
        """Before piece `sent` of a streamed answer: True once the connection was closed
        abruptly (the handler returns), else after a hold the test released, if scripted."""
        if script.disconnect_after == sent:
            assert request.transport is not None
            request.transport.close()
            return True
        if script.hold_after == sent:
            await self.control.hold()
        return False
