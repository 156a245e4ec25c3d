"""Receiving: the mailbox read by UID, each message handed over, then marked `\\Seen`.

The loop: connect and select the folder; take the messages past the last handled UID (or,
without a usable mark, the unseen ones); for each, hand it to the gateway and only once that
returned (the message is durable) set `\\Seen` and move the mark past it; then wait for news
with IDLE (or `poll_interval_s` where the server lacks IDLE) and go round again. A dropped
connection reconnects with backoff (5 s doubling to 60 s); a refused login is fatal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field

import structlog

from channels.email.imap import ImapConnection, Interrupted, SelectedFolder
from channels.email.state import UidMark, UidStore
from channels.errors import AuthError, ChannelError, FatalChannelError, TransientError
from channels.health import ChannelHealth
from channels.retry import Backoff
from channels.stopping import sleep_unless_set
from config.channels.email import ImapSettings

log = structlog.get_logger(__name__)

#: RFC 2177 asks clients to re-issue IDLE at least every 29 minutes; sooner also notices a
#: connection that died silently.
IDLE_TIMEOUT_S = 300.0


#: Hands one message (by UID, with its raw bytes) to the gateway; returns once it is durable,
#: or False when the message was not handed over and must not be marked `\Seen`.
Handler = Callable[[int, int, bytes], Awaitable[bool]]


@dataclass(eq=False)
class InboxReader:
    settings: ImapSettings
    address: str
    store: UidStore
    _: KW_ONLY
    poll_interval_s: float
    on_health: Callable[[ChannelHealth], None]
    #: Set when the channel stops (its run state's): `run` ends once it sees it.
    stopping: asyncio.Event
    backoff: Backoff = field(default_factory=Backoff)
    idle_timeout_s: float = IDLE_TIMEOUT_S
    _connection: ImapConnection | None = field(default=None, init=False, repr=False)
    _connected: bool = field(default=False, init=False, repr=False)

    def interrupt(self) -> None:
        """Wake the connection from IDLE, so a `run` that is stopping ends at once."""
        if self._connection is not None:
            self._connection.interrupt()

    async def run(self, handle: Handler) -> None:
        delay_s = self.backoff.initial_s
        while not self.stopping.is_set():
            connection = ImapConnection(self.settings, self.address)
            self._connection = connection
            self._connected = False
            try:
                await self._session(connection, handle)
                return
            except Interrupted:
                return
            except AuthError as exc:
                raise FatalChannelError(
                    str(exc.args[0]), channel=exc.channel, suggestion=exc.suggestion
                ) from exc
            except FatalChannelError:
                raise
            except (TransientError, ChannelError) as exc:
                if self._connected:
                    # The connection worked and then dropped: back off from the start.
                    delay_s = self.backoff.initial_s
                self.on_health(ChannelHealth.degraded(f"IMAP: {exc}"))
                log.warning("email.imap_failed", error=str(exc), retry_in_s=delay_s)
            finally:
                self._connection = None
                await connection.close()
            if await sleep_unless_set(self.stopping, delay_s):
                return
            delay_s = self.backoff.next(delay_s)

    async def _session(self, connection: ImapConnection, handle: Handler) -> None:
        if self.stopping.is_set():
            return
        folder = await connection.connect()
        self._connected = True
        self.on_health(ChannelHealth.healthy())
        log.info(
            "email.imap_connected",
            folder=self.settings.folder,
            uidvalidity=folder.uidvalidity,
            idle=folder.supports_idle,
        )
        mark = await self.store.load()
        if mark is not None and mark.uidvalidity != folder.uidvalidity:
            log.warning("email.uidvalidity_changed", was=mark.uidvalidity, now=folder.uidvalidity)
            mark = None
        mark = await self._catch_up(connection, folder, mark, handle)
        while not self.stopping.is_set():
            if folder.supports_idle:
                await connection.idle(self.idle_timeout_s)
            elif await sleep_unless_set(self.stopping, self.poll_interval_s):
                return
            if self.stopping.is_set():
                return
            mark = await self._catch_up(connection, folder, mark, handle)

    async def _catch_up(
        self,
        connection: ImapConnection,
        folder: SelectedFolder,
        mark: UidMark | None,
        handle: Handler,
    ) -> UidMark | None:
        """Handle every new message in UID order; the mark after the last one handled."""
        fresh = mark is None
        if mark is None:
            # No usable mark (first start, or UIDVALIDITY changed): the unseen messages are
            # the ones still waiting; the gateway's dedup recognises any it already has.
            uids = await connection.search("UNSEEN")
        else:
            found = await connection.search(f"UID {mark.last_uid + 1}:*")
            # "N:*" always includes the highest UID, even when it is below N.
            uids = [uid for uid in found if uid > mark.last_uid]
        for uid in uids:
            if self.stopping.is_set():
                return mark
            raw = await connection.fetch(uid)
            handed_over = raw is not None and await handle(folder.uidvalidity, uid, raw)
            if handed_over:
                await connection.mark_seen(uid)
            mark = UidMark(folder.uidvalidity, uid)
            await self.store.save(mark)
            log.debug("email.message_done", uid=uid, acknowledged=handed_over)
        if fresh and folder.uidnext is not None:
            # What was already seen when we connected is not new: the mark starts there.
            baseline = folder.uidnext - 1
            if mark is None or mark.last_uid < baseline:
                mark = UidMark(folder.uidvalidity, baseline)
                await self.store.save(mark)
        return mark
