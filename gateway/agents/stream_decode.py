"""Incremental decoding of streamed HTTP bodies: Server-Sent Events and newline-delimited JSON.

The decoders do no I/O: the caller feeds them the body's chunks as they arrive and gets back
the complete payloads. Work is linear in the body: a line is scanned once however many chunks
it spans, and its bytes are decoded only when it is complete (so a UTF-8 character split across
chunks is never broken).
"""

from __future__ import annotations

import re

DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024

_LINE_END = re.compile(rb"\r\n|\r|\n")


class StreamFormatError(ValueError):
    """The body is not the stream it claims to be (bad UTF-8, a line past the size cap)."""


class LineSplitter:
    """Cuts a byte stream into text lines ended by CRLF, LF or a lone CR (as SSE allows)."""

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._buffer = bytearray()
        self._scanned = 0
        self._max_line_bytes = max_line_bytes

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        lines: list[str] = []
        start = 0
        position = self._scanned
        while match := _LINE_END.search(self._buffer, position):
            if match.group() == b"\r" and match.end() == len(self._buffer):
                break  # may be the first half of a CRLF split across chunks
            lines.append(self._decode(self._buffer[start : match.start()]))
            start = position = match.end()
        del self._buffer[:start]
        self._scanned = max(0, len(self._buffer) - (1 if self._buffer.endswith(b"\r") else 0))
        if len(self._buffer) > self._max_line_bytes:
            raise StreamFormatError(f"a line is longer than {self._max_line_bytes} bytes")
        return lines

    def finish(self) -> list[str]:
        """The last line when the body did not end with a line break."""
        rest = bytes(self._buffer).rstrip(b"\r")
        self._buffer.clear()
        self._scanned = 0
        return [self._decode(rest)] if rest else []

    @staticmethod
    def _decode(raw: bytes | bytearray) -> str:
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StreamFormatError(f"the stream is not UTF-8: {exc}") from None


class SseDecoder:
    """Turns SSE lines into the `data` of each event (multi-line data joined with newlines).

    Comments, `id` and `retry` fields are ignored; so is the event name, since a reply stream
    has one kind of event.
    """

    def __init__(self) -> None:
        self._data: list[str] = []

    def line(self, line: str) -> str | None:
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value.removeprefix(" "))
        return None

    def flush(self) -> str | None:
        """The pending event's data, if any (also used at the end of a body)."""
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data.clear()
        return data


class SseDataDecoder:
    """Body bytes in, the data of each complete server-sent event out, in order.

    An event not followed by the blank line that should end it is still delivered by
    `finish()`: lenient towards hand-written webhook servers.
    """

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._lines = LineSplitter(max_line_bytes=max_line_bytes)
        self._events = SseDecoder()

    def feed(self, chunk: bytes) -> list[str]:
        return self._decode(self._lines.feed(chunk))

    def finish(self) -> list[str]:
        payloads = self._decode(self._lines.finish())
        if (data := self._events.flush()) is not None:
            payloads.append(data)
        return payloads

    def _decode(self, lines: list[str]) -> list[str]:
        return [data for line in lines if (data := self._events.line(line)) is not None]


class NdjsonDecoder:
    """Body bytes in, the non-blank lines of newline-delimited JSON out (still undecoded)."""

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._lines = LineSplitter(max_line_bytes=max_line_bytes)

    def feed(self, chunk: bytes) -> list[str]:
        return [line for line in self._lines.feed(chunk) if line.strip()]

    def finish(self) -> list[str]:
        return [line for line in self._lines.finish() if line.strip()]
