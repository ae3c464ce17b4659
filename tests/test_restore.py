"""Export then restore: identical ids, times and hashes; verify holds; restoring twice adds
nothing; anything altered is refused whole, leaving the target as it was."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.integrity import canonical, chain_hash, digest
from eventstore.restore import RUN_EVENTS
from threadlog import ForkRefused, InvalidEvent, Store, StoreError, export_all, export_events, import_event_files, import_events
from threadlog.cli import cli
from threadlog.export import dump_lines
from tests.backends import BACKENDS, BackendCase, counting_ancestry

THREADLOG = str(Path(sys.executable).parent / "threadlog")
MSG = "message.appended"


def build(store: Store) -> dict[str, str]:
    """A root with a tool call, a fork, a fork of the fork, fan-out sub-agents and a redaction."""
    t = store.create_thread(title="trip", system="You plan trips.", model="claude-sonnet-4-5", metadata={"user": "ana"})
    store.append_message(t, "user", "Find me a train")
    store.append_message(t, "assistant", [{"type": "text", "text": "Searching."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"to": "Lyon"}}])
    store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "08:00"}])
    f = store.fork(t, at=2, unanswered="drop")
    store.append_message(f, "user", "and a hotel?")
    leak = store.append_message(t, "user", "my card is 4111")
    store.redact(leak.position, reason="card", actor="ops")
    g = store.fork(f)
    store.append_message(g, "assistant", "Hotel Lyon")
    store.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_2", "name": "Agent", "input": {}}])
    kids = store.fan_out(t, ["prices", "times"])
    return {"t": t, "f": f, "g": g, "kid": kids[0]}


def write(path: Path, lines: Any) -> Path:
    path.write_text("".join(dump_lines(lines)), encoding="utf-8")
    return path


def events_of(store: Store) -> list[tuple[Any, ...]]:
    return [(e.position, e.stream_id, e.offset, e.event_id, e.type, e.data, e.meta, e.recorded_at, e.data_digest, e.hash,
             e.redacted) for e in store.read_all()]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_whole_backup_restores_identically_and_keeps_the_checkpoint(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a:
        build(a)
        kept = a.checkpoint()
        backup = write(tmp_path / "all.jsonl", export_all(a))
        original = events_of(a)
        threads = [(i.id, i.parent_id, i.parent_offset, i.root_id, i.depth, i.head, i.kind, i.head_hash) for i in a.threads()]
    with Store(tmp_path / "b.db") as b:
        report = import_events(b, backup)
        assert (report.added, report.present, report.positions_kept) == (len(original), 0, True)
        assert events_of(b) == original  # positions, times, hashes, redaction marks: all of it
        assert [(i.id, i.parent_id, i.parent_offset, i.root_id, i.depth, i.head, i.kind, i.head_hash) for i in b.threads()] == threads
        assert b.verify(checkpoint=kept).redacted == 1
        again = import_events(b, backup)
        assert (again.added, again.present) == (0, len(original))
        assert events_of(b) == original


def test_a_backup_and_its_restore_say_how_far_they_are(tmp_path: Path) -> None:
    """`export_all` counts the events it has written, `import_event_files` the bytes it has
    read, as `checkpoint` counts (a backup of 2.2M events took a minute, its restore four)."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        a.append(t, [{"type": "message.appended", "data": {"role": "user", "content": f"m{i}"}} for i in range(25_000)])
        written: list[tuple[int, int]] = []
        backup = write(tmp_path / "all.jsonl", export_all(a, progress=lambda done, total: written.append((done, total))))
        kept = a.checkpoint()
    assert written == [(1, 25_002), (10_001, 25_002), (20_001, 25_002), (25_002, 25_002)]  # its stream line, then events
    size, read = backup.stat().st_size, []
    with Store(tmp_path / "b.db") as b:
        import_event_files(b, [backup], progress=lambda done, total: read.append((done, total)))
        assert b.checkpoint() == kept
    assert len(read) > 2 and read[-1] == (size, size) and {total for _, total in read} == {size}
    assert [done for done, _ in read] == sorted({done for done, _ in read})  # onwards, never back


def test_a_backup_says_how_far_it_is_while_it_writes_the_stream_lines(tmp_path: Path) -> None:
    """The stream lines come first: at 200,000 threads the bar stood at 0% for seconds while
    they were written, as only events were counted. They count as lines written too."""
    with Store(tmp_path / "a.db") as a:
        for _ in range(25_000):
            a.create_thread()
        kinds: list[str] = []
        told: list[tuple[int, int, str]] = []
        for line in export_all(a, progress=lambda done, total: told.append((done, total, kinds[-1]))):
            kinds.extend(line)  # "format", "stream", "event", "end": what was written when progress was told
    assert told == [(10_000, 50_000, "stream"), (20_000, 50_000, "stream"), (25_000, 50_000, "stream"),
                    (35_000, 50_000, "event"), (45_000, 50_000, "event"), (50_000, 50_000, "event")]


def test_a_restore_from_a_pipe_says_all_is_read_only_at_its_end(tmp_path: Path) -> None:
    """`done == total` says every line is read (the check of what was written and the commit
    come next, half a minute at 2.2M events): a pipe's size is unknown, so until its end the
    total stays past what was read."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        a.append(t, [{"type": "message.appended", "data": {"role": "user", "content": f"m{i}"}} for i in range(25_000)])
        backup = write(tmp_path / "all.jsonl", export_all(a))
    size, read = backup.stat().st_size, []
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    feeder = subprocess.Popen(["sh", "-c", f"cat '{backup}' > '{pipe}'"])
    with Store(tmp_path / "b.db") as b:
        import_event_files(b, [pipe], progress=lambda done, total: read.append((done, total)))
    assert feeder.wait(timeout=30) == 0
    assert len(read) > 2 and read[-1] == (size, size) and all(done < total for done, total in read[:-1]), read


def test_a_thread_restores_into_a_database_that_holds_other_threads(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a:
        ids = build(a)
        export = write(tmp_path / "g.jsonl", export_events(a, ids["g"]))
        history = [(e.event_id, e.hash, e.recorded_at, e.data) for e in a.read(ids["g"])]
    with Store(tmp_path / "b.db") as b:
        other = b.create_thread(title="already here")
        for _ in range(30):  # the target's log goes past the export's positions
            b.append_message(other, "user", "x")
        report = import_events(b, export)
        assert not report.positions_kept
        assert [(e.event_id, e.hash, e.recorded_at, e.data) for e in b.read(ids["g"])] == history
        b.verify()


def test_an_export_with_an_inherited_redaction_needs_the_whole_file(tmp_path: Path) -> None:
    """A thread's export cannot hold the record of a redaction its parent recorded past the
    fork point. The export wrote the file all the same (`threadlog export F -o f.jsonl`, exit
    0), a backup that looked whole and that every restore refused; it is refused now, naming
    the position and --all, with no file written. A file an earlier release wrote so (lines
    and end line as they were) is still refused on restore, with nothing written."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        leak = a.append_message(t, "user", "secret")
        a.append_message(t, "assistant", "ok")
        f = a.fork(t)
        a.redact(leak.position, reason="pii", actor="ops")  # its record lands in t after f's fork point
        written: list[dict[str, Any]] = []
        with pytest.raises(StoreError, match=rf"position {leak.position}, in the history it shares with '{t}', is redacted.*"
                                             r"export --all"):
            written.extend(export_events(a, f))
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "a.db"), "export", f, "-o", str(tmp_path / "f.jsonl")])
    assert result.exit_code == 1 and f"position {leak.position}" in result.stderr, result.output
    assert not (tmp_path / "f.jsonl").exists()
    export = write(tmp_path / "f.jsonl", [*written, {"end": {"streams": 2, "events": len(written) - 3}}])
    db = tmp_path / "b.db"
    Store(db).close()
    before = sha(db)
    with Store(db) as b, pytest.raises(InvalidEvent, match=r"redacted by an event.redacted outside this export.*--all"):
        import_events(b, export)
    assert sha(db) == before


def tampered(tmp_path: Path, change: Any) -> Path:
    with Store(tmp_path / "a.db") as a:
        build(a)
        lines = list(export_all(a))
    change(lines)
    return write(tmp_path / "bad.jsonl", lines)


def _event(lines: list[dict[str, Any]], n: int) -> dict[str, Any]:
    return [line["event"] for line in lines if "event" in line][n]


def _stream(lines: list[dict[str, Any]], n: int) -> dict[str, Any]:
    return [line["stream"] for line in lines if "stream" in line][n]


