"""The audit promise: a redaction leaves no copy, verify binds every stored byte that
matters, checkpoints pin the whole log, hashes are injective and tagged, ids are printable,
and an event id names one event only."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import StaleSnapshot
from eventstore.integrity import HASH_TAG, chain_hash, digest, legacy_chain_hash
from projections.state import PROJECTION, VERSION, fold_state
from tests import stored
from threadlog import IntegrityError, InvalidEvent, Store, thread_state
from threadlog.cli import cli
from tests.backends import dump

THREADLOG = str(Path(sys.executable).parent / "threadlog")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- 1. a snapshot folded before a redaction is never stored after it -------------------------


def test_a_snapshot_folded_before_a_redaction_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    s1, s2 = Store(db), Store(db)
    t = s1.create_thread(title="t")
    s1.append_message(t, "user", "hi")
    e = s1.append(t, [{"type": "title.set", "data": {"title": "SECRET"}}])[0]
    _, fold, at = fold_state(s1, t)
    s2.redact(e.position, reason="pii", actor="ops")
    with pytest.raises(StaleSnapshot, match=f"position {e.position}"):
        s1.save_snapshot(PROJECTION, VERSION, t, at, fold.dump())
    assert thread_state(s1, t).title == "t"
    # The same with the mark the fold started from: a redaction after it refuses too ...
    mark = s1.last_position()
    _, fold, at = fold_state(s1, t)
    leak = s1.append_message(t, "user", "my pin is 1234")
    _, fold, at = fold_state(s1, t)
    s2.redact(leak.position, reason="pin", actor="ops")
    with pytest.raises(StaleSnapshot):
        s1.save_snapshot(PROJECTION, VERSION, t, at, fold.dump(), as_of=mark)
    # ... while a fold that began after every redaction is stored and served.
    mark = s1.last_position()
    _, fold, at = fold_state(s1, t)
    s1.save_snapshot(PROJECTION, VERSION, t, at, fold.dump(), as_of=mark)
    assert s1.nearest_snapshot(PROJECTION, VERSION, t, at) is not None
    assert "1234" not in str(thread_state(s1, t).messages) and "SECRET" not in str(thread_state(s1, t).title)
    s1.close()
    s2.close()


def test_a_snapshot_of_non_json_state_is_refused(store: Store) -> None:
    t = store.create_thread()
    store.append_message(t, "user", "hi")
    before = dump(store)
    for state in ({"x": math.nan}, {"x": math.inf}, {"x": object()}, {"x": {1, 2}}):
        with pytest.raises(InvalidEvent, match="state"):
            store.save_snapshot(PROJECTION, VERSION, t, 2, state)
    assert dump(store) == before


# -- 2. no copy of a redacted payload anywhere in the files -----------------------------------

HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    from threadlog import Store
    store = Store(sys.argv[1])
    list(store.read_all())        # a connection that has read, then sits idle
    if sys.argv[2] == "reading":  # another program (say the sqlite3 shell) mid-read
        conn = sqlite3.connect(sys.argv[1], isolation_level=None)
        conn.execute("BEGIN")
        conn.execute("SELECT count(*) FROM events").fetchone()
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def files_holding(db: Path, token: bytes) -> list[str]:
    return [p.name for p in sorted(db.parent.iterdir()) if p.name.startswith(db.name) and token in p.read_bytes()]


@pytest.mark.parametrize("padding", [0, 20_000], ids=["in-page", "overflow-pages"])
@pytest.mark.parametrize("checkpointed", [True, False], ids=["payload-in-db-file", "payload-in-wal"])
def test_redact_leaves_the_payload_in_no_file(tmp_path: Path, checkpointed: bool, padding: int) -> None:
    db = tmp_path / "t.db"
    token = b"TOKEN-7c1d2e9f-secret"
    store = Store(db)
    t = store.create_thread(title="audit")
    store.append_message(t, "user", "before")
    leak = store.append_message(t, "user", f"{'p' * padding} the key is {token.decode()} ok {'q' * padding}")
    store.append_message(t, "assistant", "noted")
    thread_state(store, t)
    from projections import save_snapshot

    save_snapshot(store, t)  # a cached state holding the payload
    if checkpointed:
        store.purge()
    assert files_holding(db, token), "the test must start with the token on disk"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), "idle"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        store.redact(leak.position, reason="key", actor="ops")
        assert files_holding(db, token) == []
        assert store.verify().redacted == 1
    finally:
        holder.communicate("\n", timeout=30)
        store.close()
    assert files_holding(db, token) == []


def test_redact_says_when_a_reader_keeps_the_wal_and_purge_finishes_later(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    token = b"TOKEN-a9b8-reader"
    store = Store(db, timeout=0.5)
    t = store.create_thread()
    leak = store.append_message(t, "user", token.decode())
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), "reading"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(Exception) as caught:
            store.redact(leak.position, reason="key", actor="ops")
        assert "purge()" in str(caught.value) and "committed" in str(caught.value)
        assert store.event_at(t, 1).redacted  # the redaction itself is committed
    finally:
        holder.communicate("\n", timeout=30)
    store.purge()
    assert files_holding(db, token) == []
    store.close()


# -- 3. a redacted tool call keeps the history API-valid --------------------------------------


def test_redacting_a_tool_call_and_its_result_keeps_their_pairing(mem: Store) -> None:
    t = mem.create_thread()
    mem.append_message(t, "user", "look it up")
    call = mem.append_message(t, "assistant", [
        {"type": "text", "text": "Searching for secret-x."},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "secret-x"}},
    ])
    result = mem.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "secret-x lives here", "is_error": True}])
    mem.append_message(t, "assistant", "done")
    mem.redact(call.position, reason="pii", actor="ops")
    mem.redact(result.position, reason="pii", actor="ops")
    messages = thread_state(mem, t).messages
    assert "secret-x" not in str(messages)
    assert messages[1].content == [
        {"type": "text", "text": "[redacted]"},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}},
    ]
    assert messages[2].content == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "[redacted]", "is_error": True},
        {"type": "text", "text": "[redacted]"},
    ]
    assert mem.verify().redacted == 2
    mem.fork(t)  # the facts after the redacted pair still say nothing is pending


def test_redacting_runs_and_interrupts_keeps_their_ids(mem: Store) -> None:
    t = mem.create_thread()
    mem.append_message(t, "user", "go")
    started = mem.append(t, [{"type": "run.started", "data": {"run_id": "r1"}}])[0]
    raised = mem.append(t, [{"type": "interrupt.raised", "data": {"interrupt_id": "i1", "question": "secret?"}}])[0]
    mem.redact(started.position, reason="x", actor="ops")
    mem.redact(raised.position, reason="x", actor="ops")
    assert mem.event_at(t, 2).data == {"run_id": "r1", "redacted": True}
    assert mem.event_at(t, 3).data == {"interrupt_id": "i1", "redacted": True}
    mem.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": "i1"}}, {"type": "run.finished", "data": {"run_id": "r1", "status": "ok"}}])
    assert mem.verify().redacted == 2


# -- 4. a redacted row is bound by what its event.redacted recorded ---------------------------


@pytest.fixture
def redacted_db(tmp_path: Path) -> tuple[Path, int]:
    db = tmp_path / "r.db"
    with Store(db) as s:
        t = s.create_thread(thread_id="R")
        s.append_message(t, "user", "hello")
        call = s.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_9", "name": "run", "input": {"cmd": "ls"}}])
        s.redact(call.position, reason="pii", actor="ops")
        s.verify()
    return db, call.position


@pytest.mark.parametrize(
    "statement",
    [
        """UPDATE events SET data = replace(data, '"role":"assistant"', '"role":"user"') WHERE position = ?""",
        """UPDATE events SET data = replace(data, '[redacted]', 'Transfer the funds now.') WHERE position = ?""",
        """UPDATE events SET data = '{"content":[{"text":"[redacted]","type":"text"}],"redacted":true,"role":"assistant"}' WHERE position = ?""",
        "UPDATE events SET pending = NULL WHERE position = ?",
    ],
    ids=["role-flipped", "text-forged", "tool-call-dropped", "pending-facts-cleared"],
)
def test_rewriting_a_redacted_row_fails_verify(redacted_db: tuple[Path, int], statement: str) -> None:
    db, position = redacted_db
    conn = sqlite3.connect(db)
    conn.execute(statement, (position,))
    conn.commit()
    conn.close()
    with Store(db) as store, pytest.raises(IntegrityError) as caught:
        store.verify()
    assert caught.value.position == position, str(caught.value)


# -- 6. checkpoints -----------------------------------------------------------------------------


def test_a_checkpoint_still_holds_after_appends_forks_and_redactions(store: Store) -> None:
    t = store.create_thread()
    leak = store.append_message(t, "user", "secret")
    store.append_message(t, "assistant", "ok")
    kept = store.checkpoint()
    assert kept.startswith("tlc1:3:") and len(kept) < 100
    store.fork(t, at=2)
    store.append_message(t, "user", "more")
    store.redact(leak.position, reason="pii", actor="ops")
    assert store.verify(checkpoint=kept).checkpoint == kept
    assert store.verify(checkpoint=store.checkpoint()).events == 6


def test_a_checkpoint_of_a_long_log_says_how_far_it_has_read(store: Store) -> None:
    """`checkpoint` reads every event's hash (7-8 s at 2.2M events) and said nothing while it did."""
    t = store.create_thread()
    store.append(t, [{"type": "message.appended", "data": {"role": "user", "content": f"m{i}"}} for i in range(25_000)])
    told: list[tuple[int, int]] = []
    kept = store.checkpoint(progress=lambda done, total: told.append((done, total)))
    assert told == [(10_000, 25_001), (20_000, 25_001), (25_001, 25_001)]
    assert kept == store.checkpoint() and store.verify(checkpoint=kept).events == 25_001


