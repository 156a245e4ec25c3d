"""An ingress process's `InboundSender`: the edge checks, then a publish to the inbound stream.

At the edge: the channel's allow list (a stranger gets the notice of `gateway.turn.strangers`, the
agent never sees them) and the stop. Then the message is published to its partition's subject
with `Nats-Msg-Id` = its platform id, and `send` returns only after JetStream's publish ack: the
channel acknowledges the platform after that, unchanged. A publish that fails raises
`InboundRefused`, so the channel tells the platform to retry later, exactly as when a backlog
is full. JetStream drops a platform retry within its duplicate window (the ack says duplicate).

A channel that holds a request open for the reply (the HTTP API) publishes every attempt (its
id gets a nonce): the worker recognises the inbound id and answers a retry with the stored
reply, sent to this process's reply subject, where the request waits. Every message names this
process and what its channel shows while a turn runs (edits, typing): the worker sends the
turn's live events here (`gateway.cluster.live`).

A stop (`/stop`, an abort trigger) and, in `queue_mode: interrupt`, any newer message of a chat
must end the chat's running turn, which holds the partition the message waits in: once it is
durable, a `Cancel` naming it goes to every worker (`gateway.cluster.chat_queue`). A user's edit
or delete of a message is published as it is, behind the message it changes: no ingress knows
whether a worker has taken that message yet, so the worker that takes it decides (its text
replaced, or it dropped, while it waits; else the edit a turn of its own). A `ChatChanged`
naming the edit or delete goes to every worker once it is durable, so that a worker about to
answer a message of the chat knows to look behind it.

`IngressProfile` is one profile's channel side in an ingress process: receive, publish, deliver.
Its channels run as in one process (supervised, webhooks mounted, pairing), but their intake is
`ClusterIntake` (the platform is acknowledged after JetStream's publish ack) and the replies come
from the outbound stream: the node's delivery loops hand each one to `deliver`, which sends it with
this profile's channel manager. Notices that are not answers (a stranger's "your id is") stay in
the process, on a local bus to the same manager. So do the live events of the turns this process
shows (`show`: snapshots, typing, reactions and used buttons from workers) and their replies
handed over (`queue`), so that the chat's lane has them in the order they were published, as in
one process.

Polling channels (Telegram long polling, IMAP) have one poller per bot across ingress processes:
the channel manager starts a single-poller channel only while this process holds its lease
(`gateway.cluster.lease`), so a standby ingress takes over when the holder dies.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext

from bus import (
    REACTION,
    Admitted,
    AgentHandle,
    Attachment,
    InboundMessage,
    InboundRefused,
    OutboundMessage,
    PipeClosed,
    create_bus,
)
from channels.base import Channel
from channels.errors import DeliveryError
from channels.health import ChannelHealth
from channels.lifecycle.supervisor import start_channel
from channels.media_files import safe_name, save_media
from channels.metrics import ChannelMetrics
from channels.outbound.delivery import on_disk
from channels.outbound.manager import ChannelManager
from config import ProfileConfig
from config.profile import QueueMode
from gateway.cluster.chat_queue import (
    Cancel,
    CancelReason,
    ChatChanged,
    chat_of,
    publish_notice,
)
from gateway.cluster.codec import InboundEnvelope, LiveSignal, platform_id
from gateway.cluster.connection import NATS_ERRORS, REQUEST_TIMEOUT_S
from gateway.cluster.delivery import Delivered
from gateway.cluster.node import ClusterNode
from gateway.cluster.streams import ClusterNames
from gateway.metrics import GatewayMetrics
from gateway.pairing import open_pairing
from gateway.profile_channels import build_channels, not_built_yet, register_all
from gateway.services import ProcessServices
from gateway.turn.history import ProfileHistory
from gateway.turn.reply import reply_files_dir
from gateway.turn.strangers import EdgeCheck, StrangerNotices, scrubbed
from gateway.turn.triage import triage
from sessions import SessionManager
from sessions.backends import active_topics, session_store

log = structlog.get_logger(__name__)


class ClusterIntake:
    """The ingress bus's `InboundLog`: the inbound stream, where the workers take messages."""

    def __init__(
        self,
        profile: str,
        client: Client,
        names: ClusterNames,
        ingress_id: str,
        channel_named: Callable[[str], Channel | None],
        strangers: StrangerNotices,
        metrics: GatewayMetrics,
        *,
        queue_mode: QueueMode = "followup",
        inbound_reactions: bool = False,
        retry_after_s: float = 5.0,
    ) -> None:
        self._profile = profile
        self._client = client
        self._js: JetStreamContext = client.jetstream(timeout=REQUEST_TIMEOUT_S)
        self._queue_mode = queue_mode
        self._inbound_reactions = inbound_reactions
        self._names = names
        self._ingress_id = ingress_id
        self._metrics = metrics
        self._retry_after_s = retry_after_s
        self._edge = EdgeCheck(channel_named, strangers, self._count)

    def stop(self) -> None:
        """Take no more: channels get `PipeClosed`."""
        self._edge.closed = True

    def _count(self, message: InboundMessage, outcome: str) -> None:
        self._metrics.messages_in.labels(self._profile, message.channel, outcome).inc()

    async def admit(self, message: InboundMessage) -> Admitted[InboundMessage] | None:
        """Published to the partition of its chat; `None` once JetStream holds it: a worker
        takes it from there, this process has no agent side."""
        channel = await self._edge.admit(message)
        if channel is None:
            return None
        message = scrubbed(message)
        if REACTION in message.metadata and not self._inbound_reactions:
            self._count(message, "reaction_ignored")
            log.info("cluster.reaction_ignored", channel=message.channel)
            return None
        envelope = self._envelope(channel, message)
        msg_id = envelope.inbound_id
        if envelope.request:
            msg_id = f"{msg_id}.{uuid.uuid4().hex}"  # every attempt reaches a worker
        partition = self._names.partition_of_chat(self._profile, envelope.message)
        try:
            ack = await self._js.publish(
                self._names.inbound_subject(partition),
                envelope.body(),
                timeout=REQUEST_TIMEOUT_S,
                stream=self._names.inbound_stream,
                headers=envelope.headers(msg_id),
            )
        except NATS_ERRORS as error:
            log.warning("cluster.publish_failed", error=str(error) or type(error).__name__)
            raise InboundRefused(
                "global", self._retry_after_s, f"the inbound stream cannot be written: {error}"
            ) from error
        self._count(message, "duplicate" if ack.duplicate else "accepted")
        if not ack.duplicate:
            await self._tell_workers(envelope, ack.seq)
        log.debug(
            "cluster.published",
            partition=partition,
            seq=ack.seq,
            duplicate=bool(ack.duplicate),
            chat=message.chat_id,
        )
        return None

    async def _tell_workers(self, envelope: InboundEnvelope, seq: int) -> None:
        """A stop, or a newer message in interrupt mode: the chat's turn ends now, not when
        the partition reaches the message. An edit or a delete: the workers know one of the
        chat's is stored at `seq` (it ends no turn)."""
        message = envelope.message
        if message.edited_id() is not None or message.deleted_id() is not None:
            change = ChatChanged(profile=self._profile, chat=chat_of(envelope), seq=seq)
            await publish_notice(self._client, self._names.cancel_subject, change)
            return
        kind = triage(message.content).kind
        reason: CancelReason
        if kind == "stop":
            reason = "stop"
        elif kind == "text" and self._queue_mode == "interrupt":
            reason = "interrupt"
        else:
            return
        cancel = Cancel(
            profile=self._profile, chat=chat_of(envelope), before_seq=seq, reason=reason
        )
        await publish_notice(self._client, self._names.cancel_subject, cancel)

    def _envelope(self, channel: Channel, message: InboundMessage) -> InboundEnvelope:
        native = platform_id(self._profile, message)
        request = channel.replies_to_retries
        return InboundEnvelope(
            self._profile,
            native or uuid.uuid4().hex,
            message,
            request=request,
            reply_subject=self._names.reply_subject(self._ingress_id) if request else None,
            # This process shows the turn's snapshots, typing and reactions, and takes tapped
            # buttons off, as far as the channel can.
            ingress=self._ingress_id,
            streams=channel.supports_edit(),
            shows_typing=channel.shows_typing(),
            buttons_attached=channel.buttons_shown == "attached",
        )


