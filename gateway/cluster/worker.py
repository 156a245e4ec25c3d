"""A worker process's side of the cluster: every inbound partition, answered exactly once.

Each partition has one durable pull consumer with `max_ack_pending=1`: whichever worker fetches
a partition's message holds it alone until it acknowledges, so a chat's turns run one at a
time, in order, while partitions run in parallel on every worker. For each message:

1. its row in `octos_cluster_turns` is claimed (or found: a redelivery or a platform retry);
   a button's tap after `buttons_ttl_s`, or on buttons another turn's tap claimed
   (`buttons_single_use`, `TurnRecords.claim_tap`), is answered "already answered" and reaches
   no agent; a tap that passes has its message's buttons taken off by the ingress that took it
   in (`gateway.cluster.live.show_buttons_used`);
2. with a stored reply, the reply is published again (redelivery) or the retry dropped; one
   settled without a reply (joined into another turn, dropped by a stop or a delete) is
   acknowledged; a user's edit or delete that no waiting message took up is one that came
   after its message's turn started: the edit runs as a message of its own, marked as an edit
   (`chat_queue.edit_alone`), unless `edits: ignore` or it is a command; a delete, or an edit
   that does not run, is settled and acknowledged;
3. what waits behind it of the same chat decides, by `queue_mode` (`gateway.cluster.chat_queue`),
   whether it is dropped (a stop or, in interrupt mode, a newer message waits; or its sender
   deleted it) or answered together with the messages waiting right behind it (collect), and on
   which text (its sender's last edit waiting, with `edits: replace`);
4. otherwise the profile answers it (abort reply, command, agent turn) with `in_progress`
   heartbeats, an agent turn cancellable by a `Cancel` for its chat
   (`gateway.cluster.chat_queue`) and showing its snapshots, typing and reactions live through
   the ingress that took the message in (`gateway.cluster.live`); the reply, the turn's messages
   (in the record and appended to the session) and the rows of the joined messages (and of the
   edits it took its text from) are stored in one transaction (a command's reply in the
   transaction of its effect, so it runs once), the reply published to the outbound stream with
   `Nats-Msg-Id` = the turn id (naming that ingress, which finishes the stream it showed), and
   only then the inbound message acknowledged. A cancelled turn is settled without a reply,
   then acknowledged.

An owner's send in the partition (`gateway.cluster.sends`) is not answered but sent: its reply
is its text, recorded as a turn's outcome as in step 4, in the transaction that marks the send
taken.

A turn that fails (the agent, the database, anything) is delivered again after the configured
backoff; on its last delivery it is buried in the dead-letter stream with the reason (logged,
counted), the user is told, and the message is `term()`ed, so its partition keeps flowing. A
message whose last delivery never finished (its worker was killed, maybe by the message
itself) comes once more and is buried without running.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus import Attachment, InboundMessage, OutboundMessage, TokenUsage
from channels.buttons import BUTTON_ALREADY_USED, BUTTON_EXPIRED, tap_expired, tapped_message
from config.bus import NatsConfig
from gateway.cluster.chat_queue import (
    DropReason,
    RunningTurns,
    TakenTurn,
    Waiting,
    chat_of,
    edit_alone,
    queue_plan,
)
from gateway.cluster.codec import CodecError, InboundEnvelope, OutboundEnvelope
from gateway.cluster.connection import NATS_ERRORS, REQUEST_TIMEOUT_S
from gateway.cluster.dead_letters import bury
from gateway.cluster.live import LiveTurn, live_turn, show_buttons_used
from gateway.cluster.node_service import ClusterMetrics, NodeService, StatusPublisher, heartbeats
from gateway.cluster.profile_worker import ProfileWorker
from gateway.cluster.pull import Arrivals, pull_bounded, pull_forever
from gateway.cluster.record_table import start_record_expiry
from gateway.cluster.sends import SendRecords, publish_due_sends
from gateway.cluster.streams import ensure_worker_consumers
from gateway.cluster.turn_records import AnsweredElsewhere, TurnRecord, TurnRecords
from gateway.turn.outbox import owner_reply, session_messages
from gateway.turn.outcome import Answer, TurnOutcome, reply_to_answer
from gateway.turn.reply import CANCELLED_NOTICE, platform_ids, reply_message
from gateway.turn.triage import triage
from sessions.errors import SessionError

log = structlog.get_logger(__name__)

#: Why a message delivered more than `max_deliver` times, its last delivery unfinished, is buried.
ABANDONED_REASON = "every delivery allowed was taken by a worker that stopped before answering"
#: What the user is told when their message went to the dead letters.
DEAD_LETTER_REPLY = (
    "Sorry, I could not answer that: {reason}. It was set aside for the bot's owner to look at."
)


#: Publishes a reply to the outbound stream under a `Nats-Msg-Id`.
PublishReply = Callable[[InboundEnvelope, OutboundMessage, str], Awaitable[None]]


class TurnFailed(Exception):
    """The turn produced no answer to store; the reason goes to the retry or the dead letter."""


class Worker(NodeService[TurnRecords]):
    def __init__(
        self,
        client: Client,
        js: JetStreamContext,
        config: NatsConfig,
        records: TurnRecords,
        sends: SendRecords,
        profiles: Callable[[str], ProfileWorker | None],
        profiles_opened: asyncio.Event,
        status: StatusPublisher,
        metrics: ClusterMetrics,
    ) -> None:
        super().__init__(client, js, config, records, metrics)
        self._sends = sends
        self._profiles = profiles
        self._profiles_opened = profiles_opened
        self._status = status
        #: Messages in hand, by profile: a profile that leaves waits for its own to finish.
        self._in_hand: Counter[str] = Counter()
        self._idle = asyncio.Condition()
        self._running: RunningTurns[Answer] = RunningTurns()

    async def wait_idle(self, profile: str) -> None:
        """Until no message of `profile` is in hand (it has left: no new one starts)."""
        async with self._idle:
            await self._idle.wait_for(lambda: self._in_hand[profile] == 0)

    async def run(self) -> None:
        if not await self._until_profiles_opened():
            return
        await ensure_worker_consumers(self._js, self._config)
        names = self._names
        config = self._config
        partitions = range(config.partitions)
        arrivals = Arrivals()
        async with AsyncExitStack() as stack, asyncio.TaskGroup() as tasks:
            await self._running.follow_for(
                self._client, names.cancel_subject, self._js, names.inbound_stream
            )
            stack.push_async_callback(self._running.unfollow)
            if config.worker_max_turns is not None:
                await arrivals.follow(self._client, names.inbound_subjects)
                stack.push_async_callback(arrivals.unfollow)
                tasks.create_task(
                    pull_bounded(
                        self._js,
                        names.inbound_stream,
                        [(names.worker_consumer(p), names.inbound_subject(p)) for p in partitions],
                        self.handle,
                        self._stopping,
                        max_in_hand=config.worker_max_turns,
                        fetch_wait_s=config.fetch_wait_s,
                        arrivals=arrivals,
                    ),
                    name="worker-bounded",
                )
            else:
                for durable in (names.worker_consumer(p) for p in partitions):
                    tasks.create_task(
                        pull_forever(
                            self._js,
                            names.inbound_stream,
                            durable,
                            self.handle,
                            self._stopping,
                            fetch_wait_s=config.fetch_wait_s,
                        ),
                        name=f"worker-partition:{durable}",
                    )
            start_record_expiry(
                tasks, "octos_cluster_turns", self._records.forget_older_than, self._stopping
            )
            tasks.create_task(
                publish_due_sends(self._sends, self._js, names, self._stopping), name="due-sends"
            )
            start_record_expiry(
                tasks, "octos_cluster_sends", self._sends.forget_older_than, self._stopping
            )
            log.info("cluster.worker_running", partitions=self._config.partitions)

    async def _until_profiles_opened(self) -> bool:
        """Wait for this process's profiles to open (or fail to); False when stopped first."""
        if self._profiles_opened.is_set():
            return True
        log.info("cluster.worker_waiting", detail="fetching once this process's profiles run")
        opened = asyncio.ensure_future(self._profiles_opened.wait())
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait([opened, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
            stopping.cancel()
        return self._profiles_opened.is_set()

    async def handle(self, msg: Msg) -> None:
        """One inbound message, to its acknowledgement (or its retry, or its burial)."""
        try:
            envelope = InboundEnvelope.decode(msg.headers, msg.data)
        except CodecError as error:
            await self._bury(msg, None, f"unreadable: {error}", kind="unreadable")
            return
        bound = log.bind(profile=envelope.profile, chat=envelope.message.chat_id)
        deliveries = msg.metadata.num_delivered
        if deliveries > self._config.max_deliver:
            # Its last delivery never finished: the worker holding it died (perhaps of it).
            await self._bury(msg, envelope, ABANDONED_REASON, kind="abandoned")
            return
        if deliveries > 1:
            self._metrics.redeliveries.labels(envelope.profile).inc()
            bound.info(
                "cluster.redelivered", seq=msg.metadata.sequence.stream, deliveries=deliveries
            )
        self._in_hand[envelope.profile] += 1
        try:
            async with heartbeats(msg, self._config.ack_wait_s):
                await self._process(msg, envelope)
        except Exception as error:
            # Supervision point (per message): retried after the backoff, buried at the end.
            failed_turn = isinstance(error, TurnFailed)
            reason = str(error) if failed_turn else f"{type(error).__name__}: {error}"
            bound.warning("cluster.turn_failed", reason=reason, deliveries=deliveries)
            try:
                if deliveries < self._config.max_deliver:
                    await msg.nak(delay=self._backoff_s(deliveries))
                else:
                    kind = "agent_error" if failed_turn else "error"
                    await self._bury(msg, envelope, reason, kind=kind)
            except NATS_ERRORS as nats_error:
                # Not acknowledged: JetStream delivers it again after ack_wait.
                bound.error("cluster.retry_not_scheduled", error=str(nats_error))
        finally:
            async with self._idle:
                self._in_hand[envelope.profile] -= 1
                self._idle.notify_all()

    def _backoff_s(self, deliveries: int) -> float:
        waits = self._config.retry_backoff_s
        return waits[min(deliveries, len(waits)) - 1]

    async def _process(self, msg: Msg, envelope: InboundEnvelope) -> None:
        profile = self._profiles(envelope.profile)
        if profile is None:
            raise TurnFailed(f"no worker runs profile {envelope.profile!r}")
        seq = msg.metadata.sequence.stream
        record = await self._records.claim(envelope.profile, envelope.inbound_id, seq)
        if record.done:
            await self._already_done(msg, envelope, profile, record)
            return
        if envelope.send is not None:
            await self._send_owner(msg, envelope, envelope.send, profile, record)
            return
        message = envelope.message
        if message.edited_id() is not None or message.deleted_id() is not None:
            # A change no waiting message took up (`chat_queue`): its message's turn started.
            as_turn = edit_alone(message, profile.config.edits)
            if as_turn is None:
                log.info(
                    "cluster.change_ignored",
                    turn=record.turn_id,
                    message_id=message.edited_id() or message.deleted_id(),
                    change="delete" if message.deleted_id() is not None else "edit",
                    edits=profile.config.edits,
                )
                await self._records.settle(record, "ignored")
                await msg.ack_sync(timeout=REQUEST_TIMEOUT_S)
                return
            log.info("cluster.edit_new_turn", turn=record.turn_id, message_id=message.edited_id())
            envelope = replace(envelope, message=as_turn)
        refusal = await self._refused_tap(envelope, profile, record)
        if refusal is not None:
            log.info("cluster.tap_refused", turn=record.turn_id, reason=refusal)
            notice = reply_message(
                envelope.message,
                refusal,
                answers=platform_ids([envelope.message]),
                delivery_id=record.turn_id,
            )
            record = await self._records.answer(record, chat_of(envelope), notice, [])
            await self._finish(msg, envelope, profile, record)
            return
        tapped = tapped_message(envelope.message)
        if tapped is not None and profile.config.buttons_single_use:
            # This turn holds the buttons now: they come off the message, as in one process.
            await show_buttons_used(self._client, self._names, envelope, tapped)
        # Only an agent turn is cancelled: a command or a stop is quick, and answered.
        cancellable = triage(envelope.message.content).kind == "text"
        chat = chat_of(envelope)
        with self._running.taken(envelope.profile, chat, seq, cancellable=cancellable) as taken:
            if taken.reason is not None:
                # A cancel remembered from before it was taken: nothing to look at or run.
                await self._drop(msg, envelope, record, taken.reason)
                return
            queued = await queue_plan(
                self._js,
                self._names.inbound_stream,
                msg,
                envelope,
                profile.config.queue_mode,
                self._records,
                self._running.knows_what_waits,
                edits=profile.config.edits,
            )
            if queued.dropped_by is not None:
                await self._drop(msg, envelope, record, queued.dropped_by, queued.absorbed)
                return
            if queued.edited is not None:
                # Edited while it waited: its turn runs once, on the new text.
                log.info("cluster.edit_replaced", turn=record.turn_id, edits=len(queued.absorbed))
                envelope = replace(envelope, message=queued.edited)
            joined = queued.joined
            messages = [envelope.message, *(w.envelope.message for w in joined)]
            # Only an agent turn shows itself live (and reads where it stands to do so).
            live = None
            if cancellable:
                live = await live_turn(self._client, self._js, self._names, envelope)
            turn_log = self._turn_log(msg, envelope, profile, record, queued.closed_with)
            try:
                async with profile.effect_transaction(envelope.message):
                    answer = await self._answered(profile, record, messages, taken, live)
                    if answer is not None and not answer.failed:
                        reply = reply_to_answer(
                            messages, answer, record.turn_id, streamed=envelope.streams
                        )
                        await turn_log.record(TurnOutcome(record.turn_id, messages, answer, reply))
                        record = turn_log.stored
            except AnsweredElsewhere as elsewhere:
                log.info("cluster.answered_elsewhere", turn=elsewhere.stored.turn_id, seq=seq)
                record = elsewhere.stored  # this run's effect rolled back: the other one's stands
        if answer is None:
            assert taken.reason is not None
            await self._drop(msg, envelope, record, taken.reason, queued.closed_with)
            return
        if answer.failed:
            raise TurnFailed(answer.error or "the agent failed")
        if joined:
            log.info("cluster.turn_collected", turn=record.turn_id, messages=len(messages))
        await self._finish(msg, envelope, profile, record)

    async def _refused_tap(
        self, envelope: InboundEnvelope, profile: ProfileWorker, record: TurnRecord
    ) -> str | None:
        """Why a tap reaches no agent (its buttons expired, or another turn's tap used them),
        or None; a tap that may pass claims its buttons for `record`'s turn first, so two
        workers taking two taps on one button agree on which passes."""
        message = envelope.message
        tapped = tapped_message(message)
        if tapped is None:
            return None
        if tap_expired(message, profile.config.buttons_ttl_s, time.time()):
            return BUTTON_EXPIRED
        if profile.config.buttons_single_use and not await self._records.claim_tap(
            record, message.channel, message.chat_id, tapped
        ):
            return BUTTON_ALREADY_USED
        return None

    async def _send_owner(
        self,
        msg: Msg,
        envelope: InboundEnvelope,
        send_id: str,
        profile: ProfileWorker,
        record: TurnRecord,
    ) -> None:
        """An owner's send (`gateway.cluster.sends`), in its place among the chat's turns: its
        reply recorded as a turn's outcome, the send marked taken by that turn and its text
        appended to the chat's session in the same transaction, then delivered as any reply
        is; one cancelled before it came up is settled unsent."""
        message = envelope.message
        key = await profile.current_session(message.channel, message.chat_id)
        try:
            async with profile.turn_transaction() as connection:
                send = await self._sends.start(
                    envelope.profile, send_id, record.turn_id, connection
                )
                if send is not None:
                    added = session_messages(send)
                    reply = owner_reply(send, key, record.turn_id)
                    record = await self._records.answer(
                        record, str(key), reply, added, connection=connection, appended=True
                    )
                    if added:
                        await profile.append(str(key), added)
        except AnsweredElsewhere as elsewhere:
            log.info(
                "cluster.answered_elsewhere",
                turn=elsewhere.stored.turn_id,
                seq=msg.metadata.sequence.stream,
            )
            record = elsewhere.stored
        else:
            if send is None:
                log.info("cluster.send_cancelled", profile=envelope.profile, id=send_id)
                await self._records.settle(record, "cancelled")
                await msg.ack_sync(timeout=REQUEST_TIMEOUT_S)
                return
        await self._finish(msg, envelope, profile, record)

    async def _answered(
        self,
        profile: ProfileWorker,
        record: TurnRecord,
        messages: list[InboundMessage],
        taken: TakenTurn[Answer],
        live: LiveTurn | None,
    ) -> Answer | None:
        """The profile's answer, the turn's status published around it; None when a `Cancel`
        ended the agent's turn."""
        await self._status.started(record.turn_id)
        answer: Answer | None = None
        try:
            work = profile.answer(messages, record.turn_id, live)
            answer = await taken.run(work, name=f"turn:{record.turn_id}")
        finally:
            success = answer is not None and not answer.failed
            usage = answer.usage if answer is not None else TokenUsage()
            await self._status.finished(record.turn_id, success=success, usage=usage)
        return answer

    async def _already_done(
        self, msg: Msg, envelope: InboundEnvelope, profile: ProfileWorker, record: TurnRecord
    ) -> None:
        """A message with a stored outcome: its reply re-published, or acknowledged as done."""
        seq = msg.metadata.sequence.stream
        if record.answered and (record.first_seq == seq or envelope.request):
            self._metrics.replayed_replies.labels(envelope.profile).inc()
            log.info("cluster.reply_replayed", turn=record.turn_id, seq=seq)
            await self._finish(msg, envelope, profile, record)
            return
        if record.settled is not None and record.first_seq == seq:
            # Joined into another message's turn, or dropped by a stop or an interrupt.
            log.info("cluster.settled_acked", turn=record.turn_id, settled=record.settled, seq=seq)
        else:
            self._metrics.dropped_duplicates.labels(envelope.profile).inc()
            log.info("cluster.duplicate_dropped", turn=record.turn_id, seq=seq)
        await msg.ack_sync(timeout=REQUEST_TIMEOUT_S)

    async def _drop(
        self,
        msg: Msg,
        envelope: InboundEnvelope,
        record: TurnRecord,
        reason: DropReason,
        joined: Sequence[Waiting] = (),
    ) -> None:
        """Answered by nothing, as a single process's abort or a delete before its turn:
        settled (with the waiting messages in `joined` its turn used up), then acknowledged; a
        request held open for it (the HTTP API) is told at once."""
        log.info("cluster.message_dropped", turn=record.turn_id, reason=reason)
        if envelope.request:
            notice = reply_message(
                envelope.message,
                CANCELLED_NOTICE,
                answers=platform_ids([envelope.message]),
                failed=True,
                delivery_id=record.turn_id,
            )
            record = await self._records.answer(record, chat_of(envelope), notice, [])
            assert record.reply is not None
            await self._publish_reply(envelope, record.reply, record.turn_id)
        else:
            rows = [(w.envelope.inbound_id, w.seq) for w in joined]
            await self._records.settle(record, reason, joined=rows)
        await msg.ack_sync(timeout=REQUEST_TIMEOUT_S)

    async def _finish(
        self, msg: Msg, envelope: InboundEnvelope, profile: ProfileWorker, record: TurnRecord
    ) -> None:
        """Session messages appended (when the answer's run did not), the stored reply
        delivered."""
        assert record.reply is not None
        if record.messages and not record.appended and record.session_key is not None:
            await profile.append(record.session_key, record.messages)
            await self._records.mark_appended(record)
        await self._turn_log(msg, envelope, profile, record).deliver(record.reply)

    def _turn_log(
        self,
        msg: Msg,
        envelope: InboundEnvelope,
        profile: ProfileWorker,
        record: TurnRecord,
        joined: Sequence[Waiting] = (),
    ) -> ClusterTurnLog:
        return ClusterTurnLog(
            self._records, self._publish_reply, msg, envelope, profile, record, joined
        )

    async def _publish_reply(
        self, envelope: InboundEnvelope, reply: OutboundMessage, msg_id: str
    ) -> None:
        names = self._names
        subject = envelope.reply_subject or names.outbound_subject_of(envelope.profile, reply)
        # Every reply to a message whose turn shows live is delivered where it is shown, so the
        # reply (or a dead letter's notice) finishes the stream and stops the typing there.
        out = OutboundEnvelope(envelope.profile, reply, live_at=envelope.live_at)
        await self._js.publish(
            subject,
            out.body(),
            timeout=REQUEST_TIMEOUT_S,
            stream=names.outbound_stream,
            headers=out.headers(msg_id),
        )

    async def _bury(
        self, msg: Msg, envelope: InboundEnvelope | None, reason: str, *, kind: str
    ) -> None:
        partition = self._names.partition_of_subject(msg.subject)
        seq = await bury(self._js, self._names, msg, reason, partition=partition)
        profile = envelope.profile if envelope is not None else "?"
        self._metrics.dead_letters.labels(profile, kind).inc()
        log.error(
            "cluster.dead_letter",
            profile=profile,
            reason=reason,
            dead_letter=seq,
            deliveries=msg.metadata.num_delivered,
            suggestion="octos-gateway dead-letters show "
            f"{seq} -c gateway.yaml; `retry` it once the cause is fixed",
        )
        if envelope is not None and envelope.send is not None:
            # The owner is told by the send's status, not the chat by a notice.
            try:
                await self._sends.failed(envelope.profile, envelope.send, reason)
            except SessionError as error:
                log.warning("cluster.send_failure_not_recorded", id=envelope.send, error=str(error))
        elif envelope is not None:
            notice = reply_message(
                envelope.message,
                DEAD_LETTER_REPLY.format(reason=kind.replace("_", " ")),
                answers=platform_ids([envelope.message]),
                failed=True,
            )
            await self._publish_reply(envelope, notice, f"dead.{msg.metadata.sequence.stream}")
        await msg.term()


@dataclass(slots=True)
class ClusterTurnLog:
    """The cluster's `TurnLog`, for the message a worker holds: the turn's row in PostgreSQL,
    the session's new messages and the rows of the messages joined into it in one transaction
    (inside a command's effect, as a savepoint of it); the reply published to the outbound
    stream, then the message acknowledged."""

    records: TurnRecords
    publish: PublishReply
    msg: Msg
    envelope: InboundEnvelope
    profile: ProfileWorker
    #: The turn's row as stored last (`record` answers it).
    stored: TurnRecord
    joined: Sequence[Waiting] = ()

    async def record(self, outcome: TurnOutcome[InboundMessage]) -> None:
        answer, profile = outcome.answer, self.profile
        session = str(answer.session_key)
        files = await _file_bytes(outcome.reply.attachments, self.stored.turn_id)
        async with profile.turn_transaction() as connection:
            self.stored = await self.records.answer(
                self.stored,
                session,
                outcome.reply,
                answer.messages,
                joined=[(w.envelope.inbound_id, w.seq) for w in self.joined],
                connection=connection,
                appended=True,
            )
            await self.records.keep_files(connection, files)
            await profile.append(session, answer.messages)
        if files:
            log.debug("cluster.reply_files_kept", turn=self.stored.turn_id, files=len(files))

    async def deliver(self, reply: OutboundMessage) -> None:
        seq = self.msg.metadata.sequence.stream
        stored = self.stored
        # A copy for a retry of a held request must not be dropped as the first reply's twin.
        msg_id = stored.turn_id if stored.first_seq == seq else f"{stored.turn_id}.{seq}"
        await self.publish(self.envelope, reply, msg_id)
        # Not waited for: it goes out with the runner's next request. Lost (the connection
        # dropped), the message comes again after `ack_wait_s` and its stored reply is
        # published again under the same `Nats-Msg-Id`, which JetStream drops.
        await self.msg.ack()


async def _file_bytes(attachments: Sequence[Attachment], turn_id: str) -> list[tuple[str, bytes]]:
    """The bytes of a reply's files as kept in this worker's data directory (SHA-256, bytes),
    for `TurnRecords.keep_files`; a file gone meanwhile is left out (the ingress that lacks it
    says so in the chat)."""
    files: list[tuple[str, bytes]] = []
    for attachment in attachments:
        try:
            data = await asyncio.to_thread(Path(attachment.path).read_bytes)
        except OSError as error:
            log.warning("cluster.reply_file_not_kept", turn=turn_id, error=str(error))
            continue
        files.append((attachment.sha256, data))
    return files
