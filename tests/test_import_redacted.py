"""Importing a session again after an event of it was redacted.

`redact` keeps the erased event's id and meta and appends an `event.redacted` to its thread.
A grown session must then import as it would have without the redaction (only its new lines
added, forks and compactions pointing at the events they meant), the erased text must not
come back, and a session really rewritten must still be refused.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import ConcurrencyError
from threadlog import ImportConflict, Store, import_claude_code, import_pi
from threadlog.cli import cli
from threadlog.importers import plan
from threadlog.importers.follow import follow_claude_code

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claude-code" / "dag"
REWOUND = [FIXTURES / "dag_compact_after_rewind.jsonl", FIXTURES / "dag_compact_after_rewind_preserved.jsonl"]
SECRET = "card 4111-1111-1111-1111 exp 09/29"


def _claude_code_lines(fixture: Path) -> list[bytes]:
    """The fixture's lines, its first prompt ("Start") holding the secret."""
    lines = fixture.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["message"]["content"][0]["text"] = SECRET
    return [json.dumps(first).encode() + b"\n", *lines[1:]]


def _pi_lines() -> list[bytes]:
    """A pi session (a tree, version 3): the user rewound to "Ready" and tried again, then pi compacted."""
    def message(id_: str, parent: str | None, role: str, text: str) -> dict[str, Any]:
        body: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": text}]}
        if role == "assistant":
            body.update(model="claude-opus-4-5", stopReason="stop")
        return {"type": "message", "id": id_, "parentId": parent, "timestamp": "2025-07-01T10:00:00.000Z", "message": body}

    records = [
        {"type": "session", "version": 3, "id": "s1", "timestamp": "2025-07-01T10:00:00.000Z", "cwd": "/tmp"},
        message("e1", None, "user", SECRET),
        message("e2", "e1", "assistant", "Ready"),
        message("e3", "e2", "user", "First attempt"),
        message("e4", "e3", "assistant", "First answer"),
        message("e5", "e2", "user", "Second attempt"),
        message("e6", "e5", "assistant", "Second answer"),
        message("e7", "e6", "user", "Keep going"),
        message("e8", "e7", "assistant", "Kept going"),
        {"type": "compaction", "id": "e9", "parentId": "e8", "timestamp": "2025-07-01T10:00:00.000Z",
         "summary": "The user tried twice.", "firstKeptEntryId": "e7", "tokensBefore": 1000},
        message("e10", "e9", "user", "After compaction"),
        message("e11", "e10", "assistant", "Final answer"),
    ]
    return [json.dumps(r).encode() + b"\n" for r in records]


def _shape(store: Store, root: str, erased: str) -> list[Any]:
    """Every stream of the import as its events (id, type, data, meta), redaction records left
    out, each offset named by the source event it points at (a compaction's `through_offset`,
    a fork's point), and the erased event's data left out: two imports of one session compare
    equal whether or not an event of it was redacted in between."""
    shape: list[Any] = []
    for info in store.subtree(root):
        history = list(store.read(info.id))

        def named(offset: int, after: bool) -> str | None:
            """The source event at `offset`, or the nearest one after (`after`) or before it."""
            nearby = history[offset:] if after else reversed(history[:offset + 1])
            return next((e.event_id for e in nearby if e.type != "event.redacted"), None)

        events = []
        for event in history[info.base:]:  # its own events (a read from 0 holds one event per offset)
            if event.type == "event.redacted":
                continue
            data = dict(event.data)
            if event.event_id == erased:
                data = {}
            elif event.type == "compaction.recorded":
                data["through_offset"] = named(data["through_offset"], after=True)
            elif event.type == "thread.forked":
                data["parent_offset"] = named(data["parent_offset"] - 1, after=False)
            events.append((event.event_id, event.type, data, event.meta))
        shape.append((info.id, info.kind, events))
    return shape


def _position(store: Store, root: str, event_id: str) -> int:
    return next(e.position for e in store.read(root) if e.event_id == event_id)


