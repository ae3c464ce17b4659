"""Claude Code session files a newer release wrote: a real session with what a later release may
add to it. Each is imported faithfully, what the store cannot hold left out and counted, and
every request built from the threads stays one the API takes."""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import Store, anthropic_request
from projections import validate_request
from threadlog.cli import cli

SESSION = Path(__file__).resolve().parent / "fixtures" / "claude-code" / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
Lines = list[dict[str, Any]]


def _records() -> Lines:
    return [json.loads(line) for line in SESSION.read_text().splitlines() if line.strip()]


def _write(tmp_path: Path, records: Lines, name: str = SESSION.name) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    quiet = time.time() - 30 * 24 * 3600  # a session Claude Code closed long ago: taken as it is
    os.utime(path, (quiet, quiet))
    return path


def _import(tmp_path: Path, path: Path, *flags: str) -> Any:
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.db"), "import", "claude-code", str(path), *flags])
    assert result.exit_code == 0, result.output
    return result


def _index(records: Lines, test: Callable[[dict[str, Any]], bool], nth: int = 0) -> int:
    return [i for i, record in enumerate(records) if test(record)][nth]


def _blocks(record: dict[str, Any]) -> list[dict[str, Any]]:
    content = record["message"]["content"]
    return content if isinstance(content, list) else []


def _calls(record: dict[str, Any]) -> bool:
    return record["type"] == "assistant" and any(b["type"] == "tool_use" for b in _blocks(record))


def _results(record: dict[str, Any]) -> bool:
    return record["type"] == "user" and any(b["type"] == "tool_result" for b in _blocks(record))


def _prompt(record: dict[str, Any]) -> bool:
    return record["type"] == "user" and isinstance(record["message"]["content"], str)


def _requests(db: Path) -> list[dict[str, Any]]:
    """The request of every thread after each of its assistant messages and at its end, each
    checked against the SDK's request type, with no message left empty and every tool call
    answered in the message after it."""
    out = []
    with Store(db) as store:
        for info in store.threads():
            offsets = [e.offset + 1 for e in store.read(info.id) if e.type == "message.appended" and e.data["role"] == "assistant"]
            for at in [*offsets, None]:
                kwargs = anthropic_request(store, info.id, at, model="claude-test-1", max_tokens=10)
                validate_request(kwargs)
                messages = kwargs["messages"]
                assert all(message["content"] for message in messages)
                for before, after in zip(messages, messages[1:]):
                    calls = [b["id"] for b in before["content"] if before["role"] == "assistant" and b["type"] == "tool_use"]
                    answers = [b["tool_use_id"] for b in after["content"] if b["type"] == "tool_result"]
                    assert calls == answers[:len(calls)], (calls, answers)
                out.append(kwargs)
    return out


