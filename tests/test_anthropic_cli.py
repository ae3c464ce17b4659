"""`threadlog request / ask / rerun / usage` against a local Messages API, over HTTP: the first
test, and those of signals, pipes and races, run each command as a process of its own; the
others run it in this process (`threadlog`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner

from eventstore import Store
from projections import thread_state, validate_request
from threadlog.cli import cli

from messages_api import MessagesAPI, Reply, message


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def threadlog(*args: str, db: Path, env: dict[str, str] | None = None, process: bool = False) -> Ran:
    """`threadlog --db DB ARGS`, with only `env`'s ANTHROPIC_ variables set: in a process of its
    own (`process`), as a user runs it, or else in this one (each process imports the SDK, ~3 s
    here). In this process an exception the CLI did not turn into an exit status is raised."""
    if process:
        exe = Path(sys.executable).with_name("threadlog")
        clean = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        done = subprocess.run([str(exe), "--db", str(db), *args], capture_output=True, text=True, env={**clean, **(env or {})},
                              timeout=120)
        return Ran(done.returncode, done.stdout, done.stderr)
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("ANTHROPIC_")}
    result = CliRunner().invoke(cli, ["--db", str(db), *args], env={**unset, **(env or {})}, catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


def test_ask_records_a_turn_and_request_check_proves_it(tmp_path: Path, api: MessagesAPI) -> None:
    db = tmp_path / "t.db"
    t = threadlog("new", "--system", "You plan trips.", "--model", "claude-test-1", db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    api.reply_sse(message([{"type": "text", "text": "Take the 9:04 TGV."}]))
    done = threadlog("ask", t, "Train to Lyon?", "--stream", db=db, env=env, process=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Take the 9:04 TGV.\n"
    headers = api.requests[0].headers
    assert "test" in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))

    api.reply_json(message([{"type": "text", "text": "Hotel Carlton."}]))
    done = threadlog("ask", t, "And a hotel?", db=db, env=env)
    assert done.stdout == "Hotel Carlton.\n"

    check = threadlog("request", t, "--check", db=db, process=True)
    assert check.returncode == 0, check.stderr
    assert [line.split()[0] for line in check.stdout.splitlines()] == ["ok", "ok"]
    at_second = threadlog("request", t, "--at", "7", "--check", "--json", db=db)
    assert json.loads(at_second.stdout)[0]["ok"] is True

    shown = threadlog("request", t, db=db)
    kwargs = json.loads(shown.stdout)
    validate_request(kwargs)
    assert [m["role"] for m in kwargs["messages"]] == ["user", "assistant", "user", "assistant"]

    with Store(db) as store:
        first_question = next(e for e in store.read(t) if e.type == "message.appended")
        store.redact(first_question.position, reason="personal data", actor="ops")
    broken = threadlog("request", t, "--check", db=db)
    assert broken.returncode == 1
    lines = broken.stdout.splitlines()
    assert all(line.startswith("MISMATCH") for line in lines)
    assert all(f"offset {first_question.offset}" in line.split("redacted")[-1] for line in lines)

    usage = json.loads(threadlog("usage", t, "--json", db=db).stdout)
    assert usage["total"]["messages"] == 2 and usage["total"]["input_tokens"] == 20
    table = threadlog("usage", t, db=db).stdout
    assert "cache read" in table and "total" in table


def test_ask_with_max_tokens_at_or_below_the_thinking_budget_is_refused_before_anything_is_written(tmp_path: Path,
                                                                                                  api: MessagesAPI) -> None:
    """The turn started (the question recorded, exit 3) and the API refused the request
    ("max_tokens must be greater than thinking.budget_tokens"); a retry asked again."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", "--thinking-budget", "2048", db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    with Store(db) as store:
        before = store.last_position()
    done = threadlog("ask", t, "Train to Lyon?", "--max-tokens", "2048", db=db, env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (f"error: --max-tokens 2048 is not more than the thinking budget of thread '{t}' (budget_tokens 2048), "
                           "which the API refuses unless the request is sent with the interleaved-thinking beta; pass more "
                           "than 2048, leave it out for 6144, or send the header anthropic-beta: interleaved-thinking-2025-05-14\n")
    with Store(db) as store:
        assert store.last_position() == before
    assert api.requests == []
    api.reply_json(message([{"type": "thinking", "thinking": "Trains.", "signature": "sig"}, {"type": "text", "text": "9:04."}]))
    done = threadlog("ask", t, "Train to Lyon?", "--max-tokens", "2049", db=db, env=env)
    assert done.returncode == 0 and done.stdout == "9:04.\n", done.stderr
    assert api.requests[0].json["max_tokens"] == 2049


def test_ask_sent_with_the_interleaved_thinking_beta_takes_max_tokens_at_or_below_the_budget(tmp_path: Path,
                                                                                           api: MessagesAPI) -> None:
    """As the refusal above says: with the beta (the SDK sends ANTHROPIC_CUSTOM_HEADERS) the
    budget spans the turn's every block, and the API takes it; the turn is checked as sent."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", "--thinking-budget", "2048", db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url,
           "ANTHROPIC_CUSTOM_HEADERS": "anthropic-beta: interleaved-thinking-2025-05-14"}
    api.reply_json(message([{"type": "thinking", "thinking": "Trains.", "signature": "sig"}, {"type": "text", "text": "9:04."}]))
    done = threadlog("ask", t, "Train to Lyon?", "--max-tokens", "1024", db=db, env=env)
    assert done.returncode == 0 and done.stdout == "9:04.\n", done.stderr
    assert api.requests[0].json["max_tokens"] == 1024
    assert api.requests[0].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert threadlog("request", t, "--check", db=db).stdout.split()[0] == "ok"


def test_ask_on_a_note_fork_offers_the_tools_that_read_the_parents_transcript(tmp_path: Path, api: MessagesAPI) -> None:
    """A note fork's model is told to read its parent's transcript; `ask` sent no tool, so it
    could not, and could only guess at the earlier context."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    threadlog("append", t, "--role", "user", "--text", "The code word is heliotrope.", db=db)
    threadlog("append", t, "--role", "assistant", "--text", "Noted.", db=db)
    fork = threadlog("fork", t, "--context", "note", "--transcript", str(tmp_path / "t.md"), db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    api.reply_json(message([{"type": "tool_use", "id": "toolu_1", "name": "grep_transcript", "input": {"pattern": "code word"}}],
                           stop_reason="tool_use"))
    api.reply_json(message([{"type": "text", "text": "Heliotrope."}]))
    done = threadlog("ask", fork, "What was the code word?", db=db, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Heliotrope.\n"
    assert sorted(tool["name"] for tool in api.requests[0].json["tools"]) == ["grep_transcript", "read_transcript"]
    answered = api.requests[1].json["messages"][-1]["content"][0]
    assert answered["type"] == "tool_result" and "heliotrope" in json.dumps(answered["content"])
    plain = threadlog("ask", t, "And now?", db=db, env=env)  # not a note fork: no tool offered
    assert "tools" not in api.requests[2].json, plain.stderr
    # `threadlog request` shows what `ask` sends: it left the note fork's tools out.
    with Store(db) as store:
        asked = next(e.offset for e in store.read(fork) if "request" in e.meta)  # the first answer: sent at its offset
    shown = threadlog("request", fork, "--at", str(asked), "--json", db=db)
    assert json.loads(shown.stdout) == api.requests[0].json, shown.stderr


def test_a_note_fork_tool_called_with_an_input_it_does_not_take_tells_the_model_and_the_turn_goes_on(tmp_path: Path,
                                                                                                     api: MessagesAPI) -> None:
    """The tools' definitions allow other keys, and a model may send one: the call raised a
    TypeError, which ended the turn (exit 3) where a wrong value is answered to the model."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    threadlog("append", t, "--role", "user", "--text", "The code word is heliotrope.", db=db)
    threadlog("append", t, "--role", "assistant", "--text", "Noted.", db=db)
    fork = threadlog("fork", t, "--context", "note", db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    api.reply_json(message([{"type": "tool_use", "id": "toolu_1", "name": "grep_transcript",
                             "input": {"pattern": "code word", "limit": 5}},
                            {"type": "tool_use", "id": "toolu_2", "name": "read_transcript", "input": {"start": 0, "self": 1}}],
                           stop_reason="tool_use"))
    api.reply_json(message([{"type": "text", "text": "Heliotrope."}]))
    done = threadlog("ask", fork, "What was the code word?", db=db, env=env)
    assert done.returncode == 0 and done.stdout == "Heliotrope.\n", done.stderr
    results = api.requests[1].json["messages"][-1]["content"]
    assert [r["content"] for r in results] == ["error: grep_transcript takes pattern only, not 'limit'",
                                               "error: read_transcript takes start and stop only, not 'self'"]
    assert threadlog("verify", db=db).returncode == 0


def test_a_note_fork_costs_the_same_tokens_whatever_its_parents_size(tmp_path: Path, api: MessagesAPI) -> None:
    """agentty: a note fork carries one fork note, so its first request is as large for a
    parent of a megabyte as for one of two messages; the parent's history is on disk, in a
    transcript bounded to 512 KiB that keeps the latest messages and counts them all."""
    db = tmp_path / "t.db"
    words = "lorem ipsum dolor sit amet " * 40  # about 1 KB a message
    with Store(db) as store:
        small = store.create_thread(model="claude-test-1", system="You help.")
        store.append_message(small, "user", "Decide the cache.")
        store.append_message(small, "assistant", "Drop the cache.")
        large = store.create_thread(model="claude-test-1", system="You help.")
        store.append(large, [{"type": "message.appended", "data": {"role": ("user", "assistant")[i % 2], "content": f"{i}: {words}"}}
                             for i in range(1_000)])
        store.append_message(large, "assistant", "LAST WORD: drop the cache.")
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    bodies = []
    for parent, name in ((small, "s.md"), (large, "l.md")):
        fork = threadlog("fork", parent, "--context", "note", "--transcript", str(tmp_path / name), db=db).stdout.strip()
        api.reply_json(message([{"type": "text", "text": "Noted."}]))
        done = threadlog("ask", fork, "What did we decide?", db=db, env=env)
        assert done.returncode == 0, done.stderr
        bodies.append(api.requests[-1].body)
        sent = api.requests[-1].json["messages"]
        assert len(sent) == 1 and "fork of an earlier" in sent[0]["content"][0]["text"], sent
        assert str(tmp_path / name) in sent[0]["content"][0]["text"]
    assert len(bodies[1]) - len(bodies[0]) < 16, "only the offset in the note differs"  # the ids are as long
    assert b"lorem" not in bodies[1] and b"LAST WORD" not in bodies[1]
    written = (tmp_path / "l.md").read_text(encoding="utf-8")
    assert len(written.encode()) <= 512 * 1024 < 1_000 * len(words)
    assert "- messages: 1001" in written and written.rstrip().endswith("LAST WORD: drop the cache.")
    assert "    0: lorem" not in written and "    999: lorem" in written and "earlier messages elided" in written


def test_ask_whose_stdout_is_closed_records_the_whole_turn_and_says_so(tmp_path: Path, api: MessagesAPI) -> None:
    """`ask --stream` into a pipe whose reader left stopped the turn at its first words: the run
    ended `error`, the answer (paid for) was lost, and the command exited 1 saying nothing. The
    turn is recorded whole; the status is 3 (committed, not printed), and the error says so."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    api.reply_sse(message([{"type": "text", "text": "Take the 9:04 TGV."}]))
    read_end, write_end = os.pipe()
    os.close(read_end)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    done = subprocess.run([sys.executable, "-m", "threadlog", "--db", str(db), "ask", t, "Train to Lyon?", "--stream"],
                          stdout=write_end, stderr=subprocess.PIPE, text=True, env={**clean, **env}, timeout=120)
    os.close(write_end)
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("error: committed: the turn on thread") and done.stderr.count("\n") == 1, done.stderr
    with Store(db) as store:
        events = [(e.type, e.data) for e in store.read(t)]
    assert events[-2][0] == "message.appended" and events[-2][1]["content"] == [{"type": "text", "text": "Take the 9:04 TGV."}]
    assert events[-1][0] == "run.finished" and events[-1][1]["status"] == "ok"


# A refusal, as the SDK's refusal fixture streams it: no text, and the policy's explanation.
REFUSAL = {"type": "refusal", "category": "cyber", "explanation": "This request was refused due to policy."}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("given", "said"), [("", "has no text"), ("Sure, the first step", "is cut short")],
                         ids=["no-text", "part-way"])
def test_ask_answered_by_a_refusal_says_so_and_exits_3(tmp_path: Path, api: MessagesAPI, stream: bool, given: str,
                                                       said: str) -> None:
    """A refused answer printed nothing and exited 0: a blank answer, and a script took it for one.
    A model may also refuse part-way: `ask` printed the start and exited 0, and a script took the
    half answer for the whole. Either way it prints what came, says the model refused, exit 3."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    refused = {**message([{"type": "text", "text": given}], "refusal"), "stop_details": REFUSAL}
    api.reply_sse(refused) if stream else api.reply_json(refused)
    done = threadlog("ask", t, "How do I break into a server?", *(["--stream"] if stream else []), db=db, env=env)
    assert (done.returncode, done.stdout.strip()) == (3, given), done.stderr
    assert done.stderr == (f"error: the answer {said}: the model stopped with stop_reason 'refusal' (cyber: This request "
                           f"was refused due to policy.); the turn is recorded (`threadlog show {t} --last 2` shows it)\n")
    with Store(db) as store:
        events = [(e.type, e.data) for e in store.read(t)]
    assert events[-2][1]["stop_details"] == REFUSAL
    assert events[-1] == ("run.finished", {"run_id": events[-1][1]["run_id"], "status": "ok"})


def test_ask_answered_with_no_text_names_the_stop_reason_and_shows_no_escape_raw(tmp_path: Path, api: MessagesAPI) -> None:
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    api.reply_json(message([], "end_turn"))
    done = threadlog("ask", t, "Anything?", "--json", db=db, env=env)
    assert done.returncode == 3 and json.loads(done.stdout)["text"] == ""
    assert json.loads(done.stdout)["stop_reason"] == "end_turn"  # --json says why as well as stderr
    assert done.stderr.startswith("error: the answer has no text: the model stopped with stop_reason 'end_turn';")
    hostile = {"type": "refusal", "category": None, "explanation": "\x1b[2J\u202egone\x07"}
    api.reply_json({**message([{"type": "text", "text": " "}], "refusal"), "stop_details": hostile})
    done = threadlog("ask", t, "And now?", db=db, env=env)
    assert done.returncode == 3 and done.stderr.count("\n") == 1
    assert "'refusal' (" in done.stderr and "gone" in done.stderr
    assert not {"\x1b", "\u202e", "\x07"} & set(done.stderr), done.stderr


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("reason", "hint"), [
    ("max_tokens", "the answer's token limit was reached (--max-tokens sets it)"),
    ("model_context_window_exceeded", "the thread's history and the answer filled the model's context window: redact its "
                                      "largest events (threadlog redact) or fork it before them (threadlog fork --at), "
                                      "and ask there"),
    ("tool_use", "the answer stopped to call a tool, and holds no tool call"),
    ("a_reason_to_come", "may be cut short: a stop reason this release does not know"),
], ids=["max-tokens", "context-window", "tool-use-without-a-call", "unknown"])
def test_ask_answered_with_text_cut_short_says_why_and_exits_3(tmp_path: Path, api: MessagesAPI, stream: bool, reason: str,
                                                               hint: str) -> None:
    """An answer the API cut off (its token limit, the context window full) or that stopped for a
    reason `ask` does not know printed its start and exited 0, stderr silent: a script took the
    half answer for the whole. It prints what came, names the stop reason and what it means, exit 3;
    the turn is recorded as it came and the next ask works."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    cut = message([{"type": "text", "text": "The first three steps are"}], reason)
    api.reply_sse(cut) if stream else api.reply_json(cut)
    done = threadlog("ask", t, "List the steps.", *(["--stream"] if stream else []), db=db, env=env)
    assert (done.returncode, done.stdout.strip()) == (3, "The first three steps are"), done.stderr
    assert done.stderr == (f"error: the answer is cut short: the model stopped with stop_reason {reason!r} ({hint}); "
                           f"the turn is recorded (`threadlog show {t} --last 2` shows it)\n")
    api.reply_json(cut)
    as_json = threadlog("ask", t, "Go on.", "--json", db=db, env=env)  # --json says why as well as stderr
    assert as_json.returncode == 3 and json.loads(as_json.stdout)["stop_reason"] == reason
    api.reply_json(message([{"type": "text", "text": "All five steps."}]))
    again = threadlog("ask", t, "Whole, please.", db=db, env=env)
    assert (again.returncode, again.stdout, again.stderr) == (0, "All five steps.\n", "")
    assert threadlog("verify", db=db).returncode == 0


def test_request_check_after_ask_on_a_retrieval_fork_proves_it(tmp_path: Path, api: MessagesAPI) -> None:
    """`request` opened the file read-only, and the search index, behind by the answer and the
    run's end written after it caught up, could not catch up: "open it writable once"."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--system", "s", "--model", "claude-test-1", db=db).stdout.strip()
    for i in range(3):
        threadlog("append", t, "--role", "user", "--text", f"note {i} about trains", db=db)
        threadlog("append", t, "--role", "assistant", "--text", f"reply {i} about hotels", db=db)
    fork = threadlog("fork", t, "--context", "note", "--retrieval", "per-turn", db=db).stdout.split()[0]
    api.reply_json(message([{"type": "text", "text": "Trains at 8."}]))
    done = threadlog("ask", fork, "tell me about trains", db=db, env={"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url})
    assert done.returncode == 0, done.stderr
    assert "[retrieval]" in json.dumps(api.requests[0].json)
    check = threadlog("request", fork, "--check", db=db)
    assert check.returncode == 0 and check.stdout.startswith("ok"), check.stderr


def test_ask_on_a_thread_without_a_model_names_the_flag(tmp_path: Path) -> None:
    """It said "pass model=...", the library's keyword, where `request` says --model."""
    db = tmp_path / "t.db"
    t = threadlog("new", db=db).stdout.strip()
    threadlog("append", t, "--role", "user", "--text", "hi", db=db)
    done = threadlog("ask", t, db=db, env={"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    assert done.returncode == 1 and "model=" not in done.stderr, done.stderr
    assert "pass --model (or make a thread that names one: `threadlog fork --model` of this one, or `threadlog new --model`)" in done.stderr


@pytest.mark.parametrize("variable", ["ANTHROPIC_CUSTOM_HEADERS", "ANTHROPIC_API_KEY"])
def test_ask_and_rerun_with_a_header_that_is_not_utf8_are_refused_before_anything_is_written(tmp_path: Path, api: MessagesAPI,
                                                                                           variable: str) -> None:
    """The SDK sends headers as UTF-8 and an environment variable's other bytes read as lone
    surrogates: each request failed to be built after the run had started, and `ask` said a
    stored event was altered outside threadlog (exit 1, with a run recorded)."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    threadlog("append", t, "--role", "user", "--text", "hi", db=db)
    threadlog("append", t, "--role", "assistant", "--text", "hello", db=db)
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    env[variable] = "x-caf: caf\udce9" if variable == "ANTHROPIC_CUSTOM_HEADERS" else "sk-secret\udce9"
    with Store(db) as store:
        before = store.head(t), len(store.threads())
    for args in (["ask", t, "And now?"], ["rerun", t, "--at", "2", "--model", "claude-test-2"]):
        done = threadlog(*args, db=db, env=env, process=True)
        assert done.returncode == 1 and "not UTF-8" in done.stderr and "altered" not in done.stderr, done.stderr
        assert "sk-secret" not in done.stderr  # the key is not shown
    with Store(db) as store:
        assert (store.head(t), len(store.threads())) == before and not api.requests


def test_ask_without_a_key_is_one_error_line(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    done = threadlog("ask", t, "hello", db=db)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ANTHROPIC_API_KEY is not set")
    with Store(db) as store:
        assert store.head(t) == 1


@pytest.mark.parametrize("url", ["http://localhost:8080x", "http://[::1"])
def test_ask_with_a_base_url_that_is_no_url_is_one_error_line(tmp_path: Path, url: str) -> None:
    """A typo in ANTHROPIC_BASE_URL printed the HTTP client's traceback."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    done = threadlog("ask", t, "hello", db=db, env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": url})
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: ANTHROPIC_BASE_URL {url!r} is not a URL"), done.stderr
    with Store(db) as store:
        assert store.head(t) == 1


@pytest.mark.parametrize("interrupt_id, resolve, cancel", [
    ("q1", "threadlog interrupt resolve {t} q1 --answer TEXT", "threadlog interrupt cancel {t} q1"),
    ("it's $(date); x", "threadlog interrupt resolve {t} 'it'\"'\"'s $(date); x' --answer TEXT",
     "threadlog interrupt cancel {t} 'it'\"'\"'s $(date); x'"),
    ("-q", "threadlog interrupt resolve --answer TEXT -- {t} -q", "threadlog interrupt cancel -- {t} -q"),
], ids=["plain", "shell-words", "leading-dash"])
def test_ask_on_a_thread_waiting_on_an_interrupt_names_the_commands_that_settle_it(tmp_path: Path, api: MessagesAPI,
                                                                                   interrupt_id: str, resolve: str,
                                                                                   cancel: str) -> None:
    """The refusal told a CLI user to call `resolve_interrupt`, a Python function, and said
    `thread: thread T`, the library's parameter before the thread it names; then it named
    `threadlog interrupt resolve` alone, which takes the thread, the interrupt and the answer;
    then that command whole, but not the way out for a question no longer needing an answer.
    It names both commands whole, each id quoted for a shell (an id is any text: `;` or `$(…)`
    would run), and each command, run as printed (the answer given), settles the interrupt."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    for way in (cancel, resolve):
        assert threadlog("interrupt", "raise", "--question", "Which day?", "--", t, interrupt_id, db=db).returncode == 0
        with Store(db) as store:
            head = store.head(t)
        done = threadlog("ask", t, "hello", db=db, env={"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url})
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr == (f"error: thread {t!r} waits on interrupt {interrupt_id!r}; first answer it "
                               f"(`{resolve.format(t=t)}`) or cancel it (`{cancel.format(t=t)}`)\n"), done.stderr
        with Store(db) as store:
            assert store.head(t) == head
        words = shlex.split(way.format(t=t).replace("TEXT", "Tuesday"))
        assert threadlog(*words[1:], db=db).returncode == 0
        with Store(db) as store:
            assert thread_state(store, t).pending_interrupts == []
    assert not api.requests


def _in_a_shell(command: str, db: Path) -> subprocess.CompletedProcess[str]:
    """`command` as a user pastes it into bash, the file named by THREADLOG_DB."""
    exe_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{exe_dir}:{os.environ.get('PATH', '')}", "THREADLOG_DB": str(db)}
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("interrupt_id", ["thread: thread q", "it's redact() $(x)", "\u202e" * 200], ids=["cli-words", "redact", "long"])
def test_the_commands_an_ask_on_a_waiting_thread_names_do_what_they_say(tmp_path: Path, api: MessagesAPI,
                                                                        interrupt_id: str) -> None:
    """The commands were reworded where the library's words are made the CLI's (`thread: thread `
    and `redact()` inside a quoted id), and cut in their middle with the error past 900
    characters (an id of 200 characters the output escapes): pasted, they named another
    interrupt, or no command at all. Printed whole, each settles the interrupt it names."""
    if shutil.which("bash") is None:
        pytest.skip("no bash to run the command")
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    for way in ("cancel", "resolve"):
        assert threadlog("interrupt", "raise", "--question", "Which day?", "--", t, interrupt_id, db=db).returncode == 0
        done = threadlog("ask", t, "hello", db=db, env={"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url})
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        typed = re.search(f"`(threadlog interrupt {way} [^`]*)`", done.stderr)
        assert typed is not None, done.stderr
        ran = _in_a_shell(typed.group(1).replace("TEXT", "Tuesday"), db)
        assert ran.returncode == 0, (typed.group(1), ran.stderr)
        with Store(db) as store:
            settled = list(store.read(t))[-1]
        assert (settled.type, settled.data["interrupt_id"]) == (f"interrupt.{way}d" if way == "resolve" else "interrupt.cancelled",
                                                                interrupt_id)
    assert not api.requests


@pytest.mark.parametrize("run_id", ["undo redact() now", "\u202e" * 200, "r" * 900], ids=["cli-words", "escaped", "long"])
def test_the_command_closing_a_run_left_open_does_what_it_says(tmp_path: Path, api: MessagesAPI, run_id: str) -> None:
    """A run its process left open is refused naming the command that closes it; that command
    was reworded inside the run's id (`redact()`), or cut with the error past 900 characters,
    and pasted it named another run. Printed whole, it closes the run, and the next ask asks."""
    if shutil.which("bash") is None:
        pytest.skip("no bash to run the command")
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    assert threadlog("emit", t, "run.started", "--data", json.dumps({"run_id": run_id}), db=db).returncode == 0
    env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url}
    refused = threadlog("ask", t, "q1", db=db, env=env)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    ran = _in_a_shell(refused.stderr.strip().split("close it: ", 1)[1], db)
    assert ran.returncode == 0, ran.stderr
    with Store(db) as store:
        assert thread_state(store, t).open_runs == []
    api.reply_json(message([{"type": "text", "text": "the answer"}]))
    assert threadlog("ask", t, "q1", db=db, env=env).stdout == "the answer\n"


def test_a_run_id_too_long_for_a_command_is_named_by_how_to_close_it(tmp_path: Path, api: MessagesAPI) -> None:
    """A run id of 200,000 characters: the command was cut in its middle, naming another run,
    and whole no shell would run it (an argument holds at most 128 KiB). The refusal stays one
    short line and says what the file to give `--data-file` holds."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    run_id = "y" * 200_000
    with Store(db) as store:
        store.append(t, [{"type": "run.started", "data": {"run_id": run_id}}])
    refused = threadlog("ask", t, "q1", db=db, env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url})
    assert refused.returncode == 1 and len(refused.stderr) < 2000, refused.stderr[:2000]
    assert refused.stderr.endswith(f"close it: threadlog emit {t} run.finished --data-file FILE, FILE holding "
                                   '{"run_id": RUN, "status": "cancelled"} with RUN the run\'s id (200,000 characters) as its '
                                   "run.started holds it\n"), refused.stderr[-400:]
    data = tmp_path / "closing.json"
    data.write_text(json.dumps({"run_id": run_id, "status": "cancelled"}))
    assert threadlog("emit", t, "run.finished", "--data-file", str(data), db=db).returncode == 0


def test_ask_reports_an_api_error_and_exits_3_the_question_kept(tmp_path: Path, api: MessagesAPI) -> None:
    """A failed turn keeps its question and closes its run: a write committed. It exited 1,
    the status of a refusal that wrote nothing, so a script that retried on 1 asked twice."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.reply_error(400, "invalid_request_error", "prompt is too long")
    done = threadlog("ask", t, "hello", db=db, env={"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url})
    assert done.returncode == 3 and done.stderr.startswith("error: ") and "prompt is too long" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_command_a_message_names_is_quoted_so_it_runs_as_shown(tmp_path: Path, api: MessagesAPI) -> None:
    """A thread's id is any printable text (an imported session's, one chosen by a caller): the
    failed turn's `threadlog ask T` left an id holding a space or a `;` to the shell to split."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(thread_id="trip to lyon; date", model="claude-test-1")
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    api.reply_error(400, "invalid_request_error", "not now")
    failed = threadlog("ask", t, "Train to Lyon?", db=db, env=env)
    shown = re.search(r"`(threadlog ask [^`]+)` with no TEXT asks again", failed.stderr)
    assert failed.returncode == 3 and shown is not None, failed.stderr
    assert shlex.split(shown.group(1)) == ["threadlog", "ask", t]


def test_ask_without_text_after_a_failed_turn_asks_again_with_one_copy_of_the_question(tmp_path: Path, api: MessagesAPI) -> None:
    """A failed `ask` keeps the question; TEXT was required, so a retry sent it twice."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    api.reply_error(400, "invalid_request_error", "not now")  # not retried by the SDK
    failed = threadlog("ask", t, "Train to Lyon?", db=db, env=env)
    assert failed.returncode == 3 and f"`threadlog ask {t}` with no TEXT asks again" in failed.stderr
    api.reply_json(message([{"type": "text", "text": "Take the 9:04 TGV."}]))
    again = threadlog("ask", t, db=db, env=env)
    assert again.returncode == 0 and again.stdout == "Take the 9:04 TGV.\n", again.stderr
    sent = json.loads(api.requests[-1].body)
    assert [m["role"] for m in sent["messages"]] == ["user"] and len(sent["messages"][0]["content"]) == 1
    nothing = threadlog("ask", t, db=db, env=env)  # the question is answered: nothing to ask again
    assert nothing.returncode == 1 and "nothing to continue" in nothing.stderr


def _two_turns(db: Path, api: MessagesAPI) -> tuple[dict[str, str], str]:
    """A thread of two asked turns ("One?", "Two?"); (the environment that reaches `api`, the thread)."""
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    for question, answer in (("One?", "first answer"), ("Two?", "second answer")):
        api.reply_json(message([{"type": "text", "text": answer}]))
        assert threadlog("ask", t, question, db=db, env=env).returncode == 0
    return env, t


def test_rerun_prints_the_fork_and_diff_shows_both_answers(tmp_path: Path, api: MessagesAPI) -> None:
    db = tmp_path / "t.db"
    env, t = _two_turns(db, api)
    api.reply_json(message([{"type": "text", "text": "another second answer"}], model="claude-other"))
    done = threadlog("rerun", t, "--at", "5", "--model", "claude-other", db=db, env=env)
    assert done.returncode == 0, done.stderr
    fork = done.stdout.strip()
    assert api.requests[-1].json["model"] == "claude-other"
    shown = threadlog("diff", t, fork, db=db).stdout
    assert "second answer" in shown and "another second answer" in shown


def test_rerun_past_the_thread_names_the_range_it_takes(tmp_path: Path, api: MessagesAPI) -> None:
    """`rerun --at` past the head said "so at must be 0..N", the range of a replay, though a
    rerun forks there and `--at 0` is no fork point; nothing is written."""
    db = tmp_path / "t.db"
    env, t = _two_turns(db, api)
    with Store(db) as store:
        head, before = store.head(t), store.counts()
    done = threadlog("rerun", t, "--at", str(head + 1), "--model", "claude-other", db=db, env=env)
    assert done.returncode == 1 and done.stderr == (f"error: cannot rerun {t!r} at {head + 1}: it holds offsets "
                                                    f"0..{head - 1}, so --at must be 3..{head}\n"), done.stderr  # after "One?"
    with Store(db) as store:
        assert store.counts() == before and len(api.requests) == 2


def test_rerun_whose_replayed_turn_fails_exits_3_and_names_the_fork(tmp_path: Path, api: MessagesAPI) -> None:
    """Every replayed turn could fail (the API unreachable) and rerun still exited 0; then 1,
    the status of a refusal that wrote nothing, though the fork is kept (a retry forked again)."""
    db = tmp_path / "t.db"
    env, t = _two_turns(db, api)
    api.reply_error(400, "invalid_request_error", "no such model: claude-gone")
    done = threadlog("rerun", t, "--at", "5", "--model", "claude-gone", db=db, env=env)
    assert done.returncode == 3
    fork = done.stdout.strip()
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: the replay stopped: a turn ended error: ")
    assert "no such model" in done.stderr and f"fork {fork} keeps what was replayed" in done.stderr
    with Store(db) as store:
        assert store.thread(fork).parent_id == t


def _waiting_on_an_agent_call(tmp_path: Path, db: Path, ask: str) -> str:
    """A new thread whose user asked `ask` and whose assistant answered with an Agent call
    (`toolu_1`), waiting for its result; its id."""
    t = threadlog("new", "--system", "You plan trips.", "--model", "claude-test-1", db=db).stdout.strip()
    threadlog("append", t, "--role", "user", "--text", ask, db=db)
    call = [{"type": "tool_use", "id": "toolu_1", "name": "Agent", "input": {"prompt": "research"}}]
    (tmp_path / "call.json").write_text(json.dumps(call))
    assert threadlog("append", t, "--role", "assistant", "--content", str(tmp_path / "call.json"), db=db).returncode == 0
    return t


def test_sub_agents_run_report_back_and_the_parent_goes_on(tmp_path: Path, api: MessagesAPI) -> None:
    """The fork sub-agent design from the command line, against the API over HTTP: fan out from a
    turn's Agent call, run each sub-agent (`ask` without text sends its directive), deliver their
    answers (`report`), and the parent's next request carries them."""
    db = tmp_path / "t.db"
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    t = _waiting_on_an_agent_call(tmp_path, db, "Plan Lyon: a hotel and the weather")
    kids = threadlog("fan-out", t, "Find a hotel.", "Check the weather.", db=db).stdout.split()
    # Asked on before its sub-agents report, the parent is refused, untouched: ask cannot answer
    # the Agent call (it closed it as failed, with advice for Python callers).
    head = threadlog("log", t, "--json", db=db).stdout
    early = threadlog("ask", t, db=db, env=env)
    assert early.returncode == 1 and "toolu_1" in early.stderr and "`report`" in early.stderr, early.stderr
    assert "run_turn" not in early.stderr and threadlog("log", t, "--json", db=db).stdout == head and not api.requests
    for kid, answer in zip(kids, ("Hotel Carlton, 90 EUR.", "Sunny, 22 C.")):
        api.reply_json(message([{"type": "text", "text": answer}]))
        ran = threadlog("ask", kid, db=db, env=env)
        assert ran.returncode == 0 and ran.stdout == answer + "\n", ran.stderr
        assert threadlog("report", kid, db=db).returncode == 0
    hotel, weather = (request.json for request in api.requests)
    prefix = json.dumps(hotel["messages"][:-1])
    assert prefix == json.dumps(weather["messages"][:-1])  # the siblings share all but their directive
    api.reply_json(message([{"type": "text", "text": "Booked the Carlton; pack light."}]))
    went_on = threadlog("ask", t, db=db, env=env)
    assert went_on.returncode == 0 and went_on.stdout == "Booked the Carlton; pack light.\n", went_on.stderr
    last = api.requests[-1].json["messages"][-1]
    assert last["role"] == "user" and last["content"][0]["type"] == "tool_result"
    notes = [block["text"] for block in last["content"][1:]]
    assert [kids[0] in notes[0], "Hotel Carlton, 90 EUR." in notes[0], kids[1] in notes[1], "Sunny, 22 C." in notes[1]] == [True] * 4
    check = threadlog("request", t, "--check", db=db)
    assert check.returncode == 0 and check.stdout.split()[0] == "ok", check.stdout + check.stderr


def test_a_report_answering_a_call_that_waits_on_an_interrupt_cancels_it_and_says_so(tmp_path: Path, api: MessagesAPI) -> None:
    """The parent's Agent call waited on an interrupt ("the sub-agents answer later"); after the
    report answered the call, `interrupt list` still showed the question, `ask` was refused until
    it was resolved, and the answer then given was dropped. The report cancels it, and says so."""
    db = tmp_path / "t.db"
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    t = _waiting_on_an_agent_call(tmp_path, db, "Plan Lyon")
    assert threadlog("interrupt", "raise", t, "q1", "--question", "later", "--tool-use-id", "toolu_1", db=db).returncode == 0
    [kid] = threadlog("fan-out", t, "Find a hotel.", db=db).stdout.split()
    assert threadlog("interrupt", "list", t, db=db).stdout == f"{t}  q1  later\n"
    api.reply_json(message([{"type": "text", "text": "Hotel Carlton."}]))
    assert threadlog("ask", kid, db=db, env=env).returncode == 0
    reported = threadlog("report", kid, db=db)
    assert reported.returncode == 0 and reported.stdout.startswith("offset 5 "), reported.stderr
    assert reported.stderr == (f"cancelled interrupt 'q1' of thread {t}: call 'toolu_1' answered by the report of "
                               f"sub-agent {kid!r}\n")
    again = threadlog("report", kid, db=db)  # delivered before: nothing written, nothing cancelled now
    assert (again.returncode, again.stdout, again.stderr) == (0, reported.stdout, ""), again.stderr
    listed = threadlog("interrupt", "list", t, db=db)
    assert (listed.stdout, listed.stderr) == ("", "no question waiting\n")
    late = threadlog("interrupt", "resolve", t, "q1", "--answer", "nothing reads this", db=db)
    assert late.returncode == 1 and "interrupt 'q1' is not pending" in late.stderr
    api.reply_json(message([{"type": "text", "text": "Booked the Carlton."}]))
    went_on = threadlog("ask", t, db=db, env=env)
    assert went_on.returncode == 0 and went_on.stdout == "Booked the Carlton.\n", went_on.stderr


def test_two_asks_racing_on_one_thread_start_one_run(tmp_path: Path, api: MessagesAPI) -> None:
    """Both read the thread idle, then both started a run while another writer held the file: two
    runs at once, the questions and answers interleaved. The run starts against the head the
    checks read; the second is then judged again and refused."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url}
    for i in range(2):  # each answer takes 2 s: the other ask is judged again while the first runs
        api.replies.append(Reply(200, json.dumps(message([{"type": "text", "text": f"answer {i}"}], id=f"msg_{i}")).encode(),
                                 delay=2))
    exe = Path(sys.executable).with_name("threadlog")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # another writer: both asks read the thread, then wait to write
    asks = [subprocess.Popen([str(exe), "--db", str(db), "ask", t, f"question {i}"], env={**clean, **env},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    # Each says so once it has read the thread and waits for the lock (its slow import of the SDK
    # is behind it): a fixed pause could end before one got there, which then found the other's
    # run in progress, or over.
    waiting = [ask.stderr.readline() for ask in asks]  # type: ignore[union-attr]
    assert waiting == ["waiting for another writer… (--timeout sets how long)\n"] * 2, waiting
    lock.execute("ROLLBACK")
    lock.close()
    done = [ask.communicate(timeout=120) + (ask.returncode,) for ask in asks]
    assert sorted(code for _, _, code in done) == [0, 1], done
    refused = next(err for _, err, code in done if code == 1)
    assert refused.splitlines()[-1].startswith(f"error: thread {t!r} has run") and "in progress" in refused
    with Store(db) as store:
        assert [e.type for e in store.read(t)] == ["thread.created", "run.started", "message.appended", "message.appended",
                                                   "run.finished"]
    assert len(api.requests) == 1


def _ask(db: Path, api: MessagesAPI, *args: str) -> subprocess.Popen[str]:
    exe = Path(sys.executable).with_name("threadlog")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    return subprocess.Popen([str(exe), "--db", str(db), "ask", *args], env={**clean, "ANTHROPIC_API_KEY": "k",
                            "ANTHROPIC_BASE_URL": api.url}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_an_ask_killed_mid_call_closes_its_run_and_the_next_ask_works(tmp_path: Path, api: MessagesAPI, signum: int) -> None:
    """SIGTERM or SIGHUP killed the process with its run open: every later turn was refused."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.replies.append(Reply(200, json.dumps(message([{"type": "text", "text": "slow"}])).encode(), delay=5))
    api.reply_json(message([{"type": "text", "text": "second answer"}]))
    ask = _ask(db, api, t, "q1")
    while not api.requests:
        time.sleep(0.05)
    ask.send_signal(signum)
    _, err = ask.communicate(timeout=60)
    assert (ask.returncode, err.splitlines()[-1]) == (128 + signum, "interrupted")
    with Store(db) as store:
        finished = [e.data for e in store.read(t) if e.type == "run.finished"]
    assert [f["status"] for f in finished] == ["cancelled"]
    again = threadlog("ask", t, db=db, env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url})
    assert again.returncode == 0 and again.stdout.strip() == "second answer", again.stderr


def test_an_ask_killed_with_sigkill_mid_stream_leaves_a_thread_the_next_ask_names_the_way_on_for(tmp_path: Path,
                                                                                                   api: MessagesAPI) -> None:
    """SIGKILL gives the process no chance to close its run: the thread stays readable and
    verifies, with the question and no part of the answer; the next ask is refused, naming the
    command that closes the run (it said only "threadlog emit", the event's data left to be
    guessed); run as shown, the ask after it asks the kept question again."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.paced(message([{"type": "text", "text": "an answer that never comes whole"}]), 2.0)
    ask = _ask(db, api, t, "--stream", "q1")
    while not api.requests:
        time.sleep(0.05)
    time.sleep(0.5)  # the stream has begun
    ask.send_signal(signal.SIGKILL)
    ask.communicate(timeout=60)
    assert threadlog("verify", db=db).returncode == 0
    shown = threadlog("show", t, db=db)
    assert shown.returncode == 0 and "q1" in shown.stdout and "running" in shown.stdout
    env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url}
    refused = threadlog("ask", t, "q2", db=db, env=env)
    assert refused.returncode == 1 and len(api.requests) == 1
    close = re.search(r"threadlog emit (\S+) run.finished --data '(.+)'$", refused.stderr.strip())
    assert close is not None, refused.stderr
    assert threadlog("emit", close.group(1), "run.finished", "--data", close.group(2), db=db).returncode == 0
    api.reply_json(message([{"type": "text", "text": "the answer"}]))
    again = threadlog("ask", t, db=db, env=env)
    assert (again.returncode, again.stdout) == (0, "the answer\n"), again.stderr
    assert [[b["text"] for b in m["content"]] for m in api.requests[-1].json["messages"]] == [["q1"]]
    assert threadlog("verify", db=db).returncode == 0 and threadlog("request", t, "--check", db=db).returncode == 0


def _overloaded(err: str) -> bool:
    """Whether the refusal names the API's answer: the SDK's words for a 529 (`529 Overloaded`
    since anthropic 2.17, `Error code: 529 - {... 'overloaded_error' ...}` before)."""
    return "529 Overloaded" in err or ("Error code: 529" in err and "overloaded_error" in err)


@pytest.mark.parametrize("asked", [{"retry-after": "86400"}, {"retry-after-ms": "86400000"}], ids=["retry-after", "retry-after-ms"])
def test_ask_answered_overloaded_with_a_wait_of_hours_fails_at_once_naming_the_wait(tmp_path: Path, api: MessagesAPI,
                                                                                    asked: dict[str, str]) -> None:
    """The SDK waits as long as a 529's retry-after says, silent: `ask` sat for a day before its
    retry. A wait over a minute is not waited: the turn fails at once, its message naming the
    wait the API asked for; the question is kept for the ask that comes after it."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.reply_error(529, "overloaded_error", "Overloaded", **asked)
    ask = _ask(db, api, t, "q1")
    try:
        _, err = ask.communicate(timeout=30)
    finally:
        ask.kill()
    assert ask.returncode == 3 and len(api.requests) == 1, err
    assert _overloaded(err) and "the API asked to wait 86,400 s before trying again" in err, err
    api.reply_json(message([{"type": "text", "text": "the answer"}]))
    again = threadlog("ask", t, db=db, env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url})
    assert (again.returncode, again.stdout) == (0, "the answer\n"), again.stderr
    assert threadlog("verify", db=db).returncode == 0 and threadlog("request", t, "--check", db=db).returncode == 0


