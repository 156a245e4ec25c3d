"""Helpers for configuration tests: YAML files written from dedented text, so that the line
numbers asserted in a test are the line numbers of the text in that test."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.config_files import ProblemsIn, WriteYaml, problems_of


@pytest.fixture
def write_yaml(tmp_path: Path) -> WriteYaml:
    """Write `text` (dedented, leading newline dropped) to `tmp_path / name`."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).removeprefix("\n"), encoding="utf-8")
        return path

    return write


@pytest.fixture
def problems_in(write_yaml: WriteYaml) -> ProblemsIn:
    """The problems loading a profile of `text` reports, written to bot.yaml as `write_yaml`
    writes it (so a problem's line is the line of `text` in the test)."""
    return lambda text: problems_of(write_yaml("bot.yaml", text))
