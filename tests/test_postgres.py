"""What only the PostgreSQL backend has to show: the same bytes and hashes as SQLite, opening by
URL (API, `--db`, `THREADLOG_DB`), a guarded migration, writers in real processes with a tailing
reader, and a SIGKILLed postmaster. The contract suite itself runs on PostgreSQL through the
`store` fixture (tests/backends.py); every test here uses the session's throwaway cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from eventstore.integrity import canonical
from threadlog import Store, StoreError, export_all, export_events, import_events, thread_state
from threadlog.export import dump_lines
from tests.backends import login_role, postgres_cluster, postgres_url

try:
    from .procs import Worker
except ImportError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    from procs import Worker  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent


def build(store: Store) -> dict[str, str]:
    """A small history with a fork, a fan-out, a tool call and a redaction."""
    t = store.create_thread(title="Trip", system="You plan trips.", metadata={"user": "ana"}, thread_id="trip")
    store.append_message(t, "user", "Find me a train to Lyon ☀", event_id="e1")
    store.append_message(t, "assistant", [{"type": "tool_use", "id": "tu1", "name": "trains", "input": {"to": "Lyon"}}],
                         event_id="e2")
    store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "tu1", "content": "08:00"}], event_id="e3")
    secret = store.append_message(t, "assistant", "The 08:00 train; my key is sk-123", event_id="e4")
    f = store.fork(t, 2, fork_id="fork1", event_id="e5")
    store.append_message(f, "user", "And a hotel?", event_id="e6")
    store.redact(secret.position, reason="leaked key", actor="ops")
    return {"t": t, "f": f}


def history(store: Store) -> list[tuple[Any, ...]]:
    return [(e.stream_id, e.offset, e.event_id, e.type, canonical(e.data), canonical(e.meta), e.recorded_at, e.hash)
            for e in store.read_all()]


def write(path: Path, lines: Any) -> Path:
    path.write_text("".join(dump_lines(lines)), encoding="utf-8")
    return path


@pytest.mark.parametrize("direction", ["sqlite-to-postgresql", "postgresql-to-sqlite"])
def test_an_export_restores_into_the_other_backend_with_identical_hashes(tmp_path: Path, direction: str) -> None:
    lite, pg = Store(tmp_path / "a.db"), Store(postgres_url())
    source, target = (lite, pg) if direction == "sqlite-to-postgresql" else (pg, lite)
    build(source)
    backup = write(tmp_path / "all.jsonl", export_all(source))
    checkpoint = source.checkpoint()
    import_events(target, backup)
    assert history(target) == history(source)
    target.verify(checkpoint=checkpoint)  # same positions and hashes: the source's checkpoint holds
    one = write(tmp_path / "fork.jsonl", export_events(source, "fork1"))
    assert one.read_text() == write(tmp_path / "again.jsonl", export_events(target, "fork1")).read_text()
    lite.close()
    pg.close()


def test_the_same_operations_store_the_same_bytes_on_both_backends(tmp_path: Path) -> None:
    """Ids and times differ between runs, so the same appends are replayed with fixed ones
    (a restore) and the stored rows are compared, digests and hashes included."""
    with Store(tmp_path / "a.db") as lite, Store(postgres_url()) as pg:
        build(lite)
        import_events(pg, write(tmp_path / "all.jsonl", export_all(lite)))
        assert [(e.position, e.hash) for e in pg.read_all()] == [(e.position, e.hash) for e in lite.read_all()]
        for a, b in zip(lite.read_all(), pg.read_all()):
            assert a.to_json() == b.to_json()
        assert pg.verify().events == lite.verify().events


def test_url_opens_postgresql_from_the_api_the_db_option_and_threadlog_db() -> None:
    url = postgres_url()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "threadlog.cli"]
    made = subprocess.run([*run, "--db", url, "new", "--title", "by url"], capture_output=True, text=True, env=env)
    assert made.returncode == 0, made.stderr
    thread = made.stdout.strip()
    env["THREADLOG_DB"] = url
    shown = subprocess.run([*run, "append", thread, "--role", "user", "--text", "hello"], capture_output=True, text=True,
                           env=env)
    assert shown.returncode == 0, shown.stderr
    with Store(url) as store:
        assert [e.type for e in store.read(thread)] == ["thread.created", "message.appended"]
        assert store.title(thread) == "by url"
    bad = subprocess.run([*run, "--db", url.replace("postgres@", "nobody@"), "ls"], capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


def test_the_demo_on_a_url_writes_its_transcript_in_the_current_directory(tmp_path: Path) -> None:
    """It wrote the transcript beside the database, read as a file path: into a directory named
    after the URL, which does not exist."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "threadlog.cli", "--db", postgres_url(), "demo"], capture_output=True,
                          text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (written,) = tmp_path.glob("*.transcript.md")
    assert f": {written}" in done.stdout and written.read_text(encoding="utf-8").startswith("# Transcript of thread ")


