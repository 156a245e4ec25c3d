"""The email channel: a mailbox read over IMAP (IDLE, by UID) and answered over SMTP.

Receiving (`InboxReader`): each new message is read, its threading headers remembered on disk,
its attachments saved (allowed senders only), and handed to the gateway; `\\Seen` is set only
once that returned. Automatic mail (out-of-office, bounces, lists) and the bot's own messages
are never answered. Sending: one email per reply, Markdown as a plain-text and an HTML part,
threaded under the message it answers. No edits, so no streaming.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path

import structlog

from bus import ANSWERS, InboundMessage, InboundSender, OutboundMessage
from channels.email.composing import Envelope, compose_reply
from channels.email.imap import ImapConnection, Interrupted
from channels.email.inbox import InboxReader
from channels.email.reading import (
    MAX_ATTACHMENT_BYTES,
    ReceivedMail,
    attach_files,
    media_dir,
    read_mail,
    receive_attachments,
)
from channels.email.smtp import SmtpSender
from channels.email.state import ThreadInfo, ThreadStore, UidStore
from channels.errors import ChannelError
from channels.health import ChannelHealth
from channels.lifecycle.run_state import RunStateChannel
from channels.split.limits import PLATFORM_LIMITS
from channels.stopping import until_taken
from config import EmailConfig

log = structlog.get_logger(__name__)

CHANNEL = "email"
_SHUTDOWN_WAIT_S = 2.0
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


class EmailChannel(RunStateChannel):
    name = CHANNEL
    limit = PLATFORM_LIMITS["email"]
    max_upload_bytes = MAX_ATTACHMENT_BYTES
    #: A reply's files are attachments of its email.
    sends_attachments_with_text = True

    def __init__(self, config: EmailConfig, *, data_dir: Path) -> None:
        self._config = config
        self._address = config.address.casefold()
        self._data_dir = data_dir
        # Unknown, not starting, until IMAP answers: in a cluster a standby may wait for the
        # mailbox's lease for good (another process reads it), which is no reason to be unready.
        super().__init__(ChannelHealth.unknown())
        state_dir = data_dir / "email"
        self._threads = ThreadStore(state_dir / "threads.json")
        self._reader = InboxReader(
            config.imap,
            config.address,
            UidStore(state_dir / "uid-state.json"),
            poll_interval_s=config.poll_interval_s,
            on_health=self._run_state.report,
            stopping=self._run_state.stopping,
        )
        self._smtp = SmtpSender(config.smtp, config.address)

    @property
    def single_poller(self) -> bool:
        # Two readers of one mailbox would race on \Seen, each with its own UID state.
        return True

    # Receiving

    async def start(self, inbound: InboundSender) -> None:
        await self._run_state.run(self._receive(inbound))

    async def _receive(self, inbound: InboundSender) -> None:
        """Read the mailbox until `stop()` interrupts the reader; a refused login is fatal."""
        self._warn_if_plaintext()
        await self._threads.load()
        # As Matrix's sync loop: receiving from here on, a failing IMAP connection reported
        # as degraded health while the reader connects again.
        self._run_state.receiving.set()
        await self._reader.run(functools.partial(self._handle, inbound))

    def _warn_if_plaintext(self) -> None:
        for role, settings in (("imap", self._config.imap), ("smtp", self._config.smtp)):
            if settings.security == "none" and settings.host not in _LOOPBACK:
                log.warning("email.plaintext_connection", server=role, host=settings.host)

    async def _handle(self, inbound: InboundSender, uidvalidity: int, uid: int, raw: bytes) -> bool:
        """Hand one message to the gateway; False when it is not one to answer."""
        try:
            mail = read_mail(raw)
        except Exception:  # supervision point: one unreadable message must not stop the inbox
            log.exception("email.message_unreadable", uid=uid)
            return False
        if not mail.sender or mail.sender == self._address:
            log.debug("email.message_ignored", uid=uid, reason="own or no sender")
            return False
        if mail.automatic:
            log.info("email.automatic_message_ignored", uid=uid, sender=mail.sender)
            return False
        domain = self._address.rpartition("@")[2]
        message_id = mail.message_id or f"uid-{uidvalidity}-{uid}@{domain}"
        thread = ThreadInfo(mail.sender, message_id, mail.subject, mail.references)
        # On disk before the gateway has the message: a reply after a restart finds it.
        await self._threads.remember(thread)
        message = await self._inbound_message(mail, message_id)
        taken = await until_taken(
            lambda: inbound.send(message),
            event="email.inbound_refused",
            stopping=self._run_state.stopping,
            uid=uid,
        )
        if not taken:
            raise Interrupted("stopping while the gateway was full")
        log.debug("email.message_received", uid=uid, message_id=message_id)
        return True

    async def _inbound_message(self, mail: ReceivedMail, message_id: str) -> InboundMessage:
        metadata: dict[str, object] = {"subject": mail.subject}
        if mail.sender_name:
            metadata["sender_name"] = mail.sender_name
        message = InboundMessage(
            channel=CHANNEL,
            sender_id=mail.sender,
            chat_id=mail.sender,
            content=mail.text,
            metadata=metadata,
            message_id=message_id,
        )
        # A stranger's files are not stored: the dispatcher refuses the message anyway.
        if not mail.attachments or not self.is_allowed(mail.sender):
            return message
        directory = media_dir(self._data_dir, mail.sender)
        return await receive_attachments(message, directory, mail.attachments, self.max_media_bytes)

    async def stop(self) -> None:
        self._run_state.stopping.set()
        self._reader.interrupt()
        await self._run_state.stop_within(_SHUTDOWN_WAIT_S, channel=CHANNEL)

    async def probe(self) -> str | None:
        connection = ImapConnection(self._config.imap, self._config.address)
        try:
            folder = await connection.connect()
        finally:
            await connection.close()
        greeting = await self._smtp.probe()
        return (
            f"{self._config.address} (IMAP {self._config.imap.host} {self._config.imap.folder}, "
            f"UIDVALIDITY {folder.uidvalidity}; SMTP {greeting})"
        )

    # Sending

    def _thread_for(self, message: OutboundMessage) -> ThreadInfo | None:
        answers = message.metadata.get(ANSWERS)
        candidates = [message.reply_to]
        if isinstance(answers, list):
            candidates.extend(str(answer) for answer in reversed(answers))
        for candidate in candidates:
            if candidate and (thread := self._threads.get(candidate)) is not None:
                return thread
        return self._threads.latest(message.chat_id.casefold())

    async def send(self, message: OutboundMessage) -> None:
        recipient = message.chat_id.strip()
        if "@" not in recipient:
            raise ChannelError(
                f"{recipient!r} is not an email address",
                channel=CHANNEL,
                suggestion="an email chat id is the correspondent's address",
            )
        await self._threads.load()
        envelope = Envelope(self._config.address, recipient, self._config.subject_prefix)
        email = compose_reply(
            envelope,
            message.content,
            self._thread_for(message),
            delivery_id=message.delivery_id or str(uuid.uuid4()),
        )
        if message.media or message.attachments:
            await attach_files(email, message.media, message.attachments)
        await self._smtp.send(email, recipient)
