"""Profiles that cannot run, through the daemon subprocess: a second daemon on the same data
directory and an unusable data directory exit with one line when nothing runs; with others
running, `/readyz` and the status page name the failed profile; a reload retries it; a port two
API channels share downs one of them in one line."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import DaemonProcess, free_port, write_config
from tests.support.hub import ChannelHub

pytestmark = pytest.mark.slow

API_ONLY = "agent: {{type: echo}}\nchannels: [{{type: api, port: {port}}}]\n"


@pytest.fixture
async def hub() -> AsyncIterator[ChannelHub]:
    async with ChannelHub() as running:
        yield running


def answering(hub: ChannelHub, api_port: int) -> str:
    """A profile on the hub's socket channel (`test`) with the web chat on `api_port`."""
    return f"""\
agent: {{type: echo}}
channels:
  - type: plugin
    class_path: tests.support.socket_channel:SocketChannel
    options: {{port: {hub.port}, name: test}}
    allow: ["*"]
  - type: api
    port: {api_port}
"""


def event_named(name: str, **fields: str) -> Any:
    return lambda event: (
        event.get("event") == name and all(event.get(key) == value for key, value in fields.items())
    )


def tracebacks_above_debug(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if "exception" in e and e.get("level") != "debug"]


async def test_a_second_daemon_on_the_same_data_dir_exits_69_in_one_line(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, {"main": API_ONLY.format(port=0)})
    first = await DaemonProcess(config).start()
    try:
        await first.wait_log(event_named("profile.started"))
        assert first.process is not None
        second = await DaemonProcess(config, "--http-port", "0").start()
        assert await second.wait() == 69
    finally:
        await first.stop()
    failed = [e for e in second.logs if e.get("event") == "profile.failed"]
    assert len(failed) == 1, second.logs
    assert failed[0]["level"] == "error"
    assert f"in use by pid {first.process.pid}" in failed[0]["error"]
    assert "give this one its own data_dir" in failed[0]["error"]
    assert tracebacks_above_debug(second.logs) == []
    debug = next(e for e in second.logs if e.get("event") == "profile.failure_traceback")
    assert "LogInUse" in debug["exception"]
    assert second.count_logged("gateway.started") == 0


async def test_a_data_dir_that_is_a_file_exits_73_in_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"main": API_ONLY.format(port=0)})
    (tmp_path / "data").write_text("not a directory\n")
    daemon = await DaemonProcess(config).start()
    assert await daemon.wait() == 73
    failed = next(e for e in daemon.logs if e.get("event") == "profile.failed")
    assert failed["error"].startswith(f"cannot use the data directory {tmp_path / 'data'}: ")
    assert "Not a directory" in failed["error"]
    assert "--data-dir" in failed["suggestion"]
    assert tracebacks_above_debug(daemon.logs) == []
    assert daemon.count_logged("gateway.started") == 0


async def test_a_failed_profile_makes_readyz_503_and_a_reload_retries_it(
    tmp_path: Path, hub: ChannelHub
) -> None:
    good_port, bad_port = free_port(), free_port()
    config = write_config(
        tmp_path, {"good": answering(hub, good_port), "bad": API_ONLY.format(port=bad_port)}
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "bad").write_text("a file where the profile's directory belongs\n")
    daemon = await DaemonProcess(config).start()
    try:
        started = await daemon.wait_log(event_named("gateway.started"))
        assert started["web_chat"] == [f"http://127.0.0.1:{good_port}/ (good)"]
        status, body = await daemon.get("/readyz")
        assert status == 503, body
        ready = json.loads(body)
        assert list(ready["failed_profiles"]) == ["bad"]
        assert "cannot use the data directory" in ready["failed_profiles"]["bad"]
        assert "bad" not in ready["profiles"]
        status, body = await daemon.get("/status.json")
        shown = {profile["id"]: profile for profile in json.loads(body)["profiles"]}
        assert "cannot use the data directory" in shown["bad"]["failure"]
        assert shown["good"]["failure"] is None
        await hub.say("the good one answers")
        assert (await hub.reply()).content == "the good one answers"

        # Put right outside its YAML, the failed profile starts on SIGHUP; one added by the
        # same reload fails, and readiness names that one now.
        (tmp_path / "data" / "bad").unlink()
        (tmp_path / "data" / "worse").write_text("a file again\n")
        (tmp_path / "profiles" / "worse.yaml").write_text(API_ONLY.format(port=0))
        daemon.signal(signal.SIGHUP)
        reload = await daemon.wait_log(event_named("reload.profiles_changed"))
        assert (reload["added"], reload["retried"]) == (["worse"], ["bad"])
        await daemon.wait_log(event_named("profile.started", profile="bad"))
        await daemon.wait_log(event_named("profile.failed", profile="worse"))
        status, body = await daemon.get("/readyz")
        assert status == 503, body
        assert list(json.loads(body)["failed_profiles"]) == ["worse"]
        assert tracebacks_above_debug(daemon.logs) == []
    finally:
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0


async def test_two_api_channels_on_one_port_down_the_second_in_one_line(tmp_path: Path) -> None:
    port = free_port()
    profile = API_ONLY.format(port=port)
    config = write_config(tmp_path, {"one": profile, "two": profile})
    daemon = await DaemonProcess(config).start()
    try:
        down = await daemon.wait_log(event_named("channel.down"))
        assert down["level"] == "error"
        assert f"cannot listen on 127.0.0.1:{port}" in down["reason"]
        assert "choose a free port in the api channel's `port`" in down["reason"]
        status, _body = await daemon.get("/readyz")
        assert status == 503
        assert tracebacks_above_debug(daemon.logs) == []
        trace = await daemon.wait_log(event_named("channel.failure_traceback", channel="api"))
        assert trace["level"] == "debug"
        assert "address already in use" in trace["exception"]
    finally:
        await daemon.stop()
