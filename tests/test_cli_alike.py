"""Commands that take the same kind of input, or say the same kind of thing, do it alike: one
refusal for JSON that is no JSON, one way to name a range, one way to say a listing is empty,
the option the user typed named in a refusal rather than the library's event path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.backends import file_dump
from tests.test_anthropic_cli import threadlog
from tests.test_cli_use import fails, invoke, ok

# -- JSON options -------------------------------------------------------------------------------


def _json_options(thread: str) -> list[tuple[str, list[str]]]:
    """Every option whose value is JSON, as (its name, a command line ending with it, for the value to follow)."""
    return [
        ("--data", ["emit", thread, "title.set", "--data"]),
        ("--event-meta", ["emit", thread, "title.set", "--data", '{"title": "x"}', "--event-meta"]),
        ("--setting", ["new", "--setting"]),
        ("--setting", ["fork", thread, "--setting"]),
    ]


@pytest.mark.parametrize("bad, where", [("{not json", "(line 1, column 2)"), ('{"a": 1,\n  }', "(line 2, column 3)")],
                         ids=["first-line", "second-line"])
def test_json_that_is_no_json_is_a_usage_error_naming_the_option_and_where_it_broke(tmp_path: Path, bad: str,
                                                                                     where: str) -> None:
    """`--data '{not json'` and `--event-meta` exited 1 with a library-style `error:` line, while
    `--setting KEY={not json` was a usage error (exit 2): every JSON option is one, now."""
    db = tmp_path / "t.db"
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    before = file_dump(db)
    for option, args in _json_options(t):
        value = f"stop_sequences={bad}" if option == "--setting" else bad
        err = fails(db, *args, value, code=2)
        assert f"Invalid value for '{option}'" in err and "not valid JSON" in err and where in err, (option, err)
    assert file_dump(db) == before


@pytest.mark.parametrize("bad, says", [("NaN", "NaN is no JSON value"), ("[" * 20_000 + "]" * 20_000, "nested too deeply"),
                                       ("9" * 5_000, "Exceeds the limit (4300 digits)")],
                         ids=["nan", "too-deep", "huge-integer"])
def test_json_threadlog_cannot_take_is_a_usage_error_too(tmp_path: Path, bad: str, says: str) -> None:
    db = tmp_path / "t.db"
    t = ok(db, "new").strip()
    before = file_dump(db)
    for option, args in _json_options(t)[:2]:
        err = fails(db, *args, bad, code=2)
        assert f"Invalid value for '{option}'" in err and says in err, (option, err)
    assert file_dump(db) == before


def test_an_answer_that_is_no_json_stays_text_and_one_too_deep_is_a_usage_error(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    t = ok(db, "new").strip()
    ok(db, "interrupt", "raise", t, "ask", "--question", "go?")
    before = file_dump(db)
    err = fails(db, "interrupt", "resolve", t, "ask", "--answer", "[" * 20_000 + "]" * 20_000, code=2)
    assert "Invalid value for '--answer'" in err and "nested too deeply; an event holds at most 100 levels" in err, err
    assert file_dump(db) == before
    answered = json.loads(ok(db, "interrupt", "resolve", t, "ask", "--answer", "{not json", "--json"))
    assert answered["data"]["answer"] == "{not json"


# -- empty listings -----------------------------------------------------------------------------


def test_interrupt_list_with_no_question_waiting_says_so_as_search_with_no_hit_does(tmp_path: Path) -> None:
    """`interrupt list` with nothing waiting printed nothing at all: `search` says `no match` on
    stderr, exit 0, stdout left empty for a script; `--json` stays an empty JSON array."""
    db = tmp_path / "t.db"
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    searched = invoke(db, "search", "nowhere")
    assert searched == (0, "", "no match\n")
    assert invoke(db, "interrupt", "list", t) == (0, "", "no question waiting\n")
    assert json.loads(ok(db, "interrupt", "list", t, "--json")) == []
    ok(db, "interrupt", "raise", t, "ask-1", "--question", "which?")
    assert invoke(db, "interrupt", "list", t) == (0, f"{t}  ask-1  which?\n", "")


def test_ls_and_tree_of_no_thread_say_so_as_search_with_no_hit_does(tmp_path: Path) -> None:
    """`ls` of a file with no thread printed the table's header alone, `tree` nothing at all."""
    db = tmp_path / "t.db"
    ok(db, "init")
    for command in (["ls"], ["ls", "--all"], ["tree"]):
        assert invoke(db, *command) == (0, "", "no thread yet: `threadlog new` starts one (`threadlog demo` writes a sample)\n")
    assert json.loads(ok(db, "ls", "--json")) == [] and json.loads(ok(db, "tree", "--json")) == []
    t = ok(db, "new", "--title", "first").strip()
    assert invoke(db, "ls", "--before", "1") == (0, "", "no thread before position 1\n")
    assert invoke(db, "tree", "--before", "1") == (0, "", "no thread before position 1\n")
    code, listed, err = invoke(db, "ls")
    assert (code, err) == (0, "") and listed.splitlines()[0].split()[:2] == ["id", "kind"] and t in listed


