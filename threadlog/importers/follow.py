"""Following session files while another tool writes them: poll, import what is new, repeat.

One loop (`follow`) serves every format that is written live: Claude Code's and pi's JSONL
sessions, appended to a line at a time, and SWE-agent's trajectories, rewritten whole after
each step. What differs by format is small (`Format`): how the sessions under the paths are
found, which files make up each, and how a batch of them is imported.

Polling (stdlib only): the size and modification time of each session's files (for Claude
Code the main file and its sub-agents', in either layout) are checked every `interval` seconds
and a changed session is imported again; a session quiet for `settle` seconds is read once
more, in case a write left both unchanged (a coarse clock). Importing is idempotent, so a
re-read adds only the new lines, and restarting the follower resumes from what the database
already holds. What a file changed in the last `live_within` seconds does not show whole yet
is left for the next poll: a half-written last line (Claude Code, pi), a trajectory empty or
cut short as SWE-agent rewrites it, and a Claude Code response (and its tool results) until
the file shows it complete, however long its lines take to arrive (`claude_code._unfinished`):
an event is written once, whole, never in part.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, TypeVar

from eventstore import Claimed, ConcurrencyError, InvalidEvent, Locked, Store, StoreError
from eventstore.claims import Claim
from eventstore.errors import Disconnected, shown
from eventstore.store import MAX_TIMEOUT

from . import pi, swe_agent
from .claude_code import ASKS, Session, discover, import_sessions
from ..signals import deferred
from .lines import LIVE_SECONDS, BadLine, existing_paths, source_files
from .plan import ImportConflict
from .summary import ImportSummary

S = TypeVar("S")

# How many polls in a row a session's write may find its thread moved by another writer (each
# after a fresh read) before that is taken for no race but a refusal of the session's own.
RACES = 5


@dataclass(frozen=True)
class Format(Generic[S]):
    """What following one format (`name`: claude-code, pi, swe-agent) needs of it.
    `find(sources, unusable)` gives the sessions under `sources` (a path gone meanwhile passed
    over, what it cannot use given to `unusable`); `files(session)` the files whose change
    makes it due again, the first naming it; `load(store, sessions, summary)` imports them,
    idempotently, counting into `summary` what it adds as it is committed (so what was added
    before an error is counted too). `asks` says what to name instead of a path that names
    nothing."""

    name: str
    asks: str
    find: Callable[[Sequence[Path], Callable[[StoreError], None]], Sequence[S]]
    files: Callable[[S], Sequence[Path]]
    load: Callable[[Store, Sequence[S], ImportSummary], ImportSummary]


def follow_claude_code(
    store: Store,
    paths: Sequence[str | Path],
    *,
    interval: float = 0.5,
    settle: float = 5.0,
    live_within: float = LIVE_SECONDS,
    skip_bad: bool = False,
    on_import: Callable[[ImportSummary], None] | None = None,
    on_refused: Callable[[Session | None, StoreError], None] | None = None,
    on_locked: Callable[[Locked], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
    pause: Callable[[float], None] = time.sleep,
    on_lost: Callable[[Disconnected], None] | None = None,
    total: ImportSummary | None = None,
) -> ImportSummary:
    """Mirror the Claude Code sessions under `paths` into `store` until `stop()` returns true
    (`follow`).

    A session with a file changed in the last `live_within` seconds is read as still being
    written (what it does not show complete waits); one quiet longer is taken as it is, and
    read once more when it has been quiet that long: Claude Code 2.1.x writes a null
    `stop_reason` on every line, so a finished session's last answer looked unfinished
    forever, and the mirror never held it.
    """
    claude_code = Format("claude-code", ASKS, discover, lambda session: session.files,
                         lambda into, sessions, summary: import_sessions(into, sessions, skip_bad=skip_bad, live_within=live_within,
                                                                         summary=summary))
    return follow(store, claude_code, paths, interval=interval, settle=settle, live_within=live_within,
                  on_import=on_import, on_refused=on_refused, on_locked=on_locked, stop=stop, pause=pause, on_lost=on_lost,
                  total=total)


# What each format of one file a session is needs: its file name pattern, what to name instead
# of a path that names nothing, what its files are called, and its import of files already found.
_FILE_FORMATS: dict[str, tuple[str, str, str, Callable[..., ImportSummary]]] = {
    "pi": (pi.PATTERN, pi.ASKS, "sessions", pi.import_pi_files),
    "swe-agent": (swe_agent.PATTERN, swe_agent.ASKS, swe_agent.NOUN, swe_agent.import_swe_agent_files),
}


def follow_files(
    store: Store,
    kind: Literal["pi", "swe-agent"],
    paths: Sequence[str | Path],
    *,
    interval: float = 0.5,
    settle: float = 5.0,
    skip_bad: bool = False,
    on_import: Callable[[ImportSummary], None] | None = None,
    on_refused: Callable[[Path | None, StoreError], None] | None = None,
    on_locked: Callable[[Locked], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
    pause: Callable[[float], None] = time.sleep,
    on_lost: Callable[[Disconnected], None] | None = None,
    total: ImportSummary | None = None,
) -> ImportSummary:
    """Mirror the pi session files or the SWE-agent trajectories (`kind`) under `paths` into
    `store` until `stop()` returns true (`follow`). What a file changed in the last
    `LIVE_SECONDS` does not show whole waits for a later poll, and a file quiet longer is read
    once more then, and refused if it is still not whole (a run killed while it wrote):
    - pi appends an entry a line at a time: a half-written last line waits (`pi._plan_file`);
    - SWE-agent rewrites a trajectory whole, in place, after each step: one read empty or cut
      short waits (`swe_agent._read`)."""
    pattern, asks, noun, load = _FILE_FORMATS[kind]
    files = Format(kind, asks, lambda sources, unusable: source_files(sources, pattern, asks, unusable, noun), lambda path: [path],
                   lambda into, found, summary: load(into, found, skip_bad=skip_bad, summary=summary))
    return follow(store, files, paths, interval=interval, settle=settle, live_within=LIVE_SECONDS,
                  on_import=on_import, on_refused=on_refused, on_locked=on_locked, stop=stop, pause=pause, on_lost=on_lost,
                  total=total)


def follow(
    store: Store,
    source: Format[S],
    paths: Sequence[str | Path],
    *,
    interval: float,
    settle: float,
    live_within: float,
    on_import: Callable[[ImportSummary], None] | None,
    on_refused: Callable[[S | None, StoreError], None] | None,
    stop: Callable[[], bool],
    pause: Callable[[float], None] = time.sleep,
    on_locked: Callable[[Locked], None] | None = None,
    on_lost: Callable[[Disconnected], None] | None = None,
    total: ImportSummary | None = None,
) -> ImportSummary:
    """Mirror the sessions of format `source` under `paths` into `store` until `stop()`
    returns true. A session is imported again when one of its files changes, once more when
    it has been quiet `settle` seconds, and once more when it has been quiet `live_within`
    seconds (the importer then takes it as it is: no longer one still being written).
    `on_import` gets the summary of each poll that added events, skipped a bad line not
    skipped before (with `skip_bad`: its `bad` holds only those) or cut a cycle of parents not
    cut before (its `cycles_cut` and `self_parents` hold only those: each named once, as a bad
    line is).

    A session refused for what it holds (a bad line, an event the store refuses, a file
    rewritten since it was imported, a file it may not read) raises, or with `on_refused`
    is passed to it with the error, once, and the others go on being mirrored: one rotated
    file stopped the mirror of every session. A refused session is tried again when its
    files change. So is what the search finds unusable (a directory it may not read, a file
    whose name makes no id), passed with the session `None`. A file or directory removed
    while it is read (a tool deleting old sessions) is passed over; one of `paths` gone (the
    directory followed removed, or renamed) is passed too, once, while it stays gone: it was
    waited on without a word, as if it held nothing new. What it held stays imported, and
    once back it is read as before (what is stored is not imported again).

    The database locked by another writer for longer than the store waits (a long import,
    a redaction, a purge) raises `Locked`, or with `on_locked` is passed to it, once while it
    stays locked: the poll ends there, and its sessions not imported yet (that one's write
    rolled back whole) are due again at the next poll. The follower exited with the lock, and
    a service mirroring sessions stopped mirroring until someone restarted it. So too a
    PostgreSQL server that went away (a restart): `Disconnected`, or with `on_lost` passed to
    it once while it stays away; each poll tries again, and takes the claim again first.
    Another process writing into a thread of a session between the poll's read and its write
    (a `redact` appends its `event.redacted` there) makes the write `ConcurrencyError`: what it
    wrote before stays, and the session is read again at the next poll, which goes on from the
    new head (the follower exited on it, and the mirror stopped). Another writer busy in that
    thread may do it again at the next poll: a session's writes find it so up to `RACES` times
    in a row, each after a fresh read, before it is taken for no race and refused as the
    session's own refusals are (refused after the first, a session finished meanwhile was not
    read again, and the mirror lacked its end).

    Between polls the follower waits with `pause(interval)`: a caller stopping it from a
    signal handler passes one that returns as soon as `stop()` will be true. Returns the total:
    each poll's counts are added to `total` (a new one when None) as the poll ends, however it
    ends, so when the follower raises (a second Ctrl-C, the database locked without
    `on_locked`, the server gone without `on_lost`, a full disk) `total` holds what it wrote
    before: a caller given nothing back had no count of it.

    It holds the store's claim `follow-<format>` while it runs (`Store.claim`): a second
    follower of the format into the database is refused with `Claimed` before it reads
    anything, naming the first's process id when it is known. Two followers of one pi or Claude Code session
    read a turn still being written at different points (its tool results as one message, a
    fork's point), and the second met the first's event under the same id with other content
    and refused that session. Followers of other formats run beside it.
    """
    # One path as a string was read a character at a time ("/" searched everything), and one that
    # names nothing was waited for without a word; a path that goes away later is skipped until it is back.
    sources = existing_paths(paths, source.asks)
    if total is not None and not isinstance(total, ImportSummary):  # (another kind raised once a poll had written)
        raise InvalidEvent("total", f"must be an ImportSummary (or None), not {type(total).__name__}")
    for name, seconds in (("interval", interval), ("settle", settle), ("live_within", live_within)):
        # -1, "1" and 10**30 raised from `time.sleep` once the first poll had written; NaN polled
        # without a pause. The longest is the longest wait for a lock, as for --interval.
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= MAX_TIMEOUT:
            raise InvalidEvent(name, f"must be a number of seconds from 0 to {MAX_TIMEOUT}, not {shown(seconds)}")
    total = ImportSummary() if total is None else total
    seen: dict[Path, tuple[tuple[int, int], ...]] = {}
    quiet_since: dict[Path, float] = {}
    settled: set[Path] = set()
    finished: set[Path] = set()  # read once more after `live_within` quiet seconds
    refused: dict[Path, tuple[tuple[tuple[int, int], ...], str]] = {}  # what each refused session was refused as
    unusable: set[str] = set()  # what the last search could not use, reported when first found
    held_up: set[Path] = set()  # due at a poll the database was locked: due again at the next
    locked = False  # said that the database is locked, and nothing imported since
    lost = False  # said that the server went away, and it has not answered since
    skipped: set[tuple[str, int, str]] = set()  # bad lines reported (each poll of a session skips them again)
    cut: set[tuple[str, int]] = set()  # cycles of parents named (each poll of a session cuts them again)
    raced: dict[Path, int] = {}  # sessions whose last writes in a row found their thread moved since it was read: how many

    def refuse_once(session: S, key: Path, refusal: StoreError) -> None:
        if refused.get(key) != (seen[key], str(refusal)):  # said once, not again when quiet
            refused[key] = (seen[key], str(refusal))
            refuse(session, refusal)

    def refuse(session: S | None, error: StoreError) -> None:
        if on_refused is None:
            raise error
        on_refused(session, error)

    with _claim(store, source.name) as claim:  # held while it runs: a second follower of the format is refused
        def gone(error: Disconnected) -> None:
            nonlocal lost
            if on_lost is None:
                raise error
            if not lost:
                on_lost(error)
            lost = True

        while not stop():
            try:
                claim.keep()  # on PostgreSQL a restart of the server let go of it: taken again, or Claimed
            except Disconnected as error:  # the server away: the next poll tries again
                gone(error)
                pause(interval)
                continue
            due: list[S] = []
            now = time.monotonic()
            found: list[StoreError] = []
            found.extend(StoreError(f"{path} is gone (removed or renamed); what was imported from it stays")
                         for path in sources if not path.exists())
            for session in source.find(sources, found.append):
                files = source.files(session)
                try:
                    signature = tuple((s.st_size, s.st_mtime_ns) for s in (f.stat() for f in files))
                except FileNotFoundError:
                    continue
                key = files[0]
                if seen.get(key) != signature:
                    seen[key] = signature
                    quiet_since[key] = now
                    settled.discard(key)
                    finished.discard(key)
                    due.append(session)
                elif key not in settled and now - quiet_since[key] >= settle:
                    settled.add(key)
                    due.append(session)
                elif key not in finished and now - quiet_since[key] >= live_within:
                    finished.add(key)
                    due.append(session)
                elif key in held_up:
                    due.append(session)
            for problem in found:
                if str(problem) not in unusable:
                    refuse(None, problem)
            unusable = {str(problem) for problem in found}
            if due:
                polled = ImportSummary()  # what the poll's sessions add, counted as each write commits
                said: list[ImportSummary | None] = []  # once counted into `total`: what is to be said of it

                def count() -> None:
                    if not said:
                        said.append(_count(total, _new_to_say(polled, skipped, cut)))

                try:
                    try:
                        for n, session in enumerate(due):
                            files = source.files(session)
                            key = files[0]
                            try:
                                source.load(store, [session], polled)
                            except Locked as error:  # another writer's: each session after it would wait as long again
                                if on_locked is None:
                                    raise
                                held_up.update(source.files(waiting)[0] for waiting in due[n:])
                                if not locked:
                                    on_locked(error)
                                locked = True
                                break
                            except Disconnected as error:  # the server went away: what is left waits for it
                                gone(error)
                                held_up.update(source.files(waiting)[0] for waiting in due[n:])
                                break
                            except ConcurrencyError as error:  # another writer's event (a redaction) since it was read
                                raced[key] = raced.get(key, 0) + 1
                                if raced[key] <= RACES:  # read again at the next poll, which goes on from the new head
                                    held_up.add(key)
                                    continue
                                refuse_once(session, key, error)  # after as many fresh reads: no race, and said
                            except FileNotFoundError:  # removed since it was found: gone, or back (rotated) at the next poll
                                seen.pop(key, None)
                            except (InvalidEvent, BadLine, ImportConflict, OSError) as error:  # the session's own: not a full disk
                                refuse_once(session, key, _unreadable(error, files) if isinstance(error, OSError) else error)
                            else:
                                refused.pop(key, None)
                                raced.pop(key, None)
                                locked = lost = False
                            held_up.discard(key)
                        with deferred():
                            count()
                    finally:
                        # Counted however the poll ends: an error that stops the follower (a full disk, a
                        # server's cancel, a second Ctrl-C, between two sessions too) left what the poll's
                        # sessions had committed before it out of the total. A signal handler that raises
                        # (the CLI's second signal) does not cut the count in two: the count waits for it,
                        # and where it lands before the count began, the count is made after it.
                        with deferred():
                            count()
                finally:
                    count()
                    if on_import is not None and said[0] is not None:
                        on_import(said[0])
            pause(interval)
        return total


def _claim(store: Store, name: str) -> Claim:
    """The store's claim for a follower of the format `name`, or `Claimed` saying that another
    follower of it runs into the database."""
    try:
        return store.claim(f"follow-{name}")
    except Claimed as error:
        pid = "" if error.pid is None else f" (pid {error.pid})"
        raise Claimed(error.path, error.name, error.pid, f"another {name} follower{pid} is running into the database "
                      f"{error.path}; stop it first: one follower of each format runs into a database at a time") from None


def _unreadable(error: OSError, files: Sequence[Path]) -> StoreError:
    """A file of a session (its `files`) the follower may not read, as a refusal naming it; an
    `error` that names no file of the session (the store's own) is raised as it is."""
    if error.filename is None or Path(error.filename) not in files:
        raise error
    return StoreError(f"cannot read {error.filename} ({error.strerror}); make it readable to mirror it")


def _new_to_say(polled: ImportSummary, skipped: set[tuple[str, int, str]], cut: set[tuple[str, int]]) -> ImportSummary:
    """`polled` keeping only the bad lines and the cuts of cycles not in `skipped` and `cut`
    (each poll of a session skips and cuts them again), which then hold them: a poll that an
    error stopped named again what an earlier poll had said of a session it re-read."""
    polled.bad = [bad for bad in polled.bad if bad not in skipped]
    skipped.update(polled.bad)
    polled.cycles_cut = [line for line in polled.cycles_cut if line not in cut]
    polled.self_parents = [line for line in polled.self_parents if line not in cut]
    cut.update(polled.cycles_cut, polled.self_parents)
    return polled


def _count(total: ImportSummary, summary: ImportSummary) -> ImportSummary | None:
    """Add a poll's `summary` to `total`; returns it when it is to be said (it added events,
    skipped a bad line or cut a cycle of parents), else None (one that only skipped says nothing)."""
    worth = summary.added or summary.bad or summary.cycles_cut or summary.self_parents
    if worth:
        total.merge(summary)
    total.waiting = summary.waiting  # what the latest poll left (each poll reads it again: not a sum)
    total.waiting_files = list(summary.waiting_files)
    return summary if worth else None
