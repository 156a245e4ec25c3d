"""One IMAP connection (imap-tools over the standard library's imaplib), off the event loop.

imaplib blocks, so every call runs in a thread of this connection's own (`BlockingWorker`: one
thread, since an IMAP connection is a conversation, never two commands at once). Each call is
bounded by a timeout. `interrupt()`,
called from the event loop, shuts the socket down, which ends a blocking IDLE at once; that
is how stopping or cancelling the channel ends within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import imaplib
import queue
import selectors
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from imap_tools import BaseMailBox, MailBox, MailBoxStartTls, MailBoxUnencrypted
from imap_tools.errors import ImapToolsError, MailboxFolderSelectError, MailboxLoginError

from channels.email.smtp import client_context, untrusted_certificate
from channels.errors import AuthError, ChannelError, FatalChannelError, TransientError
from config.channels.email import ImapSettings

# A daemon thread that runs one connection's blocking calls, one at a time, for the event loop.
#
# Why not `asyncio.to_thread` or a `ThreadPoolExecutor`: the shared default pool has a handful of
# threads, and an IMAP IDLE holds one for minutes; an executor of our own joins its threads when
# the interpreter exits, so a call stuck in a connect to an unreachable server would hold up the
# daemon's exit for the whole socket timeout. This thread is a daemon thread: once the event loop
# has let go of it (the call was cancelled, the connection closed), nothing waits for it.
T = TypeVar("T")

_Call = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return  # the caller stopped waiting; the outcome is nobody's any more
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class BlockingWorker:
    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._closed = False

    async def run(self, call: Callable[[], T]) -> T:
        """`call()` in the worker thread; cancelling the wait does not stop the call."""
        if self._closed:
            raise RuntimeError("the worker is closed")
        if not self._thread.is_alive():
            self._thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((call, future, loop))
        return await future

    def close(self) -> None:
        """Let the thread end after the call it is in (if any); idempotent."""
        if not self._closed:
            self._closed = True
            self._calls.put(None)

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            call, future, loop = item
            result: Any = None
            error: BaseException | None = None
            try:
                result = call()
            except BaseException as exc:  # handed to the awaiting coroutine, not swallowed
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_settle, future, result, error)


CHANNEL = "email"
#: Socket timeout of every IMAP command.
IMAP_TIMEOUT_S = 30.0
#: The bound of one call as seen from the event loop: the socket's own, and a margin.
_CALL_MARGIN_S = 10.0


class Interrupted(Exception):
    """The connection was shut down from outside (the channel is stopping)."""


@dataclass(frozen=True, slots=True)
class SelectedFolder:
    uidvalidity: int
    #: The UID the next message will get, when the server said (UIDNEXT); else None.
    uidnext: int | None
    supports_idle: bool


def _first_int(data: list[bytes | None] | None) -> int | None:
    for item in data or []:
        text = item.decode(errors="replace").strip() if isinstance(item, bytes) else ""
        if text.isdigit():
            return int(text)
    return None


class ImapConnection:
    def __init__(self, settings: ImapSettings, address: str) -> None:
        self._settings = settings
        self._username = settings.username or address
        self._worker = BlockingWorker(f"email-imap:{self._username}")
        self._box: BaseMailBox | None = None
        self._interrupted = False

    # -- from the event loop ----------------------------------------------------------

    async def _run(self, call: Callable[[], T], *, timeout_s: float, what: str) -> T:
        if self._interrupted:
            raise Interrupted(what)
        try:
            async with asyncio.timeout(timeout_s):
                return await self._worker.run(call)
        except TimeoutError as exc:
            self.interrupt()
            raise TransientError(f"IMAP {what} took over {timeout_s:g} s", channel=CHANNEL) from exc
        except (ChannelError, Interrupted):
            raise
        except MailboxLoginError as exc:
            raise AuthError(
                f"the IMAP server refused the login of {self._username!r}",
                channel=CHANNEL,
                suggestion="check imap.username and imap.password (an app password where "
                "the provider requires one)",
            ) from exc
        except MailboxFolderSelectError as exc:
            raise FatalChannelError(
                f"the IMAP folder {self._settings.folder!r} cannot be opened ({exc})",
                channel=CHANNEL,
                suggestion="set imap.folder to a folder that exists (the default is INBOX)",
            ) from exc
        except (ImapToolsError, imaplib.IMAP4.error, OSError, ssl.SSLError) as exc:
            if self._interrupted:
                raise Interrupted(what) from exc
            untrusted = untrusted_certificate(exc, "imap", what)
            if untrusted is not None:
                raise untrusted from exc
            raise TransientError(f"IMAP {what}: {exc!r}", channel=CHANNEL) from exc

    async def connect(self) -> SelectedFolder:
        return await self._run(self._connect, timeout_s=IMAP_TIMEOUT_S * 2, what="connect")

    async def search(self, criteria: str) -> list[int]:
        call = functools.partial(self._search, criteria)
        return await self._run(call, timeout_s=IMAP_TIMEOUT_S + _CALL_MARGIN_S, what="search")

    async def fetch(self, uid: int) -> bytes | None:
        call = functools.partial(self._fetch, uid)
        return await self._run(call, timeout_s=IMAP_TIMEOUT_S * 4, what="fetch")

    async def mark_seen(self, uid: int) -> None:
        call = functools.partial(self._mark_seen, uid)
        await self._run(call, timeout_s=IMAP_TIMEOUT_S + _CALL_MARGIN_S, what="store")

    async def idle(self, timeout_s: float) -> bool:
        """IDLE until the server reports a change or `timeout_s` passes; True on a change."""
        call = functools.partial(self._idle, timeout_s)
        return await self._run(call, timeout_s=timeout_s + IMAP_TIMEOUT_S, what="idle")

    def interrupt(self) -> None:
        """End whatever the worker thread is waiting for; the connection is unusable after."""
        self._interrupted = True
        box = self._box
        sock = getattr(box.client, "sock", None) if box is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                # The plain socket's shutdown, also for TLS: it wakes a thread blocked in
                # poll/recv without touching the TLS object that thread is using.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    async def close(self) -> None:
        self.interrupt()
        with contextlib.suppress(TimeoutError, OSError, imaplib.IMAP4.error):
            async with asyncio.timeout(1.0):
                await self._worker.run(self._close)
        self._worker.close()

    # -- in the worker thread ---------------------------------------------------------

    def _open(self) -> BaseMailBox:
        settings = self._settings
        host, port = settings.host, settings.effective_port
        if settings.security == "ssl":
            context = client_context(settings, "imap")
            return MailBox(host, port, timeout=IMAP_TIMEOUT_S, ssl_context=context)
        if settings.security == "starttls":
            context = client_context(settings, "imap")
            return MailBoxStartTls(host, port, timeout=IMAP_TIMEOUT_S, ssl_context=context)
        return MailBoxUnencrypted(host, port, timeout=IMAP_TIMEOUT_S)

    def _connect(self) -> SelectedFolder:
        box = self._open()
        self._box = box
        box.login(self._username, self._settings.password.get_secret_value(), None)
        box.folder.set(self._settings.folder)
        client = box.client
        validity = _first_int(client.response("UIDVALIDITY")[1])
        if validity is None:
            raise TransientError("the IMAP server sent no UIDVALIDITY", channel=CHANNEL)
        # SELECT's own EXISTS is not news: the search that follows sees those messages.
        _take_news(client)
        return SelectedFolder(
            uidvalidity=validity,
            uidnext=_first_int(client.response("UIDNEXT")[1]),
            supports_idle="IDLE" in client.capabilities,
        )

    def _mailbox(self) -> BaseMailBox:
        if self._box is None:
            raise TransientError("IMAP is not connected", channel=CHANNEL)
        return self._box

    def _search(self, criteria: str) -> list[int]:
        return sorted(int(uid) for uid in self._mailbox().uids(criteria, charset=None))

    def _fetch(self, uid: int) -> bytes | None:
        typ, data = self._mailbox().client.uid("FETCH", str(uid), "(UID BODY.PEEK[])")
        if typ != "OK":
            raise TransientError(f"IMAP UID FETCH {uid}: {typ} {data!r}", channel=CHANNEL)
        for item in data:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], bytes):
                return item[1]
        return None  # gone meanwhile (expunged by another client)

    def _mark_seen(self, uid: int) -> None:
        typ, data = self._mailbox().client.uid("STORE", str(uid), "+FLAGS", r"(\Seen)")
        if typ != "OK":
            raise TransientError(f"IMAP UID STORE {uid}: {typ} {data!r}", channel=CHANNEL)

    def _idle(self, timeout_s: float) -> bool:
        box = self._mailbox()
        if _take_news(box.client):
            # The server told us of new mail along with an earlier command's answer (imaplib
            # keeps such lines aside); it will not say so again in IDLE.
            return True
        box.idle.start()  # type: ignore[no-untyped-call]
        lines = self._idle_responses(box, timeout_s)
        if self._interrupted:
            raise Interrupted("idle")
        if any(line.startswith(b"* BYE") for line in lines):
            raise TransientError("the IMAP server ended the connection", channel=CHANNEL)
        box.idle.stop()  # type: ignore[no-untyped-call]
        return any(b"EXISTS" in line or b"RECENT" in line for line in lines)

    def _idle_responses(self, box: BaseMailBox, timeout_s: float) -> list[bytes]:
        """What the server says during IDLE: the first line within `timeout_s`, then any
        that follow at once.

        Not imap-tools' `IdleManager.poll`: it waits on the socket only, so a line that came
        in the same packet as IDLE's `+` (and sits in imaplib's read buffer) is missed until
        the timeout. Here the buffers are looked at first, and each line is read whole with
        the socket's normal timeout.
        """
        client = box.client
        lines: list[bytes] = []
        wait_s = timeout_s
        while _readable(client, wait_s):
            lines.append(client._get_line())
            wait_s = 0.0
        return lines

    def _close(self) -> None:
        box, self._box = self._box, None
        if box is not None:
            with contextlib.suppress(OSError, imaplib.IMAP4.error):
                box.client.shutdown()


def _readable(client: imaplib.IMAP4, timeout_s: float) -> bool:
    """Whether a response line is there to read, waiting up to `timeout_s` for one."""
    sock = client.sock
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    previous = sock.gettimeout()
    sock.settimeout(0)
    peek = getattr(client.file, "peek", None)
    try:
        # Non-blocking: what imaplib's buffered reader holds, or what the socket has now.
        if callable(peek) and peek():
            return True
    except OSError:
        # Nothing to peek (the buffer's read would block): select, below, answers the same
        # question on the socket itself. Runs on every IDLE wait, so it is not logged.
        pass
    finally:
        sock.settimeout(previous)
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        return bool(selector.select(timeout_s))


def _take_news(client: imaplib.IMAP4) -> bool:
    """Whether untagged EXISTS or RECENT lines came with earlier answers; forgets them."""
    news = [client.untagged_responses.pop(key, None) for key in ("EXISTS", "RECENT")]
    return any(news)
