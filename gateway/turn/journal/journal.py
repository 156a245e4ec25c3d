"""`Journal`: the profile's write-ahead log and the state folded from it, kept in step.

Every change goes through here: the state is updated when a record is appended (so questions
asked meanwhile see it), and the caller awaits the returned future when it must not go on
before the record is durable (acknowledging a platform, delivering a reply). A checkpoint
first makes the session files durable, then restates what is unfinished in a new segment and
drops the older ones. The dedup table (platform keys seen in the last 24 hours) has a durable
copy of its own beside the log, one key a line: restating every key in each checkpoint would
cost megabytes of writes per cut, so each checkpoint appends the keys accepted since the
previous one (synced) before it drops the records that held them, and the file is rewritten
with only the live keys once it holds twice as many. A torn last line is ignored.

The session files are written behind the journal, so after a crash `restore_sessions` replays the
last outcomes into them, idempotently: each file holds some prefix of its outcomes' messages at its
tail (appends are in order); the longest such prefix is found by comparing messages (their
timestamps make them unique) and only the rest is appended, so running it twice changes nothing.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import structlog

from bus import InboundMessage, Message, SessionKey
from gateway.turn.journal.records import (
    Edit,
    OpenedPart,
    Outcome,
    OwnerSend,
    Received,
    decode,
    encode_deleted,
    encode_sent,
)
from gateway.turn.journal.state import DEDUP_TTL_S, JournalState, platform_key
from sessions import SessionManager
from sessions.durable import sync_data, write_all, write_state_file
from sessions.wal import LogWriteError, WriteAheadLog
from sessions.writer import FsyncPolicy

log = structlog.get_logger(__name__)

#: A checkpoint is taken once the log holds this many records or bytes since the last one:
#: often enough that the outcomes held in memory until then stay few.
CHECKPOINT_RECORDS = 10_000
CHECKPOINT_BYTES = 32 * 1024 * 1024
DEDUP_FILE = "dedup.keys"

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Recovery:
    """What the previous run left unfinished."""

    #: Accepted but never answered, in arrival order: their turns run again.
    pending: list[Received]
    #: Answered but not confirmed delivered: their replies are delivered.
    undelivered: list[Outcome]
    #: Outcomes whose messages may be missing from their session files.
    fixups: list[Outcome]


class Journal:
    def __init__(
        self,
        directory: Path,
        *,
        fsync: FsyncPolicy = "batch",
        clock: Clock = time.time,
        checkpoint_records: int = CHECKPOINT_RECORDS,
        checkpoint_bytes: int = CHECKPOINT_BYTES,
        keeps_replies: frozenset[str] = frozenset(),
        buttons_ttl_s: float = DEDUP_TTL_S,
    ) -> None:
        self.state = JournalState(keeps_replies=keeps_replies, buttons_ttl_s=buttons_ttl_s)
        self._log = WriteAheadLog(directory, fsync=fsync)
        self._dedup_path = directory / DEDUP_FILE
        self._durable = fsync != "never"
        self._dedup_lines = 0
        self._clock = clock
        self._checkpoint_records = checkpoint_records
        self._checkpoint_bytes = checkpoint_bytes
        self._checkpointing = asyncio.Lock()

    async def open(self) -> Recovery:
        payloads = await self._log.open()
        await self._load_dedup()
        skipped = 0
        for payload in payloads:
            try:
                self.state.apply(decode(payload), replaying=True)
            except (ValueError, KeyError, TypeError) as error:
                # Framed and checksummed, yet not a record we can read: a newer build wrote it,
                # or a bug did. Reported; the rest of the log still counts.
                skipped += 1
                log.error("journal.unreadable_record", error=str(error), record=payload[:200])
        fixups, self.state.fixups = self.state.fixups, []
        recovery = Recovery(
            pending=sorted(self.state.received.values(), key=lambda r: r.id),
            undelivered=self.state.undelivered(),
            fixups=fixups,
        )
        if payloads:
            log.info(
                "journal.replayed",
                records=len(payloads),
                unreadable=skipped,
                pending=len(recovery.pending),
                undelivered=len(recovery.undelivered),
            )
        return recovery

    async def close(self) -> None:
        await self._log.close()

    async def _load_dedup(self) -> None:
        entries = await asyncio.to_thread(lambda: list(read_entries(self._dedup_path)))
        cutoff = self._clock() - DEDUP_TTL_S
        for key, inbound_id, at in entries:
            if at >= cutoff:
                self.state.remember(key, inbound_id, at)
        self._dedup_lines = len(entries)

    # Records

    def seen(self, message: InboundMessage) -> int | None:
        """The journal id under which this platform message was already accepted, if it was."""
        if message.message_id is None:
            return None
        return self.state.seen(platform_key(message.channel, message.chat_id, message.message_id))

    def accept(
        self,
        message: InboundMessage,
        on_settled: Callable[[Received, LogWriteError | None], None] | None = None,
    ) -> tuple[Received, asyncio.Future[None]]:
        """Give `message` a journal id and log it; the future resolves once it is durable, and
        `on_settled` is told first (with the error, if it could not be written)."""
        received = Received(self.state.next_id, message, self._clock())
        self.state.add_received(received)
        told = None if on_settled is None else partial(on_settled, received)
        return received, self._log.append(received.encode(), told)

    def record_edit(self, received: Received, edit: InboundMessage) -> asyncio.Future[None]:
        """The waiting `received` now reads as `edit` says (its sender edited it: the new text,
        the original's id); durable when the future is. The edit's own id is remembered, so a
        platform's retry of it is a duplicate."""
        key = None
        if edit.message_id is not None:
            key = platform_key(edit.channel, edit.chat_id, edit.message_id)
        edited = received.message.model_copy(update={"content": edit.content})
        record = Edit(received.id, edited, key, self._clock())
        self.state.apply_edit(record)
        return self._log.append(record.encode())

    def record_deleted(self, received: Received) -> asyncio.Future[None]:
        """The waiting `received` was deleted by its sender: it is answered by nothing."""
        self.state.drop_received(received.id)
        return self._log.append(encode_deleted(received.id))

    def forget(self, received: Received) -> None:
        """A message whose record could not be written: as if it never came."""
        self.state.drop_received(received.id)

    def record_outcome(self, outcome: Outcome) -> asyncio.Future[None]:
        self.state.add_outcome(outcome)
        return self._log.append(outcome.encode())

    def record_written(self, turn: str) -> None:
        self.state.mark_written(turn)

    def record_delivered(self, turn: str, *, failed: bool = False) -> None:
        """Delivered, or given up on; if this record is lost, the reply is delivered again."""
        if turn not in self.state.outcomes:
            return
        self.state.mark_delivered(turn)
        self._log.append(encode_sent(turn, failed=failed))

    # The owner's sends

    def record_send(self, send: OwnerSend) -> asyncio.Future[None]:
        """A send asked for; durable when the future is."""
        self.state.add_send(send)
        return self._log.append(send.encode())

    def record_standing(self, send: OwnerSend) -> asyncio.Future[None]:
        """`send` (one of the state's) changed its standing; durable when the future is."""
        self.state.add_send(send)
        return self._log.append(send.standing())

    # Streams

    def start_turn(self, turn: str, answers: list[int]) -> None:
        """`turn` runs for the inbound `answers` (in memory: its stream's records name them)."""
        self.state.start_turn(turn, answers)

    def resumed_turn(self, answers: list[int]) -> str | None:
        """The id of the turn that streamed part of a reply to `answers` before a crash."""
        return self.state.streamed_turn(answers)

    def record_opened(
        self, turn: str, channel: str, chat_id: str, part: int, platform_id: str
    ) -> asyncio.Future[None]:
        """A platform message `turn`'s streamed reply opened; durable when the future is."""
        opened = OpenedPart(turn, self.state.answers_of(turn), channel, chat_id, part, platform_id)
        self.state.add_opened(opened)
        return self._log.append(opened.encode())

    def opened_parts(self, turn: str, channel: str, chat_id: str) -> dict[int, str]:
        return self.state.opened_parts(turn, channel, chat_id)

    # Checkpoints

    async def _save_dedup(self) -> None:
        """The keys the log is about to drop go to the dedup file first (synced)."""
        fresh, self.state.fresh_dedup = self.state.fresh_dedup, []
        live = len(self.state.dedup)
        if self._dedup_lines + len(fresh) > 2 * max(live, 1000):
            entries = self.state.live_dedup()
            await asyncio.to_thread(rewrite_entries, self._dedup_path, entries)
            self._dedup_lines = len(entries)
        elif fresh:
            path, durable = self._dedup_path, self._durable
            self._dedup_lines += await asyncio.to_thread(
                append_entries, path, fresh, durable=durable
            )

    def wants_checkpoint(self) -> bool:
        """Enough has been appended since the last checkpoint: the thresholds' worth, and at
        least as much as that checkpoint's snapshot.

        A checkpoint rewrites everything unfinished; with a backlog larger than the thresholds,
        counting the snapshot itself would start the next rewrite of the whole backlog at the
        next record. Waiting for as much again keeps a checkpoint's cost in proportion to the
        records that called for it, and the log within the thresholds past the last snapshot
        (about twice the backlog when that is larger).
        """
        log = self._log
        return log.appended_records >= max(
            self._checkpoint_records, log.snapshot_records
        ) or log.appended_bytes >= max(self._checkpoint_bytes, log.snapshot_bytes)

    async def checkpoint(self, sync_sessions: Callable[[], Awaitable[None]]) -> None:
        """Make session files durable, then cut the log down to what is unfinished."""
        async with self._checkpointing:
            written = [turn for turn, o in self.state.outcomes.items() if o.written]
            await sync_sessions()
            self.state.mark_synced(written)
            self.state.expire(self._clock())
            await self._save_dedup()
            # No await between building the snapshot and queueing it: it reflects every
            # record queued before it.
            await self._log.checkpoint(self.state.snapshot())
            log.debug(
                "journal.checkpointed",
                pending=len(self.state.received),
                unfinished=len(self.state.outcomes),
                dedup=len(self.state.dedup),
            )


log = structlog.get_logger(__name__)


def missing_suffix(existing: Sequence[Message], expected: Sequence[Message]) -> list[Message]:
    """What of `expected` is not yet at the end of `existing` (which holds a prefix of it)."""
    for written in range(min(len(existing), len(expected)), 0, -1):
        if list(existing[len(existing) - written :]) == list(expected[:written]):
            return list(expected[written:])
    return list(expected)


async def restore_sessions(sessions: SessionManager, outcomes: Sequence[Outcome]) -> int:
    """Append what each outcome's session file lacks; the number of messages appended."""
    by_session: dict[str, list[Message]] = {}
    for outcome in outcomes:
        if outcome.messages:
            by_session.setdefault(outcome.session, []).extend(outcome.messages)
    appended = 0
    for session, expected in by_session.items():
        key = SessionKey.parse(session)
        existing = (await sessions.get(key)).messages
        missing = missing_suffix(existing, expected)
        if missing:
            await sessions.append_all(key, missing)
            appended += len(missing)
    if appended:
        log.info("journal.sessions_restored", sessions=len(by_session), messages=appended)
    return appended


Entry = tuple[str, int, float]


def _line(entry: Entry) -> bytes:
    key, inbound_id, at = entry
    # Keys are channel\x1fchat\x1fid: they hold no tab or newline of their own once escaped.
    escaped = key.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    return f"{escaped}\t{inbound_id}\t{at:.3f}\n".encode()


def _unescape(text: str) -> str:
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        following = next(chars, "")
        out.append({"n": "\n", "t": "\t"}.get(following, following))
    return "".join(out)


def read_entries(path: Path) -> Iterator[Entry]:
    """Every whole, readable line; blocking."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for raw in data.split(b"\n")[:-1]:
        parts = raw.decode("utf-8", "replace").split("\t")
        if len(parts) != 3:
            continue
        try:
            yield _unescape(parts[0]), int(parts[1]), float(parts[2])
        except ValueError:
            continue


def append_entries(path: Path, entries: Iterable[Entry], *, durable: bool) -> int:
    """Append and (with `durable`) sync; the number of lines written. Blocking."""
    data = b"".join(_line(entry) for entry in entries)
    if not data:
        return 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        if durable:
            sync_data(fd)
    finally:
        os.close(fd)
    return data.count(b"\n")


def rewrite_entries(path: Path, entries: Iterable[Entry]) -> None:
    """Replace the file with exactly `entries`, atomically. Blocking."""
    write_state_file(path, b"".join(_line(entry) for entry in entries))
