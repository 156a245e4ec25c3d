"""A fake IMAP4rev1 server on 127.0.0.1: one mailbox, the commands the email channel uses.

It speaks the wire format of RFC 3501 and RFC 2177 (IDLE) closely enough for imaplib and
imap-tools: a tagged command per line, untagged `*` data, literals `{n}` for message bodies,
`+` continuation for IDLE, `* N EXISTS` pushed to an idling client when mail arrives. Supported:
CAPABILITY, LOGIN, SELECT/EXAMINE (with UIDVALIDITY and UIDNEXT), UID SEARCH (ALL, UNSEEN, SEEN,
`UID a:b`), UID FETCH (BODY.PEEK[], BODY[], UID, FLAGS), UID STORE (+FLAGS/-FLAGS/FLAGS), IDLE and
DONE, NOOP, CLOSE, LOGOUT. A test delivers mail with `deliver`, checks `\\Seen` with `is_seen`,
scripts a failure with `fail_next`, and waits on state with `wait_until`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import Self

from tests.fakes.changes import Changes
from tests.fakes.imap_mailbox import SEEN, StoredMail, by_uid, matching, unquote

#: One IMAP argument: a quoted string, a parenthesised list, or an atom.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|\([^)]*\)|\S+')


class _Session:
    def __init__(self, server: FakeImap, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.writer = writer
        self.authenticated = False
        self.selected = False
        self.news: asyncio.Queue[bytes] = asyncio.Queue()
        self.idling = False

    async def write(self, *lines: bytes) -> None:
        for line in lines:
            self.writer.write(line + b"\r\n")
        await self.writer.drain()


class FakeImap:
    def __init__(
        self,
        *,
        username: str = "bot@example.org",
        password: str = "imap-secret",
        folder: str = "INBOX",
        supports_idle: bool = True,
        uidvalidity: int = 1000,
        tls: ssl.SSLContext | None = None,
        tls_mode: str = "ssl",
    ) -> None:
        """With `tls`, the server speaks TLS from the start (`tls_mode="ssl"`, port 993's
        way) or after STARTTLS (`tls_mode="starttls"`)."""
        self.tls = tls
        self.tls_mode = tls_mode
        self.username = username
        self.password = password
        self.folder = folder
        self.supports_idle = supports_idle
        self.uidvalidity = uidvalidity
        self.mails: list[StoredMail] = []
        self.next_uid = 1
        #: Every command received, tag stripped, the LOGIN password masked: "UID SEARCH UNSEEN".
        self.commands: list[str] = []
        self.logins_refused = 0
        self._failures: dict[str, list[str]] = {}
        self._sessions: set[_Session] = set()
        self._server: asyncio.Server | None = None
        self._changes = Changes()
        self.port = 0

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        implicit = self.tls if self.tls_mode == "ssl" else None
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=implicit)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.drop_connections()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # -- what a test does ----------------------------------------------------------------

    @property
    def idling(self) -> int:
        """Connections waiting in IDLE right now."""
        return sum(1 for session in self._sessions if session.idling)

    @property
    def connections(self) -> int:
        return len(self._sessions)

    async def deliver(self, raw: bytes, *, flags: tuple[str, ...] = ()) -> int:
        """A message arrives in the folder; idling clients hear `* N EXISTS`. Returns its UID."""
        mail = StoredMail(self.next_uid, raw, set(flags))
        self.next_uid += 1
        self.mails.append(mail)
        for session in self._sessions:
            if session.selected:
                session.news.put_nowait(f"* {len(self.mails)} EXISTS".encode())
        await self._changes.notify()
        return mail.uid

    def is_seen(self, uid: int) -> bool:
        return any(mail.uid == uid and SEEN in mail.flags for mail in self.mails)

    def fail_next(self, command: str, response: str) -> None:
        """Answer the next `command` (e.g. "UID STORE", "LOGIN") with the tagged `response`."""
        self._failures.setdefault(command.upper(), []).append(response)

    async def renumber(self, uidvalidity: int) -> None:
        """The server rebuilt the folder: a new UIDVALIDITY and UIDs counted from 1 again."""
        self.uidvalidity = uidvalidity
        for number, mail in enumerate(self.mails, start=1):
            mail.uid = number
        self.next_uid = len(self.mails) + 1
        await self.drop_connections()

    async def drop_connections(self) -> None:
        for session in list(self._sessions):
            session.writer.close()
            with contextlib.suppress(ConnectionError):
                await session.writer.wait_closed()
        await self._changes.notify()

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        await self._changes.wait_until(predicate, timeout_s)

    # -- the protocol --------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = _Session(self, writer)
        self._sessions.add(session)
        await self._changes.notify()
        try:
            await session.write(b"* OK [" + self._capabilities() + b"] fake IMAP ready")
            while line := await reader.readline():
                if not await self._command(session, reader, line.rstrip(b"\r\n")):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away (killed, or a test closing it): a normal ending
        finally:
            self._sessions.discard(session)
            writer.close()
            await self._changes.notify()

    def _capabilities(self) -> bytes:
        starttls = self.tls is not None and self.tls_mode == "starttls"
        return (
            b"CAPABILITY IMAP4rev1 UIDPLUS"
            + (b" IDLE" if self.supports_idle else b"")
            + (b" STARTTLS" if starttls else b"")
        )

    async def _command(self, session: _Session, reader: asyncio.StreamReader, line: bytes) -> bool:
        tokens = _TOKEN.findall(line)
        if len(tokens) < 2:
            await session.write(b"* BAD empty command")
            return True
        tag, name, args = tokens[0], tokens[1].decode().upper(), tokens[2:]
        if name == "UID" and args:
            name, args = f"UID {args[0].decode().upper()}", args[1:]
        shown = "LOGIN " + unquote(args[0]) if name == "LOGIN" and args else name
        if name != "LOGIN":
            shown = " ".join([name, *(arg.decode("utf-8", "replace") for arg in args)])
        self.commands.append(shown)
        await self._changes.notify()
        scripted = self._failures.get(name)
        if scripted:
            await session.write(tag + b" " + scripted.pop(0).encode())
            return True
        if name != "IDLE":
            # Like a real server, news goes out with the answer to whatever command comes next.
            while not session.news.empty():
                await session.write(session.news.get_nowait())
        handler = self._handlers().get(name)
        if handler is None:
            await session.write(tag + b" BAD unknown command " + name.encode())
            return True
        return await handler(session, reader, tag, [unquote(arg) for arg in args])

    def _handlers(self) -> dict[str, _Handler]:
        return {
            "CAPABILITY": self._capability,
            "STARTTLS": self._starttls,
            "NOOP": self._ok,
            "LOGIN": self._login,
            "SELECT": self._select,
            "EXAMINE": self._select,
            "UID SEARCH": self._search,
            "UID FETCH": self._fetch,
            "UID STORE": self._store,
            "IDLE": self._idle,
            "CLOSE": self._ok,
            "LOGOUT": self._logout,
        }

    async def _ok(
        self, session: _Session, _r: asyncio.StreamReader, tag: bytes, _a: list[str]
    ) -> bool:
        await session.write(tag + b" OK done")
        return True

    async def _capability(
        self, session: _Session, _r: asyncio.StreamReader, tag: bytes, _a: list[str]
    ) -> bool:
        await session.write(b"* " + self._capabilities(), tag + b" OK CAPABILITY completed")
        return True

    async def _starttls(
        self, session: _Session, _r: asyncio.StreamReader, tag: bytes, _a: list[str]
    ) -> bool:
        if self.tls is None or self.tls_mode != "starttls":
            await session.write(tag + b" BAD STARTTLS is not offered")
            return True
        await session.write(tag + b" OK begin TLS negotiation now")
        await session.writer.start_tls(self.tls)
        return True

    async def _login(
        self, session: _Session, _r: asyncio.StreamReader, tag: bytes, args: list[str]
    ) -> bool:
        if args[:2] == [self.username, self.password]:
            session.authenticated = True
            await session.write(tag + b" OK LOGIN completed")
        else:
            self.logins_refused += 1
            await session.write(tag + b" NO [AUTHENTICATIONFAILED] Invalid credentials")
        return True

    async def _select(
        self, session: _Session, _r: asyncio.StreamReader, tag: bytes, args: list[str]
    ) -> bool:
        if not session.authenticated:
            await session.write(tag + b" BAD log in first")
            return True
        if not args or args[0] != self.folder:
            await session.write(tag + b" NO [NONEXISTENT] no such mailbox")
            return True
        session.selected = True
        await session.write(
            b"* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)",
            f"* {len(self.mails)} EXISTS".encode(),
            b"* 0 RECENT",
            f"* OK [UIDVALIDITY {self.uidvalidity}] UIDs valid".encode(),
            f"* OK [UIDNEXT {self.next_uid}] predicted next UID".encode(),
            tag + b" OK [READ-WRITE] SELECT completed",
        )
        return True

    async def _search(
        self, session: _Session, _r: asyncio.StreamReader, tag: bytes, args: list[str]
    ) -> bool:
        if not session.selected:
            await session.write(tag + b" BAD select a mailbox first")
            return True
        try:
            found = matching(self.mails, args)
        except (ValueError, StopIteration) as exc:
            await session.write(tag + b" BAD " + str(exc).encode())
            return True
        numbers = " ".join(str(mail.uid) for mail in found)
        await session.write(f"* SEARCH {numbers}".rstrip().encode(), tag + b" OK SEARCH completed")
        return True

    async def _fetch(
        self, session: _Session, _r: asyncio.StreamReader, tag: bytes, args: list[str]
    ) -> bool:
        items = args[1].upper() if len(args) > 1 else ""
        for number, mail in by_uid(self.mails, args[0]):
            parts = [f"UID {mail.uid}".encode()]
            if "FLAGS" in items:
                parts.append(b"FLAGS (" + " ".join(sorted(mail.flags)).encode() + b")")
            if "BODY[]" in items or "BODY.PEEK[]" in items:
                if "BODY[]" in items:
                    mail.flags.add(SEEN)
                parts.append(b"BODY[] {" + str(len(mail.raw)).encode() + b"}\r\n" + mail.raw)
            session.writer.write(f"* {number} FETCH (".encode() + b" ".join(parts) + b")\r\n")
        await session.write(tag + b" OK FETCH completed")
        await self._changes.notify()
        return True

    async def _store(
        self, session: _Session, _r: asyncio.StreamReader, tag: bytes, args: list[str]
    ) -> bool:
        action, flags = args[1].upper(), set(args[2].strip("()").split())
        for number, mail in by_uid(self.mails, args[0]):
            if action.startswith("+FLAGS"):
                mail.flags |= flags
            elif action.startswith("-FLAGS"):
                mail.flags -= flags
            else:
                mail.flags = set(flags)
            shown = " ".join(sorted(mail.flags))
            await session.write(f"* {number} FETCH (UID {mail.uid} FLAGS ({shown}))".encode())
        await session.write(tag + b" OK STORE completed")
        await self._changes.notify()
        return True

    async def _idle(
        self, session: _Session, reader: asyncio.StreamReader, tag: bytes, _a: list[str]
    ) -> bool:
        if not self.supports_idle:
            await session.write(tag + b" BAD IDLE is not supported")
            return True
        await session.write(b"+ idling")
        session.idling = True
        await self._changes.notify()
        done = asyncio.create_task(reader.readline(), name="fake-imap:idle-done")
        try:
            while True:
                news = asyncio.create_task(session.news.get(), name="fake-imap:idle-news")
                await asyncio.wait({done, news}, return_when=asyncio.FIRST_COMPLETED)
                if news.done():
                    await session.write(news.result())
                else:
                    news.cancel()
                if done.done():
                    break
        finally:
            session.idling = False
            done.cancel()
            await self._changes.notify()
        if done.result().strip().upper() != b"DONE":
            return False  # the client went away (or broke the protocol) mid-IDLE
        await session.write(tag + b" OK IDLE terminated")
        return True

    async def _logout(
        self, session: _Session, _r: asyncio.StreamReader, tag: bytes, _a: list[str]
    ) -> bool:
        await session.write(b"* BYE logging out", tag + b" OK LOGOUT completed")
        return False


_Handler = Callable[[_Session, asyncio.StreamReader, bytes, list[str]], Awaitable[bool]]
