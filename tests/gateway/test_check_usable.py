"""`check` and `doctor` find what a valid configuration cannot do here, before `run` fails on
it: listeners on one port, a data directory that cannot be created or written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.cli.doctor import run_doctor
from gateway.cli.probes import Outcome, ProbeResult
from tests.support.daemon import free_port, write_config

CLI_BOT = "channels: [{type: cli}]\n"


def check_errors(config: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The problems `check` prints (it exits 2 for them)."""
    assert main(["check", "-c", str(config)]) == 2
    err = capsys.readouterr().err
    return [line.removeprefix("error: ") for line in err.splitlines() if line.startswith("error")]


def doctor_lines(config: Path, check: str) -> list[ProbeResult]:
    return [result for result in run_doctor(config, 2.0) if result.check == check]


def test_a_file_where_data_dir_should_be_fails_check_and_doctor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {"alpha": CLI_BOT, "beta": CLI_BOT})
    (tmp_path / "data").write_text("not a directory\n")
    [error] = check_errors(config, capsys)
    assert error == (
        f"{config}:1: data_dir {tmp_path / 'data'} cannot hold the data of profiles alpha, "
        f"beta: {tmp_path / 'data'} is not a directory; move it away, or set data_dir in "
        "gateway.yaml to a directory this user may write"
    )
    [line] = doctor_lines(config, "data dir")
    assert line.outcome is Outcome.FAIL
    assert "is not a directory" in line.detail
    assert line.fix.startswith("move it away")

    # One profile's own directory blocked by a file: that profile is named.
    (tmp_path / "data").unlink()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "beta").write_text("")
    [error] = check_errors(config, capsys)
    assert f"cannot hold the data of profile beta: {tmp_path / 'data' / 'beta'} is not" in error


def test_a_usable_data_dir_passes_and_is_not_created_by_checking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {"bot": CLI_BOT})
    config.write_text(config.read_text().replace("data_dir: data", "data_dir: state/data"))
    assert main(["check", "-c", str(config)]) == 0
    [line] = doctor_lines(config, "data dir")
    assert line.outcome is Outcome.OK
    assert line.detail == f"{tmp_path / 'state' / 'data'}: this user can write it"
    assert not (tmp_path / "state").exists()


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root may write whatever the mode bits say, so a read-only mode stops nothing",
)
def test_a_read_only_data_dir_fails_check_and_doctor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {"bot": CLI_BOT})
    (tmp_path / "data").mkdir(mode=0o555)
    try:
        [error] = check_errors(config, capsys)
        assert f"{tmp_path / 'data'} is not writable by this user; let this user write" in error
        [line] = doctor_lines(config, "data dir")
        assert line.outcome is Outcome.FAIL
    finally:
        (tmp_path / "data").chmod(0o755)


def test_listeners_on_one_port_fail_check_and_doctor_at_each_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    api = f"channels:\n  - type: api\n    host: 127.0.0.1\n    port: {port}\n"
    config = write_config(
        tmp_path,
        {
            "alpha": api,
            "beta": api.replace("127.0.0.1", "0.0.0.0"),
            # Another address on the same port, and port 0 (a free one at start): no clash.
            "gamma": api.replace("127.0.0.1", "127.0.0.2"),
            "delta": api.replace(str(port), "0"),
            "epsilon": api.replace(str(port), "0"),
        },
        http_port=port,
    )
    profiles = tmp_path / "profiles"
    health = f"the health and status server (http) on 127.0.0.1 ({config}:3)"
    problem = "the second to start could not listen; give each listener a port of its own"
    assert check_errors(config, capsys) == [
        f"{profiles / 'alpha.yaml'}:4: port {port} of profile alpha's api channel on "
        f"127.0.0.1 is also the port of {health}: {problem} (0 picks a free one)",
        f"{profiles / 'beta.yaml'}:4: port {port} of profile beta's api channel on 0.0.0.0 "
        f"is also the port of {health}: {problem} (0 picks a free one)",
        f"{profiles / 'gamma.yaml'}:4: port {port} of profile gamma's api channel on "
        f"127.0.0.2 is also the port of profile beta's api channel on 0.0.0.0 "
        f"({profiles / 'beta.yaml'}:4): {problem} (0 picks a free one)",
    ]
    clashes = doctor_lines(config, "listeners")
    assert [line.outcome for line in clashes] == [Outcome.FAIL] * 3
    assert clashes[0].detail.startswith(f"{profiles / 'alpha.yaml'}:4: port {port}")
    assert clashes[0].fix == "give each listener a port of its own (0 picks a free one)"

    # Each on its own address: no clash.
    (profiles / "beta.yaml").unlink()
    assert main(["check", "-c", str(config)]) == 2
    assert "gamma" not in capsys.readouterr().err
    config.write_text(config.read_text().replace(f"port: {port}", f"port: {free_port()}"))
    assert main(["check", "-c", str(config)]) == 0
    assert doctor_lines(config, "listeners") == []