def test_sqlite_settings_are_refused_for_a_url() -> None:
    from threadlog import StoreError

    with pytest.raises(StoreError, match="SQLite settings"):
        Store(postgres_url(), synchronous="FULL")


@pytest.mark.parametrize("command", [["search", "x"], ["index"], ["purge"], ["snapshot", "--drop"], ["fork", "t"]])
def test_a_command_on_a_database_with_no_store_is_refused_and_creates_nothing(command: list[str]) -> None:
    """Only init, new, demo and the importers make a store, as they alone make a file: on an
    empty PostgreSQL database, `search`, `index`, `purge` and `snapshot --drop` made its tables
    and said all was well, where SQLite refuses a missing or empty file."""
    import psycopg

    url = postgres_url()
    done = subprocess.run([sys.executable, "-m", "threadlog.cli", "--db", url, *command], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1 and "holds no threadlog store yet; create one with `threadlog init`" in done.stderr, done.stderr
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").fetchone() == (0,)


def test_a_read_only_open_writes_nothing_and_the_viewer_serves_the_database() -> None:
    """Read commands and the web viewer open PostgreSQL read-only: the server refuses any
    write of that session, and an empty database is not given a schema by a read."""
    from threadlog import StoreError

    url = postgres_url()
    with pytest.raises(StoreError, match="holds no threadlog store"):
        Store(url, read_only=True)
    with Store(url) as store:
        thread = store.create_thread(title="viewed on postgresql")
        store.append_message(thread, "user", "<script>window.__pwned = 1</script> a train to Lyon")
    with Store(url, read_only=True) as reader:
        assert reader.head(thread) == 2
        with pytest.raises(StoreError, match="read-only"):
            reader.append_message(thread, "user", "not written")
    with Store(url) as store:
        assert store.head(thread) == 2
    listed = subprocess.run([sys.executable, "-m", "threadlog.cli", "--db", url, "ls", "--json"], capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert listed.returncode == 0, listed.stderr
    assert thread in listed.stdout
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from threadlog.web import create_app

    with TestClient(create_app(url), base_url="http://127.0.0.1") as client:
        page = client.get("/thread", params={"id": thread})
    assert page.status_code == 200
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt; a train to Lyon" in page.text
    # A URL's password (this server does not ask for one, so any opens it) was on every page.
    secret = url.replace("postgresql://postgres@", "postgresql://postgres:S3cretPW@")
    assert secret != url
    with TestClient(create_app(secret), base_url="http://127.0.0.1") as client:
        pages = [client.get("/"), client.get("/thread", params={"id": thread}), client.get("/thread", params={"id": "nope"})]
    assert [p.status_code for p in pages] == [200, 200, 404]
    assert all("S3cretPW" not in p.text and "postgres:***@" in p.text for p in pages)


def test_two_processes_creating_the_schema_at_once_both_succeed_and_create_it_once() -> None:
    url = postgres_url()
    code = ("import sys; from threadlog import Store; s = Store(sys.argv[1]); "
            "s.create_thread(title='x'); print(s.schema_version())")
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(4)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    with Store(url) as store:
        assert store.counts().threads == 4
        store.verify()


def test_four_processes_racing_on_one_thread_with_expect(tmp_path: Path) -> None:
    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="race")
    start = tmp_path / "go"
    workers = [Worker("race", url, t, "25", f"w{i}", str(start)) for i in range(4)]
    for w in workers:
        assert w.ready.wait(60) and w.of("ready"), w.proc.stderr.read() if w.proc.stderr else ""
    start.touch()  # all four begin together, so their appends race
    for w in workers:
        w.finish()
    with Store(url) as store:
        history = list(store.read(t))
        store.verify()
    assert [e.offset for e in history] == list(range(101))
    acked = {a["event_id"]: a for w in workers for a in w.of("ack")}
    assert {e.event_id: (e.offset, e.position) for e in history[1:]} == {i: (a["offset"], a["position"]) for i, a in acked.items()}
    assert sum(w.of("done")[0]["conflicts"] for w in workers) > 0, "no conflict: the expect path was not exercised"


def test_eight_writer_processes_and_a_tailing_reader_skip_nothing(tmp_path: Path) -> None:
    """Positions come from a sequence, so they are not handed out in commit order: the reader
    must still see every one, in order, none appearing below one it already saw."""
    url = postgres_url()
    with Store(url) as store:
        shared = []
        for i in range(3):
            t = store.create_thread(title=f"shared {i}")
            store.append_message(t, "user", "hello")
            shared.append(t)
    stop = tmp_path / "stop"
    tailer = Worker("tail", url, str(stop))
    writers = [Worker("mixed", url, "2", f"p{i}", *shared) for i in range(8)]
    for w in writers:
        w.finish()
    stop.touch()
    tailer.finish()
    acked = {event_id: position for w in writers for a in w.of("ack") for event_id, _, position in a["events"]}
    acked.update({f["event_id"]: f["position"] for w in writers for f in w.of("fork")})
    with Store(url) as store:
        stored = {e.event_id: e.position for e in store.read_all()}
        store.verify()
    assert all(stored.get(i) == p for i, p in acked.items()), "an acknowledged event is missing or moved"
    seen = tailer.of("done")[0]["positions"]
    assert seen == sorted(set(seen)), "the tailing reader saw positions out of order"
    assert set(seen) == set(stored.values()), "the tailing reader missed a position"


def test_sigkill_of_the_postmaster_during_appends_loses_nothing_acknowledged() -> None:
    url = postgres_url()
    cluster = postgres_cluster()
    with Store(url) as store:
        t = store.create_thread(title="crash")
        store.append_message(t, "user", "start")
    acked: dict[str, dict[str, Any]] = {}
    for round_ in range(2):
        worker = Worker("crash", url, f"r{round_}")
        worker.ready.wait(timeout=30)
        worker.wait_for(40 + 30 * round_)
        time.sleep(0.005)
        cluster.kill()
        worker.wait(timeout=60)  # it fails on its own once the server is gone
        for ack in worker.of("ack"):
            for event in ack["events"]:
                acked[event["event_id"]] = event
        cluster.start()
        with Store(url) as store:
            rows = {e.event_id: {"position": e.position, "stream_id": e.stream_id, "offset": e.offset,
                                 "event_id": e.event_id, "type": e.type, "data": canonical(e.data),
                                 "meta": canonical(e.meta), "recorded_at": e.recorded_at, "hash": e.hash}
                    for e in store.read_all()}
            missing = [i for i in acked if i not in rows]
            assert not missing, f"round {round_}: acknowledged events lost: {missing[:5]}"
            changed = [i for i in acked if rows[i] != acked[i]]
            assert not changed, f"round {round_}: acknowledged events changed: {changed[:3]}"
            assert store.verify().events == len(rows)
            assert store.append_message(t, "user", f"after kill {round_}").offset == store.head(t) - 1
    assert len(acked) >= 40


def test_a_refused_append_leaves_the_database_as_it_was_even_with_a_writer_waiting(tmp_path: Path) -> None:
    """A write waiting on another transaction's stream lock sees that transaction's commit."""
    url = postgres_url()
    from eventstore.postgres import PostgresBackend

    locker = PostgresBackend(url)
    with Store(locker) as a, Store(url) as b:
        t = a.create_thread(title="locks")
        code = ("import sys, time; from threadlog import Store; s = Store(sys.argv[1]); "
                "print(s.append_message(sys.argv[2], 'user', 'second', expect=1).offset)")
        with locker.transaction():
            locker.stream_for_append(t, 1)  # holds the stream's lock, as an append does
            waiting = subprocess.Popen([sys.executable, "-c", code, url, t], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            time.sleep(0.5)
            assert waiting.poll() is None, "a writer on the same thread did not wait for the lock"
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0 and out.strip() == "1", err
        assert [e.offset for e in b.read(t)] == [0, 1]
        assert b.event_at(t, 1).data["content"][0]["text"] == "second"


# -- refusals and tampering, as tests/test_bad_input.py and tests/test_tamper.py check on SQLite --

from tests.backends import BACKENDS, dump, open_store  # noqa: E402
from tests.test_bad_input import LIB, Call, seeded  # noqa: E402,F401 (the module's seeded file, restored here)

POSTGRES = next(case for case in BACKENDS if case.id == "postgresql")


def _seeded_on_postgresql(seeded: tuple[Path, dict[str, str]], tmp_path: Path) -> Store:
    with Store(seeded[0]) as lite:
        backup = write(tmp_path / "seed.jsonl", export_all(lite))
    store = open_store(POSTGRES, tmp_path)
    import_events(store, backup)
    return store


@pytest.mark.parametrize(("call", "error", "says"), [c[1:] for c in LIB], ids=[c[0] for c in LIB])
def test_library_refuses_and_changes_nothing_on_postgresql(
    seeded: tuple[Path, dict[str, str]], tmp_path: Path, call: Call, error: type[Exception], says: str
) -> None:
    from threadlog import StoreError

    store = _seeded_on_postgresql(seeded, tmp_path)
    before = dump(store)
    with pytest.raises(StoreError) as caught:
        call(store, seeded[1])
    assert type(caught.value) is error
    assert says in str(caught.value) + getattr(caught.value, "reason", "") + getattr(caught.value, "field", "")
    assert dump(store) == before, "a refused call changed the database"
    store.close()


@pytest.mark.parametrize("change", [
    "UPDATE events SET data = replace(data, 'hello', 'HELLO') WHERE data LIKE '%hello%'",
    "UPDATE events SET meta = '{\"actor\":\"mallory\"}' WHERE position = 3",
    "UPDATE events SET hash = sha256('x') WHERE position = 3",
    "UPDATE events SET recorded_at = recorded_at + 1 WHERE position = 3",
    "DELETE FROM events WHERE position = 3",
    "UPDATE streams SET head = head + 1 WHERE id = 't'",
], ids=["data", "meta", "hash", "time", "deleted", "head"])
def test_tampering_with_rows_fails_verify_naming_the_place(seeded: tuple[Path, dict[str, str]], tmp_path: Path,
                                                            change: str) -> None:
    import psycopg

    from threadlog import IntegrityError

    url = postgres_url()
    with Store(seeded[0]) as lite:
        backup = write(tmp_path / "seed.jsonl", export_all(lite))
        checkpoint = lite.checkpoint()
    with Store(url) as store:
        import_events(store, backup)
        store.verify(checkpoint=checkpoint)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(change.encode()).rowcount >= 1
    with Store(url) as store, pytest.raises(IntegrityError) as caught:
        store.verify(checkpoint=checkpoint)
    assert "position" in str(caught.value) or "head" in str(caught.value) or "checkpoint" in str(caught.value)


def test_an_append_the_server_refuses_in_either_round_trip_leaves_nothing_and_the_store_writes_on() -> None:
    """An error in the middle of an append's pipeline (the stream lock timing out in the first
    round trip; a statement of the second refused) rolls back everything: the database is as it
    was, no lock is left held, and the same store (its connection, its prepared statements)
    and another one append again."""
    import psycopg

    from eventstore.postgres import PostgresBackend
    from threadlog import Locked, StoreError

    url = postgres_url()
    backend = PostgresBackend(url, timeout=0.5)
    with Store(backend) as store:
        t = store.create_thread(title="pipeline")
        store.append_message(t, "user", "first")
        before = backend.dump()
        with psycopg.connect(url) as other:  # another writer holds the thread's lock
            other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (t,))
            with pytest.raises(StoreError, match="stayed locked") as refused:
                store.append_message(t, "user", "waits for the lock")
        assert isinstance(refused.value, Locked) and refused.value.path == backend.path  # a caller retries on it, as on SQLite
        assert backend.dump() == before
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(b"CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                         b"$$ BEGIN IF NEW.data LIKE '%refuse me%' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$")
            conn.execute(b"CREATE TRIGGER refuse BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse()")
        with pytest.raises(StoreError, match="refused"):
            store.append_message(t, "user", "refuse me")
        assert backend.dump() == before
        assert store.append_message(t, "user", "second").offset == 2
        with Store(url, timeout=5) as again:
            assert again.append_message(t, "user", "third").offset == 3
        assert [e.data["content"][0]["text"] for e in store.read(t, 1)] == ["first", "second", "third"]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(b"DROP TRIGGER refuse ON events")  # verify refuses a store holding a foreign trigger
        store.verify()


class _Interrupted(Exception):
    pass


def test_an_append_interrupted_while_it_waits_for_the_server_leaves_nothing_and_the_store_writes_on() -> None:
    """A signal whose handler raises (as Ctrl-C does) while an append waits inside its pipeline:
    what the server still owes is read, the transaction rolled back, and the same connection
    appends again."""
    import signal
    import threading

    import psycopg

    from eventstore.postgres import PostgresBackend

    def interrupt(signum: int, frame: Any) -> None:
        raise _Interrupted()

    url = postgres_url()
    backend = PostgresBackend(url, timeout=1.0)
    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with Store(backend) as store:
            t = store.create_thread(title="interrupted")
            before = backend.dump()
            with psycopg.connect(url) as other:  # the append waits for this lock (up to 1 s)
                other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (t,))
                timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
                timer.start()
                with pytest.raises(_Interrupted):
                    store.append_message(t, "user", "interrupted")
                timer.join()
            assert backend.dump() == before
            assert store.append_message(t, "user", "after").offset == 1
            store.verify()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_database_whose_encoding_cannot_hold_a_character_refuses_the_write_and_keeps_the_rest() -> None:
    """The connection speaks UTF-8 whatever the database's encoding: text the encoding holds
    round-trips, and a character it cannot hold is refused with a `StoreError` (not a Python
    UnicodeEncodeError), nothing written."""
    from threadlog import StoreError

    cluster = postgres_cluster()
    cluster.execute("CREATE DATABASE latin ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    try:
        with Store(cluster.url("latin")) as store:
            t = store.create_thread(title="café")
            store.append_message(t, "user", "crème brûlée")
            with pytest.raises(StoreError, match="cannot hold a character"):
                store.append_message(t, "user", "a smile 😀")
            with pytest.raises(StoreError, match="cannot hold a character"):
                store.create_thread(title="😀")
            assert [e.data["content"][0]["text"] for e in store.read(t, 1)] == ["crème brûlée"]
            assert store.counts() == (1, 2)
            store.verify()
    finally:
        cluster.execute("DROP DATABASE latin")


def test_a_planted_trigger_stops_redaction(tmp_path: Path) -> None:
    import psycopg

    from threadlog import StoreError

    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="x")
        secret = store.append_message(t, "user", "my key is sk-1")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(b"CREATE TABLE copies (data text)")
        conn.execute(b"CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS "
                     b"$$ BEGIN INSERT INTO copies VALUES (OLD.data); RETURN NEW; END $$")
        conn.execute(b"CREATE TRIGGER keep_copy BEFORE UPDATE ON events FOR EACH ROW EXECUTE FUNCTION keep()")
    with Store(url) as store, pytest.raises(StoreError, match="keep_copy"):
        store.redact(secret.position, reason="leak", actor="ops")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(b"SELECT count(*) FROM copies").fetchone() == (0,)


def test_an_event_committed_while_an_earlier_writer_is_open_waits_for_it() -> None:
    """The rule behind the tailing reader: a writer that took its positions first (and is still
    open) holds back every later commit from readers, so its lower position cannot be skipped."""
    import psycopg

    from eventstore.postgres import _RESERVE_SQL

    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="order")
        before = store.last_position()
        with psycopg.connect(url) as early:  # a writer between its reservation and its commit
            reserved = early.execute(_RESERVE_SQL.encode(), (1, 1)).fetchone()
            assert reserved is not None and reserved[3] == before + 1
            late = store.append_message(t, "user", "committed after the open writer took a lower position")
            assert late.position == before + 2
            assert [e.position for e in store.read_all(after=before)] == []
            assert store.last_position() == before
            with store.consistent():  # a tail inside a view holds back too; a backup's reading takes the view whole
                assert [e.position for e in store.read_all(after=before)] == []
                assert [e.position for e in store.read_all(after=before, whole=True)] == [late.position]
            early.rollback()  # the early writer gives up: its position stays unused
        assert [e.position for e in store.read_all(after=before)] == [late.position]
        assert store.last_position() == late.position


