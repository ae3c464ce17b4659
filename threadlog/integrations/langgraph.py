"""`ThreadlogSaver`: a LangGraph checkpointer that keeps its checkpoints in a threadlog store.

    from threadlog import Store
    from threadlog.integrations.langgraph import ThreadlogSaver
    graph = builder.compile(checkpointer=ThreadlogSaver(Store("threadlog.db")))

How LangGraph's world maps onto the log:

- A LangGraph thread and checkpoint namespace is a *line*: a root threadlog thread whose id
  is derived from them (`lg-<thread hash>[-<namespace hash>]`, titled with the thread id),
  plus one fork per branch (`<root id>.<suffix>`). Every id that starts with the root's id
  belongs to the line, so finding a line's streams is one index lookup.
- `put` appends one `langgraph.checkpoint` event holding only the channel values that are
  new in that checkpoint (`new_versions`); a value is read back by walking the checkpoint's
  parents to the one that stored its version. A message list that only grew is stored as
  what was appended (`langgraph_values`), and each new message is also a `message.appended`
  event written just before its checkpoint, so transcripts, search and the viewer work.
- Running from an older checkpoint (time travel, `update_state` on a past config) puts a
  checkpoint whose parent is not the last one of its stream: that becomes a threadlog fork
  at the parent's event, O(1), and `threadlog tree` shows LangGraph's branches.
  `copy_thread` is one fork of the source's stream its latest checkpoint is on, naming the
  source's other streams and how far it reads them (the source may go on; the copy does not
  see it).
- A checkpoint whose message list replaces a message already shown (a reviewer's
  `update_state` with an edited tool call of the same id) continues in a fork made just
  below that message, where the list is shown again from there on: the thread's view,
  transcripts and requests show what LangGraph holds, and the original stays in the parent.
  `threadlog_thread(config)` names the thread a checkpoint is shown in. A message only
  removed (`RemoveMessage`, a graph trimming its history) stays in the view: no fork.
- `delete_thread`, `delete_for_runs` and `prune` append a `langgraph.deleted` event naming
  the checkpoints removed, then `redact` the payloads no remaining checkpoint or other
  thread still needs: the log stays append-only and `verify` passes. A remaining
  checkpoint whose values rested on a removed one is first written again with all its
  values (`restated`).

The saver keeps an index of each line in memory (`langgraph_lines`), brought up to date from
the log before every call (one query tells whether anything was appended since, one more
which of the line's streams were), so several processes can share one file. LangGraph
calls a synchronous checkpointer from worker threads: the store gives each thread its own
connection (a `:memory:` store serves only the thread that opened it), and the saver's calls
take turns on its index. The async methods run the same short SQLite calls inline.
"""

from __future__ import annotations

import builtins
import copy
import json
import random
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from eventstore import ConcurrencyError, ForkRefused, InvalidEvent, Locked, Store, StoreError, ThreadNotFound
from eventstore.prepare import new_id, prepare

from .langgraph_lines import (PREFIX, Broken, Line, Record, compact, diff, input_ref, legacy_line_id, line_id, next_step, patch,
                              thread_prefix)
from .langgraph_values import Json, anthropic_message, decode, encode, is_messages, paired, replaced, same

__all__ = ["ThreadlogSaver", "line_id"]

ACTOR = "threadlog.integrations.langgraph"
_PATIENCE = 30.0  # seconds a write refused by other processes' appends is tried again before the refusal is raised
_ID_CANDIDATES = 800
_FOREIGN = ("", "\x00")  # the owner of a stream this saver did not create: no thread and namespace
# The owner of a root whose first event a redaction erased (`threadlog redact` of its
# `thread.created`: the title is the thread id): the thread whose id the root's id is made from.
_ERASED = ("", "\x01")


class ThreadlogSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer over a threadlog `Store` (see the module's documentation)."""

    def __init__(self, store: Store, *, serde: SerializerProtocol | None = None) -> None:
        if not isinstance(store, Store):  # else the graph's first step fails inside LangGraph, on an attribute
            raise StoreError(f"ThreadlogSaver takes a threadlog Store, not {type(store).__name__}: "
                             "ThreadlogSaver(Store(path))")
        if isinstance(serde, EncryptedSerializer):  # else the run is stored in clear text, which it was given to prevent
            raise StoreError("ThreadlogSaver does not encrypt: it writes a run's messages and its JSON values as readable "
                             "events (transcripts, search and the viewer read them), so with an EncryptedSerializer only "
                             "the other values would be encrypted; keep the file on an encrypted disk, or use a saver "
                             "that encrypts")
        super().__init__(serde=serde)
        self.store = store
        self._lock = threading.RLock()
        self._lines: dict[str, Line] = {}
        self._owners: dict[str, tuple[str, str]] = {}  # root stream id -> (thread id, namespace)
        self._legacy_absent: set[str] = set()

    # -- plumbing ---------------------------------------------------------------------------

    def _line(self, thread_id: str, ns: str) -> Line:
        key = self._key(str(thread_id), ns)
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = Line(key, str(thread_id), ns)
        line.thread_id, line.ns = str(thread_id), ns  # a line first met through _peek did not know them
        line.refresh(self.store)
        return line

    def _key(self, thread_id: str, ns: str) -> str:
        """The root stream id of this thread and namespace: `line_id`, or, when another
        thread or namespace already holds that id (their hashes share its digits), the
        first of `ID~1`, `ID~2`, ... that is free or theirs. Which one a root belongs to is
        read from its first event, once. A root whose first event was redacted names no thread:
        it is the one whose id it is (`ID`, or the older layout's), not an `ID~N` (only the
        thread that created it knew which of those it took)."""
        legacy = legacy_line_id(thread_id, ns)
        if legacy not in self._legacy_absent:  # a line an older release started keeps its id
            owner = self._owners.get(legacy) or self._root_owner(self.store, legacy)
            if owner is None:
                self._legacy_absent.add(legacy)  # this release never creates one
            else:
                self._owners[legacy] = owner
                if owner in ((thread_id, ns), _ERASED):
                    return legacy
        base = line_id(thread_id, ns)
        for n in range(_ID_CANDIDATES):
            key = base if n == 0 else f"{base}~{n}"
            owner = self._owners.get(key)
            if owner is None:
                owner = self._root_owner(self.store, key)
                if owner is None:
                    return key  # free: whoever creates it first owns it (a lost race retries here)
                self._owners[key] = owner
            if owner == (thread_id, ns) or (owner == _ERASED and n == 0):
                return key
        raise StoreError(f"LangGraph thread {thread_id!r}, namespace {ns!r}: no free stream id after {base!r}")

    @staticmethod
    def _root_owner(store: Store, root: str) -> tuple[str, str] | None:
        """The LangGraph thread and namespace a root stream was created for (None if absent)."""
        try:
            info = store.thread(root)
        except ThreadNotFound:
            return None
        first = store.event_at(root, info.base).data  # thread.created, or thread.forked for a copy
        if first.get("redacted") is True:
            return _ERASED
        metadata = first.get("options", first).get("metadata")  # a fork made by other means holds its mode ("blank")
        created = metadata.get("langgraph") if isinstance(metadata, dict) else None
        if not isinstance(created, dict) or "thread_id" not in created:
            return _FOREIGN
        return (str(created["thread_id"]), str(created.get("checkpoint_ns", "")))

    def _tuple(self, line: Line, cid: str) -> CheckpointTuple:
        record = line.records[cid]
        data = record.data
        header = {key: _from_json(value, self.serde) for key, value in copy.deepcopy(line.header(record)).items()}
        checkpoint: Any = {**header, "id": cid, "channel_values": line.values(record, self.serde)}
        metadata: Any = {key: _from_json(value, self.serde) for key, value in copy.deepcopy(line.metadata(record)).items()}
        parent = data.get("parent_id")
        writes = sorted(line.writes.get(cid, {}).values(), key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
        return CheckpointTuple(
            config=self._config(line, cid),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=self._config(line, parent) if parent else None,
            pending_writes=[(w.task_id, w.channel, decode(copy.deepcopy(w.value), self.serde)) for w in writes],
        )

    @staticmethod
    def _config(line: Line, cid: str) -> RunnableConfig:
        return {"configurable": {"thread_id": line.thread_id, "checkpoint_ns": line.ns, "checkpoint_id": cid}}

    # -- where a checkpoint goes ------------------------------------------------------------

    def _stream_for(self, line: Line, parent: str | None, vet: Callable[[str], None]) -> str:
        """The stream a checkpoint whose parent is `parent` is appended to (a new branch if
        the parent is not the last checkpoint of any stream; `vet(branch)` first raises if
        the checkpoint's events would be refused there, so a refused put forks nothing).

        On a deleted parent, always a new branch at the parent's erased event, found where
        its deletion recorded it: every saver decides the same, whether or not it indexed
        the parent before its event was erased."""
        if parent is not None and parent in line.deleted:
            return self._branch(line, line.where_deleted(parent), vet, lambda: [])
        tails = {sid: line.tail(sid) for sid, stream in line.streams.items() if stream.own}
        if parent is None or parent not in line.records:
            live = [cid for cid in line.live() if not line.records[cid].data.get("restated")]
            parent = max(live) if live else None
            if parent is None:
                return line.key
        record = line.records[parent]
        if tails.get(record.stream) == parent:
            return record.stream
        for sid, tail in tails.items():
            if tail == parent:
                return sid
        return self._branch(line, (record.stream, record.offset), vet, lambda: [self._restated(line, record, restated=False)])

    def _rewritten(self, line: Line, parent: str | None, checkpoint: Checkpoint, new_versions: ChannelVersions,
                   vet: Callable[[str, bool], None]) -> str | None:
        """A new branch for a checkpoint whose message list replaces a message its parent's
        history shows (`update_state` or a node returning an edited message of the same id),
        else None. The log is append-only and its history would show the original beside
        what follows the edit: the branch forks just below the first replaced message
        shown, so that the original stays in the parent, with who wrote it and when, and
        `_checkpoint_events` shows the list from there on (`reshown`). Calls waiting at the
        fork point are kept waiting (an edited tool result answers its call, which stays
        below the fork point). A message only removed (`RemoveMessage`, a graph trimming its
        history) forks nothing: the view keeps it.

        The parent's history is read only when a message is replaced (the usual step, and a
        trimming one, cost nothing more)."""
        record = line.records.get(parent) if parent is not None and parent not in line.deleted else None
        if record is None or line.stranded(record.data["checkpoint_id"]):
            return None
        stale: set[str] = set()
        for channel in new_versions:
            if is_messages(checkpoint["channel_values"].get(channel)):
                previous, _ = self._parent_messages(line, record, channel)
                stale |= replaced(previous or [], checkpoint["channel_values"][channel])
        if not stale:
            return None
        cut = next((offset for offset, type_, data in self.store.read_data(record.stream, 0, record.offset)
                    if type_ == "message.appended" and data.get("message_id") in stale), None)
        if cut is None:  # none of them is shown: nothing in the view to replace
            return None
        return self._branch(line, (record.stream, cut - 1), lambda branch: vet(branch, True),
                            lambda: [self._restated(line, record, restated=False)], unanswered="keep")

    def _branch(self, line: Line, at: tuple[str, int] | None, vet: Callable[[str], None],
                seed: Callable[[], builtins.list[Json]], unanswered: str = "drop") -> str:
        """A new stream whose history ends at the event at `at` (stream, offset), once `vet`
        passed it: a fork right after that event (tool calls waiting there `unanswered`), or,
        when that history holds no message to fork from (or `at` is None), a new thread that
        starts with `seed()`."""
        branch = f"{line.key}.{new_id()[:8]}"
        vet(branch)
        store = self.store
        forked = at is not None
        if at is not None:
            try:
                store.fork(at[0], at=at[1] + 1, fork_id=branch, unanswered=unanswered, actor=ACTOR)
            except ForkRefused as refused:
                if refused.reason != "empty":
                    raise
                forked = False
        if not forked:
            store.append(branch, [self._created(line), *seed()], expect="no_stream")
        line.refresh(store)
        return branch

    def _created(self, line: Line) -> Json:
        title = line.thread_id if not line.ns else f"{line.thread_id} [{line.ns}]"
        meta = {"langgraph": {"thread_id": line.thread_id, "checkpoint_ns": line.ns}}
        return {"type": "thread.created", "data": {"title": title, "metadata": meta}, "meta": {"actor": ACTOR}}

    def _restated(self, line: Line, record: Record, restated: bool = True) -> Json:
        """A checkpoint event for `record` holding every one of its values in full."""
        header = line.header(record)
        values = {ch: encode(value, header["channel_versions"][ch], self.serde) for ch, value in line.values(record, self.serde).items()}
        data = {**record.data, "values": values, "checkpoint": header, "metadata": line.metadata(record)}
        for derived in ("changes", "delta", "follows", "metadata_delta"):  # restated whole, where it rests on nothing before it
            data.pop(derived, None)
        if restated:
            data["restated"] = True
        else:
            data.pop("restated", None)
        return {"type": "langgraph.checkpoint", "data": data}

    def _append(self, line: Line, stream_id: str, events: builtins.list[Json]) -> None:
        """Append to a line's stream, creating the line's root on its first checkpoint."""
        store = self.store
        created = stream_id not in line.streams
        try:
            if created:
                store.append(stream_id, [self._created(line), *events], expect="no_stream")
            else:
                store.append(stream_id, events, expect=line.streams[stream_id].head)
        except InvalidEvent as error:
            raise _named(line, events, error, first=int(created)) from None

    # -- BaseCheckpointSaver: reads -----------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        with self._lock:
            line = self._line(conf["thread_id"], conf.get("checkpoint_ns", ""))
            cid = conf.get("checkpoint_id") or None  # "" is no checkpoint id: the latest, as SqliteSaver reads it
            if cid is None:
                live = line.live()
                cid = max(live) if live else None
            if cid is None or cid not in line.records or cid in line.deleted or line.stranded(cid):
                return None
            return self._tuple(line, cid)

    def threadlog_thread(self, config: RunnableConfig) -> str:
        """The id of the threadlog thread whose history shows a checkpoint's messages (the
        latest checkpoint's when the config names none), for `transcript`, `request` or the
        CLI. It is `line_id(thread_id, ns)` until the thread branches (time travel, an edited
        message): then the fork the checkpoint is on. StoreError when the
        checkpoint is not stored (or was deleted)."""
        conf = config.get("configurable") if isinstance(config, dict) else None
        if not isinstance(conf, dict) or "thread_id" not in conf:
            raise StoreError("threadlog_thread takes a LangGraph config naming a thread, "
                             "{'configurable': {'thread_id': ...}}; this " + (f"{type(config).__name__} names none" if
                                                                               isinstance(config, dict) else
                                                                               f"is a {type(config).__name__}"))
        with self._lock:
            line = self._line(conf["thread_id"], conf.get("checkpoint_ns", ""))
            cid = conf.get("checkpoint_id") or None
            live = line.live()
            cid = cid or (max(live) if live else None)
            if cid is None or cid not in live:
                where = f"LangGraph thread {line.thread_id!r}" + (f", namespace {line.ns!r}" if line.ns else "")
                if cid is None:
                    raise StoreError(f"{where}: no checkpoint is stored" + (" (its checkpoints were deleted)" if line.deleted else " yet"))
                raise StoreError(f"{where}: checkpoint {cid!r} " + ("was deleted" if cid in line.deleted else "is not stored"))
            stream = line.records[cid].stream
            return stream if line.streams[stream].own else line.key

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        with self._lock:
            found = []
            for line in self._lines_for(config):
                wanted = (config or {}).get("configurable", {}).get("checkpoint_id") or None
                cut = before["configurable"].get("checkpoint_id") if before else None
                for cid in line.live():
                    if (wanted is not None and cid != wanted) or (cut is not None and cid >= cut):
                        continue
                    metadata = line.metadata(line.records[cid])
                    # Compared as read back (a date is stored as a record); None matches a missing key too.
                    if filter and any(_from_json(metadata.get(k), self.serde) != v for k, v in filter.items()):
                        continue
                    found.append((cid, line))
            found.sort(key=lambda item: item[0], reverse=True)
            if limit is not None and limit >= 0:  # a negative limit is none, as SQLite's LIMIT reads it in SqliteSaver
                found = found[:limit]
            tuples = [self._tuple(line, cid) for cid, line in found]
        yield from tuples

    def _lines_for(self, config: RunnableConfig | None) -> builtins.list[Line]:
        conf = (config or {}).get("configurable", {})
        if "thread_id" in conf and "checkpoint_ns" in conf:
            return [self._line(conf["thread_id"], conf["checkpoint_ns"])]
        thread_id = str(conf["thread_id"]) if "thread_id" in conf else None
        prefix = thread_prefix(thread_id) if thread_id is not None else PREFIX
        store = self.store
        lines = []
        for root in store.ids_starting(prefix, limit=1_000_000):
            if "." in root:
                continue
            owner = self._owners.get(root) or self._root_owner(store, root)
            if owner == _ERASED and thread_id is not None and root == line_id(thread_id, ""):
                owner = (thread_id, "")  # (a namespace's root cannot be told from its id alone)
            if owner is not None and owner not in (_FOREIGN, _ERASED):
                self._owners[root] = owner
                # The prefix is 10 hex digits of the thread id's hash: another thread's roots can share it.
                if thread_id is None or owner[0] == thread_id:
                    lines.append(self._line(*owner))
        return lines

    # -- BaseCheckpointSaver: writes ----------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns, parent = conf["thread_id"], conf.get("checkpoint_ns", ""), conf.get("checkpoint_id")
        md = get_serializable_checkpoint_metadata(config, metadata)

        def vet(branch: str, reshown: bool = False) -> None:  # the events as they would read on a new branch, validated without a write
            events = self._checkpoint_events(line, branch, checkpoint, md, new_versions, parent, reshown=reshown)
            for i, event in enumerate(events):
                try:
                    prepare(event, i)
                except InvalidEvent as error:
                    raise _named(line, events, error, first=0) from None

        with self._lock:
            for last in _attempts():
                line = self._line(thread_id, ns)
                if parent is not None and parent == checkpoint["id"]:
                    # Named as its own parent (a retry with the config this put returned): it rests on
                    # the stored one's parent, as InMemorySaver replaces it, or on none if not stored.
                    own = line.records.get(parent)
                    parent = own.data.get("parent_id") if own is not None else None
                rewritten = self._rewritten(line, parent, checkpoint, new_versions, vet)
                stream = rewritten or self._stream_for(line, parent, vet)
                events = self._checkpoint_events(line, stream, checkpoint, md, new_versions, parent, reshown=rewritten is not None)
                try:
                    self._append(line, stream, events)
                except ConcurrencyError:
                    line.mark = -1  # another writer got there first: read what it wrote and decide again
                    if last:
                        raise
                    continue
                break
            if parent is not None:
                self._settle(line, stream, checkpoint, md, parent)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _settle(self, line: Line, stream: str, checkpoint: Checkpoint, metadata: Any, parent: str) -> None:
        """Restate a checkpoint just appended if its parent was deleted meanwhile.

        Another process's `delete_thread` or `prune` appends its `langgraph.deleted` to the
        line's root, which does not conflict with an append to a branch, then erases the
        deleted checkpoints' payloads. A checkpoint stored as changes from its parent would
        then read nothing. Whichever of the two appends comes second in the log sees the
        other: the deleter, if this checkpoint came first (it restates it from the log
        before erasing anything); this writer otherwise, which restates it here from the
        checkpoint in hand (the parent's payloads may already be gone)."""
        line.refresh(self.store)
        if checkpoint["id"] in line.deleted or not line.stranded(checkpoint["id"]):
            return
        event = self._checkpoint_events(line, stream, checkpoint, metadata, {}, parent, whole=True)[-1]
        event["data"]["restated"] = True
        self._retried(line, lambda: self.store.append(stream, [event], expect=line.streams[stream].head))
        line.refresh(self.store)

    def _retried(self, line: Line, write: Callable[[], object]) -> None:
        """`write()`, again after a `ConcurrencyError` (another process wrote to the line first:
        what it wrote is read before the next try), as `_attempts` allows."""
        for last in _attempts():
            try:
                write()
                return
            except ConcurrencyError:
                line.mark = -1
                line.refresh(self.store)
                if last:
                    raise

    def _checkpoint_events(self, line: Line, stream: str, checkpoint: Checkpoint, metadata: Any, new_versions: ChannelVersions,
                           parent: str | None, whole: bool = False, reshown: bool = False) -> builtins.list[Json]:
        """The message events for what the checkpoint's message lists gained (their tool blocks
        paired after the stream's calls awaiting results, read only when they hold tool
        blocks), then the checkpoint (for `stream`). What a reader derives is left out: the
        parent when it is the checkpoint of the stream's event before (`follows`), a value
        that is the parent's only pending write to its channel (`w`), and most of the header
        (`delta`, see `langgraph_lines`). `reshown`: `stream` is the branch `_rewritten` made
        for this checkpoint, whose history ends below the replaced message."""
        # A deleted parent's payloads are being erased: nothing may rest on them (the parent id is kept).
        resting = parent is not None and not whole and parent not in line.deleted and not line.stranded(parent)
        parent_record = line.records.get(parent) if resting and parent is not None else None
        if parent is not None and parent_record is None:  # nothing to rest on: every value is stored, as SqliteSaver does
            new_versions = {ch: v for ch, v in checkpoint["channel_versions"].items() if ch in checkpoint["channel_values"]}
        values: Json = {}
        messages: builtins.list[Json] = []
        # A list that is not its parent's extended shows the messages its parent's did not hold:
        # one removed stays in the view (a graph trimming its history reads nothing more). Resting
        # on nothing, or on a branch `_rewritten` made, it shows what the stream's history does
        # not show yet: a deleted parent's messages are shown already (kept while another
        # checkpoint holds them), so are the line's when a caller puts a checkpoint naming no
        # parent, and the branch shows the list again from the edit on.
        shown: set[str] | None = None  # read once, when a list needs it
        for channel, version in new_versions.items():
            if channel not in checkpoint["channel_values"]:
                continue
            value = checkpoint["channel_values"][channel]
            previous, previous_version = (self._parent_messages(line, parent_record, channel)
                                          if is_messages(value) and parent_record is not None else (None, None))
            record = values[channel] = encode(value, version, self.serde, previous, previous_version)
            if parent_record is not None:
                writes = [w.value for w in line.writes.get(parent or "", {}).values() if w.channel == channel]
                if len(writes) == 1 and same(writes[0], {k: v for k, v in record.items() if k not in ("v", "after")}):
                    values[channel] = {k: v for k, v in record.items() if k in ("v", "after")} | {"w": 0}
            if "messages" in record and not whole:
                if "after" in record:
                    fresh = value[len(previous or []):]
                else:
                    if parent_record is not None and not reshown:
                        known = {m.id for m in previous or [] if m.id}
                    else:
                        if shown is None:
                            shown = self._shown(stream) if stream in line.streams else set()
                        known = shown
                    fresh = [m for m in value if not m.id or m.id not in known]
                messages.extend(data for data in map(anthropic_message, fresh) if data is not None)
        header = {key: _to_json(value, self.serde) for key, value in checkpoint.items() if key not in ("id", "channel_values")}
        data: Json = {"checkpoint_id": checkpoint["id"], "values": values,
                      "metadata": {key: _to_json(value, self.serde) for key, value in metadata.items()}}
        delta = compact(line.header(parent_record), header, values, checkpoint["id"]) if parent_record is not None else None
        changes = diff(line.header(parent_record), header) if parent_record is not None and delta is None else None
        if delta is not None:  # most of a header repeats its parent's or the event's values
            data["delta"] = delta
        elif changes is not None:
            data["changes"] = changes
        else:
            data["checkpoint"] = header
        absent = sorted(ch for ch in checkpoint["channel_versions"] if ch not in checkpoint["channel_values"])
        if absent:
            data["absent"] = absent
        if parent is not None and parent_record is not None and parent == line.last_in.get(stream):
            data["follows"] = True
            expected = next_step(line.metadata(parent_record))
            changed = diff(expected, data["metadata"])
            if changed is not None and same(patch(expected, changed), data["metadata"]):
                del data["metadata"]  # the parent's, one step on, with these changes
                if changed:
                    data["metadata_delta"] = changed
        elif parent is not None:
            data["parent_id"] = parent
        if any(block["type"] in ("tool_use", "tool_result") for message in messages for block in message["content"]):
            messages = paired(messages, self.store.pending_tool_uses(stream) if stream in line.streams else ())
        return [*({"type": "message.appended", "data": message} for message in messages), {"type": "langgraph.checkpoint", "data": data}]

    def _parent_messages(self, line: Line, parent: Record, channel: str) -> tuple[builtins.list[Any] | None, Any]:
        """(the parent's value of `channel` when it is a list of messages, else None; its version).
        A channel may hold other values before messages (a node sets it to a draft, then to
        the answer): those are no list a message list extends."""
        version = line.header(parent)["channel_versions"].get(channel)
        try:
            value = line.value(parent, channel, version, self.serde)
        except LookupError:
            return None, version
        return (value if is_messages(value) else None), version

    def _shown(self, stream: str) -> set[str]:
        """The ids of the LangChain messages `stream`'s history shows (not those erased)."""
        return {data["message_id"] for _, type_, data in self.store.read_data(stream)
                if type_ == "message.appended" and isinstance(data.get("message_id"), str)}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        cid = conf["checkpoint_id"]
        with self._lock:
            for last in _attempts():
                line = self._line(conf["thread_id"], conf.get("checkpoint_ns", ""))
                known = line.writes.get(cid, {})
                record = line.records.get(cid)
                tails = {sid: line.tail(sid) for sid, known_stream in line.streams.items() if known_stream.own}
                near = record.stream if record and line.streams[record.stream].own else line.key
                stream = next((sid for sid, tail in tails.items() if tail == cid), near)
                implicit = line.last_in.get(stream) == cid  # the checkpoint of the stream's event before
                items = []
                for idx, (channel, value) in enumerate(writes):
                    idx = WRITES_IDX_MAP.get(channel, idx)
                    if idx >= 0 and (task_id, idx) in known:
                        continue  # a retried write: LangGraph keeps the first
                    stored = _unversioned(encode(value, None, self.serde))
                    if implicit:  # a graph's input, written to its channels: stored once, in the checkpoint
                        stored = input_ref(record, channel, stored)
                    items.append({"idx": idx, "channel": channel, "value": stored})
                if not items:
                    return
                data: Json = {"task_id": task_id, "task_path": task_path, "writes": items}
                if not implicit:
                    data["checkpoint_id"] = cid
                event = {"type": "langgraph.writes", "data": data}
                try:
                    self._append(line, stream, [event])
                except ConcurrencyError:
                    line.mark = -1
                    if last:
                        raise
                    continue
                return

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """One fork, at its head, of the source's stream its latest checkpoint is shown in
        (the root, or the branch a time travel or an edit made), O(1) whatever the history's
        length: the copy's root shows what the copy holds. The source's other streams are
        named in the fork (with how far the copy reads them), not copied. A source with no
        message to fork from (so nothing large to share) has its checkpoints and writes
        written again instead."""
        with self._lock:
            for line in self._lines_for({"configurable": {"thread_id": source_thread_id}}):
                target = self._line(target_thread_id, line.ns)
                if target.live():
                    raise StoreError(f"copy_thread: LangGraph thread {target_thread_id!r} already has checkpoints; "
                                     "delete it first or copy to a new thread id")
                if target.streams:  # a copy is a fork named as the target's root, which its deletion keeps
                    raise StoreError(f"copy_thread: LangGraph thread {target_thread_id!r} was deleted, and its log stays "
                                     "(recording the deletion), so a copy cannot be made under its id; copy to a new thread id")
                created = self._created(target)
                live = line.live()
                # Forked from the root, a copy of a thread whose latest checkpoint is on a branch
                # showed the root's messages: the call as proposed before the edit, not the turns after.
                view = line.records[max(live)].stream if live else line.key
                ends = {sid: stream.stop if stream.stop is not None else stream.head for sid, stream in line.streams.items()}
                copied = {sid: end for sid, end in ends.items() if sid != view}
                metadata = {"langgraph": {**created["data"]["metadata"]["langgraph"], "copied": copied}}
                try:
                    self.store.fork(view, at=ends[view], fork_id=target.key, unanswered="drop", actor=ACTOR,
                                       metadata=metadata)
                except ForkRefused as refused:
                    if refused.reason != "empty":
                        raise
                    self._copy_events(line, target.key, created)
                    continue
                self.store.append(target.key, [{"type": "title.set", "data": {"title": created["data"]["title"]}}])

    def _copy_events(self, line: Line, name: str, created: Json) -> None:
        """The source's checkpoints, writes and deletions, each written whole: what an event
        leaves to the one before it in its stream does not hold in the copy's one stream."""
        events: builtins.list[Json] = [created]
        copied: set[int] = set()
        for sid, stream in line.streams.items():
            for event in self.store.read(sid, 0, stream.stop):
                if event.redacted or event.position in copied:
                    continue
                copied.add(event.position)
                if event.type == "langgraph.checkpoint" and event.data["checkpoint_id"] in line.records:
                    record = line.records[event.data["checkpoint_id"]]
                    events.append(self._restated(line, record, restated=bool(event.data.get("restated"))))
                elif event.type == "langgraph.writes":
                    cid = next((c for c, where in line.write_events.items() if any(w[0] == event.position for w in where)), None)
                    if cid is None:
                        continue
                    items = [{"idx": w.idx, "channel": w.channel, "value": w.value} for w in line.writes[cid].values()
                             if w.position == event.position]
                    events.append({"type": event.type, "data": {**event.data, "checkpoint_id": cid, "writes": items}})
                elif event.type == "langgraph.deleted":
                    events.append({"type": event.type, "data": event.data})
        self.store.append(name, events, expect="no_stream")

    # -- deletions: recorded, then erased -----------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        with self._lock:
            for line in self._lines_for({"configurable": {"thread_id": thread_id}}):
                self._delete(line, lambda line: set(line.live()), "delete_thread")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        if not runs:
            return
        with self._lock:
            for line in self._lines_for(None):
                self._delete(line, lambda line: {cid for cid in line.live() if line.metadata(line.records[cid]).get("run_id") in runs},
                             "delete_for_runs")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise StoreError(f"prune: unknown strategy {strategy!r}; use 'keep_latest' or 'delete'")

        def doomed(line: Line) -> set[str]:
            live = line.live()
            return set(live) - (self._rebuilt_from(line, max(live)) if live and strategy == "keep_latest" else set())

        with self._lock:
            for thread_id in thread_ids:
                for line in self._lines_for({"configurable": {"thread_id": thread_id}}):
                    self._delete(line, doomed, "prune")

    def _rebuilt_from(self, line: Line, cid: str) -> set[str]:
        """The checkpoint and the ancestors its delta channels are rebuilt from. LangGraph's
        `DeltaChannel` stores no value between its snapshots (the channel is named in the
        metadata's `counters_since_delta_snapshot` and missing from the values): it is replayed
        from the pending writes of the checkpoints before, back to the nearest one holding a
        value, as `BaseCheckpointSaver.get_delta_channel_history` walks the parents (a channel
        with no version was never written: nothing to replay). Pruning those left the channel
        empty, without an error."""
        record = line.records[cid]
        counters = _from_json(line.metadata(record).get("counters_since_delta_snapshot"), self.serde)
        versions = line.header(record)["channel_versions"]
        waiting = {ch for ch in (counters if isinstance(counters, dict) else ()) if ch in versions and not self._holds(line, record, ch)}
        kept = {cid}
        while waiting:
            parent = record.data.get("parent_id")
            if parent is None or parent not in line.records or parent in line.deleted:
                break
            record = line.records[parent]
            kept.add(parent)
            waiting = {ch for ch in waiting if not self._holds(line, record, ch)}
        return kept

    def _holds(self, line: Line, record: Record, channel: str) -> bool:
        """Whether a checkpoint's values hold `channel` (as `get_tuple` gives them)."""
        version = line.header(record)["channel_versions"].get(channel)
        if version is None:
            return False
        try:
            line.value(record, channel, version, self.serde)
        except LookupError:
            return False
        return True

    def _delete(self, line: Line, choose: Callable[[Line], set[str]], reason: str) -> None:
        """Hide the checkpoints `choose` names (one `langgraph.deleted`), then redact their
        events, their writes and their messages, except what a remaining checkpoint or
        another thread holds. Another process may write to the line meanwhile: what is
        deleted is chosen again after a refused append, and a checkpoint it appended just
        before the `langgraph.deleted` is restated before anything is erased (see `_settle`)."""
        doomed: set[str] = set()

        def hide() -> None:
            doomed.clear()
            doomed.update(choose(line))
            if doomed:
                self._restate_resting_on(line, doomed, reason)
                at = {cid: [line.records[cid].stream, line.records[cid].offset] for cid in sorted(doomed)}
                self._append(line, line.key, [{"type": "langgraph.deleted", "data": {"checkpoint_ids": sorted(doomed),
                                                                                     "reason": reason, "at": at}}])

        self._retried(line, hide)
        if doomed:
            # On PostgreSQL a write takes its position when it starts: a checkpoint below the
            # `langgraph.deleted` may still be committing. Its writer counts it as before the
            # deletion and leaves it to this one, which must read it before erasing anything.
            try:
                self.store.wait_for_writes()
            except Locked:
                raise StoreError(f"{reason} of LangGraph thread {line.thread_id!r}: its checkpoints are deleted (no longer read "
                                 "or listed), but their payloads are not erased yet: a write to this database begun before "
                                 f"the deletion did not end within the store's timeout ({self.store.timeout:g} s). Once it has "
                                 "ended, run delete_thread, delete_for_runs or prune on this thread again: any of them erases "
                                 "them") from None
            line.mark = -1  # its own append read even while the log's visible end lags behind it (the module doc of postgres.py)
        line.refresh(self.store)
        # Every deleted checkpoint's events not erased yet: this deletion's (`doomed`, deleted now),
        # and what an earlier one left (a reader held it up, or it was cut short).
        left = [(where, cid, message) for cid in line.deleted for where, message in line.events_of(cid) if not self._erased(line, where)]
        if not left:
            return
        # What rests on them is written again whole first: on this deletion's, and on what an
        # earlier one cut short left (it may not have read a checkpoint committing below it).
        self._restate_resting_on(line, doomed | {cid for _, cid, _ in left}, reason, recorded=True)
        holders: dict[str, set[str]] = {}  # a message's id -> the streams of the remaining checkpoints holding it
        for cid in line.live():
            record = line.records[cid]
            for value in line.values(record, self.serde).values():
                if is_messages(value):
                    for m in value:
                        if m.id:
                            holders.setdefault(m.id, set()).add(record.stream)
        # A message is kept where a checkpoint holding it shows it: an edited message's original,
        # above the fork its edit made, shares the id of what replaced it and is erased.
        reach: dict[str, dict[str, int]] = {}
        erase = [(*where, cid) for where, cid, message in left
                 if message is None or not any(self._shows(line, sid, where[1], where[2], reach) for sid in holders.get(message, ()))]
        readers: dict[str, builtins.list[tuple[str | None, int]]] = {}
        shown = {position for events in line.message_events.values() for position, *_ in events}
        store = self.store
        erased = False
        for position, physical, offset, cid in sorted(set(erase)):
            if physical not in readers:
                readers[physical] = self._readers(physical)
            others = {key for key, below in readers[physical] if offset < below and key != line.key}
            if None in others and position in shown:
                continue  # a thread forked by other means (`threadlog fork`) shows it: its history too
            if all(cid in self._peek(key).deleted for key in others if key is not None):
                # The log's copy of old pages is truncated once, at the end: each truncation waits for readers.
                store.redact(position, reason=f"LangGraph {reason}", actor=ACTOR, purge=False)
                line.erased.add(position)
                erased = True
        line.mark = -1
        line.refresh(self.store)
        if erased:
            store.purge()  # StoreError if another connection's read holds the log: the erasures are committed

    def _shows(self, line: Line, stream: str, physical: str, offset: int, reach: dict[str, dict[str, int]]) -> bool:
        """Whether a line's stream's history holds the event at `offset` of stream `physical`
        (`reach` keeps, for each stream asked about, how far it reads each stream of its ancestry)."""
        if stream not in reach:
            own = line.streams[stream].stop
            bounds = reach[stream] = {stream: own if own is not None else 1 << 62}
            for info in self.store.ancestry(stream):
                if info.parent_id is not None and info.parent_offset is not None:
                    bounds[info.parent_id] = min(bounds.get(info.parent_id, 1 << 62), info.parent_offset)
        return offset < reach[stream].get(physical, -1)

    def _erased(self, line: Line, where: tuple[int, str, int]) -> bool:
        """Whether an indexed event (position, physical stream, offset) is erased: by this
        index's deletions, or, as the store says, by another line's. A copy reads its source's
        root through a fork, below the fork's offset, so the `event.redacted` appended when the
        source's deletion erased what both deleted is not in the copy's streams: the copy's
        index never rebuilt and still listed those events."""
        if where[0] in line.erased:
            return True
        if self.store.event_at(where[1], where[2]).redacted:
            line.erased.add(where[0])
            return True
        return False

    def _restate_resting_on(self, line: Line, doomed: set[str], reason: str, recorded: bool = False) -> None:
        """Write again, whole, every remaining checkpoint whose values rest on a doomed one's
        events or writes (oldest first: a restatement serves those after it). One that cannot
        be written whole refuses the call by name, before anything is erased: before this call's
        deletion is recorded, or (`recorded`) after it, or an earlier one, was."""
        avoid = {pos for cid in doomed for pos, _, _ in (*line.positions.get(cid, ()), *line.write_events.get(cid, ()))}
        for cid in sorted(set(line.records) - line.deleted - doomed):  # stranded ones too: they are why this runs again
            record = line.records[cid]
            if not self._rests_on(line, record, avoid):  # on none of them, or served by a restatement before it
                continue
            own = record.stream if line.streams[record.stream].own else line.key
            try:
                self._retried(line, lambda: self._append(line, own, [self._restated(line, record)]))
            except InvalidEvent as error:  # its values add up to more than an event holds (each was stored in its own)
                if recorded:  # a checkpoint committed below this deletion, or resting on what an earlier one left
                    rests = "rests on deleted checkpoints whose payloads are still to be erased"
                    left = "the deleted checkpoints stay deleted (no longer read or listed) and nothing was erased"
                else:
                    rests, left = "rests on checkpoints this removes", "no checkpoint was removed"
                raise InvalidEvent(f"{reason} of LangGraph thread {line.thread_id!r}",
                                   f"checkpoint {cid!r} {rests}, so it must be written again whole first, and that event "
                                   f"is refused ({error.why}); {left} (one written again whole before it stays, and "
                                   "reads as it did). delete_thread removes the whole thread without writing anything "
                                   "again") from None
            line.refresh(self.store)

    def _rests_on(self, line: Line, record: Record, avoid: set[int]) -> bool:
        """Whether a checkpoint's values, header or metadata are read from the events at `avoid`."""
        try:
            line.values(record, self.serde, avoid)
        except (LookupError, StoreError):
            if not line.stranded(record.data["checkpoint_id"]):
                raise
            return False  # stranded on payloads already erased: its writer restates it from the checkpoint in hand
        except Broken:
            return True
        return False

    def _readers(self, stream: str) -> builtins.list[tuple[str | None, int]]:
        """The lines that read a stream's events, each with the offset below which it reads
        them: the stream's own line (all of them) and the lines of forks below it. A fork no
        LangGraph thread owns (made with `threadlog fork`, or `Store.fork`) is a reader named
        None: it reads the messages as its own history, and no checkpoint."""
        store = self.store
        out: builtins.list[tuple[str | None, int]] = [(stream.split(".")[0], 1 << 62)]
        for info in store.subtree(stream)[1:]:
            child = next(c for c in store.ancestry(info.id) if c.parent_id == stream)
            root = info.id.split(".")[0]
            owner = self._owners.get(root) or self._root_owner(store, root)
            out.append((None if owner in (None, _FOREIGN) else root, child.parent_offset or 0))
        for root in store.ids_starting(PREFIX, limit=1_000_000):  # copies that name the stream (or a fork of it)
            if "." not in root and store.thread(root).parent_id is not None:  # a copy's root is a fork
                other = self._peek(root)
                out.extend((root, stop) for sid, stop in other.copied.items()
                           if sid == stream or any(c.id == stream for c in store.ancestry(sid)))
        return out

    def _peek(self, key: str) -> Line:
        """Another line, by its root id (to ask what it has deleted)."""
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = Line(key, "", "")
        line.refresh(self.store)
        return line

    # -- async: the same calls, inline ---------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


def _named(line: Line, events: builtins.list[Json], error: InvalidEvent, first: int) -> InvalidEvent:
    """A refusal of `events` (the store names `events[first + i]`) said in LangGraph's terms:
    the thread, the checkpoint or task, and the message, channel or write the store refused
    ("events[1].data: is 41943358 bytes of JSON" named nothing a graph's author knows)."""
    match = re.match(r"events\[(\d+)\]", error.field)
    index = int(match.group(1)) - first if match else -1
    if not 0 <= index < len(events):
        return error
    event = events[index]
    data = event["data"]
    where = f"LangGraph thread {line.thread_id!r}" + (f", namespace {line.ns!r}" if line.ns else "")
    if event["type"] == "message.appended":
        what = f"{data.get('role', 'a')} message {data.get('message_id')!r}"
        return InvalidEvent(f"{where}: {what}", error.why)
    if event["type"] == "langgraph.checkpoint":
        whose = f"checkpoint {data['checkpoint_id']!r}"
        parts = [(f"channel {channel!r}" + (" (the graph's input)" if channel == "__start__" else ""),
                  {"checkpoint_id": data["checkpoint_id"], "values": {channel: record}})
                 for channel, record in data.get("values", {}).items()]
        parts.append(("metadata", {"checkpoint_id": data["checkpoint_id"], "metadata": data.get("metadata", {})}))
    elif event["type"] == "langgraph.writes":
        whose = f"writes of task {data['task_id']!r}"
        parts = [(f"channel {item['channel']!r}", {**data, "writes": [item]}) for item in data["writes"]]
    else:
        return InvalidEvent(f"{where}: {event['type']}", error.why)
    culprit = None
    for name, part in parts:  # the first refused on its own; else (too large only together) the largest
        try:
            prepare({"type": event["type"], "data": part}, 0)
        except InvalidEvent:
            culprit = name
            break
    if culprit is None and parts:
        culprit = max(parts, key=lambda pair: len(json.dumps(pair[1], default=str)))[0] + " (the largest)"
    return InvalidEvent(f"{where}, {whose}: {culprit}" if culprit else f"{where}, {whose}", error.why)


def _attempts() -> Iterator[bool]:
    """The tries of a write that other processes' appends to the same stream may refuse (each
    try re-reads what they wrote): yields whether this one is the last. Between tries, a random
    wait of up to 1 ms, doubling to at most 100 ms, for `_PATIENCE` seconds in all. A count of
    tries was not enough: a deletion appends an `event.redacted` per erased event, and every
    one of them has a writer that sees it read its whole line again."""
    deadline = time.monotonic() + _PATIENCE
    ceiling = 0.001
    while True:
        last = time.monotonic() + ceiling >= deadline
        yield last
        if last:
            return
        time.sleep(random.uniform(0, ceiling))
        ceiling = min(2 * ceiling, 0.1)


def _to_json(value: Any, serde: SerializerProtocol) -> Any:
    """A header or metadata field as JSON: as it is when plain, else as a stored record."""
    record = encode(value, None, serde)
    if ("json" in record or "text" in record) and not _looks_stored(value):  # plain (its dicts' key order is not kept)
        return value
    return {"__record__": _unversioned(record)}


def _looks_stored(value: Any) -> bool:
    """Whether a plain value reads as a stored record (`{"__record__": ...}`): such a value is
    stored as a record itself, so it reads back as it was put, never decoded."""
    return isinstance(value, dict) and len(value) == 1 and "__record__" in value


def _unversioned(record: Json) -> Json:
    """A record of a value that has no channel version (a write, a header field)."""
    record.pop("v", None)
    return record


def _from_json(value: Any, serde: SerializerProtocol) -> Any:
    if _looks_stored(value):
        return decode(value["__record__"], serde)
    return value
