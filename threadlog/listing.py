"""One entry of the thread list (`threadlog ls`, the web viewer's threads page)."""

from __future__ import annotations

from typing import Any

from eventstore import Store, ThreadInfo


def listing(store: Store, info: ThreadInfo) -> dict[str, Any]:
    """The thread's row with its title, message count and last activity (a few indexed reads)."""
    last = next(store.read_all(after=info.last_position - 1, limit=1), None) if info.last_position else None
    return {**info.to_json(), "title": store.title(info.id), "messages": store.count(info.id, "message.appended"),
            "last_activity": last.time if last else ""}
