"""What `ThreadlogSaver` knows of a line (a LangGraph thread and namespace): its streams,
checkpoint records, pending writes, deletions and copies, read from the log as it grows
(`Line.refresh`), and a checkpoint's header and values resolved through its parents.

Events are immutable except for redaction, so the index only ever reads what is new,
unless an `event.redacted` shows up: then it is built again from the log.
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from datetime import datetime, timedelta, timezone
from dataclasses import dataclass, field
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from langgraph.checkpoint.serde.base import SerializerProtocol

from eventstore import RecordedEvent, Store, StoreError
from eventstore.prepare import check_encodable

from .langgraph_values import Json, decode, is_messages, same

PREFIX = "lg-"

_MISSING = object()


def line_id(thread_id: str, ns: str) -> str:
    """The root stream id of a LangGraph thread and namespace: `lg-` and 10 hex digits of the
    thread id's SHA-256, then `-` and 8 of the namespace's unless it is the default one ("").
    The id is in every event's row and two indexes, so it is short; ids that collide are told
    apart by the thread and namespace the root's first event names (see `ThreadlogSaver._key`)."""
    return thread_prefix(thread_id) + (f"-{_digits(ns, 8, 'checkpoint_ns')}" if ns else "")


def legacy_line_id(thread_id: str, ns: str) -> str:
    """The root stream id an older release gave a thread and namespace (16 + 8 hex digits)."""
    return f"{PREFIX}{_digits(str(thread_id), 16, 'thread_id')}-{_digits(ns, 8, 'checkpoint_ns')}"


def thread_prefix(thread_id: str) -> str:
    """What the root id of every namespace of a thread starts with, in either layout."""
    return f"{PREFIX}{_digits(str(thread_id), 10, 'thread_id')}"


def _digits(text: str, count: int, field: str) -> str:
    """The first `count` hex digits of `text`'s SHA-256; a text UTF-8 cannot encode is refused
    naming `field` (LangGraph's argument it came from)."""
    try:
        data = text.encode()
    except UnicodeEncodeError:
        check_encodable(field, text)
        raise
    return hashlib.sha256(data).hexdigest()[:count]


class Record(NamedTuple):
    """A `langgraph.checkpoint` event as a line reads it."""

    position: int
    stream: str  # the line's stream it was read through (where a branch from it forks)
    physical: str  # the stream that holds the event
    offset: int
    data: Json


class Write(NamedTuple):
    task_id: str
    channel: str
    value: Json
    task_path: str
    idx: int
    position: int = 0  # of its `langgraph.writes` event


@dataclass
class Stream:
    id: str
    parent_id: str | None
    parent_offset: int
    head: int
    read_to: int
    checkpoints: list[tuple[int, str, bool]] = field(default_factory=list)  # (offset, id, restated)
    stop: int | None = None  # a stream another line's copy reads: only its events below this offset

    @property
    def own(self) -> bool:
        return self.stop is None