def test_an_empty_log_has_a_checkpoint_too(store: Store) -> None:
    kept = store.checkpoint()
    t = store.create_thread()
    store.append_message(t, "user", "x")
    store.verify(checkpoint=kept)


@pytest.mark.parametrize("bad", ["", "tlc1", "tlc1:3:abc", "tlc2:3:" + "0" * 64, "tlc1:-1:" + "0" * 64, "tlc1:3:" + "G" * 64, "x" * 10_000,
                                 "tlc1:\u00b2:" + "0" * 64, "tlc1:\u0663:" + "0" * 64])  # digits to str.isdigit, not to int
def test_a_malformed_checkpoint_is_refused_clearly(file_store: Store, bad: str) -> None:
    with pytest.raises(InvalidEvent, match="checkpoint"):
        file_store.verify(checkpoint=bad)
    result = CliRunner().invoke(cli, ["--db", file_store.path, "verify", "--checkpoint", bad])
    assert result.exit_code == 1 and result.stderr.startswith("error: --checkpoint:") and len(result.stderr) < 400


def test_a_checkpoint_past_the_end_of_the_log_names_what_was_removed(file_store: Store) -> None:
    t = file_store.create_thread()
    file_store.append_message(t, "user", "x")
    with pytest.raises(IntegrityError, match="holds no event after position 2 up to the checkpoint's 9"):
        file_store.verify(checkpoint="tlc1:9:" + "0" * 64)


