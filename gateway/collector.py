"""The garbage collector, set once the profiles have started (the daemon, and the bench as
the daemon does).

What start-up made (modules, SDK clients, config) is frozen out of the collector's sight, so
full collections scan only what turns allocate, which keeps their pauses short. The young
generation is collected every `YOUNG_THRESHOLD` allocations net of frees instead of CPython's
700: a turn allocates a few hundred objects that nearly all die by reference counting, so at
700 the collector ran about every other turn at 100 busy chats (820 collections in 10,000
turns) and walked the same survivors each time; at 10,000 it runs a tenth as often. The older
generations keep their ratios to it (a full collection after 10 x 10 young ones).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def settle_after_start_up() -> int:
    """Collect and freeze what start-up made, then space young collections out; the number
    of objects frozen."""
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    return gc.get_freeze_count()
