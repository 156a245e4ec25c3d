"""Voice messages into words: any OpenAI-compatible `/audio/transcriptions` endpoint.

OpenAI's whisper-1, Groq, a local whisper server: the profile's `transcription:` names one and
the official SDK calls it. A transcription that cannot be made (none configured, too long, the
server refuses or is down) is not an error of the turn: `transcribe` returns the reason, and the
agent is shown a placeholder saying it (`placeholder`), never an empty message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from channels.media_info import MediaInfo, clock
from gateway.agents.errors import AgentErrors, url_for_log

if TYPE_CHECKING:
    from config import TranscriptionConfig

log = structlog.get_logger(__name__)

#: Sent when no key is configured: local servers ignore it, the SDK needs one.
_PLACEHOLDER_API_KEY = "no-key"
#: The SDK retries a failed request this many times (429s and 5xx) before giving up.
_MAX_RETRIES = 1


@dataclass(frozen=True, slots=True)
class Transcript:
    """The words of one audio file, or why there are none."""

    text: str | None
    reason: str | None = None


def placeholder(media: MediaInfo, reason: str) -> str:
    """What the agent reads instead of words: `[voice message, 0:42, not transcribed: ...]`."""
    length = f", {clock(media.duration_s)}" if media.duration_s is not None else ""
    return f"[voice message{length}, not transcribed: {reason}]"


class Transcriber:
    """Transcribes audio for one profile; with no config every audio gets a placeholder."""

    def __init__(self, config: TranscriptionConfig | None) -> None:
        self._config = config
        api_key = config.api_key.get_secret_value() if config and config.api_key else None
        self._api_key = api_key or _PLACEHOLDER_API_KEY
        where = f"{config.model} at {url_for_log(config.base_url)}" if config else "none"
        self._errors = AgentErrors(f"transcription ({where})", (self._api_key,))

    async def transcribe(self, media: MediaInfo) -> Transcript:
        config = self._config
        if config is None:
            return Transcript(None, "transcription is not configured")
        if media.duration_s is not None and media.duration_s > config.max_seconds:
            return Transcript(None, f"longer than the {clock(config.max_seconds)} limit")
        # The SDK's exceptions carry no secrets but the key is masked anyway; imported here, as
        # the agent does, so profiles without transcription do not pay for the SDK.
        import openai

        try:
            data = await asyncio.to_thread(Path(media.path).read_bytes)
            async with openai.AsyncOpenAI(
                base_url=config.base_url,
                api_key=self._api_key,
                timeout=config.timeout_s,
                max_retries=_MAX_RETRIES,
            ) as client:
                options: dict[str, Any] = {"language": config.language} if config.language else {}
                result = await client.audio.transcriptions.create(
                    model=config.model, file=(media.name, data, media.mime), **options
                )
        except OSError as error:
            return self._failed(media, f"the file cannot be read ({error.strerror})")
        except openai.APIStatusError as error:
            return self._failed(media, f"the transcriber answered HTTP {error.status_code}")
        except openai.APITimeoutError:
            return self._failed(media, f"no answer within {config.timeout_s:g} s")
        except openai.APIError as error:
            return self._failed(media, self._errors.mask(f"the transcriber failed: {error}"))
        text = result if isinstance(result, str) else getattr(result, "text", "")
        if not isinstance(text, str) or not text.strip():
            return self._failed(media, "the transcriber heard no words")
        return Transcript(text.strip())

    def _failed(self, media: MediaInfo, reason: str) -> Transcript:
        log.warning(
            "transcription.failed", transcriber=self._errors.context, file=media.name, reason=reason
        )
        return Transcript(None, reason)
