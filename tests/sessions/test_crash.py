"""Crash test: a writer process is SIGKILLed at random moments; nothing acknowledged is lost.

Each round starts a child that appends to three sessions and prints every acknowledged append,
kills it after a random number of acknowledgements (seeded), sometimes leaves a half-written
line as a crash mid-write would, then reopens the data and checks that every acknowledged
message is there exactly once and in order, and that appending still works.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from pathlib import Path

import pytest

from bus import Message
from sessions import SessionStore
from tests.sessions.crash_writer import CRASH_KEYS

WRITER = Path(__file__).with_name("crash_writer.py")
ROUNDS = 6
ACK_TIMEOUT_S = 30.0
HALF_LINE = b'{"role":"user","content":"999999 half writ'


def _tail_of(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:]


def _append_half_line(path: Path) -> None:
    with open(path, "ab") as file:
        file.write(HALF_LINE)


async def _run_and_kill(root: Path, fsync: str, kill_after: int, log: Path) -> dict[int, int]:
    """Run the writer until `kill_after` acknowledgements, SIGKILL it, return the last acks."""
    with log.open("ab") as stderr:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WRITER),
            str(root),
            fsync,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        )
    assert child.stdout is not None
    last_ack: dict[int, int] = {}
    acks = 0
    try:
        while acks < kill_after:
            line = await asyncio.wait_for(child.stdout.readline(), ACK_TIMEOUT_S)
            assert line, f"the writer exited early: {_tail_of(log)}"
            if line == b"ready\n":
                continue
            index, sequence = map(int, line.split())
            last_ack[index] = sequence
            acks += 1
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert child.returncode == -signal.SIGKILL
    return last_ack


def _sequence(content: str) -> int:
    return int(content.split(" ", 1)[0])


@pytest.mark.slow
@pytest.mark.parametrize("fsync", ["batch", "always"])
async def test_acknowledged_appends_survive_sigkill(tmp_path: Path, fsync: str) -> None:
    rng = random.Random(f"crash-{fsync}")
    root = tmp_path / "data"
    acknowledged = dict.fromkeys(range(len(CRASH_KEYS)), -1)
    for round_number in range(ROUNDS):
        acks = await _run_and_kill(root, fsync, rng.randint(1, 400), tmp_path / "writer.log")
        for index, sequence in acks.items():
            acknowledged[index] = max(acknowledged[index], sequence)
        torn_round = round_number % 2 == 1
        if torn_round:
            # A crash in the middle of a write: half a line at the end of a session file.
            victim = CRASH_KEYS[rng.randrange(len(CRASH_KEYS))]
            async with SessionStore(root) as store:
                path = store.path_for(victim)
            _append_half_line(path)
        async with SessionStore(root) as store:
            for index, key in enumerate(CRASH_KEYS):
                session = await store.load(key)
                assert session is not None
                sequences = [_sequence(message.content) for message in session.messages]
                # Exactly once, in order, nothing missing: the file holds 0..n without gaps,
                # and n reaches at least the last acknowledged append.
                assert sequences == list(range(len(sequences)))
                assert len(sequences) - 1 >= acknowledged[index]
            if torn_round:
                assert (
                    store.path_for(victim).with_name(store.path_for(victim).name + ".torn").exists()
                )
    async with SessionStore(root) as store:
        for key in CRASH_KEYS:
            before = await store.load(key)
            assert before is not None
            await store.append(key, Message.user(f"{len(before.messages)} after the crashes"))
            after = await store.load(key)
            assert after is not None
            assert [_sequence(m.content) for m in after.messages] == list(
                range(len(before.messages) + 1)
            )