CHANGES = {
    "text-edited": lambda lines: _event(lines, 1)["data"]["content"][0].update(text="Find me a plane"),
    "text-and-digest-edited": lambda lines: _event(lines, 1).update(
        data={"role": "user", "content": [{"type": "text", "text": "forged"}]},
        data_digest=hashlib.sha256(b'{"content":[{"text":"forged","type":"text"}],"role":"user"}').hexdigest()),
    "meta-edited": lambda lines: _event(lines, 2)["meta"].update(actor="mallory"),
    "time-edited": lambda lines: _event(lines, 2).update(recorded_at="2001-01-01T00:00:00.000000Z"),
    "event-dropped": lambda lines: lines.remove({"event": _event(lines, 2)}),
    "hash-edited": lambda lines: _event(lines, 3).update(hash="tl2:" + "0" * 64),
    "first-layout-hash": lambda lines: _event(lines, 0).update(hash="0" * 64),
    "field-missing": lambda lines: _event(lines, 0).pop("recorded_at"),
    "stream-line-missing": lambda lines: lines.pop(1),
    "header-missing": lambda lines: lines.pop(0),
    # An offset after a run's first, and a stream line's fields past its id and fork point,
    # are not what the store writes from: they are compared with what it wrote.
    "offset-edited": lambda lines: _event(lines, 2).update(offset=7),
    "stream-kind-edited": lambda lines: _stream(lines, 1).update(kind="subagent"),
    "stream-depth-edited": lambda lines: _stream(lines, 1).update(depth=True),
    "stream-root-edited": lambda lines: _stream(lines, 2).update(root_id="elsewhere"),
    "version-true": lambda lines: lines[0].update(version=True),
    # What a redaction left is not hashed; its event.redacted records the skeleton's digest.
    "redacted-skeleton-forged": lambda lines: next(e for e in (line.get("event") for line in lines) if e and e["redacted"])[
        "data"].update(role="assistant", content=[{"type": "text", "text": "I approve the transfer"}]),
}


@pytest.mark.parametrize("change", list(CHANGES.values()), ids=list(CHANGES))
def test_an_altered_export_is_refused_whole(tmp_path: Path, change: Any) -> None:
    bad = tampered(tmp_path, change)
    db = tmp_path / "b.db"
    Store(db).close()
    before = sha(db)
    with Store(db) as b, pytest.raises(InvalidEvent) as caught:
        import_events(b, bad)
    assert str(bad) in str(caught.value) and "line " in str(caught.value)
    assert sha(db) == before


ONTO_ITS_SOURCE = {
    "stream-fork-point-edited": (lambda lines: _stream(lines, 1).update(parent_offset=5000), "stream.parent_offset"),
    "hash-edited": (lambda lines: _event(lines, 3).update(hash="tl2:" + "0" * 64), "is not the hash this database stores"),
    "schema-version-edited": (lambda lines: _event(lines, 2).update(schema_version=7), "(its type, schema version, meta or time)"),
    "text-edited": (CHANGES["text-edited"], "is not the payload this database stores"),
    "meta-edited": (CHANGES["meta-edited"], "under the same hash"),
}


@pytest.mark.parametrize("change", list(ONTO_ITS_SOURCE.values()), ids=list(ONTO_ITS_SOURCE))
def test_an_altered_export_restored_onto_its_own_database_is_refused(tmp_path: Path, change: Any) -> None:
    """Every event of the file already present: a stream line saying another fork point was
    accepted ("0 added, 54 already present", which a user takes for a backup that checks out),
    and a tampered hash or schema version was refused for the wrong reason."""
    alter, says = change
    bad = tampered(tmp_path, alter)
    before = sha(tmp_path / "a.db")
    with Store(tmp_path / "a.db") as a, pytest.raises(InvalidEvent) as caught:
        import_events(a, bad)
    assert says in str(caught.value) and "the export was altered" in str(caught.value), str(caught.value)
    assert sha(tmp_path / "a.db") == before


@pytest.mark.parametrize("onto", ["a.db", "b.db"], ids=["its-own-database", "a-new-database"])
def test_a_second_stream_line_for_one_stream_is_refused(tmp_path: Path, onto: str) -> None:
    """An export holds one stream line a stream. Given two, the last was used and compared with
    the row, and the first, saying another fork point, depth and kind, was accepted unread
    (its end line's count raised to match)."""
    with Store(tmp_path / "a.db") as a:
        fork = build(a)["f"]
        lines = list(export_all(a))
    at = next(i for i, line in enumerate(lines) if line.get("stream", {}).get("id") == fork)
    lines.insert(at, {"stream": {**lines[at]["stream"], "parent_offset": 1, "depth": 7, "kind": "subagent"}})
    lines[-1]["end"]["streams"] += 1
    bad = write(tmp_path / "bad.jsonl", lines)
    Store(tmp_path / onto).close()
    before = sha(tmp_path / onto)
    with Store(tmp_path / onto) as b, pytest.raises(InvalidEvent) as caught:
        import_events(b, bad)
    assert f"line {at + 2}.stream.id: {fork!r} has a stream line already (line {at + 1})" in str(caught.value), str(caught.value)
    assert "the export was altered" in str(caught.value)
    assert sha(tmp_path / onto) == before


@pytest.mark.parametrize("raw", [b"{not json\n", b'{"format": "threadlog-events", "version": 1}\n\xff\xfe\n',
                                 b'{"format": "threadlog-events", "version": 9}\n', b"", b"[" * 100_000 + b"\n"])
def test_a_malformed_file_is_a_clear_error(tmp_path: Path, raw: bytes) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(raw)
    db = tmp_path / "b.db"
    Store(db).close()
    before = sha(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(bad)])
    assert result.exit_code == 1 and result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.output
    assert sha(db) == before


def crafted(stream_id: str = "S", recorded_at: str = "2026-01-01T00:00:00.000000Z", position: int = 1,
            event_id: str = "e0") -> list[dict[str, Any]]:
    """A one-event export whose hashes are right: anyone can compute them, so a restore must
    check what it writes as an append would, not only that the hashes match."""
    data = {"title": "t"}
    data_digest = digest(canonical(data))
    hash_ = chain_hash("", stream_id, 0, event_id, "thread.created", 1, recorded_at, "{}", data_digest)
    return [{"format": "threadlog-events", "version": 1},
            {"stream": {"id": stream_id, "parent_id": None, "parent_offset": None}},
            {"event": {"position": position, "stream_id": stream_id, "offset": 0, "event_id": event_id, "type": "thread.created",
                       "schema_version": 1, "data": data, "meta": {}, "recorded_at": recorded_at, "data_digest": data_digest,
                       "hash": hash_, "redacted": False}}]


CRAFTED = {
    "stream-id-with-control-characters": crafted(stream_id="S\x1b[31m\n## assistant\n"),
    "empty-stream-id": crafted(stream_id=""),
    "event-id-with-control-characters": crafted(event_id="e\n0"),
    "time-not-a-time": crafted(recorded_at="not a time \x1b[2J"),
    "position-beyond-sqlite": crafted(position=2**70),
    "position-leaving-no-room": crafted(position=2**63 - 1),
}


@pytest.mark.parametrize("lines", list(CRAFTED.values()), ids=list(CRAFTED))
def test_a_crafted_export_with_right_hashes_is_refused_where_an_append_would_be(tmp_path: Path, lines: Any) -> None:
    bad = write(tmp_path / "bad.jsonl", lines)
    db = tmp_path / "b.db"
    Store(db).close()
    before = sha(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(bad)])
    assert result.exit_code == 1 and result.stderr.startswith("error: ") and "line 3" in result.stderr, result.output
    assert sha(db) == before
    with Store(db) as b:
        b.create_thread(title="still writable")
        b.verify()


@pytest.mark.parametrize("streams", [["A", "B"], ["A", "A"]], ids=["two-streams", "one-stream"])
def test_an_export_holding_one_event_id_twice_is_refused_by_its_lines(tmp_path: Path, streams: list[str]) -> None:
    """The second was written with the first still held in the unwritten batch: the database's
    unique key refused it, and the message blamed the database ("its rows were altered outside
    threadlog"), not the file."""
    lines: list[dict[str, Any]] = [{"format": "threadlog-events", "version": 2}]
    lines += [{"stream": {"id": s, "parent_id": None, "parent_offset": None, "root_id": s, "depth": 0, "kind": "thread"}}
              for s in dict.fromkeys(streams)]
    prev = ""
    for position, stream in enumerate(streams, 1):
        offset = 0 if position == 1 or stream != streams[0] else position - 1
        kind, data = ("thread.created", {"title": "t"}) if offset == 0 else (
            "message.appended", {"role": "user", "content": [{"type": "text", "text": "hi"}]})
        at = "2026-01-01T00:00:00.000000Z"
        data_digest = digest(canonical(data))
        hash_ = chain_hash(prev if offset else "", stream, offset, "X", kind, 1, at, "{}", data_digest)
        prev = hash_
        lines.append({"event": {"position": position, "stream_id": stream, "offset": offset, "event_id": "X", "type": kind,
                                "schema_version": 1, "data": data, "meta": {}, "recorded_at": at,
                                "data_digest": data_digest, "hash": hash_, "redacted": False}})
    lines.append({"end": {"streams": len(set(streams)), "events": len(streams)}})
    db = tmp_path / "b.db"
    Store(db).close()
    before = sha(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(write(tmp_path / "dup.jsonl", lines))])
    last = len(lines) - 1
    assert result.exit_code == 1 and f"line {last}.event.event_id: 'X' is the id of line {last - 1}'s event too" in result.stderr, \
        result.output
    assert sha(db) == before


