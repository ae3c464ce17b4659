"""JSON nested too deeply: refused on every append path, survived by every reader.

Appends refuse data or meta nested more than `MAX_DEPTH` (100) levels, naming the field,
before anything is written. An event deeper than that can still sit in a file (an older
release accepted about 985 levels; a hand edit accepts anything), so readers are run on
real files where one was planted with raw SQL: each either works or raises a StoreError
naming the event's position, and the CLI prints one `error:` line, never a traceback.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import integrity
from eventstore.events import MAX_DEPTH, Event, MetadataSet
from tests import stored
from tests.backends import BACKENDS, BackendCase, open_store
from threadlog import (IntegrityError, InvalidEvent, Store, StoreError, anthropic_request, display_rows, export_all, import_events,
                       thread_state, transcript)
from threadlog.cli import cli
from threadlog.export import dump_lines

from test_bad_input import fingerprint

THREADLOG = str(Path(sys.executable).parent / "threadlog")


def nested(levels: int) -> dict[str, Any]:
    """A JSON object `levels` containers deep: nested(1) == {"k": 1}."""
    value: dict[str, Any] = {"k": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def nested_text(levels: int) -> str:
    return '{"a":' * (levels - 1) + '{"k":1}' + "}" * (levels - 1)


def tool_use(tool_id: str, tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "search", "input": tool_input}


# -- refusals ---------------------------------------------------------------------------------

# `data` itself is level 1: a metadata.set patch of nested(MAX_DEPTH - 1) is exactly at the limit.
TOO_DEEP = nested(MAX_DEPTH)


def _cycle() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["again"] = loop
    return loop


Call = Callable[[Store, str], Any]

REFUSED: list[tuple[str, Call, str]] = [
    ("emit-metadata-patch", lambda s, t: s.append(t, [{"type": "metadata.set", "data": {"patch": TOO_DEEP}}]), "events[0].data.patch"),
    ("message-tool-input", lambda s, t: s.append_message(t, "assistant", [tool_use("toolu_d", TOO_DEEP)]), "events[0].data.content"),
    ("message-usage", lambda s, t: s.append_message(t, "assistant", "hi", usage=TOO_DEEP), "events[0].data.usage"),
    ("meta-actor", lambda s, t: s.append_message(t, "user", "hi", actor=TOO_DEEP), "events[0].meta.actor"),
    ("event-model", lambda s, t: s.append(t, [Event(type="metadata.set", data={"patch": TOO_DEEP})]), "events[0].data.patch"),
    ("event-data-model", lambda s, t: s.append(t, [MetadataSet(patch=TOO_DEEP)]), "events[0].data.patch"),
    ("second-of-a-batch", lambda s, t: s.append(t, [{"type": "title.set", "data": {"title": "ok"}},
                                                     {"type": "metadata.set", "data": {"patch": TOO_DEEP}}]), "events[1].data.patch"),
    ("create-thread-tools", lambda s, t: s.create_thread(tools=[{"name": "deep", "input_schema": TOO_DEEP}]), "events[0].data.tools"),
    ("python-stack-depth-tools", lambda s, t: s.create_thread(tools=[{"name": "deep", "input_schema": nested(100_000)}]),
     "events[0].data.tools"),
    ("create-thread-metadata", lambda s, t: s.create_thread(metadata=TOO_DEEP), "events[0].data.metadata"),
    ("create-thread-meta", lambda s, t: s.create_thread(actor=TOO_DEEP), "events[0].meta.actor"),
    ("fork-metadata", lambda s, t: s.fork(t, metadata=TOO_DEEP), "metadata"),
    ("fork-meta", lambda s, t: s.fork(t, correlation_id=TOO_DEEP), "fork.meta.correlation_id"),
    ("fan-out-metadata", lambda s, t: s.fan_out("waiting", ["look"], metadata=TOO_DEEP), "metadata"),
    ("fan-out-meta", lambda s, t: s.fan_out("waiting", ["look"], actor=TOO_DEEP), "meta.actor"),
    ("python-stack-depth-tool-input", lambda s, t: s.append_message(t, "assistant", [tool_use("toolu_d", nested(100_000))]), "events[0].data.content"),
    ("python-stack-depth-model", lambda s, t: s.append(t, [MetadataSet(patch=nested(100_000))]), "events[0].data.patch"),
    ("python-stack-depth", lambda s, t: s.append(t, [{"type": "metadata.set", "data": {"patch": nested(100_000)}}]), "events[0].data.patch"),
]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("deep") / "seed.db"
    with Store(db) as s:
        t = s.create_thread(thread_id="t")
        s.append_message(t, "user", "hello")
        s.append_message(t, "assistant", "hi")
        w = s.create_thread(thread_id="waiting")
        s.append_message(w, "user", "search")
        s.append_message(w, "assistant", [tool_use("toolu_1", {})])
    return db


@pytest.mark.parametrize(("call", "field"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_every_append_path_refuses_too_deep_json(seeded: Path, tmp_path: Path, call: Call, field: str) -> None:
    db = tmp_path / "t.db"
    shutil.copy(seeded, db)
    before = fingerprint(db)
    with Store(db) as store, pytest.raises(InvalidEvent) as caught:
        call(store, "t")
    print(f"\n{caught.value}")
    assert caught.value.field.endswith(field), caught.value.field
    assert f"more than {MAX_DEPTH} levels" in str(caught.value)
    assert fingerprint(db) == before, "a refused append changed the database"


def test_a_cycle_is_refused(mem: Store) -> None:
    t = mem.create_thread()
    with pytest.raises(InvalidEvent, match="Circular reference") as caught:
        mem.append(t, [{"type": "metadata.set", "data": {"patch": _cycle()}}])
    assert caught.value.field == "events[0].data"
    with pytest.raises(InvalidEvent, match="more than 100 levels"):
        mem.fork(t, metadata=_cycle())  # fork options are walked before validation
    assert mem.head(t) == 1


def test_depth_at_the_limit_is_stored_and_read_back(mem: Store) -> None:
    t = mem.create_thread()
    mem.append_message(t, "user", "hi")
    at_limit = nested(MAX_DEPTH - 1)  # data -> patch -> ... : exactly MAX_DEPTH containers
    mem.append(t, [{"type": "metadata.set", "data": {"patch": at_limit}}])
    mem.append_message(t, "assistant", [tool_use("toolu_ok", nested(MAX_DEPTH - 4))])  # data, content, block, input
    assert [e.data for e in mem.read_all()][2] == {"patch": at_limit}
    assert thread_state(mem, t).metadata["a"] == at_limit["a"]
    mem.verify()


def test_text_fast_path_holds_two_levels_whatever_the_text(mem: Store) -> None:
    """The fast path (a plain dict with text content) skips the depth walk: its data is
    always {"role", "content": [{"type", "text"}]}. Text that looks like deep JSON is text."""
    t = mem.create_thread()
    text = nested_text(50_000)
    recorded = mem.append_message(t, "user", text)
    assert recorded.data == {"role": "user", "content": [{"type": "text", "text": text}]}
    mem.verify()


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 100_000], ids=["just-over", "past-the-python-stack"])
def test_cli_emit_refuses_too_deep_json(seeded: Path, tmp_path: Path, levels: int) -> None:
    db = tmp_path / "t.db"
    shutil.copy(seeded, db)
    before = fingerprint(db)
    data = '{"patch":' + nested_text(levels - 1) + "}"
    result = CliRunner().invoke(cli, ["emit", "t", "metadata.set", "--data", data, "--db", str(db)])
    print(f"\n$ threadlog emit <{levels} levels> -> exit {result.exit_code}: {result.stderr.strip()}")
    assert result.stdout == "" and "Traceback" not in result.stderr and f"{MAX_DEPTH} levels" in result.stderr
    if levels == MAX_DEPTH + 1:  # JSON, read: the event holding it is refused, as any event of the wrong shape
        assert result.exit_code == 1 and result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
    else:  # deeper than the JSON reader goes: the option's value is a usage error naming it
        assert result.exit_code == 2 and "Invalid value for '--data': is JSON nested too deeply" in result.stderr
    assert fingerprint(db) == before


# -- an event deeper than the limit already in a file ---------------------------------------------


def plant(db: Path, thread: str, data: str | None = None, meta: str | None = None) -> int:
    """Rewrite `thread`'s last event to hold `data` (or `meta`, or both) with raw SQL, as a hand
    edit (or an older release) would: its digest, its hash (the store's own layout,
    `integrity.chain_hash`) and the stream's head hash are made to match, so only the nesting
    is wrong. Returns its position."""
    conn = sqlite3.connect(db)
    try:
        (position, offset, event_id, type_, version, stored_meta, recorded_at), = stored.events(
            conn, ["position", "offset", "event_id", "type", "schema_version", "meta", "recorded_at"],
            'WHERE stream_id = ? ORDER BY "offset" DESC LIMIT 1', (thread,))
        (prev,), = stored.events(conn, ["hash"], 'WHERE stream_id = ? AND "offset" = ?', (thread, offset - 1))
        if data is None:
            (data,), = conn.execute("SELECT data FROM events WHERE position = ?", (position,))
        meta = stored_meta if meta is None else meta
        digest = hashlib.sha256(data.encode()).hexdigest()
        hash_ = integrity.chain_hash(prev, thread, offset, event_id, type_, version, recorded_at, meta, digest)
        conn.execute("UPDATE events SET data = ?, meta = ?, data_digest = ?, hash = ? WHERE position = ?",
                     (data, meta, digest, hash_, position))
        conn.execute("UPDATE streams SET head_hash = ? WHERE id = ?", (hash_, thread))
        conn.commit()
    finally:
        conn.close()
    return int(position)


LEVELS = [150, 990, 5000]
KINDS = ["metadata", "tool-input"]


@pytest.fixture(scope="module", params=[(levels, kind) for levels in LEVELS for kind in KINDS],
                ids=[f"{levels}-{kind}" for levels in LEVELS for kind in KINDS])
def planted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """(file, position of the deep event, its depth): a thread whose last event is too deep."""
    levels, kind = request.param
    db = tmp_path_factory.mktemp("planted") / "deep.db"
    with Store(db) as s:
        s.create_thread(thread_id="t", title="deep")
        s.append_message("t", "user", "search")
        if kind == "metadata":
            s.append("t", [{"type": "metadata.set", "data": {"patch": {"k": 1}}}])
            data = '{"patch":' + nested_text(levels - 1) + "}"
        else:  # the call stays pending, as the facts stored with the row say
            s.append_message("t", "assistant", [tool_use("toolu_1", {"k": 1})])
            data = '{"content":[{"id":"toolu_1","input":' + nested_text(levels - 3) + ',"name":"search","type":"tool_use"}],"role":"assistant"}'
    return db, plant(db, "t", data), levels


# (name, call, parses every event it reads: so it cannot work past json's own limit)
READERS: list[tuple[str, Callable[[Store], Any], bool]] = [
    ("verify", lambda s: s.verify(), True),
    ("read_all", lambda s: list(s.read_all()), True),
    ("read", lambda s: list(s.read("t")), True),
    ("read_data", lambda s: list(s.read_data("t")), True),
    ("event_at", lambda s: s.event_at("t", 2), True),
    ("thread_state", lambda s: thread_state(s, "t").to_json(), False),
    ("thread_state-messages", lambda s: thread_state(s, "t").messages, False),
    ("transcript", lambda s: transcript(s, "t"), False),
    ("display_rows", lambda s: display_rows(s, "t"), True),
]


@pytest.mark.parametrize(("read", "parses_all"), [r[1:] for r in READERS], ids=[r[0] for r in READERS])
def test_readers_work_or_name_the_position(planted: tuple[Path, int, int], read: Callable[[Store], Any], parses_all: bool) -> None:
    db, position, levels = planted
    before = fingerprint(db)
    with Store(db) as store:
        try:
            read(store)
            outcome = "works"
        except StoreError as error:
            outcome = str(error)
            assert f"position {position}" in outcome, outcome
    print(f"\n{levels} levels: {outcome}")
    if levels <= 200:  # deeper than appends allow, but nowhere near Python's limits
        assert outcome == "works"
    if levels >= 5000 and parses_all:
        assert outcome != "works"
    assert fingerprint(db) == before


@pytest.mark.parametrize("args", [["log", "t"], ["log", "t", "--json"], ["show", "t"], ["show", "t", "--json"],
                                  ["verify"], ["rows", "t"], ["transcript", "t"]], ids=" ".join)
def test_cli_never_prints_a_traceback(planted: tuple[Path, int, int], args: list[str]) -> None:
    db, position, levels = planted
    run = subprocess.run([THREADLOG, *args, "--db", str(db)], capture_output=True, text=True, timeout=120)
    print(f"\n$ threadlog {' '.join(args)} ({levels} levels) -> exit {run.returncode}: {run.stderr.strip()}")
    assert "Traceback" not in run.stdout + run.stderr and "Exception ignored" not in run.stderr
    if levels <= 200:
        assert run.returncode == 0, run.stderr
    else:
        assert run.returncode in (0, 1)
    if run.returncode == 1:
        # `log` streams: the events before the deep one may be printed before the error
        assert len(run.stderr.splitlines()) == 1 and run.stderr.startswith("error: ")
        if args[0] in ("verify", "log"):
            assert f"position {position}" in run.stderr


def test_a_deep_event_in_a_file_can_be_redacted(planted: tuple[Path, int, int], tmp_path: Path) -> None:
    """The way out readers point to: redacting the position leaves a readable, verifying log."""
    source, position, _ = planted
    db = tmp_path / "copy.db"
    shutil.copy(source, db)
    with Store(db) as store:
        store.redact(position, reason="unreadable", actor="ops")
        assert store.verify().redacted == 1
        assert [e.position for e in store.read("t")][-2] == position
        thread_state(store, "t").messages


def test_a_redacted_deep_event_cannot_be_rewritten_unseen(tmp_path: Path) -> None:
    """Its tool ids cannot be read back from the skeleton, so the event.redacted records the
    skeleton's digest and what was pending: the row is bound like any other redacted row."""
    db = tmp_path / "deep.db"
    with Store(db) as s:
        s.create_thread(thread_id="t", title="deep")
        s.append_message("t", "user", "search")
        s.append("t", [{"type": "metadata.set", "data": {"patch": {"k": 1}}}])
    position = plant(db, "t", '{"patch":' + nested_text(4999) + "}")
    with Store(db) as store:
        store.redact(position, reason="unreadable", actor="ops")
        store.verify()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE events SET data = ? WHERE position = ?", ('{"patch":{"approved_by":"ceo"},"redacted":true}', position))
    conn.commit()
    conn.close()
    with Store(db) as store:
        assert thread_state(store, "t").metadata == {"approved_by": "ceo"}  # what a reader now sees
        with pytest.raises(IntegrityError):
            store.verify()


