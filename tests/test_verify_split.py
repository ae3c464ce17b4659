"""A full verify of a large log runs in two processes, cut at a position (`eventstore.splitscan`).
Only a pass is taken from the split: any problem, or two different views of the log, sends the
verify back to one scan, which names the problem. These tests hold the split to passing
exactly the files one scan passes, at every cut, with the same report; the last ones run it
through `Store.verify` with its real child process.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import splitscan
from eventstore.fullscan import Fold, FullScan, Part
from eventstore.splitscan import View, joined, later_part, split_verify, view_of
from eventstore.sqlite import SQLiteBackend
from eventstore.structure import Structure
from tests.backends import BACKENDS, BackendCase
from tests.test_verify_fork_points import _opened
from tests.test_verify_plain import COLUMNS, _run, changed_copy, template  # noqa: F401  (a fixture)
from threadlog import IntegrityError, Store


def _split(path: Path, mid: int) -> tuple[int, int, int] | None:
    """The two parts, cut after `mid`, run one after the other in this process, and joined."""
    with _opened(path) as backend:
        view = view_of(backend)
        first = FullScan(backend, part=Part(mid, False))
        checked = first.run(Fold(None), None)
        return joined(view, first, checked, later_part(backend, Part(mid, True)))


def _one_scan(path: Path) -> tuple[int, int, int] | str:
    """(streams, events, redacted) of a one-process verify, or its error."""
    with Store(path, read_only=True) as store:
        try:
            report = store.verify()
        except IntegrityError as error:
            return str(error)
    return report.streams, report.events, report.redacted


def _last(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT max(position) FROM events").fetchone()[0])
    finally:
        conn.close()


def test_a_sound_log_passes_at_every_cut_with_the_report_of_one_scan(template: Path) -> None:  # noqa: F811
    """The template's threads, forks of forks and fan-out interleave: most cuts fall inside
    streams, some between a fork and its point, some inside a pending tool call or run."""
    expected = _one_scan(template)
    assert isinstance(expected, tuple)
    for mid in range(0, _last(template) + 1):
        assert _split(template, mid) == expected, f"cut after position {mid}"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.integers(0, 10_000), column=st.sampled_from(COLUMNS), at=st.integers(0, 10_000), byte=st.integers(1, 255),
       cut=st.integers(0, 10_000))
def test_one_changed_byte_never_passes_the_split_unless_one_scan_passes_it(
        template: Path, tmp_path_factory: pytest.TempPathFactory,  # noqa: F811
        row: int, column: str, at: int, byte: int, cut: int) -> None:
    path = changed_copy(template, tmp_path_factory.mktemp("split"), row, column, at, byte)
    if path is None:
        return  # the file refused the change
    one = _one_scan(path)
    split = _split(path, cut % (_last(path) + 1))
    assert split is None or split == one, (column, row, one, split)


def test_pending_facts_that_do_not_parse_fail_the_split_at_every_cut(template: Path, tmp_path: Path) -> None:  # noqa: F811
    """A later part takes up a stream at the event before its first one, and a fork at its
    parent's event, from their stored pending facts: altered so they no longer parse, the
    split raised JSONDecodeError out of verify instead of leaving the verdict to one scan."""
    conn = sqlite3.connect(template)
    pending = [p for (p,) in conn.execute("SELECT position FROM events WHERE pending IS NOT NULL ORDER BY position")]
    conn.close()
    assert len(pending) >= 5
    for position in pending:
        path = tmp_path / f"p{position}.db"
        shutil.copy(template, path)
        _run(path, ("UPDATE events SET pending = '{' WHERE position = ?", (position,)))
        one = _one_scan(path)
        assert isinstance(one, str), position  # one scan names it
        for mid in range(0, _last(path) + 1):
            assert _split(path, mid) is None, (position, mid)


# Changes a byte flip does not make: rows removed, added, moved or rewritten whole.
_TAMPERS = {
    "an event deleted mid-thread": ["DELETE FROM events WHERE stream_id = 'T' AND \"offset\" = 8"],
    "a thread's last event deleted": ["DELETE FROM events WHERE position = (SELECT max(position) FROM events WHERE stream_id = 'T')"],
    "a fork's first event deleted": ["DELETE FROM events WHERE stream_id = 'F' AND \"offset\" = 10"],
    "a stream row deleted": ["DELETE FROM streams WHERE id = 'G'"],
    "a head lowered": ["UPDATE streams SET head = head - 1 WHERE id = 'T'"],
    "a head raised": ["UPDATE streams SET head = head + 1 WHERE id = 'F'"],
    "an event copied past the head": [
        "INSERT INTO events (stream_id, \"offset\", event_id, type, schema_version, data, meta, recorded_at, data_digest, "
        "hash, pending, redacted_by) SELECT stream_id, \"offset\" + 1000, randomblob(16), type, schema_version, data, meta, "
        "recorded_at, data_digest, hash, pending, redacted_by FROM events WHERE stream_id = 'T' AND \"offset\" = 3"],
    "two events' offsets swapped": [
        "UPDATE events SET \"offset\" = -1 WHERE stream_id = 'T' AND \"offset\" = 4",
        "UPDATE events SET \"offset\" = 4 WHERE stream_id = 'T' AND \"offset\" = 5",
        "UPDATE events SET \"offset\" = 5 WHERE stream_id = 'T' AND \"offset\" = -1"],
    "a fork moved to another point": ["UPDATE streams SET parent_offset = parent_offset - 1 WHERE id = 'F'"],
    "a fork's created_position moved earlier": ["UPDATE streams SET created_position = 2 WHERE id = 'F'"],
    "a fork's created_position moved later": ["UPDATE streams SET created_position = created_position + 3 WHERE id = 'F'"],
    "a thread's pending facts altered": ["UPDATE streams SET facts = '{\"runs\":[\"r9\"]}' WHERE id = 'T'"],
    # Each part reads only the streams it starts (`Backend.streams(part=...)`): one whose
    # created_position is no position must still be read, by the first, and failed there.
    "a fork's created_position made NULL": ["UPDATE streams SET created_position = NULL WHERE id = 'F'"],
    "a fork's created_position made text": ["UPDATE streams SET created_position = 'x' WHERE id = 'F'"],
    "a fork's created_position made a real": ["UPDATE streams SET created_position = created_position + 0.5 WHERE id = 'F'"],
    "an event moved to another thread": ["UPDATE events SET stream_id = 'F' WHERE stream_id = 'T' AND \"offset\" = 20"],
}


@pytest.mark.parametrize("tamper", sorted(_TAMPERS))
def test_a_tampered_log_fails_at_every_cut(template: Path, tmp_path: Path, tamper: str) -> None:  # noqa: F811
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    try:
        _run(path, *((statement, ()) for statement in _TAMPERS[tamper]))
    except sqlite3.IntegrityError:
        pytest.fail(f"{tamper}: the file refused it")
    assert isinstance(_one_scan(path), str), f"{tamper} passed one scan"
    for mid in range(0, _last(path) + 1):
        assert _split(path, mid) is None, f"{tamper}: passed when cut after position {mid}"


@pytest.fixture
def split_always(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """`Store.verify` splits every log in a file, however small, in the middle (the cut of a
    tiny log would leave the child nothing, its start outweighing the events); what each split
    returned (or the error it raised) is listed."""
    monkeypatch.setattr(splitscan, "SPLIT_FROM", 0)
    monkeypatch.setattr(splitscan, "_cut", lambda view, starts: view.last_position // 2)
    results: list[object] = []
    real = splitscan.split_verify

    def spied(*args: Any, **kwargs: Any) -> object:
        try:
            results.append(real(*args, **kwargs))
        except IntegrityError as error:
            results.append(error)
            raise
        return results[-1]

    monkeypatch.setattr(splitscan, "split_verify", spied)  # `verify` imports it when it runs
    return results


def test_store_verify_runs_the_later_part_in_a_child_process_and_reports_as_one_scan(
        template: Path, tmp_path: Path, split_always: list[object], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    calls = split_always
    seen: list[tuple[int, int]] = []
    with Store(path, read_only=True) as store:
        report = store.verify(progress=lambda done, total: seen.append((done, total)))
    assert calls and calls[0] == (report.streams, report.events, report.redacted)  # the split's, not one scan's
    monkeypatch.setattr(splitscan, "SPLIT_FROM", 10**9)
    assert _one_scan(path) == calls[0]
    assert seen[-1] == (report.events, report.events)


def test_a_tampered_log_is_named_by_one_scan_after_the_split_fails(template: Path, tmp_path: Path,  # noqa: F811
                                                                     split_always: list[object],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    _run(path, ("UPDATE streams SET head = head - 1 WHERE id = 'T'", ()))
    with Store(path, read_only=True) as store:
        with pytest.raises(IntegrityError) as split:
            store.verify()
    assert split_always == [None]  # the split ran and declined: one scan named the problem
    monkeypatch.setattr(splitscan, "SPLIT_FROM", 10**9)
    assert str(split.value) == _one_scan(path)
    assert "beyond the stream's head" in str(split.value)


def test_a_checkpoint_is_proved_across_the_cut_as_one_scan_proves_it(template: Path, tmp_path: Path,  # noqa: F811
                                                                     split_always: list[object],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The first part folds the checkpoint over what it reads, then over the stored hashes past
    the cut. A leaf fork deleted whole (its events and its row) passes plain verify, and only
    the checkpoint sees it."""
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    with Store(path) as store:
        kept = store.checkpoint()
        store.append_message("T", "user", "after the checkpoint")
        proved = store.verify(checkpoint=kept)
    assert split_always == [(proved.streams, proved.events, proved.redacted)]  # the split passed it
    assert (proved.streams, proved.events, proved.redacted) == _one_scan(path)
    _run(path, ("DELETE FROM events WHERE stream_id = 'G'", ()), ("DELETE FROM streams WHERE id = 'G'", ()))
    with Store(path, read_only=True) as store:
        store.verify()  # the chains alone still hold
        with pytest.raises(IntegrityError) as split:
            store.verify(checkpoint=kept)
    assert split_always[-1] is split.value  # raised by the split's fold, not by one scan after it
    monkeypatch.setattr(splitscan, "SPLIT_FROM", 10**9)
    with Store(path, read_only=True) as store:
        with pytest.raises(IntegrityError) as one:
            store.verify(checkpoint=kept)
    assert str(split.value) == str(one.value) and "no longer matches checkpoint" in str(one.value)


