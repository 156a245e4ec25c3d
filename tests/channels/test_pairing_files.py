"""Pairing codes and the allow-list overlay, on disk."""

from __future__ import annotations

from pathlib import Path

from channels.access.allow import AllowOverlay
from channels.access.pairing import (
    CODE_TTL_S,
    MAX_CODES_PER_DAY,
    PairingCodes,
    PendingPair,
    display_code,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_code_is_reused_while_valid_and_works_once(tmp_path: Path) -> None:
    codes = PairingCodes(tmp_path, Clock())
    code = codes.issue("telegram", "66|mallory", "66")
    assert code is not None
    assert len(code) == 8
    assert codes.issue("telegram", "66|mallory", "66") == code
    assert codes.issue("discord", "66|mallory", "66") != code
    # Typed by hand: lower case, with the dash it was shown with.
    assert codes.redeem(display_code(code).lower()) == PendingPair("telegram", "66|mallory", "66")
    assert codes.redeem(code) is None


def test_a_code_expires_after_an_hour(tmp_path: Path) -> None:
    clock = Clock()
    codes = PairingCodes(tmp_path, clock)
    code = codes.issue("telegram", "66", "66")
    assert code is not None
    clock.now += CODE_TTL_S + 1
    assert codes.redeem(code) is None
    fresh = codes.issue("telegram", "66", "66")
    assert fresh is not None
    assert fresh != code


def test_a_sender_gets_a_few_codes_a_day(tmp_path: Path) -> None:
    clock = Clock()
    codes = PairingCodes(tmp_path, clock)
    for _ in range(MAX_CODES_PER_DAY):
        assert codes.issue("telegram", "66", "66") is not None
        clock.now += CODE_TTL_S + 1
    assert codes.issue("telegram", "66", "66") is None
    assert codes.issue("telegram", "77", "77") is not None
    clock.now += 86_400
    assert codes.issue("telegram", "66", "66") is not None


def test_the_overlay_is_seen_by_a_reader_after_each_change(tmp_path: Path) -> None:
    daemon, owner = AllowOverlay(tmp_path), AllowOverlay(tmp_path)
    assert not daemon.refresh()  # no file yet: nothing changed
    assert not daemon.allows("telegram", "66|mallory")
    assert owner.add("telegram", "66")
    assert not owner.add("telegram", "66")
    assert daemon.refresh()
    assert daemon.allows("telegram", "66|mallory")
    assert not daemon.allows("discord", "66")
    assert not daemon.refresh()
    assert [(e.channel, e.sender_id) for e in owner.remove("66")] == [("telegram", "66")]
    assert daemon.refresh()
    assert not daemon.allows("telegram", "66|mallory")
    assert owner.remove("66") == []
