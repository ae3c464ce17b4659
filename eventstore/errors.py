"""The one exception family of threadlog.

Every refusal raises a subclass of `StoreError` before anything is written, so a refused
operation leaves the database exactly as it was. Messages say what was wrong and, where
there is one, what the caller can do about it.
"""

from __future__ import annotations

import reprlib
from collections.abc import Collection
from typing import Any

_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 80, 80


def shown(value: Any) -> str:
    """What a message shows of a value the caller passed: its repr, cut short. A plain repr of
    a 10 MB string is 10 MB of message, one of a dict nested 1,000 levels raises RecursionError,
    and one of an int past 4,300 digits ValueError (Python will not write it out)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"{'a negative' if value < 0 else 'an'} integer of {value.bit_length():,} bits"
    return _SHOWN.repr(value)


def named(value: Any) -> str:
    """An id as a message names it: whole up to 200 characters (the longest id threadlog
    makes or accepts for a thread, event or interrupt), cut short past that; tool call and
    run ids are any text, and a message once echoed a 1 MB one whole."""
    return repr(value) if isinstance(value, str) and len(value) <= 200 else shown(value)


def path_key(key: str) -> str:
    """An object's key as a field's path names it (`data.<key>`): itself when it is up to 200
    printable characters, else its repr cut short. A key is any text, and a path once held a
    1.5 MB one of newlines and terminal escapes whole."""
    return key if len(key) <= 200 and key.isprintable() else shown(key)


def key_not_text(field: str, key: Any) -> InvalidEvent:
    """The refusal of an object (at `field`) holding a key that is not text (canonical JSON
    sorts keys, and Python's own words for 2 beside "a" were "'<' not supported between
    instances of 'int' and 'str'")."""
    return InvalidEvent(field, f"the key {shown(key)} is {type(key).__name__}, not text: JSON object keys must be text")


class StoreError(Exception):
    """Base class of every error threadlog raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as what it is, not as a call of its class with its message: most subclasses
        # take other arguments (`InvalidEvent(field, why)`), and an error raised in a worker
        # process (multiprocessing, concurrent.futures) failed to unpickle in the parent,
        # which then reported a broken pool instead of the refusal.
        return _rebuilt, (type(self), self.args, self.__dict__)


def _rebuilt(cls: type[StoreError], args: tuple[Any, ...], state: dict[str, Any]) -> StoreError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class ThreadNotFound(StoreError):
    """No thread has this id in the store (`thread` holds the id asked for)."""

    def __init__(self, thread: str) -> None:
        self.thread = thread
        super().__init__(f"thread {named(thread)} not found")


class ConcurrencyError(StoreError):
    """Another writer moved the thread since the caller last looked: re-read and retry."""

    def __init__(self, thread: str, expected: Any, actual: int | None) -> None:
        self.thread = thread
        self.expected = expected
        self.actual = actual
        have = "does not exist" if actual is None else f"has head {actual}"
        super().__init__(
            f"thread {thread!r}: expected {shown(expected)} but it {have}; re-read and retry"
        )


FORK_REASONS = (
    "empty",
    "offset_out_of_range",
    "busy",
    "unanswered_tool_calls",
    "recursion",
    "no_directives",
    "no_pending_tool_use",
    "already_launched",
)


class ForkRefused(StoreError):
    """A fork or fan-out was refused; `reason` is one of `FORK_REASONS`. `tool_use_ids` are the
    tool calls it was refused over; `subagent_ids`, for `already_launched`, the sub-agents
    launched for them before."""

    def __init__(self, reason: str, message: str, tool_use_ids: list[str] | None = None,
                 subagent_ids: list[str] | None = None) -> None:
        assert reason in FORK_REASONS, reason
        self.reason = reason
        self.tool_use_ids = list(tool_use_ids or [])
        self.subagent_ids = list(subagent_ids or [])
        super().__init__(message)


REPORT_REASONS = ("not_a_subagent", "no_answer", "parent_waiting")


class ReportRefused(StoreError):
    """A sub-agent's report to its parent was refused; `reason` is one of `REPORT_REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        assert reason in REPORT_REASONS, reason
        self.reason = reason
        super().__init__(message)


class InvalidEvent(StoreError):
    """An event (or an argument standing for one) failed validation; `field` names where."""

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        self.why = why
        super().__init__(f"{field}: {why}" if field else why)


class IntegrityError(StoreError):
    """`verify` found a broken chain; `position` is the first bad event's global position."""

    def __init__(self, position: int | None, why: str) -> None:
        self.position = position
        self.why = why
        where = f"position {position}" if position is not None else "database"
        super().__init__(f"integrity check failed at {where}: {why}")


class Unreadable(StoreError):
    """A stored row a reader cannot read: altered outside threadlog (not JSON, a value of
    another kind, an event of the wrong shape, a fork's history with a hole in it) or nested
    too deeply for Python to parse. The request was fine and asking again gives the same
    answer: what to do is in the message (`verify` names the row, a redaction reads past it)."""


class UnreadableRow(Unreadable):
    """A stored value could not be read as the text it should be (bytes that are not UTF-8):
    the row was altered outside threadlog; a full `verify` names its position."""


class KeyClash(StoreError):
    """Another writer committed a row with the same unique key (an event id, a thread id) while
    this write ran: on a backend whose writers are serialised only once they reach the same
    stream (PostgreSQL). Nothing was written; the store runs such a write again once, which
    then reads what the other writer stored (a retried append returns its records)."""


class Locked(StoreError):
    """Another writer held the database's write lock longer than this one would wait (its
    `timeout`): a long import, a redaction, a purge, a transaction opened by hand. Nothing of
    this write was written; running it again once the lock is free is safe. `path` names the
    database, `why` is the driver's word for it."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        self.why = why
        super().__init__(f"the database {path} stayed locked by another writer ({why}); retry")


class Claimed(StoreError):
    """Another process holds the claim `name` on the database `path` (`Store.claim`), as it does
    for as long as it runs: stop it first (its claim ends with it, however it ends). `pid` is
    its process id when known (on PostgreSQL, that of the client holding it, on whichever
    machine it runs). A caller taking a claim for a purpose of its own may say so (`message`)."""

    def __init__(self, path: str, name: str, pid: int | None, message: str | None = None) -> None:
        self.path = path
        self.name = name
        self.pid = pid
        held = "another process" if pid is None else f"another process (pid {pid})"
        super().__init__(message or f"{held} holds the claim {name!r} on the database {path}; stop it first (its claim "
                                    "ends with it)")


class ReadersHeldOff(StoreError):
    """A second connection could not begin to read: outside WAL mode a writer waiting to commit
    holds new readers off until every open read ends, this process's own among them."""


class OldPagesKept(StoreError):
    """The write is committed, but another connection's read kept the write-ahead log from
    being truncated: old pages (a redacted payload's among them) stay in it until `purge()`
    runs with no reader. Not a refusal: running the write again would find it done.

    One a purge raised (`pages_kept`) holds what keeps the old copies and until when, in the
    backend's words, for `threadlog purge` to say: each backend keeps them somewhere else."""

    held: str | None = None
    until: str | None = None


def pages_kept(path: str, held: str, until: str) -> OldPagesKept:
    """What a purge raises when `held` keeps an erased payload's old copies until `until`."""
    error = OldPagesKept(f"{path}: {held}; the change is committed; call purge() once {until}")
    error.held, error.until = held, until
    return error


class StaleSnapshot(StoreError):
    """A snapshot was refused: an event it covers was redacted after its fold began."""


class SchemaError(StoreError):
    """The file is not a threadlog database this release can open."""


class Deadlocked(StoreError):
    """Two transactions waited for each other and the server cancelled this one, before it wrote
    anything (PostgreSQL; two `fan_out`s at once): running it again is safe."""


class Disconnected(StoreError):
    """No answer from the database server now: it did not answer at the URL, takes no
    connections (starting, shutting down, recovering), or ended the connection (a restart).
    A call under way was not acknowledged; the same call may succeed on a new store later."""


class NotPermitted(StoreError):
    """The database refused this user the statement (PostgreSQL: a privilege not granted, as
    to a role that may only read). Nothing was written."""


class NoStore(SchemaError):
    """A PostgreSQL database (or schema) that holds no threadlog store yet, opened read-only."""

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(f"{where} holds no threadlog store; a read-only open creates nothing: create one with "
                         "`threadlog init` (or check the URL)")


class EmptyFile(SchemaError):
    """A file with no tables, refused (`empty_file`)."""


def empty_file(path: str) -> EmptyFile:
    """The refusal to read, or write into, a file with no tables: it is not a threadlog
    database yet (a mistyped path, a file another tool just made), and only `init` makes it one."""
    return EmptyFile(f"{path} is empty, not a threadlog database yet; create one with `threadlog init` "
                       "(or check --db / $THREADLOG_DB); nothing was written")


# Tables that name the library whose SQLite file it is: the file a user switching to threadlog
# from that library's own saver or session passes by habit.
_OTHERS = ((frozenset({"agent_sessions", "agent_messages"}), "an OpenAI Agents SDK session database"),
           (frozenset({"checkpoints", "writes"}), "a LangGraph SqliteSaver database"))


def not_threadlog(path: str, tables: Collection[str]) -> SchemaError:
    """The refusal to open a SQLite file another program made (nothing is written to it)."""
    for names, what in _OTHERS:
        if names <= set(tables):
            return SchemaError(f"{path} is {what}, not a threadlog one: threadlog does not read its history; "
                               "give threadlog a new path (--db on the command line)")
    return SchemaError(f"{path} is a SQLite database but not a threadlog one "
                       f"(it holds {', '.join(sorted(tables)[:5])}); pass another --db path")


class SchemaTooOld(SchemaError):
    """A read-only opening met a file an older release wrote; a writable opening migrates it."""


def transaction_open(reading: bool) -> StoreError:
    """A write refused because this store's connection has a transaction open: a read view
    (`with store.consistent():`), or another write. Nothing of it was written."""
    if reading:
        return StoreError("a read transaction (`with store.consistent():`) is open on this store, and a write cannot run "
                          "inside it: nothing was written; write after the `with` block ends, or through another Store")
    return StoreError("a write transaction is already open on this store, and a write cannot run inside it: nothing was "
                      "written; write after it ends, or through another Store")


def waiting_inside(reading: bool) -> StoreError:
    """`wait_for_writes` refused because this store's connection has a transaction open: a read
    view (`with store.consistent():`), or a write. Nothing was waited for."""
    if reading:
        return StoreError("wait_for_writes: a read transaction (`with store.consistent():`) is open on this store, and a read "
                          "inside it would not see the writes waited for; nothing was waited for: call it after the `with` "
                          "block ends")
    return StoreError("wait_for_writes: a write transaction is open on this store, and the writes the wait is for may be "
                      "waiting for it; nothing was waited for: call it after the transaction ends")


def unsendable(error: UnicodeEncodeError, path: str) -> StoreError:
    """Text that is not UTF-8 (a lone surrogate: how Python reads bytes of a command line that
    are not UTF-8) given to a call: no database can be sent it, so nothing was read or written."""
    bad = error.object[error.start:error.end] if isinstance(error.object, str) else ""
    return StoreError(f"text that is not UTF-8 ({bad[:8]!r} at index {error.start}) cannot be sent to {path}; "
                      "nothing was read or written")


def first_line(error: BaseException) -> str:
    """A driver error's message as a refusal quotes it: its first line (a hint follows on the
    next), or the error's type when it has no message."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def altered_index(why: str) -> StoreError:
    """The search index was altered outside threadlog (`why`): a cache of the log, rebuilt whole."""
    return StoreError(f"the search index was altered outside threadlog ({why}); rebuild it from the log with "
                      "`threadlog index --rebuild`")


def documents_miscounted(counted: int, held: int, where: str = "it") -> StoreError:
    """An index that wrote `counted` documents and holds `held` (in `where`): in the same words
    on each backend, whichever call counted them (a search, or `threadlog index`)."""
    return altered_index(f"the documents it wrote number {counted:,}, and {'it' if not held else where} holds "
                         f"{f'{held:,}' if held else 'none'}")


# What a fold meets in a stored event whose data does not have its type's shape (`{"options": 5}`
# in a thread.forked): appends validate every event, so only raw SQL stores one.
MISSHAPEN = (AttributeError, KeyError, TypeError, IndexError, ValueError)


def misshapen(error: Exception) -> Unreadable:
    """The refusal for `error`, one of `MISSHAPEN`, raised while reading the log: said in one
    line, pointing at `verify`, which names the altered row."""
    return Unreadable(f"a stored event does not have the shape its type requires ({type(error).__name__}: {error}): its row "
                      "was altered outside threadlog, and `threadlog verify` names it (if verify passes, this is a bug in "
                      "threadlog)")


# What reading or showing a stored event the reader cannot read raises (`unreadable` words each).
UNREADABLE = (Unreadable, RecursionError, *MISSHAPEN)


def unreadable(error: Exception) -> StoreError:
    """What a refusal says of `error`, met while reading or showing the log: a `StoreError`
    says it itself, one of `MISSHAPEN` is an event of the wrong shape (`misshapen`), and a
    RecursionError JSON nested deep enough to parse but not to walk or print."""
    if isinstance(error, StoreError):
        return error
    if isinstance(error, RecursionError):
        return Unreadable("an event is nested too deeply to show; `threadlog verify` names its position")
    return misshapen(error)