def test_a_child_that_cannot_start_leaves_the_verify_to_one_scan(template: Path, tmp_path: Path,  # noqa: F811
                                                                split_always: list[object], monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    monkeypatch.setattr("sys.executable", str(tmp_path / "no-such-python"))
    with _opened(path) as backend:
        assert split_verify(backend, str(path), None, Fold(None)) is None
    with Store(path, read_only=True) as store:
        assert store.verify().events == _last(path)


def test_a_write_between_the_two_views_sends_the_verify_to_one_scan(template: Path, tmp_path: Path) -> None:  # noqa: F811
    """The child opens its own read transaction after this process took its view: a commit in
    between gives it another log, and its pass is not taken."""
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    with _opened(path) as backend:
        with Store(path) as writer:
            writer.append_message("T", "user", "committed after the first view")
        assert split_verify(backend, str(path), None, Fold(None), mid=_last(path) // 2) is None
    assert isinstance(_one_scan(path), tuple)


@pytest.mark.parametrize("case", BACKENDS, ids=[case.id for case in BACKENDS])
def test_every_backend_gives_the_stream_starts_and_fork_points_a_later_part_reads(case: BackendCase, tmp_path: Path) -> None:
    """`stream_starts` and `fork_points` (part of the storage interface) answer alike on every
    backend: the forks created after a position, with the stored event each chains to when
    its parent holds it at or below a position."""
    backend = case.make(tmp_path)
    with Store(backend) as store:
        t = store.create_thread(title="t", thread_id="t")
        for i in range(4):
            store.append_message(t, "user", f"m{i}")
        early = store.fork(t, at=2, fork_id="early")
        store.append_message(early, "user", "in early")
        store.fork(t, at=4, fork_id="late")  # chains to t's offset 3
        store.fork(early, at=3, fork_id="deep")  # chains to early's own offset 2
        store.fork(early, at=2, fork_id="inherited")  # its point (offset 1) is t's, not early's
        own_first = {"t": 0, "early": 2, "late": 4, "deep": 3, "inherited": 2}
        assert backend.stream_starts() == sorted(store.event_at(name, at).position for name, at in own_first.items())
        after = store.event_at("early", 2).position  # forks created later: late, deep, inherited

        def points(upto: int) -> dict[tuple[str, int], tuple[int, str, str | None]]:
            return {(parent, offset): (position, hash_ if isinstance(hash_, str) else "tl2:" + hash_.hex(), facts)
                    for parent, offset, position, hash_, facts in backend.fork_points(after, upto)}

        t3, early2 = store.event_at("t", 3), store.event_at("early", 2)
        assert points(10**9) == {("t", 3): (t3.position, t3.hash, None), ("early", 2): (early2.position, early2.hash, None)}
        assert points(t3.position) == {("t", 3): (t3.position, t3.hash, None)}
        assert points(t3.position - 1) == {}
        assert list(backend.fork_points(10**9, 10**9)) == []


@pytest.mark.parametrize("case", BACKENDS, ids=[case.id for case in BACKENDS])
def test_every_backend_gives_each_part_the_streams_created_on_its_side_of_the_cut(case: BackendCase, tmp_path: Path) -> None:
    """`streams(part=...)` (part of the storage interface): a part reads only the streams it
    starts, in creation order, those `FullScan.mine` takes."""
    backend = case.make(tmp_path)
    with Store(backend) as store:
        root = store.create_thread()
        store.append(root, [{"type": "message.appended", "data": {"role": "user", "content": f"m{i}"}} for i in range(4)])
        forks = [store.fork(root, at=2), store.fork(root, at=4)]
        late = store.create_thread()
        every = {row.id: row.created_position for row in backend.streams()}
        assert set(every) == {root, late, *forks}
        in_order = [stream for stream, _ in sorted(every.items(), key=lambda item: (item[1], item[0]))]
        for mid in sorted({0, *every.values(), max(every.values()) + 1}):
            for later in (False, True):
                part = Part(mid, later)
                chosen = [row.id for row in backend.streams(part=part)]
                assert chosen == [stream for stream in in_order if (every[stream] > mid) == later], (mid, later)
                assert [row.id for row in backend.streams(stored=True, part=part)] == chosen  # appends keep creation order
                scan = FullScan(backend, part=part)
                assert all(scan.mine(row) for row in backend.streams(part=part))


def _run_child(path: Path, parent: int, view: View | None = None) -> subprocess.CompletedProcess[bytes]:
    """The later part's process, started as `split_verify` starts it, told `parent` is its
    parent and `view` (by default the file's own) is the log its parent sees."""
    if view is None:
        with _opened(path) as backend:
            view = view_of(backend)
    reading, writing = os.pipe()
    try:
        return subprocess.run([sys.executable, "-m", "eventstore.splitscan"], capture_output=True, timeout=60,
                              input=pickle.dumps((str(path), Part(_last(path) // 2, True), view, writing, parent, False)),
                              pass_fds=(writing,))
    finally:
        os.close(reading)
        os.close(writing)


def test_the_later_part_sends_its_outcome_and_stops_when_its_parent_is_gone(template: Path) -> None:  # noqa: F811
    """Its parent killed (the verify stopped), the later part does not check on alone: it exits
    at its next progress report (its parent is then another process)."""
    done = _run_child(template, os.getpid())
    assert done.returncode == 0, done.stderr
    outcome = pickle.loads(done.stdout)
    assert isinstance(outcome, splitscan.Outcome) and outcome.problems == 0 and outcome.checked > 0
    orphaned = _run_child(template, os.getpid() + 1_000_000)
    assert orphaned.returncode == 1 and orphaned.stdout == b""


def test_the_later_part_declines_at_once_when_it_sees_another_log_than_its_parent(template: Path) -> None:  # noqa: F811
    """A commit between the two snapshots: the child exits before checking anything, and the
    first part stops at its next progress report instead of checking its half for nothing."""
    with _opened(template) as backend:
        view = view_of(backend)
    declined = _run_child(template, os.getpid(), view._replace(last_position=view.last_position - 1))
    assert declined.returncode == splitscan._DECLINED and declined.stdout == b""


@pytest.mark.parametrize(("executable", "frozen", "starts"), [
    ("/usr/bin/python3", False, True), ("/srv/app/.venv/bin/python", False, True), ("/opt/pypy3.10/bin/pypy3", False, True),
    ("/usr/bin/uwsgi", False, False), ("/usr/sbin/httpd", False, False), ("", False, False),
    ("/Applications/Tool.app/Contents/MacOS/python", True, False)])
def test_the_child_starts_only_from_a_python_interpreter(monkeypatch: pytest.MonkeyPatch, executable: str, frozen: bool,
                                                          starts: bool) -> None:
    """Under a server that embeds Python, or in a frozen application, `sys.executable` names
    that program, which `-m eventstore.splitscan` would start as itself: no split there."""
    if frozen:
        monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert splitscan._python(executable) is starts


def test_the_first_part_stops_at_its_next_report_once_the_child_declined() -> None:
    process = subprocess.Popen([sys.executable, "-c", f"import sys; sys.exit({splitscan._DECLINED})"])
    process.wait()
    reading, writing = os.pipe()
    os.close(writing)
    child = splitscan._Child(process, reading)
    seen: list[tuple[int, int]] = []
    with pytest.raises(splitscan._Declined):
        child.adding_to(lambda done, total: seen.append((done, total)))(10_000, 20_000)
    assert seen == []
    child.stop()


def _damage_index(path: Path, index: str) -> None:
    """Flip one bit of the first key of `index` (an edit of the file's bytes, as a failing disk
    or a hand makes one): the table and every hash are untouched."""
    conn = sqlite3.connect(path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (index,)).fetchone()[0]
    first = conn.execute(f"SELECT event_id FROM events INDEXED BY {index} ORDER BY event_id LIMIT 1").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    at = data.index(first, start, start + page_size)
    data[at + 3] ^= 0x01
    path.write_bytes(data)


def test_a_split_verify_checks_the_file_structure_in_the_later_parts_process(
        template: Path, tmp_path: Path, split_always: list[object], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The engine's structure check runs beside the later part, in the child, not in this process
    beside the first part (which has the more to scan): a damaged index is still refused, after
    the split passed every chain."""
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    _damage_index(path, "events_event_id")
    checked_here: list[bool] = []
    real = SQLiteBackend.damaged

    def spied(self: SQLiteBackend, *, beside: bool = False) -> str | None:
        checked_here.append(beside)
        return real(self, beside=beside)

    monkeypatch.setattr(SQLiteBackend, "damaged", spied)
    with Store(path, read_only=True) as store:
        with pytest.raises(IntegrityError, match="structure is damaged") as refused:
            store.verify()
    assert split_always and isinstance(split_always[0], tuple)  # the chains passed, split in two
    assert checked_here == []  # the child found the damage
    monkeypatch.setattr(splitscan, "SPLIT_FROM", 10**9)
    assert _one_scan(path) == str(refused.value)  # one scan, which checks it here, says the same
    assert checked_here == [True]


def test_a_structure_check_not_run_beside_is_run_within_the_verify_read(template: Path, tmp_path: Path) -> None:  # noqa: F811
    """When the later part could not check the structure (a writer held its connection off, or
    an error stopped it), the verify checks it itself instead of passing the file unchecked."""
    path = tmp_path / "t.db"
    shutil.copy(template, path)
    _damage_index(path, "events_event_id")
    with _opened(path) as backend:
        structure = Structure(backend)
        with pytest.raises(IntegrityError, match="structure is damaged"):
            structure.check()
        structure.reported(None)  # what a child that checked it and found nothing reports
        structure.check()
