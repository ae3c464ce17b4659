"""One entry of the thread list (`threadlog ls`, the web viewer's threads page)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventstore import Store, ThreadInfo


def listing(store: Store, infos: Sequence[ThreadInfo]) -> list[dict[str, Any]]:
    """Each thread's row with its title, message count and last activity (a few indexed reads
    each; forks of one chain share what their histories share: `Store.titles`, `count_each`)."""
    titles, messages = store.titles(infos), store.count_each(infos, "message.appended")
    out = []
    for info in infos:
        last = next(store.read_all(after=info.last_position - 1, limit=1), None) if info.last_position else None
        out.append({**info.to_json(), "title": titles[info.id], "messages": messages[info.id], "last_activity": last.time if last else ""})
    return out