_YEAR_99999 = "Fri, 31 Dec 99999 23:59:59 GMT"  # a date `email.utils` parses and no calendar holds


def test_an_answer_whose_retry_after_is_a_date_past_the_calendar_is_taken(tmp_path: Path, api: MessagesAPI) -> None:
    """Reading a retry-after of year 99999 raised ValueError in the client's response hook,
    for every answer, a 200 among them: the SDK took the raise for a failed connection and
    sent the request again (billed twice), and the turn ended on that retry's error with the
    answer lost. An answer is taken whatever its retry-after says."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.reply_json(message([{"type": "text", "text": "the answer"}]), **{"retry-after": _YEAR_99999})
    done = threadlog("ask", t, "q1", db=db, env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url})
    assert (done.returncode, done.stdout, len(api.requests)) == (0, "the answer\n", 1), done.stderr


@pytest.mark.parametrize("after", [_YEAR_99999, "99999999999999999999999"], ids=["date", "seconds"])
def test_ask_answered_overloaded_until_a_date_past_the_calendar_fails_at_once_naming_the_wait(tmp_path: Path, api: MessagesAPI,
                                                                                            after: str) -> None:
    """A 529 asking to wait until year 99999 was sent again at once (the hook's ValueError read
    as a failed connection); before the hook, the SDK's own reading of it failed the turn as
    "a stored event does not have the shape its type requires". It is a wait past any minute:
    the try fails at once, saying so, the question kept. A wait of 10**23 s is as endless (it
    was printed with a float's noise, "99,999,999,999,999,991,611,392 s")."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.reply_error(529, "overloaded_error", "Overloaded", **{"retry-after": after})
    done = threadlog("ask", t, "q1", db=db, env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url})
    assert done.returncode == 3 and len(api.requests) == 1, done.stderr
    assert _overloaded(done.stderr) and "the API asked to wait for ever before trying again" in done.stderr
    assert "stored event" not in done.stderr
    with Store(db) as store:
        assert [m.content[0]["text"] for m in thread_state(store, t).messages] == ["q1"]


