"""Daemon control through the subprocess: SIGHUP reload, a second signal, chat commands."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.daemon import DaemonProcess, write_config
from tests.support.hub import ChannelHub

pytestmark = pytest.mark.slow


def profile(port: int, name: str, *, queue_mode: str = "collect", delay_s: float = 0.0) -> str:
    return f"""\
queue_mode: {queue_mode}
agent: {{type: echo, delay_s: {delay_s}}}
channels:
  - type: plugin
    class_path: tests.support.socket_channel:SocketChannel
    options: {{port: {port}, name: {name}}}
    allow: ["*"]
"""


@pytest.fixture
async def hub() -> AsyncIterator[ChannelHub]:
    async with ChannelHub() as running:
        yield running


def event_named(name: str) -> object:
    return lambda event: event.get("event") == name


async def test_sighup_reloads_changed_and_added_profiles_only(
    tmp_path: Path, hub: ChannelHub
) -> None:
    config = write_config(
        tmp_path, {"alpha": profile(hub.port, "a"), "beta": profile(hub.port, "b")}
    )
    daemon = await DaemonProcess(config).start()
    try:
        first = {(await hub.next_hello())["name"] for _ in range(2)}
        assert first == {"a", "b"}
        profiles = tmp_path / "profiles"
        (profiles / "beta.yaml").write_text(profile(hub.port, "b", queue_mode="followup"))
        (profiles / "gamma.yaml").write_text(profile(hub.port, "g"))
        daemon.signal(signal.SIGHUP)
        reload = await daemon.wait_log(event_named("reload.profiles_changed"))
        assert (reload["added"], reload["changed"], reload["removed"]) == (["gamma"], ["beta"], [])
        again = {(await hub.next_hello())["name"] for _ in range(2)}
        assert again == {"b", "g"}  # alpha's channel was not restarted
        for name in ("a", "b", "g"):
            await hub.say(f"hello {name}", channel=name)
            assert (await hub.reply()).content == f"hello {name}"

        (profiles / "gamma.yaml").unlink()
        daemon.signal(signal.SIGHUP)
        await daemon.wait_log(
            lambda e: e.get("event") == "profile.stopped" and e.get("profile") == "gamma"
        )
        await hub.say("still here", channel="a")
        assert (await hub.reply()).content == "still here"
    finally:
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0


async def test_invalid_config_on_reload_keeps_the_running_profiles(
    tmp_path: Path, hub: ChannelHub
) -> None:
    config = write_config(tmp_path, {"alpha": profile(hub.port, "a")})
    daemon = await DaemonProcess(config).start()
    try:
        await hub.next_hello()
        (tmp_path / "profiles" / "alpha.yaml").write_text("agent: {type: nonsense}\n")
        daemon.signal(signal.SIGHUP)
        refused = await daemon.wait_log(event_named("reload.refused"))
        assert "alpha.yaml:1" in str(refused["problem"])
        await hub.say("unchanged", channel="a")
        assert (await hub.reply()).content == "unchanged"
    finally:
        await daemon.stop()


async def test_a_second_signal_exits_at_once(tmp_path: Path, hub: ChannelHub) -> None:
    config = write_config(tmp_path, {"alpha": profile(hub.port, "a", delay_s=30.0)}, grace_s=60)
    daemon = await DaemonProcess(config).start()
    await hub.say("a very slow reply", channel="a")
    await daemon.wait_log(event_named("turn.started"))
    daemon.signal(signal.SIGTERM)
    await daemon.wait_log(event_named("daemon.shutting_down"))
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait() == 130


async def test_topic_commands(tmp_path: Path, hub: ChannelHub) -> None:
    config = write_config(tmp_path, {"alpha": profile(hub.port, "test", queue_mode="followup")})
    daemon = await DaemonProcess(config).start()

    async def ask(text: str) -> str:
        await hub.say(text)
        return (await hub.reply()).content

    try:
        assert await ask("remember this") == "remember this"
        # The fork keeps what there was (one exchange), and says so truthfully.
        assert "kept the last 2 messages" in await ask("/new research")
        assert await ask("in research") == "in research"
        listing = await ask("/sessions")
        assert "* research" in listing
        assert "- default" in listing
        assert "default" in await ask("/back")
        status = await ask("/status")
        assert "Session: default" in status
        assert "4 messages" in status or "2 messages" in status
        switched = await ask("/s research")
        assert "in research" in switched  # the preview of the last messages
        assert "Cannot use that name" in await ask("/new bad:name")
        assert "exists already" in await ask("/new research")
        assert "Deleted" in await ask("/d research")
        assert "* default" in await ask("/sessions")
        assert "cleared" in await ask("/reset")
        assert "/new" in await ask("/nonsense")
    finally:
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
    archived = list((tmp_path / "data" / "alpha").rglob("*archive*"))
    assert archived, "deleted and reset sessions are archived, not destroyed"
