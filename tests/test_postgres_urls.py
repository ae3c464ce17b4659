"""A PostgreSQL URL's password, wherever the URL holds it, never reaches an error message."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from threadlog import Store, StoreError
from tests.backends import postgres_url

ROOT = Path(__file__).resolve().parent.parent
SECRET = "hunter2-s3cret"


def _urls() -> list[str]:
    """URLs that name a password and fail to open: no such database, no such server, or a URL
    libpq reads but urllib does not."""
    server = postgres_url()
    host = urllib.parse.parse_qs(urllib.parse.urlsplit(server).query)["host"][0]
    socket = urllib.parse.quote(host, safe="")
    return [
        f"postgresql://postgres:{SECRET}@/no_such_db?host={socket}",
        f"postgresql://postgres@/no_such_db?host={socket}&password={SECRET}",
        f"postgresql://postgres@/no_such_db?password={SECRET}&host={socket}",
        f"postgres://u:{SECRET}@/db?host=/nonexistent",
        f"postgresql://u:p%40ss{SECRET}@/db?host=/nonexistent",
        f"postgresql://u:{SECRET}?x@/db?host=/nonexistent",
        f"postgresql://u:{SECRET}@[::1/db",
        f"postgresql://u:{SECRET}%zz@/db?host=/nonexistent",
        f"POSTGRESQL://postgres:{SECRET}@/no_such_db?host={socket}",  # a scheme is case-insensitive (RFC 3986)
        f"Postgres://u:{SECRET}@/db?host=/nonexistent",
    ]


def test_no_error_names_the_password() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for url in _urls():
        with pytest.raises(StoreError) as refused:
            Store(url)
        assert SECRET not in str(refused.value), url
        for command in (["ls"], ["new", "--title", "t"]):
            done = subprocess.run([sys.executable, "-m", "threadlog.cli", "--db", url, *command], capture_output=True,
                                  text=True, env=env)
            assert done.returncode == 1, (url, done.stderr)
            assert SECRET not in done.stdout + done.stderr, (url, done.stderr)
            assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr, (url, done.stderr)


def test_a_url_whose_scheme_is_in_capitals_opens_the_same_store() -> None:
    """A URL's scheme is case-insensitive, but libpq reads only `postgresql://` and `postgres://`:
    `POSTGRESQL://…` was taken for a SQLite file's path, and its messages ("no database at
    POSTGRESQL://user:password@…", "cannot open …") showed the password."""
    url = postgres_url()
    with Store(url) as store:
        thread = store.create_thread(title="Trip")
    for scheme in ("POSTGRESQL", "Postgres"):
        with Store(scheme + url[len("postgresql"):], read_only=True) as again:
            assert [t.id for t in again.threads()] == [thread]
