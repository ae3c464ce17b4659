"""A full verify checks most rows (plain messages) with a shortcut of its own, on the row as
stored (`_Scan.run`); every other row goes through `_Chain.step`. These tests hold the
shortcut to the same verdicts, and hold the whole verify to catching any one changed byte.

The oracle for the shortcut: the same file with every type stored as its name instead of its
number. Both read back the same events (a type stored as text is read as it is), but the
shortcut takes only rows whose type is stored as a message's number, so on the second file
every row goes through `step`. The two must raise the same error, or both pass.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.integrity import chain_hash, digest
from eventstore.packing import TYPE_CODES
from tests import stored
from threadlog import IntegrityError, Store

COLUMNS = ("position", "stream_id", "offset", "event_id", "type", "schema_version", "data", "meta", "recorded_at",
           "data_digest", "hash", "pending", "redacted_by")
TYPES_AS_TEXT = ("UPDATE events SET type = CASE type "
                 + " ".join(f"WHEN {code} THEN '{name}'" for name, code in TYPE_CODES.items()) + " ELSE type END")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every kind of row: plain messages (quotes, escapes, non-ASCII), tool calls and results,
    runs, interrupts, titles, forks of forks, a fan-out and a redaction."""
    db = tmp_path_factory.mktemp("plain") / "template.db"
    with Store(db) as s:
        t = s.create_thread(title="plain", system="be brief", thread_id="T")
        s.append_message(t, "user", 'a "quoted" word, a back\\slash, a tab\tand a new\nline')
        s.append_message(t, "assistant", "déjà vu, 東京, 🚆 and \u2028")
        s.append(t, [{"type": "run.started", "data": {"run_id": "r1"}}])
        s.append_message(t, "assistant", "working on it")  # a plain message while something is pending
        s.append_message(t, "assistant", [{"type": "text", "text": "let me look"},
                                          {"type": "tool_use", "id": "tu1", "name": "search", "input": {"q": "x"}}])
        s.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "tu1", "content": "found"}])
        s.append(t, [{"type": "run.finished", "data": {"run_id": "r1", "status": "ok"}}])
        s.append(t, [{"type": "interrupt.raised", "data": {"interrupt_id": "i1", "question": "go on?"}}])
        s.append(t, [{"type": "interrupt.resolved", "data": {"interrupt_id": "i1", "answer": "yes"}}])
        s.append(t, [{"type": "title.set", "data": {"title": "renamed"}}])
        secret = s.append_message(t, "user", "my password is hunter2")
        for i in range(6):
            s.append_message(t, "user" if i % 2 else "assistant", f"plain message {i}")
        f = s.fork(t, at=10, fork_id="F")  # after the run and the interrupt
        s.append_message(f, "user", "in the fork")
        s.append_message(f, "assistant", "still in the fork")
        g = s.fork(f, fork_id="G")
        s.append_message(g, "user", "in the fork of the fork")
        s.append_message(t, "assistant", [{"type": "tool_use", "id": "tu2", "name": "search", "input": {}}])
        s.fan_out(t, directives=["one", "two"])
        s.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "tu2", "content": "done"}])
        s.append_message(t, "assistant", "the end")
        s.redact(secret.position, reason="leak", actor="test")
        s.verify()
    return db