class QueuedReplies:
    """Replies put into the channel manager's lanes, each with a future of its outcome."""

    def __init__(self) -> None:
        # By the message object itself: the manager's hook is handed the very object queued.
        self._waiting: dict[int, tuple[OutboundMessage, asyncio.Future[Delivered]]] = {}

    def expect(self, message: OutboundMessage) -> asyncio.Future[Delivered]:
        outcome: asyncio.Future[Delivered] = asyncio.get_running_loop().create_future()
        self._waiting[id(message)] = (message, outcome)
        return outcome

    def forget(self, message: OutboundMessage) -> None:
        self._waiting.pop(id(message), None)

    def delivered(
        self, message: OutboundMessage, platform_ids: list[str], error: DeliveryError | None
    ) -> None:
        """The manager's `on_delivered` hook."""
        queued, outcome = self._waiting.get(id(message), (None, None))
        if queued is not message or outcome is None:
            return
        del self._waiting[id(message)]
        if error is not None:
            log.info("cluster.reply_given_up", channel=message.channel, error=str(error))
        outcome.set_result(
            Delivered(given_up=str(error), reason=error.reason)
            if error is not None
            else Delivered(tuple(platform_ids))
        )

    def cancel_all(self) -> None:
        for _message, outcome in self._waiting.values():
            outcome.cancel()
        self._waiting.clear()


