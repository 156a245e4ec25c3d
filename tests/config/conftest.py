"""Helpers for configuration tests: YAML files written from dedented text, so that the line
numbers asserted in a test are the line numbers of the text in that test."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.config_files import WriteYaml


@pytest.fixture
def write_yaml(tmp_path: Path) -> WriteYaml:
    """Write `text` (dedented, leading newline dropped) to `tmp_path / name`."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).removeprefix("\n"), encoding="utf-8")
        return path

    return write
