"""A pi model call that was aborted or failed before it gave anything (an assistant message
with no content, `stopReason` `aborted` or `error`, usually with an `errorMessage`) is a run
that ended `cancelled` or `error`: it shows in the thread, and the request leaves it out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from messages_api import MessagesAPI, message
from threadlog import Store, import_pi, thread_state
from threadlog.cli import cli
from projections import validate_request

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FAILED = FIXTURES / "pi-failed.jsonl"  # three failed turns, the last one at the end of the session
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
LEFT_OUT = "failed turn an earlier import left out"
BAD_REQUEST = '400 {"type":"error","error":{"type":"invalid_request_error","message":"bad"}}'


def _failed(path: Path) -> list[dict[str, Any]]:
    """The messages of `path` that are failed turns with nothing in them, in the file's order."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r["message"] for r in records if r.get("type") == "message" and r["message"].get("role") == "assistant"
            and not r["message"].get("content") and r["message"].get("stopReason") in ("aborted", "error")]


def _runs(store: Store, thread: str) -> list[tuple[str, str | None]]:
    return [(e.data["status"], e.data.get("error")) for e in store.read(thread) if e.type == "run.finished"]


def test_a_failed_turn_shows_as_a_run_that_ended_so(tmp_path: Path) -> None:
    """It was left out as an empty message: nothing said the model call was cut off or failed."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        summary = import_pi(store, [FAILED])
        thread = summary.thread_ids[0]
        assert _runs(store, thread) == [("cancelled", "Request was aborted."), ("error", BAD_REQUEST),
                                        ("cancelled", "Request was aborted.")]
        assert summary.failed_turns == 3 and "empty message" not in summary.skipped
        ended = [e for e in store.read(thread) if e.type == "run.finished"]
        assert ended[1].meta["source"]["flags"]["stopReason"] == "error"
        assert ended[1].meta["event_id"] == "pi:failed:x2"
        assert import_pi(store, [FAILED]).added == 0
        store.verify()
    log = CliRunner().invoke(cli, ["--db", db, "log", thread, "--no-pager"])
    assert log.exit_code == 0, log.output
    assert "run_id=x1 cancelled: Request was aborted." in log.output
    assert "run_id=x2 error: 400" in log.output
    imported = CliRunner().invoke(cli, ["--db", db, "import", "pi", str(FAILED)])
    assert "3 failed turn(s)" in imported.output


@pytest.mark.parametrize("reason", [["aborted"], {"error": 1}, 7, None])
def test_a_stop_reason_that_is_no_text_is_no_failed_turn(tmp_path: Path, reason: Any) -> None:
    """An empty answer whose stopReason is a list or an object (a hand edit, another writer):
    left out as an empty message, as before, not a crash of the whole import that blamed the
    store ("a stored event does not have the shape its type requires")."""
    records = [json.loads(line) for line in FAILED.read_text(encoding="utf-8").splitlines()]
    records[2]["message"]["stopReason"] = reason
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with Store(tmp_path / "t.db") as store:
        summary = import_pi(store, [edited])
        assert summary.failed_turns == 2 and summary.skipped["empty message"] == 1
        assert [status for status, _ in _runs(store, summary.thread_ids[0])] == ["error", "cancelled"]


def test_the_request_after_failed_turns_holds_no_empty_assistant_message(tmp_path: Path) -> None:
    """`threadlog request` gives what the SDK sends: no assistant message for a failed turn."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        thread = import_pi(store, [FAILED]).thread_ids[0]
    request = CliRunner().invoke(cli, ["--db", db, "request", thread, "--model", "claude-test-1"])
    assert request.exit_code == 0, request.output
    kwargs = json.loads(request.output)
    validate_request(kwargs)
    with MessagesAPI() as api:
        api.reply_json(message([{"type": "text", "text": "ok"}]))
        api.client().messages.create(**kwargs)
        sent = api.requests[0].json
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert all(m["content"] for m in sent["messages"])
    assert "aborted" not in api.requests[0].body.decode() and "invalid_request_error" not in api.requests[0].body.decode()


@pytest.mark.skipif(not SHARED.is_dir(), reason="the gathered data folder is not beside this checkout")
def test_every_failed_turn_of_the_real_sessions_is_recorded(mem: Store) -> None:
    """27 in the two gathered pi sessions, among them the API's 400 for tool calls without results."""
    files = sorted((SHARED / "pi-mono").glob("*.jsonl"))
    summary = import_pi(mem, files)
    assert summary.failed_turns == sum(len(_failed(path)) for path in files) == 27
    for path, thread in zip(files, summary.thread_ids):
        expected = [({"aborted": "cancelled", "error": "error"}[m["stopReason"]], m.get("errorMessage"))
                    for m in _failed(path)]
        assert _runs(mem, thread) == expected
        validate_request(_request(mem, thread))
    assert import_pi(mem, files).added == 0
    mem.verify()


def _request(store: Store, thread: str) -> dict[str, Any]:
    from threadlog import anthropic_request

    kwargs = anthropic_request(store, thread, model="m", max_tokens=10)
    assert all(m["content"] for m in kwargs["messages"])
    return kwargs


