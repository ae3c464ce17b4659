"""What `pip install threadlog` installs: every module and file of the source, as the README's
`pip install 'threadlog[web]'` takes for granted.

pyproject.toml listed the packages by hand and left out `threadlog.cli`: an editable install
(`pip install -e .`, the Quickstart's) reads the source folder and never showed it, while a
built one had no command line (`threadlog` failed with `No module named 'threadlog.cli'`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("eventstore", "projections", "threadlog")


def _files(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for package in PACKAGES for path in (root / package).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts}


def test_the_built_distribution_holds_every_file_of_the_packages(tmp_path: Path) -> None:
    """setuptools' own build, from a copy of the source (it writes its work files beside it)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    built = tmp_path / "built"
    done = subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build", "--build-lib", str(built)],
                          cwd=source, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _files(source) - _files(built) == set()
