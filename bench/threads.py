"""Synthetic threads for the benchmarks, built fast through the store's own batch append.

Every event goes through `Store.append` (validated, hashed, numbered like any other), in
batches of up to 10,000, so a million-event thread costs a hundred appends.
"""

from __future__ import annotations

import time
from typing import Any

from threadlog import Store

BATCH = 10_000
SENTENCE = "The 08:04 from Paris Gare de Lyon reaches Lyon Part-Dieu at 10:02; a second train leaves at 08:58. "


def text_of(size: int, seed: int) -> str:
    """About `size` bytes of plain text, varied by `seed` so no two messages are equal."""
    head = f"[{seed}] "
    body = (SENTENCE * (size // len(SENTENCE) + 1))[: max(size - len(head), 1)]
    return head + body


def messages(start: int, count: int, size: int) -> list[dict[str, Any]]:
    return [
        {"type": "message.appended", "data": {"role": "user" if i % 2 == 0 else "assistant", "content": text_of(size, i)}}
        for i in range(start, start + count)
    ]


def build(store: Store, events: int, size: int = 80, title: str = "bench") -> tuple[str, float]:
    """A root thread holding exactly `events` events (thread.created, then messages).

    Returns the thread id and the seconds it took to build.
    """
    begin = time.perf_counter()
    thread = store.create_thread(title=title)
    done = 1
    while done < events:
        count = min(BATCH, events - done)
        store.append(thread, messages(done, count, size), expect=done)
        done += count
    return thread, time.perf_counter() - begin


def extend(store: Store, thread: str, count: int, size: int = 80) -> None:
    """Append `count` more messages to `thread`, in batches."""
    head = store.head(thread)
    while count > 0:
        n = min(BATCH, count)
        store.append(thread, messages(head, n, size), expect=head)
        head += n
        count -= n