def _in(directory: Path) -> Path:
    """A database file alone in `directory` (created): `_db_bytes` reads every file it writes."""
    directory.mkdir()
    return directory / "t.db"


def _db_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))


def _grows_after_a_redaction(tmp_path: Path, importer: Callable[..., Any], lines: list[bytes], cut: int, redacted_id: str) -> None:
    """Its first `cut` lines imported, the event `redacted_id` (holding the secret) redacted,
    then the whole session: the same events are added as without the redaction, forks and
    compactions point at the same events, the secret is in no file of the database, and it
    verifies; a third import adds nothing."""
    session = tmp_path / "session" / "s1.jsonl"
    session.parent.mkdir()
    session.write_bytes(b"".join(lines[:cut]))
    with Store(_in(tmp_path / "redacted")) as redacted, Store(_in(tmp_path / "plain")) as plain:
        root = importer(redacted, [session]).thread_ids[0]
        importer(plain, [session])
        record = redacted.redact(_position(redacted, root, redacted_id), reason="pii", actor="ops")
        session.write_bytes(b"".join(lines))
        added = importer(redacted, [session]).added
        assert added == importer(plain, [session]).added > 0
        assert _shape(redacted, root, redacted_id) == _shape(plain, root, redacted_id)
        assert [e.position for e in redacted.read_all() if e.type == "event.redacted"] == [record.position]
        assert importer(redacted, [session]).added == 0
        assert redacted.verify().redacted == 1
    assert SECRET.encode() not in _db_bytes(tmp_path / "redacted" / "t.db")
    assert SECRET.encode() in _db_bytes(tmp_path / "plain" / "t.db")


@pytest.mark.parametrize("fixture", REWOUND, ids=["compacted", "preserved"])
@pytest.mark.parametrize("cut", range(1, 12))
def test_a_grown_claude_code_session_imports_after_a_redaction_as_it_would_have_without(
        tmp_path: Path, fixture: Path, cut: int) -> None:
    _grows_after_a_redaction(tmp_path, import_claude_code, _claude_code_lines(fixture), cut, "cc:s1:u1")


@pytest.mark.parametrize("cut", [2, 3, 6, 7, 8, 9, 10, 11])  # not inside the first branch: pi follows the latest one
def test_a_grown_pi_session_imports_after_a_redaction_as_it_would_have_without(tmp_path: Path, cut: int) -> None:
    _grows_after_a_redaction(tmp_path, import_pi, _pi_lines(), cut, "pi:s1:e1")


def test_the_cli_imports_a_grown_session_after_a_redaction(tmp_path: Path) -> None:
    """The steps of the report: import, redact, the session grows, import again."""
    lines = _claude_code_lines(REWOUND[0])
    session = tmp_path / "s1.jsonl"
    db = _in(tmp_path / "db")
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(cli, ["--db", str(db), *args])
        assert result.exit_code == 0, result.output
        return result.output

    def write(count: int) -> None:
        session.write_bytes(b"".join(lines[:count]))
        day_ago = time.time() - 86400  # an old session is taken as it is (not as one still being written)
        os.utime(session, (day_ago, day_ago))

    write(2)
    assert run("import", "claude-code", str(session)).splitlines()[-1] == "5 event(s) added of 5"
    run("redact", "3", "--reason", "pii", "--actor", "ops")
    write(len(lines))
    report = json.loads(run("import", "claude-code", str(session), "--json"))
    assert report["added"] == report["events"] - 5 > 0
    for thread in report["thread_ids"]:
        assert SECRET not in run("log", thread, "--json")
    assert "1 redacted" in run("verify")
    assert json.loads(run("import", "claude-code", str(session), "--json"))["added"] == 0
    assert SECRET.encode() not in _db_bytes(db)


