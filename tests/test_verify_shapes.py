"""An event re-chained by hand whose data no append (and no restore) takes is named by `verify`.

The chain has no secret: whoever can write the file can rewrite a thread's last event and
recompute its hash and the head's (`What verify --checkpoint adds`). What `verify` can still
tell without a secret is whether each event is one this release writes: a type it knows, at
the schema version it knows, with data of that type's shape (a compaction's `through_offset`
a number no later than its own offset). The readers refuse such an event saying `threadlog
verify` names it, and a restore refuses the backup `export` writes of it; `verify` passed it,
so a file it called sound made a backup that did not restore.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import packing
from eventstore.integrity import canonical, chain_hash, digest
from tests import stored
from threadlog import IntegrityError, InvalidEvent, Store
from threadlog.cli import cli

COMPACTION = {"summary": "what came before", "through_offset": 3}

# (type, schema version, data) the thread's last event is rewritten to, and what verify says.
FORGED = {
    "through-offset-as-text": ("compaction.recorded", 1, {**COMPACTION, "through_offset": "3"},
                               "data.through_offset: '3' where an append writes 3"),
    "a-null-field": ("compaction.recorded", 1, {**COMPACTION, "model": None},
                     "data.model: None where an append writes no such field"),
    "through-offset-past-its-own-offset": ("compaction.recorded", 1, {**COMPACTION, "through_offset": 100},
                                           "past the compaction's own offset 5"),
    "summary-missing": ("compaction.recorded", 1, {"through_offset": 3}, "summary"),
    "title-a-number": ("title.set", 1, {"title": 5}, "title"),
    "metadata-patch-a-list": ("metadata.set", 1, {"patch": [1]}, "patch"),
    "todos-a-text": ("todos.set", 1, {"todos": "x"}, "todos"),
    "unknown-type": ("widget.spun", 1, {"x": 1}, "unknown event type 'widget.spun'"),
    "version-0": ("message.appended", 0, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                  "schema_version 0"),
    "version-newer": ("compaction.recorded", 2, COMPACTION, "schema_version 2"),
}


def forge_last(db: Path, type_: str, version: int, data: dict[str, Any], text: str | None = None) -> int:
    """Rewrite thread T's last event (offset 5) as `type_`/`version`/`data` (or the JSON `text`
    as given), its hash and the head hash recomputed as anyone can; its position."""
    conn = sqlite3.connect(db)
    (position, event_id, recorded_at, meta), = stored.events(
        conn, ["position", "event_id", "recorded_at", "meta"], "WHERE stream_id = 'T' AND \"offset\" = 5")
    (prev,), = stored.events(conn, ["hash"], "WHERE stream_id = 'T' AND \"offset\" = 4")
    text = canonical(data) if text is None else text
    hash_ = chain_hash(prev, "T", 5, event_id, type_, version, recorded_at, meta, digest(text))
    conn.execute("UPDATE events SET type = ?, schema_version = ?, data = ?, data_digest = NULL, hash = ? WHERE position = ?",
                 (packing.pack_type(type_), version, text, hash_, position))
    conn.execute("UPDATE streams SET head_hash = ? WHERE id = 'T'", (hash_,))
    conn.commit()
    conn.close()
    return position


def build(db: Path) -> str:
    """T: created, four messages, then one more event (offset 5); a checkpoint taken before it."""
    with Store(db) as store:
        t = store.create_thread(title="t", thread_id="T")
        for i, role in enumerate(["user", "assistant", "user", "assistant"]):
            store.append_message(t, role, f"message {i}")
        before = store.checkpoint()
        store.append(t, [{"type": "compaction.recorded", "data": COMPACTION}])
        store.verify()
    return before


@pytest.mark.parametrize("case", list(FORGED.values()), ids=list(FORGED))
def test_an_event_no_append_writes_fails_every_verify_naming_it(tmp_path: Path, case: tuple[Any, ...]) -> None:
    type_, version, data, says = case
    db = tmp_path / "t.db"
    before = build(db)
    position = forge_last(db, type_, version, data)
    with Store(db) as store:
        for check in ({}, {"checkpoint": before}, {"since": before}):
            with pytest.raises(IntegrityError, match="T offset 5") as caught:
                store.verify(**check)
            assert caught.value.position == position and says in str(caught.value), (check, caught.value)
    result = CliRunner().invoke(cli, ["--db", str(db), "verify"])
    print(f"\n{type_} {json.dumps(data)} v{version}: {result.stderr.strip()}")
    assert result.exit_code == 1 and f"position {position}" in result.stderr


def test_what_verify_passes_restores_from_its_backup(tmp_path: Path) -> None:
    """The case that showed it: a compaction whose `through_offset` reads "3" was refused by
    `show` (naming `verify`), and its export by a restore as altered, while `verify` passed."""
    db = tmp_path / "t.db"
    build(db)
    forge_last(db, "compaction.recorded", 1, {**COMPACTION, "through_offset": "3"})
    runner = CliRunner()
    shown = runner.invoke(cli, ["--db", str(db), "show", "T"])
    assert shown.exit_code == 1 and "`threadlog verify` names it" in shown.stderr
    with Store(db) as store, pytest.raises(IntegrityError):
        store.verify()
    assert runner.invoke(cli, ["--db", str(db), "export", "T", "-o", str(tmp_path / "t.jsonl")]).exit_code == 0
    restored = runner.invoke(cli, ["--db", str(tmp_path / "r.db"), "import", "events", str(tmp_path / "t.jsonl")])
    assert restored.exit_code == 1 and "line 8.event.data" in restored.stderr


def test_an_older_schema_version_a_release_upcasts_verifies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database an older release wrote stores its events at their older versions, which the
    readers upcast (`UPCASTERS`): after a model's version goes up, such a file still verifies,
    its data checked in the shape the readers see; a version no upcaster reaches does not."""
    from eventstore.events import UPCASTERS, CompactionRecorded

    db = tmp_path / "t.db"
    build(db)  # its compaction stored at version 1
    monkeypatch.setattr(CompactionRecorded, "schema_version", 2)
    with Store(db) as store, pytest.raises(IntegrityError, match="schema_version 1 of compaction.recorded is not one this release reads"):
        store.verify()
    monkeypatch.setitem(UPCASTERS, ("compaction.recorded", 1), lambda data: {**data, "summary": data["summary"].upper()})
    with Store(db) as store:
        assert store.verify().events == 6


