"""The README's Python examples run as written, and its commands name real CLI commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from threadlog import Store
from threadlog.cli import cli

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```python\n(.*?)```", README, flags=re.S)


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_python_examples_run(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})


def _shell_block(heading: str) -> str:
    """The first ```sh block after `heading`."""
    return README.split(heading, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]


def _commands(block: str) -> list[str]:
    """A shell block's commands as a reader runs them: comments and `[--optional]` parts left out."""
    lines = []
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line) if not line.lstrip().startswith("#") else ""
        while re.search(r"\s*\[-[^\[\]]*\]", line):
            line = re.sub(r"\s*\[-[^\[\]]*\]", "", line)
        if line.strip():
            lines.append(line)
    return lines


def _run_the_tour(tmp_path: Path, *after: str) -> subprocess.CompletedProcess[str]:
    """The tour under "## Command line" through a real subprocess in `tmp_path`, as a reader
    runs it (`follow` and `serve`, which run until stopped, passed over), then `after`."""
    lines = [line for line in _commands(_shell_block("## Command line")) if not re.match(r"threadlog (follow|serve)\b", line)]
    script = "\n".join(["set -e", f'threadlog() {{ "{sys.executable}" -m threadlog "$@"; }}', *lines, *after])
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "THREADLOG_DB": str(tmp_path / "threadlog.db"), "PYTHONPATH": str(root)})
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done


def test_documented_commands_exist() -> None:
    used = set(re.findall(r"^\s*(?:\w+=\$\()?threadlog ([\w-]+)", README, flags=re.M))
    assert used and used <= set(cli.list_commands(click.Context(cli))), used - set(cli.list_commands(click.Context(cli)))


def test_the_live_turn_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example of live turns, against tests/messages_api.py (its `tools=...` spelled out).
    Its `rerun(store, t2, at=5)` forked inside the first run, which an interrupt holds open
    there (ForkRefused busy), once the example made `t2` a thread of its own."""
    import anthropic
    from messages_api import MessagesAPI, message

    block = README.split("against a local server):\n\n```py\n", 1)[1].split("```", 1)[0]
    code = block.replace("tools=...", "tools={'weather': weather, 'ask_human': ask_human}")
    with MessagesAPI() as api:
        client = api.client(0, 10.0)
        monkeypatch.setattr(anthropic, "Anthropic", lambda *args, **kwargs: client)
        api.reply_json(message([{"type": "tool_use", "id": "tu1", "name": "weather", "input": {"day": "Mon"}},
                                {"type": "tool_use", "id": "tu2", "name": "ask_human", "input": {"question": "Which day?"}}],
                               "tool_use"))
        for _ in range(4):
            api.reply_json(message([{"type": "text", "text": "Tuesday, sunny."}]))
        namespace: dict[str, object] = {"store": Store(":memory:")}  # the README's `store`, from the example before
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102


def test_show_folds_and_cuts_the_title_and_system_prompt_as_the_readme_says(tmp_path: Path) -> None:
    """README said `show`'s fields but its model view kept the text whole: its title, system
    prompt (and last run, model, each setting, metadata key and todo) are each one line cut at
    100 characters."""
    from click.testing import CliRunner

    db = str(tmp_path / "t.db")
    system = "You plan trips.\nBe brief.\n\t" + "x" * 200
    thread = CliRunner().invoke(cli, ["--db", db, "new", "--title", "A\nB", "--system", system]).stdout.strip()
    shown = CliRunner().invoke(cli, ["--db", db, "show", thread]).stdout.splitlines()
    assert "system      You plan trips. Be brief. " + "x" * 73 + "…" in shown
    assert "title       A B" in shown
    assert _said("`show`'s title, model, system prompt and last run, and each setting, metadata key (`key \"value\"` as JSON) "
                 "and todo, a line each, are folded so too, and cut at 100 characters")