def test_verify_and_a_backup_see_every_committed_event_while_another_transaction_is_open(tmp_path: Path) -> None:
    """Tailing reads stop below the oldest open transaction (above); `verify` and a backup read
    one snapshot, and cut there too they missed the events of every transaction that committed
    while any other was open on the server: verify failed ("events missing"), and `export
    --all` wrote stream lines without their events, and exited 0."""
    import psycopg

    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="before")
        store.append_message(t, "user", "a")
        with psycopg.connect(url) as other:
            other.execute("SELECT pg_current_xact_id()")  # a transaction holding an id, left open
            later = store.create_thread(title="while it is open")
            store.append_message(later, "user", "b")
            store.append_message(t, "user", "c")
            fork = store.fork(t)
            report = store.verify()
            assert (report.streams, report.events) == (3, 6)
            backup = list(export_all(store))
            assert backup[-1] == {"end": {"streams": 3, "events": 6}}
            other.rollback()
    restored = Store(tmp_path / "restored.db")
    with restored:
        assert import_events(restored, write(tmp_path / "all.jsonl", backup)).added == 6
        assert [m.content[0]["text"] for m in thread_state(restored, fork).messages] == ["a", "c"]
        assert restored.verify().events == 6


_FAN_OUT_WORKER = """
import sys
import threading
from threadlog import Store
url, rounds = sys.argv[1], int(sys.argv[2])
store = Store(url)
for _ in range(rounds):
    t = store.create_thread(title="parent")
    store.append_message(t, "user", "go")
    store.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_a", "name": "Agent", "input": {}}])
    store.fan_out(t, ["a", "b", "c"])
print("done")
"""