@dataclass
class Line:
    """Everything known about one LangGraph thread and namespace."""

    key: str
    thread_id: str
    ns: str
    streams: dict[str, Stream] = field(default_factory=dict)
    records: dict[str, Record] = field(default_factory=dict)
    positions: dict[str, list[tuple[int, str, int]]] = field(default_factory=dict)  # id -> (position, physical, offset)
    writes: dict[str, dict[tuple[str, int], Write]] = field(default_factory=dict)
    write_events: dict[str, list[tuple[int, str, int]]] = field(default_factory=dict)
    message_events: dict[str, list[tuple[int, str, int, str | None]]] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    copied: dict[str, int] = field(default_factory=dict)  # another line's stream -> the offset this copy reads below
    seen: set[int] = field(default_factory=set)
    last_in: dict[str, str | None] = field(default_factory=dict)  # physical stream -> its last checkpoint event's id
    mark: int = -1  # the log's last position read; -1: read every stream (again) on the next refresh
    memo: dict[tuple[int, str], Any] = field(default_factory=dict)
    stranded_memo: dict[str, bool] = field(default_factory=dict)
    deleted_at: dict[str, int] = field(default_factory=dict)  # a deleted checkpoint's id -> the deletion's position
    deleted_where: dict[str, tuple[str, int]] = field(default_factory=dict)  # -> (stream, offset) of its event, if recorded
    erased: set[int] = field(default_factory=set)  # positions known to be redacted (erased here, or read so)
    blanked: list[tuple[int, str, int]] = field(default_factory=list)  # redacted checkpoint and writes events read

    def events_of(self, cid: str) -> Iterator[tuple[tuple[int, str, int], str | None]]:
        """A checkpoint's indexed events, their writes' and the messages appended with it, each
        as ((position, physical stream, offset), the message's LangChain id or None)."""
        for where in (*self.positions.get(cid, ()), *self.write_events.get(cid, ())):
            yield where, None
        for position, physical, offset, message in self.message_events.get("@" + cid, ()):
            yield (position, physical, offset), message

    def where_deleted(self, cid: str) -> tuple[str, int] | None:
        """Where a deleted checkpoint's event is (the line's stream it was read through, and its
        offset): as its deletion recorded it, else as indexed before it was erased, else None
        (a deletion written before deletions recorded it, read after its event was erased, or
        one naming a place that is not in this line's history)."""
        record = self.records.get(cid)
        where = self.deleted_where.get(cid) or (None if record is None else (record.stream, record.offset))
        if where is None or where[0] not in self.streams or not 0 <= where[1] < self.streams[where[0]].head:
            return None
        return where

    def live(self) -> list[str]:
        return [cid for cid in self.records if cid not in self.deleted and not self.stranded(cid)]

    def stranded(self, cid: str) -> bool:
        """A checkpoint appended after its parent was deleted, by a writer in another process
        that had not yet seen the deletion, and stored as resting on that parent (or on one so
        stranded): unreadable, as the parent's payloads are being erased, until that writer
        restates it whole, as it does before its `put` returns. (One appended before the
        deletion is restated by the deleter before it erases anything.) Memoized until a
        checkpoint is restated or one is deleted. One that follows the event before it in its
        stream, once that event is erased, rests on a parent no longer known by id: it is
        stranded too (the deleter restated those that came before its deletion)."""
        if not self.deleted:
            return False
        path: list[str] = []
        answer = False
        current: str | None = cid
        while current is not None and current in self.records:
            known = self.stranded_memo.get(current)
            if known is not None:
                answer = known
                break
            path.append(current)
            record = self.records[current]
            if _whole(record.data):
                break
            current = record.data.get("parent_id")
            if current is None:  # it follows an erased event
                answer = True
                break
            if current in self.deleted:
                answer = record.position > self.deleted_at.get(current, 0)
                break
        for item in reversed(path):  # the top of the path answers for itself; those below it rest on it
            self.stranded_memo[item] = answer
        return answer

    def refresh(self, store: Store) -> None:
        """Read what the log gained since the last call (one query when nothing did): only the
        streams appended to since (a line with many branches costs a step no more than one).

        The queries read the log as of one moment (`Store.consistent`). Read one after the
        other, another process's deletion could come between them: its erasures were read
        (in place, in events below the heads asked for) without the `langgraph.deleted` and
        the restatements it appended first (above them), and a remaining checkpoint rested
        on a parent the index no longer held."""
        with store.consistent():
            self._refresh(store)

    def _refresh(self, store: Store) -> None:
        last = store.last_position()
        if self.mark == last:
            return
        infos = sorted((info for info in store.threads_starting(self.key, after=max(self.mark, 0))
                        if info.id == self.key or info.id.startswith(self.key + ".")), key=lambda info: info.created_position)
        redacted = False
        for info in infos:
            stream = self.streams.get(info.id)
            if stream is None:
                inside = info.parent_id in self.streams
                base = info.parent_offset or 0
                stream = self.streams[info.id] = Stream(info.id, info.parent_id, base, info.head, base if inside else 0)
            stream.head = info.head
            if stream.read_to < info.head:
                for event in store.read(info.id, stream.read_to, info.head):
                    redacted |= self._take(stream, event)
                stream.read_to = info.head
        for sid, stop in self.copied.items():  # a copy's other branches: read in the source, up to the copy
            if sid not in self.streams:
                stream = self.streams[sid] = Stream(sid, None, 0, stop, 0, stop=stop)
                for event in store.read(sid, 0, stop):
                    redacted |= self._take(stream, event)
                stream.read_to = stop
        self.mark = last
        if redacted:  # a payload was erased since the index was built: build it again
            self.__dict__.update(Line(self.key, self.thread_id, self.ns).__dict__)
            self._refresh(store)

    def _take(self, stream: Stream, event: RecordedEvent) -> bool:
        """Index one event read through `stream`; True for an `event.redacted` (rebuild)."""
        if event.position in self.seen:
            return False
        self.seen.add(event.position)
        data = event.data
        where = (event.position, event.stream_id, event.offset)
        if event.type == "event.redacted":
            # Rebuild for an event this index read with its payload and did not erase itself (its
            # own erasures are in `erased`), however the log was read (a read from the start, as
            # after a refused append, too): otherwise it kept serving what the log erased.
            target = data.get("position")
            return target in self.seen and target not in self.erased
        if event.redacted:
            self.erased.add(event.position)
            if event.type == "langgraph.checkpoint":
                self.last_in[event.stream_id] = None  # erased: nothing after it may follow it
            if event.type in ("langgraph.checkpoint", "langgraph.writes"):
                self.blanked.append(where)
            return False
        if event.type == "thread.forked" and event.stream_id == self.key:
            metadata = (data.get("options") or {}).get("metadata")  # a copy's; a fork made by other means holds its mode
            copied = metadata.get("langgraph", {}).get("copied", {}) if isinstance(metadata, dict) else {}
            self.copied.update(copied)
        elif event.type == "message.appended":
            self.message_events.setdefault(stream.id, []).append((*where, data.get("message_id")))
        elif event.type == "langgraph.checkpoint":
            cid = data["checkpoint_id"]
            if cid in self.records:  # a restatement: what rests on it may read again
                self.stranded_memo.clear()
            if data.get("follows"):  # its parent is the checkpoint of the event before it in this stream
                data = {**data, "parent_id": self.last_in.get(event.stream_id)}
            self.last_in[event.stream_id] = cid
            taken = self.records.get(cid)
            # The later event of a checkpoint is its restatement. Streams are read one after the
            # other, so a restatement on the line's root is read before the branch event it
            # restates: that older event must not replace it (it may rest on erased payloads).
            if taken is None or taken.position < event.position:
                self.records[cid] = Record(event.position, stream.id, event.stream_id, event.offset, data)
            self.positions.setdefault(cid, []).append(where)
            stream.checkpoints.append((event.offset, cid, bool(data.get("restated"))))
            pending = self.message_events.pop(stream.id, [])
            self.message_events.setdefault("@" + cid, []).extend(pending)
        elif event.type == "langgraph.writes":
            cid = data.get("checkpoint_id") or self.last_in.get(event.stream_id)
            if cid is None:
                return False  # the checkpoint of the event before it was erased: these writes were too
            self.write_events.setdefault(cid, []).append(where)
            known = self.writes.setdefault(cid, {})
            for item in data["writes"]:
                key = (data["task_id"], item["idx"])
                if item["idx"] >= 0 and key in known:
                    continue
                value = item["value"]
                if "input" in value:  # one key of the checkpoint's input (its `__start__` value)
                    value = _input_part(self.records[cid], value["input"])
                known[key] = Write(data["task_id"], item["channel"], value, data.get("task_path", ""), item["idx"],
                                   event.position)
        elif event.type == "langgraph.deleted":
            self.stranded_memo.clear()
            self.deleted.update(data["checkpoint_ids"])
            for deleted in data["checkpoint_ids"]:
                self.deleted_at.setdefault(deleted, event.position)
            for deleted, (sid, offset) in (data.get("at") or {}).items():
                self.deleted_where.setdefault(deleted, (sid, offset))
        return False

    # -- reading values ---------------------------------------------------------------------

    def value(self, record: Record, channel: str, version: Any, serde: SerializerProtocol,
              avoid: set[int] | None = None) -> Any:
        """The value `channel` had at `version`, found on `record` or its nearest parent that
        stored that version. Raises LookupError when no record holds it.

        A value stored as what was appended (`after`) rests on its parent's, which may rest on
        its own: the chain is walked down in a loop to a value stored whole (or already read),
        then built back up (read recursively, a thread of ~300 chat turns overflowed Python's
        stack in any saver that had not read it step by step, as a new process)."""
        if avoid is None and (record.position, channel) in self.memo:
            return self.memo[(record.position, channel)]
        steps: list[tuple[Record, Record, list[Any]]] = []  # (record asked, record holding it, the messages it appended)
        asked, wanted = record, version
        while True:
            holder, stored = self._holding(asked, channel, wanted, avoid)
            key = (holder.position, channel)
            if key in self.memo and avoid is None:
                value = self.memo[key]
                break
            if "w" in stored:  # the parent's write (for an `after` record: the messages appended)
                stored = {**self.parent_write(holder, channel, stored["w"], avoid),
                          **({"after": stored["after"]} if "after" in stored else {})}
            decoded = decode(stored, serde)
            if "after" not in stored:
                value = self.memo[key] = decoded
                break
            parent = self.records.get(holder.data.get("parent_id") or "")
            if parent is None:
                raise LookupError(channel)
            steps.append((asked, holder, decoded))
            asked, wanted = parent, stored["after"]
        if avoid is None:
            self.memo[(asked.position, channel)] = value
        for asked, holder, appended in reversed(steps):
            value = self.memo[(holder.position, channel)] = [*value, *appended]
            if avoid is None:
                self.memo[(asked.position, channel)] = value
        return value

    def _holding(self, record: Record, channel: str, version: Any, avoid: set[int] | None) -> tuple[Record, Json]:
        """(the record, `record` or its nearest parent, that stored `channel` at `version`, what
        it stored); LookupError when none did."""
        if channel in record.data.get("absent", ()):
            raise LookupError(channel)
        seen: set[str] = set()
        current: Record | None = record
        while current is not None:
            if avoid is not None and current.position in avoid:
                raise Broken(channel)
            stored = current.data.get("values", {}).get(channel)
            if stored is not None and stored["v"] == version:
                return current, stored
            cid = current.data["checkpoint_id"]
            seen.add(cid)
            parent = current.data.get("parent_id")
            current = self.records.get(parent) if parent is not None and parent not in seen else None
        raise LookupError(channel)

    def parent_write(self, record: Record, channel: str, index: int, avoid: set[int] | None = None) -> Json:
        """The stored value of the `index`-th write (in log order) to `channel` against the
        record's parent: a value stored as `{"w": index}` is the one that write gave it. The
        writer stores `w` only when that write is the parent's only one to the channel, so
        any added later comes after it."""
        parent = record.data.get("parent_id")
        # In log order (by position): the order this index met them in depends on which streams it read first.
        writes = sorted((w for w in self.writes.get(parent or "", {}).values() if w.channel == channel), key=lambda w: w.position)
        if index >= len(writes):
            raise StoreError(f"checkpoint {record.data['checkpoint_id']!r}: its value of {channel!r} is its parent's write "
                             f"#{index}, which the log no longer holds{self.unreadable()}")
        write = writes[index]
        if avoid is not None and write.position in avoid:
            raise Broken(channel)
        return write.value

    def header(self, record: Record, avoid: set[int] | None = None) -> Json:
        """The checkpoint's header (all but its id and values): stored whole, or as the changes
        from its parent's, applied from the nearest ancestor stored whole (memoized)."""

        def step(header: Json, item: Record) -> Json:
            if "delta" in item.data:
                return expand(header, item.data["delta"], item.data.get("values", {}), item.data["checkpoint_id"])
            return patch(header, item.data["changes"])

        return self._resolved(record, "header", "checkpoint", step, avoid,
                              "is stored as changes from a parent the log no longer holds")

    def metadata(self, record: Record, avoid: set[int] | None = None) -> Json:
        """The checkpoint's metadata: stored, or its parent's one step on with `metadata_delta`
        applied, from the nearest ancestor that stores it (resolved when read, not when
        indexed: an ancestor may be restated after its children were indexed)."""
        return self._resolved(record, "metadata", "metadata",
                              lambda metadata, item: patch(next_step(metadata), item.data.get("metadata_delta", {})),
                              avoid, "takes its metadata from a parent the log no longer holds")

    def _resolved(self, record: Record, part: str, stored: str, step: Callable[[Json, Record], Json],
                  avoid: set[int] | None, missing: str) -> Json:
        """A part of the checkpoint that may be stored as a step from its parent's: found in the
        nearest ancestor that stores it whole (`data[stored]`) or has it memoized, then carried
        down the chain with `step` (each result memoized unless `avoid` is given)."""
        chain: list[Record] = []
        current = record
        while True:
            if avoid is not None and current.position in avoid:
                raise Broken(part)
            known = self.memo.get((current.position, f"#{part}")) if avoid is None else None
            if known is not None:
                value: Json = known
                break
            if stored in current.data:
                value = current.data[stored]
                break
            chain.append(current)
            parent = self.records.get(current.data.get("parent_id") or "")
            if parent is None or len(chain) > len(self.records):
                raise StoreError(f"checkpoint {current.data['checkpoint_id']!r} {missing}{self.unreadable()}")
            current = parent
        for item in reversed(chain):
            value = step(value, item)
            if avoid is None:
                self.memo[(item.position, f"#{part}")] = value
        return value

    def unreadable(self) -> str:
        """Why a checkpoint resting on an event the log no longer holds cannot be read, and
        what to do: a LangGraph event redacted by hand (`threadlog redact`; a deletion never
        leaves a remaining checkpoint resting on what it erases) takes every checkpoint stored
        as changes from it along. Without one, the file was altered: `verify` says where."""
        deleted = set(self.deleted_where.values())
        hand = [position for position, stream, offset in self.blanked if (stream, offset) not in deleted]
        if not hand:
            return "; run verify"
        shown = ", ".join(map(str, hand[:5])) + (f" and {len(hand) - 5} more" if len(hand) > 5 else "")
        return (f": its LangGraph event{'s' if len(hand) > 1 else ''} at position {shown} "
                f"{'were' if len(hand) > 1 else 'was'} redacted, which leaves every checkpoint stored as changes "
                "from it unreadable; delete_thread removes the thread (it erases a secret from a LangGraph run, "
                "which a redaction does not)")

    def values(self, record: Record, serde: SerializerProtocol, avoid: set[int] | None = None) -> dict[str, Any]:
        if avoid is not None:  # what it rests on besides its values: its parent, its metadata
            parent = self.records.get(record.data.get("parent_id") or "")
            if record.data.get("follows") and parent is not None and parent.position in avoid:
                raise Broken("parent")
            self.metadata(record, avoid)
        values = {}
        for channel, version in self.header(record, avoid)["channel_versions"].items():
            try:
                value = self.value(record, channel, version, serde, avoid)
            except LookupError:
                continue
            # LangGraph changes what it is given in place: it gets copies, the index keeps its own.
            values[channel] = list(value) if is_messages(value) else copy.deepcopy(value)
        return values

    def tail(self, stream_id: str, below: int | None = None) -> str | None:
        """The last checkpoint (not a restatement) in a stream's history, below an offset."""
        stream = self.streams[stream_id]
        for offset, cid, restated in reversed(stream.checkpoints):
            if not restated and (below is None or offset < below):
                return cid
        if stream.parent_id in self.streams:
            return self.tail(stream.parent_id, stream.parent_offset)
        return None


