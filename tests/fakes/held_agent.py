"""An endpoint for the daemon's `webhook` agent that echoes each message, and holds the turns a
test asks it to, so the test decides when a reply becomes due.

Each turn is answered as a `text/event-stream` of the user's text, word by word. A turn whose
message contains a marker the test `hold`s stops after `after` pieces: `Hold.reached` is set,
and the rest of the stream waits for `Hold.release`. So a test can take a platform down after
the message was taken and before its reply exists (`after=0`), or in the middle of a stream.

    agent.hold("marker-1")                 # before the daemon gets the message
    await hold.reached.wait(); ...; hold.release.set()
    profile: "agent: {type: webhook, url: <agent.url>}"
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from aiohttp import web

from tests.fakes import ServedFake, word_by_word

TURN_PATH = "/turn"


@dataclass
class Hold:
    after: int
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


class HeldEchoAgent(ServedFake):
    def __init__(self) -> None:
        self._holds: dict[str, Hold] = {}
        app = web.Application()
        app.router.add_post(TURN_PATH, self._turn)
        super().__init__(app)

    @property
    def url(self) -> str:
        return f"{self.origin}{TURN_PATH}"

    def hold(self, marker: str, *, after: int = 0) -> Hold:
        """Hold the turn of the message containing `marker` after `after` streamed pieces."""
        hold = self._holds[marker] = Hold(after)
        return hold

    async def _before_shutdown(self) -> None:
        for hold in self._holds.values():
            hold.release.set()

    async def _turn(self, request: web.Request) -> web.StreamResponse:
        text = str((await request.json())["message"]["content"])
        hold = next((h for marker, h in self._holds.items() if marker in text), None)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        pieces = list(word_by_word(text))
        if hold is not None:
            # What comes after the hold comes at once, as one piece.
            pieces[hold.after :] = ["".join(pieces[hold.after :])]
        for sent, piece in enumerate(pieces):
            if hold is not None and sent == hold.after:
                hold.reached.set()
                await hold.release.wait()
            await response.write(f"data: {json.dumps({'text': piece})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
