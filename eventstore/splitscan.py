"""A full verify in two processes (`split_verify`), for large logs in a SQLite file.

One process checks a log of messages at some 140,000 events a second when the machine is
quiet (6.9-7.0 µs an event on a file of 2.2M events and 202,000 streams: ~1.75 µs of it
SQLite's row read, most of the rest hashing), half that when it is busy. A large log is therefore cut
in two at a position: this process checks the events up to it (and the streams created
there), a child process opened on the same file checks those after it (and the streams
created there), both at once. A stream begun in the first part and continued in the second
is taken up by the second from its stored event before the cut (`FullScan.resume`), and the
two are joined here: the first part's chain must end exactly where the second took it up
(offset, hash, pending facts, position), and the joined chain is then finished against the
stream's row as one scan finishes it. A fork's point in the first part is read from the file
by the second; the first part checks that event.

Only a pass is taken from the split: when either part finds any problem, when the two did not
see the same log (a writer committed between the two snapshots), or when the child cannot run,
`split_verify` returns None and the caller runs the one-process scan, which names the
problem as it always does. So a split can make a passing verify faster, never change a
verdict. tests/test_verify_split.py holds the two to the same verdicts on every cut.

The child is a fresh interpreter (`python -m eventstore.splitscan`), not a fork: a forked
process must not use, or open beside, the SQLite connections it inherited.
"""

from __future__ import annotations

import bisect
import os
import pickle
import selectors
import subprocess
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from .backend import Backend
from .chaincheck import Chain
from .errors import StoreError
from .facts import Facts
from .fullscan import Fold, FullScan, Part, Resumed
from .sqlite import SQLiteBackend
from .structure import Structure

# The work of each part, counted in events. Measured on a log of 2.7M events and 202,000
# streams (200,000 of them one-event forks): ~11 µs an event, ~65 µs more for each stream
# started (its row read, its first event checked, its row compared, a fork's point read), and
# ~0.6 s for the child to start (its imports) before it checks anything. A stream's start has
# cost 8 events since its first event's shape is checked too (`chaincheck._unwritten`, ~9 µs a
# fork's): on the scale file (2.2M events, 200,000 one-event forks after 2M messages) the later
# part then ends within 0.05 s of the first (10.0-10.1 s in all), where at 6 it ended 1.1-1.4 s
# after it (10.3-10.6 s).
_STREAM_COST = 8.0
_CHILD_START = 60_000
SPLIT_FROM = 300_000  # events: below this a verify takes a few seconds, and the child's start (~0.6 s) weighs

# Seconds the child waits for SQLite's lock to read. Outside WAL mode a writer waiting to commit
# holds off new readers until the parent's read transaction ends, and the parent waits for the
# child: the child gives up soon (the verify then runs in one scan) instead of waiting that out.
_CHILD_WAIT = 0.5

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where `eventstore` is imported from


class View(NamedTuple):
    """What a part saw of the log: the two parts must have seen the same one."""

    last_position: int
    streams: int
    events: int
    last_hash: str | None


class Outcome(NamedTuple):
    """What the later part sends back."""

    view: View
    checked: int
    redacted: int
    problems: int
    resumed: dict[str, Resumed]
    handed_on: dict[str, tuple[Any, ...]]  # `_state` of each stream it took up
    structure_checked: bool = False  # whether it checked the file's structure beside its scan (`Structure`)
    damage: str | None = None  # what that check found


def split_verify(backend: Backend, path: str, progress: Callable[[int, int], None] | None, fold: Fold,
                 mid: int | None = None, structure: Structure | None = None) -> tuple[int, int, int] | None:
    """(streams, events checked, events redacted) when the log in the file at `path` (the one
    `backend` reads, inside its read transaction) passed in two parts, cut after position
    `mid` (by default where the work halves: `_cut`); None when it must be checked in one scan.
    A checkpoint's `fold` is folded over the first part as it is checked, then over the stored
    hashes after it (while the child checks them), and checked when both parts passed. Given
    `structure`, the child checks the file's structure beside its part and it is told what the
    child found (if the child could check it)."""
    try:
        view = view_of(backend)
    except StoreError:  # the last event holds a value reads refuse (text that is not UTF-8): one scan names it
        return None
    if mid is None:
        mid = _cut(view, backend.stream_starts())
    child = _Child.start(path, Part(mid, True), view, structure is not None)
    if child is None:
        return None
    try:
        scan = FullScan(backend, part=Part(mid, False))
        try:
            checked = scan.run(fold, child.adding_to(progress), (view.streams, view.events))
        except _Declined:  # it saw another log (a commit between the two snapshots): one scan, now
            return None
        if not scan.problems:
            try:
                fold.add_after(backend, mid)
            except StoreError:  # a hash past the cut reads refuse (text that is not UTF-8): one scan names it
                return None
        outcome = child.outcome(None if progress is None else lambda later: progress(checked + later, view.events))
    finally:
        child.stop()
    report = joined(view, scan, checked, outcome)
    if report is not None:
        fold.check()
        if structure is not None and outcome is not None and outcome.structure_checked:
            structure.reported(outcome.damage)
    return report


