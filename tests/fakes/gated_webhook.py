"""A webhook agent endpoint that echoes each turn, and holds the turns a test names.

`FakeWebhook` (`tests.fakes.webhook_server`) answers one process's turns as scripted, in
order; this one answers whatever turns many processes send, each by its own text, which is
what a cluster test needs to say which turn waits.

    async with GatedWebhook() as hook:
        gate = hook.hold("first")          # turns whose text contains "first" wait
        ... agent: {type: webhook, url: hook.url} ...
        await hook.wait_for(lambda: hook.asked("first") == 1)
        gate.set()                         # they answer now (and every later one too)

Every turn's text is recorded in `turns`, in the order they reached the endpoint, so a test
sees what each worker asked the agent (a turn asked twice was run twice).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from tests.fakes import ServedFake
from tests.fakes.changes import Changes
from tests.fakes.webhook_server import HOOK_PATH

WAIT_S = 60.0


class GatedWebhook(ServedFake):
    def __init__(self) -> None:
        self.turns: list[str] = []
        self._gates: dict[str, asyncio.Event] = {}
        self._changes = Changes()
        app = web.Application()
        app.router.add_post(HOOK_PATH, self._hook)
        super().__init__(app)

    @property
    def url(self) -> str:
        return f"{self.origin}{HOOK_PATH}"

    def hold(self, marker: str) -> asyncio.Event:
        """Turns whose text contains `marker` wait until the returned event is set."""
        gate = self._gates.setdefault(marker, asyncio.Event())
        return gate

    def asked(self, marker: str) -> int:
        """How many turns containing `marker` reached the endpoint."""
        return sum(1 for turn in self.turns if marker in turn)

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        await self._changes.wait_until(condition, timeout_s)

    async def _hook(self, request: web.Request) -> web.Response:
        text = str((await request.json())["message"]["content"])
        self.turns.append(text)
        await self._changes.notify()
        for marker, gate in self._gates.items():
            if marker in text:
                await gate.wait()
        return web.json_response({"reply": text})

    async def _before_shutdown(self) -> None:
        for gate in self._gates.values():
            gate.set()