def test_a_backup_of_a_file_holding_a_deep_event_restores(planted: tuple[Path, int, int], tmp_path: Path) -> None:
    """An older release stored events deeper than appends now take; the file verifies, and its
    `export --all` was refused by every restore ("JSON nested more than 100 levels deep")."""
    source, position, levels = planted
    with Store(source) as store:
        try:
            lines = list(export_all(store))
        except StoreError as error:  # past what Python's json reads: export names the position
            print(f"\n{levels} levels: export: {error}")
            assert levels > 200 and f"position {position}" in str(error)
            return
    export = tmp_path / "b.jsonl"
    export.write_text("".join(dump_lines(lines)), encoding="utf-8")
    db = tmp_path / "b.db"
    try:
        with Store(db) as restored:
            import_events(restored, export)
            assert list(export_all(restored)) == lines
            assert restored.verify().events == len(lines) - 3  # the format, stream and end lines
    except StoreError as error:  # past what a line's JSON reads back: refused, naming it
        print(f"\n{levels} levels: restore: {error}")
        assert levels > 200 and str(error).startswith(f"{export}: line "), error


def redacted_deep_call(tmp_path: Path) -> list[dict[str, Any]]:
    """The export of a file whose thread `t` holds a tool call too deep to read (planted with
    raw SQL, as an older release or another program could write it), redacted after a fork `f`
    that keeps the call waiting answered it, and after another thread's events; then `t`
    answers it. The redaction records what was pending after the call (`pending`): the
    redacted row's skeleton holds no tool id."""
    db = tmp_path / "deep.db"
    with Store(db) as s:
        s.create_thread(thread_id="t", title="deep")
        s.append_message("t", "user", "search")
        s.append_message("t", "assistant", [tool_use("toolu_1", {"k": 1})])
    data = '{"content":[{"id":"toolu_1","input":' + nested_text(4997) + ',"name":"search","type":"tool_use"}],"role":"assistant"}'
    position = plant(db, "t", data)
    result = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"}]
    with Store(db) as store:
        store.create_thread(thread_id="u")
        store.append_message("u", "user", "meanwhile")
        store.fork("t", fork_id="f", unanswered="keep")
        store.append_message("f", "user", result)
        store.append_message("u", "assistant", "noted")
        store.redact(position, reason="unreadable", actor="ops")
        store.append_message("t", "user", result)
        store.append_message("t", "assistant", "found")
        store.verify()
        return list(export_all(store))


