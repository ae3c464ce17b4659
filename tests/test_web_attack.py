"""The web viewer under attack: numbers out of range in every query parameter, a file
altered behind threadlog's back, and `threadlog serve` on an IPv6 address.

Each test here failed before the fix it names: a huge number was a 500 (or a live stream
that died after its headers), a row of the wrong storage type left the integrity badge at
"verifying…" for good, and `serve --host ::1` refused every request as a foreign host.
"""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

from threadlog import Store  # noqa: E402
from threadlog.web import create_app  # noqa: E402

HUGE = "9" * 5000  # longer than int() parses by default
OVER = str(2**63)  # past SQLite's integers and islice's indexes


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("webattack") / "attack.db"
    with Store(path) as store:
        thread = store.create_thread(title="t", thread_id="t")
        store.append_message(thread, "user", "first")
        store.append_message(thread, "assistant", "second")
    return path


@pytest.fixture(scope="module")
def client(db: Path) -> Iterator[TestClient]:
    with TestClient(create_app(str(db)), base_url="http://127.0.0.1", raise_server_exceptions=False) as c:
        yield c


TARGETS = [f"/?before={n}" for n in (HUGE, OVER)] + [f"/thread?id=t&at={n}" for n in (HUGE, OVER)] + \
    [f"/thread?id=t&start={n}" for n in (HUGE, OVER)] + [f"/replay?id=t&at={n}" for n in (HUGE, OVER)] + \
    [f"/blame?id=t&start={n}" for n in (HUGE, OVER)] + [f"/live?id=t&after={n}" for n in (HUGE, OVER)] + \
    [f"/live?id=t&from={HUGE}", "/thread?id=t&start=-1", "/blame?id=t&start=1e3", "/live?id=t&after=-5"]


@pytest.mark.parametrize("target", TARGETS, ids=[t[:40] for t in TARGETS])
def test_a_number_out_of_range_is_a_400_saying_what_to_pass(client: TestClient, target: str) -> None:
    response = client.get(target)
    assert response.status_code == 400, response.text[:300]
    assert "must be a whole number from" in response.text


def test_the_largest_number_taken_still_answers(client: TestClient) -> None:
    assert client.get(f"/blame?id=t&start={2**62}").status_code == 200
    assert client.get(f"/thread?id=t&start={2**62}").status_code == 200


@pytest.mark.parametrize("tamper", [
    "UPDATE events SET data = CAST(data AS BLOB) WHERE position = 2",  # the data's bytes, stored as a blob
    "UPDATE events SET type = 99 WHERE position = 2",  # a type code no release gave out
    "UPDATE streams SET facts = '{' WHERE id = 't'",  # a stored column that is not JSON
], ids=["data-blob", "unknown-type-code", "facts-not-json"])
def test_a_row_verify_cannot_read_makes_the_badge_fail_not_hang(tmp_path: Path, db: Path, tamper: str) -> None:
    path = tmp_path / "tampered.db"
    path.write_bytes(db.read_bytes())
    conn = sqlite3.connect(path)
    conn.execute(tamper)
    conn.commit()
    conn.close()
    app = create_app(str(path))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        c.get("/")
        app.state.viewer.integrity.join(10)
        page = c.get("/")  # the list page: the thread page reads the altered row itself
    assert page.status_code == 200
    assert "✗ integrity check failed" in page.text
    assert "altered outside threadlog" in page.text


def _serve(db: Path, host: str) -> tuple[subprocess.Popen[str], int]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen([sys.executable, "-c", "from threadlog.cli import main; main()", "serve", "--db", str(db),
                             "--host", host, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return proc, port


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_serve_on_an_ipv6_address_answers_its_own_url(db: Path) -> None:
    proc, port = _serve(db, "::1")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://[::1]:{port}/thread?id=t", timeout=2) as response:
                    assert response.status == 200
                    assert b"second" in response.read()
                break
            except urllib.error.HTTPError as error:
                raise AssertionError(f"threadlog serve --host ::1 answered {error.code}: {error.read()[:200]!r}") from None
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("threadlog serve --host ::1 did not start") from None
                time.sleep(0.1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
