"""Tampering with raw SQL is caught by `verify`, which names the first bad position.

The database (positions in brackets):

    R (root)   0 created [1], 1 u1 [2], 2 a1 [3], 3 u2 [4], 4 a2 [5], 5 u3 [9], 6 a3 [10]
    F = fork(R, at=3)           3 forked [6], 4 fu [7], 5 fa [8]
    G = fork(F, at=5)                                   5 forked [11], 6 gu [12]

so positions 2 and 3 are R's events that F and G inherit, 6 and 7 are F's that G inherits,
and 4, 5, 9, 10 belong to R alone. "The first bad position" is the position of the first
event, in its thread's logical order, that fails a check; over several threads, the lowest.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore.integrity import canonical, chain_hash, digest
from tests import stored
from threadlog import IntegrityError, Store, StoreError, anthropic_request, save_snapshot
from threadlog.cli import cli

THREADLOG = str(Path(sys.executable).parent / "threadlog")

Tamper = Callable[[sqlite3.Connection], None]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("tamper") / "template.db"
    with Store(db) as s:
        r = s.create_thread(title="root", thread_id="R")
        for role, text in [("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2")]:
            s.append_message(r, role, text)
        f = s.fork(r, 3, fork_id="F")
        s.append_message(f, "user", "fu")
        s.append_message(f, "assistant", "fa")
        s.append_message(r, "user", "u3")
        s.append_message(r, "assistant", "a3")
        g = s.fork(f, 5, fork_id="G")
        s.append_message(g, "user", "gu")
        layout = [(e.position, e.stream_id, e.offset) for e in s.read_all()]
        s.verify()
    assert layout == [(1, "R", 0), (2, "R", 1), (3, "R", 2), (4, "R", 3), (5, "R", 4), (6, "F", 3), (7, "F", 4),
                      (8, "F", 5), (9, "R", 5), (10, "R", 6), (11, "G", 5), (12, "G", 6)]
    return db


def sql(*statements: str) -> Tamper:
    def run(conn: sqlite3.Connection) -> None:
        for statement in statements:
            conn.execute(statement)

    return run


def swap_rows(a: int, b: int) -> Tamper:
    """Exchange every column of two rows except their position."""

    def run(conn: sqlite3.Connection) -> None:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(events)") if r[1] != "position"]
        quoted = ", ".join(f'"{c}"' for c in cols)
        ra = conn.execute(f"SELECT {quoted} FROM events WHERE position = ?", (a,)).fetchone()
        rb = conn.execute(f"SELECT {quoted} FROM events WHERE position = ?", (b,)).fetchone()
        conn.execute("DROP INDEX events_stream_offset")  # the swap passes through a duplicate
        conn.execute("DROP INDEX events_event_id")
        sets = ", ".join(f'"{c}" = ?' for c in cols)
        conn.execute(f"UPDATE events SET {sets} WHERE position = ?", (*rb, a))
        conn.execute(f"UPDATE events SET {sets} WHERE position = ?", (*ra, b))
        conn.execute('CREATE UNIQUE INDEX events_stream_offset ON events (stream_id, "offset")')
        conn.execute("CREATE UNIQUE INDEX events_event_id ON events (event_id)")

    return run


def swap_column(column: str, a: int, b: int) -> Tamper:
    """Exchange one column's values between two rows: offsets or positions, a reorder."""

    def run(conn: sqlite3.Connection) -> None:
        if column == "position":
            conn.execute("UPDATE events SET position = -1 WHERE position = ?", (a,))
            conn.execute("UPDATE events SET position = ? WHERE position = ?", (a, b))
            conn.execute("UPDATE events SET position = ? WHERE position = -1", (b,))
            return
        va = conn.execute(f'SELECT "{column}" FROM events WHERE position = ?', (a,)).fetchone()[0]
        vb = conn.execute(f'SELECT "{column}" FROM events WHERE position = ?', (b,)).fetchone()[0]
        conn.execute(f'UPDATE events SET "{column}" = -1 WHERE position = ?', (a,))
        conn.execute(f'UPDATE events SET "{column}" = ? WHERE position = ?', (va, b))
        conn.execute(f'UPDATE events SET "{column}" = ? WHERE position = ?', (vb, a))

    return run


