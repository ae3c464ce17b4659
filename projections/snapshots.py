"""Snapshots: a projection's folded state cached at (stream, offset), never the truth.

A snapshot of stream S at offset n is the state after the first n events of S's logical
history. Every thread whose history starts with those n events can resume from it: S
itself at any offset >= n, and any fork of S (or of S's forks) made at or above n. The
key includes the projection's code version, so bumping a projection's `VERSION` ignores
every state an older fold produced. Dropping all snapshots changes no answer, only
how long an answer takes; `Store.redact` drops them because a cached state may hold the
erased payload.
"""

from __future__ import annotations

from typing import Any

from eventstore import Store


def nearest(store: Store, projection: str, version: int, thread: str, at: int) -> tuple[int, dict[str, Any]] | None:
    """The cached state with the highest offset <= `at` valid for `thread`, as (offset, state)."""
    if at < 1:
        return None
    return store.nearest_snapshot(projection, version, thread, at)


def save(store: Store, projection: str, version: int, thread: str, offset: int, state: dict[str, Any], as_of: int) -> None:
    """Cache `state` as `projection`'s state after the first `offset` events of `thread`,
    folded from the log as of position `as_of` (`StaleSnapshot` if a redaction since then
    touched what it covers).

    This is the only write any projection makes, and it writes no event: only the
    `snapshots` cache table.
    """
    store.save_snapshot(projection, version, thread, offset, state, as_of=as_of)


def drop(store: Store, projection: str | None = None, thread: str | None = None) -> int:
    """Forget every cached state (of one projection, of one thread's own, if named); returns
    how many were dropped."""
    return store.drop_snapshots(projection, thread)
