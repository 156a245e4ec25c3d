"""The garbage collector while the daemon serves.

What start-up made (modules, SDK clients, config) is frozen out of the collector's sight. The
young generation is collected every `YOUNG_THRESHOLD` allocations net of frees instead of
CPython's 700: a turn allocates a few hundred objects that nearly all die by reference counting,
so the collector runs less often than once a turn instead of walking the same survivors again
and again.

What survives a young collection is not scanned again: every `FREEZE_INTERVAL_S` it is frozen
too, and the middle and old generations are never collected on CPython's schedule. A turn leaves
about a dozen tracked objects that live on (its messages in the session cache, its journal
record until the checkpoint); CPython's middle generation would walk each of them again, in one
long pause every ten young collections. Those objects die by reference counting like the rest.

Cyclic garbage that outlives a young collection (rare: a cycle is nearly always an exception's
traceback, which dies young) is kept until a full collection, and a full collection (everything
unfrozen, collected, frozen again) runs when the frozen set has grown by
`FULL_COLLECTION_GROWTH` since the last one: the rule CPython itself applies before a full
collection, so garbage stays bounded by the same share of the live heap.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

YOUNG_THRESHOLD = 10_000
#: The middle generation's threshold (young collections between two of its own): never
#: reached in practice, since the freezing empties it.
NEVER = 1_000_000
#: How often what survived young collections is frozen (constant time: a list splice).
FREEZE_INTERVAL_S = 1.0
#: How many freezes between two counts of the frozen set (a walk of it) for the growth rule.
FREEZES_PER_COUNT = 60
#: A full collection once the frozen set has grown by this share since the last one.
FULL_COLLECTION_GROWTH = 0.25

Sleep = Callable[[float], Awaitable[None]]


def settle_after_start_up() -> int:
    """Collect and freeze what start-up made, then space young collections out and leave the
    older generations to `keep_settled`; the number of objects frozen."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, NEVER, NEVER)
    return gc.get_freeze_count()


def full_collection() -> int:
    """Every object scanned (the frozen ones too), the garbage freed, the survivors frozen
    again; how many objects are frozen after it."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


async def keep_settled(*, sleep: Sleep = asyncio.sleep) -> None:
    """Run for as long as the daemon serves (cancel to stop): freeze the survivors of young
    collections every `FREEZE_INTERVAL_S`, and make a full collection when the frozen set has
    grown by `FULL_COLLECTION_GROWTH`."""
    baseline = gc.get_freeze_count()
    freezes = 0
    while True:
        await sleep(FREEZE_INTERVAL_S)
        gc.freeze()
        freezes += 1
        if freezes % FREEZES_PER_COUNT:
            continue
        frozen = gc.get_freeze_count()
        if frozen > baseline * (1 + FULL_COLLECTION_GROWTH):
            baseline = full_collection()
            log.debug("gc.full_collection", frozen_before=frozen, frozen_after=baseline)
