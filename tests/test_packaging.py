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


def _build(tmp_path: Path) -> tuple[Path, Path]:
    """(source, built): setuptools' own build, from a copy of the source (it writes its work
    files beside it)."""
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
    return source, built


def test_the_built_distribution_holds_every_file_of_the_packages(tmp_path: Path) -> None:
    source, built = _build(tmp_path)
    assert _files(source) - _files(built) == set()


def test_a_users_type_checker_reads_the_installed_packages_types(tmp_path: Path) -> None:
    """The packages are typed throughout (mypy --strict), but held no `py.typed` marker: a
    user's mypy skipped them as untyped (`module is installed, but missing library stubs or
    py.typed marker`), and every call into them was unchecked. Installed into an environment of
    their own (a venv's site-packages, where a type checker takes only marked packages), a
    wrong use of a return type is found."""
    _, built = _build(tmp_path)
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    (site,) = env.glob("lib/python*/site-packages")
    for package in PACKAGES:
        shutil.copytree(built / package, site / package)
    user = tmp_path / "user.py"
    user.write_text("from eventstore import Store as Base\nfrom projections import thread_state\nfrom threadlog import Store\n\n"
                    "store = Store(':memory:')\nthread: int = store.create_thread(title='t')\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--python-executable", str(env / "bin" / "python"), "--no-incremental",
                           "--follow-imports=silent", str(user)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert "py.typed" not in done.stdout and "import-untyped" not in done.stdout, done.stdout
    assert 'user.py:6: error: Incompatible types in assignment (expression has type "str", variable has type "int")' \
        in done.stdout, done.stdout