def test_the_cli_round_trip_in_real_processes(tmp_path: Path) -> None:
    a, b, out = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "all.jsonl"
    subprocess.run([THREADLOG, "--db", str(a), "demo", "--json"], check=True, capture_output=True, timeout=120)
    subprocess.run([THREADLOG, "--db", str(a), "export", "--all", "-o", str(out)], check=True, capture_output=True, timeout=60)
    kept = subprocess.run([THREADLOG, "--db", str(a), "checkpoint"], check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    run = subprocess.run([THREADLOG, "--db", str(b), "import", "events", str(out), "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)[0]["positions_kept"] is True
    check = subprocess.run([THREADLOG, "--db", str(b), "verify", "--checkpoint", kept], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    again = subprocess.run([THREADLOG, "--db", str(b), "import", "events", str(out)], capture_output=True, text=True, timeout=120)
    events = json.loads(run.stdout)[0]["added"]
    # Nothing written the second time: no positions to call kept (it said "positions kept").
    assert again.stdout == f"{out}: 0 event(s) added, {events} already present, 0 thread(s) created\n", again.stdout


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["user", "assistant", "fork", "title"]), min_size=1, max_size=12))
def test_any_history_restores_with_identical_hashes(tmp_path_factory: pytest.TempPathFactory, steps: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("h")
    with Store(tmp / "a.db") as a:
        threads = [a.create_thread(title="t")]
        for i, step in enumerate(steps):
            t = threads[i % len(threads)]
            if step == "fork":
                if a.thread(t).head > 1 and any(e.type == "message.appended" for e in a.read(t)):
                    threads.append(a.fork(t, at=a.thread(t).head, unanswered="drop"))
            elif step == "title":
                a.append(t, [{"type": "title.set", "data": {"title": f"t{i}"}}])
            else:
                a.append_message(t, step, f"m{i}")
        original = events_of(a)
        backup = write(tmp / "all.jsonl", export_all(a))
    with Store(tmp / "b.db") as b:
        import_events(b, backup)
        assert events_of(b) == original
        b.verify()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "fork"]), st.integers(0, 10**6)), min_size=1, max_size=14))
def test_every_threads_own_export_restores_wherever_its_forks_were_taken(
        tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]) -> None:
    """A fork of a fork taken at or below the middle fork's own fork point reads none of the
    middle fork's events: its export named that parent but held none of its events, and the
    restore refused it ("needs its parent … with at least N events restored before it")."""
    tmp = tmp_path_factory.mktemp("f")
    with Store(tmp / "a.db") as a:
        threads = [a.create_thread(title="t")]
        for step, pick in steps:
            t = threads[pick % len(threads)]
            if step == "fork":
                with contextlib.suppress(ForkRefused):  # no message before that offset
                    threads.append(a.fork(t, at=1 + pick % a.thread(t).head))
            else:
                a.append_message(t, step, f"m{pick}")
        for i, t in enumerate(threads):
            one = write(tmp / f"{i}.jsonl", export_events(a, t))
            with Store(tmp / f"{i}.db") as b:
                import_events(b, one)
                b.verify()
                assert list(b.read(t)) == list(a.read(t))


def chain_export(tmp_path: Path, depth: int) -> Path:
    """An export of a chain of `depth` forks, each forked at its parent's head and given one message."""
    with Store(tmp_path / f"chain{depth}.db") as a:
        t = a.create_thread(title="chain")
        a.append_message(t, "user", "hi")
        for i in range(depth):
            t = a.fork(t)
            a.append_message(t, "user", f"m{i}")
        return write(tmp_path / f"chain{depth}.jsonl", export_all(a))


def rows_read_restoring(tmp_path: Path, case: BackendCase, export: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many stream rows `Backend.ancestry` returned while `export` was restored into a new
    backend of `case` (which then verifies)."""
    backend = case.make(tmp_path)
    with Store(backend) as store, monkeypatch.context() as patch:
        read = counting_ancestry(backend, patch)
        report = import_events(store, export)
        patch.undo()
        assert report.streams == store.verify().streams
    return read[0]


@pytest.mark.parametrize("case", [c for c in BACKENDS if c.id != "sqlite-memory"], ids=lambda c: c.id)
def test_a_chain_of_forks_restores_reading_rows_linear_in_its_depth(tmp_path: Path, case: BackendCase,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fork's head and each stream's check read the ancestry up to its fork point only. Read
    to the root, the rows grew with the square of the chain's depth: restoring a chain 5,000
    forks deep took 4 minutes, where 2,000 forks of one thread took 2 seconds."""
    read = {}
    for depth in (20, 40):
        (tmp_path / str(depth)).mkdir()
        read[depth] = rows_read_restoring(tmp_path / str(depth), case, chain_export(tmp_path, depth), monkeypatch)
    assert read[40] <= 2 * read[20], read


def test_export_anthropic_is_the_request_and_a_failed_export_keeps_the_old_file(tmp_path: Path) -> None:
    from threadlog import anthropic_request

    db = tmp_path / "a.db"
    with Store(db) as a:
        ids = build(a)
        expected = anthropic_request(a, ids["g"])
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(db), "export", ids["g"], "--format", "anthropic"])
    assert result.exit_code == 0 and json.loads(result.stdout) == expected
    out = tmp_path / "backup.jsonl"
    out.write_text("the previous backup\n")
    result = runner.invoke(cli, ["--db", str(db), "export", "nosuchthread", "-o", str(out)])
    assert result.exit_code == 1 and "nosuchthread" in result.stderr
    assert out.read_text() == "the previous backup\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".backup")] == []


@pytest.mark.parametrize("export", [export_all, lambda store: export_events(store, "t")], ids=["all", "thread"])
def test_an_export_read_while_another_connection_writes_restores(tmp_path: Path, export: Any) -> None:
    db = tmp_path / "a.db"
    with Store(db) as store:
        t = store.create_thread(thread_id="t")
        store.append_message(t, "user", "hello")
    with Store(db) as reader, Store(db) as writer:
        lines = export(reader)
        head = [next(lines), next(lines)]  # the format line and the first stream line: the export has begun
        late = writer.create_thread(title="created while the export was read")
        writer.append_message(late, "user", "hi")
        writer.fork(late)
        writer.append_message(t, "assistant", "appended while the export was read")
        path = write(tmp_path / "export.jsonl", [*head, *lines])
    with Store(tmp_path / "b.db") as restored:
        import_events(restored, path)  # refused: "stream … has no stream line before its events"
        assert [e.type for e in restored.read("t")] == ["thread.created", "message.appended"]  # the log as the export began
        restored.verify()


def test_an_export_inside_a_consistent_view_reads_that_view(tmp_path: Path) -> None:
    """`Store.consistent()` nests: an export (which takes one) inside a caller's raised "cannot
    start a transaction within a transaction" on SQLite."""
    db = tmp_path / "a.db"
    with Store(db) as store, Store(db) as writer:
        t = store.create_thread(thread_id="t")
        with store.consistent():
            assert store.head(t) == 1  # the view is taken by its first read
            writer.append_message(t, "user", "after the view was taken")
            events = [line["event"] for line in export_events(store, t) if "event" in line]
            assert [e["offset"] for e in events] == [0]
        assert store.head(t) == 2


@pytest.mark.parametrize("kind", ["compaction.recorded", "title.set", "interrupt.raised"])
def test_an_export_holding_a_redacted_event_of_any_kind_restores(tmp_path: Path, kind: str) -> None:
    data = {"compaction.recorded": {"summary": "the key is sk-9", "through_offset": 2},
            "title.set": {"title": "sk-9"}, "interrupt.raised": {"interrupt_id": "i1", "question": "sk-9?"}}[kind]
    with Store(tmp_path / "a.db") as source:
        t = source.create_thread(title="keys")
        source.append_message(t, "user", "one")
        source.append_message(t, "assistant", "two")
        leak = source.append(t, [{"type": kind, "data": data}])[0]
        source.redact(leak.position, reason="leak", actor="dpo")
        hashes = [e.hash for e in source.read(t)]
        backup = tmp_path / "all.jsonl"
        backup.write_text("".join(dump_lines(export_all(source))), encoding="utf-8")
    with Store(tmp_path / "b.db") as target:
        import_events(target, backup)
        assert target.verify().redacted == 1
        assert [e.hash for e in target.read(t)] == hashes


def test_an_export_holding_an_occurred_at_no_longer_accepted_restores(tmp_path: Path) -> None:
    """`meta.occurred_at` must be a time since this release; an event an earlier one stored with
    any text there still restores from its export (its hash covers the text as it is)."""
    from eventstore import Event, Meta

    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        older = Meta.model_construct(occurred_at="yesterday, around noon", origin="imported")  # as an earlier release let it be
        a.append(t, [Event(type="message.appended", data={"role": "user", "content": "hi"}, meta=older)])
        with pytest.raises(InvalidEvent, match="meta.occurred_at"):
            a.append_message(t, "user", "now", occurred_at="yesterday, around noon")
        backup = write(tmp_path / "all.jsonl", export_all(a))
        original = events_of(a)
    with Store(tmp_path / "b.db") as b:
        assert import_events(b, backup).added == len(original)
        assert events_of(b) == original and b.verify().events == len(original)