def test_following_a_session_after_a_redaction_adds_its_new_lines(tmp_path: Path) -> None:
    lines = _claude_code_lines(REWOUND[0])
    session = tmp_path / "session" / "s1.jsonl"
    session.parent.mkdir()
    session.write_bytes(b"".join(lines[:2]))
    with Store(_in(tmp_path / "db")) as store:
        root = import_claude_code(store, [session]).thread_ids[0]
        before = [e.event_id for e in store.read(root)]
        store.redact(_position(store, root, "cc:s1:u1"), reason="pii", actor="ops")
        session.write_bytes(b"".join(lines))
        polls = iter(range(3))
        summary = follow_claude_code(store, [session.parent], interval=0, settle=0, stop=lambda: next(polls, None) is None)
        assert summary.added > 0
        after = [e.event_id for e in store.read(root) if e.type != "event.redacted"]
        assert after[:len(before)] == before and len(after) > len(before)
        assert store.verify().redacted == 1
    assert SECRET.encode() not in _db_bytes(tmp_path / "db" / "t.db")


def _rewritten(lines: list[bytes], how: str) -> list[bytes]:
    if how == "renamed":  # a stored response written again under another uuid
        return [line.replace(b'"a1"', b'"a1-again"') for line in lines]
    if how == "dropped":  # a stored response gone
        return [lines[0], *lines[2:]]
    return [lines[1], lines[0], *lines[2:]]  # reordered


@pytest.mark.parametrize("how", ["renamed", "dropped"])
def test_a_rewritten_claude_code_session_is_still_refused_after_a_redaction(tmp_path: Path, how: str) -> None:
    lines = _claude_code_lines(REWOUND[0])
    session = tmp_path / "session" / "s1.jsonl"
    session.parent.mkdir()
    session.write_bytes(b"".join(lines[:2]))
    with Store(tmp_path / "t.db") as store:
        root = import_claude_code(store, [session]).thread_ids[0]
        store.redact(_position(store, root, "cc:s1:u1"), reason="pii", actor="ops")
        session.write_bytes(b"".join(_rewritten(lines, how)))
        before = store.counts()
        with pytest.raises(ImportConflict, match="holds events the source no longer has in that order") as refused:
            import_claude_code(store, [session])
        assert str(refused.value).startswith(f"{session}:")  # the thread's id alone named no file, nor a line
        assert store.counts() == before


def _imports_on_after_a_redaction(tmp_path: Path, importer: Any, first: list[bytes], rewritten: list[bytes], redacted: str) -> None:
    """Import `first`, redact the event `redacted`, import `rewritten`: the stored events stay
    as they were, new ones come after them, and the redaction holds."""
    session = tmp_path / "session" / "s1.jsonl"
    session.parent.mkdir()
    session.write_bytes(b"".join(first))
    with Store(tmp_path / "t.db") as store:
        root = importer(store, [session]).thread_ids[0]
        before = [e.event_id for e in store.read(root)]
        store.redact(_position(store, root, redacted), reason="pii", actor="ops")
        session.write_bytes(b"".join(rewritten))
        assert importer(store, [session]).added > 0
        after = [e.event_id for e in store.read(root) if e.type != "event.redacted"]
        assert after[:len(before)] == before and len(after) > len(before)
        assert store.verify().redacted == 1


def test_a_claude_code_session_whose_lines_were_swapped_imports_on_after_a_redaction(tmp_path: Path) -> None:
    """Lines are taken in the order their parents give, not the file's: a response written
    before the prompt it answers is the same conversation, so the import goes on, keeping
    the redaction and adding what is new."""
    lines = _claude_code_lines(REWOUND[0])
    _imports_on_after_a_redaction(tmp_path, import_claude_code, lines[:2], _rewritten(lines, "reordered"), "cc:s1:u1")
    assert SECRET.encode() not in _db_bytes(tmp_path / "t.db")


