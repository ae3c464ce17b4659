"""Export: a thread (or the whole file) as JSON lines of events, or as a full Markdown transcript.

The events format, one JSON object per line:

    {"format": "threadlog-events", "version": 2}
    {"stream": {"id", "parent_id", "parent_offset", "root_id", "depth", "kind"}}   one per stream, parents first
    {"event": RecordedEvent.to_json()}   position, stream_id, offset, event_id, type, schema_version,
                                         data, meta, recorded_at, data_digest, hash, redacted
    {"end": {"streams": S, "events": E}}   last: how many stream and event lines came before it

Every stream line precedes the events of that stream, and events come in position
(commit) order, so a restore can rebuild each stream row and re-insert each event with
its stored hash, then `verify`. The end line makes a file cut short at a line's end (a copy
or a download that stopped) a refused restore, not a smaller history; version 1 files, which
have none, still restore. A thread's export holds its own events and, for each
ancestor, the events below its child's fork point: those the thread's history reads, and,
where a fork was taken at or below its parent's own fork point, the parent's first event and
the history that chains to (so every stream the file names restores); `export_all` holds
every stream and every event.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from eventstore import Store, StoreError, ThreadInfo
from eventstore.errors import named
from eventstore.integrity import counted
from eventstore import restore
from eventstore.recorded import parent_gone

from projections import transcript

FORMAT = {"format": restore.FORMAT, "version": restore.VERSION}  # the header a restore reads, its newest version


def _stream(info: ThreadInfo) -> dict[str, Any]:
    return {"stream": {"id": info.id, "parent_id": info.parent_id, "parent_offset": info.parent_offset,
                       "root_id": info.root_id, "depth": info.depth, "kind": info.kind}}


def export_events(store: Store, thread: str) -> Iterator[dict[str, Any]]:
    """The thread's logical history and its ancestors' stream rows, as export lines (dicts),
    read as of one moment (`Store.consistent`)."""
    with store.consistent():
        ancestry = store.ancestry(thread)
        yield dict(FORMAT)
        for info in reversed(ancestry):
            yield _stream(info)
        events = 0
        erased: dict[int, str] = {}  # a redacted event's position -> its stream
        recorded: set[int] = set()  # the positions the export's event.redacted records name
        for info, hi in reversed(_restorable(ancestry)):
            for event in store.read(info.id, start=info.base, stop=hi):
                if event.stream_id == info.id:
                    events += 1
                    if event.redacted:
                        erased[event.position] = info.id
                    if event.type == "event.redacted":
                        recorded.add(event.data["position"])
                    yield {"event": event.to_json()}
        # Checked before the end line, so a file written with it is one a restore takes: an
        # ancestor's redaction recorded past its child's fork point is not in a thread's export,
        # and the restore refused the file (a backup that looked whole).
        unrecorded = sorted(set(erased) - recorded)
        if unrecorded:
            position = unrecorded[0]
            raise StoreError(f"thread {thread!r} cannot be exported alone: position {position}, in the history it shares "
                             f"with {erased[position]!r}, is redacted, and that redaction is recorded in {erased[position]!r} "
                             "past the fork point, where this export does not reach (a restore would refuse the file); "
                             "export the whole file instead (export --all)")
        yield _end(len(ancestry), events)


def _restorable(ancestry: list[ThreadInfo]) -> list[tuple[ThreadInfo, int | None]]:
    """Each stream of `ancestry` (the thread first) with the end of its own offsets the export
    holds (from its fork point): the thread's all; an ancestor's those below its child's fork
    point, and at least its first event. The history reads no more (`segments`), but a fork
    taken at or below its parent's own fork point reads none of the parent's events, and a
    restore makes the parent's row from its first event, which chains to the history it forked
    from: without them, the file named a parent it could not restore."""
    out: list[tuple[ThreadInfo, int | None]] = []
    child: ThreadInfo | None = None
    for info in ancestry:
        out.append((info, None if child is None else max(child.base, info.base + 1)))
        child = info
    return out


def export_all(store: Store, progress: Callable[[int, int], None] | None = None) -> Iterator[dict[str, Any]]:
    """Every stream, then every event in position order: a backup of the whole log, as of one
    moment. (Read in two passes outside one transaction, a stream created between them by
    another process had its events in the backup but no stream line, and the backup could
    not be restored.) `progress(done, total)` is told the stream and event lines written so
    far, as `Store.checkpoint` tells its own: a backup of millions of events takes a minute or
    more, and its stream lines come first (at 200,000 threads, seconds that showed as 0%)."""
    with store.consistent():
        yield dict(FORMAT)
        streams = events = total = 0
        infos = store.each_thread()  # as read: a list of every stream was held through the whole backup
        if progress is not None:
            held = store.counts()
            total = held.threads + held.events
            infos = counted(infos, progress, total)
        for info in infos:
            streams += 1
            yield _stream(info)
        rows = store.read_all(whole=True)  # every event of the view its stream lines come from
        if progress is not None:
            rows = counted(rows, lambda done, _: progress(streams + done, total), total)
        for event in rows:
            events += 1
            yield {"event": event.to_json()}
        yield _end(streams, events)


def check_restorable(store: Store) -> None:
    """Refuse (once `export_all` is written: it holds every thread and event there is, which
    is what a backup of a damaged file can keep) a file holding a fork whose parent's row is
    gone, or threads whose parents make a cycle (only raw SQL writes either): a restore refuses
    the export, which said nothing of it. Names the oldest such fork in the words its reads are
    refused with, and a thread on the first cycle."""
    strays = store.strays()
    why = []
    if strays.first_orphan is not None:
        others = "" if strays.orphans == 1 else f" ({strays.orphans} forks name a parent not in the file)"
        why.append(f"{parent_gone([strays.first_orphan])}{others}")
    if strays.first_cycle is not None:
        threads = "1 thread" if strays.unplaced == 1 else f"{strays.unplaced:,} threads"
        why.append(f"the parents of thread {named(strays.first_cycle)} make a cycle of forks, which leaves {threads} in no "
                   "tree: their rows were altered outside threadlog; `threadlog verify` names where")
    if why:
        raise StoreError(f"the export is written, but a restore refuses it: {'; and '.join(why)}")


def _end(streams: int, events: int) -> dict[str, Any]:
    return {"end": {"streams": streams, "events": events}}


def dump_lines(lines: Iterator[dict[str, Any]]) -> Iterator[str]:
    """Export lines as text, one JSON document per line."""
    for line in lines:
        yield json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"


def export_markdown(store: Store, thread: str) -> str:
    """The full transcript: every message, none elided, none shortened."""
    unbounded = 1 << 62
    return transcript(store, thread, max_bytes=unbounded, max_message_bytes=unbounded)
