"""The `.env` beside gateway.yaml: read for `${VAR}`, the real environment winning."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.env_file import environment_for


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