def views(store: Store) -> list[Any]:
    """What readers of the threads see: their state, transcript and next model request."""
    return [(thread_state(store, t).to_json(), transcript(store, t), anthropic_request(store, t, model="claude-sonnet-4-5"))
            for t in ("t", "f", "u")]


@pytest.mark.parametrize("case", [c for c in BACKENDS if c.id != "sqlite-memory"], ids=lambda c: c.id)
def test_a_history_with_a_redacted_deep_tool_call_restores(tmp_path: Path, case: BackendCase) -> None:
    """Restore folded the pending facts from the redacted row's skeleton, which names no call,
    and refused the result answering it ("tool_use 'toolu_1' is not pending"): the backup of a
    file that verifies could not be restored."""
    lines = redacted_deep_call(tmp_path)
    export = tmp_path / "t.jsonl"
    export.write_text("".join(dump_lines(lines)), encoding="utf-8")
    with Store(tmp_path / "deep.db") as source:
        expected = views(source)
    with open_store(case, tmp_path) as restored:
        import_events(restored, export)
        report = restored.verify()
        assert (report.events, report.redacted) == (len(lines) - 5, 1)  # the format, 3 stream and end lines
        assert list(export_all(restored)) == lines
        assert views(restored) == expected
        # Each thread goes on where the source's did: the call is answered in both.
        restored.append_message("f", "assistant", "found too")
        with pytest.raises(InvalidEvent, match="'toolu_1' is not pending"):
            restored.append_message("t", "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "again"}])
        restored.verify()


def _restored_into_a_new_file(tmp_path: Path, name: str, lines: list[dict[str, Any]]) -> tuple[Path, Any]:
    """`lines` written as the export `name`, and `threadlog import events` of it into a new
    file, which a refused restore leaves exactly as it was: the export's path, and the result."""
    export = tmp_path / name
    export.write_text("".join(dump_lines(lines)), encoding="utf-8")
    db = tmp_path / "b.db"
    Store(db).close()
    before = fingerprint(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "events", str(export)])
    assert fingerprint(db) == before, result.output
    return export, result


