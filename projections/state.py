"""`thread_state`: a thread's state as of any offset, folded from its logical history.

The fold reads raw `data` dicts (`Store.read_data`), never pydantic models: events were
validated when appended and `verify` checks their digests, so validating again would only
make replay slower. Redacted events keep a skeleton (`{"redacted": true}`, or a message
whose text is `[redacted]`), so every field is read with a default.

Fork rules, applied when the fold meets a `thread.forked` event (the first event of every
fork, right after the parent's events below the fork point):

- todos and metadata: `blank` (default), `inherit`, an explicit value, or for metadata
  `{"keep": [keys]}`. Title, system prompt, model, tools, thinking and request settings are
  the thread's configuration and come with the history, unless the fork's `config` replaces
  some of them (or, `blank`, all but the title); its `settings` replace the parent's key by
  key, a null removing one.
- every interrupt pending at the fork point is demoted (cancelled, reason `fork`) in the
  fork; the parent still has it pending. No run is open in a fork, and none has ended in it
  (`last_run` is the fork's own: its parent's runs are history, not the fork's runtime).
- tool calls the fork dropped (`unanswered="drop"`) vanish from the fork's messages.
- `context="note"`: the model view restarts with exactly one fork-note message naming the
  parent, the fork offset and where the parent's transcript is. The note stays first in
  the view even when the fork is later compacted: it is the pointer a summary cannot
  replace.

Compaction: the model view is the summary (as a user message) followed by the messages
at or after its `through_offset`; the log keeps every message.

With a snapshot, the state's scalar fields are ready at once and message bodies folded
before the snapshot are read from the store on the first access to `state.messages` (or
when the store closes, whichever comes first): a snapshot changes speed, never answers. So
are the messages of a fork that dropped a call, whose bodies alone tell which message held
nothing else (and so leaves the view).

`state.view` is the same model view, each message decoded only when a slice or an index asks
for it (a replay page, `show --last`). `thread_state(..., paged=True)` is for a reader of such
slices while the store is open: nothing is read when it closes, so a state that needs the
store (a snapshot's, or a fork's that dropped a call) cannot give its messages after that.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, overload

from eventstore import InvalidEvent, StaleSnapshot, Store, StoreError, ThreadInfo, collector
from eventstore.content import without_dropped
from eventstore.errors import Unreadable, shown
from eventstore.integrity import register_refold
from eventstore.ranges import is_index
from eventstore.recorded import Altered, decode

from . import snapshots
from .dropped import Drop, dropped_whole, fork_drops, locate
from .stops import cut_short, refusal

PROJECTION = "thread_state"
# What a redacted compaction's summary reads as (a redacted message's text is the same).
REDACTED = "[redacted]"
# Bump whenever the fold's output or its serialized form changes: old snapshots are ignored.
VERSION = 5  # 2: a dropped tool call is kept with its fork's offset (dropped.py);
# 3: saved with the fold's key order (a version 2 state had its keys sorted); 4: the last run's end;
# 5: a fork starts with no last run (it had its parent's)


def shown_as_run(data: Mapping[str, Any]) -> bool:
    """Whether a run's end (`run.finished` data) shows as a run of its own in rows and
    transcripts: one that failed or was cancelled, or ended `ok` with an error (a stream that
    failed after its whole answer came). Any other run is the messages it holds."""
    return data.get("status") in ("error", "cancelled") or bool(data.get("error"))


class Message(NamedTuple):
    """One message of the model view: `kind` is `message`, `summary` or `fork_note`;
    `offset` is the logical offset of the event it came from. `refusal` is for a reader, not
    the model (`to_param` leaves it out): for an answer the model refused, what it said of
    why (`projections.stops`, "" when nothing); None for any other message. `cut_short` is for a
    reader too: for an answer the model did not end whole, what cut it short and its stop reason
    (`cut off at the token limit (max_tokens)`; a paused answer only as the last message read);
    None for any other message."""

    role: str
    content: list[dict[str, Any]]
    offset: int
    kind: str = "message"
    refusal: str | None = None
    cut_short: str | None = None

    def to_param(self) -> dict[str, Any]:
        """The message as the Anthropic Messages API takes it."""
        return {"role": self.role, "content": self.content}

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it); `refusal` only for an answer
        the model refused, `cut_short` only for one it did not end whole."""
        fields = {"role": self.role, "content": self.content, "offset": self.offset, "kind": self.kind}
        if self.refusal is not None:
            fields["refusal"] = self.refusal
        if self.cut_short is not None:
            fields["cut_short"] = self.cut_short
        return fields


