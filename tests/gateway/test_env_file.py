"""The `.env` beside gateway.yaml: read for `${VAR}`, the real environment winning."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.cli.args import environment_for
from tests.support.daemon import write_config


def test_the_file_fills_in_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text(
        "# secrets\nexport FROM_FILE='quoted value'\nBOTH=from-file\nEMPTY=\n"
    )
    monkeypatch.setenv("BOTH", "from-environment")
    monkeypatch.delenv("FROM_FILE", raising=False)
    env = environment_for(tmp_path / "gateway.yaml")
    assert env["FROM_FILE"] == "quoted value"
    assert env["BOTH"] == "from-environment"
    assert env["EMPTY"] == ""


def test_without_a_file_it_is_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONLY_HERE", "1")
    assert environment_for(tmp_path / "gateway.yaml")["ONLY_HERE"] == "1"


def test_an_unset_variable_names_the_env_file_beside_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("BOT_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path / "mybot", {"bot": "channels: [{type: telegram, token: '${BOT_TOKEN}'}]"})
    (tmp_path / "mybot" / ".env").write_text("OTHER=1\n")
    assert main(["check", "-c", "mybot/gateway.yaml"]) == 2
    err = capsys.readouterr().err
    assert "environment variable 'BOT_TOKEN' is not set" in err
    assert "set BOT_TOKEN in the environment or in mybot/.env" in err