def test_fan_outs_in_several_processes_at_once_all_succeed() -> None:
    """Each fan_out takes positions once a fork, and two such transactions at once wait for each
    other: the server cancelled one, and over a third of the fan_outs of six processes (each on
    threads of its own) failed with "two writers waited for each other … retry". One cancelled
    wrote nothing, and is run again."""
    url = postgres_url()
    Store(url).close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _FAN_OUT_WORKER, url, "10"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    outcomes = [proc.communicate(timeout=300) for proc in procs]
    assert [(proc.returncode, out) for proc, (out, _) in zip(procs, outcomes)] == [(0, "done\n")] * 4, outcomes
    with Store(url) as store:
        report = store.verify()
        assert report.streams == 4 * 10 * (1 + 3)


def test_verify_since_while_another_transaction_is_open_gives_a_checkpoint_that_holds() -> None:
    """`verify --since` checks every event its snapshot holds, but its checkpoint named the last
    position no later commit can come below while its digest covered the events past it too:
    checked later, the checkpoint failed ("an event at or below position N was removed, added
    or rewritten", nothing having changed), and each checkpoint chained on it counted them twice."""
    import psycopg

    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="t")
        store.append_message(t, "user", "a")
        first = store.checkpoint()
        with psycopg.connect(url) as other:
            other.execute("SELECT pg_current_xact_id()")  # a transaction holding an id, left open
            store.append_message(t, "user", "b")
            during = store.verify(since=first).checkpoint
            other.rollback()
        store.verify(checkpoint=during)
        after = store.verify(since=during).checkpoint
        assert after == store.checkpoint()
        store.verify(checkpoint=after)


