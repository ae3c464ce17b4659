"""`ThreadlogSession`: the OpenAI Agents SDK's `Session`, stored in a threadlog store.

    session = ThreadlogSession("user-42", Store("threadlog.db"))   # instead of SQLiteSession(...)
    await Runner.run(agent, "Hello", session=session)

Items are `message.appended` events: `item` holds the SDK's item verbatim (canonical JSON:
the same value, keys sorted) and `content` one text block saying what it is (a message's
text, `→ name(arguments)` for a tool call, `← output` for its result, as
`openai_agents_items` writes each kind of item; its first 1,048,576 characters,
`TEXT_KEPT`, when the item and its text would not fit in one event together), so
transcripts, search, display rows and the viewer read an agent run like any other thread,
and `redact` erases an item with its text. An assistant message keeps its item's `status` as
its `stop_reason` (`incomplete`: the model did not finish it, marked cut short); one holding
a `refusal` part is refused (`stop_reason: refusal`, the part's words its `stop_details`
explanation, left out of its text).

A session is a set of named branches (`main`, then those `create_branch_from_turn` makes,
as `AdvancedSQLiteSession` has them); each branch lives in one thread at a time. Branching
is a fork: O(1), nothing copied. Finding the fork point (the offset of user turn n) needs
the offsets of the user items: this object keeps them as it reads and writes, and caches
them as a snapshot when finding them took a long read, so a new object or process reads
only the items added since. `pop_item` and `clear_session` never delete: the branch's
thread gets a last event, a `metadata.set` of `openai_agents.superseded_by`, naming the
thread the branch continues in: a fork just below the popped item, or a new empty thread
after a clear. The log keeps everything, `threadlog tree` shows every step, and the view
(`get_items`) changes.

Concurrency: that last event is the commit point. Every append to a branch's thread states
the head it expects, so a writer that missed a pop or a clear made by another process (or
another session object) fails that check, follows `superseded_by` and writes where the
branch now lives; two processes may share a session. The new thread is made after the
superseding event; if a process dies in between, the next reader makes it (its id and fork
point are in that event).

A `Store` is meant for one thread, so the methods do their (short) SQLite work on the
calling thread, the event loop's, instead of handing it to a worker thread as the SDK's
SQLite sessions do. A session used on another thread than the one that made it (as the SDK's
serve any: `Runner.run_sync` in a threaded server's workers) opens a store of that thread's
own on the same file, and the calls of threads sharing one session object run one at a time.
Which branch is current is this object's state, as in the SDK: a new
session object starts on `main`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

from eventstore import ConcurrencyError, ForkRefused, InvalidEvent, StaleSnapshot, Store, StoreError, ThreadNotFound
from eventstore.events import too_deep
from eventstore.prepare import MAX_EVENT_BYTES, check_encodable
from projections.stops import REFUSED, source_stop_reason

from .openai_agents_items import describe, refused


if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["ThreadlogSession"]

KEY = "openai_agents"  # the metadata key of a session's threads
MAIN = "main"
ACTOR = "openai-agents"
_MESSAGE = "message.appended"
# The characters of an item's text its `content` keeps when the item and a whole copy of its
# text would not fit in one event (a tool output over about 16 MiB): the item holds it all.
TEXT_KEPT = 1024 * 1024
# The user turns' offsets are cached as a snapshot (a cache: dropping it changes no answer)
# once finding them took a read of at least SNAPSHOT_AFTER events.
TURNS, TURNS_VERSION, SNAPSHOT_AFTER = "openai_agents.turns", 1, 256

Row = tuple[int, str, dict[str, Any]]  # (offset, type, data), as `Store.read_data` gives them


@dataclass
class _View:
    """A branch's current thread and its head when last seen (what the next append expects)."""

    thread: str
    head: int


