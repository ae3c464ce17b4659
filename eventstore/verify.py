"""`verify`: every hash chain and every stored column that changes behaviour, recomputed.

A full verify reads the log once, in position order (`eventstore.fullscan`); `only` checks a
few named streams whole; each runs one `Chain` per stream (`eventstore.chaincheck`).

`verify(since=C)` checks only the events after checkpoint C's position, each chained onto
the stored event before it (cost proportional to the new events), and extends C over them:
the checkpoint it returns covers the whole log if C still does (`verify(checkpoint=C)`
proves that; this does not read what C covers).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from .backend import Backend, EventRow, StreamRow
from .chaincheck import (NO_SKELETON_DIGEST, NOT_A_SKELETON, Chain, Problem, chain_from, check_start, check_stream, first_problem,
                         fork_point_ancestry, lineage, loads, unbound)
from .errors import IntegrityError, StoreError, UnreadableRow
from .fullscan import Fold, FullScan
from .structure import Structure
from .integrity import Checkpoint, counted, digest, event_tag, extend_log_digest, foreign_code, format_checkpoint, hash_at, parse_checkpoint
from .ranges import MAX_INDEX
from .skeleton import is_skeleton


@dataclass(frozen=True)
class VerifyReport:
    """What a `verify` that passed checked: how many streams and events, how many of them
    redacted (with `since`: those among the new events, and the older ones the new
    redactions erased), and the checkpoint proven or extended."""

    streams: int
    events: int
    redacted: int
    checkpoint: str | None = None  # the checkpoint proven, or (with `since`) the one extended to the log's end

    def to_json(self) -> dict[str, Any]:
        """The report as `threadlog verify --json` prints it."""
        out: dict[str, Any] = {"ok": True, "streams": self.streams, "events": self.events, "redacted": self.redacted}
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        return out


def verify(backend: Backend, progress: Callable[[int, int], None] | None = None,
           only: Collection[str] | None = None, checkpoint: Checkpoint | None = None) -> VerifyReport:
    """Recompute every chain and every stored column that changes behaviour; raise
    `IntegrityError` naming the lowest bad position.

    `progress(done, total)` is called as events are checked. `only` checks those streams'
    own events and rows (a restore checks what it wrote). `checkpoint` (position, digest)
    is folded during the same scan: the log must still hold what it covered.
    """
    foreign = foreign_code(backend)
    if foreign is not None:
        raise IntegrityError(None, foreign)
    if only is not None:
        report = _verify_streams(backend, only)
        _check_listing(backend, only)
        return report
    _check_position_range(backend)
    from .splitscan import split_verify, splittable  # here: it imports subprocess, at every process start

    structure = Structure(backend)
    path = splittable(backend)
    if path is not None:  # a large log: two processes, when it passes (`splitscan`); the later checks the structure
        split = split_verify(backend, path, progress, Fold(checkpoint), structure=structure)
        if split is not None:
            _check_listing(backend)
            _check_unseen(backend)
            structure.check()
            return VerifyReport(*split)
    structure.start()  # beside the scan: another core's work
    scan = FullScan(backend)
    checked = scan.run(Fold(checkpoint), progress)
    if scan.problems:
        position, why = first_problem(scan.problems)
        raise IntegrityError(position, why)
    _check_listing(backend)
    _check_unseen(backend)
    structure.check()
    return VerifyReport(scan.streams, checked, scan.redacted)


def _check_listing(backend: Backend, ids: Collection[str] | None = None) -> None:
    """Refuse a stream whose listing key disagrees with its last activity (only an edit outside
    threadlog stores one): `threads()`, `threadlog ls` and `@last` would put it out of order.
    Checked after the chains, which name a wrong `last_position` itself."""
    found = backend.misfiled_stream(ids)
    if found is not None:
        stream_id, last_position, key = found
        raise IntegrityError(last_position if isinstance(last_position, int) else None,
                             f"{stream_id}: its stored listing key {key!r} disagrees with its last_position "
                             f"{last_position!r}, so thread listings put it out of order")


def _check_unseen(backend: Backend) -> None:
    """Refuse an event that readers tailing the log never return (PostgreSQL: its `txid` moved
    past every transaction, only by an edit outside threadlog). The scan reads the view whole
    and finds its chain intact, while `follow` and the search index pass over it for good."""
    position = backend.unseen_position()
    if position is not None:
        raise IntegrityError(position, "the event's stored transaction id (txid) names no finished transaction, so "
                             "readers tailing the log (follow, the search index) never return it (the row was altered "
                             "outside threadlog)")


def _check_position_range(backend: Backend) -> int:
    """Refuse a row outside positions 1..2^62, which only an edit outside threadlog writes. Every
    scan reads positions from 1 up, where readers find a thread's events by offset: a row at 0
    or below would be read as part of its thread and never checked. Above 2^62 (what a restore
    keeps and any call takes as a position), every later write would be refused. Returns the
    largest position."""
    first = backend.first_position()
    if first is not None and first < 1:
        raise IntegrityError(first, f"a row holds position {first}: positions start at 1, so no check reads it while "
                             "readers find it by its offset (a row written outside threadlog)")
    last = backend.last_position()
    if last > MAX_INDEX:
        raise IntegrityError(last, f"a row holds position {last}: positions go up to {MAX_INDEX} (2^62), and every write "
                             "after it would be refused (a row written outside threadlog)")
    taken = backend.sequence_position()
    if taken is not None and taken <= last:  # it only moves forward, past every position a write took
        # Named at the first row the next write collides with: the sequence moved back, or a
        # row's position moved past it (which, named nowhere, read as a fault of the file).
        held = next(iter(backend.all_events(taken - 1, 1, True)), None)
        raise IntegrityError(last if held is None else held.position,
                             f"the next write would take position {taken}, where the log already goes to {last}: "
                             "every write collides with a stored event until the positions pass it (the sequence "
                             "event_positions was moved back, or a row's position moved forward, outside threadlog; "
                             f"SELECT setval('event_positions', {last}) puts the sequence back)")
    return last


def _verify_streams(backend: Backend, only: Collection[str]) -> VerifyReport:
    """Check the named streams whole, each with one range read (a restore's few)."""
    problems: list[Problem] = []
    checked = redacted = 0
    for stream_id in only:
        chain, problem = check_stream(backend, stream_id)
        if chain is not None:
            checked += chain.count
            redacted += chain.redacted
        if problem is not None:
            problems.append(problem)
    if problems:
        position, why = first_problem(problems)
        raise IntegrityError(position, why)
    return VerifyReport(len(only), checked, redacted)


def verify_since(backend: Backend, checkpoint: str, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Check every event after the checkpoint's position, chained onto the stored events
    before it, and the rows of the streams they belong to; return the checkpoint extended
    over them. Reads only the new events (and one stored event per stream they touch).

    A row it reads that cannot be decoded was altered: a full verify then names where.
    `progress(done, total)` is told every 10,000 events checked, both counted in positions."""
    try:
        return _verify_since(backend, checkpoint, progress)
    except UnreadableRow as unreadable:
        verify(backend)  # raises IntegrityError naming the altered row's position
        raise IntegrityError(None, str(unreadable)) from None


def _verify_since(backend: Backend, checkpoint: str, progress: Callable[[int, int], None] | None) -> VerifyReport:
    given = parse_checkpoint(checkpoint)
    upto, value = given.position, given.digest
    foreign = foreign_code(backend)
    if foreign is not None:
        raise IntegrityError(None, foreign)
    last = _check_position_range(backend)
    if last < upto:
        raise IntegrityError(last + 1, f"the log ends at position {last}, below checkpoint {given}'s {upto} "
                             "(events were removed)")
    covered = hash_at(backend, upto)
    if given.last is not None and (covered is None or event_tag(upto, covered) != given.last):
        found = (f"the log holds no event at position {upto}, the last one checkpoint {given} covers" if covered is None else
                 f"the event at position {upto} is not the one checkpoint {given} covered there (its last)")
        raise IntegrityError(upto, f"{found}: the checkpoint was taken of another log, or that event was "
                             f"{'removed' if covered is None else 'rewritten'} (`verify --checkpoint` proves all it covers)")
    problems: list[Problem] = []
    chains: dict[str, Chain | None] = {}
    ancestries: dict[str, list[StreamRow]] = {}
    checked = redacted = 0
    # The checkpoint is extended as the rows come, in position order: every new event's
    # position and hash, kept for the end, held 310 MB at 900,000 events.
    extended, last_hash = value, None
    rows = backend.all_events(upto, None, whole=True)
    for row in rows if progress is None else counted(rows, progress, last - upto, lambda row: row.position - upto):
        # Every event the snapshot holds is checked, but only those up to `last` are covered: on
        # PostgreSQL, events past it (committed while another transaction was open) may yet have a
        # lower position commit below them, and a checkpoint naming `last` covered them too (a
        # later check of it failed: "removed, added or rewritten", nothing having changed).
        if row.position <= last:
            extended = extend_log_digest(extended, ((row.position, row.hash),))
            if row.position == last:
                last_hash = row.hash
        if row.type == "event.redacted":
            erased = _check_redacted_target(backend, row)
            if isinstance(erased, tuple):
                problems.append(erased)
            elif erased is not None and erased <= upto:  # counted as whole by the run that proved the checkpoint
                redacted += 1
        stream_id = row.stream_id
        if stream_id not in chains:
            ancestry = fork_point_ancestry(backend, stream_id)  # not to the root: a deep chain of forks made it quadratic
            if not ancestry:
                problems.append((row.position, "event belongs to no known stream"))
                chains[stream_id] = None
                continue
            ancestries[stream_id] = ancestry
            start = chain_from(backend, ancestry, row.offset, row.position)
            if isinstance(start, tuple):
                problems.append(start)
                chains[stream_id] = None
                continue
            chains[stream_id] = start
        chain = chains[stream_id]
        if chain is None:
            continue
        problem = chain.step(backend, row)
        checked += 1
        if problem is not None:
            problems.append(problem)
            chains[stream_id] = None
    for stream_id, chain in chains.items():
        if chain is None:
            continue
        redacted += chain.redacted
        ancestry = ancestries[stream_id]
        problem = chain.finish(lineage(ancestry[1]) if len(ancestry) > 1 else None)
        if problem is None and chain.partial:  # where it forks from and its kind: from its first event
            problem = check_start(backend, ancestry[0], chain.start)
        if problem is not None:
            problems.append(problem)
    if problems:
        position, why = first_problem(problems)
        raise IntegrityError(position, why)
    _check_listing(backend, chains)
    checkpoint_now = format_checkpoint(last, extended, hash_at(backend, last) if last_hash is None else last_hash)
    return VerifyReport(len(chains), checked, redacted, checkpoint_now)


def _check_redacted_target(backend: Backend, row: EventRow) -> Problem | int | None:
    """A new `event.redacted` erased an older event, which `since` does not check: its row must
    match the skeleton the record names (that it points back is the chain check's). Returns
    the problem, or the position erased once it checks out (None when there is nothing to say)."""
    try:
        data = loads(row.data)
        target = data.get("position") if isinstance(data, dict) else None
    except (ValueError, TypeError, RecursionError):  # TypeError: data of another kind (a blob, altered)
        return None  # the chain check reports unreadable data
    if not isinstance(target, int):
        return None
    try:
        erased = backend.event_at_position(target)
    except StoreError:  # its text is not UTF-8, and since checks no other event that would name it
        return target, (f"the row the event.redacted at position {row.position} erased cannot be read (text that is "
                        "not UTF-8); it was altered outside threadlog")
    if erased is None or erased.redacted_by != row.position:
        return None  # the chain check names it (`chaincheck.erased_by`)
    skeleton = data.get("skeleton_digest")
    if not isinstance(skeleton, str) and unbound(row):
        return target, f"the event.redacted at position {row.position} {NO_SKELETON_DIGEST}"
    if isinstance(skeleton, str) and (erased.data.__class__ is not str or digest(erased.data) != skeleton):  # a blob: altered
        return target, "the redacted row does not match the skeleton its event.redacted recorded"
    if not is_skeleton(erased.type, erased.data):
        return target, NOT_A_SKELETON
    return target