def test_a_redaction_held_up_by_a_reader_says_it_is_committed_and_purge_finishes_it() -> None:
    """The VACUUM after a redaction waits for a reader's lock: its timeout said "stayed locked by
    another writer ...; retry", and the retry was refused, the redaction being committed."""
    import psycopg

    from threadlog import search

    url = postgres_url()
    with Store(url, timeout=1) as store:
        t = store.create_thread(title="x")
        secret = store.append_message(t, "user", "card 4111")
        assert search(store, "card")
        with psycopg.connect(url) as reader:
            reader.execute("SELECT count(*) FROM search_docs")  # an open read of the index
            with pytest.raises(StoreError, match=rf"position {secret.position} is redacted .*the change is committed.*purge"):
                store.redact(secret.position, reason="pii", actor="ops")
        assert store.event_at(t, secret.offset).redacted
        store.purge()  # the reader is gone: it finishes
        assert search(store, "card") == [] and store.verify().redacted == 1


_RETRIER = """
import json, sys
from threadlog import InvalidEvent, Store
url, thread, round_ = sys.argv[1:]
store = Store(url)
print("ready", flush=True)
sys.stdin.readline()
out = {}
for name, call in [("append", lambda: store.append_message(thread, "user", "hi", event_id=f"req-{round_}").position),
                   ("fork", lambda: store.fork(thread, 2, event_id=f"fork-{round_}")),
                   ("named", lambda: store.fork(thread, 2, fork_id=f"named-{round_}"))]:
    try:
        out[name] = call()
    except InvalidEvent as error:
        out[name] = "refused: " + str(error)
print(json.dumps(out), flush=True)
"""