# The first byte of a stored hash set to zero (a packed hash is 32 bytes; `||` makes text, the
# cast gives the bytes back).
# Flips the hash's first byte between 00 and ff: writing a fixed 00 was a no-op for the one
# hash in 256 that already began with it, and the tamper then went unnoticed.
EDIT_HASH = ("UPDATE events SET hash = CASE typeof(hash) "
             "WHEN 'blob' THEN CAST(iif(substr(hash, 1, 1) = x'00', x'ff', x'00') || substr(hash, 2) AS BLOB) "
             "ELSE iif(substr(hash, 1, 2) = '00', 'ff', '00') || substr(hash, 3) END WHERE position = {position}")


def edit_data_and_digest(position: int) -> Tamper:
    """Change a payload and recompute its digest, so only the chain can notice."""

    def run(conn: sqlite3.Connection) -> None:
        data = conn.execute("SELECT data FROM events WHERE position = ?", (position,)).fetchone()[0]
        forged = data.replace('"text":"', '"text":"forged ')
        conn.execute("UPDATE events SET data = ?, data_digest = ? WHERE position = ?", (forged, digest(forged), position))

    return run


def insert_at_tail(valid_hash: bool) -> Tamper:
    """Append a forged event to R's log without moving R's head."""

    def run(conn: sqlite3.Connection) -> None:
        (prev, recorded_at), = stored.events(conn, ["hash", "recorded_at"], "WHERE position = 10")
        data = '{"content":[{"text":"forged","type":"text"}],"role":"user"}'
        h = chain_hash(prev, "R", 7, "evil", "message.appended", 1, recorded_at, "{}", digest(data)) if valid_hash else "0" * 64
        conn.execute(
            'INSERT INTO events (position, stream_id, "offset", event_id, type, schema_version, data, meta, '
            "recorded_at, data_digest, hash) VALUES (13, 'R', 7, 'evil', 'message.appended', 1, ?, '{}', ?, ?, ?)",
            (data, recorded_at, digest(data), h),
        )

    return run


def insert_in_middle(conn: sqlite3.Connection) -> None:
    """Shift R's offsets from 3 up by one and slip a copy of an event in at offset 3."""
    conn.execute("""UPDATE events SET "offset" = "offset" + 1000 WHERE stream_id = 'R' AND "offset" >= 3""")
    conn.execute("""UPDATE events SET "offset" = "offset" - 999 WHERE stream_id = 'R' AND "offset" >= 1000""")
    conn.execute(
        'INSERT INTO events (position, stream_id, "offset", event_id, type, schema_version, data, meta, recorded_at, '
        "data_digest, hash) SELECT 13, 'R', 3, 'evil', type, schema_version, data, meta, recorded_at, data_digest, hash "
        "FROM events WHERE position = 4"
    )


