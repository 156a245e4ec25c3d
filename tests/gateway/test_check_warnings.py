"""`check` and `doctor` print the warnings `run` logs; `check` still exits 0 on warnings only."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from pydantic import SecretStr

from config.bus import NatsConfig
from gateway.cli import main
from gateway.cli.probes import Outcome, ProbeResult, probe_nats, probe_postgres
from tests.e2e.conftest import running_daemon
from tests.support.cli import run_cli
from tests.support.daemon import DaemonProcess, free_port, write_config

DOUBTFUL = {
    "quiet": "channels: []\n",
    "loud": """\
channels:
  - type: telegram
    token: "123:abc"
  - type: api
    host: 0.0.0.0
    port: 0
""",
}


def test_check_prints_every_warning_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, DOUBTFUL)
    assert main(["check", "-c", str(config)]) == 0
    captured = capsys.readouterr()
    assert "is valid (2 profiles: loud, quiet)" in captured.out
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 3, warnings
    text = "\n".join(warnings)
    assert "no channels: this profile receives no messages" in text
    assert "channels[0] (telegram) has an empty allow list" in text
    # Telegram's webhook mode without secret_token is no warning but an error (see check).
    assert "listens on 0.0.0.0 without auth_token" in text


async def test_doctor_lists_them_and_knows_the_running_daemon_owns_its_ports(
    tmp_path: Path,
) -> None:
    api_port = free_port()
    profile = f"channels: [{{type: api, port: {api_port}}}]\n"
    async with running_daemon(tmp_path / "mine", {"web": profile}) as daemon:
        await daemon.wait_log(lambda event: event.get("event") == "api.web_chat_ready")
        result = await run_cli("doctor", "-c", str(daemon.config), cwd=tmp_path)
        # Another configuration on the same ports: any octos-gateway answers /healthz, but
        # this one's `run` would find both ports taken.
        other = write_config(tmp_path / "other", {"web": profile}, http_port=daemon_port(daemon))
        other_result = await run_cli("doctor", "-c", str(other), cwd=tmp_path)
    assert daemon.process is not None
    assert result.code == 0, result.out
    lines = result.out.splitlines()
    assert "open on this machine" in next(line for line in lines if line.startswith("status"))
    ports = [line for line in lines if line.startswith("port ")]
    assert len(ports) == 2
    ours = f"in use by this configuration's octos-gateway (pid {daemon.process.pid})"
    assert all(ours in line for line in ports), ports

    assert other_result.code == 1, other_result.out
    other_ports = [line for line in other_result.out.splitlines() if line.startswith("port ")]
    assert len(other_ports) == 2
    assert "FAIL    already in use by another octos-gateway" in other_ports[0]
    assert f":{api_port} (web api)" in other_ports[1]
    assert "FAIL    already in use by another program" in other_ports[1]


def daemon_port(daemon: DaemonProcess) -> int:
    port = urlsplit(daemon.http_url).port
    assert port is not None
    return port


def test_unreachable_nats_and_postgresql_fail_with_a_fix(tmp_path: Path) -> None:
    nats = NatsConfig(url=SecretStr(f"nats://127.0.0.1:{free_port()}"))
    for result in asyncio.run(_both(nats, f"postgresql://127.0.0.1:{free_port()}/x")):
        assert result.outcome is Outcome.FAIL
        assert result.fix


async def _both(nats: NatsConfig, dsn: str) -> list[ProbeResult]:
    return [await probe_nats(nats, 2.0), await probe_postgres(dsn, 2.0)]


def test_doctor_says_the_status_page_stays_closed_beyond_loopback(tmp_path: Path) -> None:
    from gateway.cli.doctor import run_doctor

    config = write_config(tmp_path, {"cli-bot": "channels: [{type: cli}]\n"})
    text = config.read_text().replace("host: 127.0.0.1", "host: 0.0.0.0")
    config.write_text(text)
    [status] = [r for r in run_doctor(config, 2.0) if r.check == "status page"]
    assert status.outcome is Outcome.WARN
    assert "without http.token" in status.detail
    assert "set http.token" in status.fix
    config.write_text(text.replace("port:", "token: s3cret, port:"))
    [status] = [r for r in run_doctor(config, 2.0) if r.check == "status page"]
    assert status.outcome is Outcome.OK
    assert "behind http.token" in status.detail