def test_processes_retrying_one_append_or_fork_at_once_get_its_one_result() -> None:
    """A retried append returns the stored records, and a retried fork its fork, however the
    retries meet. On PostgreSQL writers meet only at the thread's lock, after the lookup of the
    ids: the losers got "another writer stored the same key at the same time ... retry" (39 of
    60 calls), and a fork id taken meanwhile the same instead of "already exists"."""
    from tests.procs import started_together

    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="retries")
        store.append_message(t, "user", "first")
    for round_ in range(3):
        with started_together([["-c", _RETRIER, url, t, str(round_)] for _ in range(5)]) as procs:
            outs = [json.loads(proc.communicate(timeout=120)[0].splitlines()[-1]) for proc in procs]
        assert len({o["append"] for o in outs}) == 1 and isinstance(outs[0]["append"], int), outs
        assert len({o["fork"] for o in outs}) == 1 and not outs[0]["fork"].startswith("refused"), outs
        named = [o["named"] for o in outs]
        assert named.count(f"named-{round_}") == 1 and sum("already exists" in n for n in named) == 4, named
    with Store(url) as store:
        assert store.verify().streams == 1 + 3 * 2


def test_appends_keep_working_after_rollbacks_once_the_driver_prepared_statements_of_its_own() -> None:
    """The append runs statements prepared once per connection; the driver deallocates every
    prepared statement of the session when it sees a ROLLBACK go by (after it has prepared
    some of its own), which would leave the next append failing."""
    from threadlog import ConcurrencyError

    with Store(postgres_url()) as store:
        t = store.create_thread(title="rollbacks")
        for _ in range(8):  # the driver prepares a statement run 5 times
            store.thread(t)
            store.append_message(t, "user", "hello")
        with pytest.raises(ConcurrencyError):
            store.append_message(t, "user", "refused", expect=0)  # rolled back
        store.verify()  # a read transaction, ended by ROLLBACK
        for _ in range(3):
            store.thread(t)
            store.append_message(t, "user", "still appending")
        assert store.head(t) == 1 + 8 + 3
        store.verify()