@pytest.mark.parametrize("how", ["renamed", "dropped", "reparented"])
def test_a_rewritten_pi_session_is_still_refused_after_a_redaction(tmp_path: Path, how: str) -> None:
    header, *entries = _pi_lines()
    session = tmp_path / "session" / "s1.jsonl"
    session.parent.mkdir()
    session.write_bytes(b"".join([header, *entries[:3]]))
    with Store(tmp_path / "t.db") as store:
        root = import_pi(store, [session]).thread_ids[0]
        store.redact(_position(store, root, "pi:s1:e1"), reason="pii", actor="ops")
        renamed = [line.replace(b'"e2"', b'"e2-again"') for line in entries]
        rewritten = {"renamed": renamed, "dropped": [entries[0], *entries[2:]],
                     "reparented": [entries[0], entries[1], entries[2].replace(b'"parentId": "e2"', b'"parentId": "e1"'),
                                    *entries[3:]]}[how]
        session.write_bytes(b"".join([header, *rewritten]))
        before = store.counts()
        with pytest.raises(ImportConflict, match="holds events the source no longer has in that order") as refused:
            import_pi(store, [session])
        assert str(refused.value).startswith(f"{session}:")
        assert store.counts() == before


def test_a_pi_session_whose_entries_were_swapped_imports_on_after_a_redaction(tmp_path: Path) -> None:
    """Entries are taken in the order their parents give, not the file's: an entry written
    before its parent is the same session, so the import goes on, keeping the redaction."""
    header, *entries = _pi_lines()
    _imports_on_after_a_redaction(tmp_path, import_pi, [header, *entries[:3]],
                                  [header, entries[0], entries[2], entries[1], *entries[3:]], "pi:s1:e1")


def test_a_redaction_between_planning_and_writing_refuses_the_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import plans the offsets of what it adds (a fork point, a compaction's
    `through_offset`) past the redaction records it saw: a redaction committed after that
    would shift them, so the write is refused, and the next import plans again."""
    lines = _claude_code_lines(REWOUND[1])
    session = tmp_path / "session" / "s1.jsonl"
    session.parent.mkdir()
    session.write_bytes(b"".join(lines[:2]))
    with Store(_in(tmp_path / "redacted")) as redacted, Store(_in(tmp_path / "plain")) as plain:
        root = import_claude_code(redacted, [session]).thread_ids[0]
        import_claude_code(plain, [session])
        session.write_bytes(b"".join(lines))
        write_plan = plan.write_plan

        def redact_first(store: Store, planned: plan.Plan) -> int:
            store.redact(_position(store, root, "cc:s1:u1"), reason="pii", actor="ops")
            return write_plan(store, planned)

        monkeypatch.setattr(plan, "write_plan", redact_first)
        before = redacted.counts().events
        with pytest.raises(ConcurrencyError):
            import_claude_code(redacted, [session])
        assert redacted.counts().events == before + 1  # the event.redacted alone
        monkeypatch.setattr(plan, "write_plan", write_plan)
        assert import_claude_code(redacted, [session]).added == import_claude_code(plain, [session]).added
        assert _shape(redacted, root, "cc:s1:u1") == _shape(plain, root, "cc:s1:u1")
        assert redacted.verify().redacted == 1


def test_a_grown_session_imports_after_a_redaction_on_every_backend(store: Store, mem: Store, tmp_path: Path) -> None:
    lines = _claude_code_lines(REWOUND[1])
    session = tmp_path / "session" / "s1.jsonl"
    session.parent.mkdir()
    session.write_bytes(b"".join(lines[:1]))
    root = import_claude_code(store, [session]).thread_ids[0]
    import_claude_code(mem, [session])
    store.redact(_position(store, root, "cc:s1:u1"), reason="pii", actor="ops")
    session.write_bytes(b"".join(lines))
    assert import_claude_code(store, [session]).added == import_claude_code(mem, [session]).added > 0
    assert _shape(store, root, "cc:s1:u1") == _shape(mem, root, "cc:s1:u1")
    assert import_claude_code(store, [session]).added == 0
    assert store.verify().redacted == 1
    assert all(SECRET not in json.dumps(e.data) for e in store.read_all())