@dataclass
class _Turns:
    """The offsets of a thread's user items (turn n at `offsets[n - 1]`), for offsets below `seen`."""

    seen: int = 0
    offsets: list[int] = field(default_factory=list)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _one_at_a_time(method: Callable[Concatenate[ThreadlogSession, _P], Coroutine[Any, Any, _R]]
                   ) -> Callable[Concatenate[ThreadlogSession, _P], Coroutine[Any, Any, _R]]:
    """A session call holding the session's lock: threads sharing one session object share its
    view of the branch (the head an append expects, the turns read so far), so a pop could fork
    below an item another thread had just added. The calls never wait on the event loop (their
    SQLite work is inline), so the lock is never held across a suspension."""
    @functools.wraps(method)
    async def call(self: ThreadlogSession, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return await method(self, *args, **kwargs)
    return call


# A session id is the title and metadata of its threads, a branch name the metadata of its fork:
# one of tens of megabytes was refused at the first write as an event's data the caller never
# wrote. Any text is a name up to this (twice over, escaped, well inside an event's 32 MiB).
MAX_NAME_CHARS = 1_000_000


def _check_name(field: str, name: str) -> None:
    if len(name) > MAX_NAME_CHARS:
        raise InvalidEvent(field, f"must be at most {MAX_NAME_CHARS:,} characters, not {len(name):,}")
    check_encodable(field, name)


class ThreadlogSession:
    """An Agents SDK session (`get_items`, `add_items`, `pop_item`, `clear_session`) with
    `AdvancedSQLiteSession`'s branches (`create_branch_from_turn`, `switch_to_branch`,
    `list_branches`, `delete_branch`, …), stored as threadlog threads.

    `store` is a `Store`, or a path to open one at (closed by `close()`). Errors from the
    store are `StoreError`s; the branch calls raise `ValueError` where the SDK's do.
    """

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, store: Store | str | os.PathLike[str], *,
                 session_settings: SessionSettings | dict[str, Any] | None = None) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidEvent("session_id", f"must be a non-empty string, not {session_id!r}")
        _check_name("session_id", session_id)
        self.session_id = session_id
        self.session_settings = coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        self._owned = not isinstance(store, Store)
        self._store = store if isinstance(store, Store) else Store(os.fspath(store))
        self._lock = threading.RLock()
        self._base = "agents-" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        self._branch = MAIN
        self._view: _View | None = None
        self._turns: dict[str, _Turns] = {}

    def __repr__(self) -> str:
        return f"ThreadlogSession({self.session_id!r}, branch={self._branch!r}, store={self.store.path!r})"

    @property
    def store(self) -> Store:
        """The store given (or opened from the path given); it serves every thread that calls
        the session, each through a connection of its own."""
        return self._store

    @property
    def current_branch(self) -> str:
        return self._branch

    @property
    def thread(self) -> str | None:
        """The thread the current branch lives in now (None before its first item)."""
        with self._lock:
            view = self._current(create=False)
            if view is not None:
                self._moved(view)  # another process may have moved the branch on
                view = self._current(create=False)
            return view.thread if view is not None else None

    def close(self) -> None:
        """Close the store if this session opened it; a store passed in stays open."""
        if self._owned:
            self._store.close()

    # -- the Session protocol ---------------------------------------------------------------

    @_one_at_a_time
    async def get_items(self, limit: int | None = None, branch_id: str | None = None) -> list[TResponseInputItem]:
        """The current branch's items (or branch `branch_id`'s, as `AdvancedSQLiteSession` takes
        it; [] for a branch that has none), oldest first; with `limit` (or the settings' limit),
        the latest `limit` of them. Reads the store every time: another process's writes show."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit == 0:
            return []
        count = limit if limit is not None and limit > 0 else None
        while (view := self._current(create=False) if branch_id is None else self._resolve(branch_id)) is not None:
            rows = self._window(view, count)
            if rows is None:
                continue  # the branch moved on: read where it lives now
            items = [item for _, type_, data in rows if type_ == _MESSAGE and (item := item_of(data)) is not None]
            return cast("list[TResponseInputItem]", items[-count:] if count else items)
        return []

    @_one_at_a_time
    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items to the current branch, atomically (all or none)."""
        items = list(items)  # any iterable, as the SDK's sessions take: it is read twice below
        if not items:
            self.store.last_position()  # one short read: a closed store refuses this as any other call
            return
        events = [message_event(item, i) for i, item in enumerate(cast("list[Any]", items))]
        while True:
            view = self._current(create=True)
            assert view is not None
            try:
                recorded = self.store.append(view.thread, events, expect=view.head)
            except ConcurrencyError:
                self._moved(view)  # another writer got there first, or the branch moved on
                continue
            except InvalidEvent as error:  # events[i] is items[i]: named as the caller passed it
                if not error.field.startswith("events["):
                    raise
                raise InvalidEvent("items" + error.field.removeprefix("events"), error.why) from None
            turns = self._turns.get(view.thread)
            if turns is not None and turns.seen == view.head:
                turns.offsets.extend(e.offset for e, item in zip(recorded, items) if _is_turn(cast("Any", item)))
                turns.seen = recorded[-1].offset + 1
            view.head = recorded[-1].offset + 1
            return

    @_one_at_a_time
    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the current branch's latest item from its view and return it (None when empty).

        The item stays in the log: the branch continues in a fork just below it.
        """
        while (view := self._current(create=False)) is not None:
            rows = self._window(view, 1)
            if rows is None:
                continue
            last = next(((offset, item) for offset, type_, data in reversed(rows)
                         if type_ == _MESSAGE and (item := item_of(data)) is not None), None)
            if last is None:
                return None
            offset, item = last
            nxt = self._new_thread_id()
            try:
                self.store.append(view.thread, [self._superseded(self._branch, nxt, offset, "pop_item")], expect=view.head)
            except ConcurrencyError:
                self._moved(view)
                continue
            self._continue(view.thread, nxt, offset, self._branch)
            # Not the new thread's head as read: another process may already have written
            # there and popped again, and an append expecting a head past that pop's
            # superseding event would go where no reader follows. `_follow` checks.
            self._view = self._follow(nxt)
            return cast("TResponseInputItem", item)
        return None

    @_one_at_a_time
    async def clear_session(self) -> None:
        """Empty every branch of the session; `main` continues in a new empty thread, the
        others end (their names stay used). The current branch becomes `main`."""
        branches = self._branches()
        for name, first in sorted(branches, key=lambda pair: pair[0] == MAIN):  # main last
            self._end(name, "clear_session", first)
        self._branch, self._view = MAIN, None

    # -- branches (AdvancedSQLiteSession's calls) -------------------------------------------------

    @_one_at_a_time
    async def create_branch_from_turn(self, turn_number: int, branch_name: str | None = None) -> str:
        """A new branch holding the current branch's items before its user turn `turn_number`
        (1 is the first user message), made current; returns its name. A fork: O(1).

        Raises ValueError when that turn has no user message, or the name is blank or taken.
        """
        if branch_name is not None and not branch_name.strip():
            raise ValueError("Branch name cannot be empty")
        if branch_name is not None:
            _check_name("branch_name", branch_name)
        view, offsets = self._turn_offsets()
        if isinstance(turn_number, bool) or not isinstance(turn_number, int) or not 1 <= turn_number <= len(offsets):
            raise ValueError(f"Turn {turn_number} does not contain a user message in branch '{self._branch}' "
                             f"(it has {len(offsets)} user turns)")
        assert view is not None
        at = offsets[turn_number - 1]
        name = branch_name if branch_name is not None else self._free_name(f"branch_from_turn_{turn_number}_{int(time.time())}")
        first = self._first(name)
        try:  # a name already used (by anyone, at any time) makes the fork's new id refused: no check first
            head = self._start(view.thread, first, at, name)
        except (InvalidEvent, ConcurrencyError):
            if self._exists(first):
                raise ValueError(f"Branch ID '{name}' has already been used. Choose a new branch ID.") from None
            raise
        self._branch, self._view = name, _View(first, head)
        return name

    @_one_at_a_time
    async def create_branch_from_content(self, search_term: str, branch_name: str | None = None) -> str:
        """A branch from the first user turn whose text contains `search_term` (case-insensitive)."""
        found = await self.find_turns_by_content(search_term)
        if not found:
            raise ValueError(f"No user turns found containing '{search_term}'")
        return await self.create_branch_from_turn(found[0]["turn"], branch_name)

    @_one_at_a_time
    async def switch_to_branch(self, branch_id: str) -> None:
        """Make `branch_id` current; ValueError if it does not exist (`main` always does)."""
        view = self._resolve(branch_id)
        if view is None and branch_id != MAIN:
            raise ValueError(f"Branch '{branch_id}' does not exist")
        self._branch, self._view = branch_id, view

    @_one_at_a_time
    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        """End a branch (its events stay in the log; its name stays used). Not `main`; the
        current branch only with `force=True`, which switches to `main`."""
        if not branch_id or not branch_id.strip():
            raise ValueError("Branch ID cannot be empty")
        if branch_id == MAIN:
            raise ValueError("Cannot delete the 'main' branch")
        if branch_id == self._branch and not force:
            raise ValueError(f"Cannot delete current branch '{branch_id}'. Use force=True or switch branches first")
        if self._resolve(branch_id) is None:
            raise ValueError(f"Branch '{branch_id}' does not exist")
        self._end(branch_id, "delete_branch", self._first(branch_id))
        if branch_id == self._branch:
            self._branch, self._view = MAIN, None

    @_one_at_a_time
    async def list_branches(self) -> list[dict[str, Any]]:
        """Every branch holding items: branch_id, message_count, user_turns, is_current,
        created_at (the time of its first event), oldest first. Reads each branch's items."""
        out = []
        for name, first in self._branches():
            view = self._resolve(name) if name is not None else None
            if view is None:
                continue
            items = [item for _, type_, data in self.store.read_data(view.thread)
                     if type_ == _MESSAGE and (item := item_of(data)) is not None]
            if not items:
                continue  # as in the SDK, a branch is listed while it holds items
            info = self.store.thread(first)
            out.append({"branch_id": name, "message_count": len(items), "user_turns": sum(map(_is_turn, items)),
                        "is_current": name == self._branch, "created_at": self.store.event_at(first, info.base).recorded_at})
        return sorted(out, key=lambda branch: str(branch["created_at"]))

    @_one_at_a_time
    async def get_conversation_turns(self, branch_id: str | None = None) -> list[dict[str, Any]]:
        """The user turns of a branch (the current one by default): turn, content (first 100
        characters), full_content, timestamp, can_branch."""
        view = self._current(create=False) if branch_id is None else self._resolve(branch_id)
        if view is None:
            return []
        turns: list[dict[str, Any]] = []
        for event in self.store.read(view.thread):
            item = item_of(event.data) if event.type == _MESSAGE else None
            if item is not None and _is_turn(item):
                content = item.get("content", "")
                turns.append({"turn": len(turns) + 1, "content": _preview(content, 100), "full_content": content,
                              "timestamp": event.recorded_at, "can_branch": True})
        return turns

    @_one_at_a_time
    async def find_turns_by_content(self, search_term: str, branch_id: str | None = None) -> list[dict[str, Any]]:
        """The user turns whose text (a string, or its parts' `text`) contains `search_term`,
        ignoring the case of ASCII letters only, as the SDK does (SQLite's LIKE); as in the SDK,
        `content` is the whole text, not a preview."""
        wanted = re.compile(re.escape(search_term), re.IGNORECASE | re.ASCII)
        return [{**turn, "content": _preview(turn["full_content"], None)} for turn in await self.get_conversation_turns(branch_id)
                if any(wanted.search(text) for text in _texts(turn["full_content"]))]

    # -- where a branch lives -------------------------------------------------------------------

    def _first(self, branch: str) -> str:
        """The id of a branch's first thread: fixed by the session and the branch name."""
        key = MAIN if branch == MAIN else hashlib.sha256(branch.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return f"{self._base}/{key}"

    def _new_thread_id(self) -> str:
        """A thread a branch continues in (outside the `/` names, so `_branches` skips it)."""
        return f"{self._base}+{secrets.token_hex(8)}"

    def _exists(self, thread: str) -> bool:
        try:
            self.store.thread(thread)
        except ThreadNotFound:
            return False
        return True

    def _metadata(self, branch: str) -> dict[str, Any]:
        return {KEY: {"session_id": self.session_id, "branch": branch}}

    def _superseded(self, branch: str | None, nxt: str | None, at: int | None, by: str) -> dict[str, Any]:
        """The event that ends a thread's time as its branch's: where the branch goes on
        (`superseded_by`: None ends the branch) and from which offset (`at`: None starts empty).
        A branch whose name a redaction erased (None) is not named again."""
        named = self._metadata(branch)[KEY] if branch is not None else {"session_id": self.session_id}
        mark = {**named, "superseded_by": nxt, "at": at, "by": by}
        return {"type": "metadata.set", "data": {"patch": {KEY: mark}}, "meta": {"actor": ACTOR}}

    def _current(self, create: bool) -> _View | None:
        """The current branch's view; a branch that ended elsewhere falls back to `main`
        (as the SDK's does after a clear). With `create`, `main` gets its first thread."""
        if self._view is not None:
            return self._view
        view = self._resolve(self._branch)
        if view is None and self._branch != MAIN:
            self._branch = MAIN
            view = self._resolve(MAIN)
        if view is None and create:
            first = self._first(MAIN)
            try:
                self.store.create_thread(title=self.session_id, metadata=self._metadata(MAIN), thread_id=first, actor=ACTOR)
                view = _View(first, 1)
            except ConcurrencyError:  # another process made it first
                view = self._resolve(MAIN)
        self._view = view
        return view

    def _resolve(self, branch: str) -> _View | None:
        """Where `branch` lives now, or None when it has no thread (or has ended)."""
        first = self._first(branch)
        return self._follow(first) if self._exists(first) else None

    def _follow(self, thread: str) -> _View | None:
        """From `thread`, follow `superseded_by` to the thread that is current (None: ended).
        A mark sending the branch back to a thread it came through (written by hand: a session
        names a new thread) is a StoreError, not a walk round that circle for ever."""
        passed = {thread}
        while True:
            head = self.store.head(thread)
            _, type_, data = next(self.store.read_data(thread, head - 1))
            mark = superseded(type_, data)
            if mark is None:
                return _View(thread, head)
            nxt = mark["superseded_by"]
            if nxt is None:
                return None
            if not isinstance(nxt, str) or nxt in passed:
                where = ("a thread it already came through; its threads go round in a circle" if isinstance(nxt, str)
                         else "which names no thread")
                raise StoreError(f"session {self.session_id!r}, branch {mark.get('branch', self._branch)!r}: thread {thread!r} "
                                 f"ends saying the branch goes on in {nxt!r}, {where} (a `metadata.set` of "
                                 "`openai_agents.superseded_by` not written by a session)")
            passed.add(nxt)
            self._continue(thread, nxt, mark.get("at"), str(mark.get("branch", self._branch)))
            thread = nxt

    def _moved(self, view: _View) -> None:
        """Re-read the current view after an append was refused: a new head, or a new thread."""
        new = self._follow(view.thread)
        self._view = new if new is None or new.thread != view.thread else _View(view.thread, new.head)

    def _window(self, view: _View, count: int | None) -> list[Row] | None:
        """The view's last events, holding at least `count` items (all of them when None);
        None when the thread has been superseded (the view is then re-read)."""
        head = self.store.head(view.thread)
        size = 2 * count + 4 if count is not None else head
        while True:
            start = max(0, head - size)
            rows = list(self.store.read_data(view.thread, start, head))
            if superseded(*rows[-1][1:]) is not None:
                self._moved(view)
                return None
            view.head = head
            if count is None or start == 0 or sum(1 for _, type_, data in rows if type_ == _MESSAGE and item_of(data)) >= count:
                return rows
            size *= 2

    def _turn_offsets(self) -> tuple[_View | None, list[int]]:
        """The current view and the offsets of its user items: read from where this object last
        looked, else from the nearest snapshot of them (a new object, a new process), else all."""
        while (view := self._current(create=False)) is not None:
            head = self.store.head(view.thread)
            turns = self._turns.get(view.thread)
            if turns is None:
                cached = self.store.nearest_snapshot(TURNS, TURNS_VERSION, view.thread, head)
                turns = self._turns[view.thread] = _Turns(cached[0], cached[1]["offsets"]) if cached else _Turns()
            if head == turns.seen:
                return view, turns.offsets
            as_of = self.store.last_position()
            rows = list(self.store.read_data(view.thread, turns.seen, head))
            if superseded(*rows[-1][1:]) is not None:
                self._moved(view)
                continue
            turns.offsets.extend(offset for offset, type_, data in rows
                                 if type_ == _MESSAGE and (item := item_of(data)) is not None and _is_turn(item))
            turns.seen = view.head = head
            if len(rows) >= SNAPSHOT_AFTER:  # spare the next reader (another object or process) this read
                with contextlib.suppress(StaleSnapshot):  # a redaction since `as_of`: the next reader folds again
                    self.store.save_snapshot(TURNS, TURNS_VERSION, view.thread, head, {"offsets": turns.offsets}, as_of=as_of)
        return None, []

    def _continue(self, thread: str, nxt: str, at: int | None, branch: str) -> None:
        """Make the thread a branch continues in, unless it exists."""
        if not self._exists(nxt):
            try:
                self._start(thread, nxt, at, branch)
            except (InvalidEvent, ConcurrencyError):
                if not self._exists(nxt):  # not a race with another process making it
                    raise

    def _start(self, thread: str, new: str, at: int | None, branch: str) -> int:
        """Thread `new` for `branch`: `thread`'s first `at` events (a fork), or empty when
        `at` is None or nothing below it is a message; returns its head. Knows its turns when
        `thread`'s are known."""
        metadata = self._metadata(branch)
        known = self._turns.get(thread)
        if at is not None:
            try:
                # Fork the highest ancestor with the same first `at` events: a branch popped
                # again and again stays one fork deep instead of growing a chain of forks.
                self.store.fork(self._shallowest(thread, at), at=at, fork_id=new, metadata=metadata,
                                unanswered="drop", busy="allow", actor=ACTOR)
                if known is not None and known.seen >= at:
                    self._turns[new] = _Turns(at + 1, [offset for offset in known.offsets if offset < at])
                return at + 1
            except ForkRefused as refused:
                if refused.reason != "empty":
                    raise
        self.store.create_thread(title=self.session_id, metadata=metadata, thread_id=new, actor=ACTOR)
        self._turns[new] = _Turns(1, [])
        return 1

    def _shallowest(self, thread: str, at: int) -> str:
        """The highest of `thread` and its ancestors that holds its first `at` events."""
        return self.store.ancestry(thread, at - 1)[-1].id

    def _end(self, branch: str | None, by: str, first: str) -> None:
        """Supersede a branch's thread (`first`, the branch's first thread, followed to where it
        lives): `main` goes on empty in a new thread, others end. A branch whose name a
        redaction erased (None) is not named again in its mark."""
        while (view := self._follow(first) if self._exists(first) else None) is not None:
            if branch == MAIN and view.head == 1:
                return  # an empty main (only its thread.created): nothing to clear
            nxt = self._new_thread_id() if branch == MAIN else None
            try:
                self.store.append(view.thread, [self._superseded(branch, nxt, None, by)], expect=view.head)
            except ConcurrencyError:
                continue
            if nxt is not None:  # (main's)
                self._continue(view.thread, nxt, None, MAIN)
            return

    def _branches(self) -> list[tuple[str | None, str]]:
        """(name, first thread) of every branch ever made in this session, ended ones too. A
        first thread whose first event was redacted (it held the session id, or the branch's
        name) is `main` when its id is main's, else a branch whose name is gone (None)."""
        out: list[tuple[str | None, str]] = []
        for first in self.store.ids_starting(self._base + "/", limit=1_000_000):
            _, type_, data = next(self.store.read_data(first, self.store.thread(first).base))
            mark = _mark(type_, data)
            if mark is not None:
                out.append((str(mark["branch"]), first))
            elif data.get("redacted") is True:
                out.append((MAIN if first == self._first(MAIN) else None, first))
        return out

    def _free_name(self, name: str) -> str:
        taken, suffix, candidate = True, 1, name
        while taken:
            taken = self._exists(self._first(candidate))
            if taken:
                suffix += 1
                candidate = f"{name}_{suffix}"
        return candidate


# -- items as messages --------------------------------------------------------------------------


def message_event(item: Any, index: int = 0) -> dict[str, Any]:
    """The `message.appended` event that stores one SDK item. A plain text message
    (`{"role": "user" | "assistant", "content": "<text>"}`, nothing else) is its text alone:
    `item_of` gives it back exactly, and the store takes it by its text fast path."""
    if not isinstance(item, dict):
        raise InvalidEvent(f"items[{index}]", f"must be a dict (an Agents SDK input item), not {type(item).__name__}")
    if _plain_text(item):
        return {"type": _MESSAGE, "data": {"role": item["role"], "content": item["content"]}}
    try:
        role, text = describe(item)
    except RecursionError:  # the text is written before the store reads the item: refused as the store refuses it
        raise too_deep({"item": item}, f"items[{index}].data") from None
    return {"type": _MESSAGE, "data": {"role": role, "content": _kept(text, item), "item": item, **_stopped(item)}}


def _kept(text: str, item: dict[str, Any]) -> str:
    """A copy of the item's text (or of its refusal's words) as the event keeps it beside the
    item: whole, or its first `TEXT_KEPT` characters when both would not fit in one event."""
    if len(text) > TEXT_KEPT and _json_bytes(item) + _json_bytes(text) > MAX_EVENT_BYTES:
        return f"{text[:TEXT_KEPT]}\n[… {len(text) - TEXT_KEPT:,} more characters, kept in the item]"
    return text


def _stopped(item: dict[str, Any]) -> dict[str, Any]:
    """How an assistant message item says it stopped, as an answer's event keeps it: refused
    when it holds a `refusal` part (`stop_reason: refusal`, the part's words as its
    `stop_details` explanation, as an Anthropic refusal gives them; whatever its `status`),
    else its `status` in its own words (`completed`; `incomplete` when the model did not
    finish it, which `projections.stops` marks cut short). The SDK's items give no other (no
    `finish_reason`). Only an answer has one: a user's message, a tool call or reasoning with
    a status has none."""
    if item.get("type") not in (None, "message") or item.get("role") != "assistant":
        return {}
    words = refused(item)
    if words is not None:
        return {"stop_reason": REFUSED, "stop_details": {"type": REFUSED, **({"explanation": _kept(words, item)} if words else {})}}
    status = source_stop_reason(item.get("status"))
    return {"stop_reason": status} if status is not None else {}


def _json_bytes(value: Any) -> int:
    """About the bytes `value` takes in an event's JSON (what the store's size limit counts)."""
    try:
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):  # refused by the store, by name, when the item is stored
        return 0


