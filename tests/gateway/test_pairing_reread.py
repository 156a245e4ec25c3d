"""Before a sender is refused, pairing reads the approvals again, so one `octos-gateway pair`
approved a moment ago is let in before the daemon's own look at the overlay. A channel without
pairing reads nothing, and a flood of refusals shares its reads."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bus import InboundMessage, OutboundMessage
from channels.access.allow import AllowList, AllowOverlay, OverlayEntry
from channels.access.pairing import FilePairingStore, OnChange, OverlayReads
from gateway.pairing import Pairing
from gateway.turn.strangers import StrangerNotices
from tests.channels.recording import RecordingChannel


class CountedStore(FilePairingStore):
    """The profile's files, counting the reads asked for outside the watch."""

    looks = 0

    async def look_again(self, on_change: OnChange) -> None:
        self.looks += 1
        await super().look_again(on_change)


async def ignore(_notice: OutboundMessage) -> None:
    """Where a notice would go: these tests ask only who is let in."""


async def edge(root: Path, *, pairing_on: str) -> tuple[StrangerNotices, CountedStore, Pairing]:
    """The edge's view of who is allowed, with the approvals loaded once and no watch running
    (as in the second before the daemon's next look at the overlay)."""
    store = CountedStore(root)
    pairing = Pairing("main", store)
    pairing.enable(pairing_on)
    await pairing.load()
    strangers = StrangerNotices(ignore)
    strangers.reread_approvals = pairing.reread
    return strangers, store, pairing


def channel_of(pairing: Pairing, name: str) -> RecordingChannel:
    channel = RecordingChannel(name)
    channel.allow = AllowList([], pairing.approved.view(name))
    return channel


def from_bob(channel: str) -> InboundMessage:
    return InboundMessage(channel=channel, sender_id="bob", chat_id="bob", content="hi")


async def test_a_sender_approved_since_the_last_look_is_let_in(tmp_path: Path) -> None:
    strangers, store, pairing = await edge(tmp_path, pairing_on="api")
    api = channel_of(pairing, "api")
    assert not await strangers.allowed(api, from_bob("api"))
    # What `octos-gateway pair` does, in another process.
    await asyncio.to_thread(AllowOverlay(tmp_path).add, "api", "bob")
    assert await strangers.allowed(api, from_bob("api"))
    assert store.looks == 2
    # Allowed now: no more reads for them.
    assert await strangers.allowed(api, from_bob("api"))
    assert store.looks == 2


async def test_a_channel_without_pairing_reads_nothing(tmp_path: Path) -> None:
    strangers, store, pairing = await edge(tmp_path, pairing_on="api")
    await asyncio.to_thread(AllowOverlay(tmp_path).add, "cli", "bob")
    assert not await strangers.allowed(channel_of(pairing, "cli"), from_bob("cli"))
    assert store.looks == 0
    assert not pairing.approved.allows("cli", "bob")


async def test_callers_during_a_read_share_the_next_one_which_sees_what_changed() -> None:
    reads = OverlayReads()
    overlay: list[OverlayEntry] = []
    applied: list[list[OverlayEntry]] = []
    reading, finish = asyncio.Event(), asyncio.Event()
    started = 0

    async def read() -> list[OverlayEntry]:
        nonlocal started
        started += 1
        seen = list(overlay)
        reading.set()
        await finish.wait()
        return seen

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(reads.read(read, applied.append), name="first-read")
        await reading.wait()
        # Approved after the first read looked: that read cannot answer the callers below.
        overlay.append(OverlayEntry("api", "bob", ""))
        for n in range(50):
            tasks.create_task(reads.read(read, applied.append), name=f"refusal-{n}")
        finish.set()
    assert started == 2
    assert applied == [[], [OverlayEntry("api", "bob", "")]]