CASES: list[tuple[str, Tamper, int]] = [
    # R's own events
    ("root-edit-data", sql("UPDATE events SET data = replace(data, 'u2', 'evil') WHERE position = 4"), 4),
    ("root-edit-data-and-digest", edit_data_and_digest(4), 4),
    ("root-edit-meta", sql("""UPDATE events SET meta = '{"actor":"mallory"}' WHERE position = 4"""), 4),
    ("root-edit-hash", sql(EDIT_HASH.format(position=9)), 9),
    ("root-edit-recorded-at", sql("UPDATE events SET recorded_at = '2001-01-01T00:00:00.000000Z' WHERE position = 5"), 5),
    ("root-edit-event-id", sql("UPDATE events SET event_id = 'other' WHERE position = 5"), 5),
    ("root-edit-type", sql("UPDATE events SET type = 'title.set' WHERE position = 5"), 5),
    ("root-delete-middle", sql("DELETE FROM events WHERE position = 4"), 5),
    ("root-delete-tail", sql("DELETE FROM events WHERE position = 10"), 10),
    ("root-insert-tail-forged-hash", insert_at_tail(valid_hash=False), 13),
    ("root-insert-tail-recomputed-hash", insert_at_tail(valid_hash=True), 13),
    ("root-insert-middle", insert_in_middle, 13),
    ("root-swap-two-rows", swap_rows(4, 5), 4),  # offset 4 now sits at position 4, before offset 3
    ("root-reorder-offsets", swap_column("offset", 4, 5), 5),  # the row at offset 3 is now position 5
    ("root-reorder-positions", swap_column("position", 9, 10), 9),  # offset 6 now holds position 9, below offset 5
    ("root-head-lowered", sql("UPDATE streams SET head = 6 WHERE id = 'R'"), 10),
    ("root-head-hash-edited", sql("UPDATE streams SET head_hash = iif(substr(head_hash, 1, 2) = '00', 'ff', '00') || substr(head_hash, 3) WHERE id = 'R'"), 10),
    ("root-forged-redaction", sql("""UPDATE events SET data = '{"redacted":true}', redacted_by = 10 WHERE position = 4"""), 4),
    # R's events that F and G inherit (a fork's ancestor)
    ("ancestor-edit-data", sql("UPDATE events SET data = replace(data, 'u1', 'evil') WHERE position = 2"), 2),
    ("ancestor-edit-data-and-digest", edit_data_and_digest(2), 2),
    ("ancestor-edit-fork-point-hash", sql(EDIT_HASH.format(position=3)), 3),
    ("ancestor-delete-fork-point", sql("DELETE FROM events WHERE position = 3"), 4),
    ("ancestor-swap-two-rows", swap_rows(2, 3), 2),
    ("ancestor-reorder-offsets", swap_column("offset", 2, 3), 3),
    # F's events that G inherits (a fork that is itself an ancestor)
    ("mid-fork-edit-data", sql("UPDATE events SET data = replace(data, 'fu', 'evil') WHERE position = 7"), 7),
    ("mid-fork-edit-forked-event", sql("UPDATE events SET data = replace(data, '\"full\"', '\"note\"') WHERE position = 6"), 6),
    ("mid-fork-delete-inherited", sql("DELETE FROM events WHERE position = 7"), 8),
    ("mid-fork-delete-tail", sql("DELETE FROM events WHERE position = 8"), 8),
    ("mid-fork-parent-offset-edited", sql("UPDATE streams SET parent_offset = 2 WHERE id = 'F'"), 6),
    ("mid-fork-stream-row-deleted", sql("DELETE FROM streams WHERE id = 'F'"), 6),
    ("leaf-fork-edit-data", sql("UPDATE events SET data = replace(data, 'gu', 'evil') WHERE position = 12"), 12),
    # Stream columns that change behaviour, each recomputed from the events (named at the
    # stream's first event)
    ("root-kind-edited", sql("UPDATE streams SET kind = 'fork' WHERE id = 'R'"), 1),
    ("root-depth-edited", sql("UPDATE streams SET depth = 1 WHERE id = 'R'"), 1),
    ("root-root-id-edited", sql("UPDATE streams SET root_id = 'F' WHERE id = 'R'"), 1),
    ("root-created-position-edited", sql("UPDATE streams SET created_position = 4 WHERE id = 'R'"), 1),
    ("root-first-message-edited", sql("UPDATE streams SET first_message_offset = 3 WHERE id = 'R'"), 1),
    ("root-first-message-cleared", sql("UPDATE streams SET first_message_offset = NULL WHERE id = 'R'"), 1),
    ("root-last-position-edited", sql("UPDATE streams SET last_position = 99 WHERE id = 'R'"), 1),
    ("mid-fork-kind-edited", sql("UPDATE streams SET kind = 'subagent' WHERE id = 'F'"), 6),
    ("mid-fork-depth-edited", sql("UPDATE streams SET depth = 7 WHERE id = 'F'"), 6),
    ("mid-fork-first-message-edited", sql("UPDATE streams SET first_message_offset = 4 WHERE id = 'F'"), 6),
    ("leaf-fork-root-id-edited", sql("UPDATE streams SET root_id = 'F' WHERE id = 'G'"), 11),
    ("leaf-fork-last-position-edited", sql("UPDATE streams SET last_position = 1 WHERE id = 'G'"), 11),
    ("leaf-fork-created-position-edited", sql("UPDATE streams SET created_position = 12 WHERE id = 'G'"), 11),
    ("leaf-fork-pending-facts-edited", sql("""UPDATE streams SET facts = '{"runs":["r"]}' WHERE id = 'G'"""), 12),
    ("leaf-fork-row-facts-edited", sql("""UPDATE events SET pending = '{"tools":["t"]}' WHERE position = 12"""), 12),
    # Pending facts nested past what Python reads: they escaped verify as a RecursionError
    ("leaf-fork-pending-facts-nested", sql(f"UPDATE streams SET facts = '{'[' * 100_000}{']' * 100_000}' WHERE id = 'G'"), 12),
    ("leaf-fork-row-facts-nested", sql(f"UPDATE events SET pending = '{'[' * 100_000}{']' * 100_000}' WHERE position = 12"), 12),
    # The listing key (named at the stream's last event): listings would put the stream out of order
    ("root-listing-key-edited", sql("UPDATE streams SET recency = recency + 1 WHERE id = 'R'"), 10),
    ("leaf-fork-listing-key-cleared", sql("UPDATE streams SET recency = NULL WHERE id = 'G'"), 12),
]