# -- fork points: request --at, fork --at, rerun --at -------------------------------------------


def _a_turn(db: Path) -> str:
    """A thread of three events (thread.created, a question, its answer): fork and request
    points 2..3, as the first message is at offset 1."""
    t = ok(db, "new", "--model", "claude-test-1").strip()
    ok(db, "append", t, "--role", "user", "--text", "One?")
    ok(db, "append", t, "--role", "assistant", "--text", "first answer")
    return t


@pytest.mark.parametrize("command", ["fork", "rerun"])
def test_fork_and_rerun_name_the_fork_points_a_message_allows(tmp_path: Path, command: str) -> None:
    """`fork --at 99` named 1..3, though at 1 there is no message to fork (and the next refusal
    said so, naming 2); rerun said the same, then `cannot fork` at 1, and refused 0 as a usage
    error where fork said the range. Both now say the range a fork takes, in the same words,
    whatever side of it `--at` falls on, before a rerun looks for the API key."""
    db = tmp_path / "t.db"
    t = _a_turn(db)
    before = file_dump(db)
    extra = ["--model", "claude-test-2"] if command == "rerun" else []
    for at in ("99", "0", "-1"):
        assert fails(db, command, t, "--at", at, *extra) == (f"error: cannot {command} {t!r} at {at}: it holds offsets 0..2, "
                                                             "so --at must be 2..3\n")
    assert fails(db, command, t, "--at", "1", *extra) == (f"error: cannot {command} {t!r} at 1: there is no message before "
                                                          "that offset (its first message is at offset 1, so --at must be 2..3)\n")
    assert file_dump(db) == before


def test_request_names_the_points_a_request_can_be_built_at(tmp_path: Path) -> None:
    """`request --at 99` named 0..3, though the first event that holds a message is the second
    (at 0 and 1 were then refused, naming 2..3): past the thread it names 2..3 as fork does. The
    refusal names the option typed, `--at`, where it said `at:`, the library's parameter, and
    so does the sentence after it (`--at counts`, `--at must be`), where it went on saying `at`."""
    db = tmp_path / "t.db"
    t = _a_turn(db)
    before = file_dump(db)
    for at in ("99", "4"):
        assert fails(db, "request", t, "--at", at) == (f"error: --at: cannot build a request of {t!r} at {at}: it holds "
                                                       "offsets 0..2, so --at must be 2..3\n")
    assert fails(db, "request", t, "--at", "1") == (f"error: --at: thread {t!r} has no message to send as of its first 1 "
                                                     "event(s): --at counts the events the request is built from, its "
                                                     "thread.created first; its first message is at offset 1, so --at "
                                                     "must be 2..3\n")
    assert json.loads(ok(db, "request", t, "--at", "2"))["messages"][0]["role"] == "user"
    assert file_dump(db) == before


_NO_MODEL = ("names no model; pass --model (or make a thread that names one: `threadlog fork --model` of this one, or "
             "`threadlog new --model`)")


@pytest.mark.parametrize("command", [["request"], ["export", "--format", "anthropic"], ["ask"]],
                         ids=["request", "export", "ask"])