def test_a_session_the_release_that_left_them_out_imported_goes_on_as_stored(tmp_path: Path) -> None:
    """tests/fixtures/pi-failed.db: the session imported when failed turns were left out. The
    log cannot take the two inside the stored thread: they stay left out (counted), and the
    import is no rewritten file; the one at the stored end, and those the file grew by, are recorded."""
    db = tmp_path / "pi.db"
    shutil.copy(FIXTURES / "pi-failed.db", db)
    lines = FAILED.read_text().splitlines(keepends=True)
    path = tmp_path / "session.jsonl"
    path.write_text("".join(lines))
    with Store(db) as store:
        (thread,) = [info.id for info in store.all_threads()]
        before = [e.hash for e in store.read(thread)]
        summary = import_pi(store, [path])
        assert (summary.added, summary.changed, summary.skipped[LEFT_OUT], summary.failed_turns) == (2, 0, 2, 1)
        assert [e.hash for e in store.read(thread)][:len(before)] == before
        assert _runs(store, thread) == [("cancelled", "Request was aborted.")]
        assert import_pi(store, [path]).added == 0
        grown = [{"type": "message", "id": "u5", "parentId": "x4", "timestamp": "2025-07-01T10:00:00.000Z",
                  "message": {"role": "user", "content": [{"type": "text", "text": "go on"}]}},
                 {"type": "message", "id": "x5", "parentId": "u5", "timestamp": "2025-07-01T10:00:00.000Z",
                  "message": {"role": "assistant", "content": [], "stopReason": "error", "errorMessage": "terminated"}}]
        path.write_text("".join(lines) + "".join(json.dumps(entry) + "\n" for entry in grown))
        summary = import_pi(store, [path])
        assert (summary.added, summary.changed, summary.skipped[LEFT_OUT]) == (3, 0, 2)
        assert _runs(store, thread) == [("cancelled", "Request was aborted."), ("error", "terminated")]
        assert import_pi(store, [path]).added == 0
        store.verify()


def test_a_failed_turn_shows_in_rows_transcript_and_the_web_viewer_with_its_error(tmp_path: Path) -> None:
    """A run that ended in error or was cancelled showed only in `log`: a failed model call was
    nowhere in the rows, the transcript or the viewer. Its error is the source's text: shown
    escaped (an ANSI escape, a bidi override) wherever it shows."""
    starlette = pytest.importorskip("starlette.testclient")
    from threadlog.web import create_app

    hostile = "boom \x1b[31mred\u202e"
    lines = FAILED.read_text().splitlines(keepends=True)
    grown = [{"type": "message", "id": "u5", "parentId": "x4", "timestamp": "2025-07-01T10:00:00.000Z",
              "message": {"role": "user", "content": [{"type": "text", "text": "go on"}]}},
             {"type": "message", "id": "x5", "parentId": "u5", "timestamp": "2025-07-01T10:00:00.000Z",
              "message": {"role": "assistant", "content": [], "stopReason": "error", "errorMessage": hostile}}]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(lines) + "".join(json.dumps(entry) + "\n" for entry in grown))
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        thread = import_pi(store, [path]).thread_ids[0]
    runner = CliRunner()
    rows = runner.invoke(cli, ["--db", db, "rows", thread, "--no-pager"])
    assert rows.exit_code == 0, rows.output
    assert "run cancelled: Request was aborted." in rows.output and "run error: 400" in rows.output
    assert "\x1b" not in rows.output and "\u202e" not in rows.output and "run error: boom" in rows.output
    as_json = json.loads(runner.invoke(cli, ["--db", db, "rows", thread, "--json"]).output)
    assert [(r["status"], r.get("text")) for r in as_json if r["kind"] == "run"][:2] == [
        ("cancelled", "Request was aborted."), ("error", BAD_REQUEST)]
    transcript = runner.invoke(cli, ["--db", db, "transcript", thread, "--no-pager"])
    assert transcript.exit_code == 0, transcript.output
    assert transcript.output.count("## run cancelled\n\n    Request was aborted.") == 2
    assert "## run error\n\n    400 " in transcript.output
    assert "\x1b" not in transcript.output and "\u202e" not in transcript.output
    assert "- messages: 6 (" in transcript.output  # a run is no message
    with starlette.TestClient(create_app(db), base_url="http://127.0.0.1") as client:
        page = client.get(f"/thread?id={thread}").text
    assert page.count('class="card run"') == 4 and "Request was aborted." in page and "invalid_request_error" in page
    assert "\x1b" not in page and "\u202e" not in page


def test_show_names_how_the_last_run_ended(tmp_path: Path) -> None:
    """A failed or cancelled turn leaves the thread idle: `show` said nothing of it, so the
    thread read as one whose last turn went well."""
    db = str(tmp_path / "t.db")
    with Store(db) as store:
        thread = import_pi(store, [FAILED]).thread_ids[0]
        state = thread_state(store, thread)
        assert state.status == "idle"
        assert state.last_run == {"run_id": "x4", "status": "cancelled", "offset": state.length - 1,
                                  "error": "Request was aborted."}
        assert thread_state(store, thread, at=7).last_run == {"run_id": "x2", "status": "error", "offset": 6,
                                                               "error": BAD_REQUEST}
        store.append(thread, [{"type": "run.started", "data": {"run_id": "r9"}},
                              {"type": "run.finished", "data": {"run_id": "r9", "status": "ok"}}])
    shown = CliRunner().invoke(cli, ["--db", db, "show", thread, "--at", "12"])
    assert shown.exit_code == 0, shown.output
    assert "last run    cancelled at offset 11 (run_id x4): Request was aborted." in shown.output.splitlines()
    as_json = CliRunner().invoke(cli, ["--db", db, "show", thread, "--json"])
    assert json.loads(as_json.output)["last_run"] == {"run_id": "r9", "status": "ok", "offset": 13}