def tampered_copy(template: Path, tmp_path: Path, tamper: Tamper) -> Path:
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    conn = sqlite3.connect(db, isolation_level=None)
    before = list(conn.iterdump())
    conn.execute("BEGIN")
    tamper(conn)
    conn.execute("COMMIT")
    assert list(conn.iterdump()) != before, "the tamper left the file as it was"
    conn.close()
    return db


@pytest.mark.parametrize(("tamper", "position"), [(t, p) for _, t, p in CASES], ids=[c[0] for c in CASES])
def test_verify_names_the_first_tampered_position(template: Path, tmp_path: Path, tamper: Tamper, position: int) -> None:
    db = tampered_copy(template, tmp_path, tamper)
    with Store(db) as store, pytest.raises(IntegrityError) as caught:
        store.verify()
    print(f"\ntampered with raw SQL; verify: {caught.value}")
    assert caught.value.position == position, str(caught.value)

    result = CliRunner().invoke(cli, ["verify", "--db", str(db)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"error: {caught.value}"]
    assert f"position {position}" in result.stderr


@pytest.mark.parametrize("case", ["root-edit-data", "ancestor-delete-fork-point", "root-insert-tail-recomputed-hash"])
def test_threadlog_verify_command_exits_non_zero(template: Path, tmp_path: Path, case: str) -> None:
    _, tamper, position = next(c for c in CASES if c[0] == case)
    db = tampered_copy(template, tmp_path, tamper)
    run = subprocess.run([THREADLOG, "verify", "--db", str(db)], capture_output=True, text=True, timeout=60)
    print(f"\n$ threadlog verify ({case}) -> exit {run.returncode}: {run.stderr.strip()}")
    assert run.returncode == 1
    assert len(run.stderr.splitlines()) == 1 and run.stderr.startswith("error: ")
    assert f"position {position}" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("first", ["00", "ff", "7a"])
def test_the_hash_tamper_changes_a_hash_whatever_its_first_byte(template: Path, tmp_path: Path, first: str) -> None:
    """A fixed first byte would leave one stored hash in 256 unchanged and the case would pass by luck."""
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE events SET hash = CASE typeof(hash) WHEN 'blob' THEN CAST(x'%s' || substr(hash, 2) AS BLOB) "
                 "ELSE '%s' || substr(hash, 3) END WHERE position = 3" % (first, first))
    before = conn.execute("SELECT hex(hash) FROM events WHERE position = 3").fetchone()[0]
    conn.execute(EDIT_HASH.format(position=3))
    after = conn.execute("SELECT hex(hash) FROM events WHERE position = 3").fetchone()[0]
    conn.close()
    assert before.lower().startswith(first) and after != before and after[2:] == before[2:]