def later_part(backend: Backend, part: Part, progress: Callable[[int, int], None] | None = None,
               view: View | None = None) -> Outcome:
    """Check the later part (what the child runs, inside its read transaction, on `view`)."""
    view = view_of(backend) if view is None else view
    scan = FullScan(backend, part=part)
    checked = scan.run(Fold(None), progress, (view.streams, view.events))
    return Outcome(view, checked, scan.redacted, len(scan.problems), scan.resumed,
                   {stream_id: _state(chain) for stream_id, chain in scan.handed_on.items()})


def joined(view: View, scan: FullScan, checked: int, outcome: Outcome | None) -> tuple[int, int, int] | None:
    """The report of a log checked in two parts (`scan` the first, run on `view`), or None
    unless both passed, saw the same log, and every stream the later part took up joins the
    first part's chain of it."""
    if outcome is None or scan.problems or outcome.problems or outcome.view != view or scan.early:
        return None
    if not _join(scan, outcome):
        return None
    return view.streams, checked + outcome.checked, scan.redacted + outcome.redacted


def splittable(backend: Backend) -> str | None:
    """The file a full verify of this log may check in two processes (a large log in a SQLite
    file, on a POSIX system, from an interpreter that can start another), else None."""
    if (not isinstance(backend, SQLiteBackend) or not _python(sys.executable) or os.name != "posix"  # pipes and selectors
            or backend.last_position() < SPLIT_FROM):
        return None
    path = backend.opened_file()
    return path if path is not None and os.path.isfile(path) else None


def _python(executable: str) -> bool:
    """Whether `executable` is a Python interpreter to start the child with: not a frozen
    application's binary, nor a server that embeds Python (uWSGI, mod_wsgi), which
    `sys.executable` names there and which `-m` would not run as Python."""
    name = os.path.basename(executable).lower()
    return bool(executable) and not getattr(sys, "frozen", False) and name.startswith(("python", "pypy"))


def _cut(view: View, starts: list[int]) -> int:
    """The position that halves the work (the child's start counted in the later part's),
    positions taken as evenly filled."""
    per_position = view.events / max(view.last_position, 1)
    half = (view.events + _STREAM_COST * len(starts) + _CHILD_START) / 2
    lo, hi = 0, view.last_position
    while lo < hi:
        mid = (lo + hi) // 2
        if per_position * mid + _STREAM_COST * bisect.bisect_right(starts, mid) < half:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _join(scan: FullScan, outcome: Outcome) -> bool:
    """Join each stream the later part took up to the first part's chain of it, and finish the
    rest of the first part's chains; whether all passed."""
    chains = scan.chains
    for stream_id, resumed in outcome.resumed.items():
        chain = chains.get(stream_id)
        if chain is None:
            return False
        if (chain.expected != resumed.offset or chain.prev != resumed.prev or chain.last_position != resumed.position
                or Facts.load(chain.facts_json) != Facts.load(resumed.facts)):
            return False
        state = outcome.handed_on.get(stream_id)
        if state is None:  # the later part found it bad (a problem, counted) or never finished it
            return False
        _continue(chain, state)
    for chain in list(chains.values()):
        if not scan.mine(chain.row):
            return False
        scan.finish(chain)
    return not scan.problems


def _state(chain: Chain) -> tuple[Any, ...]:
    """What a chain the later part took up ended with, for `_continue`."""
    return (chain.prev, chain.facts_json, chain.expected, chain.last_position, chain.first_position, chain.first_message,
            chain.kind, chain.count, chain.redacted)


def _continue(chain: Chain, state: tuple[Any, ...]) -> None:
    """Carry the first part's chain on to where the later part's ended."""
    prev, facts_json, expected, last_position, first_position, first_message, kind, count, redacted = state
    if chain.first_position is None and first_position is not None:  # its start came in the later part
        chain.first_position, chain.kind = first_position, kind
    if chain.first_message is None:
        chain.first_message = first_message
    chain.prev, chain.facts_json, chain.facts = prev, facts_json, Facts.load(facts_json)
    chain.expected, chain.last_position = expected, last_position
    chain.count += count
    chain.redacted += redacted


def view_of(backend: Backend) -> View:
    last = backend.last_position()
    row = backend.event_at_position(last) if last else None
    streams, events = backend.counts()
    return View(last, streams, events, row.hash if row is not None else None)


_DECLINED = 3  # the child's exit status when it saw another log than its parent