def test_blocks_of_a_type_the_sdk_does_not_know_are_left_out_and_counted(tmp_path: Path) -> None:
    """One block of a type the SDK does not know (a newer release's) refused its line, and so
    the whole session: it is left out, counted by type as the pi importer counts one, and the
    rest imported; the tool loop it sat in keeps its pairs, and a response with nothing else
    is no message (not one sent empty)."""
    records = _records()
    call = _index(records, _calls)
    records[call]["message"]["content"].insert(0, {"type": "server_widget", "payload": {"x": 1}})
    prompt = _index(records, _prompt)
    records[prompt]["message"]["content"] = [{"type": "text", "text": records[prompt]["message"]["content"]},
                                             {"type": "voice_note", "audio": "..."}]
    result = records[_index(records, _results)]["message"]["content"][0]
    result["content"] = [{"type": "text", "text": "read it"}, {"type": "voice_note", "audio": "..."}]
    # A whole response (its text and thinking lines) of blocks of a new type.
    said = records[_index(records, lambda r: r["type"] == "assistant" and _blocks(r)[0]["type"] == "text", 3)]["message"]["id"]
    for record in records:
        if record["type"] == "assistant" and record["message"]["id"] == said:
            record["message"]["content"] = [{"type": "server_widget", "payload": 2}]
    path = _write(tmp_path, records)
    summary = json.loads(_import(tmp_path, path, "--json").stdout)
    left_out = {kind: n for kind, n in summary["skipped"].items() if kind.startswith("block/")}
    assert left_out == {"block/server_widget": 1 + sum(r["type"] == "assistant" and r["message"]["id"] == said for r in records),
                        "block/voice_note": 2}
    assert summary["skipped"]["empty message"] == 1 and summary["bad"] == []
    text = CliRunner().invoke(cli, ["--db", str(tmp_path / "t2.db"), "import", "claude-code", str(path)])
    assert "block/voice_note 2" in text.stdout, text.output

    requests = _requests(tmp_path / "t.db")
    sent = json.dumps(requests)
    assert "server_widget" not in sent and "voice_note" not in sent
    last = max(requests, key=lambda kwargs: len(kwargs["messages"]))  # the main thread at its end
    calls = [b["id"] for m in last["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert records[call]["message"]["content"][1]["id"] in calls
    kept = [b for m in last["messages"] for b in m["content"] if b["type"] == "tool_result" and b["tool_use_id"] == result["tool_use_id"]]
    assert [b["text"] for b in kept[0]["content"]] == ["read it"]


@pytest.mark.parametrize("replaced", ["tool_use", "tool_result"])
def test_a_tool_call_or_result_of_a_new_type_leaves_no_half_of_its_pair(tmp_path: Path, replaced: str) -> None:
    """A call written as a block of a new type: its result answers nothing the thread holds and
    is left out too; a result of a new type: its call goes unanswered, which the request leaves
    out. Either way each request holds whole pairs only."""
    records = _records()
    call = records[_index(records, _calls)]
    answer = records[_index(records, _results)]
    use = next(b for b in _blocks(call) if b["type"] == "tool_use")
    if replaced == "tool_use":
        call["message"]["content"] = [{**use, "type": "tool_use_v2"}]
    else:
        answer["message"]["content"] = [{**answer["message"]["content"][0], "type": "tool_result_v2"}]
    path = _write(tmp_path, records)
    summary = json.loads(_import(tmp_path, path, "--json").stdout)
    assert summary["skipped"][f"block/{replaced}_v2"] == 1
    assert summary["skipped"]["empty message"] == 1  # the result's message, left with nothing
    assert summary["skipped"].get("tool_result without its call", 0) == (replaced == "tool_use")
    for kwargs in _requests(tmp_path / "t.db"):
        assert use["id"] not in json.dumps(kwargs)


def test_a_compaction_summary_with_a_block_of_a_new_type_keeps_its_text(tmp_path: Path) -> None:
    records = _records()
    last = records[_index(records, lambda r: r["type"] in ("user", "assistant"), -1)]
    boundary = {"type": "system", "subtype": "compact_boundary", "uuid": "b0000000-0000-4000-8000-000000000001", "parentUuid": None,
                "logicalParentUuid": last["uuid"], "sessionId": last["sessionId"], "timestamp": last["timestamp"],
                "content": "Conversation compacted", "compactMetadata": {"trigger": "manual", "preTokens": 10}}
    summary_line = {"type": "user", "uuid": "b0000000-0000-4000-8000-000000000002", "parentUuid": boundary["uuid"],
                    "isCompactSummary": True, "sessionId": last["sessionId"], "timestamp": last["timestamp"],
                    "message": {"role": "user", "content": [{"type": "text", "text": "Summary: read the notes."},
                                                            {"type": "summary_sources", "uuids": [last["uuid"]]}]}}
    prompt = {**copy.deepcopy(summary_line), "uuid": "b0000000-0000-4000-8000-000000000003", "parentUuid": summary_line["uuid"],
              "isCompactSummary": False, "message": {"role": "user", "content": "go on"}}
    path = _write(tmp_path, [*records, boundary, summary_line, prompt])
    summary = json.loads(_import(tmp_path, path, "--json").stdout)
    assert (summary["compactions"], summary["skipped"]["block/summary_sources"]) == (1, 1)
    with Store(tmp_path / "t.db") as store:
        (compaction,) = [e for info in store.threads() for e in store.read(info.id) if e.type == "compaction.recorded"]
    assert compaction.data["summary"] == "Summary: read the notes."
    _requests(tmp_path / "t.db")


def test_a_block_only_a_tool_result_takes_is_kept_there(tmp_path: Path) -> None:
    """Claude Code 2.1.114 answers a tool search with `tool_reference` blocks, a type the SDK
    knows inside a tool result only: kept, not left out as unknown."""
    records = _records()
    result = records[_index(records, _results)]["message"]["content"][0]
    result["content"] = [{"type": "tool_reference", "tool_name": "TaskCreate"}, {"type": "audio", "data": "..."}]
    path = _write(tmp_path, records)
    summary = json.loads(_import(tmp_path, path, "--json").stdout)
    assert {kind: n for kind, n in summary["skipped"].items() if kind.startswith("block/")} == {"block/audio": 1}
    sent = [b for kwargs in _requests(tmp_path / "t.db") for m in kwargs["messages"] for b in m["content"]
            if b["type"] == "tool_result" and b["tool_use_id"] == result["tool_use_id"]]
    assert sent and all(b["content"] == [{"type": "tool_reference", "tool_name": "TaskCreate"}] for b in sent)


def test_a_block_type_name_megabytes_long_is_counted_under_a_short_name(tmp_path: Path) -> None:
    """The type is the file's text: a 200,000-character one was printed whole, in the summary
    line and as a `--json` key."""
    records = _records()
    at = _index(records, lambda r: r["type"] == "assistant")
    huge = "voice_note" + "x" * 200_000
    records[at]["message"]["content"] = [*_blocks(records[at]), {"type": huge, "data": "…"}, {"type": huge + "y"}]
    path = _write(tmp_path, records)
    text = _import(tmp_path, path).output
    (line,) = [line for line in text.splitlines() if line.startswith("lines without conversation")]
    assert len(line) < 300 and f"block/{huge[:93]}… 2" in line
    skipped = json.loads(_import(tmp_path, _write(tmp_path, records, "again.jsonl"), "--json").output)["skipped"]
    assert skipped[f"block/{huge[:93]}…"] == 2 and all(len(kind) <= 100 for kind in skipped)


def test_a_pi_session_of_huge_kinds_is_refused_at_its_header_in_one_short_line(tmp_path: Path) -> None:
    """A pi session given to `import claude-code` was refused naming the kinds of its lines:
    each whole, so two 200,000-character types made a 400 kB message, which the error line
    clipped in the middle, counts and all. It is refused at its header line, whatever follows."""
    huge = "x" * 200_000
    path = tmp_path / "pi.jsonl"
    kinds = ["session", huge + "a", huge + "b", "zebra"]
    path.write_text("".join(json.dumps({"type": kind, "id": str(n)}) + "\n" for n, kind in enumerate(kinds)))
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.db"), "import", "claude-code", str(path)])
    assert result.exit_code == 1 and "threadlog import pi" in result.output
    assert result.stderr.startswith(f"error: {path}:1: a pi session's header") and len(result.stderr) < 1_000, result.stderr[:300]
