"""Dead letters of replies: what a profile could not deliver, kept until someone acts on it.

A reply the delivery layer gives up on (its `delivery_deadline_s` passed while the platform
kept failing, or a refusal that re-sending cannot fix: a revoked token, a bot blocked or
removed from the chat, a text the platform rejects even split and plain) is written here, with
its reason and error, before the journal lets it go; so its text outlives the journal's next
checkpoint, and `octos-gateway dead-letters list|show|retry|drop|purge` can act on it.

One file per dead letter, named by the reply's `delivery_id` (its turn's id), in
`{profile data}/dead-letters/`, each written whole and durably (`sessions.durable`):

- `dead-letters/<id>.json`: given up on;
- `dead-letters/retry/<id>.json`: asked to be sent again (`dead-letters retry` moves it there).

The running daemon looks at both folders every second (as it looks at the pairing overlay), so a
retry is sent without a restart, and a stopped daemon sends it at its next start. The retried
reply keeps its `delivery_id` (a platform's idempotency key stays the same) and its deadline
counts from the retry; once delivered its file goes, and if it fails again it is a dead letter
again, with the new reason.

`DeadLetterStore` is the files, for the daemon and the command line (blocking: the daemon calls
it through `asyncio.to_thread`); `ProfileDeadLetters` is the running profile's side: the channel
manager's delivery hook and the watch that sends retries.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, unquote

import structlog
from prometheus_client import Counter

from bus import OutboundMessage
from bus.envelope import SENT_AGAIN_AT
from channels.errors import DeliveryError
from gateway.turn.journal import Journal
from sessions.durable import fsync_dir, read_state_json, write_state_json

log = structlog.get_logger(__name__)

DEAD_LETTERS_DIR: Final = "dead-letters"
RETRY_DIR: Final = "retry"
_SUFFIX: Final = ".json"
#: How often the running daemon looks for retries asked by the command line (one listing of
#: two small folders, off the event loop).
CHECK_INTERVAL_S: Final = 1.0
#: How many of a profile's newest dead letters the status page shows.
SHOWN_ON_STATUS_PAGE: Final = 5


@dataclass(frozen=True, slots=True)
class ReplyDeadLetter:
    """A reply given up on: why, when, and the reply itself, to send again."""

    #: The reply's `delivery_id`.
    id: str
    profile: str
    #: When it was given up on (UTC, ISO 8601).
    at: str
    reason: str
    error: str
    attempts: int
    reply: OutboundMessage
    #: Asked to be sent again, not sent yet.
    retrying: bool = False

    @classmethod
    def of(cls, profile: str, reply: OutboundMessage, error: DeliveryError) -> ReplyDeadLetter:
        assert reply.delivery_id is not None  # only a journaled reply is a dead letter
        return cls(
            id=reply.delivery_id,
            profile=profile,
            at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            reason=error.reason,
            error=str(error),
            attempts=error.attempts,
            reply=reply,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "profile": self.profile,
            "at": self.at,
            "channel": self.reply.channel,
            "chat_id": self.reply.chat_id,
            "reason": self.reason,
            "error": self.error,
            "attempts": self.attempts,
            "retrying": self.retrying,
            "reply": self.reply.model_dump(mode="json"),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, retrying: bool) -> ReplyDeadLetter:
        return cls(
            id=str(data["id"]),
            profile=str(data["profile"]),
            at=str(data["at"]),
            reason=str(data["reason"]),
            error=str(data.get("error", "")),
            attempts=int(data.get("attempts", 0)),
            reply=OutboundMessage.model_validate(data["reply"]),
            retrying=retrying,
        )

    def summary(self) -> dict[str, object]:
        """What the status page shows of it."""
        return {
            "id": self.id,
            "at": self.at,
            "channel": self.reply.channel,
            "chat_id": self.reply.chat_id,
            "reason": self.reason,
            "error": self.error[:300],
            "retrying": self.retrying,
        }


class DeadLetterStore:
    """One profile's dead-letter files. Blocking."""

    def __init__(self, profile_root: Path) -> None:
        self.directory = profile_root / DEAD_LETTERS_DIR
        self.retry_directory = self.directory / RETRY_DIR

    def _dead(self, letter_id: str) -> Path:
        return self.directory / _file_name(letter_id)

    def _retry(self, letter_id: str) -> Path:
        return self.retry_directory / _file_name(letter_id)

    # The daemon's side

    def add(self, letter: ReplyDeadLetter, *, was_retried: bool = False) -> None:
        """Keep `letter`, durably. A retried one that failed again goes back with its new
        reason by one rename, so a crash leaves it either still asked for or dead, never both
        or neither."""
        if not was_retried:
            write_state_json(self._dead(letter.id), letter.to_dict(), indent=1)
            return
        asked = self._retry(letter.id)
        write_state_json(asked, letter.to_dict(), indent=1)
        _move(asked, self._dead(letter.id))

    def sent_again(self, letter_id: str) -> None:
        """A retried letter was delivered: it is no dead letter any more."""
        _remove(self._retry(letter_id))

    def names(self) -> tuple[frozenset[str], frozenset[str]]:
        """The file names in both folders: what changes when a letter comes, goes or is asked
        to be sent again."""
        return _names(self.directory), _names(self.retry_directory)

    # Both sides

    def letters(self) -> list[ReplyDeadLetter]:
        """Every dead letter, oldest first; those asked to be sent again included (`retrying`)."""
        found: dict[str, ReplyDeadLetter] = {}
        for directory, retrying in ((self.directory, False), (self.retry_directory, True)):
            for name in sorted(_names(directory)):
                letter = _read(directory / name, retrying=retrying)
                if letter is not None:
                    found[letter.id] = letter
        return sorted(found.values(), key=lambda letter: letter.at)

    def newest(self, count: int) -> tuple[int, list[ReplyDeadLetter]]:
        """How many dead letters there are, and the newest `count` of them, newest first (read
        by the files' times, so a long list costs a `stat` each, not a read)."""
        paths: list[tuple[float, Path, bool]] = []
        for directory, retrying in ((self.directory, False), (self.retry_directory, True)):
            for name in _names(directory):
                try:
                    paths.append(((directory / name).stat().st_mtime, directory / name, retrying))
                except FileNotFoundError:
                    continue  # dropped or moved meanwhile
        paths.sort(key=lambda entry: entry[0], reverse=True)
        newest = [_read(path, retrying=retrying) for _mtime, path, retrying in paths[:count]]
        return len(paths), [letter for letter in newest if letter is not None]

    # The command line's side

    def ask_retry(self, letter_id: str) -> bool:
        """Ask the daemon to send it again; False when there is no such dead letter."""
        self.retry_directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(self.directory)
        try:
            _move(self._dead(letter_id), self._retry(letter_id))
        except FileNotFoundError:
            return self._retry(letter_id).exists()  # asked already
        return True

    def drop(self, letter_id: str) -> bool:
        """Forget it (asked to be sent again or not); False when there was none."""
        removed = [_remove(path) for path in (self._dead(letter_id), self._retry(letter_id))]
        return any(removed)


