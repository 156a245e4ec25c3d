"""The reconnect loop Feishu's long connection, QQ's gateway and the WeCom AI bot share."""

from __future__ import annotations

import asyncio

import pytest

from channels.errors import AuthError, ChannelError, FatalChannelError, TransientError
from channels.lifecycle.reconnect import ReconnectPolicy, reconnecting

POLICY = ReconnectPolicy(base_s=1.0, cap_s=4.0)


class Script:
    """Connections that end as scripted (None: a clean end); the loop's pauses, recorded."""

    def __init__(self, outcomes: list[Exception | None], stopping: asyncio.Event) -> None:
        self._outcomes = outcomes
        self._stopping = stopping
        self.connections = 0
        self.ended = 0
        self.pauses: list[float] = []

    async def connect(self) -> None:
        self.connections += 1
        outcome = self._outcomes.pop(0)
        if not self._outcomes:
            self._stopping.set()
        if outcome is not None:
            raise outcome

    async def sleep(self, delay_s: float) -> None:
        self.pauses.append(delay_s)

    def count_end(self) -> None:
        self.ended += 1


async def run(outcomes: list[Exception | None], **options: object) -> Script:
    stopping = asyncio.Event()
    script = Script(outcomes, stopping)
    await reconnecting(
        script.connect,
        stopping,
        channel="test",
        failed_event="test.connection_failed",
        policy=POLICY,
        on_ended=script.count_end,
        sleep=script.sleep,
        **options,  # type: ignore[arg-type]
    )
    return script


async def test_failures_back_off_doubling_to_the_cap_and_a_clean_end_starts_over() -> None:
    failure = TransientError("dropped")
    script = await run([failure, failure, failure, failure, None, failure, None])
    assert script.pauses == [1.0, 2.0, 4.0, 4.0, 1.0, 1.0]
    assert script.connections == script.ended == 7


async def test_refused_credentials_end_the_loop_as_fatal_with_the_suggestion() -> None:
    with pytest.raises(FatalChannelError) as raised:
        await run(
            [TransientError("dropped"), AuthError("bad secret"), None],
            refused="the platform refused the app",
            suggestion="check the secret",
        )
    assert "the platform refused the app (bad secret)" in str(raised.value)
    assert raised.value.suggestion == "check the secret"


async def test_a_fatal_error_inside_a_connection_is_not_retried() -> None:
    fatal = FatalChannelError("replaced by another connection")
    with pytest.raises(FatalChannelError):
        await run([fatal, None], retry_on=(ChannelError,))


async def test_an_error_outside_retry_on_reaches_the_caller() -> None:
    with pytest.raises(ChannelError, match="not transient"):
        await run([ChannelError("not transient"), None])


async def test_nothing_connects_once_stopping_is_set() -> None:
    stopping = asyncio.Event()
    stopping.set()
    connects: list[int] = []

    async def connect() -> None:
        connects.append(1)

    await reconnecting(
        connect, stopping, channel="test", failed_event="test.connection_failed", policy=POLICY
    )
    assert connects == []