@pytest.mark.parametrize("text", ["50% off, %s and %(name)s", "it's \"quoted\" \\ back\\slash", "tab\tnul\u0000end",
                                  "☀ \U0001f600 é", "E'\\x00'::bytea; DROP TABLE events; --"],
                         ids=["percent", "quotes", "control", "unicode", "injection"])
def test_values_bound_on_the_client_are_stored_byte_exact(text: str) -> None:
    """The append's statements go as a pipeline of prepared statements, their values as bytes:
    any text comes back as it went in, and hashes like on SQLite."""
    thread = "t" + "".join(c for c in text if c.isprintable())  # ids are printable text
    with Store(postgres_url()) as pg, Store(":memory:") as lite:
        for store in (pg, lite):
            store.create_thread(title=text, thread_id=thread, event_id="c" + thread)
            store.append_message(thread, "user", text, event_id="m" + thread)
        got = [(e.data, e.meta, e.event_id) for e in pg.read(thread)]
        assert got == [(e.data, e.meta, e.event_id) for e in lite.read(thread)]
        assert got[1][0]["content"] == [{"type": "text", "text": text}]
        pg.verify()


def test_streams_are_read_through_a_server_side_cursor_a_page_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """`streams()` (a full verify reads every stream) holds a page in memory, not the table: the
    rows come from a server-side cursor, in creation order, inside or outside a transaction,
    with several iterations open at once, and the cursor is gone once they end."""
    import eventstore.postgres

    monkeypatch.setattr(eventstore.postgres, "_PAGE", 3)
    url = postgres_url()
    with Store(url) as store:
        ids = [store.create_thread(title=f"t{i}") for i in range(8)]
        store.append_message(ids[1], "user", "hello")
        ids.append(store.fork(ids[1]))
    backend = eventstore.postgres.PostgresBackend(url)

    def open_cursors() -> list[str]:
        return [str(r[0]) for r in backend.conn.execute("SELECT statement FROM pg_cursors").fetchall()]

    try:
        outside = backend.streams()
        assert next(outside).id == ids[0]
        assert len(open_cursors()) == 1 and "FROM streams" in open_cursors()[0]  # not read whole
        with backend.read_transaction():
            inside = iter(backend.streams())
            assert [row.id for row in inside] == ids
        assert [row.id for row in outside] == ids[1:]
        assert open_cursors() == []
    finally:
        backend.close()
    with Store(url) as store:
        assert [t.id for t in store.all_threads()] == ids
        store.verify()


