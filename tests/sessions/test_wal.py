"""The write-ahead log: framing, replay, torn tails, corruption, checkpoints, group commit."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions import durable
from sessions.wal import LogInUse, WriteAheadLog, encode_record, scan_records
from sessions.wal import log as wal_log


async def write_log(directory: Path, payloads: list[bytes], fsync: str = "batch") -> None:
    wal = WriteAheadLog(directory, fsync=fsync)  # type: ignore[arg-type]
    await wal.open()
    await asyncio.gather(*(wal.append(p) for p in payloads))
    await wal.close()


async def replay(directory: Path) -> list[bytes]:
    wal = WriteAheadLog(directory)
    payloads = await wal.open()
    await wal.close()
    return payloads


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.wal"))


async def test_records_come_back_in_order_across_reopens(tmp_path: Path) -> None:
    await write_log(tmp_path, [b"one", b"two"])
    await write_log(tmp_path, [b"three"])
    assert await replay(tmp_path) == [b"one", b"two", b"three"]


async def test_a_torn_tail_is_cut_off_kept_aside_and_the_next_append_is_clean(
    tmp_path: Path,
) -> None:
    await write_log(tmp_path, [b"kept"])
    [segment] = segments(tmp_path)
    with segment.open("ab") as handle:
        handle.write(encode_record(b"never acknowledged")[:-3])
    wal = WriteAheadLog(tmp_path)
    assert await wal.open() == [b"kept"]
    await wal.append(b"after")
    await wal.close()
    assert await replay(tmp_path) == [b"kept", b"after"]
    assert segment.with_name(segment.name + ".torn").exists()


async def test_a_corrupt_record_and_what_follows_are_quarantined(tmp_path: Path) -> None:
    await write_log(tmp_path, [b"first", b"second", b"third"])
    [segment] = segments(tmp_path)
    data = bytearray(segment.read_bytes())
    second_payload = data.index(b"second")
    data[second_payload] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert await replay(tmp_path) == [b"first"]
    side = segment.with_name(segment.name + ".corrupt")
    assert side.exists()
    assert b"third" in side.read_bytes()


async def test_a_checkpoint_keeps_only_the_snapshot_and_what_came_after(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    await wal.open()
    for index in range(10):
        await wal.append(f"old {index}".encode())
    await wal.checkpoint([b"snapshot"])
    await wal.append(b"new")
    await wal.close()
    assert len(segments(tmp_path)) == 1
    assert await replay(tmp_path) == [b"snapshot", b"new"]


@pytest.mark.parametrize("policy", ["always", "batch", "never"])
async def test_every_policy_replays_what_it_acknowledged(tmp_path: Path, policy: str) -> None:
    payloads = [f"record {index}".encode() for index in range(200)]
    await write_log(tmp_path, payloads, fsync=policy)
    assert await replay(tmp_path) == payloads


async def test_concurrent_appends_share_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[int] = []
    real_sync = durable.sync_data

    def counting_sync(fd: int) -> None:
        syncs.append(fd)
        real_sync(fd)

    monkeypatch.setattr(wal_log, "sync_data", counting_sync)
    await write_log(tmp_path, [f"r{index}".encode() for index in range(500)])
    # One group commit per batch, not one per record.
    assert 1 <= len(syncs) < 500


async def test_appends_after_a_write_failure_fail_loudly(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    await wal.open()
    wal._segments[-1].fd = 10_000  # a descriptor that is not open: every write fails
    with pytest.raises(OSError, match="write-ahead log"):
        await wal.append(b"lost?")
    with pytest.raises(OSError, match="write-ahead log"):
        await wal.append(b"refused at once")
    await wal.close()


async def test_a_record_tells_how_it_ended_before_its_waiter_resolves(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    await wal.open()
    told: list[tuple[str, OSError | None, bool]] = []
    first = wal.append(b"one", lambda error: told.append(("one", error, first.done())))

    def fails(error: OSError | None) -> None:
        raise RuntimeError("a writer's bookkeeping broke")

    wal.append(b"two", fails)  # logged; it keeps neither the next writer nor the waiter
    last = wal.append(b"three", lambda error: told.append(("three", error, last.done())))
    await last
    assert told == [("one", None, False), ("three", None, False)]  # before the waiters resolved

    wal._segments[-1].fd = 10_000  # a descriptor that is not open: every write fails
    failed: list[OSError | None] = []
    with pytest.raises(OSError, match="write-ahead log"):
        await wal.append(b"lost?", failed.append)
    refused = wal.append(b"refused at once", failed.append)
    with pytest.raises(OSError, match="write-ahead log"):
        await refused
    await asyncio.sleep(0)  # a broken log tells at the loop's next turn, as a write would
    assert len(failed) == 2
    assert all(isinstance(error, wal_log.LogWriteError) for error in failed)
    await wal.close()
    assert await replay(tmp_path) == [b"one", b"two", b"three"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads=st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=20),
    cut=st.integers(min_value=0),
)
def test_any_prefix_of_a_log_scans_to_the_records_wholly_inside_it(
    payloads: list[bytes], cut: int
) -> None:
    data = b"".join(encode_record(payload) for payload in payloads)
    cut %= len(data) + 1
    scanned = scan_records(data[:cut])
    boundaries = [0]
    for payload in payloads:
        boundaries.append(boundaries[-1] + len(encode_record(payload)))
    whole = max(index for index, end in enumerate(boundaries) if end <= cut)
    assert scanned.payloads == payloads[:whole]
    assert scanned.valid_bytes == boundaries[whole]
    assert scanned.damage == ("none" if cut == boundaries[whole] else "torn")


async def test_a_second_writer_on_the_same_log_is_refused_with_the_holders_pid(
    tmp_path: Path,
) -> None:
    first = WriteAheadLog(tmp_path)
    await first.open()
    second = WriteAheadLog(tmp_path)
    with pytest.raises(LogInUse, match=f"pid {os.getpid()}"):
        await second.open()
    await first.close()
    # Released on close (and by the kernel when a process dies): the next one may open it.
    await second.open()
    await second.close()
