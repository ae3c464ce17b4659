"""A stored value of the wrong kind, written with raw SQL into the compact layout (schema 5),
must be reported by `verify` as an `IntegrityError` naming where, as an altered value is.

Schema 5 stores some columns as integers or blobs (packed types, times, ids, hashes), so a
hand edit can now leave a value of a kind the decoding does not expect: `verify` then raised
`TypeError`, `AttributeError` or `JSONDecodeError` (a traceback from `threadlog verify`, and
the viewer's badge thread died with it). Now each is a problem of the event (or the stream
row) that holds it, named by position like any other.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from eventstore.packing import TYPE_CODES
from tests.backends import postgres_url
from tests.test_verify_agreement import only
from eventstore.errors import StaleSnapshot
from threadlog import IntegrityError, Store
from threadlog.cli import cli

TAMPERS = {  # the tamper, and the position verify must name
    "data-stored-as-blob": ("UPDATE events SET data = CAST(data AS BLOB) WHERE position = 2", 2),
    "unknown-type-code": ("UPDATE events SET type = 99 WHERE position = 2", 2),
    "facts-not-json": ("UPDATE streams SET facts = '{' WHERE id = 't'", 3),  # the stream's last event
    # Text that is not UTF-8: the driver refuses to read the row at all.
    "data-not-utf8": ("UPDATE events SET data = CAST(X'7b22ff227d' AS TEXT) WHERE position = 2", 2),
    "meta-not-utf8": ("UPDATE events SET meta = CAST(X'7bff7d' AS TEXT) WHERE position = 3", 3),
    "stream-id-not-utf8": ("UPDATE events SET stream_id = CAST(X'74ff' AS TEXT) WHERE position = 2", 2),
    # The stream's created_position, which orders the scan: named at the stream's first event.
    "created-position-null": ("UPDATE streams SET created_position = NULL WHERE id = 't'", 1),
    "created-position-text": ("UPDATE streams SET created_position = 'x' WHERE id = 't'", 1),
    "created-position-real": ("UPDATE streams SET created_position = 1.5 WHERE id = 't'", 1),
    # The stream's own id (SQLite lets a TEXT PRIMARY KEY hold NULL): verify raised TypeError.
    "stream-row-id-null": ("UPDATE streams SET id = NULL WHERE id = 't'", 1),
    "stream-row-id-blob": ("UPDATE streams SET id = CAST(id AS BLOB) WHERE id = 't'", 1),
    "stream-row-id-integer": ("UPDATE streams SET id = 7 WHERE id = 't'", 1),
}


@pytest.mark.parametrize("tamper", list(TAMPERS.values()), ids=list(TAMPERS))
def test_a_value_of_the_wrong_kind_is_an_integrity_error(tmp_path: Path, tamper: tuple[str, int]) -> None:
    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(title="t", thread_id="t")
        store.append_message(thread, "user", "first")
        store.append_message(thread, "assistant", "second")
    conn = sqlite3.connect(path)
    conn.execute(tamper[0])
    conn.commit()
    conn.close()
    with Store(path) as store, pytest.raises(IntegrityError) as failed:
        store.verify()
    assert failed.value.position == tamper[1]
    # Said in the user's words: it named the Python exception that read it
    # ("JSONDecodeError: Expecting property name…", "AttributeError: 'bytes' object…").
    assert not re.search(r"[A-Z][a-z]+(Decode)?Error|object has no attribute", str(failed.value)), str(failed.value)


# Bytes that are not UTF-8 where the text held U+FFFD (the replacement character): a reader
# that decodes them leniently gets the original text back, so the hash still matches, but the
# stored bytes changed and every strict reader (`read`, `range`) now fails on the row.
NOT_UTF8_WHERE_FFFD_WAS = {
    "data": ("UPDATE events SET data = CAST(replace(CAST(data AS BLOB), X'efbfbd', X'ff') AS TEXT) WHERE position = 2", 2),
    "stream-id": ("UPDATE events SET stream_id = CAST(X'74ff' AS TEXT) WHERE position = 3", 3),
}


@pytest.mark.parametrize("tamper", list(NOT_UTF8_WHERE_FFFD_WAS.values()), ids=list(NOT_UTF8_WHERE_FFFD_WAS))
def test_bytes_that_are_not_utf8_fail_verify_even_where_the_text_held_a_replacement_character(
        tmp_path: Path, tamper: tuple[str, int]) -> None:
    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(title="t", thread_id="t\ufffd")
        store.append_message(thread, "user", "caf\ufffd")
        store.append_message(thread, "assistant", "second")
        store.verify()
    conn = sqlite3.connect(path)
    conn.execute(tamper[0])
    assert conn.total_changes == 1
    conn.commit()
    conn.close()
    with Store(path) as store, pytest.raises(IntegrityError) as failed:
        store.verify()
    assert failed.value.position == tamper[1]


def _forks(path: Path) -> int:
    """A thread t, its fork f and f's fork g; the position of f's first event."""
    with Store(path) as store:
        thread = store.create_thread(title="t", thread_id="t")
        store.append_message(thread, "user", "first")
        fork = store.fork(thread, fork_id="f")
        store.append_message(fork, "assistant", "in the fork")
        store.fork(fork, fork_id="g")
        return store.event_at("f", 2).position


def _fails_at(path: Path, stream: str, position: int) -> None:
    """The full verify and a check of `stream` alone both fail, naming `position`."""
    with Store(path) as store:
        for check in (store.verify, lambda: only(path, stream)):
            with pytest.raises(IntegrityError) as failed:
                check()
            assert failed.value.position == position


def _alter(path: Path, statement: str, *params: object) -> None:
    conn = sqlite3.connect(path)
    conn.execute(statement, params)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("column", ["parent_id", "root_id"])
def test_a_fork_row_holding_a_blob_for_an_id_is_an_integrity_error(tmp_path: Path, column: str) -> None:
    path = tmp_path / "t.db"
    forked = _forks(path)
    with Store(path) as store:  # read before the row is altered: reads of g refuse f's altered row
        g_first = store.event_at("g", 4).position
    _alter(path, f"UPDATE streams SET {column} = CAST({column} AS BLOB) WHERE id = 'f'")
    _fails_at(path, "f", forked)
    if column == "root_id":  # g's own root_id is its parent's
        with pytest.raises(IntegrityError) as failed:
            only(path, "g")
        assert failed.value.position == g_first


@pytest.mark.parametrize("value", ["x3", 2.5, b"\x03"], ids=["text", "real", "blob"])
def test_a_fork_row_whose_parent_offset_is_no_integer_is_an_integrity_error(tmp_path: Path, value: object) -> None:
    """The full verify computed the fork point with it (`parent_offset - 1`) and raised
    TypeError; a check of the fork alone named it. Both name it now."""
    path = tmp_path / "t.db"
    forked = _forks(path)
    _alter(path, "UPDATE streams SET parent_offset = ? WHERE id = 'f'", value)
    _fails_at(path, "f", forked)


def test_an_event_redacted_holding_text_that_is_not_utf8_is_an_integrity_error(tmp_path: Path) -> None:
    """The row it erased is checked against it (`_check_redaction` reads it): that read
    refused the bytes, and verify ended with a StoreError naming no position."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(title="t", thread_id="t")
        secret = store.append_message(thread, "user", "my password is hunter2")
        store.append_message(thread, "assistant", "noted")
        record = store.redact(secret.position, reason="leak", actor="dpo")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET data = CAST(X'7b22ff227d' AS TEXT) WHERE position = ?", (record.position,))
    conn.commit()
    conn.close()
    with Store(path) as store:
        for check in (store.verify, lambda: only(path, "t")):
            with pytest.raises(IntegrityError) as failed:
                check()
            assert failed.value.position in (secret.position, record.position)
            assert f"position {record.position}" in str(failed.value)