def _whole(data: Json) -> bool:
    """A checkpoint event that reads without its parent: header, metadata and every value stored."""
    header, values = data.get("checkpoint"), data.get("values", {})
    return (isinstance(header, dict) and "metadata" in data and not data.get("follows")
            and all("w" not in value and "after" not in value for value in values.values())
            and (bool(data.get("restated")) or set(header.get("channel_versions", ())) <= set(values) | set(data.get("absent", ()))))


class Broken(Exception):
    """A value's walk reached a record about to be erased."""


def diff(old: Json, new: Json) -> Json | None:
    """How a header differs from its parent's: `key: value` replaced, `key+: {k: v}` entries
    set in a dict-valued key, `key-: [k]` entries removed from it, `-: [key]` keys removed.
    None when a key's own name would read as one of these marks (then the header is stored whole)."""
    if any(key == "-" or key.endswith(("+", "-")) for key in (*old, *new)):
        return None
    out: Json = {}
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if same(before, value):
            continue
        if isinstance(before, dict) and isinstance(value, dict):
            changed = {k: v for k, v in value.items() if not same(before.get(k, _MISSING), v)}
            removed = [k for k in before if k not in value]
            if changed:
                out[key + "+"] = changed
            if removed:
                out[key + "-"] = removed
        else:
            out[key] = value
    removed = [key for key in old if key not in new]
    if removed:
        out["-"] = removed
    return out


