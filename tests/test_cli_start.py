"""The `threadlog` command's start: Ctrl-C while it is still loading its modules (most of a second).

It raised `KeyboardInterrupt` inside an import and Python printed a traceback; once the command
ran, the same Ctrl-C printed `interrupted` and exited 130.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from eventstore import Store
from tests.backends import file_dump
from tests.procs import interruptible

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_loads_nothing_until_a_name_is_used() -> None:
    """What the command's start stands on: `import threadlog` (which `python -m threadlog` and the
    console script both do before anything can catch a Ctrl-C) loaded the store, pydantic and
    click. Each public name is loaded on first use, and stays what it names once every module of
    the package is imported (a submodule of the same name would otherwise take its place)."""
    code = """if True:
        import importlib, inspect, pkgutil, sys
        import threadlog
        loaded = sorted(m for m in sys.modules if m.partition(".")[0] in ("eventstore", "projections", "click", "pydantic"))
        print(loaded)
        for module in pkgutil.iter_modules(threadlog.__path__):
            importlib.import_module(f"threadlog.{module.name}")
        print(sorted(name for name in threadlog.__all__ if inspect.ismodule(getattr(threadlog, name))))
        print(threadlog.Store.__module__, threadlog.transcript_tools.__name__)
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "[]", "eventstore.store transcript_tools"]


_MODULE, _FUNCTION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]["threadlog"].split(":")
# The command started as the console script pyproject.toml declares (what pip writes in it) and
# as `python -m threadlog`.
STARTS = {
    "console-script": ["-c", f"import sys; from {_MODULE} import {_FUNCTION}; sys.exit({_FUNCTION}())"],
    "python-m": ["-m", "threadlog"],
}
# Seconds after Python's own start-up: the first lands while the CLI's modules load, the last
# (on a machine where loading is quick) may come after `ls` has finished.
DELAYS = (0.1, 0.25, 0.4, 0.6)


