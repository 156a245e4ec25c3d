"""Dead letters: inbound messages that kept failing, kept in `{prefix}_DEAD` with the reason.

A worker buries a message after its last delivery fails (`max_deliver`), or at once when it
cannot be read: the copy in the dead-letter stream carries the original headers, subject and
body plus why, and the original is `term()`ed so its partition flows on. `DeadLetters` is what
the `dead-letters` CLI reads and changes: list, show, retry (publish the original again, then
remove the dead copy), drop and purge.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from cluster.codec import DEAD_DELIVERIES, DEAD_REASON, DEAD_SUBJECT, MSG_ID
from cluster.connection import REQUEST_TIMEOUT_S
from cluster.subjects import ClusterNames

#: Headers of the dead copy that are not the original's.
_OWN_HEADERS = frozenset({DEAD_REASON, DEAD_SUBJECT, DEAD_DELIVERIES, MSG_ID})


async def bury(
    js: JetStreamContext, names: ClusterNames, msg: Msg, reason: str, *, partition: int
) -> int:
    """Copy `msg` into the dead-letter stream with `reason`; its sequence there."""
    metadata = msg.metadata
    headers = {k: v for k, v in (msg.headers or {}).items() if k != MSG_ID}
    headers.update(
        {
            # One dead copy per stream message, even when a crash makes us bury it twice.
            MSG_ID: f"dead.{metadata.stream}.{metadata.sequence.stream}",
            DEAD_REASON: reason[:2000].replace("\r", " ").replace("\n", " "),
            DEAD_SUBJECT: msg.subject,
            DEAD_DELIVERIES: str(metadata.num_delivered),
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


class DeadLetterMissing(LookupError):
    def __init__(self, seq: int) -> None:
        super().__init__(f"no dead letter {seq}; `dead-letters list` shows the ids there are")


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
        """Publish the original again (a fresh delivery count), then remove the dead copy."""
        letter = await self.show(seq)
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