def next_step(metadata: Json) -> Json:
    """A checkpoint's metadata as its child's usually is: the same, one step on."""
    step = metadata.get("step")
    return {**metadata, "step": step + 1} if isinstance(step, int) and not isinstance(step, bool) else metadata


def patch(old: Json, diff: Json) -> Json:
    out = {key: value for key, value in old.items() if key not in diff.get("-", ())}
    for key, value in diff.items():
        if key == "-":
            continue
        if key.endswith("+"):
            out[key[:-1]] = {**out.get(key[:-1], {}), **value}
        elif key.endswith("-"):
            out[key[:-1]] = {k: v for k, v in out[key[:-1]].items() if k not in value}
        else:
            out[key] = value
    return out


def _input_part(record: Record, key: str) -> Json:
    """The stored form of `key` in a checkpoint's own `__start__` value (a graph's input)."""
    stored = record.data.get("values", {}).get("__start__", {})
    if "json" in stored:
        return {"json": stored["json"][key]}
    return dict(stored["dict"][key])


def input_ref(record: Record | None, key: str, value: Json) -> Json:
    """`{"input": key}` when a write's stored value is `key` of the checkpoint's own input."""
    if record is None:
        return value
    stored = record.data.get("values", {}).get("__start__", {})
    try:
        is_input = isinstance(stored.get("json", stored.get("dict")), dict) and same(_input_part(record, key), value)
    except KeyError:
        return value
    return {"input": key} if is_input else value