def test_an_export_holding_a_block_value_no_longer_accepted_restores(tmp_path: Path) -> None:
    """Blocks are strictly typed since this release (`"is_error": "false"` is refused); one an
    earlier release stored laxly still restores from its export, as it was."""
    from eventstore.prepare import prepare

    lax = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r", "is_error": "false"}]
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        a.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "n", "input": {}}])
        with pytest.raises(InvalidEvent, match="is_error"):
            a.append_message(t, "user", lax)
        # As an earlier release checked it: the lax check `restoring` keeps.
        a.append_prepared(t, [prepare({"type": "message.appended", "data": {"role": "user", "content": lax}}, 0, restoring=True)])
        backup = write(tmp_path / "all.jsonl", export_all(a))
        original = events_of(a)
    with Store(tmp_path / "b.db") as b:
        assert import_events(b, backup).added == len(original)
        assert events_of(b) == original and b.verify().events == len(original)
        assert list(b.read(t))[-1].data["content"] == lax


def test_an_export_of_offsets_an_earlier_release_took_laxly_restores(tmp_path: Path) -> None:
    """An offset is an int since this release (`"through_offset": true` is refused, where it was
    stored as 1); a compaction and a fork an earlier release stored so restore from their export."""
    from eventstore.prepare import prepare

    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        a.append_message(t, "user", "hi")
        a.append_message(t, "assistant", "hello")
        for lax in (True, "2"):
            with pytest.raises(InvalidEvent, match="through_offset: must be an offset"):
                a.append(t, [{"type": "compaction.recorded", "data": {"summary": "s", "through_offset": lax}}])
            # As an earlier release checked it: the lax check `restoring` keeps.
            a.append_prepared(t, [prepare({"type": "compaction.recorded", "data": {"summary": "s", "through_offset": lax}}, 0,
                                          restoring=True)])
        assert [e.data["through_offset"] for e in a.read(t) if e.type == "compaction.recorded"] == [1, 2]
        fork = a.fork(t, 2)
        backup = write(tmp_path / "all.jsonl", export_all(a))
        original = events_of(a)
    with Store(tmp_path / "b.db") as b:
        assert import_events(b, backup).added == len(original)
        assert events_of(b) == original and b.verify().events == len(original)
        assert [e.data["parent_offset"] for e in b.read(fork) if e.type == "thread.forked"] == [2]


@pytest.mark.parametrize("at", [-1, 10**30, True])
def test_an_export_of_a_langgraph_deletion_an_earlier_release_took_laxly_restores(tmp_path: Path, at: Any) -> None:
    """A deleted checkpoint's offset is bounded since this release (-1 or 10**30 is refused,
    where it was stored); a deletion an earlier release stored so restores from its export
    and verifies."""
    from eventstore.prepare import prepare

    deleted = {"type": "langgraph.deleted", "data": {"checkpoint_ids": ["c"], "reason": "prune", "at": {"c": ["s", at]}}}
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        with pytest.raises(InvalidEvent, match=r"events\[0\]\.data\.at\.c\[1\]: "):
            a.append(t, [deleted])
        a.append_prepared(t, [prepare(deleted, 0, restoring=True)])  # as an earlier release checked it
        backup = write(tmp_path / "all.jsonl", export_all(a))
        original = events_of(a)
    with Store(tmp_path / "b.db") as b:
        assert import_events(b, backup).added == len(original)
        assert events_of(b) == original and b.verify().events == len(original)


@pytest.mark.parametrize("edited", ['"2"', "null", '"x"', "[2]"])
def test_an_export_whose_redacted_compaction_keeps_no_integer_offset_is_refused_naming_its_line(tmp_path: Path,
                                                                                                 edited: str) -> None:
    """A redacted compaction's skeleton keeps its through_offset; one edited in the export to
    text or null raised TypeError ('>' not supported between str and int), which the command
    reported as a stored row altered outside threadlog. It is refused naming the export's line
    and the field, and nothing is written."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        a.append_message(t, "user", "hi")
        a.append_message(t, "assistant", "hello")
        [compacted] = a.append(t, [{"type": "compaction.recorded", "data": {"summary": "secret", "through_offset": 2}}])
        a.redact(compacted.position, "private", "tester", purge=False)
        backup = write(tmp_path / "all.jsonl", export_all(a))
    kept = '{"redacted":true,"through_offset":2}'
    assert kept in backup.read_text()
    (tmp_path / "edited.jsonl").write_text(backup.read_text().replace(kept, '{"redacted":true,"through_offset":%s}' % edited))
    with Store(tmp_path / "b.db") as b:
        with pytest.raises(InvalidEvent, match=r"line 6\.event\.data\.through_offset: must be an offset \(an integer\), not "):
            import_events(b, tmp_path / "edited.jsonl")
        assert events_of(b) == []
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "c.db"), "import", "events", str(tmp_path / "edited.jsonl")])
    assert result.exit_code == 1
    assert "line 6.event.data.through_offset: must be an offset" in result.output
    assert "altered outside threadlog" not in result.output


def test_an_export_holding_an_interrupt_id_no_longer_accepted_restores_and_can_be_answered(tmp_path: Path) -> None:
    """Interrupt ids are checked as ids since this release (1 to 200 printable characters); an
    interrupt an earlier release raised with another id still restores from its export, and
    can still be answered or cancelled, or the thread would wait on it for good."""
    from eventstore.prepare import prepare

    old_ids = ["", "ask\x1b[2J", "x" * 300]
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        for old in old_ids:
            with pytest.raises(InvalidEvent, match="interrupt_id"):
                a.append(t, [{"type": "interrupt.raised", "data": {"interrupt_id": old}}])
            # As an earlier release checked it: `restoring` keeps what it let through.
            a.append_prepared(t, [prepare({"type": "interrupt.raised", "data": {"interrupt_id": old}}, 0, restoring=True)])
        backup = write(tmp_path / "all.jsonl", export_all(a))
        original = events_of(a)
    with Store(tmp_path / "b.db") as b:
        assert import_events(b, backup).added == len(original)
        assert events_of(b) == original and b.verify().events == len(original)
        b.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": old_ids[0], "answer": "yes"}}])
        b.append(t, [{"type": "interrupt.cancelled", "data": {"interrupt_id": old_ids[1], "reason": "moot"}}])
        b.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": old_ids[2]}}])
        assert b.verify().events == len(original) + 3


def test_an_export_of_the_largest_event_an_append_takes_restores(tmp_path: Path) -> None:
    """Only data was capped (32 MiB): an actor of 35 MiB beside 30 MiB of text was taken, and its
    68 MB export line was then past the import's line limit. Meta is capped too now, and the
    largest event an append takes restores from its export."""
    big = 30 * 2**20
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        with pytest.raises(InvalidEvent, match=r"events\[0\]\.meta: is \d+ bytes of JSON; an event's meta holds at most"):
            a.append_message(t, "user", "x", actor="a" * (33 * 2**20))
        a.append_message(t, "user", "x" * big, actor="a" * big)
        backup = write(tmp_path / "all.jsonl", export_all(a))
    with Store(tmp_path / "b.db") as b:
        assert import_events(b, backup).added == 2
        assert len(next(b.read(t, 1)).meta["actor"]) == big


def test_a_long_thread_restores_a_batch_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One thread's events were held until the stream changed: a 186 MB export of one thread
    peaked at 1.3 GB (123 MB now). Each write now takes at most RUN_EVENTS of them, and what
    is restored is the same, redactions and a fork across the batches' edges included."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread(title="long")
        written = a.append(t, [{"type": "message.appended", "data": {"role": ("user", "assistant")[i % 2], "content": f"m{i}"}}
                               for i in range(2_500)])
        a.redact(written[999].position, reason="r", actor="a")  # the last event of the first batch
        a.redact(written[1000].position, reason="r", actor="a")  # the first of the next
        fork = a.fork(t, at=1_500)
        a.append_message(fork, "user", "branch")
        original = events_of(a)
        backup = write(tmp_path / "all.jsonl", export_all(a))
    batches: list[int] = []
    write_batch = Store._write

    def counted(store: Store, thread: str, head: Any, batch: Any, *args: Any) -> Any:
        batches.append(len(batch))
        return write_batch(store, thread, head, batch, *args)

    monkeypatch.setattr(Store, "_write", counted)
    with Store(tmp_path / "b.db") as b:
        report = import_events(b, backup)
        assert events_of(b) == original
        assert b.verify().redacted == 2
    assert max(batches) == RUN_EVENTS and sum(batches) == report.added == len(original)


def test_an_event_line_whose_id_disagrees_with_its_meta_is_refused(tmp_path: Path) -> None:
    """An event the caller named keeps its id in its meta too; the restore wrote the meta's and
    let the line's top-level id say anything (it was looked up, never written)."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        a.append_message(t, "user", "named", event_id="chosen-id")
        lines = list(export_all(a))
    assert _event(lines, 1)["meta"]["event_id"] == "chosen-id"
    _event(lines, 1)["event_id"] = "not-the-real-id"
    bad = write(tmp_path / "bad.jsonl", lines)
    db = tmp_path / "b.db"
    Store(db).close()
    before = sha(db)
    with Store(db) as b, pytest.raises(InvalidEvent, match=r"line 4.event.meta.event_id: 'chosen-id' is not the event's event_id "
                                                           r"'not-the-real-id': the export was altered"):
        import_events(b, bad)
    assert sha(db) == before


