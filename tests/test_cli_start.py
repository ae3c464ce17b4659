"""The `threadlog` command's start: Ctrl-C while it is still loading its modules (most of a second).

It raised `KeyboardInterrupt` inside an import and Python printed a traceback; once the command
ran, the same Ctrl-C printed `interrupted` and exited 130.
"""

from __future__ import annotations

import subprocess
import sys


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