def fork_note(parent_id: str, parent_offset: int, transcript: str | None) -> str:
    """The text of the one message a `context="note"` fork shows the model."""
    if transcript:
        where = f"Its full transcript is saved at:\n{transcript}\nRead it with the `read` tool (or grep it)"
    else:
        # The id quoted for a shell, as the model will run it: a caller chooses ids, and one
        # holding `;` or `$(…)` would otherwise be a command of its own (`--` before one that
        # starts with `-`, which would read as an option). An id of letters, digits and
        # `_@%+=:,./-` reads as it did.
        command = (f"threadlog transcript {shlex.quote(parent_id)} --stop {parent_offset}" if not parent_id.startswith("-")
                   else f"threadlog transcript --stop {parent_offset} -- {shlex.quote(parent_id)}")
        where = f"Its full transcript is not saved to a file; print it with:\n{command}\nRun that (or grep its output)"
    return (
        f"This conversation is a fork of an earlier one (thread {parent_id}, forked at offset "
        f"{parent_offset}). {where} ONLY if you need earlier context — don't read it pre-emptively."
    )


class _Fold:
    """The accumulator: everything the state needs, JSON-serializable for snapshots.

    Messages folded in this run are kept whole in `msgs`; messages that came from a
    snapshot are only `base` offset ranges, read back when the view is built.
    """

    __slots__ = (
        "length", "title", "system", "model", "tools", "thinking", "settings", "metadata", "todos", "runs", "last_run", "interrupts",
        "demoted", "dropped", "note", "compaction", "fork", "base", "msgs",
    )

    def __init__(self) -> None:
        self.length = 0
        self.title: str | None = None
        self.system: Any = None
        self.model: str | None = None
        self.tools: list[Any] | None = None
        self.thinking: dict[str, Any] | None = None
        self.settings: dict[str, Any] = {}
        self.metadata: dict[str, Any] = {}
        self.todos: list[Any] = []
        self.runs: list[str] = []
        self.last_run: dict[str, Any] | None = None  # how the last run that finished ended (`ThreadState.last_run`)
        self.interrupts: dict[str, dict[str, Any]] = {}
        self.demoted: list[str] = []
        self.dropped: list[Drop] = []  # (tool_use id, fork offset): see dropped.py
        self.note: Message | None = None
        self.compaction: dict[str, Any] | None = None
        self.fork: dict[str, Any] | None = None
        self.base: list[list[int]] = []
        self.msgs: list[tuple[int, int, str]] = []  # (offset, schema version, data JSON), parsed on demand

    # -- folding -------------------------------------------------------------------------

    def fold(self, rows: Iterable[tuple[int, str, int, str]], unreadable: Callable[[int, BaseException], StoreError],
             bodies: bool = True) -> None:
        """Fold raw rows (`Store.read_raw`): message bodies stay JSON text until viewed.

        With `bodies=False` messages are not kept at all (the fold then holds only the
        scalar facts, in memory that does not grow with the thread). An event nested too
        deeply to parse, or whose data does not parse, raises `unreadable(offset, error)`.
        """
        append = self.msgs.append
        offset = self.length - 1
        try:
            for offset, type_, version, text in rows:
                if type_ == "message.appended":
                    if bodies:
                        append((offset, version, text))
                else:
                    self._other(offset, type_, decode(type_, version, text))
        except (RecursionError, Altered) as error:  # too deep, or not JSON (raw SQL rewrote it)
            raise unreadable(offset, error) from None
        self.length = offset + 1

    def _other(self, offset: int, type_: str, data: dict[str, Any]) -> None:
        if type_ == "run.started":
            if "run_id" in data:
                self.runs.append(data["run_id"])
        elif type_ == "run.finished":
            if data.get("run_id") in self.runs:
                self.runs.remove(data["run_id"])
            self.last_run = {"run_id": data.get("run_id"), "status": data.get("status"), "offset": offset,
                             **({"error": data["error"]} if data.get("error") else {})}
        elif type_ == "interrupt.raised":
            if "interrupt_id" in data:
                self.interrupts[data["interrupt_id"]] = {**data, "offset": offset}
        elif type_ in ("interrupt.resolved", "interrupt.cancelled"):
            self.interrupts.pop(data.get("interrupt_id", ""), None)
        elif type_ == "metadata.set":
            for key, value in (data.get("patch") or {}).items():
                if value is None:
                    self.metadata.pop(key, None)
                else:
                    self.metadata[key] = value
        elif type_ == "todos.set":
            if "todos" in data:
                self.todos = list(data["todos"])
        elif type_ == "title.set":
            if "title" in data:
                self.title = data["title"]
        elif type_ == "compaction.recorded":
            if "through_offset" in data:  # a redacted one keeps it: its summary reads as a redacted message's text
                self.compaction = {"offset": offset, "through_offset": data["through_offset"],
                                   "summary": data.get("summary", REDACTED)}
        elif type_ == "thread.created":
            self.title = data.get("title")
            self.system = data.get("system")
            self.model = data.get("model")
            self.tools = data.get("tools")
            self.thinking = data.get("thinking")
            self.settings = dict(data.get("settings") or {})
            self.metadata = dict(data.get("metadata") or {})
        elif type_ == "thread.forked":
            self._forked(offset, data)

    def _forked(self, offset: int, data: dict[str, Any]) -> None:
        options = data.get("options", {})
        todos = options.get("todos", "blank")
        if todos == "blank":
            self.todos = []
        elif todos != "inherit":
            self.todos = list(todos)
        metadata = options.get("metadata", "blank")
        if metadata == "blank":
            self.metadata = {}
        elif isinstance(metadata, dict) and set(metadata) == {"keep"} and isinstance(metadata["keep"], list):
            self.metadata = {k: v for k, v in self.metadata.items() if k in metadata["keep"]}
        elif metadata != "inherit":
            self.metadata = dict(metadata)
        config = options.get("config") or {}
        if config.get("blank"):
            self.system = self.model = self.tools = self.thinking = None
            self.settings = {}
        for key in ("system", "model", "tools", "thinking"):
            if key in config:
                setattr(self, key, config[key])
        changes = config.get("settings")
        if isinstance(changes, dict) and changes:
            settings = dict(self.settings)  # the parent's fold may share it: changed on a copy
            for key, value in changes.items():
                if value is None:
                    settings.pop(key, None)
                else:
                    settings[key] = value
            self.settings = settings
        self.demoted.extend(self.interrupts)
        self.interrupts = {}
        self.runs = []
        self.last_run = None
        self.dropped.extend(fork_drops(data, offset))
        self.fork = {
            "parent_id": data["parent_id"],
            "parent_offset": data["parent_offset"],
            "context": options.get("context", "full"),
            "retrieval": options.get("retrieval", "off"),
            "kind": options.get("kind", "fork"),
            "directive": options.get("directive"),
            "transcript": options.get("transcript"),
        }
        if self.fork["context"] == "note":
            text = fork_note(data["parent_id"], data["parent_offset"], options.get("transcript"))
            self.note = Message("user", [{"type": "text", "text": text}], offset, "fork_note")
            self.base, self.msgs[:], self.compaction, self.dropped = [], [], None, []

    # -- snapshots -------------------------------------------------------------------------

    def dump(self) -> dict[str, Any]:
        ranges = [list(r) for r in self.base]
        for offset, _, _ in self.msgs:
            if ranges and ranges[-1][1] == offset:
                ranges[-1][1] = offset + 1
            else:
                ranges.append([offset, offset + 1])
        dumped = {
            "length": self.length, "title": self.title, "system": self.system, "model": self.model,
            "tools": self.tools, "thinking": self.thinking, "metadata": self.metadata, "todos": self.todos, "runs": self.runs,
            "last_run": self.last_run, "interrupts": list(self.interrupts.values()), "demoted": self.demoted, "dropped": self.dropped,
            "note": self.note.to_json() if self.note else None, "compaction": self.compaction,
            "fork": self.fork, "messages": ranges,
        }
        if self.settings:
            # Only when there are some: a state without, saved before threads had settings, is
            # then the same bytes as one saved now, so `verify` (which compares a snapshot with
            # its refold byte for byte) passes on it, and readers still resume from it.
            dumped["settings"] = self.settings
        return dumped

    @classmethod
    def load(cls, raw: dict[str, Any]) -> _Fold:
        fold = cls()
        for key in ("length", "title", "system", "model", "tools", "metadata", "todos", "runs", "demoted", "dropped", "compaction", "fork"):
            setattr(fold, key, raw[key])
        fold.thinking = raw.get("thinking")  # absent from snapshots saved before threads had it
        fold.settings = raw.get("settings", {})  # absent when there are none (`dump`)
        fold.last_run = raw["last_run"]
        fold.dropped = [(tool_use_id, offset) for tool_use_id, offset in raw["dropped"]]
        fold.interrupts = {i["interrupt_id"]: i for i in raw["interrupts"]}
        note = raw["note"]
        fold.note = Message(note["role"], note["content"], note["offset"], note["kind"]) if note else None
        fold.base = _ranges(raw["messages"], fold.length)
        return fold