def test_an_answer_the_locked_file_cannot_take_is_shown_and_the_way_to_close_the_run_said(tmp_path: Path, api: MessagesAPI) -> None:
    """Another writer held the file past --timeout once the API had answered: the answer was
    lost unseen, and the run left open with no word of how to close it."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.replies.append(Reply(200, json.dumps(message([{"type": "text", "text": "the paid-for answer"}])).encode(), delay=1))
    ask = _ask(db, api, t, "q1", "--timeout", "1")
    while not api.requests:
        time.sleep(0.05)
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    _, err = ask.communicate(timeout=60)
    lock.execute("ROLLBACK")
    lock.close()
    assert ask.returncode == 1
    assert "its text: the paid-for answer" in err
    close = re.search(r"close it with: threadlog emit (\S+) run.finished --data '(.+)'$", err.strip())
    assert close is not None, err
    closed = threadlog("emit", close.group(1), "run.finished", "--data", close.group(2), db=db)
    assert closed.returncode == 0, closed.stderr
    with Store(db) as store:
        assert [e.data["status"] for e in store.read(t) if e.type == "run.finished"] == ["cancelled"]


@pytest.mark.parametrize("command", [["rerun", "{t}", "--at", "2", "--model", ""], ["ask", "{t}", "again?", "--model", " "]])
def test_an_empty_model_is_refused_before_anything_is_forked_or_sent(tmp_path: Path, api: MessagesAPI, command: list[str]) -> None:
    """`rerun --model ""` (a variable left unset) forked and replayed with the thread's own model."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    threadlog("append", t, "--role", "user", "--text", "Train to Lyon?", db=db)
    threadlog("append", t, "--role", "assistant", "--text", "The 9:04.", db=db)
    threadlog("append", t, "--role", "user", "--text", "And back?", db=db)
    before = db.read_bytes()
    done = threadlog(*(a.replace("{t}", t) for a in command), db=db, env={"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url})
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "Invalid value for '--model': is empty: name a model" in done.stderr
    assert db.read_bytes() == before


def test_a_streamed_answer_holding_a_lone_surrogate_is_shown_escaped_and_refused_clearly(tmp_path: Path, api: MessagesAPI) -> None:
    """Printing the piece raised UnicodeEncodeError, which ended the turn and was reported as a
    stored event of the wrong shape ("its row was altered outside threadlog"). It is shown as
    its escape, and the answer refused as one that cannot be stored, the question kept."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.reply_sse(message([{"type": "text", "text": "a\ud800b"}]))
    done = threadlog("ask", t, "hello", "--stream", db=db, env={"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url})
    assert done.returncode == 3 and done.stdout == "a\\ud800b\n", done.stdout
    assert done.stderr.startswith("error: the API's answer could not be stored: ") and "the question is kept" in done.stderr
    assert "altered outside threadlog" not in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_ask_with_an_api_timeout_gives_up_on_a_stalled_server_and_keeps_the_question(tmp_path: Path, api: MessagesAPI) -> None:
    """The client waited the SDK's 600 s for each of three tries: a stalled server held `ask`
    for half an hour, with no way to say less."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.stall(30, message([{"type": "text", "text": "too late"}]))
    began = time.monotonic()
    done = threadlog("ask", t, "Train to Lyon?", "--api-timeout", "0.5", "--api-retries", "0", db=db,
                     env={"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url})
    assert time.monotonic() - began < 20
    assert done.returncode == 3 and "timed out" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(api.requests) == 1  # no retry
    with Store(db) as store:
        events = list(store.read(t))
    asked = [e for e in events if e.type == "message.appended"]
    assert [m.data["role"] for m in asked] == ["user"] and events[-1].type == "run.finished"
    assert events[-1].data["status"] == "error" and "timed out" in events[-1].data["error"]


def test_ask_and_rerun_retry_as_many_times_as_asked(tmp_path: Path, api: MessagesAPI) -> None:
    db = tmp_path / "t.db"
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.reply_error(500, "api_error", "overloaded")
    failed = threadlog("ask", t, "One?", "--api-retries", "0", db=db, env=env)
    assert failed.returncode == 3 and "overloaded" in failed.stderr and len(api.requests) == 1
    api.reply_error(500, "api_error", "overloaded")
    api.reply_json(message([{"type": "text", "text": "first answer"}]))
    again = threadlog("ask", t, "--api-retries", "1", db=db, env=env)
    assert again.returncode == 0 and again.stdout == "first answer\n" and len(api.requests) == 3, again.stderr
    api.reply_json(message([{"type": "text", "text": "second answer"}]))
    assert threadlog("ask", t, "Two?", db=db, env=env).returncode == 0
    with Store(db, read_only=True) as store:  # the fork keeps what came before the turn of "Two?", which is replayed
        events = list(store.read(t))
    asked = next(e.offset for e in events if e.type == "message.appended" and "Two?" in json.dumps(e.data))
    at = max(e.offset for e in events if e.type == "run.started" and e.offset < asked)
    api.reply_error(500, "api_error", "overloaded")
    rerun = threadlog("rerun", t, "--at", str(at), "--model", "claude-test-2", "--api-retries", "0", db=db, env=env)
    assert rerun.returncode == 3 and "overloaded" in rerun.stderr and len(api.requests) == 5, rerun.stderr


@pytest.mark.parametrize(("option", "value"), [("--api-timeout", "0"), ("--api-timeout", "nan"), ("--api-retries", "-1")])
def test_api_settings_out_of_range_are_refused_before_anything_is_sent(tmp_path: Path, api: MessagesAPI, option: str,
                                                                        value: str) -> None:
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    done = threadlog("ask", t, "One?", option, value, db=db, env={"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url})
    assert done.returncode == 2 and f"Invalid value for '{option}'" in done.stderr and api.requests == []
    with Store(db) as store:
        assert store.head(t) == 1


def _open_connections_to(port: int) -> int:
    """This process's established TCP connections to 127.0.0.1:`port` (Linux's /proc)."""
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            ours.add(os.readlink(f"/proc/self/fd/{fd}"))
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if int(row[2].split(":")[1], 16) == port and row[3] == "01" and f"socket:[{row[9]}]" in ours)


@pytest.mark.parametrize("command", ["ask", "rerun"])
def test_ask_and_rerun_close_their_connection_to_the_api(tmp_path: Path, api: MessagesAPI, command: str) -> None:
    """The client each made was never closed: run in a process that goes on (a test runner, an
    app calling the CLI's `main`), its socket stayed open until the garbage collector found it,
    which warned `unclosed <socket.socket ...>` at some later moment, in whatever ran then."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    threadlog("append", t, "--role", "user", "--text", "Train to Lyon?", db=db)
    threadlog("append", t, "--role", "assistant", "--text", "The 9:04.", db=db)
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": api.url}
    api.reply_json(message([{"type": "text", "text": "Take the 9:04 TGV."}]))
    if command == "ask":
        args = ["ask", t, "And a hotel?"]
    else:
        threadlog("append", t, "--role", "user", "--text", "And a hotel?", db=db)
        args = ["rerun", t, "--at", "4", "--model", "claude-other"]  # replays the last question
    done = threadlog(*args, db=db, env=env)
    assert done.returncode == 0, done.stderr
    assert len(api.requests) == 1
    assert _open_connections_to(int(api.url.rsplit(":", 1)[1].split("/")[0])) == 0


def test_an_ask_whose_run_another_writer_closed_meanwhile_says_so_and_leaves_nothing_to_close(tmp_path: Path,
                                                                                               api: MessagesAPI) -> None:
    """The run was closed from another terminal while its answer was on the way (the command a
    refused ask names for a run whose process is gone): the ask failed on `run ... is not
    pending in this thread`, then said the run was left open and to close it with that same
    command, which was refused in turn."""
    db = tmp_path / "t.db"
    t = threadlog("new", "--model", "claude-test-1", db=db).stdout.strip()
    api.replies.append(Reply(200, json.dumps(message([{"type": "text", "text": "late answer"}])).encode(), delay=2))
    ask = _ask(db, api, t, "q1")
    while not api.requests:
        time.sleep(0.05)
    with Store(db) as store:
        run_id = next(e.data["run_id"] for e in store.read(t) if e.type == "run.started")
    closed = threadlog("emit", t, "run.finished", "--data", json.dumps({"run_id": run_id, "status": "cancelled"}), db=db)
    assert closed.returncode == 0, closed.stderr
    _, err = ask.communicate(timeout=60)
    assert ask.returncode == 1 and len(err.strip().splitlines()) == 1, err
    assert f"run {run_id!r} of thread {t!r} was closed by another writer while this turn ran" in err, err
    assert err.strip().endswith("nothing is left to close") and "run.finished --data" not in err, err
    with Store(db) as store:
        assert [e.type for e in store.read(t)] == ["thread.created", "run.started", "message.appended", "run.finished",
                                                   "message.appended"]
    assert threadlog("verify", db=db).returncode == 0
    api.reply_json(message([{"type": "text", "text": "the next answer"}]))
    again = threadlog("ask", t, "q2", db=db, env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url})
    assert (again.returncode, again.stdout) == (0, "the next answer\n"), again.stderr