class _Declined(Exception):
    """The child declined: the first part stops."""


class _Child:
    """The process checking the later part: told its part on stdin, it reports its count
    (8-byte numbers) on a pipe of its own as it goes, and its `Outcome` on stdout at the end."""

    def __init__(self, process: subprocess.Popen[bytes], counts: int) -> None:
        self.process, self.counts, self.later, self.counting = process, counts, 0, True

    @classmethod
    def start(cls, path: str, part: Part, view: View, structure: bool = False) -> _Child | None:
        """The child, told its part and the view of the log this process has (it exits at once,
        declining, when its own differs), and whether to check the file's structure beside it."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_ROOT, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)])
        reading, writing = os.pipe()
        try:
            # -P: not the working directory first on the path (`-m` puts it there), where another
            # package named `eventstore` would run as the child.
            process = subprocess.Popen([sys.executable, "-P", "-m", "eventstore.splitscan"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, pass_fds=(writing,))
        except (OSError, ValueError):
            os.close(reading)
            return None
        finally:
            os.close(writing)
        os.set_blocking(reading, False)
        child = cls(process, reading)
        try:
            process.stdin.write(pickle.dumps((os.path.abspath(path), part, view, writing, os.getpid(), structure)))  # type: ignore[union-attr]
            process.stdin.close()  # type: ignore[union-attr]
        except OSError:  # it died at once
            child.stop()
            return None
        return child

    def read_count(self) -> int:
        """The later part's count, as last sent (the pipe is read without waiting)."""
        if not self.counting:
            return self.later
        try:
            chunk = os.read(self.counts, 4096)
        except BlockingIOError:
            return self.later
        if not chunk:
            self.counting = False  # it exited
        whole = len(chunk) // 8 * 8
        if whole:
            self.later = int.from_bytes(chunk[whole - 8:whole], "big")
        return self.later

    def adding_to(self, progress: Callable[[int, int], None] | None) -> Callable[[int, int], None]:
        """The first part's progress calls (every 10,000 events), with the later part's count
        added; each raises `_Declined` once the child has exited declining (`_DECLINED`)."""
        def report(done: int, total: int) -> None:
            if self.process.poll() == _DECLINED:
                raise _Declined
            if progress is not None:
                progress(done + self.read_count(), total)

        return report

    def outcome(self, progress: Callable[[int], None] | None) -> Outcome | None:
        """Wait for the later part's `Outcome` (None if it failed), telling `progress` its count."""
        stdout = self.process.stdout
        assert stdout is not None
        received = bytearray()
        out = stdout.fileno()
        # A selector, not `select.select`, which refuses a descriptor numbered past 1023 (a
        # process holding many files open, a server's sockets).
        with selectors.DefaultSelector() as waiting:
            waiting.register(out, selectors.EVENT_READ)
            if self.counting:
                waiting.register(self.counts, selectors.EVENT_READ)
            while True:
                ready = {key.fd for key, _ in waiting.select(1.0)}
                if self.counts in ready or not ready:
                    counting = self.counting
                    later = self.read_count()
                    if counting and not self.counting:  # it closed its end: nothing more to wait for there
                        waiting.unregister(self.counts)
                    if progress is not None:
                        progress(later)
                if out in ready:
                    chunk = os.read(out, 1 << 16)
                    if not chunk:
                        break
                    received += chunk
        if self.process.wait() != 0:
            return None
        try:
            outcome = pickle.loads(received)
        except Exception:  # noqa: BLE001 - cut short: check in one scan
            return None
        return outcome if isinstance(outcome, Outcome) else None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        if self.counts >= 0:
            os.close(self.counts)
            self.counts = -1


def _later_part() -> None:
    """The child: check the later part and send back the `Outcome`."""
    path, part, view, progress_fd, parent, check_structure = pickle.loads(sys.stdin.buffer.read())
    backend = SQLiteBackend(path, read_only=True, timeout=_CHILD_WAIT)

    def report(done: int, total: int) -> None:
        if os.getppid() != parent:  # the verify was stopped (killed): so is this part
            os._exit(1)
        try:
            os.write(progress_fd, done.to_bytes(8, "big"))
        except OSError:
            pass

    with backend.read_transaction():
        if view_of(backend) != view:  # a commit since the parent's snapshot: its part would not join
            sys.exit(_DECLINED)
        structure = Structure(backend).start() if check_structure else None  # beside the scan
        outcome = later_part(backend, part, report, view)
        if structure is not None:
            done, found = structure.wait()
            outcome = outcome._replace(structure_checked=done, damage=found)
    sys.stdout.buffer.write(pickle.dumps(outcome))
    sys.stdout.buffer.flush()


if __name__ == "__main__":  # run as `python -m eventstore.splitscan`: its classes must be the package's
    from eventstore.splitscan import _later_part as _run

    _run()
