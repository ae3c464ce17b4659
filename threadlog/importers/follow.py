"""Following session files while another tool writes them: poll, import what is new, repeat.

Polling (stdlib only): the size and modification time of each session's files (the main
file and its sub-agents', in either layout) are checked every `interval` seconds and a
changed session is imported again; a session quiet for `settle` seconds is read once more,
in case a write left both unchanged (a coarse clock). Importing is idempotent, so a re-read
adds only the new lines, and restarting the follower resumes from what the database
already holds. A half-written last line is left for the next poll, and so is a response
(and its tool results) until the file shows it complete, however long its lines take to
arrive (`claude_code._unfinished`): an event is written once, whole, never in part.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from eventstore import InvalidEvent, Store, StoreError

from .claude_code import ASKS, LIVE_SECONDS, Session, discover, import_sessions
from .lines import BadLine, existing_paths
from .plan import ImportConflict
from .summary import ImportSummary


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
    stop: Callable[[], bool] = lambda: False,
) -> ImportSummary:
    """Mirror the sessions under `paths` into `store` until `stop()` returns true.

    A session with a file changed in the last `live_within` seconds is read as still being
    written (what it does not show complete waits); one quiet longer is taken as it is, and
    read once more when it has been quiet that long: Claude Code 2.1.x writes a null
    `stop_reason` on every line, so a finished session's last answer looked unfinished
    forever, and the mirror never held it. `on_import` gets the summary of each poll that
    added events.

    A session refused for what it holds (a bad line, an event the store refuses, a file
    rewritten since it was imported, a file it may not read) raises, or with `on_refused`
    is passed to it with the error, once, and the others go on being mirrored: one rotated
    file stopped the mirror of every session. A refused session is tried again when its
    files change. So is what the search finds unusable (a directory it may not read, a file
    whose name makes no id), passed with the session `None`. A file or directory removed
    while it is read (Claude Code deleting old sessions) is passed over. Returns the total.
    """
    # One path as a string was read a character at a time ("/" searched everything), and one that
    # names nothing was waited for without a word; a path that goes away later is skipped until it is back.
    sources = existing_paths(paths, ASKS)
    total = ImportSummary()
    seen: dict[Path, tuple[tuple[int, int], ...]] = {}
    quiet_since: dict[Path, float] = {}
    settled: set[Path] = set()
    finished: set[Path] = set()  # read once more after `live_within` quiet seconds
    refused: dict[Path, tuple[tuple[tuple[int, int], ...], str]] = {}  # what each refused session was refused as
    unusable: set[str] = set()  # what the last search could not use, reported when first found

    def refuse(session: Session | None, error: StoreError) -> None:
        if on_refused is None:
            raise error
        on_refused(session, error)

    while not stop():
        due: list[Session] = []
        now = time.monotonic()
        found: list[StoreError] = []
        for session in discover(sources, found.append):
            files = session.files
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
        for problem in found:
            if str(problem) not in unusable:
                refuse(None, problem)
        unusable = {str(problem) for problem in found}
        if due:
            polled = ImportSummary()
            for session in due:
                key = session.files[0]
                try:
                    polled.merge(import_sessions(store, [session], skip_bad=skip_bad, live_within=live_within))
                except FileNotFoundError:  # removed since it was found: gone, or back (rotated) at the next poll
                    seen.pop(key, None)
                except (InvalidEvent, BadLine, ImportConflict, OSError) as error:  # the session's own: not a full disk
                    refusal = _unreadable(error, session) if isinstance(error, OSError) else error
                    if refused.get(key) != (seen[key], str(refusal)):  # said once, not again when quiet
                        refused[key] = (seen[key], str(refusal))
                        refuse(session, refusal)
                else:
                    refused.pop(key, None)
            _report(total, polled, on_import)
        time.sleep(interval)
    return total


def _unreadable(error: OSError, session: Session) -> StoreError:
    """A file of `session` the follower may not read, as a refusal naming it; an `error` that
    names no file of the session (the store's own) is raised as it is."""
    if error.filename is None or Path(error.filename) not in session.files:
        raise error
    return StoreError(f"cannot read {error.filename} ({error.strerror}); make it readable to mirror its session")


def _report(total: ImportSummary, summary: ImportSummary, on_import: Callable[[ImportSummary], None] | None) -> None:
    if summary.added:
        total.merge(summary)
        if on_import is not None:
            on_import(summary)
    total.waiting = summary.waiting  # what the latest poll left (each poll reads it again: not a sum)
    total.waiting_files = list(summary.waiting_files)