@pytest.mark.parametrize(("value", "named"), [(None, "a stream row's id is None, not text"),
                                              (b"t", "b't': head says 2 events but the log ends at 0")], ids=["null", "blob"])
def test_a_stream_row_whose_id_is_not_text_is_named_by_verify_and_the_cli(tmp_path: Path, value: object, named: str) -> None:
    """A NULL id made verify raise TypeError (a traceback from `threadlog verify`)."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(title="t", thread_id="t")
        store.append_message(thread, "user", "first")
        store.fork(thread, fork_id="f")
    _alter(path, "UPDATE streams SET id = ? WHERE id = 't'", value)
    with Store(path) as store, pytest.raises(IntegrityError) as failed:
        store.verify()
    assert failed.value.position == 1
    assert named in str(failed.value)
    result = CliRunner().invoke(cli, ["--db", str(path), "verify"])
    assert result.exit_code == 1 and named in result.output, result.output


# A type stored as its name (text) where threadlog stores its code. On SQLite it reads as the
# same type (tests/test_verify_plain.py reads a file so), and the name is what was hashed, so
# every verify passes: every reader must then read it as that type too. The queries that find a
# thread's title and count its messages looked for the code alone: `ls` showed an older title
# (or none) and one message fewer, while every verify passed.
@pytest.mark.parametrize("named", ["thread.created", "title.set", "message.appended", "event.redacted"])
def test_a_type_stored_as_its_name_reads_as_its_code_does(tmp_path: Path, named: str) -> None:
    path = tmp_path / "t.db"
    with Store(path) as store:
        store.create_thread(title="first title", thread_id="t")
        store.append_message("t", "user", "first")
        store.append("t", [{"type": "title.set", "data": {"title": "second title"}}])
        store.append_message("t", "assistant", "second")
        store.fork("t", fork_id="f")
        store.create_thread(title="only title", thread_id="u")
        secret = store.append_message("u", "user", "my PIN is 1234")
        folded = store.last_position()
        store.redact(secret.position, reason="a PIN", actor="ops")
    commands = (["ls", "--all", "--json"], ["ls", "--all"], ["tree"], ["show", "t"], ["show", "f"], ["show", "u"])
    before = [_cli(path, *command) for command in commands]
    _alter(path, "UPDATE events SET type = ? WHERE type = ?", named, TYPE_CODES[named])
    with Store(path) as store:
        store.verify()  # the same hashes: the name is what each hashed
        assert [_cli(path, *command) for command in commands] == before
        # A state folded before the redaction may hold the erased payload: still refused.
        with pytest.raises(StaleSnapshot):
            store.save_snapshot("thread_state", 1, "u", 2, {"said": "my PIN is 1234"}, as_of=folded)


def _cli(path: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", str(path), *args])
    assert result.exit_code == 0, result.output
    return result.output


# An event id stored as its text where threadlog stores its 16 bytes (a 32-hex-digit id) reads
# as the same id, and the hash holds, so every verify passes; but the idempotency lookup bound
# the packed id alone: a retry of the append wrote the event a second time, two events under one
# id, and verify passed that too. PostgreSQL stores the text as its UTF-8 bytes.
ID_AS_TEXT = {
    "sqlite": "UPDATE events SET event_id = lower(hex(event_id)) WHERE position = 2",
    "postgresql": "UPDATE events SET event_id = convert_to(encode(event_id, 'hex'), 'UTF8') WHERE position = 2",
}


@pytest.mark.parametrize("backend", list(ID_AS_TEXT))
def test_a_retry_finds_its_event_whose_id_is_stored_as_text(tmp_path: Path, backend: str) -> None:
    db = postgres_url() if backend == "postgresql" else str(tmp_path / "t.db")
    event = {"type": "message.appended", "data": {"role": "user", "content": [{"type": "text", "text": "pay 10 EUR"}]},
             "meta": {"event_id": "0123456789abcdef0123456789abcdef"}}
    with Store(db) as store:
        store.create_thread(thread_id="t")
        (first,) = store.append("t", [event])
    if backend == "postgresql":
        with psycopg.connect(db, autocommit=True) as conn:
            assert conn.execute(ID_AS_TEXT[backend]).rowcount == 1
    else:
        _alter(Path(db), ID_AS_TEXT[backend])
    with Store(db) as store:
        store.verify()  # the same id: the text is what was hashed
        assert store.append("t", [event]) == [first]
        assert store.append("t", [event], expect=1) == [first]
        assert [e.position for e in store.read("t")] == [1, 2]
