"""Record framing: `length (4 bytes, big-endian) | CRC-32 of the payload (4 bytes) | payload`.

A record counts only when its whole frame is there and its checksum matches. Scanning stops at
the first frame that is cut short (a torn tail: the process died mid-write, so nothing after it
was ever acknowledged) or whose checksum fails; what follows such a frame cannot be trusted to
be framed at all, so it is reported, never guessed at.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Literal

_HEADER = struct.Struct(">II")
HEADER_BYTES = _HEADER.size
#: No single record is larger; a length past it is corruption, not a record.
MAX_RECORD_BYTES = 64 * 1024 * 1024


class FrameError(ValueError):
    """A record that cannot be framed (too large)."""


def encode_record(payload: bytes) -> bytes:
    if len(payload) > MAX_RECORD_BYTES:
        raise FrameError(f"a log record is {len(payload)} bytes; the limit is {MAX_RECORD_BYTES}")
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


Damage = Literal["none", "torn", "corrupt"]


@dataclass(frozen=True, slots=True)
class ScanResult:
    payloads: list[bytes]
    #: Bytes of `data` that hold whole, valid records; everything past it is damage.
    valid_bytes: int
    damage: Damage


def scan_records(data: bytes) -> ScanResult:
    """Every valid record from the start of `data`, and how the rest (if any) is damaged."""
    payloads: list[bytes] = []
    offset = 0
    end = len(data)
    view = memoryview(data)
    while offset < end:
        if end - offset < HEADER_BYTES:
            return ScanResult(payloads, offset, "torn")
        length, checksum = _HEADER.unpack_from(data, offset)
        if length > MAX_RECORD_BYTES:
            return ScanResult(payloads, offset, "corrupt")
        start = offset + HEADER_BYTES
        if end - start < length:
            return ScanResult(payloads, offset, "torn")
        payload = bytes(view[start : start + length])
        if zlib.crc32(payload) != checksum:
            # A frame that is all there but wrong at the very end of the file is a write the
            # disk never finished (torn); anywhere else it is corruption.
            damage: Damage = "torn" if start + length == end else "corrupt"
            return ScanResult(payloads, offset, damage)
        payloads.append(payload)
        offset = start + length
    return ScanResult(payloads, offset, "none")
