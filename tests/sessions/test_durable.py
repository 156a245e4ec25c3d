"""The one durable-file recipe: a whole file replaced atomically, whatever was left beside it."""

from __future__ import annotations

import itertools
import os
import stat
from pathlib import Path

import pytest

from sessions import durable
from sessions.durable import atomic_write, read_state_json, write_state_file, write_state_json


def test_a_temp_file_left_by_a_crashed_process_of_the_same_pid_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durable, "_temp_names", itertools.count())
    target = tmp_path / "topics.json"
    stale = tmp_path / f".topics.json.{os.getpid()}-0.tmp"
    stale.write_bytes(b"half of an old write")

    assert atomic_write(target, [b"whole"]) == len(b"whole")

    assert target.read_bytes() == b"whole"
    assert stale.read_bytes() == b"half of an old write"
    assert sorted(path.name for path in tmp_path.iterdir()) == [stale.name, target.name]


def test_a_state_file_is_written_whole_in_a_new_directory_and_private(tmp_path: Path) -> None:
    path = tmp_path / "matrix" / "since.json"

    write_state_json(path, {"since": "s72"}, indent=2)
    write_state_file(path, b'{"since": "s73"}')

    assert read_state_json(path, unreadable_event="since_unreadable") == {"since": "s73"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [entry.name for entry in path.parent.iterdir()] == ["since.json"]


def test_an_existing_file_is_kept_when_replacing_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"history")

    with pytest.raises(FileExistsError):
        atomic_write(path, [b"other"], replace=False)

    assert path.read_bytes() == b"history"
    assert [entry.name for entry in tmp_path.iterdir()] == ["live.jsonl"]
