"""What a redaction leaves: other events of the thread tree that still hold the erased text.

`redact` erases one event's payload, and no copy of it stays in the file's free pages, WAL or
snapshots; but the same text may be another event's too: an answer quoting the question, a
tool's result echoing its input, a compaction's summary, a framework's own record of its state
(a LangGraph checkpoint holds every message of the graph), or JSON held as text (a tool's
result that is a JSON document), where a line break, a quote or a non-ASCII letter is written
escaped. `events_holding` finds those in the erased event's thread, its ancestors and every
fork of its root, so the command can name them instead of letting the user believe the text
is gone.

A string of the erased payload counts when it is long enough to be its own text
(`SHORTEST` characters, after its ends' whitespace): a role, a block's type or a short word
would be found everywhere. Ids, signatures, names and types are not text of the payload: a
tool call's id is its result's too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from eventstore import RecordedEvent, Store

SHORTEST = 12
# Keys whose strings name or sign what they sit in rather than say anything: found in the event
# that pairs with it (a call's id in its result) or repeated by design (a model's name).
_NOT_TEXT = frozenset({"id", "tool_use_id", "type", "role", "signature", "name", "media_type", "model", "stop_reason",
                       "event_id", "interrupt_id", "run_id", "thread_id", "stream_id", "parent_id", "cache_control"})


def _strings(value: Any, key: str | None = None) -> Iterator[tuple[str | None, str]]:
    """Every string within a JSON value, with the key it sits under (a list's items, their list's)."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _strings(item, name)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, key)


def texts_of(value: Any) -> Iterator[str]:
    """The strings of a payload that are its text (`SHORTEST` characters or more, ends stripped)."""
    for key, string in _strings(value):
        if key not in _NOT_TEXT and len(text := string.strip()) >= SHORTEST:
            yield text


def _written(text: str) -> Iterator[str]:
    """`text` as an event may hold it: as it is, and as a JSON string inside a text spells it
    (escaped to ASCII, as `json.dumps` does by default, or with its letters as they are)."""
    yield text
    yield json.dumps(text)[1:-1]
    yield json.dumps(text, ensure_ascii=False)[1:-1]


class _Texts:
    """The texts looked for, and the test of one string for any of them. A few are each looked
    for in turn (`in`, in C); many (a payload of thousands of strings) by their first `SHORTEST`
    characters, one set lookup at each place of the string, then the texts starting so: each in
    turn made a redaction of 10,000 strings in a thread of 20,000 messages take 24 s."""

    FEW = 32

    def __init__(self, texts: tuple[str, ...]) -> None:
        self.texts = texts
        self.starting: dict[str, list[str]] = {}
        if len(texts) > self.FEW:
            for text in texts:
                self.starting.setdefault(text[:SHORTEST], []).append(text)

    def found_in(self, value: str) -> bool:
        if not self.starting:
            return any(text in value for text in self.texts)
        starting = self.starting
        return any(value.startswith(text, at) for at in range(len(value) - SHORTEST + 1)
                   for text in starting.get(value[at:at + SHORTEST], ()))


def events_holding(store: Store, erased: RecordedEvent) -> list[RecordedEvent]:
    """The events of `erased`'s thread tree (every stream under its root), other than itself,
    whose data still holds a text of its payload as it was before the redaction, in position
    order. Read the event before redacting it: after, its data is a skeleton."""
    forms = tuple(dict.fromkeys(form for text in texts_of(erased.data) for form in _written(text)))
    if not forms:
        return []
    texts = _Texts(forms)
    root = store.thread(erased.stream_id).root_id
    # The data alone, read lean (a redacted event's is its skeleton); the few that hold a text
    # are read whole, for their positions.
    found = [next(store.read(info.id, offset, offset + 1)) for info in store.subtree(root)
             for offset, _, data in store.read_data(info.id, info.base)
             if not (info.id == erased.stream_id and offset == erased.offset)
             and any(texts.found_in(string) for _, string in _strings(data))]
    return sorted(found, key=lambda event: event.position)


def still_holding(event: RecordedEvent) -> str:
    """The line naming an event that still holds an erased text, and how it goes too."""
    how = ("a LangGraph record: erase the thread with the saver's delete_thread (redacting it leaves its checkpoints "
           "unreadable)" if event.type.startswith("langgraph.") else "redact it too if that text must go")
    return f"position {event.position} ({event.type}, {event.stream_id} offset {event.offset}) still holds text of the " \
           f"erased payload: {how}"