@pytest.mark.parametrize(("change", "says"), [
    (lambda lines: lines.__delitem__(slice(-4, None)), "the export stops here, before its end line: it was cut short"),
    (lambda lines: lines.pop(), "the export stops here, before its end line"),
    (lambda lines: lines[-1]["end"].update(events=lines[-1]["end"]["events"] + 1), "end.events: says"),
    (lambda lines: lines[-1]["end"].update(streams="3"), "end: must be"),
    (lambda lines: lines.append({"event": _event(lines, 0)}), "comes after the end line"),
], ids=["cut-at-a-line-end", "end-line-lost", "count-edited", "count-not-a-number", "line-after-the-end"])
def test_an_export_cut_short_or_with_a_wrong_end_line_is_refused(tmp_path: Path, change: Any, says: str) -> None:
    """An export cut at a line's end (a copy that stopped) restored as a smaller history."""
    bad = tampered(tmp_path, change)
    db = tmp_path / "b.db"
    Store(db).close()
    before = sha(db)
    with Store(db) as b, pytest.raises(InvalidEvent, match=says):
        import_events(b, bad)
    assert sha(db) == before


def _two_threads(tmp_path: Path) -> list[dict[str, Any]]:
    """An export of two threads written in turn, with no redaction, so it restores anywhere."""
    with Store(tmp_path / "a.db") as a:
        x, y = a.create_thread(title="x"), a.create_thread(title="y")
        a.append_message(x, "user", "first")
        a.append_message(y, "user", "second")
        return list(export_all(a))


def _line_repeated(lines: list[dict[str, Any]]) -> int:
    """The first event line again before the end line (its count raised to match); its number."""
    lines.insert(len(lines) - 1, {"event": _event(lines, 0)})
    lines[-1]["end"]["events"] += 1
    return len(lines) - 1


def _lines_swapped(lines: list[dict[str, Any]]) -> int:
    """The last two event lines, of two threads, swapped; the number of the second of them."""
    at = len(lines) - 3
    lines[at], lines[at + 1] = lines[at + 1], lines[at]
    return at + 2


@pytest.mark.parametrize("onto", ["new", "busy", "source"])
@pytest.mark.parametrize("change", [_line_repeated, _lines_swapped], ids=["line-repeated", "lines-swapped"])
def test_event_lines_out_of_commit_order_are_refused_wherever_they_restore(tmp_path: Path, change: Any, onto: str) -> None:
    """An export lists its events in commit order, each once. A line repeated after its run was
    written was taken for an event already present ("1 already present" in a new database), and
    two threads' lines swapped restored, where positions are renumbered, in the swapped order."""
    lines = _two_threads(tmp_path)
    at = change(lines)
    bad = write(tmp_path / "bad.jsonl", lines)
    db = tmp_path / ("a.db" if onto == "source" else "b.db")
    with Store(db) as b:
        if onto == "busy":
            b.create_thread(title="already here")
    before = sha(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(bad)])
    assert result.exit_code == 1 and f"line {at}.event.position: " in result.stderr, result.output
    assert "an export lists events in commit order, each once" in result.stderr, result.output
    assert sha(db) == before


@pytest.mark.parametrize("case", [c for c in BACKENDS if c.id != "sqlite-memory"], ids=lambda c: c.id)
@pytest.mark.parametrize("change", [_line_repeated, _lines_swapped], ids=["line-repeated", "lines-swapped"])
def test_event_lines_out_of_commit_order_are_refused_on_every_backend(tmp_path: Path, case: BackendCase, change: Any) -> None:
    lines = _two_threads(tmp_path)
    at = change(lines)
    bad = write(tmp_path / "bad.jsonl", lines)
    backend = case.make(tmp_path)
    with Store(backend) as b:
        b.create_thread(title="already here")
        before = case.dump(backend)
        with pytest.raises(InvalidEvent, match=rf"line {at}.event.position: .*in commit order, each once"):
            import_events(b, bad)
        assert case.dump(backend) == before