def test_checkpoint_command_prints_one_line_that_verify_accepts(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", db, "demo"]).exit_code == 0
    kept = runner.invoke(cli, ["--db", db, "checkpoint"]).stdout
    assert kept.count("\n") == 1 and kept.startswith("tlc1:")
    result = runner.invoke(cli, ["--db", db, "verify", "--checkpoint", kept.strip(), "--json"])
    assert result.exit_code == 0 and f'"checkpoint": "{kept.strip()}"' in result.stdout


# -- 7. hashes: injective, tagged, every field covered; ids printable ---------------------------

FIELDS = ["prev", "stream_id", "offset", "event_id", "type_", "schema_version", "recorded_at", "meta", "data_digest"]
BASE = {"prev": HASH_TAG + "a" * 64, "stream_id": "s", "offset": 3, "event_id": "e1", "type_": "message.appended",
        "schema_version": 1, "recorded_at": "2026-01-01T00:00:00.000000Z", "meta": "{}", "data_digest": "d" * 64}


def test_the_hash_is_the_documented_layout() -> None:
    header = "tl2\n" + "".join(f"{len(str(BASE[f]))}:{BASE[f]}" for f in FIELDS)
    assert chain_hash(**BASE) == HASH_TAG + hashlib.sha256(header.encode()).hexdigest()  # type: ignore[arg-type]


@pytest.mark.parametrize("field", FIELDS)
def test_every_header_field_changes_the_hash(field: str) -> None:
    changed = dict(BASE)
    changed[field] = changed[field] + 1 if isinstance(changed[field], int) else str(changed[field]) + "x"
    assert chain_hash(**changed) != chain_hash(**BASE)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=6), min_size=4, max_size=4), st.lists(st.text(max_size=6), min_size=4, max_size=4))
def test_moving_a_boundary_between_fields_changes_the_hash(a: list[str], b: list[str]) -> None:
    """The first layout joined fields with newlines: ("x\\ny", "z") and ("x", "y\\nz") collided."""
    def h(v: list[str]) -> str:
        return chain_hash(v[0], v[1], 0, v[2], v[3], 1, "t", "{}", "d")
    if a != b:
        assert h(a) != h(b)


