"""Dead letters, kept in `{prefix}_DEAD` with the reason: inbound messages that kept failing,
and replies an ingress gave up on.

A worker buries an inbound message after its last delivery fails (`max_deliver`), or at once
when it cannot be read: the copy in the dead-letter stream carries the original headers, subject
and body plus why, and the original is `term()`ed so its partition flows on. An ingress buries a
reply the delivery layer gave up on (its deadline passed, or the platform refused it for good)
the same way, marked `Octos-Dead-Kind: reply`, with the delivery layer's reason and the
platform's error, before it records the delivery and acknowledges the reply: in the one stream
the CLI already reads, kept until someone acts, where the delivery records expire after days.

`DeadLetters` is what the `dead-letters` CLI reads and changes: list, show, retry (an inbound
message is published again with a fresh delivery count; a reply goes back to its chat's outbound
partition, once, with its delivery id and a fresh deadline), drop and purge.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import NotFoundError

from bus.envelope import SENT_AGAIN_AT
from channels.retry import Reason
from gateway.cluster.codec import (
    DEAD_DELIVERIES,
    DEAD_ERROR,
    DEAD_KIND,
    DEAD_REASON,
    DEAD_REPLY,
    DEAD_SUBJECT,
    MSG_ID,
    CodecError,
    Delivered,
    OutboundEnvelope,
)
from gateway.cluster.connection import REQUEST_TIMEOUT_S
from gateway.cluster.streams import ClusterNames

#: Headers of the dead copy that are not the original's.
_OWN_HEADERS = frozenset(
    {DEAD_REASON, DEAD_SUBJECT, DEAD_DELIVERIES, DEAD_KIND, DEAD_ERROR, MSG_ID}
)


async def bury(
    js: JetStreamContext,
    names: ClusterNames,
    msg: Msg,
    reason: str,
    *,
    partition: int,
    marks: Mapping[str, str] | None = None,
) -> int:
    """Copy `msg` into the dead-letter stream with `reason` (and `marks`, more headers of the
    dead copy); its sequence there."""
    metadata = msg.metadata
    headers = {k: v for k, v in (msg.headers or {}).items() if k != MSG_ID}
    headers.update(
        {
            # One dead copy per stream message, even when a crash makes us bury it twice.
            MSG_ID: f"dead.{metadata.stream}.{metadata.sequence.stream}",
            DEAD_REASON: _header_text(reason),
            DEAD_SUBJECT: msg.subject,
            DEAD_DELIVERIES: str(metadata.num_delivered),
            **(marks or {}),
        }
    )
    ack = await js.publish(
        names.dead_subject(partition),
        msg.data,
        timeout=REQUEST_TIMEOUT_S,
        stream=names.dead_stream,
        headers=headers,
    )
    return ack.seq


async def bury_reply(
    js: JetStreamContext,
    names: ClusterNames,
    msg: Msg,
    envelope: OutboundEnvelope,
    given_up: Delivered,
) -> int:
    """Keep a reply the delivery layer gave up on, whole, with its reason and the platform's
    error; its sequence in the dead-letter stream."""
    return await bury(
        js,
        names,
        msg,
        # Without one: handed over to an ingress of an older version, which did not say.
        given_up.reason or Reason.UNKNOWN,
        partition=names.partition_of_chat(envelope.profile, envelope.message),
        marks={DEAD_KIND: DEAD_REPLY, DEAD_ERROR: _header_text(given_up.given_up or "")},
    )


def _header_text(text: str) -> str:
    """`text` as a header value: one line, not too long."""
    return text[:2000].replace("\r", " ").replace("\n", " ")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    seq: int
    reason: str
    subject: str
    deliveries: int
    buried_at: datetime | None
    headers: dict[str, str]
    body: bytes

    @property
    def original_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k not in _OWN_HEADERS}

    @property
    def is_reply(self) -> bool:
        """A reply an ingress gave up on (else an inbound message that kept failing)."""
        return self.headers.get(DEAD_KIND) == DEAD_REPLY

    @property
    def error(self) -> str:
        """A reply's: the platform's error (an inbound message's reason says it all)."""
        return self.headers.get(DEAD_ERROR, "")


class DeadLetterMissing(LookupError):
    def __init__(self, seq: int) -> None:
        super().__init__(f"no dead letter {seq}; `dead-letters list` shows the ids there are")


class DeadLetterUnreadable(ValueError):
    def __init__(self, seq: int, error: CodecError) -> None:
        super().__init__(
            f"dead letter {seq} cannot be sent again ({error}); `dead-letters show {seq}` shows "
            f"what it holds, `dead-letters drop {seq}` removes it"
        )


class DeadLetters:
    def __init__(self, js: JetStreamContext, names: ClusterNames) -> None:
        self._js = js
        self._names = names

    async def list(self) -> list[DeadLetter]:
        try:
            info = await self._js.stream_info(self._names.dead_stream)
        except NotFoundError:
            return []
        letters = []
        state = info.state
        if state.messages == 0:
            return []
        for seq in range(state.first_seq, state.last_seq + 1):
            try:
                letters.append(await self.show(seq))
            except DeadLetterMissing:
                continue  # removed by a retry
        return letters

    async def show(self, seq: int) -> DeadLetter:
        try:
            raw = await self._js.get_msg(self._names.dead_stream, seq)
        except NotFoundError:
            raise DeadLetterMissing(seq) from None
        headers = {str(k): str(v) for k, v in (raw.headers or {}).items()}
        return DeadLetter(
            seq=seq,
            reason=headers.get(DEAD_REASON, ""),
            subject=headers.get(DEAD_SUBJECT, ""),
            deliveries=int(headers.get(DEAD_DELIVERIES, "0") or 0),
            buried_at=raw.time,
            headers=headers,
            body=raw.data or b"",
        )

    async def retry(self, seq: int) -> int:
        """Publish the original again, then remove the dead copy; its sequence in the inbound
        stream (an inbound message, with a fresh delivery count) or the outbound one (a reply,
        see `_reply_again`)."""
        letter = await self.show(seq)
        if letter.is_reply:
            ack = await self._reply_again(letter)
        else:
            headers = letter.original_headers
            headers[MSG_ID] = f"retry.{seq}.{uuid.uuid4().hex}"
            ack = await self._js.publish(
                letter.subject,
                letter.body,
                timeout=REQUEST_TIMEOUT_S,
                stream=self._names.inbound_stream,
                headers=headers,
            )
        await self._js.delete_msg(self._names.dead_stream, seq)
        return ack.seq

    async def _reply_again(self, letter: DeadLetter) -> PubAck:
        """A reply given up on, to its chat's outbound partition, delivered by whichever ingress
        holds that (the one that showed its turn live did so long ago).

        With its delivery id (a platform's idempotency key stays the same) and a fresh
        `delivery_deadline_s`, counted from now (`SENT_AGAIN_AT`). Sent once: its message id is
        the dead letter's, so a second `retry` racing this one is dropped by JetStream, and the
        ingress records its delivery under that id.
        """
        try:
            envelope = OutboundEnvelope.decode(letter.headers, letter.body)
        except CodecError as error:
            raise DeadLetterUnreadable(letter.seq, error) from error
        reply = envelope.message
        metadata = {**reply.metadata, SENT_AGAIN_AT: time.time()}
        again = OutboundEnvelope(envelope.profile, reply.model_copy(update={"metadata": metadata}))
        return await self._js.publish(
            self._names.outbound_subject_of(envelope.profile, reply),
            again.body(),
            timeout=REQUEST_TIMEOUT_S,
            stream=self._names.outbound_stream,
            headers=again.headers(f"retry.{reply.delivery_id}.{letter.seq}"),
        )

    async def drop(self, seq: int) -> None:
        """Remove one dead letter."""
        await self.show(seq)  # DeadLetterMissing when there is none
        await self._js.delete_msg(self._names.dead_stream, seq)

    async def purge(self) -> int:
        """Remove every dead letter; how many there were."""
        try:
            info = await self._js.stream_info(self._names.dead_stream)
        except NotFoundError:
            return 0
        await self._js.purge_stream(self._names.dead_stream)
        return info.state.messages