def _ranges(raw: Any, length: int) -> list[list[int]]:
    """A snapshot's message ranges (`_Fold.dump`), as the view takes them: ascending
    [lo, hi) pairs of offsets below the snapshot's length. The view lists every offset they
    hold, so ranges altered outside threadlog were taken at their word: one of a trillion
    offsets was a list of a trillion, and ranges out of order a refusal of an empty range
    nobody asked for. `ValueError` or `TypeError` for any other: the snapshot is then not used."""
    ranges: list[list[int]] = []
    floor = 0
    for lo, hi in raw:
        if not (type(lo) is int and type(hi) is int and floor <= lo < hi <= length):
            raise ValueError(f"the message range {[lo, hi]!r} is not one of offsets {floor}..{length - 1}")
        ranges.append([lo, hi])
        floor = hi
    return ranges


class ThreadState:
    """A thread's state after its first `length` events (see the module doc for the rules).

    `messages` is the model view (a list of `Message`), `view` the same decoded a slice at a
    time; `status` is `running` while a run is open, else `interrupted` while an interrupt is
    pending, else `idle`. `last_run` is how the last run that finished ended (its `run_id`,
    `status`, `offset` and `error`, if any), or None (a fork's own: none until a run of its
    own ends): a turn that failed or was cancelled leaves the thread idle, and says so there.
    Two states are equal when their JSON forms are.
    """

    def __init__(self, store: Store, info: ThreadInfo, fold: _Fold, head_hash: str | None, paged: bool = False) -> None:
        self.id = info.id
        self.parent_id = info.parent_id
        self.parent_offset = info.parent_offset
        self.kind = info.kind
        self.length = fold.length
        self.head_hash = head_hash
        self.title = fold.title
        self.system = fold.system
        self.model = fold.model
        self.tools = fold.tools
        self.thinking = fold.thinking
        self.settings = fold.settings
        self.metadata = fold.metadata
        self.todos = fold.todos
        self.pending_interrupts = list(fold.interrupts.values())
        self.demoted_interrupts = list(fold.demoted)
        self.dropped_tool_use_ids = [tool_use_id for tool_use_id, _ in fold.dropped]
        self.status = "running" if fold.runs else "interrupted" if fold.interrupts else "idle"
        self.open_runs = list(fold.runs)
        self.last_run = fold.last_run
        fork = fold.fork or {}
        self.context = fork.get("context", "full")
        self.retrieval = fork.get("retrieval", "off")
        self.directive = fork.get("directive")
        self.compaction = {k: v for k, v in fold.compaction.items() if k != "summary"} if fold.compaction else None
        self._store, self._thread, self._fold = store, info.id, fold
        self._view: View | None = None
        self._messages: list[Message] | None = None
        # Bodies from before a snapshot are still in the store, and the messages holding the calls
        # a fork dropped are found there: read the view before it closes.
        if (fold.base or fold.dropped) and not paged:
            store.finish_before_close(self)

    @property
    def messages(self) -> list[Message]:
        """The model view: the fork note, the compaction summary, then the messages from the
        compaction point on; read from the store when first asked."""
        if self._messages is None:
            with collector.paused():  # see fold_state
                self._messages = self._paged()[:]
        return self._messages

    @property
    def view(self) -> Sequence[Message]:
        """The model view as `messages` holds it, each message decoded only when a slice or an
        index asks for it: for a reader of a part of it (a page), while the store is open. Once
        `messages` is read (as it is when the store closes, unless `paged`), it is that list."""
        return self._paged() if self._messages is None else self._messages

    def _paged(self) -> View:
        if self._view is None:
            self._view = View(self._store, self._thread, self._fold)
        return self._view

    def store_closing(self) -> None:
        """Read the message bodies still in the store, which is about to close."""
        try:
            self.messages
        except StoreError:  # e.g. a damaged page: `messages` will raise it again when asked
            pass

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return {
            "id": self.id, "parent_id": self.parent_id, "parent_offset": self.parent_offset, "kind": self.kind,
            "status": self.status, "title": self.title, "length": self.length, "head_hash": self.head_hash,
            "context": self.context, "retrieval": self.retrieval, "directive": self.directive,
            "metadata": self.metadata, "todos": self.todos, "pending_interrupts": self.pending_interrupts,
            "demoted_interrupts": self.demoted_interrupts, "dropped_tool_use_ids": self.dropped_tool_use_ids,
            "open_runs": self.open_runs, "last_run": self.last_run, "compaction": self.compaction, "model": self.model,
            "system": self.system, "tools": self.tools, "thinking": self.thinking, "settings": self.settings,
            "messages": [m.to_json() for m in self.messages],
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ThreadState) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<ThreadState {self.id} length={self.length} status={self.status} messages={len(self.view)}>"


