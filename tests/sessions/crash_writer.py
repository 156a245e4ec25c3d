"""Child process of the crash test: appends to a few sessions forever, acknowledging each.

Usage: python crash_writer.py ROOT FSYNC. Prints `ready` once open, then `{session} {seq}` after
each append has returned (and so is durable); the parent kills it with SIGKILL at any moment.
Every session continues the sequence it finds on disk, so the parent can check it is gapless.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bus import Message, SessionKey
from sessions import FsyncPolicy, SessionStore
from sessions.writer import FSYNC_POLICIES

CRASH_KEYS = (
    SessionKey("telegram", "crash", "_main"),
    SessionKey("telegram", "crash", "_main", "second topic"),
    SessionKey("discord", "../évil/#chat", "_main"),
)


async def _append_forever(store: SessionStore, index: int, key: SessionKey) -> None:
    session = await store.load(key)
    sequence = 0 if session is None else len(session.messages)
    while True:
        # A padded line makes a write span more than one page now and then.
        await store.append(key, Message.user(f"{sequence} " + "." * (sequence % 700)))
        sys.stdout.write(f"{index} {sequence}\n")
        sys.stdout.flush()
        sequence += 1


async def main(root: Path, fsync: FsyncPolicy) -> None:
    async with SessionStore(root, fsync=fsync) as store:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        async with asyncio.TaskGroup() as group:
            for index, key in enumerate(CRASH_KEYS):
                group.create_task(_append_forever(store, index, key), name=f"append-{index}")


if __name__ == "__main__":
    root, policy = Path(sys.argv[1]), sys.argv[2]
    if policy not in FSYNC_POLICIES:
        raise SystemExit(f"fsync policy must be one of {FSYNC_POLICIES}")
    asyncio.run(main(root, policy))