def test_the_command_line_tour_runs_in_order_on_a_fresh_database(tmp_path: Path) -> None:
    """The tour under "## Command line", each command as shown (its `[optional]` parts left out,
    `follow` and `serve`, which run until stopped, passed over), on a new database. Its `ls`
    said "threads" where the command lists root threads unless given --all, so a reader who had
    just made five forks saw one line; and an empty `interrupt list` says so on stderr."""
    block = _shell_block("## Command line")
    done = _run_the_tour(tmp_path, 'echo "t=$t"', "threadlog ls", "echo ---", "threadlog ls --all")
    assert (tmp_path / "trip.transcript.md").exists()
    t = done.stdout.split("t=", 1)[1].splitlines()[0]
    roots, everything = done.stdout.split("t=", 1)[1].split("---\n")
    assert [row.split()[0] for row in roots.splitlines()[2:]] == [t]
    assert len(everything.splitlines()) == 1 + 1 + 5  # the header, t, its three forks and two sub-agents
    assert "# root threads (--all: forks and sub-agents\n" in block
    assert "(none: `no question waiting` on stderr, exit 0)" in block


def test_the_projections_example_runs_where_the_command_line_tour_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader who ran the command-line tour and then the Projections example in the same
    directory saw the example refused: the tour's note fork writes `trip.transcript.md`, and
    the example's note fork of another thread named that same file, which a fork refuses to
    write over (another thread's note fork may point its model at it)."""
    _run_the_tour(tmp_path)
    example = next(code for code in EXAMPLES if "fork_with_transcript(store" in code)
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "README.md", "exec"), {})  # noqa: S102


