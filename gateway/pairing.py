"""Pairing in the running daemon: codes for strangers, and the overlay kept current.

The dispatcher asks `stranger_notice` what to tell a refused sender: on a channel with
`pairing: true`, a notice with their one-time code (see `channels.pairing_codes`); elsewhere
None, and the plain "your id is" notice. `watch` follows the profile's pairing store
(`gateway.pairing_stores`: files, or PostgreSQL shared by every ingress of a cluster), so an
approval by `octos-gateway pair` or a withdrawal by `allow remove` takes effect at once; and
before a sender on a pairing channel is refused, `reread` reads the approvals again, so one
approved a moment ago (the watch's next look still to come) is let in, not refused.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AsyncExitStack

import structlog

from bus import InboundMessage
from channels.allow_overlay import ApprovedSenders, OverlayEntry
from channels.pairing_codes import CODE_TTL_S, display_code
from channels.pairing_store import PairingStore
from sessions.errors import SessionError

log = structlog.get_logger(__name__)

PAIRING_NOTICE = (
    "Sorry, this bot does not know you yet. To ask for access, send its owner this code: "
    "{code} (valid for {minutes} minutes). Your id is {sender_id}."
)


class Pairing:
    def __init__(self, profile: str, store: PairingStore) -> None:
        self._profile = profile
        self._store = store
        #: What the channels' allow lists consult, kept current by `watch`.
        self.approved = ApprovedSenders()
        self._enabled: set[str] = set()

    def enable(self, channel: str) -> None:
        """Strangers on `channel` get a code (its config says `pairing: true`)."""
        self._enabled.add(channel)

    async def load(self) -> None:
        self.approved.replace(await self._store.entries())

    async def watch(self) -> None:
        """Keep the approved senders current; runs until cancelled."""
        await self._store.watch(self._reload)

    async def reread(self, channel: str) -> None:
        """Read the approvals now, for a sender `channel` is about to refuse. Only pairing adds
        approvals, so a channel without it has none to read."""
        if channel not in self._enabled:
            return
        try:
            await self._store.look_again(self._reload)
        except SessionError as error:
            # The database is away: the approvals read last stand.
            log.warning("allow.overlay_not_read", profile=self._profile, error=str(error))

    def _reload(self, entries: list[OverlayEntry]) -> None:
        if self.approved.replace(entries):
            log.info("allow.overlay_reloaded", profile=self._profile, entries=len(entries))

    async def stranger_notice(self, message: InboundMessage) -> str | None:
        if message.channel not in self._enabled:
            return None
        try:
            code = await self._store.issue(message.channel, message.sender_id, message.chat_id)
        except SessionError as error:
            # The database is away: the stranger gets the plain notice, with their id.
            log.warning("pairing.code_not_issued", profile=self._profile, error=str(error))
            return None
        if code is None:
            log.info("pairing.code_refused", reason="too many codes today")
            return None
        log.info("pairing.code_issued", sender=message.sender_id)
        return PAIRING_NOTICE.format(
            code=display_code(code), minutes=int(CODE_TTL_S // 60), sender_id=message.sender_id
        )


async def open_pairing(
    stack: AsyncExitStack, profile: str, store: AbstractAsyncContextManager[PairingStore]
) -> Pairing:
    """The profile's pairing, its `store` held open by `stack`, with the approvals loaded."""
    pairing = Pairing(profile, await stack.enter_async_context(store))
    await pairing.load()
    return pairing
