"""`Store`: append, read, fork, fan out, verify and redact, over one storage backend.

Validation, canonical JSON and digests are computed before the write lock is taken
(`prepare`); only the head check, the position, the hashes and the inserts happen inside it.
The store speaks to storage only through `backend.Backend`; `Store(path)` opens SQLite,
`Store("postgresql://…")` PostgreSQL.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from . import cuts, forks, integrity, interrupted, restore, textindex
from .backend import NO_BOUND, Backend, DataRow, EventRow, EventValues, SnapshotRow, StreamRow
from .errors import (MISSHAPEN, ConcurrencyError, IntegrityError, InvalidEvent, KeyClash, Locked, OldPagesKept, StaleSnapshot,
                     StoreError, ThreadNotFound, Unreadable, named, shown)
from .events import EventRedacted, MessageAppended, ThreadCreated, unwritable_key
from .content import tool_result_ids
from .facts import Facts, advance, after_fork, check_interrupted_call
from .head import Head
from .claims import Claim, check_name
from .collector import paused
from .connections import Connections
from .verify import VerifyReport, verify, verify_since
from .ids import check_id, event_ids
from .prepare import (META_KEYS, PreparedEvent, check_flag, check_items, check_text, check_thread, check_thread_id, new_id, now,
                      prepare, prepare_text)
from .ranges import check_index, clip, is_index, missing, segments, whole
from .skeleton import skeleton_of
from .recorded import (Altered, RecordedEvent, ThreadInfo, acyclic, altered, altered_stream, decode, from_row, make_tuple,
                       too_deep, unbroken)
from .restore import RestoreReport
from .sqlite import SQLiteBackend

DEFAULT_PLACEHOLDER = forks.DEFAULT_PLACEHOLDER

# Events only the store itself writes, through the operation named.
_RESERVED = {"thread.forked": "fork() or fan_out()", "event.redacted": "redact()"}
# The events that raise and settle interrupts (`interrupted.py`).
_INTERRUPTS = (interrupted.RAISED, *interrupted.SETTLED)

# Batches from this size append with the cyclic garbage collector paused (`collector.py`).
_PAUSE_FROM = 64

Expect = str | int

_Row = TypeVar("_Row", bound=tuple[Any, ...])
_V = TypeVar("_V")  # what `Store._up_each` reads of one stream
_R = TypeVar("_R")  # what it gives for a history

# How many streams' heads a store remembers (`Store._known`); past that it forgets the oldest.
_KNOWN_HEADS = 4096


class _Chain:
    """A batch being numbered and chained onto a head (`Store._write`). `rows` makes each row
    as it is asked for, so a backend that streams rows to its server sends the first while
    the rest are hashed; once every row was asked for, the attributes hold what the last one
    left: the next offset and position, the head hash, the facts and the first message."""

    __slots__ = ("offset", "position", "prev", "facts", "facts_json", "first_message", "recorded")

    def __init__(self, head: Head, position: int) -> None:
        self.offset, self.position, self.prev, self.facts = head.offset, position, head.hash, head.facts
        self.facts_json, self.first_message = head.facts.dump(), head.first_message
        self.recorded: list[RecordedEvent] = []

    def rows(self, thread: str, batch: Sequence[PreparedEvent], recorded_at: str, stamps: Sequence[str] | None,
             legacy: Sequence[bool] | None = None, doubted: dict[int, InvalidEvent] | None = None) -> Iterator[EventValues]:
        """The batch's rows; `stamps` are their times when restored, else each is `recorded_at`;
        `legacy` marks the restored events the first layout hashed (`legacy_chain_hash`).
        `doubted` is given by a restore of a thread whose pending facts are in doubt (see
        `eventstore/refold.py`): an event that contradicts them is noted there, by its index
        in the batch, and written with the facts unchanged, instead of refused."""
        offset, position, prev, facts, facts_json, first_message = (self.offset, self.position, self.prev, self.facts,
                                                                    self.facts_json, self.first_message)
        start, recorded, chain_hash = offset, self.recorded, integrity.chain_hash
        for type_, version, data, data_json, digest, meta, meta_json, event_id, _, plain in batch:
            if plain:
                pass  # text only: no tool call, result, run or interrupt to track
            elif type_ == "thread.forked":
                facts = after_fork(facts, data)
                facts_json = facts.dump()
            else:
                # A second start of an open run left the thread running after its finish (the
                # state counts starts, the facts do not); an interrupt on a tool call not waiting
                # for its result was answered into nothing. Refused here, not in `advance`, and
                # only in appends (no `stamps`): a file an older release wrote may hold either,
                # and neither verifying it nor restoring its backup should fail.
                if type_ == "run.started" and stamps is None and data["run_id"] in facts.runs:
                    raise InvalidEvent(f"events[{offset - start}].data.run_id",
                                       f"run {named(data['run_id'])} is already in progress; every open run needs its own id")
                if type_ == "interrupt.raised" and stamps is None:
                    check_interrupted_call(facts, data, f"events[{offset - start}].data")
                try:
                    after = advance(facts, type_, data, f"events[{offset - start}].data")
                except InvalidEvent as error:
                    if doubted is None:
                        raise
                    doubted[offset - start], after = error, facts
                if after is not facts:  # `advance` returns the same object when nothing changes
                    facts, facts_json = after, after.dump()
                # A restored redacted compaction keeps the through_offset its export gives, unvalidated
                # (its skeleton is the data): checked here, as every compaction's is.
                problem = cuts.through_offset_problem(type_, data, offset)
                if problem:
                    raise InvalidEvent(f"events[{offset - start}].data.through_offset", problem)
            if first_message is None and type_ == "message.appended":
                first_message = offset
            if stamps is not None:
                recorded_at = stamps[offset - start]
            if legacy is not None and legacy[offset - start]:
                hash_ = integrity.legacy_chain_hash(prev, position, thread, offset, event_id, type_, version, recorded_at,
                                                    meta_json, digest)
            else:
                hash_ = chain_hash(prev, thread, offset, event_id, type_, version, recorded_at, meta_json, digest)
            recorded.append(make_tuple(RecordedEvent, (position, thread, offset, event_id, type_, data, meta, recorded_at,
                                                       hash_, version, digest, False)))
            # The digest goes with the row only when restored: a restored skeleton's data is not
            # what its digest covers (see `EventValues`).
            yield (position, thread, offset, event_id, type_, version, data_json, meta_json, recorded_at,
                   None if stamps is None else digest, hash_, facts_json, None)
            prev = hash_
            position += 1
            offset += 1
        self.offset, self.position, self.prev, self.facts, self.facts_json, self.first_message = (
            offset, position, prev, facts, facts_json, first_message)


class Counts(NamedTuple):
    threads: int  # streams: root threads and forks
    events: int


class Strays(NamedTuple):
    """The threads whose rows (altered outside threadlog) put them out of place in the fork
    trees (`Store.strays`)."""

    orphans: int  # forks whose parent's row is gone: each is the top of a tree of its own
    first_orphan: ThreadInfo | None  # the oldest of them
    unplaced: int  # the threads on or below a cycle of parents: in no tree at all
    first_cycle: str | None = None  # the least id on the first such cycle found


class ClosingReader(Protocol):
    """Something that reads from a store lazily and must finish before the store closes."""

    def store_closing(self) -> None: ...


def _check_expect(expect: Any) -> None:
    if isinstance(expect, bool) or not (
        expect in ("any", "no_stream", "stream_exists") or (isinstance(expect, int) and expect >= 0)
    ):
        raise InvalidEvent("expect", f"must be 'any', 'no_stream', 'stream_exists' or a head >= 0, not {shown(expect)}")


def _infos(threads: Any) -> list[ThreadInfo]:
    """`threads`, refused unless each is a `ThreadInfo` (an id or a dict failed on its missing
    attributes, deep in the walk)."""
    check_items("threads", threads, "a list of ThreadInfo (as threads() gives it)")
    infos = list(threads)
    for index, info in enumerate(infos):
        if not isinstance(info, ThreadInfo):
            raise InvalidEvent(f"threads[{index}]", "must be a ThreadInfo (as thread() and threads() give them), not "
                                                    f"{type(info).__name__}")
    return infos


def _listed(row: StreamRow) -> ThreadInfo:
    """A row of a listing (`Store.threads`) as read, refused as `ThreadInfo.from_row` refuses
    one, and also where its last_position is past every position: the next page's `before`
    could name no such position, nor the listing place the thread among the others."""
    info = ThreadInfo.from_row(row)
    if info.last_position >= NO_BOUND:
        raise altered_stream(row, "last_position", "a position")
    return info


def _check_projection(projection: Any, version: Any) -> None:
    """Refuse a snapshot's key of another kind: a version given as text was stored as it was, and
    a dict or an int past 2**63 failed in the driver."""
    check_text("projection", projection, "a projection's name")
    check_index("version", version, what="a version")


def is_url(target: str | os.PathLike[str]) -> bool:
    """Whether `target` names a PostgreSQL database (`postgresql://…`, the scheme in any case, as
    URLs take it) rather than a SQLite file."""
    return os.fspath(target).split("://", 1)[0].lower() in ("postgresql", "postgres")


# The longest wait for a lock: SQLite's busy timeout (and PostgreSQL's lock_timeout) is a
# 32-bit count of milliseconds.
MAX_TIMEOUT = (2**31 - 1) // 1000


def unnamable(path: str | os.PathLike[str]) -> bool:
    """Whether no file can have the name `path`: it holds a NUL, or a lone surrogate the file
    system's encoding cannot hold (Python's file functions raise ValueError or UnicodeEncodeError)."""
    try:
        return b"\0" in os.fsencode(path)
    except UnicodeEncodeError:
        return True


def special_file(path: str) -> str | None:
    """What `path` is when it exists and is neither a file nor a directory ("a device", "a
    pipe", "a socket"), following symlinks; None otherwise."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    return "a socket" if stat.S_ISSOCK(mode) else None


def _open(target: str | os.PathLike[str], synchronous: str | None, timeout: float | None, read_only: bool,
          on_wait: Callable[[], None] | None, on_migrate: Callable[[int, int], None] | None = None) -> Backend:
    """The backend for a path or URL: a SQLite file (or `:memory:`), or a `postgresql://` URL."""
    text = os.fspath(target)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 <= timeout <= MAX_TIMEOUT):  # NaN fails this too
        raise StoreError(f"timeout must be a number of seconds from 0 to {MAX_TIMEOUT} (about 24 days), not {shown(timeout)}")
    if is_url(text):
        return _postgres(text, synchronous, timeout, read_only, on_wait, on_migrate)
    if unnamable(text):  # the driver raised ValueError or UnicodeEncodeError
        raise StoreError(f"{shown(text)} cannot name a file: it holds a character no file name can (a NUL, or a lone "
                         "surrogate); pass a file path (--db)")
    special = special_file(text)
    if special is not None:  # SQLite failed on one as on a failing disk ("it may be full"), and left a journal by it
        raise StoreError(f"{text} is {special}, not a database file; pass a file path (--db)")
    return SQLiteBackend(text, synchronous="NORMAL" if synchronous is None else synchronous,
                         timeout=30.0 if timeout is None else timeout, read_only=read_only, on_wait=on_wait,
                         on_migrate=on_migrate)


