"""`store migrate` and `sessions` refusals: no DSN, an unreachable server; never a password."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gateway.cli import main
from tests.support.daemon import free_port

MIGRATE = ["store", "migrate", "--from", "jsonl", "--to", "postgres", "-c"]


def gateway_yaml(directory: Path, store: str) -> Path:
    (directory / "profiles").mkdir()
    (directory / "profiles" / "main.yaml").write_text("channels: [{type: cli}]\n")
    config = directory / "gateway.yaml"
    config.write_text(textwrap.dedent(f"data_dir: data\n{store}\n"))
    return config


def test_migrate_without_a_dsn_says_what_to_add(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = gateway_yaml(tmp_path, "")
    assert main([*MIGRATE, str(config)]) == 2
    assert "store: {backend: postgres, dsn:" in capsys.readouterr().err


def test_an_unreachable_server_is_exit_69_for_migrate_and_1_for_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = f"postgresql://octos:hunter2@127.0.0.1:{free_port()}/octos"
    config = gateway_yaml(tmp_path, f'store: {{backend: postgres, dsn: "{dsn}"}}')
    assert main([*MIGRATE, str(config)]) == 69
    err = capsys.readouterr().err
    assert "cannot use PostgreSQL at postgresql://octos:***@127.0.0.1:" in err
    assert "hunter2" not in err
    assert main(["sessions", "-c", str(config), "list"]) == 1
    listed = capsys.readouterr()
    assert "cannot list the sessions in postgresql://octos:***@" in listed.err
    assert "hunter2" not in listed.err + listed.out
    assert main(["sessions", "-c", str(config), "show", "main:cli:me"]) == 1
    shown = capsys.readouterr()
    assert "cannot use PostgreSQL" in shown.err
    assert "hunter2" not in shown.err + shown.out
