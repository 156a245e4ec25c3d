"""A turn's files, made ready for its agent: described, and its voice messages put in words.

Runs inside the turn (before the agent), so a crash during a transcription runs it again with
the turn. The transcript (or, when there is none, a placeholder saying why) becomes the
message's text: the session stores what the agent read, and every agent, the history and
`/sessions` see words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bus import InboundMessage
from channels.media_info import MediaInfo, describe_media
from gateway.agents.transcription import Transcriber, placeholder


@dataclass(frozen=True, slots=True)
class PreparedMessage:
    content: str
    attachments: Sequence[MediaInfo] = ()
    #: Transcripts by path.
    transcripts: Mapping[str, str] = field(default_factory=dict)


async def prepare_message(
    trigger: InboundMessage, content: str, transcriber: Transcriber
) -> PreparedMessage:
    """`content` (the turn's text; `trigger`'s own text is its end) with the words of
    `trigger`'s audio, or placeholders, after `trigger`'s text."""
    if not trigger.media:
        return PreparedMessage(content)
    attachments = await describe_media(trigger)
    transcripts: dict[str, str] = {}
    spoken: list[str] = []
    for media in attachments:
        if media.kind != "audio":
            continue
        transcript = await transcriber.transcribe(media)
        if transcript.text is not None:
            transcripts[media.path] = transcript.text
            spoken.append(transcript.text)
        else:
            spoken.append(placeholder(media, transcript.reason or "unknown reason"))
    if not spoken:
        return PreparedMessage(content, attachments)
    # The trigger's text ends `content` (`collected_content`): the words go right after it.
    # A trigger without text of its own ends a collected turn as "Queued #2: ".
    follows_label = not trigger.content and content.endswith(": ")
    separator = "" if not content or follows_label else "\n"
    said = "\n".join(spoken)
    return PreparedMessage(content + separator + said, attachments, transcripts)
