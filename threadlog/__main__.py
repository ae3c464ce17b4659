"""Where the `threadlog` command starts: the console script (`threadlog.__main__:main`) and
`python -m threadlog` alike.

Loading the CLI takes most of a second (the store, pydantic, click). A Ctrl-C in it raised
`KeyboardInterrupt` inside an import, which Python reported with a traceback; once the
command runs, a Ctrl-C ends it with `interrupted` and status 130. Nothing is imported here
before the `try` (`import threadlog` loads nothing itself), so a Ctrl-C at any moment of
start-up once this runs ends that way too, before anything was written (one in Python's own
start-up before it, some tens of milliseconds, is the interpreter's to report).
"""

import os
import sys


def main() -> None:
    """Run the `threadlog` command; Ctrl-C while it loads exits 130, as Ctrl-C during it does."""
    try:
        from threadlog.cli import main as run

        run()
    except KeyboardInterrupt:
        # Only a Ctrl-C before the command ran comes here (the CLI turns its own into 130): nothing
        # is open to close. Not `sys.exit`: a Ctrl-C that passed through `exec()` of a string
        # (dataclasses and pydantic build their classes so) stays marked unhandled in CPython once
        # caught, and under `python -m` the interpreter then ends itself by SIGINT, not status 130.
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
        os._exit(130)


if __name__ == "__main__":
    main()
