"""Event models: validation names the bad field, content blocks are checked eagerly against
the anthropic SDK's types, old schema versions are upcast, schema/ matches the models."""

from __future__ import annotations

from pathlib import Path

import pytest

import threadlog
from eventstore import CATALOGUE, InvalidEvent, Store
from eventstore import events as events_module
from eventstore.content import block_types
from eventstore.schema_files import render
from tests.backends import dump

ROOT = Path(__file__).resolve().parent.parent


def message(content: object, role: str = "user") -> dict[str, object]:
    return {"type": "message.appended", "data": {"role": role, "content": content}}


BAD = [
    ({"type": "nope"}, "events[0].type", "unknown event type"),
    ({"type": "message.appended", "data": {"role": "bot", "content": "x"}}, "events[0].data.role", "user"),
    (message([]), "events[0].data.content", "non-empty"),
    (message([{"type": "text"}]), "events[0].data.content[0].text", "required"),
    (message([{"type": "bogus", "x": 1}]), "events[0].data.content[0].type", "unknown content block type"),
    (message(["plain"]), "events[0].data.content[0]", "must be an object"),
    (message([{"type": "image", "source": {"type": "base64", "media_type": "image/png"}}]), "events[0].data.content[0].source.data", "required"),
    # Nested lists the SDK types as Iterable: checked at append time, not lazily.
    (message([{"type": "text", "text": "x", "citations": [{"type": "char_location"}]}]), "events[0].data.content[0].citations[0]", ""),
    (message([{"type": "tool_use", "id": "t", "name": "n", "input": {}}], role="user"), "events[0].data.content", "assistant"),
    (message([{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]), "events[0].data.content", "not pending"),
    ({"type": "message.appended", "data": {"role": "user", "content": "x", "colour": 1}}, "events[0].data.colour", "Extra"),
    ({"type": "run.finished", "data": {"run_id": "r", "status": "meh"}}, "events[0].data.status", ""),
    ({"type": "todos.set", "data": {"todos": [{"status": "pending"}]}}, "events[0].data.todos[0].content", "required"),
    ({"type": "message.appended", "data": {"role": "user", "content": "x"}, "meta": {"origin": "elsewhere"}}, "events[0].meta.origin", ""),
    ({"type": "message.appended", "data": {"role": "user", "content": "x"}, "extra": 1}, "events[0].extra", "unknown key"),
    ({"type": "message.appended", "data": ["x"]}, "events[0].data", "object"),
    ({"type": "metadata.set", "data": {"patch": {"x": float("nan")}}}, "events[0].data", "JSON"),
    ({"type": "title.set", "data": {"title": "\ud800"}}, "events[0].data", "UTF-8"),
    ({"type": "compaction.recorded", "data": {"summary": "s", "through_offset": 99}}, "events[0].data.through_offset", "past"),
    # An offset is an int: pydantic's lax mode stored true, "1" or 1.0 as 1.
    ({"type": "compaction.recorded", "data": {"summary": "s", "through_offset": True}}, "events[0].data.through_offset",
     "must be an offset (an integer), not bool True"),
    ({"type": "compaction.recorded", "data": {"summary": "s", "through_offset": "1"}}, "events[0].data.through_offset",
     "must be an offset (an integer), not str '1'"),
    ({"type": "compaction.recorded", "data": {"summary": "s", "through_offset": 1.0}}, "events[0].data.through_offset",
     "not float"),
    ({"type": "langgraph.deleted", "data": {"checkpoint_ids": ["c"], "reason": "prune", "at": {"c": ["s", "2"]}}},
     "events[0].data.at.c[1]", "must be an offset (an integer), not str"),
    # A deleted checkpoint's offset is bounded as every offset: none below 0, none past 2^62.
    ({"type": "langgraph.deleted", "data": {"checkpoint_ids": ["c"], "reason": "prune", "at": {"c": ["s", -1]}}},
     "events[0].data.at.c[1]", "must be an offset >= 0, not -1"),
    ({"type": "langgraph.deleted", "data": {"checkpoint_ids": ["c"], "reason": "prune", "at": {"c": ["s", 10**30]}}},
     "events[0].data.at.c[1]", "is too large: an offset is at most 4611686018427387904"),
    ({"type": "message.appended", "data": {"role": "user", "content": "x"}, "meta": {"request": {
        "digest": "sha256:" + "0" * 64, "model": "m", "max_tokens": 1, "passages": {"1": [[True, 0]]}}}},
     "events[0].meta.request.passages", "not bool True"),
    # An interrupt id is printed (`threadlog interrupt list`) and shown: an id, as every other.
    ({"type": "interrupt.raised", "data": {"interrupt_id": ""}}, "events[0].data.interrupt_id", "1 to 200 characters"),
    ({"type": "interrupt.raised", "data": {"interrupt_id": "ask\x1b]0;pwned\x07"}}, "events[0].data.interrupt_id", "control character"),
    ({"type": "interrupt.raised", "data": {"interrupt_id": "x" * 100_000}}, "events[0].data.interrupt_id", "(100000 characters)"),
    ({"type": "interrupt.raised", "data": {"interrupt_id": 7}}, "events[0].data.interrupt_id", "string"),
    ({"type": "interrupt.resolved", "data": {"interrupt_id": "x" * 100_000}}, "events[0].data.interrupt_id", "not pending"),
    ({"type": "interrupt.cancelled", "data": {"interrupt_id": "", "reason": "r"}}, "events[0].data.interrupt_id", "not pending"),
]


@pytest.mark.parametrize("event, field, words", BAD, ids=[b[1] + ":" + (b[2] or "x") for b in BAD])
def test_invalid_event_names_the_field(store: Store, event: dict[str, object], field: str, words: str) -> None:
    t = store.create_thread()
    before = dump(store)
    with pytest.raises(InvalidEvent) as info:
        store.append(t, [event])
    assert info.value.field.startswith(field), info.value.field
    assert words.lower() in str(info.value).lower()
    assert "x" * 100 not in str(info.value)  # a huge value is shown cut short
    assert dump(store) == before


def test_every_sdk_block_type_is_known() -> None:
    assert {"text", "image", "document", "thinking", "redacted_thinking", "tool_use", "tool_result", "compaction"} <= set(block_types())


def test_blocks_keep_fields_the_sdk_type_does_not_list(store: Store) -> None:
    t = store.create_thread()
    block = {"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}, "caller": {"type": "direct"}}
    assert store.append_message(t, "assistant", [block]).data["content"] == [block]


def test_upcaster_chain_runs_on_read(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row stored at an older schema version is upcast through every step to the current one."""
    t = store.create_thread()
    store.append(t, [{"type": "title.set", "data": {"title": "old"}}])

    class TitleSetV3(events_module.TitleSet):
        schema_version = 3

    monkeypatch.setitem(CATALOGUE, "title.set", TitleSetV3)
    monkeypatch.setitem(events_module.UPCASTERS, ("title.set", 1), lambda d: {"title": d["title"], "v2": True})
    monkeypatch.setitem(events_module.UPCASTERS, ("title.set", 2), lambda d: {**d, "title": d["title"].upper()})
    event = store.event_at(t, 1)
    assert (event.data, event.schema_version) == ({"title": "OLD", "v2": True}, 3)


def test_schema_dir_matches_the_models() -> None:
    """Regenerate with `python -m eventstore.schema_files` when this fails."""
    files = render()
    assert {f"events/{t}.json" for t in CATALOGUE} <= set(files)
    for name, content in files.items():
        assert (ROOT / "schema" / name).read_text(encoding="utf-8") == content, f"schema/{name} is stale"
    on_disk = {p.relative_to(ROOT / "schema").as_posix() for p in (ROOT / "schema").rglob("*") if p.is_file()}
    assert on_disk == set(files)


def test_public_names_are_pinned() -> None:
    """The facade's surface: a name added or removed here is an API change, on purpose."""
    assert sorted(threadlog.__all__) == sorted([
        "Store", "StoreError", "ThreadNotFound", "ConcurrencyError", "ForkRefused", "InvalidEvent",
        "IntegrityError", "SchemaError", "OldPagesKept", "Locked", "Disconnected", "Claimed", "Event", "RecordedEvent", "ThreadInfo",
        "CompactionRecorded", "InterruptCancelled", "InterruptRaised", "InterruptResolved",
        "MessageAppended", "MetadataSet", "RunFinished", "RunStarted", "TitleSet", "TodosSet",
        "thread_state", "ThreadState", "Message", "save_snapshot", "drop_snapshots",
        "display_rows", "Row", "transcript", "write_transcript", "fork_with_transcript",
        "transcripts_holding", "NoteTranscript",
        "lineage", "blame", "diff", "LineageEntry", "BlameEntry", "Diff", "DiffSide",
        "import_claude_code", "import_events", "import_event_files", "import_pi", "import_swe_agent", "ImportSummary", "BadLine", "ImportConflict",
        "follow_claude_code", "follow_files",
        "export_events", "export_all", "export_markdown",
        "anthropic_request", "check_request", "usage", "Usage",
        "run_turn", "rerun", "resolve_interrupt", "cancel_interrupt", "Interrupt", "Turn", "refuse_long_waits",
        "search", "SearchHit", "update_index", "rebuild_index", "transcript_tools",
        "report", "ReportRefused", "questions", "Question", "FORK_BOILERPLATE",
    ])
    assert all(hasattr(threadlog, name) for name in threadlog.__all__)