@pytest.mark.parametrize("cut", ["no-end-line", "end-line-recounted"])
def test_an_export_cut_between_a_redacted_deep_call_and_its_redaction_restores_nothing(tmp_path: Path, cut: str) -> None:
    """The events up to the redacted row, without the `event.redacted` that says what was
    pending after it: refused whole, saying why, and the database is as it was."""
    lines = redacted_deep_call(tmp_path)
    redaction = next(n for n, line in enumerate(lines) if line.get("event", {}).get("type") == "event.redacted")
    kept = lines[:redaction]
    if cut == "end-line-recounted":
        kept.append({"end": {"streams": sum("stream" in line for line in kept), "events": sum("event" in line for line in kept)}})
    export, result = _restored_into_a_new_file(tmp_path, "cut.jsonl", kept)
    print(f"\n{result.output}")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    says = ("the export stops here, before its end line: it was cut short" if cut == "no-end-line" else
            "is redacted by an event.redacted outside this export")
    assert result.stderr.startswith(f"error: {export}: line ") and says in result.stderr, result.stderr


def test_a_call_a_forged_skeleton_drops_is_still_refused_by_its_line(tmp_path: Path) -> None:
    """A redacted row whose skeleton names no call puts its thread's facts in doubt until its
    redaction is read; a result that answers no call is still refused then, by its line, and
    nothing is restored."""
    with Store(tmp_path / "a.db") as a:
        t = a.create_thread()
        call = a.append_message(t, "assistant", [tool_use("toolu_1", {"k": 1})])
        a.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"}])
        a.redact(call.position, reason="pii", actor="ops")
        lines = list(export_all(a))
    number = next(n for n, line in enumerate(lines, 1) if "tool_result" in str(line.get("event", {}).get("data")))
    redacted = next(line["event"] for line in lines if line.get("event", {}).get("redacted"))
    redacted["data"] = {"role": "assistant", "content": [{"type": "text", "text": "[redacted]"}], "redacted": True}
    bad, result = _restored_into_a_new_file(tmp_path, "bad.jsonl", lines)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {bad}: line {number}.event.data.content: tool_use 'toolu_1' is not pending"), \
        result.stderr