def _ctrl_c_after(delay: float, start: str, db: Path) -> tuple[int, list[str]]:
    """`threadlog ls` sent a SIGINT `delay` seconds after its interpreter's own start-up: its
    status and stderr. Python's own start-up (`site`, the installed packages' `.pth` files) runs
    no code of threadlog's, and a Ctrl-C there is Python's to report; `-X importtime` says on
    stderr when it is over (the `site` line), and its lines are left out of what is returned."""
    lines: list[str] = []
    started = threading.Event()
    with interruptible([sys.executable, "-X", "importtime", *STARTS[start], "ls", "--db", str(db)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as child:

        def read() -> None:
            for line in child.stderr:
                lines.append(line)
                if line.rstrip().endswith("| site"):
                    started.set()
            started.set()  # ended before it said so: the assertions say how

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert started.wait(timeout=60)
            time.sleep(delay)
            child.send_signal(signal.SIGINT)
            child.wait(timeout=60)
        finally:
            child.kill()  # only if it did not stop
        reader.join(timeout=60)
    return child.returncode, [line for line in lines if not line.startswith("import time:")]


@pytest.mark.parametrize("start", list(STARTS))
def test_ctrl_c_while_the_command_loads_exits_130_without_a_traceback(tmp_path: Path, start: str) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.create_thread(title="Trip")
    before = file_dump(db)
    for delay in DELAYS:
        status, err = _ctrl_c_after(delay, start, db)
        assert "Traceback" not in "".join(err), (delay, "".join(err))
        # 130 and one line; 0 if `ls` had finished; killed by the SIGINT (what a shell reports as
        # 130) if it came as Python was exiting, its own handler gone.
        assert (status, "".join(err)) in {(130, "interrupted\n"), (0, ""), (-signal.SIGINT, "")}, (delay, status, "".join(err))
        assert file_dump(db) == before


# A `threadlog.cli` whose loading meets a Ctrl-C and reports it as an error of its own, as
# pydantic does: it builds validators in Rust, and a `KeyboardInterrupt` raised there comes out
# as a `SchemaError` (seen once in a hundred runs of the test above, under load).
_WRAPPED = """if True:
    import os, signal, sys, types
    class Loader(types.ModuleType):
        def __getattr__(self, name):
            try:
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(10_000_000):  # the handler runs between two bytecodes
                    pass
            except KeyboardInterrupt as caught:
                raise RuntimeError("Error building validator: KeyboardInterrupt") from None
            raise AssertionError("no SIGINT came")
    sys.modules["threadlog.cli"] = Loader("threadlog.cli")
    from threadlog.__main__ import main
    main()
"""


def _run_taking_ctrl_c(code: str) -> tuple[int, str, str]:
    """`python -c CODE` (its status, stdout and stderr) with Ctrl-C at Python's default however
    this test was started (`interruptible`): a child that inherited SIGINT ignored never gets the
    one it sends itself."""
    with interruptible([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True) as child:
        try:
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()  # only if it did not stop
    return child.returncode, out, err


def test_an_error_the_loading_reports_for_a_ctrl_c_exits_130_without_a_traceback() -> None:
    status, _, err = _run_taking_ctrl_c(_WRAPPED)
    assert (status, err) == (130, "interrupted\n"), err


def test_a_ctrl_c_as_the_loaded_command_takes_back_python_s_handler_exits_130_without_a_traceback(tmp_path: Path) -> None:
    """Once the CLI is loaded, Python's own Ctrl-C handler is put back; `signal.signal` returns
    after doing so (it turns the old handler into an enum), and a Ctrl-C in that moment was
    raised by Python's handler, not the one that notes it, so it came out as a traceback (seen
    once in a loaded run of the test above). Here it lands exactly then."""
    code = f"""if True:
        import os, signal, sys
        real = signal.signal
        def then_ctrl_c(signum, handler):
            old = real(signum, handler)
            if handler is signal.default_int_handler:
                os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C as the call returns
            return old
        signal.signal = then_ctrl_c
        sys.argv = ["threadlog", "ls", "--db", {str(tmp_path / "t.db")!r}]
        from threadlog.__main__ import main
        main()
    """
    status, out, err = _run_taking_ctrl_c(code)
    assert (status, out, err) == (130, "", "interrupted\n"), err
    assert not (tmp_path / "t.db").exists()


def test_an_error_of_the_loading_without_a_ctrl_c_is_still_reported() -> None:
    broken = _WRAPPED.replace("os.kill(os.getpid(), signal.SIGINT)", "raise ValueError('broken')")
    done = subprocess.run([sys.executable, "-c", broken], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "ValueError: broken" in done.stderr


def test_a_ctrl_c_as_the_finished_command_exits_prints_no_traceback() -> None:
    """A Ctrl-C that came once the command had finished, while the interpreter was exiting
    (waiting on a thread, as `threading` does at exit), printed `Exception ignored in ...
    KeyboardInterrupt` and a traceback: nothing is left to interrupt then."""
    code = """if True:
        import os, signal, sys, threading, time
        done = threading.Event()
        def ctrl_c_at_exit():  # the exit waits for this thread, which sends the Ctrl-C once main is done
            done.wait()
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
        threading.Thread(target=ctrl_c_at_exit).start()
        sys.argv = ["threadlog", "--version"]
        from threadlog.__main__ import main
        try:
            main()
        finally:
            done.set()
    """
    status, out, err = _run_taking_ctrl_c(code)
    assert (status, err) == (0, ""), err
    assert out.startswith("threadlog, version ")


_MODULES_AFTER = """if True:
    import atexit, sys
    atexit.register(lambda: print(sorted(m for m in sys.modules if m.startswith(("threadlog.cli.", "threadlog.importers")))))
    sys.argv = ["threadlog", *sys.argv[1:]]
    from threadlog.__main__ import main
    main()
"""
_COMMAND_MODULES = {"threadlog.cli.api", "threadlog.cli.audit", "threadlog.cli.reading", "threadlog.cli.search",
                    "threadlog.cli.serve", "threadlog.cli.transfer", "threadlog.cli.writing"}


@pytest.mark.parametrize(("args", "loaded"), [
    (["ls"], {"threadlog.cli.reading"}),
    (["append", "t", "--role", "user", "--text", "hi"], {"threadlog.cli.writing"}),
    (["verify"], {"threadlog.cli.audit"}),
    (["--help"], _COMMAND_MODULES),  # to list every command with its own summary
], ids=["ls", "append", "verify", "help"])
def test_a_command_loads_only_the_commands_of_its_own_module(tmp_path: Path, args: list[str], loaded: set[str]) -> None:
    """Every process a script starts (one per thread, one per event) loaded every command's
    module: `ls` imported the importers of four tools, the sub-agents and the demo, a tenth of
    its start."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.create_thread(thread_id="t")
    done = subprocess.run([sys.executable, "-c", _MODULES_AFTER, "--db", str(db), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    modules = set(eval(done.stdout.splitlines()[-1]))  # the list printed last, as Python's repr
    assert modules & _COMMAND_MODULES == loaded
    if "threadlog.cli.transfer" not in loaded:  # (`import`'s)
        assert not [m for m in modules if m.startswith("threadlog.importers")], modules


def test_every_command_a_module_registers_is_listed_and_found() -> None:
    """The group lists its commands from a table of their modules (`_COMMANDS`): a command a
    module registers that the table leaves out would be neither listed nor run."""
    code = """if True:
        import importlib, pkgutil, click
        import threadlog.cli as package
        from threadlog.cli import cli
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"threadlog.cli.{module.name}")
        print(sorted(cli.commands) == cli.list_commands(click.Context(cli)))
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "True\n"), done.stderr


def test_command_names_complete_in_the_shell() -> None:
    env = {**os.environ, "_THREADLOG_COMPLETE": "bash_complete", "COMP_WORDS": "threadlog tr", "COMP_CWORD": "1"}
    done = subprocess.run([sys.executable, "-m", "threadlog"], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["plain,transcript", "plain,tree"], done


@pytest.mark.parametrize("typed", ["lss", "interupt", "sho"])
def test_a_mistyped_command_is_answered_with_the_close_ones(typed: str) -> None:
    """click suggests the close matches among the commands it holds, and a command is loaded only
    when it runs: `threadlog lss` said "No such command 'lss'." and no more."""
    done = subprocess.run([sys.executable, "-m", "threadlog", typed], capture_output=True, text=True, timeout=60)
    meant = {"lss": "ls", "interupt": "interrupt", "sho": "show"}[typed]
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == f"Error: No such command '{typed}'. Did you mean '{meant}'?", done.stderr


@pytest.mark.parametrize(("group", "commands"), [("import", "claude-code, events, pi, swe-agent"),
                                                 ("interrupt", "cancel, list, raise, resolve")])
def test_an_argument_given_before_the_subcommand_is_answered_with_the_subcommands(tmp_path: Path, group: str,
                                                                                  commands: str) -> None:
    """`threadlog import notes.txt` (the format left out) said only "No such command
    'notes.txt'.", as if the file were a mistyped command; no database is made."""
    given = tmp_path / "my notes.txt"
    given.write_text("hello\n")
    done = subprocess.run([sys.executable, "-m", "threadlog", group, str(given)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (f"Error: No such command '{given}'. `threadlog {group}` takes one of its "
                                            f"commands first ({commands}), then their arguments: `threadlog {group} "
                                            f"COMMAND '{given}'`"), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my notes.txt"]
    near = subprocess.run([sys.executable, "-m", "threadlog", "import", "claude"], capture_output=True, text=True, timeout=60)
    assert near.stderr.splitlines()[-1] == "Error: No such command 'claude'. Did you mean 'claude-code'?", near.stderr


@pytest.mark.parametrize(("opening", "command", "what"), [
    ('{"type":"session","id":"s1","timestamp":"2025-01-01T00:00:00Z","cwd":"/w"}\n', "pi", "a pi session's header"),
    ('{"type":"user","sessionId":"s","uuid":"u1","message":{"role":"user","content":"hi"}}\n', "claude-code",
     "a Claude Code session's line"),
    ('{\n  "trajectory": [],\n  "history": []\n}\n', "swe-agent", "a SWE-agent trajectory"),
    ('{"format":"threadlog-events","version":2}\n', "events", "a threadlog export's header"),
])
def test_a_file_given_without_its_format_is_answered_with_the_command_that_imports_it(tmp_path: Path, opening: str,
                                                                                      command: str, what: str) -> None:
    """`threadlog import ~/.claude/projects/p/s.jsonl`: the importers tell each other's files
    apart, so the command line names the one this file wants, quoted for the shell."""
    from click.testing import CliRunner  # here: this file tests what the package loads

    from threadlog.cli import cli

    given = tmp_path / "a session.jsonl"
    given.write_text(opening)
    done = CliRunner().invoke(cli, ["import", str(given)])
    assert done.exit_code == 2
    assert done.output.splitlines()[-1] == (f"Error: No such command '{given}'. The file opens with {what}: import it "
                                            f"with `threadlog import {command} '{given}'`"), done.output
    # What else was typed comes with it: the database named (before the group or in it), the
    # other files and options, each word quoted for a shell (a newline or an escape as $'…').
    other = tmp_path / "x\n\x1b[31m.jsonl"
    for typed in (["--db", "my db.db", "import"], ["import", "--db", "my db.db"]):
        done = CliRunner().invoke(cli, [*typed, str(given), str(other), "--skip-bad"])
        assert done.exit_code == 2
        assert done.output.splitlines()[-1].endswith(
            f"import it with `threadlog --db 'my db.db' import {command} '{given}' $'{tmp_path}/x\\u000a\\u001b[31m.jsonl' "
            "--skip-bad`"), done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a session.jsonl"]


@pytest.mark.parametrize(("typed", "command", "option"), [(["--json", "ls"], "ls", "--json"),
                                                       (["-n", "5", "log", "abc"], "log", "-n"),
                                                       (["--no-pager", "show", "abc"], "show", "--no-pager")])
def test_a_command_s_option_before_the_command_says_where_it_goes(typed: list[str], command: str, option: str) -> None:
    """Only --db, --version and --help go before the command: `threadlog --json ls` said
    "No such option '--json'. Did you mean '--version'?", as if `ls` had no --json."""
    done = subprocess.run([sys.executable, "-m", "threadlog", *typed], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (f"Error: {option} is an option of `threadlog {command}`: give it after the command "
                                            f"(`threadlog {command} {option} …`); before it go only --db, --version and --help"), done.stderr


# Started as `python -m` (what ends itself by SIGINT where a Ctrl-C stayed marked unhandled):
# a SIGINT as the command being run loads its module, inside the first code `exec()` runs for
# it, as dataclasses and named tuples build their methods (the importers', here).
_CTRL_C_IN_EXEC = """import os, signal, sys

def ctrl_c_in_exec(frame, event, arg):
    if event == "call" and frame.f_code.co_filename == "<string>" and \\
            frame.f_globals.get("__name__", "").startswith("threadlog.importers."):
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGINT)

sys.setprofile(ctrl_c_in_exec)
sys.argv = ["threadlog", *sys.argv[1:]]
from threadlog.__main__ import main
main()
"""


@pytest.mark.parametrize("args", [["import", "claude-code", "."], ["--help"]], ids=["import", "help"])
def test_ctrl_c_while_a_command_s_module_loads_exits_130(tmp_path: Path, args: list[str]) -> None:
    """A command's module is loaded once the command line is read (`threadlog --help` loads them
    all): a Ctrl-C then ended `python -m threadlog` by SIGINT once it had printed `interrupted`,
    CPython keeping a Ctrl-C raised inside `exec()` marked unhandled, and `--help` said
    `Aborted!` and exited 1 (click's own)."""
    (tmp_path / "ctrl_c_in_exec.py").write_text(_CTRL_C_IN_EXEC, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with interruptible([sys.executable, "-m", "ctrl_c_in_exec", "--db", str(tmp_path / "t.db"), *args], cwd=tmp_path,
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        try:
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()  # only if it did not stop
    assert (child.returncode, out, err) == (130, "", "interrupted\n"), err
    assert not (tmp_path / "t.db").exists()


def test_a_file_named_like_a_command_is_answered_with_its_format_not_the_near_name(tmp_path: Path) -> None:
    """`threadlog import events.jsonl` (a pi session) was answered "Did you mean 'events'?",
    click's near name, which would restore it as a threadlog export."""
    from click.testing import CliRunner  # here: this file tests what the package loads

    from threadlog.cli import cli

    given = tmp_path / "events.jsonl"
    given.write_text('{"type":"session","id":"s1","timestamp":"2025-01-01T00:00:00Z","cwd":"/w"}\n')
    done = CliRunner().invoke(cli, ["import", str(given)])
    assert done.exit_code == 2
    assert done.output.splitlines()[-1].endswith(f"import it with `threadlog import pi {given}`"), done.output