def test_the_first_layout_was_ambiguous_and_is_still_verified_for_old_events() -> None:
    # Why the layout changed: a newline moved across a field boundary kept the old hash.
    assert legacy_chain_hash("", 1, "a", 0, "b\n0\nc", "t", 1, "r", "{}", "d") == legacy_chain_hash("", 1, "a\n0\nb", 0, "c", "t", 1, "r", "{}", "d")
    assert chain_hash("", "a", 0, "b\n0\nc", "t", 1, "r", "{}", "d") != chain_hash("", "a\n0\nb", 0, "c", "t", 1, "r", "{}", "d")


def test_old_untagged_events_verify_and_new_ones_are_tagged(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    shutil.copy(Path(__file__).parent / "fixtures" / "v1.db", db)
    with Store(db) as store:
        old = list(store.read_all())
        assert old and not any(e.hash.startswith(HASH_TAG) for e in old)
        thread = old[0].stream_id
        store.append_message(thread, "user", "after the upgrade")
        assert store.event_at(thread, store.head(thread) - 1).hash.startswith(HASH_TAG)
        store.verify()


def thread_file(tmp_path: Path, *texts: str) -> Path:
    """A file holding thread R: its creation, then one user message per text."""
    db = tmp_path / "t.db"
    with Store(db) as s:
        t = s.create_thread(thread_id="R")
        for text in texts:
            s.append_message(t, "user", text)
    return db


def test_an_untagged_hash_after_a_tagged_one_is_a_downgrade(tmp_path: Path) -> None:
    db = thread_file(tmp_path, "a", "b")
    conn = sqlite3.connect(db)
    (prev,), = stored.events(conn, ["hash"], "WHERE position = 2")
    row, = stored.events(conn, ["position", "stream_id", "offset", "event_id", "type", "schema_version", "recorded_at", "meta",
                                "data_digest"], "WHERE position = 3")
    forged = legacy_chain_hash(prev, *row)
    conn.execute("UPDATE events SET hash = ? WHERE position = 3", (forged,))
    conn.execute("UPDATE streams SET head_hash = ?", (forged,))
    conn.commit()
    conn.close()
    with Store(db) as store, pytest.raises(IntegrityError, match="untagged") as caught:
        store.verify()
    assert caught.value.position == 3


@pytest.mark.parametrize("bad", ["a\nb", "tab\there", "esc\x1b[31m", "nul\x00", "del\x7f", "c1\x85", "lone\ud800", "", "x" * 201])
def test_ids_with_control_characters_are_refused(file_store: Store, bad: str) -> None:
    t = file_store.create_thread(thread_id="ok")
    file_store.append_message(t, "user", "hi")
    before = sha(Path(file_store.path))
    with pytest.raises(InvalidEvent, match="thread_id"):
        file_store.create_thread(thread_id=bad)
    with pytest.raises(InvalidEvent, match="fork_id"):
        file_store.fork(t, fork_id=bad)
    with pytest.raises(InvalidEvent, match="event_id"):
        file_store.append_message(t, "user", "x", event_id=bad)
    with pytest.raises(InvalidEvent, match="thread"):
        file_store.append(bad, [{"type": "thread.created", "data": {}}], expect="no_stream")
    assert sha(Path(file_store.path)) == before


# -- 13. an event id names one event -------------------------------------------------------------


def test_an_event_id_reused_with_other_content_is_refused(file_store: Store) -> None:
    t = file_store.create_thread()
    first = file_store.append_message(t, "user", "pay 10", event_id="ev-1")
    assert file_store.append_message(t, "user", "pay 10", event_id="ev-1") == first  # a retry
    before = sha(Path(file_store.path))
    for content, extra in (("pay 10000", {}), ("pay 10", {"actor": "mallory"})):
        with pytest.raises(InvalidEvent, match=f"'ev-1' is already stored at position {first.position} with different content"):
            file_store.append_message(t, "user", content, event_id="ev-1", **extra)
    with pytest.raises(InvalidEvent, match="different content"):
        file_store.append(t, [{"type": "title.set", "data": {"title": "x"}, "meta": {"event_id": "ev-1"}}])
    result = CliRunner().invoke(cli, ["--db", file_store.path, "emit", t, "message.appended", "--data",
                                      '{"role": "user", "content": "other"}', "--event-meta", '{"event_id": "ev-1"}'])
    assert result.exit_code == 1 and "different content" in result.stderr
    assert sha(Path(file_store.path)) == before


def test_a_redacted_event_retried_with_its_original_content_is_still_a_retry(mem: Store) -> None:
    t = mem.create_thread()
    first = mem.append_message(t, "user", "secret", event_id="ev-2")
    mem.redact(first.position, reason="pii", actor="ops")
    again = mem.append_message(t, "user", "secret", event_id="ev-2")
    assert again.position == first.position and again.redacted


# -- 14. what the planted bugs showed nothing caught ----------------------------------------------


def test_a_lone_surrogate_in_meta_is_refused(file_store: Store) -> None:
    t = file_store.create_thread()
    before = sha(Path(file_store.path))
    with pytest.raises(InvalidEvent, match="meta|UTF-8"):
        file_store.append(t, [{"type": "title.set", "data": {"title": "x"}, "meta": {"actor": "bad\udc80"}}])
    assert sha(Path(file_store.path)) == before


def test_verify_names_a_gap_even_when_the_later_hashes_are_rechained(tmp_path: Path) -> None:
    db = thread_file(tmp_path, "a", "b", "c", "d")
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM events WHERE position = 3")  # offset 2
    (prev,), = stored.events(conn, ["hash"], "WHERE position = 2")
    rows = stored.events(conn, ["position", "stream_id", "offset", "event_id", "type", "schema_version", "recorded_at", "meta",
                                "data_digest"], "WHERE position > 3 ORDER BY position")
    for position, stream_id, offset, event_id, type_, version, recorded_at, meta, data_digest in rows:
        prev = chain_hash(prev, stream_id, offset, event_id, type_, version, recorded_at, meta, data_digest)
        conn.execute("UPDATE events SET hash = ? WHERE position = ?", (prev, position))
    conn.execute("UPDATE streams SET head_hash = ?", (prev,))
    conn.commit()
    conn.close()
    with Store(db) as store, pytest.raises(IntegrityError, match="expected offset 2") as caught:
        store.verify()
    assert caught.value.position == 4


def test_digest_is_sha256_of_the_utf8_json() -> None:
    assert digest('{"a":"é"}') == hashlib.sha256('{"a":"é"}'.encode()).hexdigest()


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _field(value: object) -> str:
    return f"{len(str(value))}:{value}"  # the length in characters, not UTF-8 bytes


def test_an_export_is_checkable_with_hashlib_and_json_alone(tmp_path: Path) -> None:
    """The README's recipe, followed by someone without threadlog: every hash of a backup with
    a fork, a redaction and text outside ASCII recomputes from the exported lines."""
    db = tmp_path / "t.db"
    with Store(str(db)) as store:
        root = store.create_thread(title="café ☕")
        store.append(root, [{"type": "message.appended", "data": {"role": "user", "content": "naïve — 日本語 𝄞"},
                             "meta": {"actor": "zoë"}},
                            {"type": "message.appended", "data": {"role": "assistant", "content": "ok"}}])
        fork = store.fork(root, 2)
        store.append(fork, [{"type": "message.appended", "data": {"role": "user", "content": "ünïcode"}}])
        store.redact(list(store.read(root))[1].position, "pii", "zoë")
    exported = CliRunner().invoke(cli, ["export", "--all", "--db", str(db)])
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in exported.output.splitlines()]
    parents = {line["stream"]["id"]: line["stream"] for line in lines if "stream" in line}
    events = [line["event"] for line in lines if "event" in line]
    by_place = {(e["stream_id"], e["offset"]): e for e in events}

    def previous(stream: str, offset: int) -> str:
        """The hash the event at `offset` of `stream` chains onto: the one before it in the
        stream, or, for a fork's first own event, the parent's event before the fork point."""
        if offset == 0:
            return ""
        if (stream, offset - 1) in by_place:
            return str(by_place[(stream, offset - 1)]["hash"])
        return previous(parents[stream]["parent_id"], offset)

    checked = redacted = 0
    for event in events:
        if event["redacted"]:
            redacted += 1  # its payload is erased; its digest is the erased payload's
        else:
            assert hashlib.sha256(_canonical(event["data"]).encode()).hexdigest() == event["data_digest"]
        fields = (previous(event["stream_id"], event["offset"]), event["stream_id"], event["offset"], event["event_id"],
                  event["type"], event["schema_version"], event["recorded_at"], _canonical(event["meta"]), event["data_digest"])
        header = "tl2\n" + "".join(_field(value) for value in fields)
        assert HASH_TAG + hashlib.sha256(header.encode("utf-8")).hexdigest() == event["hash"], event
        checked += 1
    assert (checked, redacted) == (len(events), 1) and len(events) == 6  # 3 + the redaction; the fork point and 1
