"""The daemon's event loop: uvloop by default, the stdlib loop when configured."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import uvloop

from config import GatewayConfig
from gateway import event_loop
from tests.support.daemon import DaemonProcess, write_config


async def _loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_uvloop_is_the_default_and_asyncio_can_be_chosen() -> None:
    assert GatewayConfig().event_loop == "uvloop"
    assert event_loop.run(_loop_type()) is uvloop.Loop
    assert issubclass(event_loop.run(_loop_type(), "asyncio"), asyncio.BaseEventLoop)
    assert not issubclass(event_loop.run(_loop_type(), "asyncio"), uvloop.Loop)


def test_a_coroutine_s_result_and_error_come_back_as_from_asyncio_run() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def fail() -> None:
        raise LookupError("raised inside the loop")

    assert event_loop.run(answer()) == 42
    with pytest.raises(LookupError, match="inside the loop"):
        event_loop.run(fail())


PROFILE = """\
    agent: {type: echo}
    channels: []
    """


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
async def test_the_daemon_runs_on_the_configured_loop(tmp_path: Path, kind: str) -> None:
    config = write_config(tmp_path, {"main": PROFILE})
    if kind == "asyncio":
        config.write_text(config.read_text() + "event_loop: asyncio\n")
    daemon = DaemonProcess(config)
    await daemon.start()
    try:
        listening = await daemon.wait_log(lambda e: e.get("event") == "daemon.listening")
        assert listening["event_loop"] == kind
        status, _ = await daemon.get("/healthz")
        assert status == 200
    finally:
        assert await daemon.stop_cleanly() == 0
