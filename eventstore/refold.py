"""The pending facts a restore folds again, for the threads whose facts it wrote in doubt.

A restore folds each thread's pending facts (`facts.py`) as it writes the events. A redacted
row whose payload was too deep to read kept no ids in its skeleton: the tool calls it opened
are named only by its `event.redacted` (`pending`), which comes later in the export, often
after the results that answer those calls. A redacted text message leaves the same skeleton
(`skeleton.may_hide_ids`), so which it was is known only once the redaction is read. From such
a row on, the thread's facts are in doubt: its events are written with the facts the skeleton
gives, an event that contradicts them is noted instead of refused (`Store._write`), and so are
the forks made from it meanwhile. Once every line is written, the threads in doubt are folded
again, as `verify` folds them: a redacted row's facts from its `event.redacted` when that
records them. A contradiction left then is refused, naming its line.

Only a restore that read such a record, or noted a contradiction, folds again: in any other,
the facts it wrote are the ones the fold gives.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .errors import InvalidEvent
from .facts import NONE, Facts, advance, after_fork
from .forks import chained_to
from .recorded import ThreadInfo, acyclic

if TYPE_CHECKING:
    from .store import Store


def refold(store: Store, doubt: dict[str, int], recorded: dict[int, Facts], doubted: dict[int, str]) -> None:
    """Fold again each thread of `doubt` (stream id -> the first offset in doubt), in the order
    they were put in doubt (a parent before the forks made from it in doubt), and store the
    facts that changed. `recorded` holds the facts the `event.redacted` of a payload too deep
    to read recorded, by the position erased; `doubted` names the line of each event written
    over a contradiction, by its position."""
    for stream_id, start in doubt.items():
        _refold(store, stream_id, start, recorded, doubted)


def _refold(store: Store, stream_id: str, start: int, recorded: dict[int, Facts], doubted: dict[int, str]) -> None:
    backend = store.backend
    row = backend.stream(stream_id)
    assert row is not None  # the restore wrote its events
    first = row.parent_offset or 0
    if start > first:
        before = backend.event_at(stream_id, start - 1)
        assert before is not None
        facts = Facts.stored(before.facts, stream_id)
    elif row.parent_id is not None:  # a fork: the facts of the parent's event it chains to
        rows = acyclic(backend.ancestry(row.parent_id, first - 1))
        _, facts = chained_to(store, rows, [ThreadInfo.from_row(r) for r in rows], first)
    else:
        facts = NONE
    changed: list[tuple[int, str | None]] = []  # written once the scan is done, not beside its paged reads
    for event in backend.range(stream_id, start, None):
        data = json.loads(event.data)
        if event.offset == first:
            facts = after_fork(facts, data) if row.parent_id is not None else NONE
        elif event.position in recorded:
            facts = recorded[event.position]
        else:
            try:
                facts = advance(facts, event.type, data)
            except InvalidEvent as error:
                where = doubted.get(event.position) or f"the event restored at position {event.position} ({error.field})"
                raise InvalidEvent(where, error.why) from None
        dumped = facts.dump()
        if dumped != event.facts:
            changed.append((event.position, dumped))
    for position, dumped in changed:
        backend.set_facts(position, dumped)
    if facts.dump() != row.facts:
        backend.update_head(stream_id, row.head, row.head_hash, facts.dump(), row.first_message_offset, row.last_position,
                            row.last_position)
