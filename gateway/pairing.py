"""Pairing in the running daemon: codes for strangers, and the overlay kept current.

The dispatcher asks `stranger_notice` what to tell a refused sender: on a channel with
`pairing: true`, a notice with their one-time code (see `channels.pairing_codes`); elsewhere
None, and the plain "your id is" notice. `watch` reloads the allow-list overlay whenever
`octos-gateway pair` or `allow remove` has changed it, so approval takes effect at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from bus import InboundMessage
from channels.allow_overlay import AllowOverlay
from channels.pairing_codes import CODE_TTL_S, PairingCodes, display_code

log = structlog.get_logger(__name__)

PAIRING_NOTICE = (
    "Sorry, this bot does not know you yet. To ask for access, send its owner this code: "
    "{code} (valid for {minutes} minutes). Your id is {sender_id}."
)
#: How often the overlay file's mtime is looked at (one stat, off the event loop).
OVERLAY_CHECK_INTERVAL_S = 1.0


class Pairing:
    def __init__(self, profile: str, profile_root: Path) -> None:
        self._profile = profile
        self.overlay = AllowOverlay(profile_root)
        self._codes = PairingCodes(profile_root)
        self._enabled: set[str] = set()

    def enable(self, channel: str) -> None:
        """Strangers on `channel` get a code (its config says `pairing: true`)."""
        self._enabled.add(channel)

    async def load(self) -> None:
        await asyncio.to_thread(self.overlay.refresh)

    async def watch(self, interval_s: float = OVERLAY_CHECK_INTERVAL_S) -> None:
        """Reload the overlay whenever its file changes; runs until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            if await asyncio.to_thread(self.overlay.refresh):
                log.info(
                    "allow.overlay_reloaded",
                    profile=self._profile,
                    entries=len(await asyncio.to_thread(self.overlay.entries)),
                )

    async def stranger_notice(self, message: InboundMessage) -> str | None:
        if message.channel not in self._enabled:
            return None
        code = await asyncio.to_thread(
            self._codes.issue, message.channel, message.sender_id, message.chat_id
        )
        if code is None:
            log.info("pairing.code_refused", reason="too many codes today")
            return None
        log.info("pairing.code_issued", sender=message.sender_id)
        return PAIRING_NOTICE.format(
            code=display_code(code), minutes=int(CODE_TTL_S // 60), sender_id=message.sender_id
        )