# -- a header as a `delta` from its parent's --------------------------------------------------
#
# `changes` (see `diff`) repeats what the checkpoint's other fields already say. A `delta` is
# `changes` less three things a reader derives: the versions of the channels whose values the
# event stores (each value carries its version), `updated_channels` when it is those
# channels, sorted (LangGraph's usual case), and `ts` as microseconds from the time in the
# checkpoint's id (a UUID v6 made just after `ts`), when that gives `ts` back exactly.
# `compact` only returns a delta that `expand` turns back into the same header.

_UUID_EPOCH = 0x01B21DD213814000  # 1582-10-15 in 100 ns steps before 1970
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _id_micros(cid: str) -> int | None:
    try:
        u = uuid.UUID(cid)
    except ValueError:
        return None
    if u.version != 6:
        return None
    high = u.int >> 64
    ticks = ((high >> 32) << 28) | (((high >> 16) & 0xFFFF) << 12) | (high & 0x0FFF)
    return (ticks - _UUID_EPOCH) // 10


def _ts(cid: str, delta: int) -> str | None:
    base = _id_micros(cid)
    return None if base is None else (_EPOCH + timedelta(microseconds=base + delta)).isoformat()


def compact(old: Json, new: Json, values: Json, cid: str) -> Json | None:
    """The `delta` form of `new` after `old`, or None when it cannot say it exactly."""
    changes = diff(old, new)
    if changes is None:
        return None
    out = dict(changes)
    versions = {ch: v for ch, v in out.pop("channel_versions+", {}).items() if not same(values.get(ch, {}).get("v", _MISSING), v)}
    if versions:
        out["channel_versions+"] = versions
    if new.get("updated_channels") == sorted(values):
        out.pop("updated_channels", None)
    elif "updated_channels" in new:
        out["updated_channels"] = new["updated_channels"]
    ts = new.get("ts")
    if isinstance(ts, str) and "ts" in out and (base := _id_micros(cid)) is not None:
        try:
            when = datetime.fromisoformat(ts)
        except ValueError:
            when = None
        if when is not None and when.tzinfo is not None:
            micros = (when - _EPOCH) // timedelta(microseconds=1)
            if _ts(cid, micros - base) == ts:
                out["ts"] = micros - base
    return out if same(expand(old, out, values, cid), new) else None


def expand(old: Json, delta: Json, values: Json, cid: str) -> Json:
    """The header a `delta` (see `compact`) stands for."""
    ts = delta.get("ts")
    header = patch(old, {key: value for key, value in delta.items() if key != "ts" or not isinstance(value, int)})
    if values:
        header["channel_versions"] = {**header.get("channel_versions", {}), **{ch: rec["v"] for ch, rec in values.items()}}
    if "updated_channels" not in delta and "updated_channels" not in delta.get("-", ()):
        header["updated_channels"] = sorted(values)
    if isinstance(ts, int):
        header["ts"] = _ts(cid, ts)
    return header
