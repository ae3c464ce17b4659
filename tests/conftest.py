"""Shared fixtures: the contract's `store` runs on every backend in `tests/backends.py`."""

from __future__ import annotations

import compileall
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventstore import Store
from messages_api import MessagesAPI
from tests.backends import BACKENDS, BackendCase, _Server, open_store

CI = os.environ.get("CI") == "true"  # .ci/run: every optional part is installed, so none may be skipped


def pytest_configure(config: pytest.Config) -> None:
    """Write the project's bytecode once, before any test (or xdist worker) starts, where the
    environment says not to (PYTHONDONTWRITEBYTECODE): the suite starts some hundreds of
    `threadlog` processes, and each compiled every module it imports from source, ~0.3 s of a
    0.9 s start. Python still reads bytecode that is there, and recompiles any that is stale."""
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        root = Path(__file__).resolve().parent.parent
        for package in ("eventstore", "projections", "threadlog"):
            compileall.compile_dir(root / package, quiet=2)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _Server.stop()  # the throwaway PostgreSQL cluster, if a test started it


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """Under CI=true a test file skipped whole (an optional dependency that did not import, no
    browser) is a failure: the test extras install them all, so a skip means a broken install."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and CI:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every optional part is installed: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI=true a skipped PostgreSQL or browser test is a failure: CI installs the server
    and the browser, so a skip there means the backend or the viewer went untested."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and CI and ("postgres" in item.nodeid or "browser" in str(report.longrepr)):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where PostgreSQL and the browser must be tested: {report.longrepr}"


@pytest.fixture(params=BACKENDS, ids=[case.id for case in BACKENDS])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    case: BackendCase = request.param
    s = open_store(case, tmp_path)
    yield s
    s.close()


@pytest.fixture
def mem() -> Iterator[Store]:
    """A store in memory, for tests of what is computed rather than what is stored."""
    s = Store(":memory:")
    yield s
    s.close()


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "t.db")
    yield s
    s.close()


@pytest.fixture
def api() -> Iterator[MessagesAPI]:
    """A Messages API of the test's own on 127.0.0.1 (`messages_api`), which the real
    `anthropic` client talks HTTP to."""
    with MessagesAPI() as server:
        yield server
