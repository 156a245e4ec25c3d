"""What the agent side sends to the channels: typed outbound events.

The outbound pipe carries `OutboundEvent`, one of:

- `OutboundMessage`, octos-core's reply type: a whole reply (an answer, a command's output, a
  refusal notice), or the final text of a streamed reply, whose `stream_id` names the stream;
- `StreamSnapshot`: the whole text so far of a streamed reply (never a delta, so a lost or
  merged snapshot does no harm); shown only on a channel that can edit messages;
- `TypingStarted` / `TypingStopped`: show "typing" in a chat while a turn runs, or no longer
  (the reply itself stops it too).

The channel manager dispatches them with one `match`. A channel never receives an event: it
gets the calls the manager makes for it (`send`, `send_with_id` / `edit_message`,
`send_typing`), so control traffic needs no magic keys in a message's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from bus.envelope import OutboundMessage


@dataclass(frozen=True, slots=True)
class StreamSnapshot:
    """The reply so far: `reply.content` is the whole text, `reply.stream_id` its stream.

    The reply's other fields (`reply_to`, metadata, `delivery_id`) are those the final reply
    will carry, so the first platform message the snapshot opens answers the right message.
    """

    reply: OutboundMessage

    def __post_init__(self) -> None:
        if self.reply.stream_id is None:
            raise ValueError("a stream snapshot's reply needs the stream_id its final will carry")
        if self.reply.media:
            raise ValueError("a stream snapshot is text only: send media with the final reply")

    @property
    def channel(self) -> str:
        return self.reply.channel

    @property
    def chat_id(self) -> str:
        return self.reply.chat_id

    @property
    def stream_id(self) -> str:
        stream_id = self.reply.stream_id
        assert stream_id is not None  # checked when the snapshot was made
        return stream_id


@dataclass(frozen=True, slots=True)
class _ChatSignal:
    """A control event for one chat: no text, only where it applies."""

    channel: str
    chat_id: str


@dataclass(frozen=True, slots=True)
class TypingStarted(_ChatSignal):
    """Show "typing" in the chat until the turn's reply (or `TypingStopped`) arrives."""


@dataclass(frozen=True, slots=True)
class TypingStopped(_ChatSignal):
    """The turn ended without a reply (cancelled): stop showing "typing"."""


OutboundEvent: TypeAlias = OutboundMessage | StreamSnapshot | TypingStarted | TypingStopped
"""The outbound pipe's item: everything the agent side sends towards a chat."""