class View(Sequence[Message]):
    """The model view (`ThreadState.messages`) as a sequence whose messages are decoded only
    when asked for: a replay page of the last 100 messages of a thread of 100,000 decoded every
    one of them (0.3 s of the page's 0.5 s).

    Its length and the place of each message come from the fold alone: the fork note and the
    compaction summary, then the messages at or after the compaction point, less any whose
    every block is a tool call a fork dropped (only those are decoded to tell). A message the
    fold kept is decoded from the text it holds; one folded before a snapshot is read from the
    store (a slice's in one read), so a slice is read while the store is open.
    """

    def __init__(self, store: Store, thread: str, fold: _Fold) -> None:
        self._store, self._thread = store, thread
        through = fold.compaction["through_offset"] if fold.compaction else 0
        self._head: list[Message] = [fold.note] if fold.note else []
        if fold.compaction:
            summary = [{"type": "text", "text": fold.compaction["summary"]}]
            self._head.append(Message("user", summary, fold.compaction["offset"], "summary"))
        # A snapshot's ranges hold the offsets of messages alone (`_Fold.dump`).
        stored = [offset for lo, hi in fold.base for offset in range(max(lo, through), hi)]
        kept = fold.msgs[bisect.bisect_left(fold.msgs, (through,)):]
        self._dropped = locate(store, thread, fold.dropped) if fold.dropped else {}
        if self._dropped:  # a message that held a dropped call and nothing else is out of the view
            located = self._read([offset for offset in stored if offset in self._dropped])
            located_kept = [row for row in kept if row[0] in self._dropped]
            gone = self._gone(itertools.chain(located, located_kept))
            stored = [offset for offset in stored if offset not in gone]
            kept = [row for row in kept if row[0] not in gone]
        self._stored: list[int] = stored
        self._kept: list[tuple[int, int, str]] = kept
        # The last message of the view, the one a paused answer (`pause_turn`) is marked cut short
        # on: a message a fork's drop left out does not go on from it (rows and transcripts leave
        # it out too), and the fork's request ends on the paused answer.
        self._last: int | None = kept[-1][0] if kept else stored[-1] if stored else None

    def __len__(self) -> int:
        return len(self._head) + len(self._stored) + len(self._kept)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            lo, hi, step = index.indices(len(self))
            return self._slice(lo, hi) if step == 1 else [self[i] for i in range(lo, hi, step)]
        whole = len(self)
        if not -whole <= index < whole:
            raise IndexError("model view index out of range")
        index %= whole
        return self._slice(index, index + 1)[0]

    def __iter__(self) -> Iterator[Message]:
        return iter(self._slice(0, len(self)))

    def _slice(self, lo: int, hi: int) -> list[Message]:
        """Messages lo..hi-1 (0 <= lo <= hi <= len)."""
        out = self._head[lo:hi]
        lo, hi = max(lo - len(self._head), 0), max(hi - len(self._head), 0)
        split = len(self._stored)
        stored, kept = self._stored[lo:hi], self._kept[max(lo - split, 0):max(hi - split, 0)]
        return out + self._messages(itertools.chain(self._read(stored), kept))

    def _read(self, offsets: list[int]) -> Iterator[tuple[int, int, str]]:
        """The stored rows (offset, schema version, data JSON) of the messages at `offsets`
        (ascending), read from the store in one range."""
        if not offsets:
            return
        wanted = iter(offsets)
        want = next(wanted)
        for offset, type_, version, text in self._store.read_raw(self._thread, offsets[0], offsets[-1] + 1):
            if offset == want and type_ == "message.appended":
                yield offset, version, text
                want = next(wanted, -1)
        if want != -1:  # a snapshot altered outside threadlog: a cache, but the view's places come from it
            raise Unreadable(f"a snapshot of thread {self._thread!r} shows a message at offset {want}, which its history "
                             "does not hold there: the file was altered outside threadlog; `threadlog verify` names where")

    def _gone(self, rows: Iterable[tuple[int, int, str]]) -> set[int]:
        """The offsets of the messages of stored rows (offset, schema version, data JSON) that
        held dropped calls alone (`dropped_whole`): out of the view."""
        gone = set()
        offset = -1
        try:
            for offset, version, text in rows:
                if dropped_whole(decode("message.appended", version, text).get("content") or [], self._dropped[offset]):
                    gone.add(offset)
        except (RecursionError, Altered) as error:  # named by its position, as the readers name it
            raise self._store.unreadable(self._thread, offset, error) from None
        return gone

    def _messages(self, rows: Iterable[tuple[int, int, str]]) -> list[Message]:
        """The messages of stored rows (offset, schema version, data JSON), less the tool calls
        a fork dropped (one loop: the whole view of a long thread is made here)."""
        dropped = self._dropped
        out = []
        offset = -1
        try:
            for offset, version, text in rows:
                data = decode("message.appended", version, text)
                content = data.get("content") or []
                if dropped and offset in dropped:
                    content = without_dropped(content, dropped[offset])
                out.append(Message(data.get("role", "user"), content, offset, refusal=refusal(data),
                                   cut_short=cut_short(data, last=offset == self._last)))
        except (RecursionError, Altered) as error:  # named by its position, as the readers name it
            raise self._store.unreadable(self._thread, offset, error) from None
        return out