@dataclass(eq=False)
class IngressProfile:
    profile_id: str
    config: ProfileConfig
    shared: ProcessServices
    node: ClusterNode
    #: Set while `run` runs: its channels, and its lanes (the local bus to them).
    _channels: ChannelManager | None = field(default=None, init=False)
    _lanes: AgentHandle | None = field(default=None, init=False)
    _queued: QueuedReplies = field(default_factory=QueuedReplies, init=False)

    @property
    def _root(self) -> Path:
        return self.shared.data_dir / self.profile_id

    async def health(self) -> dict[str, ChannelHealth]:
        if self._channels is None:
            return not_built_yet(self.config)
        return await self._channels.health()

    async def deliver(self, message: OutboundMessage) -> Delivered:
        """One reply from the outbound stream, delivered (or given up on: logged, counted)."""
        assert self._channels is not None
        message = await self._with_files_here(message)
        try:
            platform_ids = await self._channels.deliver(message)
        except DeliveryError as error:
            # Logged with its context and counted by the delivery layer, as in one process.
            log.info("cluster.reply_given_up", profile=self.profile_id, error=str(error))
            return Delivered(given_up=str(error), reason=error.reason)
        return Delivered(tuple(platform_ids))

    async def _with_files_here(self, message: OutboundMessage) -> OutboundMessage:
        """`message` with each file this process lacks (the worker that ran the turn is on
        another host) restored from the database into this profile's `media/out/<turn id>/`."""
        if not message.attachments:
            return message
        attachments = [await self._file_here(attachment) for attachment in message.attachments]
        return message.model_copy(update={"attachments": attachments})

    async def _file_here(self, attachment: Attachment) -> Attachment:
        if await on_disk(attachment):
            return attachment
        kept = Path(attachment.path)
        target = reply_files_dir(self._root, kept.parent.name) / safe_name(kept.name)
        here = attachment.model_copy(update={"path": str(target)})
        if await on_disk(here):
            return here  # restored for an earlier copy of this reply
        data = await self.node.reply_file(attachment.sha256)
        if data is None or hashlib.sha256(data).hexdigest() != attachment.sha256:
            # The chat is told the file is not on this gateway (the delivery layer's notice).
            log.warning(
                "cluster.reply_file_missing",
                profile=self.profile_id,
                turn=kept.parent.name,
                file=attachment.name,
            )
            return attachment
        await save_media(target, data)
        log.info("cluster.reply_file_restored", profile=self.profile_id, file=attachment.name)
        return here

    async def show(self, signal: LiveSignal) -> None:
        """A live event of a turn this process shows, into its chat's lane."""
        if self._lanes is None:
            raise PipeClosed(f"profile {self.profile_id!r} is not running")
        await self._lanes.send(signal)

    async def queue(self, message: OutboundMessage) -> asyncio.Future[Delivered]:
        """A reply handed over, into its chat's lane behind the turn's live events."""
        if self._lanes is None:
            raise PipeClosed(f"profile {self.profile_id!r} is not running")
        if message.delivery_id is None:
            # The manager reports only replies with a delivery id (a dead letter's notice
            # has none): this one is for the report.
            message = message.model_copy(update={"delivery_id": f"live-{uuid.uuid4().hex}"})
        message = await self._with_files_here(message)
        outcome = self._queued.expect(message)
        try:
            await self._lanes.send(message)
        except PipeClosed:
            self._queued.forget(message)
            raise
        return outcome

    async def run(self, started: asyncio.Event, stop: asyncio.Event) -> None:
        """Run the channels until `stop`; intake stops first, then the channels."""
        node = self.node
        async with AsyncExitStack() as stack:
            # Read-only: the web chat's history; sessions are written by workers.
            history_store = await stack.enter_async_context(
                session_store(self.shared.store, self._root, read_only=True)
            )
            topics = active_topics(self.shared.store, self._root, history_store)
            await topics.load()
            history = ProfileHistory(
                self.profile_id,
                SessionManager(history_store, max_open=64),
                topics,
                written_elsewhere=True,
            )
            handle, publisher = create_bus(self.shared.bus.capacity, carries=InboundMessage)
            strangers = StrangerNotices(handle.send)
            channels = ChannelManager(
                self.profile_id,
                publisher,
                metrics=ChannelMetrics(self.shared.metrics.registry, self.profile_id),
                # A single-poller channel (Telegram long polling, IMAP) polls only while this
                # process holds its lease: one poller per bot across every ingress.
                run_channel=(
                    node.leases.for_profile(self.profile_id)
                    if node.leases is not None
                    else start_channel
                ),
                on_delivered=self._queued.delivered,
                delivery_deadline_s=self.config.delivery_deadline_s,
            )
            intake = ClusterIntake(
                self.profile_id,
                node.client,
                node.names,
                node.id,
                channels.channel,
                strangers,
                self.shared.metrics,
                queue_mode=self.config.queue_mode,
                inbound_reactions=self.config.inbound_reactions,
            )
            publisher.log_through(intake)
            stack.callback(self.shared.webhooks.unmount, self.profile_id)
            # Codes and approvals in the sessions' database: shared by every ingress, anywhere.
            pairing = await open_pairing(
                stack, self.profile_id, self.shared.pairing.store(self.shared.store, self._root)
            )
            strangers.stranger_notice = pairing.stranger_notice
            strangers.reread_approvals = pairing.reread
            built = build_channels(
                self.profile_id,
                self.config,
                self._root,
                history=history,
                pairing=pairing,
                webhooks=self.shared.webhooks,
                request_shutdown=self.shared.request_shutdown,
                media_links=self.shared.media_links,
            )
            register_all(channels, built, self.config)
            self._channels = channels
            self._lanes = handle
            stack.callback(self._queued.cancel_all)
            async with asyncio.TaskGroup() as tasks:
                channel_task = tasks.create_task(channels.run(), name=f"channels:{self.profile_id}")
                overlay_task = tasks.create_task(
                    pairing.watch(), name=f"allow-overlay:{self.profile_id}"
                )
                node.add_ingress_profile(
                    self.profile_id, self.deliver, self, [channel.name for channel in built]
                )
                started.set()
                await stop.wait()
                intake.stop()
                node.remove_ingress_profile(self.profile_id)
                self._lanes = None
                handle.close()
                await channels.drain()
                await channels.stop()
                channel_task.cancel()
                overlay_task.cancel()