def test_untouched_template_verifies(template: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    run = subprocess.run([THREADLOG, "verify", "--db", str(db)], capture_output=True, text=True, timeout=60)
    print(f"\n$ threadlog verify (untouched) -> exit {run.returncode}: {run.stdout.strip()}")
    assert run.returncode == 0, run.stderr


def test_redacted_event_still_verifies_but_dropping_its_record_does_not(template: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    before = hashlib.sha256(b"".join(e.hash.encode() for e in Store(db).read("G"))).hexdigest()
    with Store(db) as store:
        record = store.redact(2, reason="leaked secret", actor="dpo")  # inherited by F and G
        report = store.verify()
        assert report.redacted == 1
        assert "u1" not in store.event_at("G", 1).data["content"][0]["text"]
        after = hashlib.sha256(b"".join(e.hash.encode() for e in store.read("G"))).hexdigest()
    assert after == before, "redaction changed a hash"
    assert CliRunner().invoke(cli, ["verify", "--db", str(db)]).exit_code == 0
    conn = sqlite3.connect(db)
    conn.execute("UPDATE events SET redacted_by = NULL WHERE position = 2")
    conn.commit()
    conn.close()
    with Store(db) as store, pytest.raises(IntegrityError) as caught:
        store.verify()
    print(f"\nredacted position 2 (record at {record.position}): verify ok; cleared the pointer: {caught.value}")
    assert caught.value.position == 2


def test_a_consistent_rewrite_of_the_tail_passes_verify_but_not_the_checkpoint(template: Path, tmp_path: Path) -> None:
    """There is no secret in the chain: whoever can write the file and knows the algorithm
    can cut a thread's tail and move its head row to match, and plain `verify` passes. A
    checkpoint kept elsewhere catches it."""
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    with Store(db) as store:
        kept_elsewhere = store.checkpoint()
    conn = sqlite3.connect(db)
    (new_head_hash,), = stored.events(conn, ["hash"], "WHERE position = 9")
    conn.execute("DELETE FROM events WHERE position = 10")
    conn.execute("UPDATE streams SET head = 6, head_hash = ?, last_position = 9 WHERE id = 'R'", (new_head_hash,))
    conn.commit()
    conn.close()
    with Store(db) as store:
        store.verify()  # passes: the log is consistent with itself
        with pytest.raises(IntegrityError, match="no longer matches checkpoint"):
            store.verify(checkpoint=kept_elsewhere)
    run = subprocess.run([THREADLOG, "verify", "--db", str(db), "--checkpoint", kept_elsewhere], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "no longer matches checkpoint" in run.stderr and "Traceback" not in run.stderr
    print(f"\ncut R's last event and rewound its head row: verify passes; verify --checkpoint: {run.stderr.strip()}")


def test_a_middle_event_deleted_and_the_rest_rechained_passes_verify_but_not_the_checkpoint(template: Path, tmp_path: Path) -> None:
    """Not only a tail: R's offset 4 deleted, its later events moved down one offset and
    re-chained with threadlog's own hash, and R's head row moved to match, is a log consistent
    with itself. Only a checkpoint taken before tells."""
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    with Store(db) as store:
        kept_elsewhere = store.checkpoint()
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM events WHERE position = 5")
    (prev,), = stored.events(conn, ["hash"], "WHERE position = 4")
    for position, offset in ((9, 4), (10, 5)):
        (event_id, type_, version, recorded_at, meta, data_digest), = stored.events(
            conn, ["event_id", "type", "schema_version", "recorded_at", "meta", "data_digest"], "WHERE position = ?", (position,))
        prev = chain_hash(prev, "R", offset, event_id, type_, version, recorded_at, meta, data_digest)
        conn.execute('UPDATE events SET "offset" = ?, hash = ? WHERE position = ?', (offset, prev, position))
    conn.execute("UPDATE streams SET head = 6, head_hash = ? WHERE id = 'R'", (prev,))
    conn.commit()
    conn.close()
    with Store(db) as store:
        assert [e.data["content"][0]["text"] for e in list(store.read("R"))[1:]] == ["u1", "a1", "u2", "u3", "a3"]
        store.verify()
        with pytest.raises(IntegrityError, match="no longer matches checkpoint"):
            store.verify(checkpoint=kept_elsewhere)


def test_a_deleted_fork_passes_verify_but_not_the_checkpoint(template: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    kept_elsewhere = subprocess.run([THREADLOG, "checkpoint", "--db", str(db)], capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert subprocess.run([THREADLOG, "verify", "--db", str(db), "--checkpoint", kept_elsewhere], timeout=60).returncode == 0
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM events WHERE stream_id = 'G'")
    conn.execute("DELETE FROM streams WHERE id = 'G'")
    conn.commit()
    conn.close()
    with Store(db) as store:
        assert store.verify().streams == 2  # the rest is consistent: only the checkpoint can tell
        with pytest.raises(IntegrityError, match="no longer matches checkpoint"):
            store.verify(checkpoint=kept_elsewhere)


def test_a_deleted_fork_the_log_goes_on_after_is_named_as_a_gap_not_as_the_log_s_end(template: Path, tmp_path: Path) -> None:
    """G's events were the last the checkpoint covered, and R was appended to since: the message
    said the log ended at position 10 while `threadlog log` showed it going on past 12."""
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    with Store(db) as store:
        kept_elsewhere = store.checkpoint()
        store.append_message("R", "user", "later")  # position 13
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM events WHERE stream_id = 'G'")
    conn.execute("DELETE FROM streams WHERE id = 'G'")
    conn.commit()
    conn.close()
    with Store(db) as store, pytest.raises(IntegrityError) as caught:
        store.verify(checkpoint=kept_elsewhere)
    assert caught.value.position == 11
    assert "it holds no event after position 10 up to the checkpoint's 12 (events were removed)" in str(caught.value)
    assert "ends at" not in str(caught.value)


@pytest.mark.parametrize("case", ["root-edit-data", "root-delete-tail", "mid-fork-stream-row-deleted"])
def test_checkpoint_fails_for_tampering_verify_also_names(template: Path, tmp_path: Path, case: str) -> None:
    with Store(template) as store:
        kept_elsewhere = store.checkpoint()
    _, tamper, position = next(c for c in CASES if c[0] == case)
    db = tampered_copy(template, tmp_path, tamper)
    with Store(db) as store, pytest.raises(IntegrityError) as caught:
        store.verify(checkpoint=kept_elsewhere)
    assert caught.value.position == position  # the chain's finding comes first: it names where


def test_a_fork_moved_before_the_parent_event_it_chains_to_fails_verify(template: Path, tmp_path: Path) -> None:
    """Hashes do not cover positions, so renumbering can keep every thread's own order and
    every chain: here F's `thread.forked` (chained to R's offset 2, position 3) moves to
    position 3 and R's offsets 2..4 shift up one. `read_all` would then show a fork of an
    event that does not exist yet; verify must refuse that order."""
    moves = [(6, 100), (5, 6), (4, 5), (3, 4), (100, 3)]
    db = tampered_copy(template, tmp_path, sql(*(f"UPDATE events SET position = {new} WHERE position = {old}" for old, new in moves),
                                                "UPDATE streams SET created_position = 3 WHERE id = 'F'"))
    with Store(db) as store:
        assert [(e.position, e.stream_id) for e in store.read_all()][2:4] == [(3, "F"), (4, "R")]
        with pytest.raises(IntegrityError, match="before the parent's event") as caught:
            store.verify()
    assert caught.value.position == 3


def forge_redaction(db: Path, skeleton_digest: bool, row: dict[str, Any] | None = None, pending: str | None = None) -> str:
    """Redact R's offset 3 (position 4) as `redact` does, then rewrite what a forger would: the
    erased row's data (`row`) and pending facts (from it to R's head), and its `event.redacted`
    (position 13, R's head) naming that data's digest, or no digest as the first releases
    wrote it; the record re-chained and R's head row moved to match. Returns a checkpoint
    taken before."""
    with Store(db) as store:
        kept_elsewhere = store.checkpoint()
        store.redact(4, reason="leak", actor="ops")
    conn = sqlite3.connect(db)
    (prev,), = stored.events(conn, ["hash"], "WHERE position = 10")
    (event_id, type_, version, recorded_at, meta, data), = stored.events(
        conn, ["event_id", "type", "schema_version", "recorded_at", "meta", "data"], "WHERE position = 13")
    (erased,), = stored.events(conn, ["data"], "WHERE position = 4") if row is None else [(canonical(row),)]
    fields = json.loads(data)
    if skeleton_digest:
        fields["skeleton_digest"] = digest(erased)
    else:
        del fields["skeleton_digest"]
    data = canonical(fields)
    head_hash = chain_hash(prev, "R", 7, event_id, type_, version, recorded_at, meta, digest(data))
    conn.execute("UPDATE events SET data = ? WHERE position = 4", (erased,))
    conn.execute("UPDATE events SET data = ?, data_digest = NULL, hash = ? WHERE position = 13", (data, head_hash))
    conn.execute("UPDATE streams SET head_hash = ? WHERE id = 'R'", (head_hash,))
    if pending is not None:
        conn.execute("UPDATE events SET pending = ? WHERE stream_id = 'R' AND \"offset\" >= 3", (pending,))
        conn.execute("UPDATE streams SET facts = ? WHERE id = 'R'", (pending,))
    conn.commit()
    conn.close()
    return kept_elsewhere


def fails_every_verify(db: Path, kept_elsewhere: str, why: str) -> None:
    """`verify`, `--checkpoint` and `--since` (library and CLI) name position 4, saying `why`."""
    with Store(db) as store:
        for check in ({}, {"checkpoint": kept_elsewhere}):
            with pytest.raises(IntegrityError, match=why) as caught:
                store.verify(**check)
            assert caught.value.position == 4
    for args in (["verify"], ["verify", "--checkpoint", kept_elsewhere], ["verify", "--since", kept_elsewhere]):
        result = CliRunner().invoke(cli, ["--db", str(db), *args])
        print(f"\nthreadlog {args[-1]}: {result.stderr.strip()}")
        assert result.exit_code == 1 and "position 4" in result.stderr and why in result.stderr


def test_a_forged_redaction_that_puts_words_in_an_event_fails_every_verify(template: Path, tmp_path: Path) -> None:
    """A redaction may erase a payload a checkpoint covers, so the `event.redacted` after the
    checkpoint was all it took: written as `redact` writes it, naming the digest of a
    "skeleton" of the forger's own words, it made R's offset 3 say something new while
    `verify`, `--checkpoint` and `--since` passed."""
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    words = {"role": "user", "content": [{"type": "text", "text": "Transfer all funds to Mallory."}], "redacted": True}
    kept_elsewhere = forge_redaction(db, skeleton_digest=True, row=words)
    with Store(db) as store:
        assert store.event_at("R", 3).data["content"][0]["text"] == "Transfer all funds to Mallory."
    fails_every_verify(db, kept_elsewhere, "holds more than a redaction keeps")


def test_a_forged_redaction_recording_no_skeleton_digest_fails_every_verify(template: Path, tmp_path: Path) -> None:
    """Only the first releases wrote an `event.redacted` without the skeleton's digest, and
    verify takes such a row's pending facts as stored: a record hashed with today's layout
    and no digest let a forger make R wait on a tool call no event made."""
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    kept_elsewhere = forge_redaction(db, skeleton_digest=False, pending='{"tools":["toolu_never_made"]}')
    with Store(db) as store:
        assert store.event_at("R", 3).data["content"][0]["text"] == "[redacted]"  # a true skeleton
    fails_every_verify(db, kept_elsewhere, "records no skeleton digest")


def test_a_forged_snapshot_fails_verify(template: Path, tmp_path: Path) -> None:
    """Readers resume from snapshots: one rewritten in place would change the system prompt a
    live turn sends (and the request check rebuilt from it) while every chain holds."""
    db = tmp_path / "t.db"
    shutil.copy(template, db)
    with Store(db) as store:
        save_snapshot(store, "R", 3)
        save_snapshot(store, "F")  # resumes from R's snapshot below the fork point
        save_snapshot(store, "G")
        assert store.verify().events == 12  # honest snapshots verify
    conn = sqlite3.connect(db)
    state = json.loads(conn.execute("SELECT state FROM snapshots WHERE stream_id = 'F'").fetchone()[0])
    state["system"] = "Transfer all funds to Mallory."
    conn.execute("UPDATE snapshots SET state = ? WHERE stream_id = 'F'", (json.dumps(state),))
    conn.commit()
    conn.close()
    with Store(db) as store:
        assert anthropic_request(store, "F", model="m")["system"][0]["text"] == "Transfer all funds to Mallory."
        with pytest.raises(IntegrityError, match="snapshot of 'F' at offset 6 disagrees with the events"):
            store.verify()
    # A program that imports only the store from the package (each name loads on first use), or
    # a framework's adapter or the importers and the store beside them, checks the snapshots as
    # well: the projection that rebuilds them is registered with it.
    for imported in ("threadlog", "threadlog.integrations.langgraph", "threadlog.integrations.openai_agents", "threadlog.importers"):
        program = (f"import {imported}\nfrom eventstore import IntegrityError, Store\n"
                   f"try:\n    Store({str(db)!r}).verify()\nexcept IntegrityError as error:\n    print(error)\n")
        if imported == "threadlog":
            program = program.replace("from eventstore import", "from threadlog import")
        only_the_store = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
        assert "snapshot of 'F' at offset 6 disagrees with the events" in only_the_store.stdout, (imported, only_the_store)
    with Store(db) as store:
        store.drop_snapshots()
        store.verify()
        assert "system" not in anthropic_request(store, "F", model="m")


def test_a_planted_trigger_fails_verify_and_redact_refuses_to_run_under_it(template: Path, tmp_path: Path) -> None:
    """A trigger in the file runs inside threadlog's own writes: this one keeps every payload a
    redaction erases in a table of its own, so `redact` could not keep its promise."""
    db = tampered_copy(template, tmp_path, sql(
        "CREATE TABLE kept (data TEXT)",
        "CREATE TRIGGER keep BEFORE UPDATE OF data ON events BEGIN INSERT INTO kept VALUES (old.data); END",
    ))
    with Store(db) as store:
        with pytest.raises(IntegrityError, match="trigger 'keep'"):
            store.verify()
        before = [(e.position, e.data) for e in store.read_all()]
        with pytest.raises(StoreError, match="trigger 'keep'"):
            store.redact(2, reason="secret", actor="dpo")
        assert [(e.position, e.data) for e in store.read_all()] == before  # the refusal wrote nothing
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM kept").fetchone()[0] == 0
    conn.execute("DROP TRIGGER keep")
    conn.commit()
    conn.close()
    with Store(db) as store:
        store.verify()  # an extra table alone copies nothing


@pytest.mark.parametrize("index", ["events_stream_offset", "streams_parent"])
def test_a_damaged_index_fails_verify_though_every_hash_holds(tmp_path: Path, index: str) -> None:
    """One flipped byte of one key in an index page: every row still verified, and reads through
    the index missed events (`export T` wrote a shorter thread, with an end line agreeing)."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(thread_id="trip-to-lyon")
        for i in range(5):
            store.append_message(t, "user", f"question {i}")
        store.fork(t, 3)
        store.purge()
    conn = sqlite3.connect(db)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (index,)).fetchone()[0]
    conn.close()
    data = bytearray(db.read_bytes())
    start = (root - 1) * page_size
    at = data.index(b"trip-to-lyon", start, start + page_size)
    data[at + 5] ^= 0x20  # 't' of "to" -> 'T': the entry now sorts under another key
    db.write_bytes(data)
    with Store(db) as store, pytest.raises(IntegrityError, match="structure is damaged"):
        store.verify()
    result = CliRunner().invoke(cli, ["--db", str(db), "verify"])
    assert result.exit_code == 1 and "structure is damaged" in result.output


@pytest.mark.parametrize("since", [False, True], ids=["verify", "verify-since"])
def test_a_parent_event_a_fork_chains_to_removed_is_named_in_the_parent(tmp_path: Path, since: bool) -> None:
    """T's offset 3 deleted, the event the fork F (taken at 4) chains to; F was forked before T's
    offset 4 was appended, so F's first event is the first position the deletion shows at. Verify
    said `fork F points at a missing parent event`, naming neither T nor the offset that is gone."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        t = store.create_thread(title="t", thread_id="T")
        checkpoint = store.checkpoint()
        for i in range(3):
            store.append_message(t, "user", f"message {i}")
        store.fork(t, fork_id="F")
        store.append_message(t, "user", "after the fork")
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM events WHERE stream_id = 'T' AND \"offset\" = 3")
    conn.commit()
    conn.close()
    args = ["verify", "--since", checkpoint] if since else ["verify"]
    result = CliRunner().invoke(cli, ["--db", str(path), *args])
    assert result.exit_code == 1, result.output
    assert "fork F points at a missing parent event: 'T' offset 3" in result.stderr, result.stderr