def _file_name(letter_id: str) -> str:
    # Quoted: a delivery id is a UUID here, but nothing in it may leave the folder, and a
    # leading dot would read as a file still being written.
    quoted = quote(letter_id, safe="")
    if quoted.startswith("."):
        quoted = "%2E" + quoted[1:]
    return quoted + _SUFFIX


def _names(directory: Path) -> frozenset[str]:
    try:
        entries = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()  # none kept yet (or no profile directory: nothing to keep there)
    # A leading dot: a file `write_state_file` is still writing.
    return frozenset(n for n in entries if n.endswith(_SUFFIX) and not n.startswith("."))


def _read(path: Path, *, retrying: bool) -> ReplyDeadLetter | None:
    data = read_state_json(path, unreadable_event="dead_letters.unreadable")
    if not isinstance(data, dict):
        return None
    try:
        return ReplyDeadLetter.from_dict(data, retrying=retrying)
    except (KeyError, TypeError, ValueError) as error:
        log.warning("dead_letters.unreadable", path=str(path), error=repr(error))
        return None


def _move(source: Path, target: Path) -> None:
    os.replace(source, target)
    fsync_dir(target.parent)
    if source.parent != target.parent:
        fsync_dir(source.parent)


def _remove(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def letter_id_of(file_name: str) -> str:
    return unquote(file_name.removesuffix(_SUFFIX))


Send = Callable[[OutboundMessage], Awaitable[None]]


@dataclass(eq=False)
class ProfileDeadLetters:
    """A running profile's dead letters.

    `delivered` is the channel manager's delivery hook: a delivered reply is recorded in the
    journal at once; one given up on is written here first, then recorded (a crash between
    leaves it undelivered in the journal: sent again at the next start, then kept here again
    under the same id). `watch` sends the letters `dead-letters retry` asked for, each once.
    """

    profile: str
    store: DeadLetterStore
    journal: Journal
    #: The count of replies kept as dead letters, by profile, channel and reason.
    counter: Counter
    send: Send
    #: The ids of the retried letters on their way: sent once, however often we look.
    _sending: set[str] = field(default_factory=set, init=False)
    #: The folders' file names at the last look (None: look again whatever they are, as after a
    #: change of our own, which the command line may follow with one that brings the same names
    #: back).
    _seen: tuple[frozenset[str], frozenset[str]] | None = field(default=None, init=False)

    def delivered(
        self, message: OutboundMessage, _platform_ids: list[str], error: DeliveryError | None
    ) -> Awaitable[None] | None:
        delivery_id = message.delivery_id
        assert delivery_id is not None
        if error is not None:
            return self._keep(message, error)
        self.journal.record_delivered(delivery_id)
        if delivery_id in self._sending:
            return self._sent_again(delivery_id)
        return None

    async def _keep(self, reply: OutboundMessage, error: DeliveryError) -> None:
        letter = ReplyDeadLetter.of(self.profile, reply, error)
        was_retried = letter.id in self._sending
        kept = await self._store_change(
            letter.id,
            partial(self.store.add, letter, was_retried=was_retried),
            "dead_letters.not_kept",
            f"make {self.store.directory} writable; the reply is tried again at the next start",
        )
        if not kept:
            # The journal is not told: the reply stays undelivered there, and the next start
            # tries it again rather than losing it.
            return
        self.counter.labels(self.profile, reply.channel, error.reason).inc()
        log.warning(
            "dead_letters.kept",
            profile=self.profile,
            id=letter.id,
            channel=reply.channel,
            chat_id=reply.chat_id,
            reason=error.reason,
            suggestion=f"octos-gateway dead-letters show {letter.id} -c gateway.yaml; "
            "`retry` it once the cause is fixed",
        )
        self.journal.record_delivered(letter.id, failed=True)

    async def _sent_again(self, letter_id: str) -> None:
        await self._store_change(
            letter_id,
            partial(self.store.sent_again, letter_id),
            "dead_letters.not_forgotten",
            f"it was delivered: `octos-gateway dead-letters drop {letter_id}`, "
            "or the next start sends it again",
        )
        log.info("dead_letters.sent_again", profile=self.profile, id=letter_id)

    async def _store_change(
        self, letter_id: str, change: Callable[[], None], failed_event: str, suggestion: str
    ) -> bool:
        """Make `change` to the letter's files, off the loop; False once a refusal of the disk
        is logged as `failed_event`. Either way the letter is no longer on its way."""
        try:
            await asyncio.to_thread(change)
        except OSError as failure:
            log.error(
                failed_event,
                profile=self.profile,
                id=letter_id,
                error=str(failure),
                suggestion=suggestion,
            )
            return False
        finally:
            self._sending.discard(letter_id)
            self._seen = None  # the folders changed under the watch's last look
        return True

    async def watch(self) -> None:
        """Send each letter asked to be sent again; runs until cancelled."""
        while True:
            try:
                await self.look()
            except OSError as failure:
                # The folder cannot be read now (permissions, a full disk): the profile runs
                # on, and the next look tries again.
                log.warning(
                    "dead_letters.not_read",
                    profile=self.profile,
                    directory=str(self.store.directory),
                    error=str(failure),
                )
            await asyncio.sleep(CHECK_INTERVAL_S)

    async def look(self) -> None:
        """Send the letters asked to be sent again that are not on their way yet."""
        names = await asyncio.to_thread(self.store.names)
        if names == self._seen:
            return
        self._seen = names
        _dead, asked = names
        wanted = {letter_id_of(name) for name in asked} - self._sending
        if not wanted:
            return
        letters = await asyncio.to_thread(self.store.letters)
        for letter in letters:
            if letter.retrying and letter.id in wanted:
                self._sending.add(letter.id)
                log.info(
                    "dead_letters.retrying",
                    profile=self.profile,
                    id=letter.id,
                    channel=letter.reply.channel,
                    chat_id=letter.reply.chat_id,
                )
                metadata = {**letter.reply.metadata, SENT_AGAIN_AT: time.time()}
                await self.send(letter.reply.model_copy(update={"metadata": metadata}))
