"""`json_payload`: whatever a platform sends that is not readable JSON is one `UnreadableJson`."""

from __future__ import annotations

import pytest

from channels.web.webhook import UnreadableJson, json_payload
from channels.wecom_bot.frames import MalformedFrame, parse_frame

DEEP_LIST = b"[" * 100_000 + b"]" * 100_000


def test_a_document_reads_from_bytes_and_from_text() -> None:
    assert json_payload(b'{"a": [1, "\xc3\xa9"]}') == {"a": [1, "é"]}
    assert json_payload('{"a": null}') == {"a": None}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (DEEP_LIST, "nested too deeply"),
        (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nested too deeply"),
        (b"\xff\xffabc", "can.t decode byte 0xff"),
        (b'{"a": ', "Expecting value"),
        (b"", "Expecting value"),
    ],
    ids=["deep list", "deep object", "not UTF-8", "cut short", "empty"],
)
def test_unreadable_input_is_one_value_error_that_says_why(data: bytes, says: str) -> None:
    with pytest.raises(UnreadableJson, match=says) as caught:
        json_payload(data)
    assert isinstance(caught.value, ValueError)


def test_a_frame_nested_too_deeply_is_malformed_not_a_crash() -> None:
    # parse_frame caught only JSONDecodeError, so RecursionError ended the connection's loop.
    with pytest.raises(MalformedFrame, match="nested too deeply"):
        parse_frame(DEEP_LIST.decode())
