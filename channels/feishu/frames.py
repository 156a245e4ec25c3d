"""Frames of Feishu's long connection: protobuf `pbbp2.Frame`s (generated from pbbp2.proto).

A frame is a control frame (`method` 0: ping, pong) or a data frame (`method` 1: an event).
Headers say the data frame's `type` (event, card), its `message_id`, and for a payload cut into
parts `sum` and `seq`; the parts are joined before the event is read. Every event frame is
answered by sending the frame back with the payload `{"code": 200}` and a `biz_rt` header
(milliseconds spent): without it Feishu delivers the event again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from channels.feishu.pbbp2_pb2 import Frame, Header
from channels.lifecycle.bounded import AgedMap

CONTROL, DATA = 0, 1


def header(frame: Frame, key: str, default: str = "") -> str:
    for item in frame.headers:
        if item.key == key:
            return str(item.value)
    return default


def parse(data: bytes) -> Frame:
    frame = Frame()
    frame.ParseFromString(data)
    return frame


def ping(service_id: int) -> bytes:
    frame = Frame(
        SeqID=0,
        LogID=0,
        service=service_id,
        method=CONTROL,
        headers=[Header(key="type", value="ping")],
    )
    return bytes(frame.SerializeToString())


def acknowledgement(frame: Frame, elapsed_ms: int, code: int = 200) -> bytes:
    """The answer to a data frame: the same frame, `biz_rt` added, the payload `{"code"}`."""
    answer = Frame()
    answer.CopyFrom(frame)
    answer.headers.append(Header(key="biz_rt", value=str(elapsed_ms)))
    answer.payload = json.dumps({"code": code}).encode()
    return bytes(answer.SerializeToString())


class Reassembler:
    """Joins the parts of a payload Feishu cut into `sum` frames; bounded in count and age."""

    # The bounds of an AgedMap, as InboundDedup takes them too, named for what is kept here.
    def __init__(
        self,
        max_pending: int = 64,
        ttl_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: message_id -> its parts so far, None where one has not come yet.
        self._pending: AgedMap[str, list[bytes | None]] = AgedMap(max_pending, ttl_s, clock)

    def add(self, frame: Frame) -> bytes | None:
        """The whole payload once every part has come; None while parts are missing."""
        total = int(header(frame, "sum", "1") or 1)
        if total <= 1:
            return bytes(frame.payload)
        seq = int(header(frame, "seq", "0") or 0)
        if not 0 <= seq < total:
            raise ValueError(f"part {seq} of {total}")
        key = header(frame, "message_id")
        pieces = self._pending.get(key)
        if pieces is None or len(pieces) != total:
            pieces = [None] * total
            self._pending.put(key, pieces)
        pieces[seq] = bytes(frame.payload)
        if any(piece is None for piece in pieces):
            return None
        self._pending.pop(key)
        return b"".join(piece for piece in pieces if piece is not None)