def _plain_text(item: dict[str, Any]) -> bool:
    """An item `item_of` rebuilds exactly from a message holding only its text."""
    content = item.get("content")
    return (len(item) == 2 and type(item.get("role")) is str and item["role"] in ("user", "assistant")
            and type(content) is str and content.strip() != "" and type(item) is dict)


def item_of(data: dict[str, Any]) -> dict[str, Any] | None:
    """The SDK item a message event stands for: its `item`, verbatim; for a message without
    one (appended by other means) a message item with its text, if it has any. A redacted
    item comes back as a placeholder of its kind (`_placeholder`)."""
    item = data.get("item")
    if isinstance(item, dict):
        return _placeholder(item) if data.get("redacted") is True else item
    text = "\n".join(block["text"] for block in data.get("content") or () if block.get("type") == "text")
    return {"role": data.get("role", "user"), "content": text} if text else None


def _placeholder(kept: dict[str, Any]) -> dict[str, Any] | None:
    """What stands for a redacted item, from what its redaction kept (its type, role, call id
    and name): a message of its role saying `[redacted]`, a tool call with no arguments, a
    tool output of `[redacted]` answering its call; so turns keep their numbers and calls their
    outputs. An item of another kind (reasoning, ...) is left out: nothing of it is left to send."""
    kind, role, call_id = kept.get("type"), kept.get("role"), kept.get("call_id")
    if kind in (None, "message") and role is not None:
        return {**({"type": kind} if kind else {}), "role": role, "content": "[redacted]"}
    if call_id is None or not isinstance(kind, str):
        return None
    if kind.endswith("_output"):
        return {"type": kind, "call_id": call_id, "output": "[redacted]"}
    if kind == "function_call":
        return {"type": kind, "call_id": call_id, "name": kept.get("name", ""), "arguments": "{}"}
    if kind == "custom_tool_call":
        return {"type": kind, "call_id": call_id, "name": kept.get("name", ""), "input": ""}
    return None


def _is_turn(item: dict[str, Any]) -> bool:
    """A user message starts a turn (the SDK's own rule)."""
    return item.get("role") == "user"


def _preview(content: Any, limit: int | None) -> str:
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return text[:limit] + "..." if limit is not None and len(text) > limit else text


def _texts(content: Any) -> list[str]:
    """The texts a turn is searched in: its content when a string, else its parts' `text`."""
    if isinstance(content, str):
        return [content]
    parts = content if isinstance(content, list) else []
    return [part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str)]


def _mark(type_: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """A session thread's own metadata, from its first event (thread.created or thread.forked)."""
    metadata = data.get("metadata") if type_ == "thread.created" else (data.get("options") or {}).get("metadata")
    mark = metadata.get(KEY) if isinstance(metadata, dict) else None
    return mark if isinstance(mark, dict) and "branch" in mark else None


def superseded(type_: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """The mark of an event that ends a thread's time as its branch's, or None."""
    if type_ != "metadata.set":
        return None
    mark = (data.get("patch") or {}).get(KEY)
    return mark if isinstance(mark, dict) and "superseded_by" in mark else None
