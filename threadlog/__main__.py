"""Where the `threadlog` command starts: the console script (`threadlog.__main__:main`) and
`python -m threadlog` alike.

Loading the CLI takes most of a second (the store, pydantic, click). A Ctrl-C in it raised
`KeyboardInterrupt` inside an import, which Python reported with a traceback; once the
command runs, a Ctrl-C ends it with `interrupted` and status 130. Nothing is imported here
before the `try` (`import threadlog` loads nothing itself), so a Ctrl-C at any moment of
start-up once this runs ends that way too, before anything was written (one in Python's own
start-up before it, some tens of milliseconds, is the interpreter's to report). An error
the loading raises after a Ctrl-C is the Ctrl-C's too (see `main`).
"""

import os
import signal
import sys
from types import FrameType


def main() -> None:
    """Run the `threadlog` command; Ctrl-C while it loads exits 130, as Ctrl-C during it does.
    It is the program: once the command is done, Ctrl-C is ignored while the interpreter exits."""
    interrupted = False

    def on_ctrl_c(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True
        raise KeyboardInterrupt

    # While the CLI loads, a Ctrl-C is noted as well as raised: pydantic builds its validators in
    # Rust, which reports a `KeyboardInterrupt` raised inside as a `SchemaError` of its own (a
    # traceback, status 1), so any error of the loading after a Ctrl-C is the Ctrl-C's.
    watching = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not when Ctrl-C is ignored
    if watching:
        signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        from threadlog.cli import main as run

        if watching:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except KeyboardInterrupt:  # also one raised by the handler put back, as `signal.signal` returns
        _interrupted()
    except BaseException:
        if interrupted:
            _interrupted()
        raise
    try:
        run()
    except KeyboardInterrupt:
        _interrupted()
    finally:
        if watching:  # done: a Ctrl-C now would only interrupt the interpreter's exit, with a traceback of its own
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupted() -> None:
    # Only a Ctrl-C before the command ran comes here (the CLI turns its own into 130): nothing
    # is open to close. Not `sys.exit`: a Ctrl-C that passed through `exec()` of a string
    # (dataclasses and pydantic build their classes so) stays marked unhandled in CPython once
    # caught, and under `python -m` the interpreter then ends itself by SIGINT, not status 130.
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    os._exit(130)


if __name__ == "__main__":
    main()