def _check_at(info: ThreadInfo, at: int | None) -> int:
    if at is None:
        return info.head
    if not is_index(at, 0, info.head):
        raise InvalidEvent("at", f"{shown(at)} is outside thread {info.id!r}: it holds {info.head} events, so at must be 0..{info.head}")
    return at


def fold_state(store: Store, thread: str, at: int | None = None, *, use_snapshots: bool = True,
               bodies: bool = True) -> tuple[ThreadInfo, _Fold, int]:
    """The accumulator after the first `at` events (resuming from the nearest snapshot).

    `bodies=False`: messages folded here are left out (see `_Fold.fold`), for a caller that
    streams them from the store itself.
    """
    info = store.thread(thread)
    at = _check_at(info, at)
    fold = _Fold()
    found = snapshots.nearest(store, PROJECTION, VERSION, thread, at) if use_snapshots else None
    if found is not None:
        offset, cached = found
        try:
            loaded: _Fold | None = _Fold.load(cached)
        except (KeyError, TypeError, ValueError, AttributeError):
            loaded = None
        # A state that does not load, or is not of the events it says it caches, was altered
        # outside threadlog (`verify` names it): a cache, so the events are folded instead.
        if loaded is not None and loaded.length == offset:
            fold = loaded
    if fold.length < at:
        with collector.paused():  # the fold keeps what it parses and makes no cycles
            fold.fold(store.read_raw(thread, fold.length, at), functools.partial(store.unreadable, thread), bodies)
    return info, fold, at


