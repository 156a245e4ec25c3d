"""The daemon as a subprocess, from a temporary config: test channel + echo agent."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.daemon import REPO_ROOT, DaemonProcess, write_config
from tests.support.hub import ChannelHub

pytestmark = pytest.mark.slow


def socket_profile(
    port: int, *, delay_s: float = 0.0, extra_channels: str = "", queue_mode: str = "collect"
) -> str:
    return f"""\
        queue_mode: {queue_mode}
        agent: {{type: echo, delay_s: {delay_s}, pieces: 3}}
        channels:
          - type: plugin
            class_path: tests.support.socket_channel:SocketChannel
            options: {{port: {port}, name: test}}
            allow: ["*"]
        {extra_channels}
        """


@pytest.fixture
async def hub() -> AsyncIterator[ChannelHub]:
    async with ChannelHub() as running:
        yield running


async def start_daemon(tmp_path: Path, profile: str, **config: float) -> DaemonProcess:
    path = write_config(tmp_path, {"main": profile}, **config)  # type: ignore[arg-type]
    return await DaemonProcess(path).start()


def turn_started(event: dict[str, object]) -> bool:
    return event.get("event") == "turn.started"


async def test_message_in_reply_out_and_both_stored(tmp_path: Path, hub: ChannelHub) -> None:
    daemon = await start_daemon(tmp_path, socket_profile(hub.port))
    try:
        await hub.say("hello gateway", message_id="m1")
        reply = await hub.reply()
        assert reply.content == "hello gateway"
        assert reply.chat_id == "chat-1"
        assert reply.reply_to == "m1"
    finally:
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
    files = list((tmp_path / "data" / "main").rglob("*.jsonl"))
    assert len(files) == 1, files
    lines = files[0].read_text().splitlines()
    assert '"session_key":"main:test:chat-1"' in lines[0].replace(" ", "")
    assert ['"role":"user"' in lines[1], '"role":"assistant"' in lines[2]] == [True, True]
    assert "hello gateway" in lines[1]
    assert "hello gateway" in lines[2]


async def test_health_ready_and_metrics_answer(tmp_path: Path, hub: ChannelHub) -> None:
    daemon = await start_daemon(tmp_path, socket_profile(hub.port))
    try:
        await hub.say("count me")
        await hub.reply()
        status, body = await daemon.get("/healthz")
        assert (status, body.replace(" ", "")) == (200, '{"status":"ok"}')
        status, body = await daemon.get("/readyz")
        assert status == 200, body
        assert '"test"' in body
        status, body = await daemon.get("/metrics")
        assert status == 200
        assert (
            'octos_messages_in_total{channel="test",outcome="accepted",profile="main"} 1.0' in body
        )
        assert "octos_turn_latency_seconds_bucket" in body
        assert 'octos_queue_depth{direction="outbound",profile="main"}' in body
    finally:
        await daemon.stop()


async def test_sigterm_lets_a_slow_turn_finish_then_exits_0(
    tmp_path: Path, hub: ChannelHub
) -> None:
    daemon = await start_daemon(tmp_path, socket_profile(hub.port, delay_s=0.7))
    await hub.say("slow words take time")
    await daemon.wait_log(turn_started)
    daemon.signal(signal.SIGTERM)
    reply = await hub.reply()
    assert reply.content == "slow words take time"
    assert await daemon.wait() == 0


async def test_abort_trigger_cancels_a_slow_turn(tmp_path: Path, hub: ChannelHub) -> None:
    daemon = await start_daemon(tmp_path, socket_profile(hub.port, delay_s=5.0))
    try:
        await hub.say("this would take fifteen seconds")
        await daemon.wait_log(turn_started)
        await hub.say("停止")
        assert (await hub.reply()).content == "🛑 已取消。"
        await daemon.wait_log(lambda e: e.get("event") == "lane.item_cancelled")
        assert hub.pending_replies() == 0
    finally:
        await daemon.stop()


async def test_failing_channel_restarts_with_backoff_while_another_answers(
    tmp_path: Path, hub: ChannelHub
) -> None:
    flaky = f"""\
  - type: plugin
            class_path: tests.support.socket_channel:FlakySocketChannel
            options: {{port: {hub.port}, name: flaky, fail_starts: 2}}
            allow: ["*"]"""
    daemon = await start_daemon(tmp_path, socket_profile(hub.port, extra_channels=flaky))
    try:
        starts: list[int] = []
        while len(starts) < 3:
            hello = await hub.next_hello()
            if hello["name"] == "flaky":
                starts.append(hello["start"])
                await hub.say(f"still here {len(starts)}")
                assert (await hub.reply()).content == f"still here {len(starts)}"
        assert starts == [1, 2, 3]
        restarts = [e for e in daemon.logs if "restart" in str(e.get("event"))]
        assert len(restarts) >= 2, daemon.logs[-30:]
    finally:
        await daemon.stop()


async def test_rate_limited_send_is_waited_out_and_delivered_once(
    tmp_path: Path, hub: ChannelHub
) -> None:
    daemon = await start_daemon(tmp_path, socket_profile(hub.port))
    try:
        hub.fail_next_send("rate_limited", retry_after_s=0.3)
        await hub.say("patience")
        assert (await hub.reply()).content == "patience"
        assert hub.refused_sends == 1
        await hub.say("next")
        assert (await hub.reply()).content == "next"
        _status, metrics = await daemon.get("/metrics")
        assert "octos_send_retries_total" in metrics
    finally:
        await daemon.stop()


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_bad_config_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, {"broken": "agent: {type: echo}\nchannels:\n  - type: cli\n    alow: ['*']\n"}
    )
    for command in ("run", "check"):
        result = run_cli(command, "-c", str(config), cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "broken.yaml:4:" in result.stderr
        assert "alow" in result.stderr
        assert "allow" in result.stderr
        assert "Traceback" not in result.stderr


def test_check_accepts_a_valid_config(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ok": "agent: {type: echo}\nchannels:\n  - type: cli\n"})
    result = run_cli("check", "-c", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


async def test_the_bus_ordering_survives_many_chats(tmp_path: Path, hub: ChannelHub) -> None:
    daemon = await start_daemon(tmp_path, socket_profile(hub.port, queue_mode="followup"))
    try:
        for number in range(20):
            await hub.say(f"m{number}", chat_id=f"chat-{number % 4}")
        replies = [await hub.reply() for _ in range(20)]
        by_chat: dict[str, list[str]] = {}
        for reply in replies:
            by_chat.setdefault(reply.chat_id, []).append(reply.content)
        for chat, contents in by_chat.items():
            numbers = [int(text[1:]) for text in contents]
            assert numbers == sorted(numbers), chat
        assert sum(len(v) for v in by_chat.values()) == 20
    finally:
        await daemon.stop()


async def test_strangers_get_one_notice_and_the_agent_never_sees_them(
    tmp_path: Path, hub: ChannelHub
) -> None:
    profile = socket_profile(hub.port).replace('allow: ["*"]', 'allow: ["alice"]')
    daemon = await start_daemon(tmp_path, profile)
    try:
        await hub.say("let me in", sender_id="mallory", chat_id="evil")
        notice = await hub.reply()
        assert "mallory" in notice.content
        await hub.say("please", sender_id="mallory", chat_id="evil")
        await hub.say("hello", sender_id="alice")
        assert (await hub.reply()).content == "hello"  # no second notice came before it
        _status, metrics = await daemon.get("/metrics")
        refused = 'octos_messages_in_total{channel="test",outcome="refused",profile="main"} 2.0'
        assert refused in metrics
    finally:
        await daemon.stop()
    assert not [path for path in (tmp_path / "data").rglob("*.jsonl") if "evil" in str(path)]


async def test_a_redelivered_message_is_answered_once(tmp_path: Path, hub: ChannelHub) -> None:
    daemon = await start_daemon(tmp_path, socket_profile(hub.port, queue_mode="followup"))
    try:
        await hub.say("once", message_id="platform-7")
        await hub.say("once", message_id="platform-7")
        await hub.say("twice?", message_id="platform-8")
        assert (await hub.reply()).content == "once"
        assert (await hub.reply()).content == "twice?"
    finally:
        await daemon.stop()


async def test_readyz_is_503_when_a_channel_is_down(tmp_path: Path, hub: ChannelHub) -> None:
    broken = f"""\
  - type: plugin
            class_path: tests.support.socket_channel:FlakySocketChannel
            options: {{port: {hub.port}, name: broken, fatal: true}}
            allow: ["*"]"""
    daemon = await start_daemon(tmp_path, socket_profile(hub.port, extra_channels=broken))
    try:
        await daemon.wait_log(lambda e: e.get("event") == "channel.down")
        status, body = await daemon.get("/readyz")
        assert status == 503
        assert '"broken": {"status": "down"' in body
        await hub.say("the others still work")
        assert (await hub.reply()).content == "the others still work"
    finally:
        await daemon.stop()


async def test_a_taken_http_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path, {"main": "channels: []\n"}, http_port=port)
        result = await asyncio.to_thread(run_cli, "run", "-c", str(config), cwd=tmp_path)
    assert result.returncode == 69
    assert "cannot start the HTTP server" in result.stderr
    assert "http.port" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_daemon_that_exits_at_start_fails_the_waiting_test_with_its_logs(
    tmp_path: Path,
) -> None:
    """The test harness: a daemon that quits after its last line (here a config error) ends
    `start()`'s wait for `daemon.listening` with that line, not with a bare timeout."""
    config = write_config(
        tmp_path, {"broken": "agent: {type: echo}\nchannels:\n  - type: cli\n    alow: ['*']\n"}
    )
    daemon = DaemonProcess(config)
    with pytest.raises(AssertionError, match=r"daemon exited; logs: .*alow"):
        await daemon.start()
    assert await daemon.wait() == 2
