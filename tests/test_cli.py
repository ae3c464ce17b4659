"""The CLI: every command through click's runner, the console script through real processes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from eventstore import Store
from threadlog.cli import cli
from tests.procs import interruptible


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    db = str(tmp_path / "cli.db")
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None, code: int = 0) -> str:
        result = runner.invoke(cli, [*args, "--db", db], input=input)
        assert result.exit_code == code, (result.output, result.stderr)
        if code == 1:
            assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
            assert "Traceback" not in result.output + result.stderr
        return result.stdout

    invoke.db = db  # type: ignore[attr-defined]
    return invoke


def test_fork_metadata_keep_takes_keys_as_typed_and_refuses_an_empty_one(run) -> None:  # type: ignore[no-untyped-def]
    """`keep:user, tenant` (a space after the comma, as people type lists) kept `user` alone,
    and `keep:,` kept nothing, both silently."""
    t = run("new", "--metadata", "user=ana", "--metadata", "tenant=acme", "--metadata", "secret=x").strip()
    run("append", t, "--role", "user", "--text", "hi")
    f = run("fork", t, "--metadata", "keep:user, tenant").strip()
    assert json.loads(run("show", f, "--json"))["metadata"] == {"user": "ana", "tenant": "acme"}
    before = run("log", "--json", t)
    for bad in ("keep:,", "keep:user,,tenant", "keep: "):
        result = CliRunner().invoke(cli, ["--db", run.db, "fork", t, "--metadata", bad])  # type: ignore[attr-defined]
        assert result.exit_code == 2 and "one of them is empty" in result.stderr, (bad, result.output)
    assert run("log", "--json", t) == before and len(json.loads(run("ls", "--all", "--json"))) == 2


def commands(group: click.Group = cli) -> list[str]:
    return sorted(group.list_commands(click.Context(group)))


@pytest.mark.parametrize("name", commands())
def test_every_command_has_help(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    assert command.help and len(command.help.strip()) > 20, f"{name} needs help text"
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0 and "--db" in result.output


def test_the_documented_commands_exist() -> None:
    assert {"init", "new", "append", "emit", "fork", "log", "tree", "verify", "demo"} <= set(commands())


def test_new_append_fork_log(run) -> None:  # type: ignore[no-untyped-def]
    assert "schema" in run("init")
    t = run("new", "--title", "Trip", "--system", "You plan.", "--metadata", "user=ana", "--metadata", "tier=gold").strip()
    assert len(t) == 16 and "\n" not in t
    assert run("append", t, "--role", "user", "--text", "Find a train") == "offset 1 position 2\n"
    blocks = json.dumps([{"type": "text", "text": "Searching"}, {"type": "tool_use", "id": "toolu_1", "name": "s", "input": {}}])
    run("append", t, "--role", "assistant", "--content", "-", input=blocks)
    run("append", t, "--role", "user", "--content", "-", "--expect", "3", input=json.dumps([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]))
    run("emit", t, "title.set", "--data", '{"title": "Lyon"}', "--expect", "4")
    f = run("fork", t, "--at", "2", "--metadata", "keep:user", "--context", "note", "--retrieval", "per-turn").strip()
    lines = run("log", f, "--json").splitlines()
    events = [json.loads(line) for line in lines]
    assert [(e["offset"], e["type"]) for e in events] == [(0, "thread.created"), (1, "message.appended"), (2, "thread.forked")]
    assert events[0]["data"]["metadata"] == {"user": "ana", "tier": "gold"}
    assert events[2]["data"]["options"]["metadata"] == {"keep": ["user"]}
    assert events[2]["data"]["options"]["retrieval"] == "per_turn"
    human = run("log", t)
    assert "message.appended" in human and "user: Find a train" in human and "{" not in human
    tree = run("tree", t)
    assert f"⑃ {f}" in tree and "forked at 2" in tree
    assert [x["id"] for x in json.loads(run("tree", "--json"))] == [t, f]
    assert json.loads(run("verify", "--json")) == {"ok": True, "streams": 2, "events": 6, "redacted": 0}


def test_domain_errors_exit_1_with_one_line(run) -> None:  # type: ignore[no-untyped-def]
    t = run("new").strip()
    run("append", "nope", "--role", "user", "--text", "x", code=1)
    run("append", t, "--role", "user", "--text", "x", "--expect", "7", code=1)
    run("emit", t, "no.such", "--data", "{}", code=1)
    run("append", t, "--role", "user", "--content", "-", input=b"\xff\xfe", code=1)
    run("fork", t, code=1)  # empty
    run("fork", t, "--at", "9", code=1)


def test_a_position_redact_cannot_take_is_refused_naming_the_argument(run) -> None:  # type: ignore[no-untyped-def]
    """`threadlog redact 999` said `error: position: no event at position 999`, the library's
    parameter, where the command line names its argument POSITION (as INTERRUPT_ID)."""
    t = run("new").strip()
    position = run("append", t, "--role", "user", "--text", "key sk-1").split()[-1]
    result = CliRunner().invoke(cli, ["redact", "999", "--reason", "key", "--actor", "ops", "--db", run.db])
    assert (result.exit_code, result.stderr) == (1, "error: POSITION: no event at position 999\n"), result.stderr
    run("redact", position, "--reason", "key", "--actor", "ops")
    result = CliRunner().invoke(cli, ["redact", position, "--reason", "key", "--actor", "ops", "--db", run.db])
    assert result.exit_code == 1 and result.stderr.startswith(f"error: POSITION: {position} is already redacted (by position "), result.stderr


@pytest.mark.parametrize("typed", ["3_0", "\u0663", "\uff13", " 3", "+3"])
def test_redact_takes_a_position_in_the_digits_0_to_9_alone(run, typed: str) -> None:  # type: ignore[no-untyped-def]
    """`redact 3_0` erased position 30 and `redact ٣` position 3 (Python's `int()` reads both),
    which no one can take back: a position is refused unless written in the digits 0-9."""
    t = run("new").strip()
    for n in range(40):
        run("append", t, "--role", "user", "--text", f"message {n}")
    before = run("log", t, "--json")
    result = CliRunner().invoke(cli, ["redact", typed, "--reason", "key", "--actor", "ops", "--db", run.db])
    assert result.exit_code == 2 and "is not a number written in the digits 0-9" in result.stderr, result.stderr
    assert run("log", t, "--json") == before


def test_resolving_an_interrupt_without_an_answer_is_refused_and_writes_nothing(run) -> None:  # type: ignore[no-untyped-def]
    """`threadlog interrupt resolve T q1` (the --answer forgotten) recorded a null answer and
    settled the question; the answer is what resolving records (`--answer null` says none)."""
    t = run("new").strip()
    run("interrupt", "raise", t, "q1", "--question", "Which train?")
    before = run("log", t, "--json")
    result = CliRunner().invoke(cli, ["interrupt", "resolve", t, "q1", "--db", run.db])
    assert result.exit_code == 2 and result.stderr.endswith(
        "Error: give the human's answer with --answer TEXT (--answer null records none); `threadlog interrupt cancel` "
        "withdraws the question instead\n"), result.stderr
    assert run("log", t, "--json") == before and run("interrupt", "list", t) == f"{t}  q1  Which train?\n"
    run("interrupt", "resolve", t, "q1", "--answer", "null")
    with Store(run.db) as store:
        assert (list(store.read(t))[-1].type, run("interrupt", "list", t)) == ("interrupt.resolved", "")


def test_an_interrupt_id_that_is_no_id_is_refused_naming_it(run) -> None:  # type: ignore[no-untyped-def]
    """`threadlog interrupt raise T ""` (or an id holding a terminal escape, or of megabytes)
    was stored, then printed by `interrupt list` and shown by `show`."""
    t = run("new").strip()
    for bad, says in (("", "must be a string of 1 to 200 characters"), ("ask\x1b[2J", "holds the control character"),
                      ("x" * 5000, "(5000 characters)")):
        result = CliRunner().invoke(cli, ["interrupt", "raise", t, bad, "--question", "which?", "--db", run.db])
        assert result.exit_code == 1 and result.stderr.startswith("error: INTERRUPT_ID: "), result.stderr
        assert says in result.stderr and result.stderr.count("\n") == 1 and "\x1b[" not in result.stderr
    assert run("interrupt", "list", t) == ""
    run("interrupt", "raise", t, "ask-1", "--question", "which?")
    assert run("interrupt", "list", t) == f"{t}  ask-1  which?\n"


def test_new_takes_metadata_as_meta_too(run) -> None:  # type: ignore[no-untyped-def]
    t = run("new", "--meta", "team=ops", "--metadata", "tier=gold").strip()
    assert json.loads(run("show", t, "--json"))["metadata"] == {"team": "ops", "tier": "gold"}


def test_new_with_a_thinking_budget_sends_it_from_the_thread_and_its_forks(run) -> None:  # type: ignore[no-untyped-def]
    t = run("new", "--model", "claude-test-1", "--thinking-budget", "2048").strip()
    run("append", t, "--role", "user", "--text", "Plan a trip")
    thinking = {"type": "enabled", "budget_tokens": 2048}
    assert 'thinking    {"budget_tokens": 2048, "type": "enabled"}' in run("show", t).splitlines()
    assert json.loads(run("show", t, "--json"))["thinking"] == thinking
    fork = run("fork", t).strip()
    request = json.loads(run("request", fork))
    assert request["thinking"] == thinking and request["max_tokens"] == 4096 + 2048
    assert "thinking" not in run("show", run("new").strip())
    before = run("log", t)
    run("new", "--thinking-budget", "0", code=2)
    run("new", "--thinking-budget", "lots", code=2)
    assert run("log", t) == before and len(run("ls").splitlines()) == 3  # the header and the two threads made above


def test_a_fork_can_take_its_own_title_system_prompt_and_model(run) -> None:  # type: ignore[no-untyped-def]
    t = run("new", "--title", "Trip", "--system", "You plan whole trips.", "--model", "m-parent", "--thinking-budget", "2048").strip()
    run("append", t, "--role", "user", "--text", "Find me a hotel")
    f = run("fork", t, "--title", "Hotels", "--system", "You only rank hotels.", "--blank-config").strip()
    shown = json.loads(run("show", f, "--json"))
    assert (shown["title"], shown["system"], shown["model"], shown["thinking"]) == ("Hotels", "You only rank hotels.", None, None)
    assert "Hotels, forked at 2" in run("tree", t)
    kept = json.loads(run("show", run("fork", t, "--model", "m-other").strip(), "--json"))
    assert (kept["title"], kept["system"], kept["model"], kept["thinking"]) == ("Trip", "You plan whole trips.", "m-other",
                                                                              {"type": "enabled", "budget_tokens": 2048})


def test_a_fork_can_turn_thinking_on_with_its_own_budget_or_off(run) -> None:  # type: ignore[no-untyped-def]
    """Only `new` took a thinking budget: a CLI user could not continue an imported session (no
    `thinking` of its own) with thinking on, nor a thinking thread's fork without it."""
    t = run("new", "--model", "claude-test-1", "--thinking-budget", "2048").strip()
    run("append", t, "--role", "user", "--text", "Plan a trip")
    more = run("fork", t, "--thinking-budget", "4096").strip()
    assert json.loads(run("request", more))["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert json.loads(run("request", run("fork", more).strip()))["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    off = json.loads(run("request", run("fork", t, "--no-thinking").strip()))
    assert off["thinking"] == {"type": "disabled"} and off["max_tokens"] == 4096
    plain = run("new", "--model", "claude-test-1").strip()
    run("append", plain, "--role", "user", "--text", "Plan a trip")
    assert "thinking" not in json.loads(run("request", plain))
    assert json.loads(run("request", run("fork", plain, "--thinking-budget", "1024").strip()))["thinking"]["budget_tokens"] == 1024
    before = run("ls")
    run("fork", t, "--thinking-budget", "2048", "--no-thinking", code=2)
    run("fork", t, "--thinking-budget", "1000", code=2)  # under the API's least
    assert run("ls") == before


def test_usage_errors_exit_2(run) -> None:  # type: ignore[no-untyped-def]
    t = run("new").strip()
    run("fork", t, "--context", "note", "--transcript", "-", code=2)  # a note names a file, not stdout
    run("ask", t, "  ", code=2)  # an empty question
    run("new", "--thinking-budget", "1000", code=2)  # under the API's least
    run("append", t, "--role", "robot", "--text", "x", code=2)
    run("append", t, "--role", "user", code=2)
    run("append", t, "--role", "user", "--text", "x", "--content", "f", code=2)
    run("fork", t, "--metadata", "sometimes", code=2)
    run("new", "--metadata", "novalue", code=2)


def test_demo_builds_forks_and_fan_out(run) -> None:  # type: ignore[no-untyped-def]
    ids = json.loads(run("demo", "--json"))
    with Store(run.db) as store:
        kinds = {info.id: info.kind for info in store.all_threads()}
        assert kinds[ids["thread"]] == "thread" and kinds[ids["fork"]] == "fork"
        assert [kinds[s] for s in ids["subagents"]] == ["subagent", "subagent"]
        types = [e.type for e in store.read(ids["thread"])]
        assert {"interrupt.raised", "run.started", "run.finished"} <= set(types)
        assert store.thread(ids["fork"]).parent_offset < store.thread(ids["subagents"][0]).parent_offset
        store.verify()


def test_the_demo_again_after_a_redaction_of_it_adds_nothing(tmp_path: Path) -> None:
    """A redaction appends its record to the thread, after the sub-agent's report: the demo run
    again said the file held a demo "not whole yet", being built or stopped part way."""
    db = tmp_path / "t.db"
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", str(db), "demo"]).exit_code == 0
    redacted = runner.invoke(cli, ["--db", str(db), "redact", "2", "--reason", "test", "--actor", "me"])
    assert redacted.exit_code == 0, redacted.output
    with Store(db) as store:
        before = store.last_position()
    again = runner.invoke(cli, ["--db", str(db), "demo"])
    assert again.exit_code == 0, again.output
    with Store(db) as store:
        assert store.last_position() == before


def test_a_demo_not_whole_yet_is_said_so_and_left_as_it_is(tmp_path: Path) -> None:
    """A demo stopped part way (or still being built by another `threadlog demo`) read as built:
    it printed half its explanation, then "thread 'None' not found"; `--json` said a tampered row."""
    from tests.backends import file_dump
    from threadlog.demo import DEMO_THREAD

    db = tmp_path / "d.db"
    with Store(db) as store:
        store.create_thread(thread_id=DEMO_THREAD)
    before = file_dump(db)
    for args in (["demo"], ["demo", "--json"]):
        result = CliRunner().invoke(cli, ["--db", str(db), *args])
        assert result.exit_code == 1 and result.output.startswith("error: ") and "not whole yet" in result.output, result.output
        assert result.output.count("\n") == 1 and file_dump(db) == before


def test_demos_run_at_once_on_one_file_each_show_the_one_demo(tmp_path: Path) -> None:
    procs = [subprocess.Popen([str(Path(sys.executable).with_name("threadlog")), "--db", "r.db", "demo", "--json"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [(proc.communicate(timeout=120), proc.returncode) for proc in procs]
    done = [json.loads(out) for (out, _), code in outs if code == 0]
    assert all(code == 0 or "not whole yet" in err for (_, err), code in outs), outs
    assert done and sum(d["created"] for d in done) <= 1 and len({d["fork"] for d in done}) == 1
    with Store(tmp_path / "r.db") as store:
        assert len(store.all_threads()) == 4 and store.verify().streams == 4


def script(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("threadlog")
    return subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=60)


def test_console_script_demo_uses_the_current_directory(tmp_path: Path) -> None:
    done = script("demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "subagent" in done.stdout and (tmp_path / "threadlog.db").exists()
    assert script("verify", cwd=tmp_path).returncode == 0


def test_python_dash_m_threadlog_is_the_command(tmp_path: Path) -> None:
    """`python -m threadlog` said "No module named threadlog.__main__"."""
    done = subprocess.run([sys.executable, "-m", "threadlog", "--db", str(tmp_path / "m.db"), "new", "--title", "x"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with Store(tmp_path / "m.db") as store:
        assert store.title(done.stdout.strip()) == "x"


def test_console_script_honours_threadlog_db_and_fails_cleanly(tmp_path: Path) -> None:
    env = {"THREADLOG_DB": str(tmp_path / "env.db")}
    t = script("new", "--title", "x", cwd=tmp_path, env=env).stdout.strip()
    assert (tmp_path / "env.db").exists() and not (tmp_path / "threadlog.db").exists()
    bad = script("fork", t, cwd=tmp_path, env=env)
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


def test_db_before_the_command_and_precedence(tmp_path: Path) -> None:
    runner = CliRunner()
    group_db, command_db, env_db = (str(tmp_path / n) for n in ("group.db", "command.db", "env.db"))
    t = runner.invoke(cli, ["--db", group_db, "new"], env={"THREADLOG_DB": env_db}).stdout.strip()
    assert Path(group_db).exists() and not Path(env_db).exists()
    runner.invoke(cli, ["--db", group_db, "new", "--db", command_db])
    assert Path(command_db).exists()
    result = runner.invoke(cli, ["tree", "--json"], env={"THREADLOG_DB": group_db})
    assert [x["id"] for x in json.loads(result.stdout)] == [t]


def test_output_cut_short_by_the_reader_is_not_an_error(tmp_path: Path) -> None:
    """`threadlog log T | head -c 10`: no `error:` line and no traceback when the pipe closes."""
    exe = Path(sys.executable).with_name("threadlog")
    db = str(tmp_path / "pipe.db")
    with Store(db) as store:  # far more output than a pipe buffers
        t = store.create_thread()
        store.append(t, [{"type": "message.appended", "data": {"role": "user", "content": "y" * 20_000}}] * 50)
    done = subprocess.run(f"'{exe}' log {t} --json --db '{db}' | head -c 10", shell=True, capture_output=True, text=True, timeout=60)
    assert len(done.stdout) == 10
    assert "error" not in done.stderr and "Traceback" not in done.stderr, done.stderr


@contextlib.contextmanager
def broken_stdout(kind: str) -> Iterator[int]:
    """A file descriptor that refuses what is written to it: a full device, or a pipe whose reader left."""
    if kind == "full":
        if not Path("/dev/full").exists():
            pytest.skip("needs /dev/full")
        fd = os.open("/dev/full", os.O_WRONLY)
    else:
        read_end, fd = os.pipe()
        os.close(read_end)
    try:
        yield fd
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["full", "closed pipe"])
def test_a_write_whose_result_cannot_be_printed_says_it_was_committed(tmp_path: Path, kind: str) -> None:
    """`threadlog new > /dev/full` created the thread, then said `error: [Errno 28] No space left
    on device` and exited 1 (a closed pipe: exit 1 and nothing said), as a refusal does: a
    retry created a second thread. The write is named, said to be committed, and the status
    is 3, which no refusal uses."""
    db = str(tmp_path / "out.db")

    def broken(*args: str) -> subprocess.CompletedProcess[str]:
        with broken_stdout(kind) as fd:
            return subprocess.run([sys.executable, "-m", "threadlog", *args, "--db", db], stdout=fd, stderr=subprocess.PIPE,
                                  text=True, timeout=60)

    done = broken("new", "--title", "Trip")
    with Store(db) as store:
        [thread] = store.all_threads()
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert f"created thread {thread.id}" in done.stderr and "committed" in done.stderr, done.stderr
    assert "only printing the result failed" in done.stderr, done.stderr

    done = broken("append", thread.id, "--role", "user", "--text", "Find me a train")
    assert done.returncode == 3 and done.stderr.count("\n") == 1, done.stderr
    assert f"message.appended recorded on thread {thread.id} at offset 1" in done.stderr and "committed" in done.stderr
    done = broken("fork", thread.id)
    assert done.returncode == 3 and done.stderr.count("\n") == 1, done.stderr
    with Store(db) as store:
        assert [e.type for e in store.read(thread.id)] == ["thread.created", "message.appended"]
        [fork] = [t for t in store.all_threads() if t.id != thread.id]
        assert len(store.all_threads()) == 2 and f"created fork {fork.id} of thread {thread.id}" in done.stderr, done.stderr


def test_ctrl_c_once_the_write_is_committed_says_it_is_kept(tmp_path: Path) -> None:
    """A Ctrl-C after `threadlog new` created its thread (printing its id, closing the store)
    said `interrupted` and exited 130, as a command stopped before its write: a script ran it
    again and made a second thread. It is said to be committed, with status 3, as an output
    that failed is. The child is held in its print by a pipe kept full, then SIGINTed."""
    db = str(tmp_path / "t.db")
    read, write = os.pipe()
    os.set_blocking(write, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write, b"x" * 4096)
    os.set_blocking(write, True)
    child = interruptible([sys.executable, "-m", "threadlog", "--db", db, "new", "--title", "Trip"], stdout=write,
                          stderr=subprocess.PIPE, text=True)
    os.close(write)
    try:
        deadline = time.monotonic() + 60
        while not (os.path.exists(db) and _threads(db)) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # into the print, which the full pipe holds
        child.send_signal(signal.SIGINT)
        drained = threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(read, 65536), b"")], daemon=True)
        drained.start()
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
        os.close(read)
    [thread] = _threads(db)
    assert child.returncode == 3, err
    assert err == (f"error: committed: created thread {thread}; only what came after it was interrupted (Ctrl-C); the write "
                   f"is kept: `threadlog show {thread}` shows it, rather than running the command again\n")


def _threads(db: str) -> list[str]:
    with Store(db) as store:
        return [info.id for info in store.all_threads()]


def test_a_read_whose_output_cannot_be_printed_says_so(tmp_path: Path) -> None:
    """`threadlog ls > /dev/full` said only `error: [Errno 28] No space left on device`, as
    if the database had no room; it says the output could not be printed (exit 1: nothing
    was written, so running it again is safe)."""
    db = str(tmp_path / "out.db")
    with Store(db) as store:
        store.create_thread(title="Trip")
    for args in (["ls"], ["ls", "--json"], ["export", "--all"]):
        with broken_stdout("full") as fd:
            done = subprocess.run([sys.executable, "-m", "threadlog", *args, "--db", db], stdout=fd, stderr=subprocess.PIPE,
                                  text=True, timeout=60)
        assert done.returncode == 1, done.stderr
        assert done.stderr == "error: printing the output failed: No space left on device\n", (args, done.stderr)


def test_missing_directories_are_named(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "no" / "such"
    result = CliRunner().invoke(cli, ["--db", str(missing / "x.db"), "init"])
    assert result.exit_code == 1 and str(missing / "x.db") in result.stderr and "directory" in result.stderr
    assert not missing.exists()
    t = run("new").strip()
    run("append", t, "--role", "user", "--text", "hi")
    result = CliRunner().invoke(cli, ["transcript", t, "-o", str(missing / "t.md"), "--db", run.db])
    assert result.exit_code == 1 and result.stderr == f"error: no such directory to write the transcript in: {missing}\n"


def test_a_note_fork_with_a_transcript_path_writes_the_parent_as_of_the_fork_point_there(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    t = run("new", "--title", "Trip").strip()
    run("append", t, "--role", "user", "--text", "Find me a train to Lyon")
    run("append", t, "--role", "assistant", "--text", "The 08:04.")
    run("append", t, "--role", "user", "--text", "Later than that, please")
    path = tmp_path / "threads" / "trip.transcript.md"
    path.parent.mkdir()
    f = run("fork", t, "--at", "3", "--context", "note", "--transcript", str(path)).strip()
    note = json.loads(run("show", f, "--json"))["messages"][0]["content"][0]["text"]
    assert f"saved at:\n{path}\n" in note  # the fork note points the model at the file...
    written = path.read_text(encoding="utf-8")  # ...which holds the parent as the fork inherited it
    assert "Find me a train to Lyon" in written and "The 08:04." in written and "Later than that" not in written
    assert written == run("transcript", t, "--stop", "3", "--no-pager")


def test_a_refused_note_fork_leaves_the_transcript_an_earlier_fork_points_at(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    t = run("new").strip()
    run("append", t, "--role", "user", "--text", "Find me a train to Lyon")
    path = tmp_path / "trip.md"
    first = run("fork", t, "--context", "note", "--transcript", str(path)).strip()
    before = path.read_bytes()
    run("append", t, "--role", "user", "--text", "LATER-SECRET")
    run("emit", t, "run.started", "--data", '{"run_id": "r1"}')
    run("fork", t, "--context", "note", "--transcript", str(path), code=1)  # busy: a run is in progress
    assert path.read_bytes() == before and b"LATER-SECRET" not in before  # `first`'s note still tells the truth
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli.db", "trip.md"]  # no staged copy left beside it
    with Store(run.db) as store:
        assert [i.id for i in store.subtree(t)] == [t, first]  # and no second fork


def test_an_output_file_that_is_the_database_is_refused_and_the_database_kept(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`-o` and `--transcript` renamed their file over whatever the path named: `transcript T -o
    cli.db` replaced the database with its transcript (exit 0), and a note fork did too."""
    t = run("new", "--title", "Trip").strip()
    run("append", t, "--role", "user", "--text", "Find me a train")
    db = Path(run.db)
    (tmp_path / "link.db").symlink_to(db)
    before = db.read_bytes()
    for args in (["transcript", t, "-o", str(db)], ["export", "--all", "-o", f"{db}-wal"], ["export", t, "-o", str(tmp_path / "link.db")],
                 ["fork", t, "--context", "note", "--transcript", f"{db}-shm"]):
        result = CliRunner().invoke(cli, [*args, "--db", run.db])
        assert result.exit_code == 1 and "is the database's own file" in result.stderr, args
    assert db.read_bytes() == before
    # Opened through a symlink, SQLite keeps its log beside the file the link names.
    for target in (f"{db}-wal", f"{db}-shm"):
        result = CliRunner().invoke(cli, ["export", t, "-o", target, "--db", str(tmp_path / "link.db")])
        assert result.exit_code == 1 and "is the database's own file" in result.stderr, target
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{db}{suffix}").exists() or not Path(f"{db}{suffix}").read_bytes().startswith(b"{")
    with Store(run.db) as store:
        assert [i.id for i in store.subtree(t)] == [t]  # no fork was made
    run("verify")


def test_an_output_that_is_a_pipe_is_written_to_and_dash_is_stdout(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A pipe (or a device) named by `-o` became a regular file: the reader got nothing."""
    t = run("new", "--title", "Trip").strip()
    run("append", t, "--role", "user", "--text", "Find me a train")
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    (tmp_path / "to-pipe").symlink_to(pipe)
    expected = run("export", t)
    for target in (pipe, tmp_path / "to-pipe"):
        reader = subprocess.Popen(["cat", str(pipe)], stdout=subprocess.PIPE)
        assert run("export", t, "-o", str(target)) == ""  # no path printed into what may be the same stream
        assert reader.communicate(timeout=30)[0].decode() == expected
        assert pipe.is_fifo()
    assert run("export", t, "-o", "-") == expected and not (tmp_path / "-").exists()
    assert run("transcript", t, "-o", "-", "--no-pager") == run("transcript", t, "--no-pager")
    exe = str(Path(sys.executable).with_name("threadlog"))
    for command in (["export", t], ["transcript", t, "--no-pager"]):  # through /dev/stdout: the output alone, no path after it
        through = subprocess.run([exe, *command, "-o", "/dev/stdout", "--db", run.db], capture_output=True, text=True, timeout=60)
        printed = subprocess.run([exe, *command, "-o", "-", "--db", run.db], capture_output=True, text=True, timeout=60)
        assert through.returncode == 0 and printed.stdout and through.stdout == printed.stdout, through.stderr


def test_a_redaction_a_reader_held_up_is_finished_by_purge(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`redact` said to run `threadlog redact` again once the readers were done, which then
    refused: the position was already redacted. `threadlog purge` finishes it."""
    import sqlite3

    t = run("new").strip()
    position = run("append", t, "--role", "user", "--text", "card 4111-1111-1111-1111 holder QUIXOTE").split()[-1]
    db = Path(run.db)
    noted = tmp_path / "note.md"
    run("fork", t, "--context", "note", "--transcript", str(noted))  # written with the card in it
    # An idle connection stays open throughout, as a service's would: with no connection left,
    # SQLite itself copies the WAL into the file on the last close, and the check at the end
    # could not tell whether `purge` did anything.
    idle = sqlite3.connect(db)
    idle.execute("SELECT count(*) FROM events").fetchone()
    reader = sqlite3.connect(db)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM events").fetchone()  # a read held open
    result = CliRunner().invoke(cli, ["redact", position, "--reason", "pii", "--actor", "ops", "--db", run.db])
    # Committed: exit 3, as a write whose result could not be printed (1 said nothing was
    # written, and a script retrying was told the position was already redacted).
    assert result.exit_code == 3 and result.stderr.startswith(f"error: committed: position {position} is redacted ")
    assert "run `threadlog purge` once the readers are done" in result.stderr
    assert f"transcript {noted} was written with the erased text" in result.stderr  # named though the purge did not finish
    reader.rollback()
    reader.close()
    wal = Path(f"{db}-wal")
    # The text, or the search index's words of it ("quixote"): not "4111" alone, which a hex
    # hash in the file holds by chance about once in a few hundred runs.
    erased = re.compile(rb"4111-1111|quixote", re.IGNORECASE)
    assert erased.search(db.read_bytes() + wal.read_bytes())  # the old page the held-up redaction left
    assert run("purge") == "purged: no old copy of an erased payload is left\n"
    assert not erased.search(db.read_bytes()) and (not wal.exists() or not erased.search(wal.read_bytes()))
    idle.close()
    writer = sqlite3.connect(db)
    writer.execute("BEGIN IMMEDIATE")  # a writer holds the log up too: it said "another connection is reading"
    held = CliRunner().invoke(cli, ["purge", "--db", run.db])
    assert held.exit_code == 1 and "another connection is reading (or writing)" in held.stderr, held.output
    writer.rollback()
    writer.close()
    assert "[redacted]" in run("log", t)


@pytest.mark.parametrize("command", [["new"], ["demo"], ["ls"], ["import", "pi", "."]])
def test_a_database_in_memory_is_refused_by_the_cli(command: list[str]) -> None:
    """`threadlog --db :memory: new` printed a thread id and exited 0, the thread gone with the
    process; `demo` then told the user to run `threadlog ls --db :memory:`."""
    for args in ([*command, "--db", ":memory:"], ["--db", ":memory:", *command]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and "--db :memory: names a database that is gone when the command exits" in result.stderr, (
            args, result.output)
        assert result.stdout == ""


def test_fork_retrieval_help_says_what_the_requests_carry(run) -> None:  # type: ignore[no-untyped-def]
    """`--retrieval` said "when the model is told to consult the parent's transcript"; what it
    chooses is which requests carry the parent's passages a search finds relevant (the fork note,
    which tells the model where the transcript is, is the same whatever it says)."""
    t = run("new", "--model", "claude-test-1").strip()
    run("append", t, "--role", "user", "--text", "When does the ferry to Corsica leave?")
    run("append", t, "--role", "assistant", "--text", "At 9:00 from Nice.")
    notes = {}
    for mode in ("first-turn", "off"):
        fork = run("fork", t, "--context", "note", "--retrieval", mode).strip()
        run("append", fork, "--role", "user", "--text", "The ferry again?")
        notes[mode] = [block["text"] for block in json.loads(run("request", fork))["messages"][0]["content"]]
    assert notes["first-turn"][0] == notes["off"][0]  # the same fork note
    assert any("When does the ferry to Corsica leave?" in text for text in notes["first-turn"][1:])
    assert not any("Corsica" in text for text in notes["off"][1:])
    shown = " ".join(CliRunner().invoke(cli, ["fork", "--help"], terminal_width=1000).output.split())
    said = shown.split("--retrieval [per-turn|first-turn|off]", 1)[1].split("[default: off]", 1)[0]
    assert "passages of the parent's history" in said and "user message" in said, said
    assert "told to consult" not in said, said


def test_every_command_the_demo_suggests_runs_on_what_it_built(tmp_path: Path) -> None:
    """The demo's thread ends mid-run (a sub-agent has not reported), and a fork of its end is
    refused: "Try next" now names a fork that works, and every line it suggests runs."""
    db = tmp_path / "t.db"
    shown = CliRunner().invoke(cli, ["--db", str(db), "demo"])
    assert shown.exit_code == 0, shown.output
    suggested = [line.split("   ")[0].split()[1:] for line in shown.output.split("Try next:\n")[1].splitlines()
                 if line.startswith("  threadlog ")]
    assert any(args[0] == "fork" for args in suggested), suggested
    for args in suggested:
        done = CliRunner().invoke(cli, args)
        assert done.exit_code == 0, (args, done.output)


def test_the_cli_starts_without_the_modules_only_some_commands_need() -> None:
    """A hook or a shell loop starts a process per event: the start is what it pays. These
    load where they are used: `urllib.request` (and with it `http.client`, `email`, `ssl`) came
    in for one escape function, and the split verify's child machinery (`subprocess`) with
    `eventstore.verify`, together 16-40 ms of CPU of a ~0.5 s start; `anthropic` takes seconds
    and only live turns need it."""
    unwanted = ["urllib.request", "ssl", "subprocess", "eventstore.splitscan", "anthropic"]
    script = f"import sys\nimport threadlog.cli\nprint([m for m in {unwanted!r} if m in sys.modules])\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_interrupt_group_names_every_command_it_holds() -> None:
    """`threadlog --help` said `interrupt` raises, resolves or cancels one, so a reader looking
    for the questions waiting on a thread did not find `interrupt list` there."""
    from click.testing import CliRunner

    listed = CliRunner().invoke(cli, ["--help"]).stdout
    line = next(row for row in listed.splitlines() if row.strip().startswith("interrupt "))
    assert all(name in line for name in ("Raise", "resolve", "cancel", "list")), line