@pytest.mark.parametrize(("type_", "text"), [
    ("title.set", '{"title":"\\ud800"}'),
    ("compaction.recorded", '{"summary":"what came \\udc80before","through_offset":3}'),
    ("message.appended", '{"content":[{"text":"a\\uDBFFb","type":"text"}],"role":"assistant"}'),
])
def test_a_lone_surrogate_written_as_an_escape_fails_verify(tmp_path: Path, type_: str, text: str) -> None:
    """A lone surrogate can be stored as a JSON escape (`\\ud800`) in a file written by hand;
    no append stores one (it is not UTF-8). `verify` passed it, and `export` then refused the
    thread saying that if verify passes this is a bug."""
    db = tmp_path / "t.db"
    build(db)
    position = forge_last(db, type_, 1, {}, text)
    with Store(db) as store, pytest.raises(IntegrityError, match="T offset 5: data holds a lone surrogate") as caught:
        store.verify()
    assert caught.value.position == position and "\n" not in str(caught.value)
    result = CliRunner().invoke(cli, ["--db", str(db), "verify"])
    assert result.exit_code == 1 and f"position {position}" in result.stderr


def test_a_key_of_a_megabyte_of_lines_is_named_on_one_short_line(tmp_path: Path) -> None:
    """A re-chained event holding a field no append writes, named by a 1.5 MB key of newlines
    and terminal escapes: verify's message held the key whole (1.5 MB, 300,001 lines), and so
    did an append's refusal of it; each names it cut short, on one line."""
    key = "evil\n\x1b[31m" * 150_000
    db = tmp_path / "t.db"
    build(db)
    with Store(db) as store, pytest.raises(InvalidEvent) as refused:
        store.append("T", [{"type": "compaction.recorded", "data": {**COMPACTION, key: 1}}])
    position = forge_last(db, "compaction.recorded", 1, {**COMPACTION, key: 1})
    with Store(db) as store, pytest.raises(IntegrityError, match="T offset 5") as caught:
        store.verify()
    assert caught.value.position == position
    for message in (str(refused.value), str(caught.value)):
        assert "data.'evil\\n\\x1b[31m" in message and len(message) < 400 and "\n" not in message and "\x1b" not in message, message