def test_a_transaction_that_reserves_twice_takes_the_order_lock_from_its_first_reservation() -> None:
    """Two fan_outs at once each took the order lock shared at their first fork, then waited to
    take it exclusively at their second: a deadlock, which the server broke by cancelling one
    (after a second's wait), and `fan_out` ran it again, up to 8 times; four processes fanning
    out at once ran out of them. Said up front, the first reservation takes it exclusively: the
    second such transaction waits at its first reservation until the first has committed."""
    from eventstore.postgres import PostgresBackend

    url = postgres_url()
    Store(url).close()
    first, second = PostgresBackend(url), PostgresBackend(url)
    reserved = threading.Event()
    try:
        with first.transaction(reserves_twice=True):
            first.stream_for_append("reserving-first", 1)

            def reserve() -> None:
                with second.transaction(reserves_twice=True):
                    second.stream_for_append("reserving-second", 1)
                    reserved.set()

            waiter = threading.Thread(target=reserve)
            waiter.start()
            assert not reserved.wait(1.0)  # held off by the first's exclusive lock
        assert reserved.wait(10.0)  # and through once it committed
        waiter.join(10.0)
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("timeout", [0, 0.0004], ids=["zero", "under-a-millisecond"])
def test_a_timeout_of_zero_refuses_at_once_as_on_sqlite(timeout: float) -> None:
    """`--timeout 0` (`Store(url, timeout=0)`) set the server's lock_timeout to 0, which
    PostgreSQL reads as no timeout: a write behind another writer's lock waited as long as it
    was held, where SQLite gives up at once."""
    import threading

    import psycopg

    from threadlog import Locked

    url = postgres_url()
    with Store(url) as store:
        t = store.create_thread(title="locks")
    with psycopg.connect(url) as other, Store(url, timeout=timeout) as store:  # another writer holds the thread's lock
        other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (t,))
        released = threading.Timer(10, other.rollback)  # the old code waits until then
        released.start()
        started = time.monotonic()
        try:
            with pytest.raises(Locked):
                store.append_message(t, "user", "waits for the lock")
        finally:
            released.cancel()
        assert time.monotonic() - started < 5


@pytest.mark.parametrize("target", ["sqlite", "postgresql"])
def test_a_read_view_left_open_when_its_store_is_closed_ends_without_an_error(tmp_path: Path, target: str) -> None:
    """A reader abandoned halfway (an export's lines, `tree --all`'s trees: generators that hold
    one read view) is often closed only after its store, by the garbage collector. On SQLite
    that ended quietly; on PostgreSQL the view's rollback asked the closed store for its
    connection and raised "the store ... is closed" from the finalizer, which Python reports as
    an ignored exception (seen under load, after a refused `tree --all`). A closed store's
    session is over: there is nothing to roll back."""
    store = Store(tmp_path / "a.db" if target == "sqlite" else postgres_url())
    t = store.create_thread(title="trip")
    store.append_message(t, "user", "hello")
    lines = export_all(store)
    assert next(lines) and next(lines)  # the header and a stream line: inside its read view now
    store.close()
    lines.close()  # raised StoreError on PostgreSQL


def test_a_wait_for_earlier_writes_holds_up_no_other_writer_and_waits_only_for_those_open_when_it_began() -> None:
    """`wait_for_writes` (a LangGraph deletion's, before it erases) asked for the order lock
    exclusively, and PostgreSQL queues every later shared request behind a waiting exclusive
    one: with one long write open (a restore, a fan_out, a transaction opened by hand), every
    other writer's append stood still until that write ended or the wait timed out. It now
    waits, without a lock, for the writes that held positions when it began, and no others;
    a role that is not a superuser may."""
    import psycopg
    import urllib.parse

    from eventstore.postgres import _RESERVE_SQL

    url = postgres_url()
    schema = urllib.parse.unquote(url.rpartition("search_path%3D")[2])
    with Store(url) as store:
        thread = store.create_thread(title="writes")
    cluster = login_role("threadlog_writer")
    cluster.execute(f"GRANT USAGE ON SCHEMA {schema} TO threadlog_writer")
    cluster.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO threadlog_writer")
    cluster.execute(f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO threadlog_writer")
    writer_url = url.replace("postgres@", "threadlog_writer@", 1)
    with (psycopg.connect(url) as early, psycopg.connect(url) as late, Store(writer_url) as waiting,
          Store(url, timeout=5) as third):
        early.execute(_RESERVE_SQL.encode(), (1, 1))  # a write that took its position and stays open
        waited = threading.Event()
        failed: list[BaseException] = []

        def wait() -> None:
            try:
                waiting.wait_for_writes()
            except BaseException as error:  # raised again by the test's own thread
                failed.append(error)
            waited.set()

        appended = threading.Event()
        waiter = threading.Thread(target=wait)
        appender = threading.Thread(target=lambda: (third.append_message(thread, "user", "meanwhile"), appended.set()))
        waiter.start()
        try:
            assert not waited.wait(0.5)  # held up by the open write
            appender.start()
            assert appended.wait(4), "another writer's append stood still behind the wait"
            assert not waited.is_set()  # the wait goes on meanwhile
            late.execute(_RESERVE_SQL.encode(), (1, 1))  # a write that took its position after the wait began
        finally:
            early.rollback()
            waited.wait(10)
            if appender.ident is not None:  # started
                appender.join(10)
        assert waited.is_set() and not failed, failed  # the early write ended: the late one, still open, is not waited for
        late.rollback()
        waiter.join(10)
    with Store(url) as store:
        assert [e.type for e in store.read(thread)][-1] == "message.appended"
