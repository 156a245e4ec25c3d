"""A poller's pause after failures (Telegram's getUpdates, an IMAP session): doubling, capped."""

from __future__ import annotations

from channels.retry import Backoff


def test_a_pollers_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff(initial_s=5.0, max_s=30.0)
    delays = [backoff.initial_s]
    for _ in range(4):
        delays.append(backoff.next(delays[-1]))
    assert delays == [5.0, 10.0, 20.0, 30.0, 30.0]
