"""Restoring exported events into a store, with the same ids, times and hashes.

An export (`threadlog export`) is a format line, the stream rows, then events as
`RecordedEvent.to_json()` gives them. `restore` writes each event through the same write
path as an append, with its own `recorded_at`, and refuses the whole restore unless every
recomputed hash equals the exported one: what is restored is exactly what was exported, and
`verify` holds on it.

Positions are kept when the export's events all come after the target's last position (a
fresh database, for one): then even redactions (an `event.redacted` names the position it
erased) and checkpoints carry over. Into a log that already goes further, events are
renumbered; hashes do not cover positions, so they still match, but an export holding
redactions is refused there. Events already stored (same id, stream, offset and hash) are
skipped, so restoring twice adds nothing; one the export holds redacted is erased here too
(with every copy of its payload, as `Store.redact` does), so a newer backup restored over a
copy of an older one carries its redactions over. A redacted row whose payload was too deep to
read kept no ids in its skeleton: what was pending after it is in its `event.redacted`, later
in the export, so its thread's facts are folded again once every line is written
(`eventstore/refold.py`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from .backend import MAX_INDEXED_POSITION, EventRow
from .errors import IntegrityError, InvalidEvent, OldPagesKept, StoreError, shown
from .forks import chained_to
from .head import Head
from . import integrity
from .integrity import HASH_TAG
from .events import too_deep
from .facts import Facts
from .ids import check_id
from .prepare import PreparedEvent, check_items, not_json, prepare
from .ranges import MAX_INDEX, is_index
from .recorded import ThreadInfo, acyclic, from_row, short
from .refold import refold
from .skeleton import left_by_earlier, may_hide_ids, skeleton_of
from .verify import verify

if TYPE_CHECKING:
    from .store import Store

FORMAT = "threadlog-events"
_BATCH_INDEX = re.compile(r"events\[(\d+)\]")  # how `Store._write` names an event of its batch
VERSION = 2  # version 2 ends with {"end": {"streams": S, "events": E}}; version 1 files, with no end line, still restore

# What `prepare.now()` writes (older releases wrote the same, with fewer fraction digits at most).
_RECORDED_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z")

# The highest position a restore keeps: the last one the search index numbers (it numbers an
# event's documents from its position times `DOC_PARTS`, in 64-bit integers: 2**47 - 1), less
# 2**32 positions for appends after it, which the index numbers too (kept up to the last, the
# next append made a file that verified and could never be searched again). Far past any log's
# end. An export starting past it (an edited file; an older release's restore kept positions up
# to 2**62) is renumbered.
APPENDS_KEPT_ROOM = 2**32
MAX_POSITION = MAX_INDEXED_POSITION - APPENDS_KEPT_ROOM


def _renumbered_past(position: int) -> str:
    """Why an event past `MAX_POSITION` that needs its position kept is refused in any database."""
    return (f"its events are renumbered whatever the database holds (position {position} is past {MAX_POSITION}, the last "
            "a restore keeps): the export was altered, or comes from a file an older release restored past that position")


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "position": int, "stream_id": str, "offset": int, "event_id": str, "type": str, "schema_version": int,
    "data": dict, "meta": dict, "recorded_at": str, "data_digest": str, "hash": str, "redacted": bool,
}


@dataclass
class RestoreReport:
    """What a restore did: streams created, events added and already present, and of those
    present, how many the export holds redacted and this restore erased."""

    streams: int = 0
    added: int = 0
    present: int = 0
    positions_kept: bool = True
    erased: int = 0

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return {"streams": self.streams, "added": self.added, "present": self.present, "positions_kept": self.positions_kept,
                "erased": self.erased}


# The most events one run holds before it is written: an export of one long thread is held a
# batch at a time, not whole (a 186 MB export of one thread peaked at 1.3 GB). A run goes on
# from where the last one left its stream (`head` reads it back).
RUN_EVENTS = 1000


@dataclass
class _Run:
    """Consecutive events of one stream, written as one batch."""

    stream_id: str
    head: Head
    events: list[PreparedEvent] = field(default_factory=list)
    stamps: list[str] = field(default_factory=list)
    lines: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (line number, exported event)
    ids: dict[str, int] = field(default_factory=dict)  # each event id, to the line number holding it
    legacy: list[bool] = field(default_factory=list)  # hashed by the first layout, which covers the position


def _line_field(run: _Run, field: str) -> str:
    """A field the store names by the event's index in the batch (`events[3].data`), which no
    reader of the file can find, named by the line that holds the event instead."""
    index = _BATCH_INDEX.match(field)
    if index is None:
        return field
    return f"line {run.lines[int(index[1])][0]}.event{field[index.end():]}"


class _StreamLine(NamedTuple):
    """What a restore keeps of a stream line until its end: its number, and the fields a
    restore uses (a fork's place) or checks against the row it wrote (the rest). Not the
    line's dict, with key strings of its own: an import of 100,100 streams peaked at 238 MB
    with those, 150 MB with these. The ids are interned, so a fork's parent and root share
    its parent's string."""

    number: int
    parent_id: Any
    parent_offset: Any
    root_id: Any
    depth: Any
    kind: Any

    @classmethod
    def of(cls, number: int, stream: dict[str, Any]) -> _StreamLine:
        get = stream.get
        return cls(number, _interned(get("parent_id")), get("parent_offset"), _interned(get("root_id")), get("depth"),
                   _interned(get("kind")))


def _interned(value: Any) -> Any:
    """Text as one shared `str` (a subclass's, which Python does not intern, as plain text:
    `str.__str__` ignores an override), anything else as it is."""
    return sys.intern(str.__str__(value)) if isinstance(value, str) else value


def _json(where: str, value: Any) -> str:
    """Canonical JSON of what a line holds, refused by line where it is none: NaN (which a JSON
    file may spell, and `json` reads), a key that is not text (lines given parsed), too deep."""
    try:
        return integrity.canonical(value)
    except (ValueError, TypeError) as error:
        raise not_json(value, where, error) from None
    except RecursionError:
        raise too_deep(value, where) from None


class _Restore:
    def __init__(self, store: Store, version: int = VERSION) -> None:
        self.store = store
        self.version = version
        self.counted = {"streams": 0, "events": 0}  # the lines read, for the end line to confirm
        self.ended = False
        self.backend = store.backend
        self.report = RestoreReport()
        self.streams: dict[str, _StreamLine] = {}
        self.keep: bool | None = None  # decided at the first new event
        self.first = 0  # that event's position: a database whose log ends before it keeps positions
        self.reached = 0  # the database's last position then
        self.last_position = 0  # the last new event's
        self.previous = 0  # the last event line's, new or present
        self.run: _Run | None = None
        self.touched: set[str] = set()  # streams this restore wrote events to
        self.held: set[str] = set()  # streams of the events the database held already
        self.skeletons: dict[int, int] = {}  # restored redacted position -> its line
        self.unlinked: dict[int, int] = {}  # restored redacted position -> its line, until its event.redacted comes
        self.erasing: dict[int, tuple[str, str]] = {}  # stored position -> (its skeleton, its stream), until erased
        # The threads whose pending facts are in doubt, and what settles them (`eventstore/refold.py`).
        self.doubt: dict[str, int] = {}  # stream -> the first offset written in doubt
        self.recorded: dict[int, Facts] = {}  # restored redacted position -> the facts its event.redacted recorded
        self.doubted: dict[int, str] = {}  # position written over a contradiction of the facts -> its line's field

    def line(self, number: int, item: Any) -> None:
        if not isinstance(item, dict) or len(item) != 1:
            raise InvalidEvent(f"line {number}", "expected one of {\"stream\": …} or {\"event\": …}")
        if self.ended:
            raise InvalidEvent(f"line {number}", "comes after the end line; an export ends there")
        if "end" in item and self.version >= 2:
            self.end(number, item["end"])
        elif "stream" in item:
            self.counted["streams"] += 1
            stream = item["stream"]
            if not isinstance(stream, dict) or not isinstance(stream.get("id"), str):
                raise InvalidEvent(f"line {number}.stream", "must be an object with an id")
            stream_id = _interned(stream["id"])
            earlier = self.streams.get(stream_id)
            if earlier is not None:  # only the last would be used and compared with the row, the other accepted unread
                raise InvalidEvent(f"line {number}.stream.id", f"{short(stream_id)} has a stream line already (line "
                                   f"{earlier.number}); an export holds one for each stream: the export was altered")
            self.streams[stream_id] = _StreamLine.of(number, stream)
        elif "event" in item:
            self.counted["events"] += 1
            self.event(number, item["event"])
        else:
            raise InvalidEvent(f"line {number}", f"unknown line {next(iter(item))!r}; expected stream or event")

    def end(self, number: int, end: Any) -> None:
        """The end line: it says how many stream and event lines came before it."""
        if not isinstance(end, dict) or set(end) != set(self.counted) or not all(type(v) is int for v in end.values()):
            raise InvalidEvent(f"line {number}.end", "must be {\"streams\": S, \"events\": E}, two numbers")
        for name, count in self.counted.items():
            if end[name] != count:
                raise InvalidEvent(f"line {number}.end.{name}", f"says {end[name]} {name} lines, and {count} came before "
                                   "it: the export was altered (lines removed or added)")
        self.ended = True

    def event(self, number: int, event: Any) -> None:
        where = f"line {number}.event"
        if not isinstance(event, dict):
            raise InvalidEvent(where, "must be an object")
        for name, kind in _FIELDS.items():
            value = event.get(name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise InvalidEvent(f"{where}.{name}", f"missing or not a {getattr(kind, '__name__', kind)}")
        # The hashes prove nothing about a crafted file (anyone can compute them): what an
        # append would refuse, a restore refuses too.
        check_id(f"{where}.stream_id", event["stream_id"])
        check_id(f"{where}.event_id", event["event_id"])
        named = event["meta"].get("event_id", event["event_id"])
        if named != event["event_id"]:  # the meta's would be written, and the line's id looked up
            raise InvalidEvent(f"{where}.meta.event_id", f"{short(named)} is not the event's event_id "
                               f"{event['event_id']!r}: the export was altered")
        if not _RECORDED_AT.fullmatch(event["recorded_at"]):
            raise InvalidEvent(f"{where}.recorded_at", f"{event['recorded_at'][:40]!r} is not a time as threadlog records "
                               "them (2026-01-31T12:00:00.123456Z)")
        if not 1 <= event["position"] <= MAX_INDEX:
            raise InvalidEvent(f"{where}.position", f"{event['position']} is not a position from 1 to {MAX_INDEX}")
        # Every line, an event already stored too, and where positions are renumbered: a line
        # repeated after its run was written was taken for an event present, and two threads'
        # lines swapped were restored in the swapped order.
        if event["position"] <= self.previous:
            raise InvalidEvent(f"{where}.position", f"{event['position']} is not after the previous event line's "
                               f"{self.previous}; an export lists events in commit order, each once: the export was altered")
        self.previous = event["position"]
        stored = self.backend.events_by_id([event["event_id"]])
        if not stored and self.run is not None and event["event_id"] in self.run.ids:  # held, not yet written
            raise InvalidEvent(f"{where}.event_id", f"{event['event_id']!r} is the id of line {self.run.ids[event['event_id']]}'s "
                               "event too; an event id names one event: the export was altered")
        if stored:
            row = stored[0]
            if (row.stream_id, row.offset) == (event["stream_id"], event["offset"]) and row.hash != event["hash"]:
                raise InvalidEvent(f"{where}.hash", f"{short(event['hash'])} is not the hash this database stores for "
                                   f"{event['event_id']!r} at position {row.position}: the export was altered, or it "
                                   "comes from a database that holds another history under the same ids")
            if (row.stream_id, row.offset, row.hash) != (event["stream_id"], event["offset"], event["hash"]):
                raise InvalidEvent(f"{where}.event_id", f"{event['event_id']!r} is already stored at position {row.position} "
                                   "as another event; this export does not belong in this database")
            self.check_present(where, event, row)
            self.held.add(row.stream_id)
            if event["redacted"] and row.redacted_by is None:
                self.erase_stored(where, number, event, row)
            self.report.present += 1
            return
        if self.keep is None:
            # Past the last position kept (an older release's restore kept up to 2^62), renumbered.
            self.reached = self.backend.last_position()
            self.keep = self.reached < event["position"] <= MAX_POSITION
            self.first = event["position"]
            self.report.positions_kept = self.keep
        legacy = not event["hash"].startswith(HASH_TAG)
        if legacy and not self.keep:
            raise InvalidEvent(f"{where}.hash", "was written by the first hash layout, which covers the position: " + (
                _renumbered_past(event["position"]) if event["position"] > MAX_POSITION else self.kept_where()))
        if self.keep and event["position"] > MAX_POSITION:
            raise InvalidEvent(f"{where}.position", f"{event['position']} is past {MAX_POSITION}, the last position a "
                               "restore keeps (so that appends after it are searchable too), where the export's first event "
                               "was kept below it: restore it into a database whose log ends after its first position, "
                               "where events are renumbered")
        if not self.keep and (event["redacted"] or event["type"] == "event.redacted"):
            if event["position"] > MAX_POSITION:
                raise InvalidEvent(where, "holds a redaction, which names positions: " + _renumbered_past(event["position"]))
            raise InvalidEvent(where, "holds a redaction, which names positions: " + self.kept_where())
        prepared = self.prepare(where, event)
        # A skeleton that may have lost the ids of what it opened starts a run of its own: the
        # facts are in doubt from it on, and only there (`eventstore/refold.py`).
        doubting = event["redacted"] and event["stream_id"] not in self.doubt and may_hide_ids(event["type"], prepared.data_json)
        run = self.run
        if run is None or run.stream_id != event["stream_id"] or len(run.events) == RUN_EVENTS or doubting or (
            self.keep and event["position"] != self.last_position + 1
        ):
            self.flush()
            run = self.run = _Run(event["stream_id"], self.head(where, event))
            if doubting:
                self.doubt[_interned(event["stream_id"])] = event["offset"]
        elif event["offset"] != run.head.offset + len(run.events):
            # Only a run's first offset reaches the store; the rest would be taken as given.
            raise InvalidEvent(f"{where}.offset", f"{event['offset']} follows offset {run.head.offset + len(run.events) - 1} "
                               f"of {event['stream_id']!r}: the export misses events or was altered")
        run.events.append(prepared)
        run.stamps.append(event["recorded_at"])
        run.legacy.append(legacy)
        run.lines.append((number, event))
        run.ids[event["event_id"]] = number
        self.last_position = event["position"]

    def kept_where(self) -> str:
        """Where an export whose positions must be kept can be restored, said of this database:
        its log already reaches past the export's first new event (a database holding part of
        the same history, restored from an earlier export, reaches past it too)."""
        where = ("a new, empty one" if self.first <= 1 else
                 f"one whose log ends before position {self.first}, a new one for example")
        return (f"this database's log already reaches position {self.reached}, at or past the export's first new event "
                f"(position {self.first}), so positions would be renumbered here; restore it into {where}, where they are kept")

    def prepare(self, where: str, event: dict[str, Any]) -> PreparedEvent:
        if event["redacted"]:
            # What a redaction left is no valid event (the payload is gone), so only its meta is
            # validated; its digest is the original payload's, and the hash check below binds it.
            stub = self.stub(where, event)
            skeleton = event["data"]
            return stub._replace(type=event["type"], schema_version=event["schema_version"], data=skeleton,
                                 data_json=_json(f"{where}.data", skeleton), data_digest=event["data_digest"])
        prepared = prepare({"type": event["type"], "data": event["data"], "meta": event["meta"]}, where, event["event_id"],
                           restoring=True)
        if event["schema_version"] != prepared.schema_version:
            raise InvalidEvent(f"{where}.schema_version", f"{event['schema_version']} is not the current version "
                               f"{prepared.schema_version} of {event['type']}")
        if prepared.data_digest != event["data_digest"]:
            raise InvalidEvent(f"{where}.data", "does not match its data_digest: the export was altered")
        return prepared

    def stub(self, where: str, event: dict[str, Any]) -> PreparedEvent:
        """An event of no payload with the line's meta, validated as a restore stores it."""
        return prepare({"type": "thread.created", "data": {}, "meta": event["meta"]}, where, event["event_id"], restoring=True)

    def head(self, where: str, event: dict[str, Any]) -> Head:
        """Where `event`, the first of a run, goes: the end of its stream, or a new stream."""
        stream_id, offset = event["stream_id"], event["offset"]
        row = self.backend.stream(stream_id)
        if row is not None:
            if row.head != offset:
                raise InvalidEvent(f"{where}.offset", f"{stream_id!r} holds {row.head} events here, so the next is "
                                   f"offset {row.head}, not {offset}: the export misses events or belongs elsewhere")
            return Head.of(row)
        declared = self.streams.get(stream_id)
        if declared is None:
            raise InvalidEvent(f"{where}.stream_id", f"stream {stream_id!r} has no stream line before its events")
        parent_id = declared.parent_id
        if parent_id is None:
            if offset != 0:
                raise InvalidEvent(f"{where}.offset", f"thread {stream_id!r} starts at offset 0, not {offset}")
            self.report.streams += 1
            return Head.new_thread()
        at = declared.parent_offset
        # Only the streams holding the parent's event before the fork point, as `Store.fork` reads
        # them: for a fork at the parent's head (each link of a chain of forks), the parent's row
        # alone, which holds its head's hash and facts. Its whole ancestry would make a chain of
        # forks quadratic in its depth to restore.
        start = at - 1 if isinstance(at, int) and 1 <= at <= MAX_INDEX else MAX_INDEX
        rows = acyclic(self.backend.ancestry(parent_id, start)) if isinstance(parent_id, str) else []
        if not rows or not isinstance(at, int) or not 1 <= at <= rows[0].head or offset != at:
            raise InvalidEvent(f"{where}.stream_id", f"fork {stream_id!r} needs its parent {parent_id!r} with at least "
                               f"{at} events restored before it, and starts at that offset")
        ancestry = [ThreadInfo.from_row(r) for r in rows]
        prev, facts = chained_to(self.store, rows, ancestry, at)
        first = rows[0].first_message_offset
        if any(r.id in self.doubt for r in rows):  # its facts come from facts in doubt
            self.doubt[_interned(stream_id)] = at
        self.report.streams += 1
        return Head.fork(ancestry[0], at, prev, facts, first if first is not None and first < at else None)

    def check_stream_lines(self) -> None:
        """Each stream line this restore wrote events under says what its row now says: only
        its id and fork point were used to write it, so the rest would be taken as given. So
        does the line of a stream whose events the database held already: one saying another
        fork point was accepted, and the tampered file reported as restored."""
        for stream_id in sorted(self.touched | self.held):
            declared = self.streams.get(stream_id)
            if declared is None:
                continue  # the stream was in the database already, and no line declares it
            info = self.store.thread(stream_id)
            for name in ("parent_id", "parent_offset", "root_id", "depth", "kind"):
                said, value = getattr(declared, name), getattr(info, name)
                if type(said) is not type(value) or said != value:
                    raise InvalidEvent(f"line {declared.number}.stream.{name}", f"is {short(said)}, but the database holds the stream "
                                       f"with {value!r}: the export was altered")

    def flush(self) -> None:
        run, self.run = self.run, None
        if run is None:
            return
        position = run.lines[0][1]["position"] if self.keep else None
        doubted: dict[int, InvalidEvent] | None = {} if run.stream_id in self.doubt else None
        try:
            recorded = self.store._write(run.stream_id, run.head, run.events, position, run.stamps,
                                         run.legacy if any(run.legacy) else None, doubted)
        except InvalidEvent as error:
            where = _line_field(run, error.field)
            if where == error.field:
                raise
            raise InvalidEvent(where, error.why) from None
        self.touched.add(_interned(run.stream_id))
        for index, contradiction in (doubted or {}).items():
            self.doubted[recorded[index].position] = _line_field(run, contradiction.field)
        for (number, event), written in zip(run.lines, recorded):
            if written.hash != event["hash"]:
                raise InvalidEvent(f"line {number}.event.hash", f"restored as {written.hash}, exported as {event['hash']}: "
                                   "the export was altered, or its history differs from this database's")
            if event["redacted"]:
                self.unlinked[written.position] = self.skeletons[written.position] = number
            if event["type"] == "event.redacted":
                self.link(number, written.position, written.stream_id, event["data"]["position"])
                pending = event["data"].get("pending")
                if isinstance(pending, dict):  # as verify reads it (`chaincheck._check_redaction`)
                    self.recorded[event["data"]["position"]] = Facts.load(integrity.canonical(pending))
        self.report.added += len(recorded)

    def check_present(self, where: str, event: dict[str, Any], row: EventRow) -> None:
        """Refuse a line whose event this database holds (the same id, place and hash) when the
        line says other than the stored event: its hash was kept while what it covers was
        changed, which a restore into another database refuses by recomputing the hash."""
        stored = from_row(row)
        meta_json, stored_meta = _json(f"{where}.meta", event["meta"]), integrity.canonical(stored.meta)
        if meta_json != stored_meta:  # as a restore elsewhere stores it (a null actor is dropped)
            meta_json = self.stub(where, event).meta_json
        said = (event["type"], event["schema_version"], meta_json, event["recorded_at"])
        if said != (stored.type, stored.schema_version, stored_meta, stored.recorded_at):
            raise InvalidEvent(where, f"says other than the event this database stores as {event['event_id']!r} at position "
                               f"{row.position} (its type, schema version, meta or time), under the same hash: the export was altered")
        if not event["redacted"]:  # the payload itself (validated when stored); the stored one may be redacted since
            try:
                same = integrity.digest(integrity.canonical(event["data"])) == stored.data_digest
            except (ValueError, TypeError, RecursionError):
                same = False
        else:  # a skeleton: the stored one's, or the one `erase_stored` checks a redaction leaves
            same = not stored.redacted or _json(f"{where}.data", event["data"]) == integrity.canonical(stored.data)
        if not same or event["data_digest"] != stored.data_digest:
            raise InvalidEvent(f"{where}.data", f"is not the payload this database stores as {event['event_id']!r} at "
                               f"position {row.position}, under the same hash: the export was altered")

    def erase_stored(self, where: str, number: int, event: dict[str, Any], row: EventRow) -> None:
        """An event this database holds, which the export holds redacted: a copy restored from
        a backup made before the redaction. Its `event.redacted`, later in the export and in
        the event's own thread, erases it here too (`link`). The skeleton must be the one a
        redaction of the stored payload leaves (`skeleton_of`): any other would rewrite it."""
        if event["position"] != row.position:
            raise InvalidEvent(f"{where}.position", f"the export holds this event redacted at position {event['position']}, "
                               f"and this database stores it at position {row.position}: a redaction names positions, so "
                               "it can only be carried over where they were kept")
        skeleton, _ = skeleton_of(row.type, row.data)
        held = _json(f"{where}.data", event["data"])
        if held != skeleton and left_by_earlier(row.type, held):
            skeleton = held  # as the redaction was made, by an earlier release
        if held != skeleton:
            raise InvalidEvent(f"{where}.data", "is not what a redaction of the event this database stores leaves of it: "
                               "the export was altered")
        self.erasing[row.position] = (skeleton, row.stream_id)
        self.unlinked[row.position] = self.skeletons[row.position] = number
        self.touched.add(row.stream_id)

    def link(self, number: int, redaction: int, stream_id: str, target: int) -> None:
        """Point the restored row at `target` to the `event.redacted` just restored at `redaction`,
        in `stream_id`."""
        if self.unlinked.pop(target, None) is not None:
            erasing = self.erasing.pop(target, None)
            if erasing is not None:  # stored before: its payload goes, and every copy of it
                skeleton, erased_stream = erasing
                if stream_id != erased_stream:
                    raise InvalidEvent(f"line {number}.event.stream_id", f"the redaction of position {target} is recorded in "
                                       f"{stream_id!r}, not in the event's own thread {erased_stream!r}: the export was altered")
                self.backend.redact(target, skeleton, redaction)
                self.backend.unindex(target)
                self.report.erased += 1
                return
            row = self.backend.event_at_position(target)
            assert row is not None
            self.backend.redact(target, row.data, redaction)
            return
        row = self.backend.event_at_position(target)
        if row is None or row.redacted_by is None:
            raise InvalidEvent(f"line {number}.event.data.position", f"the redaction names position {target}, "
                               "which this restore did not write as redacted")

    def finish(self, last: int) -> RestoreReport:
        if self.version >= 2 and not self.ended:
            raise InvalidEvent(f"line {last}", f"the export stops here, before its end line: it was cut short "
                               f"({self.counted['events']} event lines read); nothing was restored")
        self.flush()
        self.check_stream_lines()
        if self.unlinked:
            position, number = next(iter(self.unlinked.items()))
            raise InvalidEvent(f"line {number}.event", f"position {position} is redacted by an event.redacted outside "
                               "this export (a later part of a parent's history); export the whole file (--all) instead")
        if self.recorded or self.doubted:
            refold(self.store, self.doubt, self.recorded, self.doubted)
        # What the hashes do not cover (a redaction's skeleton, the rows' derived columns) is
        # checked as verify checks it, on the streams this restore wrote to.
        try:
            verify(self.backend, only=self.touched)
        except IntegrityError as error:
            if error.position is None:  # the database itself (a planted trigger), not the export
                raise StoreError(f"not restored: {error.why}") from None
            line = self.skeletons.get(error.position)
            where = f"line {line}.event.data" if line else f"the event restored at position {error.position}"
            raise InvalidEvent(where, f"{error.why}: the export was altered") from None
        if self.report.erased:
            self.backend.drop_snapshots()  # a cached state may hold an erased payload
        return self.report


def restore(store: Store, lines: Iterable[tuple[int, Any]]) -> RestoreReport:
    """Restore an export's lines, given as (line number, parsed JSON), in one transaction."""
    return restore_many(store, [("", lines)])[0]


def _exports(exports: Any) -> Iterator[tuple[str, Any]]:
    """`exports`, each refused unless it is a (name, lines) pair."""
    check_items("exports", exports, "a list of (name, lines) pairs")
    for index, export in enumerate(exports):
        if not isinstance(export, (tuple, list)) or len(export) != 2:
            raise InvalidEvent(f"exports[{index}]", f"must be a (name, lines) pair, not {shown(export)}")
        name, lines = export
        if not isinstance(name, str):
            raise InvalidEvent(f"exports[{index}]", f"its name must be text (a file name, or \"\" for none), not "
                                                    f"{type(name).__name__}")
        yield name, lines


def _numbered(lines: Any) -> Iterator[tuple[int, Any]]:
    """`lines`, each refused unless it is a (line number, parsed JSON) pair: one line given
    as the text read from a file is refused as such (it was taken for a line of no known kind)."""
    check_items("lines", lines, "an export's lines, as (line number, parsed JSON line) pairs")
    for index, line in enumerate(lines):
        if not isinstance(line, (tuple, list)) or len(line) != 2:
            raise InvalidEvent(f"lines[{index}]", f"must be a (line number, parsed JSON line) pair, not {shown(line)}")
        number, item = line
        if not is_index(number):
            raise InvalidEvent(f"lines[{index}]", f"its line number must be an integer >= 0, not {shown(number)}")
        if isinstance(item, (str, bytes, bytearray)):
            raise InvalidEvent(f"line {number}", f"is {type(item).__name__}, not a JSON object: restore takes each line "
                                                 "parsed (json.loads(line)), and every line of an export is an object")
        yield number, item


def restore_many(store: Store, exports: Iterable[tuple[str, Iterable[tuple[int, Any]]]]) -> list[RestoreReport]:
    """Restore exports given as (name, lines), in order, in one transaction: every one, or on
    any refusal none (a later export may continue what an earlier one restored). A refusal's
    field starts with the name of the export it is in, when it has one."""
    erased = 0
    with store.backend.transaction():
        reports = []
        for name, lines in _exports(exports):
            try:
                job = _restore(store, lines)
            except InvalidEvent as error:
                if not name:
                    raise
                raise InvalidEvent(f"{name}: {error.field}", error.why) from None
            reports.append(job.report)
            erased += job.report.erased
    if erased:  # as `Store.redact`: no old copy of an erased payload stays in the files
        try:
            store.purge()
        except StoreError as error:
            raise OldPagesKept(f"restored, and {erased} stored payload(s) the export holds redacted were erased (committed), "
                               f"but erasing their old copies did not finish ({error}); run `threadlog purge` once the "
                               "readers are done") from None
    return reports


def _restore(store: Store, lines: Iterable[tuple[int, Any]]) -> _Restore:
    it = _numbered(lines)
    first = next(it, None)
    if first is None:
        raise InvalidEvent("line 1", "the export is empty")
    number, header = first
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InvalidEvent(f"line {number}", f"not a threadlog export (expected {{\"format\": \"{FORMAT}\", …}} first)")
    if type(header.get("version")) is not int or not 1 <= header["version"] <= VERSION:
        raise InvalidEvent(f"line {number}.version", f"{header.get('version')!r}; this release restores versions 1 to {VERSION}")
    job = _Restore(store, header["version"])
    for number, item in it:
        job.line(number, item)
    job.finish(number)
    return job
