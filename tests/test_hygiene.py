"""House rules that a reader checks by eye, checked by the suite instead.

`mypy --strict` and the line-length limit (both configured in pyproject.toml) run over
eventstore, projections, threadlog and bench; storage stays behind eventstore/; the benchmark runs
the code cites are in bench/HISTORY.md.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("eventstore", "projections", "threadlog", "bench")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_mypy_strict_passes() -> None:
    done = _run("mypy", *CHECKED)  # strict = true in pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr


def test_lines_fit_the_limit() -> None:
    done = _run("ruff", "check", "--output-format", "concise", *CHECKED)  # line-length in pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr


def _sources(*folders: str) -> list[Path]:
    return [path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))]


def test_the_runs_the_code_cites_are_recorded() -> None:
    """A comment or docstring that backs a figure with `bench/HISTORY.md, "<section>"` names a
    section the history holds: the reader who follows it finds the run, not nothing."""
    history = (ROOT / "bench" / "HISTORY.md").read_text(encoding="utf-8")
    for path in _sources(*CHECKED):
        for cited in re.findall(r'bench/HISTORY\.md,\s+"([^"]+)"', path.read_text(encoding="utf-8")):
            assert " ".join(cited.split()) in history, (path, cited)


def test_only_eventstore_reaches_the_backend() -> None:
    """Nothing above the storage interface holds `store.backend`: it may be any backend."""
    for path in _sources("threadlog", "projections", "bench", "tests"):
        if path.name != Path(__file__).name:  # a backend kept by whoever made it is fine (`self.backend`)
            assert not re.search(r"(?<!self)(?<!eventstore)\.backend\b", path.read_text(encoding="utf-8")), path


def test_the_driver_stays_behind_eventstore() -> None:
    """The application and the projections never name `sqlite3`: none of its errors reach them."""
    for path in _sources("threadlog", "projections"):
        text = path.read_text(encoding="utf-8")
        assert "sqlite3" not in text, path


def _undocumented() -> list[str]:
    """The public classes and functions of the three packages, and the public methods and
    properties of those classes, that `help()` would show without a word of their own."""
    import inspect

    import eventstore
    import projections
    import threadlog

    missing = []
    for module in (eventstore, projections, threadlog):
        for name in module.__all__:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            # A dataclass without a docstring gets its signature as one: that says nothing more.
            if not (obj.__doc__ or "").strip() or obj.__doc__.startswith(f"{name}("):
                missing.append(f"{module.__name__}.{name}")
            if inspect.isclass(obj):
                missing += [f"{module.__name__}.{name}.{attr}" for attr, member in vars(obj).items()
                            if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property))
                            and not (member.__doc__ or "").strip()]
    return missing


def test_the_public_api_is_documented() -> None:
    assert _undocumented() == []