def _copy(template: Path, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    shutil.copy(template, path)
    return path


def _verdict(path: Path) -> tuple[int | None, str]:
    """(the position named, the message), or (None, "ok")."""
    with Store(path, read_only=True) as store:
        try:
            store.verify()
        except IntegrityError as error:
            return error.position, str(error)
    return None, "ok"


def _run(path: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for statement, params in statements:
            conn.execute(statement, params)
        conn.execute("COMMIT")
    finally:
        conn.close()


# For a column stored as NULL: a value of the kind an event with one would hold.
_FILLED: dict[str, Callable[[int, int], object]] = {
    "data_digest": lambda at, byte: bytes([byte]) * 32,
    "pending": lambda at, byte: '{"runs":["r"]}',
    "redacted_by": lambda at, byte: 1 + at % 40,
}


def _changed(column: str, value: object, at: int, byte: int) -> object:
    """`value` with one byte changed (text: one ASCII character for another, so it stays text)."""
    if value is None:
        return _FILLED[column](at, byte)
    if isinstance(value, int):
        shift = 8 * (at % 4)
        return value ^ (max(byte, 1) << shift)
    if isinstance(value, bytes):
        i = at % len(value)
        return value[:i] + bytes([value[i] ^ max(byte, 1)]) + value[i + 1:]
    assert isinstance(value, str)
    ascii_at = [i for i, c in enumerate(value) if ord(c) < 128]
    i = ascii_at[at % len(ascii_at)]
    new = chr((ord(value[i]) ^ max(byte % 128, 1)) or 1)
    return value[:i] + new + value[i + 1:]


def changed_copy(template: Path, directory: Path, row: int, column: str, at: int, byte: int) -> Path | None:
    """A copy of the template with one byte of one stored value changed (`_changed`), or None
    when the file refuses the change itself (a position or event id another row holds)."""
    path = directory / "t.db"
    shutil.copy(template, path)
    conn = sqlite3.connect(path)
    positions = [p for (p,) in conn.execute("SELECT position FROM events ORDER BY position")]
    position = positions[row % len(positions)]
    (value,) = conn.execute(f'SELECT "{column}" FROM events WHERE position = ?', (position,)).fetchone()
    conn.close()
    try:
        _run(path, (f'UPDATE events SET "{column}" = ? WHERE position = ?', (_changed(column, value, at, byte), position)))
    except sqlite3.IntegrityError:
        return None
    return path


def test_the_template_verifies_both_ways(template: Path, tmp_path: Path) -> None:
    text = _copy(template, tmp_path, "text.db")
    _run(text, (TYPES_AS_TEXT, ()))
    assert _verdict(template) == _verdict(text) == (None, "ok")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.integers(0, 10_000), column=st.sampled_from(COLUMNS), at=st.integers(0, 10_000), byte=st.integers(1, 255))
def test_one_changed_byte_in_any_stored_column_is_caught_and_named_alike_by_both_paths(
        template: Path, tmp_path_factory: pytest.TempPathFactory, row: int, column: str, at: int, byte: int) -> None:
    packed = _copy(template, tmp_path_factory.mktemp("byte"), "packed.db")
    conn = sqlite3.connect(packed)
    positions = [p for (p,) in conn.execute("SELECT position FROM events ORDER BY position")]
    position = positions[row % len(positions)]
    (value,) = conn.execute(f'SELECT "{column}" FROM events WHERE position = ?', (position,)).fetchone()
    conn.close()
    _check_caught(packed, column, position, value, _changed(column, value, at, byte))


@pytest.mark.parametrize("column", COLUMNS)
def test_one_changed_byte_in_a_plain_message_is_caught_and_named_alike_by_both_paths(
        template: Path, tmp_path: Path, column: str) -> None:
    """The rows the shortcut takes, each column (the random test above may miss a few)."""
    conn = sqlite3.connect(template)
    (position, value), = conn.execute(f'SELECT position, "{column}" FROM events WHERE data LIKE \'%plain message 3%\'')
    conn.close()
    _check_caught(_copy(template, tmp_path, "packed.db"), column, position, value, _changed(column, value, 7, 0x20))


def _check_caught(packed: Path, column: str, position: int, value: object, new: object) -> None:
    try:
        _run(packed, (f'UPDATE events SET "{column}" = ? WHERE position = ?', (new, position)))
    except sqlite3.IntegrityError:
        return  # a position or an event id another row holds: the file refuses the change itself
    text = _copy(packed, packed.parent, "text.db")
    _run(text, (TYPES_AS_TEXT, ()))
    named, why = _verdict(packed)
    assert why != "ok", f"{column} of position {position}: {value!r} -> {new!r} was not caught"
    assert _verdict(text) == (named, why)
    if column not in ("position", "stream_id", "offset"):  # these move the event; the rest alter it in place
        # named there, or at an event it vouches for (an event.redacted, at the row it erased)
        assert named is not None and named <= position, why


def _rewrite_last(path: Path, stream: str, data: str) -> int:
    """Replace a stream's last event's data and re-chain it (its hash, the stream's head hash),
    as someone rewriting the file can: the chain holds, so only the derived columns can tell."""
    conn = sqlite3.connect(path)
    (position, offset, event_id, type_, version, meta, recorded_at), = stored.events(
        conn, ["position", "offset", "event_id", "type", "schema_version", "meta", "recorded_at"],
        'WHERE stream_id = ? ORDER BY "offset" DESC LIMIT 1', (stream,))
    (prev,), = stored.events(conn, ["hash"], 'WHERE stream_id = ? AND "offset" = ?', (stream, offset - 1))
    new_hash = chain_hash(prev, stream, offset, event_id, type_, version, recorded_at, meta, digest(data))
    conn.close()
    _run(path, ("UPDATE events SET data = ?, hash = ? WHERE position = ?", (data, new_hash, position)),
         ("UPDATE streams SET head_hash = ? WHERE id = ?", (new_hash, stream)))
    return int(position)


@pytest.mark.parametrize("spelled", ["tool_use", "\\u0074ool_use"], ids=["plain", "escaped"])
def test_a_rewritten_message_that_adds_a_tool_call_the_pending_facts_miss_is_caught(
        tmp_path: Path, spelled: str) -> None:
    """A tool_use block written with a \\u escape (appends never write one) still counts: the
    shortcut leaves any data with an escape to the full parse (before, the escaped spelling
    passed verify while the stored pending facts said no call was waiting)."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        t = store.create_thread(thread_id="T")
        store.append_message(t, "user", "hello")
        store.append_message(t, "assistant", "hi there")
    data = '{"content":[{"id":"x","input":{},"name":"n","type":"' + spelled + '"}],"role":"assistant"}'
    position = _rewrite_last(path, "T", data)
    with Store(path) as store, pytest.raises(IntegrityError) as caught:
        store.verify()
    assert caught.value.position == position
    assert "pending facts" in str(caught.value)