def test_a_thread_without_a_model_names_the_option_the_command_has_not_the_parameter(tmp_path: Path,
                                                                                    command: list[str]) -> None:
    """`export --format anthropic` (as `request` and `ask`) on a thread that names no model said
    `error: model: thread T names no model; …`: `model:` is the library's parameter. Each says
    the same line now, naming --model, which each of them takes, and the commands that make a
    thread that names one."""
    db = tmp_path / "t.db"
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    before = file_dump(db)
    done = threadlog(command[0], t, *command[1:], db=db, env={"ANTHROPIC_API_KEY": "test",
                                                              "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"error: thread {t!r} {_NO_MODEL}\n")
    assert file_dump(db) == before
    if command[0] != "ask":  # what it says to do works (`ask` would call the API)
        assert json.loads(ok(db, command[0], t, *command[1:], "--model", "claude-test-1"))["model"] == "claude-test-1"


def test_rerun_checks_its_arguments_before_asking_for_the_api_key(tmp_path: Path) -> None:
    """Without ANTHROPIC_API_KEY, `rerun` said so first: a bad --at was named only once the
    key was set. The key is the last thing checked, as only the API needs it."""
    db = tmp_path / "t.db"
    t = _a_turn(db)
    done = threadlog("rerun", t, "--at", "99", "--model", "claude-test-2", db=db)
    assert (done.returncode, done.stderr) == (1, f"error: cannot rerun {t!r} at 99: it holds offsets 0..2, so --at must be 2..3\n")
    done = threadlog("rerun", t, "--at", "2", "--model", "claude-test-2", db=db)
    assert done.returncode == 1 and done.stderr.startswith("error: ANTHROPIC_API_KEY is not set"), done.stderr


# -- the option named, not the event path --------------------------------------------------------


def test_a_refusal_of_an_event_built_from_options_names_the_option_given(tmp_path: Path) -> None:
    """`interrupt raise T q --tool-use-id nope` said `events[0].data.tool_use_id: …`, a path in
    a batch of events the user never wrote: each command that builds one event from its options
    names the option (or argument) instead, as typed. The library's words stay its own."""
    db = tmp_path / "t.db"
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    ok(db, "interrupt", "raise", t, "ask-1", "--question", "which?")
    bogus, unknown = tmp_path / "bogus.json", tmp_path / "unknown.json"
    bogus.write_text('[{"type": "bogus"}]')
    unknown.write_text('[{"type": "tool_result", "tool_use_id": "toolu_nope", "content": "x"}]')
    before = file_dump(db)
    said = {
        ("interrupt", "raise", t, "q", "--tool-use-id", "toolu_nope"):
            "--tool-use-id: tool_use 'toolu_nope' is not waiting for its result in this thread (no tool_use is)",
        ("interrupt", "raise", t, ""): "INTERRUPT_ID: must be a string of 1 to 200 characters, not ''",
        ("interrupt", "raise", t, "ask-1"): "INTERRUPT_ID: interrupt 'ask-1' is already pending",
        ("interrupt", "resolve", t, "nope", "--answer", "A"): "INTERRUPT_ID: interrupt 'nope' is not pending in this thread",
        ("interrupt", "cancel", t, "nope"): "INTERRUPT_ID: interrupt 'nope' is not pending in this thread",
        ("append", t, "--role", "user", "--content", str(bogus)): "--content[0].type: unknown content block type 'bogus'",
        ("append", t, "--role", "user", "--content", str(unknown)): "--content: tool_use 'toolu_nope' is not pending",
    }
    for args, says in said.items():
        err = fails(db, *args)
        assert err.startswith(f"error: {says}") and "events[0]" not in err, (args, err)
    assert file_dump(db) == before


def test_a_malformed_checkpoint_is_named_as_the_option_it_was_given_to(tmp_path: Path) -> None:
    """`verify --since garbage` said `error: checkpoint: 'garbage' is not a checkpoint`, naming
    the other option, `--checkpoint`, which the user had not typed: each names its own."""
    db = tmp_path / "t.db"
    t = ok(db, "new").strip()
    ok(db, "append", t, "--role", "user", "--text", "hi")
    before = file_dump(db)
    for option in ("--since", "--checkpoint"):
        for as_json in ([], ["--json"]):
            err = fails(db, "verify", option, "garbage", *as_json)
            assert err.startswith(f"error: {option}: 'garbage' is not a checkpoint (expected tlc1:"), (option, err)
    assert file_dump(db) == before
