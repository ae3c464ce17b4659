"""A Claude Code response imported keeps what the API returned, as a live turn keeps it: its
stop sequence, container, context management and any field the log names none for; a session
an earlier release imported without them re-imports adding and changing nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from threadlog import Store, import_claude_code

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SESSION = "0a1b2c3d-0000-4000-8000-00000000f1e1"
REAL = FIXTURES / "claude-code" / "-src-deep-manifest" / "a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl"


def _answers(store: Store) -> list[dict[str, Any]]:
    return [e.data for e in store.read_all() if e.type == "message.appended" and e.data["role"] == "assistant"]


def test_a_response_keeps_the_fields_claude_code_wrote(tmp_path: Path) -> None:
    """tests/fixtures/cc-fields.jsonl: the first response over two lines, the second ended by a
    stop sequence, in a container, with a field no release of the log names."""
    with Store(tmp_path / "t.db") as store:
        import_claude_code(store, [FIXTURES / "cc-fields.jsonl"])
        first, second = _answers(store)
    assert first["stop_reason"] == "tool_use" and first["context_management"] == {"applied_edits": []}
    assert "stop_sequence" not in first and "extra_fields" not in first  # null: left out, as a live turn does
    assert second["stop_sequence"] == "###"
    assert second["container"] == {"id": "container_1", "expires_at": "2025-07-01T11:00:00Z"}
    assert second["context_management"] == {"applied_edits": []}
    assert second["extra_fields"] == {"speed_tier": "fast"}
    assert "stop_details" not in second


def test_a_real_session_keeps_its_context_management(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in REAL.read_text(encoding="utf-8").splitlines() if line.strip()]
    written = {r["message"]["id"] for r in lines if r.get("type") == "assistant" and r["message"].get("context_management")}
    assert written
    with Store(tmp_path / "t.db") as store:
        import_claude_code(store, [REAL])
        kept = {a["message_id"] for a in _answers(store) if a.get("context_management") == {"applied_edits": []}}
    assert kept == written


def test_a_session_imported_before_responses_kept_their_fields_re_imports_adding_and_changing_nothing(tmp_path: Path) -> None:
    """tests/fixtures/cc-fields.db: the session imported at commit 045b44c, which dropped those
    fields. The stored responses stay as they are (an event, once written, is never rewritten)
    and are no change of the source; the responses the file grows by keep their fields."""
    db, path = tmp_path / "t.db", tmp_path / "cc-fields.jsonl"
    shutil.copy(FIXTURES / "cc-fields.db", db)
    shutil.copy(FIXTURES / "cc-fields.jsonl", path)
    with Store(db) as store:
        stored = [(e.event_id, e.hash) for e in store.read_all()]
        assert all("context_management" not in a for a in _answers(store))
        again = import_claude_code(store, [path])
        assert (again.added, again.changed) == (0, 0)
        assert [(e.event_id, e.hash) for e in store.read_all()] == stored
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        answer = json.loads(json.dumps(records[-1]))
        answer["uuid"], answer["parentUuid"], answer["message"]["id"] = "a3", "u3", "msg_3"
        prompt = {**records[0], "uuid": "u3", "parentUuid": "a2", "message": {"role": "user", "content": "and now?"}}
        path.write_text("".join(json.dumps(r) + "\n" for r in [*records, prompt, answer]), encoding="utf-8")
        grown = import_claude_code(store, [path])
        assert (grown.added, grown.changed) == (4, 0)  # the run's end, a run, the prompt, the answer
        assert [(e.event_id, e.hash) for e in store.read_all()][:len(stored)] == stored
        assert _answers(store)[-1]["stop_sequence"] == "###"
        assert import_claude_code(store, [path]).added == 0
        store.verify()


def test_a_field_the_log_refuses_is_left_out_and_counted_not_refusing_the_session(tmp_path: Path) -> None:
    """An earlier release passed over a stop_sequence that is no text: the session it imported
    must not be refused now."""
    records = [json.loads(line) for line in (FIXTURES / "cc-fields.jsonl").read_text(encoding="utf-8").splitlines()]
    records[-1]["message"]["stop_sequence"] = 5
    path = tmp_path / "cc-fields.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with Store(tmp_path / "t.db") as store:
        summary = import_claude_code(store, [path])
        assert summary.skipped["response fields refused"] == 1 and summary.assistant_messages == 2
        last = _answers(store)[-1]
    assert "stop_sequence" not in last and last["stop_reason"] == "stop_sequence"
    # Only the field refused is left out: the response's others are kept, as a live turn keeps them.
    assert last["container"] == {"id": "container_1", "expires_at": "2025-07-01T11:00:00Z"}
    assert last["extra_fields"] == {"speed_tier": "fast"}