def _postgres(url: str, synchronous: str | None, timeout: float | None, read_only: bool,
              on_wait: Callable[[], None] | None, on_migrate: Callable[[int, int], None] | None) -> Backend:
    """A PostgreSQL backend (psycopg is an optional dependency: the `postgres` extra)."""
    if synchronous is not None or on_wait is not None or on_migrate is not None:
        raise StoreError("synchronous, on_wait and on_migrate are SQLite settings; on PostgreSQL durability is the "
                         "server's (synchronous_commit)")
    try:
        from .postgres import PostgresBackend
    except ImportError:
        raise StoreError('PostgreSQL needs psycopg: pip install "threadlog[postgres]"') from None
    return PostgresBackend(url, timeout=30.0 if timeout is None else timeout, read_only=read_only)


class Store:
    """An event-sourced conversation store over one backend: a SQLite file (or `":memory:"`),
    or a PostgreSQL database.

    `Store(path)` opens (creating or migrating) a SQLite file, `Store("postgresql://…")` a
    PostgreSQL database (`eventstore/postgres.py`; `timeout` applies there too, the other
    settings are SQLite's and are refused); `Store(backend)` runs on any
    object that keeps the `backend.Backend` contract. A `Store` serves any thread: each thread
    that uses it gets a connection of its own, at its first call (a `:memory:` database, which
    lives in one connection, serves only the thread that opened it). Every write runs in a
    write transaction, so several processes can share a file safely (writers queue on
    SQLite's lock for up to `timeout` seconds). `synchronous="FULL"` makes each commit
    durable across power loss; the default `"NORMAL"` (in WAL mode) is durable across a
    process crash but may lose the last commits on power loss. Both are SQLite settings:
    with a backend object, set them on the `SQLiteBackend`. `read_only=True` opens an
    existing file for reading only (never creating it; a read-only file, directory or medium
    can be read and verified); `on_wait` is called once when a writer has waited a second
    for another writer's lock (it then waits the rest of `timeout`); `on_migrate(old, new)`
    as the opening starts migrating a file an older release wrote (a large one takes a while).
    """

    def __init__(self, path: str | Path | Backend = "threadlog.db", synchronous: str | None = None,
                 timeout: float | None = None, *, read_only: bool = False, on_wait: Callable[[], None] | None = None,
                 on_migrate: Callable[[int, int], None] | None = None) -> None:
        if not isinstance(read_only, int) or read_only not in (0, 1):  # read_only="no" opened the file read-only
            raise StoreError(f"read_only must be True or False, not {shown(read_only)}")
        reopen: Callable[[], Backend] | None = None
        if isinstance(path, (str, os.PathLike)):
            backend: Backend = _open(path, synchronous, timeout, read_only, on_wait, on_migrate)
            reopen = functools.partial(_open, path, synchronous, timeout, read_only, on_wait, on_migrate)  # for another thread
        elif not callable(getattr(path, "transaction", None)):  # Store(None) failed only at its first call
            raise StoreError(f"a store opens a file path, a postgresql:// URL or a storage backend, not {type(path).__name__}")
        elif synchronous is not None or timeout is not None or read_only or on_wait is not None or on_migrate is not None:
            raise StoreError("synchronous, timeout, read_only, on_wait and on_migrate are settings of the SQLite backend: "
                             "pass them to SQLiteBackend(path, ...), not to Store(backend)")
        else:
            backend = path
        # Each thread's connection, with the heads its own writes left (see `_append_known`).
        self._connections = Connections(backend, reopen)
        # The readers to call before closing (`finish_before_close`), registered from any thread;
        # the threads calling them in `close()`, and whether it called the last of them.
        self._readers: weakref.WeakValueDictionary[int, ClosingReader] = weakref.WeakValueDictionary()
        self._reader_ids = itertools.count()
        self._readers_lock = threading.Lock()
        self._closing: set[int] = set()
        self._readers_done = False

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def backend(self) -> Backend:
        """The calling thread's connection: the one the store opened, on the thread that opened
        it; on another thread, one of its own on the same database (`eventstore/connections.py`)."""
        return self._connections.get().backend

    @property
    def _known(self) -> dict[str, Head] | None:
        """The head this thread's last write to each stream left, when the backend can check
        one on the server (`backend.AppendAtHead`): see `_append_known`."""
        return self._connections.get().known

    @property
    def path(self) -> str:
        """The database's name: a file path, `:memory:` or a URL."""
        return self._connections.own.backend.path

    @property
    def read_only(self) -> bool:
        """Whether this store was opened read-only: it never writes (`Store(..., read_only=True)`)."""
        return bool(getattr(self._connections.own.backend, "read_only", False))

    @property
    def timeout(self) -> float:
        """How many seconds a write waits for a lock another connection holds (`Store(..., timeout=)`)
        before it is refused (`Locked`)."""
        return float(getattr(self._connections.own.backend, "timeout", 30.0))

    @property
    def files(self) -> list[str]:
        """The files the database lives in, which nothing else may write: a SQLite file with
        its `-wal`, `-shm` and `-journal` (whether they exist now or not); none for a server
        or an in-memory database."""
        if not isinstance(self._connections.own.backend, SQLiteBackend) or self.path == ":memory:" or self.path.startswith("file:"):
            return []
        # SQLite follows a symlink and keeps its log beside the file it names: both names count.
        names = dict.fromkeys((self.path, os.path.realpath(self.path)))
        return [name + suffix for name in names for suffix in ("", "-wal", "-shm", "-journal")]

    def _sqlite(self) -> SQLiteBackend:
        backend = self._connections.own.backend  # (every thread's has the same settings)
        if not isinstance(backend, SQLiteBackend):
            raise StoreError(f"{self.path} is not a SQLite database: it has no SQLite settings")
        return backend

    @property
    def synchronous(self) -> str:
        """SQLite's `synchronous` setting for this connection."""
        return self._sqlite().synchronous

    @property
    def journal_mode(self) -> str:
        """SQLite's journal mode (`wal` for files, `memory` for `:memory:`)."""
        return self._sqlite().journal_mode

    def schema_version(self) -> int:
        """The version of the database's schema (this release's, once opened)."""
        return self.backend.schema_version()

    def counts(self) -> Counts:
        """How many threads (forks included) and events the database holds."""
        return Counts(*self.backend.counts())

    def count_snapshots(self) -> int:
        """How many projection states are cached (see `save_snapshot`)."""
        return self.backend.count_snapshots()

    def consistent(self) -> AbstractContextManager[None]:
        """`with store.consistent():` every read inside sees the log as of one moment (one read
        transaction), however other connections write meanwhile (they are not blocked). What
        reads the log in several queries and must agree with itself runs in one: an export,
        whose stream lines must name every stream its events are in. Write through another
        `Store` meanwhile, not this one."""
        return self.backend.read_transaction()

    def wait_for_writes(self) -> None:
        """Return once every write that took a position before this call has committed or
        rolled back (other connections' included; `Locked` after `timeout`). On PostgreSQL a
        write takes its positions when it starts and commits later, so a read can see an event
        of one thread while a lower position, in another thread, is still to commit; what must
        see everything below a position it wrote (a deletion, before it erases what rests on
        what it deleted) reads after this. On SQLite there is nothing to wait for. Refused
        (`StoreError`, nothing waited for) inside a transaction on this store, a read view
        (`with store.consistent():`) included, whose reads would not see what it waited for:
        call it after the transaction ends."""
        self.backend.wait_for_writes()

    def claim(self, name: str) -> Claim:
        """Take the claim `name` on this database, or raise `Claimed` (with the holder's process
        id when known) if another holds it: one process at a time does what the name stands
        for. `with store.claim("follow-pi"):` holds it for the block (`threadlog import pi
        --follow` holds that one while it runs); it is taken when called, without waiting, and
        held until `release()`, the end of the block, or the returned object's collection.
        The operating system (or the server) lets go of it when the process ends, however it
        ends (Ctrl-C, SIGKILL, a crash), so none is left to clear by hand.

        Claims of other names are independent, and so are other databases'. A second claim of a
        name is refused within one process too. `name` is lowercase letters and digits in
        words joined by hyphens, at most 64 characters. On SQLite it is an advisory lock on a
        file beside the database, `<database>-<name>.lock`, which stays (emptied) once
        released: POSIX only (on Windows nothing is claimed), and a database in memory, which
        no other process can open, claims nothing. On PostgreSQL it is a session advisory lock
        on a connection of its own, for the store's schema (`eventstore/claims.py`).
        """
        check_name(name)
        return self.backend.claim(name)

    def finish_before_close(self, reader: ClosingReader) -> None:
        """Call `reader.store_closing()` just before this store closes, while it can still read.

        For results that read lazily (a thread state resumed from a snapshot reads its older
        message bodies on first use): they read what they still need then, so closing the
        store never changes an answer. Held weakly: a reader that is gone costs nothing. One that
        a reader's `store_closing()` registers is called too. Once `close()` has begun, another
        thread's reader is refused (`StoreError`: the store is closed), as that thread's next
        call would be: its lazy read would fail on the closed store.
        """
        if not callable(getattr(reader, "store_closing", None)):  # it raised AttributeError from close()
            raise InvalidEvent("reader", "must have a store_closing() method, which the store calls before it closes; "
                                         f"{type(reader).__name__} has none")
        with self._readers_lock:
            # Taken while the store closed, a reader was forgotten uncalled, and answered no more
            # once it had; and threads registering readers without end kept close() from ending.
            if (self._closing or self._readers_done) and threading.get_ident() not in self._closing:
                raise self._connections.closed_error()
            try:
                self._readers[next(self._reader_ids)] = reader
            except TypeError:  # no weak reference to it: a class with __slots__ and no __weakref__ among them
                raise InvalidEvent("reader", f"is held weakly, and {type(reader).__name__} objects cannot be: give the "
                                             "class a __weakref__ slot") from None

    def close(self) -> None:
        """Let the readers still waiting on the store (`finish_before_close`) read what they need,
        then close the calling thread's connection (another thread's, the opening one's too, closes
        at that thread's next call, which raises, or when it ends: `eventstore/connections.py`).
        `with Store(...)` calls it."""
        # One at a time until none is left: a reader's reads may register another. Each is called
        # outside the lock (for that), and one that raises leaves the others registered.
        me = threading.get_ident()
        with self._readers_lock:
            self._closing.add(me)
        try:
            while True:
                with self._readers_lock:
                    try:
                        _, reader = self._readers.popitem()
                    except KeyError:
                        self._readers_done = True
                        break
                reader.store_closing()
        finally:
            with self._readers_lock:
                self._closing.discard(me)
        self._connections.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- threads ------------------------------------------------------------------------------

    def _stream(self, thread: str, field: str = "thread") -> StreamRow:
        check_thread(field, thread)
        row = self.backend.stream(thread)
        if row is None:
            raise ThreadNotFound(thread)
        return row

    def thread(self, thread: str) -> ThreadInfo:
        """The stream `thread`: its parent and fork point, root, depth, head and kind; raises
        `ThreadNotFound` when there is none."""
        return ThreadInfo.from_row(self._stream(thread))

    def threads(self, limit: int | None = 20, before: int | None = None, *, forks: bool = True,
                root: str | None = None, below: tuple[int, str] | None = None) -> list[ThreadInfo]:
        """Threads by latest activity, newest first (forks too unless `forks=False`), at most
        `limit`; threads of one `last_position` (only raw SQL gives two threads one) by id, the
        highest first (ids compared as UTF-8 bytes, as Python compares str).

        Pages: pass the last one's `(last_position, id)` as `below` for the next page, which
        neither skips nor repeats a thread tied with it. `before` is a position: only threads
        last active before it (those tied with a page's last one at its `last_position` and
        not on that page are left out). The first page reads about `limit` rows of an index,
        however many threads the file holds. `root` lists that thread and every fork below it
        instead (reads that subtree).

        A thread whose row raw SQL gave no position for its last activity (text, NULL, a
        blob, a negative number, a number past every position) is refused by name
        (`StoreError`) by the pages that reach where the backend's index holds it: on
        SQLite, those reaching the listing key its row kept; on PostgreSQL, whose index
        keeps no other place for it, every page (a seek at each end of the index). No page
        lists the threads around it without a word.
        """
        check_index("limit", limit, what="a count", optional=True)
        check_index("before", before, what="a position", optional=True)
        if below is not None:
            if before is not None:
                raise InvalidEvent("below", "a page starts below a listed thread or before a position: give one of them")
            if not isinstance(below, tuple) or len(below) != 2:
                raise InvalidEvent("below", f"must be a listed thread's (last_position, id), not {shown(below)}")
            check_index("below", below[0], what="a position")
            check_id("below", below[1])  # no thread has another (PostgreSQL refused a NUL as a database error)
        if root is None:
            bound, tied = (before, None) if below is None else below
            return [_listed(row) for row in self.backend.recent_streams(limit, bound, forks, tied)]
        infos = sorted(map(_listed, self.backend.subtree(self._stream(root, "root").id)),
                       key=attrgetter("last_position", "id"), reverse=True)
        return [info for info in infos if (before is None or info.last_position < before)
                and (below is None or (info.last_position, info.id) < below)][:limit]

    def ids_starting(self, prefix: str, limit: int = 20) -> list[str]:
        """Thread ids (forks included) that start with `prefix`, in order, at most `limit`."""
        check_index("limit", limit, 1, what="a count")
        check_text("prefix", prefix, "the start of a thread id")
        return self.backend.streams_with_prefix(prefix, limit)

    def orphaned(self, threads: Iterable[ThreadInfo]) -> set[str]:
        """The ids of the `threads` that are forks whose parent is not in the file (only raw SQL
        deletes a row, or alters a fork's parent_id): a parent among `threads` is known, the
        others are looked up together, in one query at most, not one for each thread."""
        infos = list(threads)
        given = {info.id for info in infos}
        parents = {info.id: info.parent_id for info in infos if info.parent_id is not None}
        asked = set(parents.values()) - given
        held = given | (self.backend.streams_held(asked) if asked else set())
        return {fork for fork, parent in parents.items() if parent not in held}

    def threads_starting(self, prefix: str, after: int = 0) -> list[ThreadInfo]:
        """Threads (forks included) whose id starts with `prefix` and that gained an event past
        position `after` (`last_position()` read before an earlier call): what changed among
        them since, in id order, without a lookup for each of those that did not."""
        check_index("after", after, what="a position")
        check_text("prefix", prefix, "the start of a thread id")
        return [ThreadInfo.from_row(row) for row in self.backend.streams_with_prefix_after(prefix, after)]

    def all_threads(self) -> list[ThreadInfo]:
        """Every stream, in creation order (a parent before its forks)."""
        return list(self.each_thread())

    def each_thread(self) -> Iterator[ThreadInfo]:
        """`all_threads` one at a time as they are read, in memory bounded however many the file
        holds: call it inside `consistent()` for the threads of one moment."""
        return map(ThreadInfo.from_row, self.backend.streams())

    def tops(self) -> Iterator[ThreadInfo]:
        """The thread at the top of each fork tree, oldest first: every root, and every fork
        whose parent's row is gone (only raw SQL deletes one), each parent looked up by its id,
        so memory stays bounded however many threads the file holds."""
        return map(ThreadInfo.from_row, self.backend.streams(tops=True))

    def strays(self) -> Strays:
        """The forks whose parent's row is gone, and how many threads a cycle of parents puts
        in no tree (it, and every fork below it): what a listing of the trees leaves out or
        puts at a top of its own, as only raw SQL makes either. One read of the streams, each
        parent looked up by its id, gives the few forks whose parent was not written before
        them (none, in a file no one altered); each is followed up its chain of parents, and
        each cycle's threads are counted once. Call it inside `consistent()` to agree with
        other reads."""
        orphans, first, unplaced, first_cycle = 0, None, 0, None
        cycles: set[str] = set()  # each cycle by the least id on it
        for row in self.backend.streams(strays=True):
            chain = self.backend.ancestry(row.id)  # up to a root, a missing parent, or a parent met again
            last = chain[-1]
            ids = [link.id for link in chain]
            if last.parent_id in ids:  # a cycle: from that parent to `last`
                cycle = min(ids[ids.index(last.parent_id):])
                if cycle not in cycles:
                    cycles.add(cycle)
                    unplaced += len(self.backend.subtree(cycle))
                    first_cycle = first_cycle or cycle
            elif last.parent_id is not None and len(chain) == 1:  # its own parent's row is gone
                orphans += 1
                first = first or ThreadInfo.from_row(row)
        return Strays(orphans, first, unplaced, first_cycle)

    def trees(self) -> Iterator[list[ThreadInfo]]:
        """Every fork tree, oldest first, one at a time: each of `tops` with every fork below it,
        in creation order, as `subtree` gives it. The trees of `all_threads`, read in memory
        bounded by the largest tree, not by the file: call it inside `consistent()` for trees as
        of one moment."""
        for top in self.tops():
            yield [ThreadInfo.from_row(row) for row in self.backend.subtree(top.id)]

    def title(self, thread: str) -> str | None:
        """The thread's current title: its latest `title.set`, else its `thread.created` title,
        looked up through an index in each segment of its history (a fork inherits its parent's)."""
        for stream_id, lo, hi in reversed(segments(self._reached(thread))):
            found, title = self._title_in(stream_id, lo, hi)
            if found:
                return title
        return None

    def titles(self, threads: Iterable[ThreadInfo]) -> dict[str, str | None]:
        """`title` of each thread, each stream's segment looked up once for them all: a fork with
        no title of its own takes its parent's as of the fork point, which its siblings and a
        chain of forks share (`tree` of a chain of 1,000 forks read 500,000 segments)."""
        def own(stream: ThreadInfo, upper: int) -> tuple[bool, str | None]:
            return self._title_in(stream.id, stream.base, upper) if stream.base < upper else (False, None)

        return self._up_each(threads, own, lambda mine, above: mine[1] if mine[0] else above, lambda mine: mine[0], None)

    def count_each(self, threads: Iterable[ThreadInfo], type_: str) -> dict[str, int]:
        """`count` of each thread, each stream's segment counted once for them all (a listing
        of forks of forks counted each one's whole chain)."""
        check_text("type_", type_, "an event type")

        def own(stream: ThreadInfo, upper: int) -> int:
            return self.backend.count_type(stream.id, stream.base, upper, type_) if stream.base < upper else 0

        return self._up_each(threads, own, lambda mine, above: mine + above, lambda mine: False, 0)

    def _up_each(self, threads: Iterable[ThreadInfo], own: Callable[[ThreadInfo, int], _V], merge: Callable[[_V, _R], _R],
                 enough: Callable[[_V], bool], top: _R) -> dict[str, _R]:
        """A fold of each thread's history from its head up its chain of forks: `own(stream,
        upper)` reads the stream's own offsets below `upper`, `merge(that, what the streams above
        give)` combines, and the walk stops early where `enough(that)` or at the root (`top`
        above it). What the history below (stream, offset) gives is kept: siblings and a chain
        of forks share it, so each segment is read once."""
        known = {info.id: info for info in _infos(threads)}
        memo: dict[tuple[str, int], _R] = {}
        out: dict[str, _R] = {}
        for info in list(known.values()):
            stream, upper, walked, ids = info, info.head, [], set()
            result = top
            while (stream.id, upper) not in memo:
                mine = own(stream, upper)
                walked.append(((stream.id, upper), mine))
                ids.add(stream.id)
                if enough(mine) or stream.parent_id is None:
                    break
                if stream.parent_id in ids:
                    acyclic(self.backend.ancestry(info.id))  # a cycle of parents (raw SQL wrote it): refused by name
                    raise StoreError(f"the parents of thread {info.id!r} make a cycle of forks: their rows were altered "
                                     "outside threadlog; `threadlog verify` names where")  # changed since read, if ever
                upper = min(upper, stream.base)
                parent = known.get(stream.parent_id)
                if parent is None:
                    row = self.backend.stream(stream.parent_id)
                    # The parent's row was deleted outside threadlog: a listing's title and count end
                    # here, as `title` and `count` do (a read of the history refuses it, `ancestry`).
                    if row is None:
                        break
                    parent = known[stream.parent_id] = ThreadInfo.from_row(row)
                stream = parent
            else:
                result = memo[(stream.id, upper)]
            for key, mine in reversed(walked):
                result = memo[key] = merge(mine, result)
            out[info.id] = result
        return out

    def _title_in(self, stream_id: str, lo: int, hi: int | None) -> tuple[bool, str | None]:
        """(whether offsets lo..hi-1 of the stream hold a title, that title): the latest
        `title.set` or `thread.created` there; a redacted `title.set` keeps none (looked past)."""
        while (row := self.backend.last_title_event(stream_id, lo, hi)) is not None:
            data = decode(row.type, row.schema_version, row.data, row.position)
            if row.type == "title.set" and "title" not in data:
                hi = row.offset  # redacted: the one before it holds the title
                continue
            title = data.get("title")
            return True, title if isinstance(title, str) else None
        return False, None

    def count(self, thread: str, type_: str, start: int = 0) -> int:
        """How many events of `type_` the thread's logical history holds from offset `start` on
        (an index count per stream; from its own first offset, only the thread's own stream)."""
        check_text("type_", type_, "an event type")
        ranges = clip(segments(self._reached(thread, start)), start, None)
        return sum(self.backend.count_type(stream_id, lo, hi, type_) for stream_id, lo, hi in ranges)

    def forks_at(self, thread: str, start: int, stop: int, limit: int = 10) -> list[tuple[ThreadInfo, int]]:
        """The forks made from `thread` itself at fork points `start` < offset <= `stop` (the
        forks after each of the events `start..stop-1`), at most `limit` at each point in
        creation order, each with how many were made at its point: one page's fork cards,
        however many forks the thread has (`subtree` reads every one, at any depth)."""
        check_thread("thread", thread)
        check_index("start", start)
        check_index("stop", stop)
        check_index("limit", limit, what="a number of forks")
        self._stream(thread)
        return [(ThreadInfo.from_row(row), total) for row, total in self.backend.forks_at(thread, start, stop, limit)]

    def subtree(self, thread: str) -> list[ThreadInfo]:
        """The thread and every fork below it, at any depth, in creation order."""
        check_thread("thread", thread)
        rows = self.backend.subtree(thread)
        if not rows:
            raise ThreadNotFound(thread)
        return [ThreadInfo.from_row(row) for row in rows]

    def ancestry(self, thread: str, start: int = 0) -> list[ThreadInfo]:
        """The thread, its parent, … up to its root; with `start`, only the streams holding its
        history from offset `start` on: up to the first whose own events begin at or below
        `start`. Reads from `start` read only those, so a thread's last events cost the same
        however deep its chain of forks is.

        Every read of a thread's history starts here, and a history from `start` that reaches
        a fork whose parent's row is gone (only raw SQL deletes one) is refused (`Unreadable`,
        naming the fork and how many first events are missing): it was read from the fork
        point on as if it were whole."""
        return unbroken(self._reached(thread, start), start)

    def _reached(self, thread: str, start: int = 0) -> list[ThreadInfo]:
        """`ancestry` as far as the rows reach: up to a fork whose parent's row is gone, where a
        listing's title and count of a thread end (`title` and `count` agree with `titles` and
        `count_each`, which `ls` and `tree` read)."""
        check_index("start", start)
        check_thread("thread", thread)
        rows = acyclic(self.backend.ancestry(thread, start))
        if not rows:
            raise ThreadNotFound(thread)
        return [ThreadInfo.from_row(row) for row in rows]

    def head(self, thread: str) -> int:
        """The thread's logical length: the offset its next event will get."""
        return self.thread(thread).head

    def pending_tool_uses(self, thread: str) -> tuple[str, ...]:
        """The ids of the thread's `tool_use` calls still waiting for their `tool_result` at
        its head, oldest first: a message answering any other id is refused. Kept on the
        stream's row as it is appended to, so this reads no history."""
        return self._facts(thread).tools

    def pending_interrupts(self, thread: str) -> tuple[str, ...]:
        """The ids of the thread's interrupts still waiting for an answer at its head, oldest
        first (a fork's inherited ones are demoted, not pending). Read from the stream's row."""
        return self._facts(thread).interrupts

    def interrupted_calls(self, thread: str) -> dict[str, str]:
        """The thread's tool calls that wait on a pending interrupt at its head, tool_use id ->
        interrupt id: the interrupt's answer becomes the call's result, so a result recorded
        for the call while the interrupt is pending is refused. With none pending this reads
        only the stream's row; else the stream's own events."""
        return self._interrupted_calls(self._stream(thread)).asked

    def _facts(self, thread: str) -> Facts:
        """The pending facts at the thread's head, kept on its row."""
        row = self._stream(thread)
        return Facts.stored(row.facts, row.id)

    def create_thread(
        self,
        title: str | None = None,
        system: str | list[dict[str, Any]] | None = None,
        model: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        thinking: dict[str, Any] | None = None,
        settings: dict[str, Any] | None = None,
        thread_id: str | None = None,
        **meta: Any,
    ) -> str:
        """Start a root thread with its `thread.created` event; returns the thread id.

        `thinking` is the Messages API parameter (e.g. `{"type": "enabled", "budget_tokens":
        2048}`) that every request of the thread and of its forks and sub-agents sends.
        `settings` are the other request parameters they send, those threadlog does not manage
        (`eventstore/settings.py`): e.g. `{"stop_sequences": ["END"], "tool_choice": {"type":
        "any"}, "metadata": {"user_id": "u1"}}`, each validated against the installed SDK's type.

        With an `event_id` in `meta` and no `thread_id`, a call whose thread that id already
        created returns its id (a retry, as `append` and `fork` take one); other content under
        the same id is refused."""
        retried = thread_id is None and "event_id" in meta
        if retried:
            thread_id = self._created_by(meta["event_id"])  # the append below returns its record, or refuses other content
        thread_id = new_id() if thread_id is None else check_thread_id("thread_id", thread_id)
        data = {"title": title, "system": system, "model": model, "tools": tools, "metadata": metadata, "thinking": thinking,
                "settings": settings}
        event = {"type": ThreadCreated.type, "data": {k: v for k, v in data.items() if v is not None}, "meta": meta}
        try:
            self.append(thread_id, [event], expect="no_stream")
        except InvalidEvent:
            # A call with this event id made its thread meanwhile (a retry racing its original,
            # looked up before the original wrote): once more, into the thread that one made.
            made = self._created_by(meta["event_id"]) if retried else None
            if made is None or made == thread_id:
                raise
            self.append(made, [event], expect="no_stream")
            return made
        return thread_id

    def _created_by(self, event_id: Any) -> str | None:
        """The thread whose `thread.created` has this event id, or None (an id of no such event,
        or no id at all: the append refuses that by its name)."""
        try:
            made = self.event(event_id)
        except InvalidEvent:
            return None
        return made.stream_id if made is not None and made.type == ThreadCreated.type and made.offset == 0 else None

    # -- append -------------------------------------------------------------------------------

    def append(self, thread: str, events: Iterable[Any], expect: Expect = "any") -> list[RecordedEvent]:
        """Append a batch atomically; returns the recorded events.

        `expect` is `"any"`, `"no_stream"` (the batch creates the thread and must start with
        `thread.created`), `"stream_exists"`, or the exact head the caller last saw; a
        mismatch raises `ConcurrencyError` and writes nothing. Re-appending events whose
        `meta.event_id`s are all already stored in this thread returns the original
        records and writes nothing, whatever `expect` says: retries are safe.
        """
        _check_expect(expect)
        if type(events) is not list:  # the common case spared the checks (an ABC check costs on every append)
            check_items("events", events, "a list of events")
            events = list(events)
        fresh = event_ids(len(events))  # time-ordered: see eventstore/ids.py
        if len(events) < _PAUSE_FROM:  # no `with` at all: ~3.5k instructions a single append
            return self._append(thread, [prepare(event, i, fresh[i]) for i, event in enumerate(events)], expect)
        # Every event's containers live until the append returns: the collector's passes would
        # free nothing (collector.py). Paused while the batch waits for the write lock too.
        with paused():
            return self._append(thread, [prepare(event, i, fresh[i]) for i, event in enumerate(events)], expect)

    def append_prepared(self, thread: str, batch: Iterable[PreparedEvent], expect: Expect = "any", *,
                        retry: bool = True) -> list[RecordedEvent]:
        """`append` for events already validated and serialized by `eventstore.prepare.prepare`.

        For writers that check a whole source before writing any of it (the importers):
        they call `prepare` once per event to refuse a bad one early, and this spares the
        store doing it again. Everything else `append` does still happens here: the
        reserved-type, `thread.created` and repeated-id checks, retries, the facts (a
        `tool_result` for a call that is not waiting is refused) and the head check. Pass
        only what `prepare` returned, unchanged: the digests are not recomputed.

        `retry=False` refuses a batch whose events are all stored (`InvalidEvent` naming the
        first) instead of returning the stored records: for a writer that counts what it
        wrote, when another process may have written the same events first (an importer).
        """
        _check_expect(expect)
        check_flag("retry", retry)
        items = list(batch) if isinstance(batch, Iterable) else None  # a generator is read once
        if items is None or not all(type(item) is PreparedEvent for item in items):
            raise InvalidEvent("events", "append_prepared takes the PreparedEvents prepare() returns; pass dicts to append()")
        return self._append(thread, items, expect, retry)

    def _append(self, thread: str, batch: list[PreparedEvent], expect: Expect, retry: bool = True) -> list[RecordedEvent]:
        if not batch:
            raise InvalidEvent("events", "the batch is empty")
        if expect == "no_stream":
            check_thread_id("thread", thread)
        elif not isinstance(thread, str) or not thread:
            raise InvalidEvent("thread", "must be a non-empty string")
        explicit = False
        for i, item in enumerate(batch):
            if item.plain:
                continue  # a text message: no meta, neither reserved nor thread.created
            explicit = explicit or item.explicit_id
            if item.type in _RESERVED:
                raise InvalidEvent(f"events[{i}].type", f"{item.type} is written by {_RESERVED[item.type]} only")
            if item.type == ThreadCreated.type and not (i == 0 and expect == "no_stream"):
                raise InvalidEvent(f"events[{i}].type", "thread.created only starts a thread (expect='no_stream')")
        # Only ids the caller chose can repeat (generated ones hold 62 random bits under the time).
        if explicit and len({item.event_id for item in batch}) != len(batch):
            raise InvalidEvent("meta.event_id", "the batch repeats an event_id")
        if len(batch) == 1 and not explicit:
            known = self._known
            if known is None and expect == "any" and batch[0].plain:
                return self._append_text(thread, batch[0])
            # An interrupt on a tool call is judged against the pending ones, which only a read finds.
            if known is not None and batch[0].type != interrupted.RAISED:
                recorded = self._append_known(thread, batch, expect)
                if recorded:
                    return recorded
        try:
            return self._append_once(thread, batch, expect, retry, explicit)
        except KeyClash:
            if not explicit:
                raise
            # Another process stored an event with one of these ids while this append ran: the
            # same batch (a retry racing its original), answered now from what it stored, or
            # another, refused by name; as when the two appends come one after the other.
            return self._append_once(thread, batch, expect, retry, explicit)

    def _append_once(self, thread: str, batch: list[PreparedEvent], expect: Expect, retry: bool,
                     explicit: bool) -> list[RecordedEvent]:
        with self.backend.transaction():
            if explicit:
                stored = self._already_stored(thread, batch)
                if stored is not None:
                    if not retry:
                        raise InvalidEvent("meta.event_id", f"the batch's events are already stored (event id "
                                           f"{stored[0].event_id!r} at position {stored[0].position}), and this append "
                                           "takes no retry (retry=False)")
                    return stored
            row, position = self.backend.stream_for_append(thread, len(batch))
            if row is None:
                if expect != "no_stream":
                    raise ThreadNotFound(thread)
                if batch[0].type != ThreadCreated.type:
                    raise InvalidEvent("events[0].type", "a new thread must start with thread.created")
                head = Head.new_thread()
                self._check_cuts(thread, head, batch, forked=False)
                return self._write(thread, head, batch, position)
            if expect == "no_stream" or (isinstance(expect, int) and expect != row.head):
                raise ConcurrencyError(thread, expect, row.head)
            head = Head.of(row)
            if interrupted.binds_calls(batch, head.facts.interrupts):
                interrupted.check_batch(self._interrupted_calls(row), batch, functools.partial(self._answered_at, row))
            self._check_cuts(thread, head, batch, forked=row.parent_offset is not None)
            return self._write(thread, head, batch, position)

    def _check_cuts(self, thread: str, head: Head, batch: Sequence[PreparedEvent], forked: bool) -> None:
        """Refuse a compaction of `batch` whose cut falls between tool calls and their results
        (`cuts.check_cuts`), reading the thread's stored history around it; a batch holding
        none costs one pass over its types. Only a fork (`forked`) has its ancestry read for a
        note its view starts from (`_view_start`): a new thread has no row to read it from yet."""
        if cuts.compacts(batch):
            cuts.check_cuts(batch, head.offset, head.facts, functools.partial(self._decoded_range, thread),
                            view=self._view_start(thread) if forked else 0)

    def _view_start(self, thread: str) -> int:
        """The offset of the note the fork `thread`'s model view starts from: its own or its
        nearest ancestor's `context="note"` `thread.forked` (0 when none is). One event read
        per fork in its history, whose first own event is its `thread.forked`."""
        for stream_id, lo, _ in reversed(segments(self.ancestry(thread))):
            if lo and any(_starts_view(type_, data) for _, type_, data in self._decoded_range(stream_id, lo, lo + 1)):
                return lo
        return 0

    def _decoded_range(self, thread: str, start: int, stop: int) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """The events at offsets start..stop-1 of the thread's history, decoded: (offset, type, data)."""
        return _decoded(self.read_raw(thread, start, stop), functools.partial(self.unreadable, thread))

    def _interrupted_calls(self, row: StreamRow) -> interrupted.InterruptedCalls:
        """The pending interrupts raised on tool calls at the stream's head, each with its call.

        Pending interrupts are the stream's own (a fork demotes those it inherits), and rare:
        with none pending this reads nothing; else the stream's own events are scanned, the
        interrupts' decoded, and the messages from the first one raised on a call on (a later
        message may answer that call, or make a new one under its id)."""
        facts = Facts.stored(row.facts, row.id)
        calls = interrupted.InterruptedCalls()
        if facts.interrupts:
            # Filtered as it is read: a message is kept only once `calls` has a call it may concern.
            rows = (r for r in self.read_raw(row.id, row.parent_offset or 0)
                    if r[1] in _INTERRUPTS or r[1] == MessageAppended.type and calls.needs_messages)
            for offset, type_, data in _decoded(rows, functools.partial(self.unreadable, row.id)):
                calls.fold(offset, type_, data)
        return calls.at_head(facts.interrupts, facts.tools)

    def _answered_at(self, row: StreamRow, tool_use_id: str, below: int | None) -> int | None:
        """The offset of the last message in the thread's history (below offset `below`, if
        given) holding a result for `tool_use_id`, or None. Read only to word a refusal: every
        message is decoded."""
        found = None
        messages = (r for r in self.read_raw(row.id, 0, below) if r[1] == MessageAppended.type)
        for offset, _, data in _decoded(messages, functools.partial(self.unreadable, row.id)):
            content = data.get("content")
            if isinstance(content, list) and tool_use_id in tool_result_ids(content):
                found = offset
        return found

    def _append_text(self, thread: str, item: PreparedEvent) -> list[RecordedEvent]:
        """`_append_once` for the commonest append: one text message (`item.plain`: it changes
        no facts) at whatever the head is, on a backend that reads the head itself (SQLite).
        The same statements, rows, records and refusals (tests/test_append_fast_path.py holds
        them equal), without the batch's machinery: `_Chain`, its generator and the checks no
        text message needs. At `synchronous=FULL` every commit waits for the disk, and the
        Python after each wait runs slower than the same Python between commits that do not
        wait (the store's Python in one append: 61 µs against 21 at `NORMAL`, bench/HISTORY.md,
        "Runs of 2026-12-06, night"); the fewer objects an append touches, the less it pays."""
        backend = self.backend
        with backend.transaction():
            row, position = backend.stream_for_append(thread)
            if row is None:
                raise ThreadNotFound(thread)
            head = Head.of(row)
            offset, recorded_at, event_id, digest = head.offset, now(), item.event_id, item.data_digest
            hash_ = integrity.chain_hash(head.hash, thread, offset, event_id, item.type, item.schema_version,
                                         recorded_at, item.meta_json, digest)
            facts_json = head.facts.dump()
            backend.insert_events([(position, thread, offset, event_id, item.type, item.schema_version, item.data_json,
                                    item.meta_json, recorded_at, None, hash_, facts_json, None)])
            backend.update_head(thread, offset + 1, hash_, facts_json,
                                offset if head.first_message is None else head.first_message, position, row.last_position)
        return [make_tuple(RecordedEvent, (position, thread, offset, event_id, item.type, item.data, item.meta, recorded_at,
                                           hash_, item.schema_version, digest, False))]

    def _append_known(self, thread: str, batch: list[PreparedEvent], expect: Expect) -> list[RecordedEvent]:
        """One event in one round trip: chained onto the head this store's own last write to
        `thread` left, and sent with it (`backend.AppendAtHead`); the server writes it, under
        the stream's lock, only if that is still the stored head. The records, or [] when
        nothing was written: no head is remembered, `expect` does not match it, the event is
        refused against it, or another writer moved it (forgotten then). The caller then
        appends as usual, reading the stored head: a remembered head changes what is written
        only in how many round trips it takes, never an answer or a refusal."""
        assert self._known is not None
        head = self._known.get(thread)
        if head is None or expect == "no_stream" or (isinstance(expect, int) and expect != head.offset):
            return []
        if interrupted.binds_calls(batch, head.facts.interrupts):
            return []  # a result for a call an interrupt may wait on: judged against the interrupts, which only a read finds
        if cuts.compacts(batch):
            return []  # a compaction's cut is judged against the messages around it, which only a read finds
        try:
            recorded = self._write(thread, head, batch, 0)
        except InvalidEvent:
            return []  # judged against what may be an old head: judged again against the stored one
        if not recorded:
            self._known.pop(thread, None)
        return recorded

    def append_message(self, thread: str, role: str, content: str | list[dict[str, Any]], expect: Expect = "any",
                       **fields: Any) -> RecordedEvent:
        """Append one `message.appended`. `content` is text or a list of content blocks.

        Keyword arguments go to the event's data (`message_id`, `model`, `stop_reason`,
        `usage`) or, for `event_id`, `actor`, `origin`, `causation_id`, `correlation_id`
        and `occurred_at`, to its meta.
        """
        if not fields:
            if content.__class__ is str and role.__class__ is str and (role == "user" or role == "assistant"):
                _check_expect(expect)  # `append` of the one text message, spared building it as a dict and reading it back
                return self._append(thread, [prepare_text(role, content, 0, event_ids(1)[0])], expect)[0]
            data: dict[str, Any] = {"role": role, "content": content}
            meta: dict[str, Any] = {}
        else:
            meta = {k: v for k, v in fields.items() if k in META_KEYS}
            data = {"role": role, "content": content, **{k: v for k, v in fields.items() if k not in META_KEYS}}
        return self.append(thread, [{"type": MessageAppended.type, "data": data, "meta": meta}], expect=expect)[0]

    def _already_stored(self, thread: str, batch: list[PreparedEvent]) -> list[RecordedEvent] | None:
        rows = self.backend.events_by_id([item.event_id for item in batch])
        if not rows:
            return None
        if len(rows) != len(batch):
            first = min(rows, key=attrgetter("position"))
            raise InvalidEvent("meta.event_id", f"{len(rows)} of the batch's {len(batch)} event ids are already stored "
                               f"(event id {first.event_id!r} at position {first.position}); a retry must resend the same batch")
        by_id = {row.event_id: row for row in rows}
        for item in batch:
            row = by_id[item.event_id]
            if row.stream_id != thread:
                raise InvalidEvent("meta.event_id", f"event id {item.event_id!r} is already used in thread {row.stream_id!r} "
                                   f"(position {row.position})")
            if (row.type, integrity.digest_of(row), row.meta) != (item.type, item.data_digest, item.meta_json):
                raise InvalidEvent(
                    "meta.event_id",
                    f"event id {item.event_id!r} is already stored at position {row.position} with different content; "
                    "a retry must resend the same event, and a new event needs a new id",
                )
        return [from_row(by_id[item.event_id]) for item in batch]

    def _write(self, thread: str, head: Head, batch: Sequence[PreparedEvent], position: int | None = None,
               stamps: Sequence[str] | None = None, legacy: Sequence[bool] | None = None,
               doubted: dict[int, InvalidEvent] | None = None) -> list[RecordedEvent]:
        """Number, chain and insert a batch at `head` (inside the caller's transaction).

        `position` is the next position when the caller already read it in this transaction
        (or, for a restore, the position the batch had where it came from); `stamps` are the
        events' `recorded_at` times when they are restored rather than recorded now, and
        `legacy` marks those an older release hashed with the first layout (and `doubted`
        collects what contradicts facts a restore holds in doubt: `_Chain.rows`). A `known`
        head (`_append_known`) is written outside any transaction, in the backend's own, with
        positions the server takes: [] when that head was no longer the stored one.
        """
        start = head.offset
        first_position = self.backend.next_position(len(batch)) if position is None else position
        chain = _Chain(head, first_position)
        rows = chain.rows(thread, batch, now(), stamps, legacy, doubted)
        known = self._known
        stream = head.stream
        if stream is None:
            inserts = list(rows)
            parent = head.parent
            stream = StreamRow(
                thread,
                parent.id if parent else None,
                start if parent else None,
                parent.root_id if parent else thread,
                parent.depth + 1 if parent else 0,
                chain.offset,
                first_position,
                batch[0].data["options"]["kind"] if parent else "thread",
                chain.prev,
                chain.facts_json,  # facts.dump() of the facts after the batch
                chain.first_message,
                chain.position - 1,
            )
            self.backend.insert_stream(stream)
            self.backend.insert_events(inserts)
        elif known is not None and head.known:  # (SQLite: `known` is None, and this is all it costs)
            append_at = self._connections.get().append_at
            assert append_at is not None and len(batch) == 1  # one event: see `_append_known`
            (row,) = rows
            taken = append_at(row, start, head.hash, chain.offset, chain.prev, chain.facts_json, chain.first_message)
            if taken is None:
                return []
            chain.recorded = [make_tuple(RecordedEvent, (taken, *chain.recorded[0][1:]))]
        else:
            self.backend.insert_events(rows)  # every row is made by the time this returns
            self.backend.update_head(thread, chain.offset, chain.prev, chain.facts_json, chain.first_message,
                                     chain.position - 1, stream.last_position)
        if known is not None:
            self._remember(thread, Head.left(chain.offset, chain.prev, chain.facts, chain.first_message, stream))
        return chain.recorded

    def _remember(self, thread: str, head: Head) -> None:
        """Keep `head` as the one this store's last write to `thread` left (see `_append_known`).
        Kept even before the write commits: one that never does only fails the server's check."""
        assert self._known is not None
        known = self._known
        known.pop(thread, None)  # re-inserted last: the oldest is first in line to be forgotten
        known[thread] = head
        if len(known) > _KNOWN_HEADS:
            del known[next(iter(known))]

    # -- read ---------------------------------------------------------------------------------

    def read(self, thread: str, start: int = 0, stop: int | None = None) -> Iterator[RecordedEvent]:
        """The thread's logical history (ancestor segments first), offsets start..stop-1.

        One indexed range scan per ancestor segment; nothing is copied. The thread's
        existence is checked when called, the rows are streamed as you iterate. An offset
        the thread should hold and the file does not (only raw SQL deletes an event, or
        moves a fork point) raises `Unreadable` where the reader reaches it, naming it: a
        history is never read with a hole in it.
        """
        return map(from_row, self._history(thread, start, stop, self.backend.range, 2))

    def read_all(self, after: int = 0, limit: int | None = None, *, whole: bool = False) -> Iterator[RecordedEvent]:
        """Every event with position > `after`, in global (commit) order: a reader tailing the
        log may resume after the last one it read, no event can commit before it later.

        `whole=True` inside `consistent()`: every event of that view, for a reader that must
        agree with the view's threads (a backup). On PostgreSQL a position below one of these
        may still commit after the view: not a place to resume a tail from."""
        return map(from_row, self.read_all_raw(after, limit, whole=whole))

    def read_all_raw(self, after: int = 0, limit: int | None = None, *, whole: bool = False) -> Iterator[EventRow]:
        """`read_all` before decoding: the stored rows, each as `recorded.from_row` reads it.

        For a tail that wants only some threads' events: it decodes those alone, so an event
        of another thread that cannot be read (a row altered outside threadlog) neither stops
        it nor costs it a parse."""
        check_index("after", after, what="a position")
        check_index("limit", limit, what="a count", optional=True)
        return self.backend.all_events(after, limit, whole)

    def read_data(self, thread: str, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """The logical history as lean (offset, type, data) tuples, for projections that fold.

        Same range as `read`, but skips meta, hashes and `RecordedEvent` construction: the
        events were validated when appended (and `verify` checks their digests), so a fold
        needs only the data, upcast to the current version.
        """
        rows = self.read_raw(thread, start, stop)
        return _decoded(rows, functools.partial(self.unreadable, thread))

    def read_raw(self, thread: str, start: int = 0, stop: int | None = None) -> Iterator[DataRow]:
        """(offset, type, schema_version, data as JSON text): `read_data` before parsing.

        For folds that need only some events' data: they `decode` those alone.
        """
        return self._history(thread, start, stop, self.backend.range_data, 0)

    def _history(self, thread: str, start: int, stop: int | None,
                 fetch: Callable[[str, int, int | None], Iterator[_Row]], at: int) -> Iterator[_Row]:
        """The rows `fetch` gives for each segment of the logical history, start..stop-1, each
        checked to hold every offset of its range (`whole`; `at` is where a row keeps its offset).

        The arguments and the thread are checked now; the rows are read as they are iterated.
        """
        check_index("start", start)
        check_index("stop", stop, optional=True)
        if stop is not None and stop < start:
            raise InvalidEvent("stop", f"{stop} is below start {start}: the range start..stop-1 would be empty")
        ancestry = self.ancestry(thread, start)
        head = ancestry[0].head  # the thread's own segment, the last, ends there (or at `stop`, or later by a newer append)
        ranges = clip(segments(ancestry), start, stop)
        return itertools.chain.from_iterable(
            whole(fetch(stream_id, lo, hi), thread, stream_id, lo, head if hi is None else min(hi, head), at)
            for stream_id, lo, hi in ranges)

    def unreadable(self, thread: str, offset: int, error: BaseException | None = None) -> StoreError:
        """The error a reader raises when the event at `offset` of `thread` cannot be decoded:
        given the `Altered` error its data raised (read without its position), data that does
        not parse; else (RecursionError) JSON nested too deeply to parse. It names the event's
        position, found without its data."""
        position = self._row_of(thread, offset).position
        return altered(f"the event at position {position}", error.why) if isinstance(error, Altered) else too_deep(position)

    def event_at(self, thread: str, offset: int) -> RecordedEvent:
        """The event at one logical offset of a thread."""
        return from_row(self._row_of(thread, offset))

    def event(self, event_id: str) -> RecordedEvent | None:
        """The stored event with this `event_id` (an index lookup), or None: where a
        `causation_id` points, or whether a write with a chosen id already happened."""
        rows = self.backend.events_by_id([check_id("event_id", event_id)])
        return from_row(rows[0]) if rows else None

    def threads_holding(self, event_ids: Sequence[str]) -> dict[str, str]:
        """Event id -> the thread storing it, for those of `event_ids` stored (index lookups):
        an import checks that an event it plans in one thread is not stored in another."""
        return {row.event_id: row.stream_id for row in self.backend.events_by_id([check_id("event_id", i) for i in event_ids])}

    def _row_of(self, thread: str, offset: int) -> EventRow:
        # The thread's own row first: one query, not two (and all of the chain when `offset` is not one).
        ancestry = self.ancestry(thread, offset if is_index(offset) else 0)
        check_index("offset", offset, 0, ancestry[0].head - 1, where=f"thread {thread!r}")
        return self._row_at(ancestry, offset)

    def _row_at(self, ancestry: list[ThreadInfo], offset: int) -> EventRow:
        for stream_id, lo, hi in segments(ancestry):
            if lo <= offset and (hi is None or offset < hi):
                row = self.backend.event_at(stream_id, offset)
                if row is None:
                    raise missing(ancestry[0].id, stream_id, offset, offset + 1)
                return row
        raise Unreadable(f"offset {offset} is in no segment of {ancestry[0].id!r}; run verify")

    # -- snapshots (a cache, never truth) -------------------------------------------------------

    def save_snapshot(
        self, projection: str, version: int, thread: str, offset: int, state: dict[str, Any], as_of: int | None = None
    ) -> None:
        """Cache `projection`'s state after the first `offset` events of `thread`'s history.

        Projections decide what a state is; the store only keeps it. Dropping every snapshot
        must change no answer, and `redact` drops them all (a cached state may hold the
        erased payload). `as_of` is the log's `last_position()` read before the fold began:
        if an event the state covers was redacted after that, the state may hold the erased
        payload and the save is refused (`StaleSnapshot`); fold again and retry. Without
        `as_of`, a state covering any redacted event is refused.
        """
        _check_projection(projection, version)
        check_index("as_of", as_of, what="a position", optional=True)
        try:
            integrity.canonical(state)  # refuses keys JSON cannot tell apart ({1: ..., "1": ...}), as events are
            text = integrity.snapshot_json(state)
            text.encode("utf-8")
        except (ValueError, TypeError, RecursionError) as error:
            keyed = unwritable_key(state, "state") if isinstance(error, TypeError) else None
            raise keyed or InvalidEvent("state", f"a snapshot must be JSON: keys of text, no NaN or infinities ({error})") from None
        with self.backend.transaction():
            ancestry = self.ancestry(thread)
            head = ancestry[0].head
            check_index("offset", offset, 1, head, where=f"thread {thread!r}")
            for stream_id, lo, hi in clip(segments(ancestry), 0, offset):
                redaction = self.backend.redacted_since(stream_id, lo, hi, as_of or 0)
                if redaction is not None:
                    raise StaleSnapshot(
                        f"snapshot of {thread!r} at offset {offset} not saved: position {redaction[0]} in its range was "
                        f"redacted at position {redaction[1]}, after the fold began; fold again and save that"
                    )
            self.backend.save_snapshot(projection, version, thread, offset, text)

    def last_position(self) -> int:
        """The highest position in the log (0 when empty): a mark to pass as `as_of`."""
        return self.backend.last_position()

    def recorded_at(self, position: int) -> str | None:
        """When the event at `position` was recorded, read without its data or meta (None: the
        log holds no event there, or the row was altered): what a list of threads shows of a
        thread whose last event cannot be read, so that the list still shows it."""
        check_index("position", position, 1, what="a position")
        row = next(self.backend.all_events(position - 1, 1), None)
        return row.recorded_at if row is not None and row.position == position and isinstance(row.recorded_at, str) else None

    def nearest_snapshot(self, projection: str, version: int, thread: str, at: int) -> tuple[int, dict[str, Any]] | None:
        """The cached state with the highest offset <= `at` that covers a prefix of `thread`'s
        history, as (offset, state): the thread's own snapshots, or an ancestor's taken at or
        below the fork point (the histories agree there). None when there is none."""
        _check_projection(projection, version)
        check_index("at", at)
        best: SnapshotRow | None = None
        for stream_id, _, hi in reversed(segments(self.ancestry(thread))):  # newest first
            limit = at if hi is None else min(hi, at)
            if best is not None and best.offset >= limit:
                break  # the older segments' snapshots are all at or below `limit`
            found = self.backend.nearest_snapshot(projection, version, stream_id, 1, limit)
            if found is not None and (best is None or found.offset > best.offset):
                best = found
        if best is None:
            return None
        try:
            state = json.loads(best.state)
        except (ValueError, TypeError):  # altered outside threadlog (verify names it): a cache, so none
            return None
        return (best.offset, state) if isinstance(state, dict) else None

    def drop_snapshots(self, projection: str | None = None, thread: str | None = None) -> int:
        """Delete every cached snapshot (of one projection, of one thread's own, if named);
        returns how many."""
        if projection is not None:
            check_text("projection", projection, "a projection's name")
        with self.backend.transaction():
            if thread is not None:
                self._stream(thread)
            return self.backend.drop_snapshots(projection, thread)

    # -- the search index (eventstore/textindex.py) -----------------------------------------------

    def update_index(self, extractor: Callable[[], textindex.Extractor],
                     progress: Callable[[int, int], None] | None = None) -> int:
        """Bring the search index up to the log's last position, some thousands of events to a
        write transaction (interrupted, it keeps what it committed); returns how many events it
        read. `extractor()` makes the function that says what text an event contributes
        (`projections.search` has it); `progress(done, total)` is called after each commit."""
        return textindex.catch_up(self, extractor, progress)

    def rebuild_index(self, extractor: Callable[[], textindex.Extractor],
                      progress: Callable[[int, int], None] | None = None) -> int:
        """Rebuild the search index from the whole log, in one write transaction (interrupted,
        the index is as it was); `progress(done, total)` is called after each batch."""
        return textindex.rebuild(self, extractor, progress)

    def index_position(self) -> int:
        """The last position the search index covers (0: none)."""
        return self.backend.index_position()

    def check_index(self) -> None:
        """Raise `StoreError` (naming `threadlog index --rebuild`) unless the search index holds as
        many documents as it wrote: none removed or copied by raw SQL. A search checks so on
        SQLite (FTS5 keeps the count: a few lookups); on PostgreSQL counting them costs about
        80 ms a million documents, so a search checks only that the index is not emptied, and
        `threadlog index` asks this."""
        self.backend.check_index_count()

    # -- fork (eventstore/forks.py) ---------------------------------------------------------

    def fork(
        self,
        thread: str,
        at: int | None = None,
        *,
        todos: Any = "blank",
        metadata: Any = "blank",
        context: str = "full",
        retrieval: str = "off",
        unanswered: str = "refuse",
        transcript: str | None = None,
        fork_id: str | None = None,
        kind: str = "fork",
        busy: str = "refuse",
        config: dict[str, Any] | None = None,
        title: str | None = None,
        retry: bool = True,
        empty: str = "allow",
        **meta: Any,
    ) -> str:
        """Fork `thread` at `at` (default: its head): one `streams` row, one event, O(1).

        Refuses (`ForkRefused.reason`) an `at` past the head or below 1, naming the points a
        fork takes (after the first message, up to the head), a history with no message below
        `at` (`empty`), a run in progress at `at` (`busy`), and tool calls without
        results (`unanswered_tool_calls`, with `tool_use_ids`) unless `unanswered="drop"`
        records them for the projections to filter. `metadata={"keep": [keys]}` keeps
        those keys (a "keep" alone that is no list of keys is refused, not taken for the
        fork's metadata); any other dict is the fork's metadata. Pending interrupts are demoted.
        `kind="subagent"` marks a sub-agent's fork; `busy="allow"` forks where a run is in
        progress (the fork starts idle): for histories imported as they happened, where a
        sub-agent or a retried answer branched mid-turn. `empty="refuse"` refuses (`empty`, with
        `tool_use_ids`) a fork whose only messages are the calls `unanswered="drop"` leaves out:
        it would hold no message (a caller forking for a person who goes on from there); by
        default it is made, for an import's branch, whose own events go on in it.

        The fork inherits the parent's system prompt, model, tools, thinking and settings (a
        sub-agent keeps its parent's request prefix) unless `config` re-frames it: a dict of any
        of `system`, `model`, `tools`, `thinking` replacing the parent's, `settings` replacing
        the parent's settings key by key (a null value removes the parent's key), and
        `blank=True` to inherit none of them. `title` gives the fork its own title (a `title.set` after the
        fork's event, in the same transaction); without it the fork shows the parent's.

        With an `event_id` in `meta`, a call whose fork that id already made (the same parent,
        options and title) returns its id (a retry); `retry=False` refuses it instead, as `append_prepared(retry=False)` does.
        """
        return forks.fork(self, thread, at, todos=todos, metadata=metadata, context=context, retrieval=retrieval,
                          unanswered=unanswered, transcript=transcript, fork_id=fork_id, kind=kind, busy=busy, meta=meta,
                          config=config, title=title, retry=retry, empty=empty)

    def check_fork_point(self, thread: str, at: Any, *, doing: str = "fork") -> None:
        """Refuse (`ForkRefused`) an `at` no fork of `thread` can start at, as `fork` refuses it,
        reading only the thread's row: for a caller that forks after other work it should not
        start (`rerun`, which forks then asks the API; `doing` names it in the message)."""
        row = self._stream(thread)
        forks.check_fork_point(thread, at, row.head, row.first_message_offset, doing)

    def fan_out(
        self,
        thread: str,
        directives: Sequence[str],
        placeholder: str = DEFAULT_PLACEHOLDER,
        *,
        boilerplate: str | None = None,
        todos: Any = "blank",
        metadata: Any = "blank",
        **meta: Any,
    ) -> list[str]:
        """Launch one sub-agent fork per directive from a parent in mid-turn, atomically.

        The parent's head must be waiting on `tool_use` results. Each fork gets the parent's
        full history and one primed user message: a `tool_result` with the same
        `placeholder` text for every pending `tool_use`, then `boilerplate` as a text block
        when given (the same for every fork: `FORK_BOILERPLATE` is the design's
        `<fork-boilerplate>`, a worker's rules), then its own directive, so the forks'
        requests are byte-identical up to the directive (prompt-cache hits). A sub-agent
        fork, or any fork below one whose history holds its events, cannot fan out again
        (`recursion`). Calls that already have sub-agents are not launched again
        (`already_launched`, naming them in `subagent_ids`: a caller killed before this
        returned finds them so), except by the run that made the calls while it is open,
        whose launching tools fan out one call at a time (`eventstore/launches.py`).
        """
        return forks.fan_out(self, thread, directives, placeholder, todos=todos, metadata=metadata, meta=meta,
                             boilerplate=boilerplate)

    # -- integrity ------------------------------------------------------------------------------

    def verify(self, progress: Callable[[int, int], None] | None = None, checkpoint: str | None = None,
               since: str | None = None) -> VerifyReport:
        """Recompute every hash chain and every stored column that changes behaviour;
        raises `IntegrityError` naming the first bad position. One pass over the log, in
        position order; memory follows the threads written at once (and the fork points not
        yet taken), not the number of events or of threads.

        With `checkpoint` (a string `checkpoint()` returned earlier), also prove that the log
        still holds every event the checkpoint covered, unchanged, at the same positions: a
        deleted thread, a cut-and-re-chained tail or a rewritten event then fails too.
        Every snapshot a registered projection can rebuild (`integrity.register_refold`) is
        folded again from the events and compared: readers resume from snapshots.
        `progress(done, total)`, if given, is called as events are checked (with `since`, too).

        With `since` (a checkpoint), only the events appended after it are checked, each
        chained onto the stored event before it, with the rows of the threads they belong
        to; the cost follows the new events, not the log. What the checkpoint covers is not
        read again (nor are snapshots): `verify(checkpoint=...)` proves that part. Only its last
        event is read, and must be the one the checkpoint names: a checkpoint of another log is
        refused, not extended (one of the first form, `tlc1:<position>:<digest>`, names none,
        and is not compared). The report's
        `checkpoint` is then the given one extended over the new events: keep it for next time.
        """
        if progress is not None and not callable(progress):  # it raised TypeError once events were checked
            raise InvalidEvent("progress", f"must be a function called as progress(done, total), not {type(progress).__name__}")
        if since is not None and checkpoint is not None:
            raise InvalidEvent("since", "give a checkpoint to verify since, or one to prove, not both")
        wanted = integrity.parse_checkpoint(checkpoint) if checkpoint is not None else None
        with self.backend.read_transaction():  # one consistent view; writers carry on meanwhile
            if since is not None:
                return verify_since(self.backend, since, progress)
            report = verify(self.backend, progress, checkpoint=wanted)
            for snapshot in self.backend.snapshots():
                why = integrity.check_snapshot(self, snapshot)
                if why is not None:
                    raise IntegrityError(None, f"{why}; drop the snapshots (threadlog snapshot --drop) and verify again")
        return VerifyReport(report.streams, report.events, report.redacted, None if wanted is None else str(wanted))

    def checkpoint(self, progress: Callable[[int, int], None] | None = None) -> str:
        """One short string covering every event in the log now (position and hash).

        Keep it somewhere the file's writers cannot reach; `verify(checkpoint=C)` later
        proves that nothing it covers was removed, added or changed. Reads every event's hash
        once (one sequential scan: seconds at millions of events), calling `progress(done,
        total)` as it goes, as `verify` does.
        """
        with self.backend.read_transaction():
            last = self.backend.last_position()
            rows = self.backend.hashes(last)
            if progress is not None:
                rows = integrity.counted(rows, progress, self.backend.counts()[1])
            value = integrity.log_digest(rows, last)
            return integrity.format_checkpoint(last, value, integrity.hash_at(self.backend, last))

    def redact(self, position: int, reason: str, actor: str, *, purge: bool = True) -> RecordedEvent:
        """Erase one event's payload in place, recording who and why in an `event.redacted`.

        What stays is a skeleton with only the ids that keep the history well-formed: a
        message keeps its role, its `tool_use` blocks' `id` and `name` (input emptied) and its
        `tool_result` blocks' `tool_use_id` (content replaced; a failed one keeps `is_error`, so
        the model still reads the call as failed), and of the agent framework's
        item it stands for (`item`) the item's type, role, call id and name, so a model request
        built from the history stays valid; its text becomes `[redacted]`. Runs and interrupts keep
        their ids. A fork's `thread.forked` keeps its parent, offset, kind and context and
        the ids its facts rest on; its directive, explicit metadata and todos and transcript
        path are erased (the fork's metadata and todos then read as blank). A sub-agent's
        directive is also in its primed message: redact both. The `event.redacted` records
        the skeleton's digest, so the skeleton is chained too. Hashes, offsets and fork
        references stay valid, because the chain covers the data's digest.

        No copy of the payload stays in the file: snapshots are dropped, its search documents
        removed (the index rewritten without them), freed space is
        zeroed (`secure_delete`) and the write-ahead log is checkpointed and truncated before
        this returns. If another connection is reading at that moment, the WAL cannot be
        truncated and `StoreError` says so (the redaction itself is committed; `purge()`
        retries the truncation). `purge=False` leaves the truncation to the caller's own
        `purge()`, once, after a series of redactions.
        """
        check_index("position", position, 1, what="a position")
        with self.backend.transaction():
            foreign = integrity.foreign_code(self.backend)
            if foreign is not None:
                raise StoreError(f"not redacted: {foreign}")
            row = self.backend.event_at_position(position)
            if row is None:
                raise InvalidEvent("position", f"no event at position {position}")
            # The event.redacted is appended to the event's thread: take that thread's write lock
            # (PostgreSQL locks per thread, not per database) and read the row again under it, so
            # that another writer's append, or a redaction of the same event, committed before,
            # is seen here instead of failing the insert as a clash of offsets.
            stream_row, next_position = self.backend.stream_for_append(row.stream_id)
            row = self.backend.event_at_position(position)
            if stream_row is None or row is None:
                raise StoreError(f"not redacted: the thread of position {position} is gone (altered outside threadlog)")
            if row.type == "event.redacted":
                raise InvalidEvent("position", "an event.redacted event is structural and cannot be redacted")
            if row.redacted_by is not None:
                raise InvalidEvent("position", f"{position} is already redacted (by position {row.redacted_by}); "
                                   "if that redaction was cut short, `purge` leaves no old page of the payload behind")
            data: dict[str, Any] = {"position": position, "reason": reason, "actor": actor}
            skeleton, deep = skeleton_of(row.type, row.data)
            data["skeleton_digest"] = integrity.digest(skeleton)
            if deep:
                # Its tool ids cannot be read back from that skeleton, so what was pending after
                # it (the row's stored facts) is recorded with the skeleton's digest: both
                # are then chained, and verify takes the facts from this record.
                data["pending"] = json.loads(row.facts) if row.facts else {}
            event = prepare({"type": EventRedacted.type, "data": data, "meta": {"actor": actor}}, "redact")
            recorded = self._write(row.stream_id, Head.of(stream_row), [event], next_position)[0]
            self.backend.redact(position, skeleton, recorded.position)
            self.backend.drop_snapshots()  # a cached state may hold the erased payload
            self.backend.unindex(position)  # and the search index its text
        if purge:
            try:
                self.purge()
            except StoreError as error:
                if isinstance(error, OldPagesKept):
                    raise OldPagesKept(f"position {position} is redacted (event.redacted at position {recorded.position}): "
                                       f"{error}") from None
                # PostgreSQL's VACUUM waits for the readers' locks; its error alone said to retry
                # the redaction, which the retry then refused as done. A disk with no room for the
                # checkpoint was told to wait for readers there were none of.
                until = "the readers are done" if isinstance(error, Locked) else "that is put right (a full disk: once it has room)"
                raise OldPagesKept(f"position {position} is redacted (event.redacted at position {recorded.position}; the "
                                   f"change is committed), but erasing the old copies did not finish ({error}); call purge() "
                                   f"once {until}") from None
        return recorded

    def restore(self, lines: Iterable[tuple[int, Any]]) -> RestoreReport:
        """Write the events of an export (`threadlog export`), given as (line number, parsed
        JSON line), with their ids, times and hashes, in one transaction.

        Refused whole unless every recomputed hash equals the exported one. Positions are
        kept when the log ends before the export's first event (a new database); events
        already stored are skipped, so restoring twice adds nothing. See `eventstore/restore.py`.
        """
        return restore.restore(self, lines)

    def restore_many(self, exports: Iterable[tuple[str, Iterable[tuple[int, Any]]]]) -> list[RestoreReport]:
        """`restore` of several exports, each given as (name, lines), in order and in one
        transaction: all of them, or on any refusal none. A refusal names the export."""
        return restore.restore_many(self, exports)

    def purge(self) -> None:
        """Copy the write-ahead log into the database file and truncate it, so that no old
        page (an erased payload's among them) stays in the WAL; `redact` does this itself.
        On PostgreSQL: vacuum the tables a redaction rewrote (and write the search index anew
        after it removed documents), so that no old row version stays in their files.

        Raises `StoreError` when another connection's open read keeps the WAL in use.
        """
        self.backend.truncate_wal()


def _starts_view(type_: str, data: dict[str, Any]) -> bool:
    """`cuts.is_note` for an append: a fork event whose options are of the wrong shape (raw SQL
    wrote them) is taken for a full fork's, so a cut is checked against the whole history."""
    try:
        return cuts.is_note(type_, data)
    except MISSHAPEN:
        return False


def _decoded(rows: Iterator[DataRow], unreadable: Callable[[int, BaseException], StoreError]
             ) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Decode raw rows; an event nested too deeply to parse, or whose data does not parse,
    raises `unreadable(offset, error)`."""
    offset = -1
    try:
        for offset, type_, version, text in rows:
            yield offset, type_, decode(type_, version, text)
    except (RecursionError, Altered) as error:
        raise unreadable(offset, error) from None