def test_the_reading_search_and_backup_commands_run_as_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command blocks under "## Projections" and "## Search and retrieval", and the export
    and restore lines under "## Import and export", each as shown (its `[optional]` parts left
    out), on a thread `$t` and a fork `$f` of it: none had been run, so an option renamed in the
    code went on being printed here."""
    import shlex

    from click.testing import CliRunner

    monkeypatch.chdir(tmp_path)
    db = str(tmp_path / "threadlog.db")
    with Store(db) as store:
        t = store.create_thread(title="Trip")
        store.append_message(t, "user", "Is there a ferry to Corsica from Nice?")
        store.append_message(t, "assistant", "Yes, several a day in summer.")
        f = store.fork(t)
    backups = [line for line in _commands(_shell_block("## Import and export"))
               if line.startswith(("threadlog export", "threadlog import events"))]
    lines = [*_commands(_shell_block("## Projections")), *_commands(_shell_block("## Search and retrieval")), *backups]
    assert len(backups) == 3 and any(line.startswith("threadlog search") for line in lines)
    for line in lines:
        words = shlex.split(line.replace("$t", t).replace("$f", f).replace("THREAD", t))
        assert words[0] == "threadlog", line
        done = CliRunner().invoke(cli, ["--db", db, *words[1:]])
        assert done.exit_code == 0, (line, done.output)
    with Store(tmp_path / "restored.db") as restored:
        assert restored.verify().events == 4 and restored.head(f) == 4


def test_every_option_a_readme_command_shows_is_one_it_takes() -> None:
    """The blocks run above leave `[--optional]` parts out, and the others (imports, `ask`,
    `serve`, PostgreSQL) are not run at all: each option any command line of the README shows,
    its comment aside, is one that command (or `threadlog` itself) takes."""
    wrong = []
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", README, flags=re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line)
            for call in re.split(r"(?<![\w.-])threadlog\b", line)[1:]:
                words, command, known = call.split(), cli, {"--db", "--version", "--help", "-h"}
                while words and isinstance(command, click.Group) and words[0] in command.list_commands(click.Context(command)):
                    command = command.get_command(click.Context(command), words.pop(0))
                    known |= {name for param in command.params for name in param.opts + param.secondary_opts}
                wrong += [(line, option) for option in re.findall(r"(?<![\w'\"-])--?[a-z][\w-]*", " ".join(words))
                          if option not in known]
    assert wrong == []


def test_the_readme_counts_the_targets_a_postgresql_and_a_scale_run_judge() -> None:
    """The README said a PostgreSQL run's "six targets" pass; `bench/targets.py` has five that
    such a run judges (and nine a scale run does)."""
    from bench.targets import TARGETS

    assert sum(target.id.startswith("pg_") for target in TARGETS) == 5
    assert sum(target.id.startswith("scale_") for target in TARGETS) == 9
    assert _said("beside it): all five targets pass") and not _said("six targets")
    assert _said("eight of nine targets pass")


def test_every_test_the_readme_names_is_there() -> None:
    """Each guarantee names the tests that show it: `tests/FILE.py::name`, or `::name` for one of
    the file named just before. One `::name` followed a file it is not in (it is in
    test_tamper.py), so a reader looking for it found nothing."""
    root = Path(__file__).resolve().parent
    missing, file = [], ""
    for named, test in re.findall(r"`(?:tests/([\w/]+\.py))?(?:::(\w+))?`", README):
        file = named or file
        if named and not (root / named).exists():
            missing.append(named)
        elif test and not re.search(rf"^def {test}\(", (root / file).read_text(encoding="utf-8"), flags=re.M):
            missing.append(f"{file}::{test}")
    assert missing == []


def _said(text: str) -> bool:
    """Whether the README says `text`, its line breaks aside."""
    return text in " ".join(README.split())


def test_the_readme_pages_threads_as_store_threads_does(tmp_path: Path) -> None:
    """`Store.threads` took `below=` (a page's last thread) and said `before=` skips the
    threads tied with a page's last row; the README named neither. Its example pages by
    `below=`, and what it says of `before=` holds, with threads tied by raw SQL."""
    import sqlite3

    from eventstore.sqlite import RECENCY_SHIFT

    assert "more = store.threads(20, below=(page[-1].last_position, page[-1].id))" in README
    assert _said("`threads(before=P)` lists the threads last active before position P instead: a page's next one from "
                 "its last row's `last_position` alone leaves out the threads tied with that row at it")
    db = tmp_path / "t.db"
    with Store(db) as store:
        made = [store.create_thread(thread_id=f"t{i}") for i in range(5)]
        tied = store.thread(made[2]).last_position
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE streams SET last_position = {tied}, recency = {tied >> RECENCY_SHIFT} "
                     "WHERE id IN ('t1', 't2', 't3')")
    with Store(db) as store:
        page = store.threads(2)
        assert [info.id for info in page] == ["t4", "t3"]
        assert [info.id for info in store.threads(20, below=(page[-1].last_position, page[-1].id))] == ["t2", "t1", "t0"]
        assert [info.id for info in store.threads(20, before=page[-1].last_position)] == ["t0"]  # t2 and t1 left out


def test_the_readme_says_what_a_listing_does_with_rows_altered_outside_threadlog(tmp_path: Path) -> None:
    """`ls --json` cut short by a refused row (one on its second read of 1,000 rows), and
    `tree --all --json` holding a fork whose parent's row is gone, each exit 1 with a message
    the README did not describe."""
    import json
    import sqlite3

    from click.testing import CliRunner

    db = tmp_path / "t.db"
    with Store(db, synchronous="OFF") as store:
        for i in range(6):
            store.create_thread(thread_id=f"t{i}")
        root = store.create_thread(thread_id="root")
        store.append_message(root, "user", "hi")
        store.fork(root, fork_id="fork")
        for _ in range(2200):  # listing keys 2, 1, 0: the second read of 1,000 reaches t5's
            store.create_thread()
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM streams WHERE id = 'root'")
    done = CliRunner().invoke(cli, ["--db", str(db), "tree", "--all", "--json"])
    assert done.exit_code == 1 and {row["id"]: row["parent_id"] for row in json.loads(done.stdout)}["fork"] == "root"
    assert "a fork names a parent not in the file ('fork' forks 'root')" in done.stderr
    assert _said("`tree --all` prints a fork whose parent's row is gone at the top of a tree of its own (`--json`: with "
                 "the `parent_id` no printed row has) and exits 1 once every tree is printed, naming the first such fork.")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE streams SET last_position = NULL WHERE id = 't5'")
    done = CliRunner().invoke(cli, ["--db", str(db), "ls", "--all", "-n", "5000", "--json"])
    assert done.exit_code == 1 and "the stream row of 't5' was altered outside threadlog" in done.stderr, done.output
    printed = done.stderr.split("the listing is incomplete: ", 1)[1]
    assert _said(f"ends `the listing is incomplete: {printed.replace('holds the 1000 rows', 'holds the N rows').strip()}`")
    assert _said("is refused by name by each page of `ls` and `tree` that reaches it (exit 1; `threadlog verify` names "
                 "where): on SQLite each page reaching the listing key the row kept, on PostgreSQL every page, `--before` "
                 "or not. No page lists the threads around it without a word")


def test_the_readme_says_how_the_viewer_pages_its_list_of_threads() -> None:
    """The README said only "paged": 50 a page, each older page from right after the last
    thread shown."""
    from threadlog.web.pages import THREADS

    assert THREADS == 50 and _said("last activity, 50 a page (each \"Older threads\" page starts right after the last "
                                   "thread shown, as `ls --before P:T` does, so no thread is skipped or shown twice)")


def test_the_readme_says_only_a_file_store_serves_a_turn_run_on_another_thread(tmp_path: Path) -> None:
    """The README said "a `Store` serves every thread" beside `asyncio.to_thread(run_turn, ...)`,
    after examples whose store is `:memory:`, which refuses every thread but the one that opened it."""
    import asyncio

    from eventstore import StoreError
    from messages_api import MessagesAPI, message
    from threadlog import run_turn

    assert _said("a `Store` on a file serves every thread, while a `:memory:` one serves only the thread that "
                 "opened it and refuses the others with a `StoreError`")
    with MessagesAPI() as api:
        api.reply_json(message([{"type": "text", "text": "From a thread."}]))
        memory, on_file = Store(":memory:"), Store(tmp_path / "t.db")
        for store in (memory, on_file):
            t = store.create_thread(model="claude-sonnet-4-5")
            if store is memory:
                with pytest.raises(StoreError, match="serves only the thread that opened it"):
                    asyncio.run(asyncio.to_thread(run_turn, store, t, "Hello", api.client()))
                assert store.head(t) == 1
            else:
                assert asyncio.run(asyncio.to_thread(run_turn, store, t, "Hello", api.client())).text == "From a thread."
        on_file.close()


def test_a_live_turns_tool_launches_sub_agents_as_the_readme_says(tmp_path: Path) -> None:
    """The README showed `fan_out` only after an assistant message appended by hand; a model's
    launching call in a live turn is answered by running its tool's function, so it did not say
    how a live turn starts sub-agents. The function fans out and returns the placeholder; the
    parent's turn goes on, and each sub-agent's report reaches the parent's next request."""
    from messages_api import MessagesAPI, message
    from threadlog import check_request, report, run_turn

    assert _said("the function that runs the model's launching tool makes them: it calls `store.fan_out(t, ...)` on "
                 "the thread whose turn called it (the call waits for its result then) and returns the placeholder, "
                 "`\"Fork started — processing in background\"`")
    store = Store(tmp_path / "t.db")
    agent = {"name": "Agent", "description": "Start sub-agents", "input_schema": {"type": "object"}}
    t = store.create_thread(system="You plan trips.", model="claude-sonnet-4-5", tools=[agent])
    kids: list[str] = []

    def launch(tasks: list[str]) -> str:
        kids.extend(store.fan_out(t, tasks))
        return "Fork started — processing in background"

    with MessagesAPI() as api:
        api.reply_json(message([{"type": "tool_use", "id": "tu_agent", "name": "Agent",
                                 "input": {"tasks": ["find a hotel", "check the trains"]}}], "tool_use"))
        api.reply_json(message([{"type": "text", "text": "Two sub-agents are on it."}]))
        assert run_turn(store, t, "Plan Lyon", api.client(), tools={"Agent": launch}).status == "ok"
        for kid, answer in zip(kids, ["Hotel Ibis, 80 EUR", "The 08:00 TGV"]):
            api.reply_json(message([{"type": "text", "text": answer}]))
            assert run_turn(store, kid, None, api.client()).text == answer
            report(store, kid)
        api.reply_json(message([{"type": "text", "text": "Ibis, and the 08:00."}]))
        last = run_turn(store, t, None, api.client(), tools={"Agent": launch})
        assert last.text == "Ibis, and the 08:00."
        sent = api.requests[-1].json["messages"][-1]["content"]
        assert ["Hotel Ibis, 80 EUR" in block["text"] for block in sent] == [True, False]
        assert ["The 08:00 TGV" in block["text"] for block in sent] == [False, True]
        assert check_request(store, t, last.messages[0].offset).ok
    store.verify()
    store.close()
