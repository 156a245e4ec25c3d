"""The disk writer: ordered writes, group commit, and failures reported, never half-written."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sessions import SessionWriteError
from sessions.durable import write_all
from sessions.writer import AppendTarget, DiskWriter


@pytest.fixture
async def writer() -> AsyncIterator[DiskWriter]:
    disk = DiskWriter("batch")
    disk.start()
    yield disk
    await disk.stop()


def _target(path: Path) -> AppendTarget:
    return AppendTarget(path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))


async def test_writes_of_many_files_land_in_order(writer: DiskWriter, tmp_path: Path) -> None:
    targets = [_target(tmp_path / f"{index}.jsonl") for index in range(5)]
    waiters = [writer.append(t, f"{n}\n".encode()) for n in range(20) for t in targets]
    await asyncio.gather(*waiters)
    await asyncio.gather(*(writer.close(target) for target in targets))
    for target in targets:
        assert target.path.read_text().split() == [str(n) for n in range(20)]


async def test_a_failed_write_is_reported_and_other_files_carry_on(
    writer: DiskWriter, tmp_path: Path
) -> None:
    good, bad = _target(tmp_path / "good.jsonl"), _target(tmp_path / "bad.jsonl")
    os.close(bad.fd)  # every write to it now fails with EBADF
    results = await asyncio.gather(
        writer.append(bad, b"lost\n"), writer.append(good, b"kept\n"), return_exceptions=True
    )
    assert isinstance(results[0], SessionWriteError)
    assert results[0].path == bad.path
    assert "check free disk space" in str(results[0])
    assert results[1] is None
    await writer.close(good)
    assert good.path.read_bytes() == b"kept\n"


async def test_half_a_line_is_taken_back_when_the_disk_fills_up(
    writer: DiskWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _target(tmp_path / "full.jsonl")
    await writer.append(target, b"first\n")

    def half_then_full(fd: int, data: bytes) -> None:
        write_all(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("sessions.writer.write_all", half_then_full)
    with pytest.raises(SessionWriteError, match="No space left"):
        await writer.append(target, b"second line\n")
    monkeypatch.undo()
    await writer.append(target, b"third\n")
    await writer.close(target)
    assert target.path.read_bytes() == b"first\nthird\n"


async def test_the_writer_refuses_work_when_not_running(tmp_path: Path) -> None:
    disk = DiskWriter("never")
    target = _target(tmp_path / "x.jsonl")
    try:
        with pytest.raises(RuntimeError, match="not running"):
            disk.append(target, b"x\n")
    finally:
        os.close(target.fd)
    with pytest.raises(ValueError, match="fsync"):
        DiskWriter("sometimes")  # type: ignore[arg-type]