def thread_state(store: Store, thread: str, at: int | None = None, *, use_snapshots: bool = True,
                 paged: bool = False) -> ThreadState:
    """`thread`'s state as of its first `at` events (default: all of them).

    `at=k` means what it means everywhere: offsets 0..k-1 of the logical history, exactly
    what a fork at k starts from. Snapshots only make it faster; `use_snapshots=False`
    folds from the first event and must give an equal state.

    `paged=True`: for a reader of a part of the model view (`state.view[i:j]`) while the store
    is open; the messages folded before a snapshot are then not all read when it closes.
    """
    info, fold, at = fold_state(store, thread, at, use_snapshots=use_snapshots)
    if at == 0:
        head_hash = None
    elif at == info.head:
        head_hash = info.head_hash
    else:
        head_hash = store.event_at(thread, at - 1).hash
    return ThreadState(store, info, fold, head_hash, paged)


def save_snapshot(store: Store, thread: str, at: int | None = None) -> int:
    """Cache the state of `thread` after its first `at` events; returns the offset cached.

    Later calls of `thread_state` on this thread (at or above that offset) and on its forks
    made at or above it resume from here instead of folding from the first event.
    """
    for attempt in range(3):
        as_of = store.last_position()  # a redaction after this makes the fold stale
        _, fold, offset = fold_state(store, thread, at)
        if offset == 0:
            raise InvalidEvent("at", "a snapshot needs at least one event")
        try:
            snapshots.save(store, PROJECTION, VERSION, thread, offset, fold.dump(), as_of=as_of)
            return offset
        except StaleSnapshot:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _refold(store: Store, thread: str, offset: int) -> dict[str, Any]:
    """The state a snapshot at `offset` must hold, folded from the events alone."""
    return fold_state(store, thread, offset, use_snapshots=False)[1].dump()


register_refold(PROJECTION, VERSION, _refold)
