"""`paused()`: Python's cyclic garbage collector switched off for a block, process-wide.

A fold builds many new containers (every event's `json.loads`) and keeps them, and makes
no reference cycles; each automatic generation-2 pass would rescan the whole growing state
for nothing (measured: ~40% of a 100k-event fold). A large appended batch is the same:
every event's data, prepared event, row and record live until the append returns.
`gc.disable()` is global state, so while a block runs under `paused()` no thread of the
process collects cycles; memory in cycles made meanwhile is freed at the next collection
after the block. Keep such blocks to pure folds and writes: no callbacks into user code.
"""

from __future__ import annotations

import gc


class paused:
    """Disable the cyclic collector for the block (for the whole process), then restore it.

    Only the block that switched it off switches it back on, so nested blocks are fine; a
    block running meanwhile in another thread may then finish with the collector on again
    (slower, never wrong). A class, not a generator-based context manager: cheaper to enter.
    """

    __slots__ = ("was_enabled",)

    def __enter__(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was_enabled:
            gc.enable()