def test_an_export_of_version_1_with_no_end_line_restores(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a:
        build(a)
        lines = list(export_all(a))
        original = events_of(a)
    assert lines.pop() == {"end": {"streams": 5, "events": len(original)}}  # t, f, g and two sub-agents
    lines[0]["version"] = 1
    with Store(tmp_path / "b.db") as b:
        import_events(b, write(tmp_path / "v1.jsonl", lines))
        assert events_of(b) == original


def test_positions_restore_up_to_the_last_one_the_search_index_numbers(tmp_path: Path) -> None:
    """A docid is the position times 2^16, in 64 bits: a restore that kept a position past
    2^47 - 1 left a file that verified and could never be searched again; one that kept it up
    to 2^47 - 1 left the next append past it, with the same result. Kept up to 2^47 - 1 - 2^32."""
    from eventstore.restore import MAX_POSITION
    from threadlog import search
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread(title="trip")
        a.append_message(t, "user", "hello ferry")
        lines = list(export_all(a))
    assert MAX_POSITION == 2**47 - 1 - 2**32

    def shifted(last: int) -> list[dict[str, Any]]:
        moved = json.loads(json.dumps(lines))
        for line in moved:
            if "event" in line:
                line["event"]["position"] += last - 2
        return moved

    with Store(tmp_path / "b.db") as b:
        import_events(b, write(tmp_path / "top.jsonl", shifted(MAX_POSITION)))
        assert [e.position for e in b.read_all()] == [MAX_POSITION - 1, MAX_POSITION]
        assert b.verify().events == 2
        assert [hit.position for hit in search(b, "ferry")] == [MAX_POSITION]
        b.append_message(t, "assistant", "the ferry leaves at noon")
        assert sorted(hit.position for hit in search(b, "ferry")) == [MAX_POSITION, MAX_POSITION + 1]
    db = tmp_path / "c.db"
    Store(db).close()
    before = sha(db)
    with Store(db) as c, pytest.raises(InvalidEvent, match=f"is past {MAX_POSITION}, the last position a restore keeps"):
        import_events(c, write(tmp_path / "past.jsonl", shifted(MAX_POSITION + 1)))
    assert sha(db) == before
    with Store(tmp_path / "d.db") as d:  # wholly past it (an older release's restore kept such): renumbered
        report = import_events(d, write(tmp_path / "far.jsonl", shifted(2**50)))
        assert not report.positions_kept and [e.position for e in d.read_all()] == [1, 2]
        assert [hit.position for hit in search(d, "ferry")] == [2]


def test_a_backup_of_a_file_restored_high_holding_a_redaction_restores_with_its_positions(tmp_path: Path) -> None:
    """Positions a release before kept on restore (up to 2^47 - 1) are kept still where they
    leave room for appends: kept up to half of that, a redacted backup of such a file was
    renumbered, and refused because a redaction names positions ("restore it into a database
    whose log ends before position …", said of a new database)."""
    from eventstore.restore import MAX_POSITION

    with Store(tmp_path / "a.db") as a:
        t = a.create_thread(title="trip")
        a.append_message(t, "user", "my card is 4111")
        lines = list(export_all(a))
    for line in lines:
        if "event" in line:
            line["event"]["position"] += 2**46 + 100
    with Store(tmp_path / "b.db") as b:
        import_events(b, write(tmp_path / "high.jsonl", lines))
        b.append_message(t, "assistant", "noted")
        b.redact(2**46 + 102, reason="card number", actor="ops")
        backup = write(tmp_path / "backup.jsonl", export_all(b))
        kept = events_of(b)
    with Store(tmp_path / "c.db") as c:
        assert import_events(c, backup).positions_kept and events_of(c) == kept
        c.verify()
    moved = [json.loads(text) for text in backup.read_text().splitlines()]
    for line in moved:
        if "event" in line:
            line["event"]["position"] += MAX_POSITION
            if line["event"]["type"] == "event.redacted":
                line["event"]["data"]["position"] += MAX_POSITION
    with Store(tmp_path / "d.db") as d, pytest.raises(InvalidEvent, match=r"holds a redaction, which names positions: its "
                                                                          r"events are renumbered whatever the database holds"):
        import_events(d, write(tmp_path / "past.jsonl", moved))


def test_several_files_restore_all_or_none(tmp_path: Path) -> None:
    """`import events GOOD BAD` printed one error and exited 1, and GOOD had been committed
    (and a file the command created was kept)."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread(title="trip")
        a.append_message(t, "user", "hello")
        u = a.create_thread(title="other")
        a.append_message(u, "user", "hi")
        write(tmp_path / "good.jsonl", export_events(a, t))
        lines = list(export_events(a, u))
    lines[2]["event"]["data"]["content"] = "altered"
    write(tmp_path / "bad.jsonl", lines)
    db = tmp_path / "b.db"
    Store(db).close()
    before = sha(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(tmp_path / "good.jsonl"),
                                      str(tmp_path / "bad.jsonl")])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"error: {tmp_path / 'bad.jsonl'}: line 3") and result.output.count("\n") == 1
    assert sha(db) == before  # good.jsonl was not kept either
    created = tmp_path / "new.db"
    result = CliRunner().invoke(cli, ["--db", str(created), "import", "events", str(tmp_path / "good.jsonl"),
                                      str(tmp_path / "bad.jsonl")])
    assert result.exit_code == 1 and not created.exists()  # a file the refused command made is removed
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(tmp_path / "good.jsonl"),
                                      str(tmp_path / "good.jsonl")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].endswith("0 event(s) added, 2 already present, 0 thread(s) created")
    with Store(db) as b:
        assert [b.title(info.id) for info in b.threads()] == ["trip"]


def test_a_newer_backup_restored_over_a_copy_of_an_older_one_carries_its_redactions(tmp_path: Path) -> None:
    """The copy was restored from a backup made before a redaction: the newer backup's
    redacted row was taken as present (its hash is the same), its event.redacted then refused,
    and the copy kept the erased text."""
    from threadlog import save_snapshot, search, thread_state
    secret = "SECRET-KEY-4111"
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread(title="trip")
        a.append_message(t, "user", "hello")
        leak = a.append_message(t, "user", f"my key is {secret}")
        write(tmp_path / "backup1.jsonl", export_all(a))
        a.redact(leak.position, reason="leak", actor="ops")
        a.append_message(t, "user", "later")
        write(tmp_path / "backup2.jsonl", export_all(a))
        expected = list(export_all(a))
    db = tmp_path / "b.db"
    with Store(db) as b:
        import_events(b, tmp_path / "backup1.jsonl")
        assert [hit.position for hit in search(b, secret)] == [leak.position]
        thread_state(b, t)
        save_snapshot(b, t)
    tampered = [json.loads(line) for line in (tmp_path / "backup2.jsonl").read_text().splitlines()]
    row = next(line["event"] for line in tampered if "event" in line and line["event"]["position"] == leak.position)
    row["data"]["content"] = [{"type": "text", "text": f"[redacted] {secret}"}]
    write(tmp_path / "tampered.jsonl", tampered)
    before = sha(db)
    with Store(db) as b, pytest.raises(InvalidEvent, match="the export was altered"):
        import_events(b, tmp_path / "tampered.jsonl")
    assert sha(db) == before
    with Store(db) as b:
        report = import_events(b, tmp_path / "backup2.jsonl")
        assert (report.added, report.present, report.erased) == (2, 3, 1)
        assert list(export_all(b)) == expected
        assert b.verify().redacted == 1
        assert search(b, secret) == []
        assert secret not in json.dumps(thread_state(b, t).messages)
    for path in (db, Path(f"{db}-wal")):
        assert not path.exists() or secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("case", [c for c in BACKENDS if c.id != "sqlite-memory"], ids=lambda c: c.id)
def test_a_carried_over_redaction_holds_on_every_backend(tmp_path: Path, case: BackendCase) -> None:
    from threadlog import search
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread(title="trip")
        leak = a.append_message(t, "user", "my key is zanzibar-4111")
        write(tmp_path / "backup1.jsonl", export_all(a))
        a.redact(leak.position, reason="leak", actor="ops")
        write(tmp_path / "backup2.jsonl", export_all(a))
        expected = list(export_all(a))
    backend = case.make(tmp_path)
    with Store(backend) as b:
        import_events(b, tmp_path / "backup1.jsonl")
        assert len(search(b, "zanzibar")) == 1
        report = import_events(b, tmp_path / "backup2.jsonl")
        assert (report.added, report.erased) == (1, 1)
        assert list(export_all(b)) == expected
        assert b.verify().redacted == 1 and search(b, "zanzibar") == []
        assert not any("zanzibar" in row for row in case.dump(backend))


def test_a_backup_of_a_file_from_the_first_release_restores_where_positions_are_kept(tmp_path: Path) -> None:
    """Its events keep the first hash layout, which covers the position: the file verified and
    exported, and every restore of the export refused it."""
    import shutil
    old = tmp_path / "old.db"
    shutil.copy(Path(__file__).parent / "fixtures" / "v1.db", old)
    with Store(old) as store:
        assert any(not e.hash.startswith("tl2:") for e in store.read_all())
        lines = list(export_all(store))
        original = events_of(store)
    export = write(tmp_path / "backup.jsonl", lines)
    with Store(tmp_path / "new.db") as new:
        report = import_events(new, export)
        assert report.positions_kept and report.added == len(original)
        assert events_of(new) == original and list(export_all(new)) == lines
        assert new.verify().events == len(original)
    other = tmp_path / "other.db"
    with Store(other) as store:
        store.create_thread(title="already here")
    before = sha(other)
    with Store(other) as store, pytest.raises(InvalidEvent, match="first hash layout, which covers the position: this database's log already reaches position 1, "
                                                                    r"at or past the export's first new event \(position 1\), .*restore it into a new, empty one"):
        import_events(store, export)
    assert sha(other) == before
    from eventstore.restore import MAX_POSITION
    for line in lines:  # past the last position a restore keeps: no database keeps them, a new one neither
        if "event" in line:
            line["event"]["position"] += MAX_POSITION
    with Store(tmp_path / "past.db") as past, pytest.raises(InvalidEvent, match="first hash layout, which covers the position: "
                                                                               "its events are renumbered whatever"):
        import_events(past, write(tmp_path / "past.jsonl", lines))


def _crafted_redaction(lines: list[dict[str, Any]], target: dict[str, Any], skeleton: dict[str, Any],
                       stream_id: str) -> list[dict[str, Any]]:
    """`lines` with `target` marked redacted to `skeleton`, and an `event.redacted` naming it,
    hashed by hand, appended to `stream_id` (a new thread when no event of it is in `lines`)."""
    from eventstore.prepare import prepare
    events = [line["event"] for line in lines if "event" in line]
    target["redacted"], target["data"] = True, skeleton
    body = [line for line in lines if "end" not in line]
    own = [e for e in events if e["stream_id"] == stream_id]
    position = max(e["position"] for e in events) + 1
    if own:
        prev, offset = own[-1]["hash"], own[-1]["offset"] + 1
    else:
        body.append({"stream": {"id": stream_id, "parent_id": None, "parent_offset": None, "root_id": stream_id, "depth": 0,
                                "kind": "thread"}})
        prev, offset = "", 0
    made = [("thread.created", {})] if not own else []
    made.append(("event.redacted", {"position": target["position"], "reason": "x", "actor": "y",
                                    "skeleton_digest": digest(canonical(skeleton))}))
    for type_, data in made:
        event_id = f"crafted-{type_}"
        p = prepare({"type": type_, "data": data, "meta": {}}, "craft", event_id)
        stamp = "2026-12-04T04:00:00.000000Z"
        hash_ = chain_hash(prev, stream_id, offset, event_id, type_, p.schema_version, stamp, p.meta_json, p.data_digest)
        body.append({"event": {"position": position, "stream_id": stream_id, "offset": offset, "event_id": event_id,
                               "type": type_, "schema_version": p.schema_version, "data": json.loads(p.data_json),
                               "meta": p.meta, "recorded_at": stamp, "data_digest": p.data_digest, "hash": hash_,
                               "redacted": False}})
        prev, offset, position = hash_, offset + 1, position + 1
    counts = {"streams": sum("stream" in line for line in body), "events": sum("event" in line for line in body)}
    return [*body, {"end": counts}]


@pytest.mark.parametrize("elsewhere", [False, True], ids=["in-its-thread", "in-a-new-thread"])
def test_a_crafted_redaction_in_an_export_cannot_rewrite_a_stored_event(tmp_path: Path, elsewhere: bool) -> None:
    """An export marking a stored event redacted, with a skeleton of its own choosing and a
    hand-hashed event.redacted naming it, rewrote the stored text ("wire $100 to Alice" became
    "wire $100000 to Mallory"), and verify passed."""
    from eventstore.skeleton import skeleton_of
    db = tmp_path / "b.db"
    with Store(db) as b:
        t = b.create_thread(title="payments")
        order = b.append_message(t, "user", "wire $100 to Alice")
        lines = list(export_all(b))
    planted = {"role": "user", "content": [{"type": "text", "text": "wire $100000 to Mallory"}]}
    honest = json.loads(skeleton_of(order.type, canonical(order.data))[0])
    before = sha(db)
    for skeleton, says in ([(planted, "is not what a redaction of the event this database stores leaves")] +
                           ([(honest, "not in the event's own thread")] if elsewhere else [])):
        copy = json.loads(json.dumps(lines))
        crafted = _crafted_redaction(copy, next(line["event"] for line in copy if "event" in line and
                                                line["event"]["position"] == order.position), skeleton,
                                     "intruder" if elsewhere else t)
        with Store(db) as b, pytest.raises(InvalidEvent, match=says):
            import_events(b, write(tmp_path / "crafted.jsonl", crafted))
        assert sha(db) == before
    with Store(db) as b:
        assert b.verify().redacted == 0
        assert [e.data for e in b.read(t)][-1]["content"] == [{"type": "text", "text": "wire $100 to Alice"}]


@pytest.mark.parametrize("change", ["text-edited", "text-and-digest-edited", "meta-edited", "time-edited",
                                    "redacted-skeleton-forged"])
def test_an_altered_export_is_refused_where_its_events_are_already_stored(tmp_path: Path, change: str) -> None:
    """The same id, place and hash are not enough to call a line present: what the hash covers
    is checked against the stored event, as a restore into another database checks it."""
    bad = tampered(tmp_path, CHANGES[change])
    db = tmp_path / "a.db"  # the database the export was made from
    with Store(db) as a:
        a.purge()
    before = sha(db)
    with Store(db) as a, pytest.raises(InvalidEvent, match="the export was altered") as caught:
        import_events(a, bad)
    assert str(bad) in str(caught.value) and "line " in str(caught.value)
    assert sha(db) == before


def test_an_export_made_before_a_redaction_is_present_in_the_redacted_database(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        leak = a.append_message(t, "user", "my card is 4111")
        a.append_message(t, "assistant", "noted")
        backup = write(tmp_path / "before.jsonl", export_all(a))
        a.redact(leak.position, reason="card", actor="ops")
        report = import_events(a, backup)
        assert (report.added, report.present) == (0, 3)
        assert next(a.read(t, 1, 2)).redacted
        a.verify()


def old_backup(path: Path, events: list[tuple[str, dict[str, Any]]]) -> Path:
    """An export of one thread `S` holding `events` (type, data) as an older release wrote them,
    checked by nothing but its hashes."""
    return write(path, old_export(events))


def old_export(events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The lines of `old_backup`, for `Store.restore` on any backend."""
    lines: list[dict[str, Any]] = [{"format": "threadlog-events", "version": 2},
                                   {"stream": {"id": "S", "parent_id": None, "parent_offset": None, "root_id": "S", "depth": 0,
                                               "kind": "thread"}}]
    prev, when = "", "2026-01-01T00:00:00.000000Z"
    for offset, (type_, data) in enumerate(events):
        data_digest = digest(canonical(data))
        prev = chain_hash(prev, "S", offset, f"e{offset}", type_, 1, when, "{}", data_digest)
        lines.append({"event": {"position": offset + 1, "stream_id": "S", "offset": offset, "event_id": f"e{offset}",
                                "type": type_, "schema_version": 1, "data": data, "meta": {}, "recorded_at": when,
                                "data_digest": data_digest, "hash": prev, "redacted": False}})
    lines.append({"end": {"streams": 1, "events": len(events)}})
    return lines


def test_a_backup_holding_a_run_started_twice_restores(tmp_path: Path) -> None:
    """An older release appended a second run.started for a run in progress; appends refuse it
    now, and verify passes such a file: its backup must restore too."""
    events = [("thread.created", {"title": "t"}), ("run.started", {"run_id": "r1"}), ("run.started", {"run_id": "r1"}),
              ("run.finished", {"run_id": "r1", "status": "ok"})]
    backup = old_backup(tmp_path / "old.jsonl", events)
    with Store(tmp_path / "b.db") as b:
        assert import_events(b, backup).added == 4
        b.verify()
        with pytest.raises(InvalidEvent, match="run 'r1' is already in progress"):
            b.append("S", [{"type": "run.started", "data": {"run_id": "r1"}}, {"type": "run.started", "data": {"run_id": "r1"}}])


def test_a_backup_holding_a_result_for_a_call_waiting_on_an_interrupt_restores_and_reads_as_before(tmp_path: Path) -> None:
    """An older release recorded a call's result while an interrupt still waited on the call
    (a sub-agent's report did); appends refuse it now. Such a backup still restores and
    verifies, the interrupt still reads as pending, and cancelling it still settles it."""
    from threadlog import thread_state

    call = {"type": "tool_use", "id": "toolu_1", "name": "Agent", "input": {}}
    events = [("thread.created", {"title": "t"}), ("message.appended", {"role": "user", "content": [{"type": "text", "text": "go"}]}),
              ("message.appended", {"role": "assistant", "content": [call]}),
              ("interrupt.raised", {"interrupt_id": "q1", "tool_use_id": "toolu_1", "question": "later"}),
              ("message.appended", {"role": "user", "content": [
                  {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Fork started — processing in background"}]})]
    backup = old_backup(tmp_path / "old.jsonl", events)
    with Store(tmp_path / "b.db") as b:
        assert import_events(b, backup).added == 5
        assert b.verify().events == 5
        state = thread_state(b, "S")
        assert (state.status, [i["interrupt_id"] for i in state.pending_interrupts]) == ("interrupted", ["q1"])
        assert b.pending_interrupts("S") == ("q1",) and b.pending_tool_uses("S") == ()
        b.append("S", [{"type": "interrupt.cancelled", "data": {"interrupt_id": "q1", "reason": "answered"}}])
        assert thread_state(b, "S").status == "idle" and b.verify().events == 6


@pytest.mark.parametrize("change", [{"meta": {"actor": "mallory"}}, {"recorded_at": "2001-01-01T00:00:00.000000Z"}],
                         ids=["meta", "time"])
def test_an_altered_redacted_line_is_refused_by_the_database_holding_the_event_unredacted(tmp_path: Path,
                                                                                        change: dict[str, Any]) -> None:
    import shutil

    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        leak = a.append_message(t, "user", "my card is 4111")
        a.append_message(t, "assistant", "noted")
    shutil.copy(tmp_path / "a.db", tmp_path / "origin.db")  # the database as it was before the redaction
    with Store(tmp_path / "a.db") as a:
        a.redact(leak.position, reason="card", actor="ops")
        lines = list(export_all(a))
    next(line["event"] for line in lines if "event" in line and line["event"]["redacted"]).update(change)
    bad = write(tmp_path / "after.jsonl", lines)
    before = sha(tmp_path / "origin.db")
    with Store(tmp_path / "origin.db") as origin, pytest.raises(InvalidEvent, match="the export was altered"):
        import_events(origin, bad)
    assert sha(tmp_path / "origin.db") == before


def test_a_line_whose_meta_a_restore_would_store_the_same_is_present(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a:
        a.append_message(a.create_thread(), "user", "hi")
        lines = list(export_all(a))
        next(line["event"] for line in lines if "event" in line and line["event"]["type"] == "message.appended")["meta"]["actor"] = None
        assert import_events(a, write(tmp_path / "x.jsonl", lines)).present == 2


@pytest.mark.parametrize("where", ["new-database", "holding-it-unredacted"])
@pytest.mark.parametrize("skeleton", ["nan", "mixed-keys"])
def test_a_redacted_line_whose_skeleton_is_no_json_is_refused_by_line(tmp_path: Path, where: str, skeleton: str) -> None:
    """A skeleton holding NaN (which a JSON file may spell, and `json` reads) raised ValueError
    ("Out of range float values are not JSON compliant"), and one holding keys of several kinds
    (given to `restore` as parsed lines) TypeError, from canonical JSON: where the event is new,
    and where it is stored unredacted (the redaction carried over)."""
    import shutil

    with Store(tmp_path / "a.db") as a:
        leak = a.append_message(a.create_thread(), "user", "my card is 4111")
    shutil.copy(tmp_path / "a.db", tmp_path / "origin.db")
    with Store(tmp_path / "a.db") as a:
        a.redact(leak.position, reason="card", actor="ops")
        lines = list(export_all(a))
    number, line = next((n, line["event"]) for n, line in enumerate(lines, 1) if "event" in line and line["event"]["redacted"])
    if skeleton == "nan":
        line["data"]["content"][0]["text"] = float("nan")
        says = f"line {number}.event.data: not storable as UTF-8 JSON (Out of range float values are not JSON compliant"
    else:
        line["data"]["content"][0][1] = "x"
        says = f"line {number}.event.data.content[0]: the key 1 is int, not text: JSON object keys must be text"
    db = tmp_path / ("b.db" if where == "new-database" else "origin.db")
    Store(db).close()
    before = sha(db)
    with Store(db) as b, pytest.raises(InvalidEvent) as caught:
        b.restore(enumerate(lines, 1))
    assert str(caught.value).startswith(says), str(caught.value)
    assert sha(db) == before
    if skeleton == "nan":  # the same, read from a file
        with Store(db) as b, pytest.raises(InvalidEvent) as caught:
            import_events(b, write(tmp_path / "nan.jsonl", lines))
        assert str(caught.value).startswith(f"{tmp_path / 'nan.jsonl'}: {says}"), str(caught.value)
        assert sha(db) == before


def test_a_line_of_a_stored_event_whose_meta_is_no_json_is_refused_by_line(tmp_path: Path) -> None:
    """Its meta, compared with the stored event's, raised ValueError from canonical JSON (NaN)."""
    with Store(tmp_path / "a.db") as a:
        a.append_message(a.create_thread(), "user", "hi")
        lines = list(export_all(a))
    number, line = next((n, line["event"]) for n, line in enumerate(lines, 1) if "event" in line and line["event"]["type"] == MSG)
    line["meta"]["actor"] = float("nan")
    before = sha(tmp_path / "a.db")
    with Store(tmp_path / "a.db") as a, pytest.raises(InvalidEvent) as caught:
        import_events(a, write(tmp_path / "x.jsonl", lines))
    assert f"line {number}.event.meta: not storable as UTF-8 JSON (Out of range float" in str(caught.value)
    assert sha(tmp_path / "a.db") == before


@pytest.mark.parametrize("extra", [
    {"content": [{"type": "text", "text": "[redacted] wire $100000 to Mallory"}]},
    {"note": "wire $100000 to Mallory"},
], ids=["words-in-its-text", "a-field-of-its-own"])
def test_a_crafted_redaction_holding_more_than_a_skeleton_is_refused_by_restore(tmp_path: Path, extra: dict[str, Any]) -> None:
    """An export whose redacted line holds words of its own where a redaction leaves only its
    skeleton, with an event.redacted naming that row's digest and every hash made by hand:
    restored into a new database it would say what no one wrote, marked as erased."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread(title="payments")
        order = a.append_message(t, "user", "wire $100 to Alice")
        lines = list(export_all(a))
    target = next(line["event"] for line in lines if "event" in line and line["event"]["position"] == order.position)
    number = 1 + lines.index({"event": target})
    skeleton = {"role": "user", "content": [{"type": "text", "text": "[redacted]"}], "redacted": True} | extra
    bad = write(tmp_path / "crafted.jsonl", _crafted_redaction(lines, target, skeleton, t))
    db = tmp_path / "b.db"
    Store(db).close()
    before = sha(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(bad)])
    assert result.exit_code == 1 and f"line {number}.event.data" in result.stderr and str(bad) in result.stderr, result.output
    assert "holds more than a redaction keeps" in result.stderr and "Traceback" not in result.output
    assert sha(db) == before
    with Store(db) as b:
        assert list(b.threads()) == []


def test_a_skeleton_that_breaks_the_threads_facts_is_refused_naming_a_line(tmp_path: Path) -> None:
    """A redacted run.started whose skeleton names another run leaves the run.finished after it
    finishing a run not in progress. The refusal named `events[2]`, the event's index in a
    batch of the restore's own, which no line of the file is."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        started = a.append(t, [{"type": "run.started", "data": {"run_id": "r1"}}])[0]
        a.append(t, [{"type": "run.finished", "data": {"run_id": "r1", "status": "ok"}}])
        a.redact(started.position, reason="pii", actor="ops")
        lines = list(export_all(a))
    number, finished = next((n, line["event"]) for n, line in enumerate(lines, 1)
                            if line.get("event", {}).get("type") == "run.finished")
    next(line["event"] for line in lines if line.get("event", {}).get("redacted"))["data"]["run_id"] = "r2"
    bad = write(tmp_path / "bad.jsonl", lines)
    db = tmp_path / "b.db"
    Store(db).close()
    before = sha(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(bad)])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {bad}: line {number}.event.data.run_id: run 'r1' is not pending"), result.stderr
    assert sha(db) == before


def test_a_redacted_export_refused_by_a_database_names_the_position_its_log_must_end_before(tmp_path: Path) -> None:
    """Whether positions are kept is decided at the export's first event, so a database whose
    log ends before that position keeps them. The refusal named the position of the event
    holding the redaction instead ("ends before position 2"), which the database it refused,
    ending at position 1, already did."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread(title="trip")
        leak = a.append_message(t, "user", "my card is 4111")
        a.append_message(t, "assistant", "noted")
        a.redact(leak.position, reason="card number", actor="ops")
        backup = write(tmp_path / "backup.jsonl", export_all(a))
    db = tmp_path / "b.db"
    with Store(db) as b:
        b.create_thread(title="already here")  # its log ends at position 1, the export's first
    before = sha(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(backup)])
    assert result.exit_code == 1, result.output
    assert "holds a redaction, which names positions: this database's log already reaches position 1, at or past the " \
           "export's first new event (position 1), so positions would be renumbered here; restore it into a new, empty " \
           "one, where they are kept" in result.stderr, result.stderr
    assert sha(db) == before
    with Store(tmp_path / "c.db") as c:  # one that does keep them
        assert import_events(c, backup).positions_kept
        c.verify()


def test_a_redacted_backup_refused_by_a_database_holding_part_of_its_history_says_what_that_database_holds(
        tmp_path: Path) -> None:
    """A user restores one thread's export into a new file, later redacts in the source and
    restores a backup of everything into that file. Its log already reaches past the backup's
    first new event, so positions would be renumbered and the redaction cannot be restored. The
    refusal said only "restore it into a database whose log ends before position 1", which
    read as a riddle of a file holding events; it names how far this database's log reaches and
    that the way on is a new, empty database."""
    with Store(tmp_path / "a.db") as a:
        other = a.create_thread(title="other")
        t = a.create_thread(title="trip")
        leak = a.append_message(t, "user", "my card is 4111")
        a.append_message(other, "user", "hello")
        a.append_message(t, "assistant", "noted")
        part = write(tmp_path / "part.jsonl", export_events(a, t))
        a.redact(leak.position, reason="card number", actor="ops")
        backup = write(tmp_path / "backup.jsonl", export_all(a))
    db = tmp_path / "b.db"
    with Store(db) as b:
        assert import_events(b, part).positions_kept  # the trip's events, at their positions 2, 3 and 5
    before = sha(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(backup)])
    assert result.exit_code == 1, result.output
    assert "holds a redaction, which names positions: this database's log already reaches position 5, at or past " \
           "the export's first new event (position 1)" in result.stderr, result.stderr
    assert "restore it into a new, empty one, where they are kept" in result.stderr
    assert sha(db) == before


def test_a_restore_keeps_little_of_each_stream_line_until_its_end(tmp_path: Path) -> None:
    """A restore holds what it needs of every stream line until the export's end (a fork's
    place, the fields checked against the rows it wrote): a backup of a million forks must not
    hold a million parsed lines. Measured with lines parsed as the importer parses them (each
    its own dict and key strings): 1,031 bytes a line when the parsed line was kept, ~350 now."""
    import tracemalloc

    with Store(tmp_path / "source.db") as source:
        t = source.create_thread(title="one")
        source.append_message(t, "user", "hello")
        lines = list(dump_lines(export_all(source)))
    count = 30_000
    declared = [json.dumps({"stream": {"id": f"{n:016x}", "parent_id": t, "parent_offset": 2, "root_id": t, "depth": 1,
                                       "kind": "fork"}}) for n in range(count)]
    end = json.loads(lines[-1])
    end["end"]["streams"] += count
    text = [lines[0], *declared, *lines[1:-1], json.dumps(end)]
    with Store(tmp_path / "target.db") as target:
        tracemalloc.start()
        try:
            report = target.restore((number, json.loads(line)) for number, line in enumerate(text, 1))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (report.streams, report.added) == (1, 2)
        assert [e.hash for e in target.read(t)] == [json.loads(line)["event"]["hash"] for line in lines[2:-1]]
    assert peak / count < 500, f"{peak / count:.0f} bytes held a stream line"


def test_a_backup_reads_its_stream_lines_as_it_writes_them(tmp_path: Path) -> None:
    """`export_all` held a list of every stream through the whole backup: 2.7 MB of Python
    objects at 5,001 streams (`export --all` of 202,000 streams peaked at 174 MB, 42 MB since). Read as
    written, what it holds does not grow with the streams."""
    import tracemalloc

    with Store(tmp_path / "many.db") as store:
        t = store.create_thread(title="one")
        store.append_message(t, "user", "hello")
        for _ in range(5000):
            store.fork(t)
        tracemalloc.start()
        try:
            lines = sum(1 for _ in export_all(store))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert lines == 1 + 5001 + 5002 + 1
    assert peak < 500_000, f"{peak:,} bytes held"


def test_lines_given_with_ids_of_a_str_subclass_restore_as_plain_text(tmp_path: Path) -> None:
    """Lines a caller built with its own string type: a restore keeps stream ids interned,
    which Python refuses for a subclass of str (a TypeError out of `restore`), and before
    that a stream line's text of such a type was refused as altered ("is 'x', but the
    database holds the stream with 'x'"). Text is text: they restore as plain text."""

    class Text(str):
        pass

    with Store(tmp_path / "source.db") as source:
        t = source.create_thread(title="one")
        source.append_message(t, "user", "hello")
        source.fork(t)
        lines = [json.loads(line) for line in dump_lines(export_all(source))]
        exported = [(e.position, e.hash) for e in source.read_all()]
    for line in lines:
        for key in ("stream", "event"):
            if key in line:
                for field in ("id", "stream_id", "parent_id", "root_id"):
                    if isinstance(line[key].get(field), str):
                        line[key][field] = Text(line[key][field])
    with Store(tmp_path / "target.db") as target:
        report = target.restore(enumerate(lines, 1))
        assert (report.streams, report.added) == (2, 3)
        assert [(e.position, e.hash) for e in target.read_all()] == exported
        target.verify()
