"""`verify(since=C)`: only what was appended after a checkpoint is checked, and the checkpoint
comes back extended over it; the full verify's one-pass scan passes any history, and the
message counts `ls` shows (computed without reading messages) agree with the events."""

from __future__ import annotations

import json
import re
import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import stored
from tests.backends import postgres_url
from projections import transcript
from threadlog import IntegrityError, InvalidEvent, Store, StoreError, save_snapshot, thread_state
from threadlog.cli import cli


def busy(store: Store) -> tuple[str, str]:
    t = store.create_thread(title="a")
    for i in range(5):
        store.append_message(t, "user" if i % 2 == 0 else "assistant", f"message {i}")
    f = store.fork(t, at=3)
    store.append_message(f, "user", "in the fork")
    return t, f


def test_since_checks_the_new_events_and_extends_the_checkpoint(tmp_path: Path) -> None:
    with Store(tmp_path / "t.db") as store:
        t, f = busy(store)
        before = store.checkpoint()
        store.append_message(t, "user", "new in t")
        g = store.fork(f)  # a new fork of a fork
        store.append_message(g, "assistant", "new in g")
        u = store.create_thread(title="new thread")
        store.append_message(u, "user", "hello")
        old = next(e for e in store.read(t) if e.type == "message.appended")
        store.redact(old.position, reason="test", actor="t")  # a new event erasing an old one
        report = store.verify(since=before)
        assert report.events == 6 and report.streams == 3  # t (a message, the redaction), g (2), u (2)
        assert report.checkpoint == store.checkpoint()  # extended: what a checkpoint taken now says
        assert store.verify(checkpoint=report.checkpoint).events == store.counts().events
        assert store.verify(since=report.checkpoint).events == 0  # nothing new since


def _since_peak(tmp_path: Path, n: int) -> int:
    """The peak Python memory of `verify(since=C)` over n events appended after C."""
    with Store(tmp_path / f"{n}.db") as store:
        t, _ = busy(store)
        before = store.checkpoint()
        for _ in range(n // 1000):
            store.append(t, [{"type": "message.appended", "data": {"role": "user", "content": "x"}}] * 1000)
        tracemalloc.start()
        try:
            assert store.verify(since=before).events == n
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()


def test_since_checks_many_new_events_in_bounded_memory(tmp_path: Path) -> None:
    """It kept every new event's position and hash to extend the checkpoint at the end: 310 MB
    for 900,000 events appended since the checkpoint, where a full verify of 2.2M takes 105."""
    small, large = _since_peak(tmp_path, 2_000), _since_peak(tmp_path, 20_000)
    assert large < small * 1.5 + 256 * 1024, (small, large)  # ten times the events, not ten times the memory


def test_since_says_how_far_it_has_checked(tmp_path: Path) -> None:
    """900,000 events appended since a checkpoint took 7 s to check, without a word on a
    terminal: `progress(done, total)` is told every 10,000 events, as a full verify tells it."""
    with Store(tmp_path / "t.db") as store:
        t, _ = busy(store)
        before = store.checkpoint()
        store.append(t, [{"type": "message.appended", "data": {"role": "user", "content": "x"}}] * 25_000)
        told: list[tuple[int, int]] = []
        report = store.verify(since=before, progress=lambda done, total: told.append((done, total)))
    assert report.events == 25_000 and told == [(10_000, 25_000), (20_000, 25_000), (25_000, 25_000)]


def test_since_on_postgresql_ends_its_progress_at_its_total(tmp_path: Path) -> None:
    """On PostgreSQL a refused write leaves the positions it took unused: the events checked,
    told against the positions to check, ended a bar at 28% of a check that was done."""
    with Store(postgres_url()) as store:
        t, _ = busy(store)
        before = store.checkpoint()
        for _ in range(50):
            with pytest.raises(StoreError):
                store.append_message(t, "user", "refused", expect=0)
        for i in range(20):
            store.append_message(t, "user", f"kept {i}")
        told: list[tuple[int, int]] = []
        report = store.verify(since=before, progress=lambda done, total: told.append((done, total)))
        assert report.events == 20 and told and told[-1][0] == told[-1][1] > 0, told
        told.clear()
        store.verify(since=report.checkpoint, progress=lambda done, total: told.append((done, total)))
        assert told == [(0, 0)]  # nothing new: done at once


def _alter(db: Path, sql: str, params: Any = ()) -> None:
    """One edit of the file outside threadlog."""
    conn = sqlite3.connect(db)
    conn.execute(sql, params)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("sql", ["UPDATE events SET data = replace(data, 'original', 'forgery') WHERE position = ?",
                                 "UPDATE events SET event_id = CAST(X'74ff' AS TEXT) WHERE position = ?"],
                         ids=["data", "event-id-not-utf8"])
def test_since_names_a_new_event_that_was_altered(tmp_path: Path, sql: str) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, _ = busy(store)
        before = store.checkpoint()
        new = store.append_message(t, "user", "the original")
    _alter(db, sql, (new.position,))
    with Store(db) as store, pytest.raises(IntegrityError) as caught:
        store.verify(since=before)
    assert caught.value.position == new.position


def test_since_names_a_row_it_reads_whose_text_is_not_utf8(tmp_path: Path) -> None:
    """`since` reads a thread's first event (where it forks from, its kind) when new events
    touch it: that row's text replaced by bytes that are not UTF-8 is named by its position,
    as a full verify names it (it said only that the file holds such text)."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, _ = busy(store)
        before = store.checkpoint()
        store.append_message(t, "user", "new")
        first = store.event_at(t, 0)
    _alter(db, "UPDATE events SET event_id = CAST(X'74ff' AS TEXT) WHERE position = ?", (first.position,))
    with Store(db) as store, pytest.raises(IntegrityError) as caught:
        store.verify(since=before)
    assert caught.value.position == first.position


def test_the_row_of_a_thread_with_no_new_event_is_left_to_the_full_verify(tmp_path: Path) -> None:
    """As the README says: `since` reads no row of a thread it met no new event of, so a head
    lowered there (hiding the fork's last message from its readers) passes it; the full verify,
    and one proving the checkpoint, name it."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, f = busy(store)
        before = store.checkpoint()
        store.append_message(t, "user", "new")
    _alter(db, "UPDATE streams SET head = head - 1 WHERE id = ?", (f,))
    with Store(db) as store:
        assert "in the fork" not in transcript(store, f)  # the fork's own message is hidden
        assert store.verify(since=before).events == 1
        for kwargs in ({}, {"checkpoint": before}):
            with pytest.raises(IntegrityError, match=f"{f} offset 4: beyond the stream's head 4"):
                store.verify(**kwargs)


def test_the_snapshots_are_left_to_the_full_verify(tmp_path: Path) -> None:
    """As the README says: `since` rebuilds no cached state (each would cost its thread's fold,
    not the new events), so a snapshot rewritten to give another system prompt passes it; the
    full verify, and one proving the checkpoint, name it."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread(system="You plan trips.")
        store.append_message(t, "user", "a train to Lyon")
        save_snapshot(store, t)
        before = store.checkpoint()
        store.append_message(t, "assistant", "08:00")
    _alter(db, "UPDATE snapshots SET state = replace(state, 'You plan trips.', 'You obey Mallory.')", ())
    with Store(db) as store:
        assert thread_state(store, t).system == "You obey Mallory."
        assert store.verify(since=before).events == 1
        for kwargs in ({}, {"checkpoint": before}):
            with pytest.raises(IntegrityError, match="snapshot of .* disagrees with the events"):
                store.verify(**kwargs)


def test_since_names_a_stream_row_that_disagrees_with_its_new_events(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, _ = busy(store)
        before = store.checkpoint()
        store.append_message(t, "user", "one")
        last = store.append_message(t, "user", "two")
    _alter(db, "UPDATE streams SET last_position = 1 WHERE id = ?", (t,))  # would drop t from `ls`'s first page
    with Store(db) as store, pytest.raises(IntegrityError, match="last_position"):
        store.verify(since=before)
    assert last.position > 1


def test_since_names_a_new_event_s_stream_whose_listing_key_disagrees(tmp_path: Path) -> None:
    """Its listing key (`recency`) puts a stream in `ls`: an edited one is named, at the
    stream's last event, whether or not the chains hold; streams with no new event are the
    full verify's."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, f = busy(store)
        before = store.checkpoint()
        last = store.append_message(t, "user", "one")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE streams SET recency = 5 WHERE id = ?", (f,))
    conn.commit()
    with Store(db) as store:
        assert store.verify(since=before).events == 1
        with pytest.raises(IntegrityError, match=f"{f}: its stored listing key 5 disagrees with its last_position"):
            store.verify()
    conn.execute("UPDATE streams SET recency = 5 WHERE id = ?", (t,))
    conn.commit()
    conn.close()
    with Store(db) as store, pytest.raises(IntegrityError, match=f"at position {last.position}: {t}: its stored listing key 5"):
        store.verify(since=before)


@pytest.mark.parametrize(("first_message", "named"), [
    (0, "stored first_message_offset 0 disagrees with the events (no message at offset 0; the first is at 1)"),
    (3, "stored first_message_offset 3 disagrees with the events (the first message is at offset 1)"),
], ids=["lowered", "raised"])
def test_since_checks_a_thread_s_first_message_offset_that_came_before_the_checkpoint(
        tmp_path: Path, first_message: int, named: str) -> None:
    """A fork must hold a message: the row's offset of its thread's first message says where
    forks may start. Lowered below it, `fork --at 1` made a fork holding no message; raised, a
    fork after the first message was refused. `since` took the stored offset as it was
    whenever that message came before the checkpoint, and passed either edit."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, _ = busy(store)
        before = store.checkpoint()
        store.append_message(t, "user", "after the checkpoint")
    _alter(db, "UPDATE streams SET first_message_offset = ? WHERE id = ?", (first_message, t))
    with Store(db) as store:
        created = store.event_at(t, 0).position
        for kwargs in ({}, {"since": before}, {"checkpoint": before}):
            with pytest.raises(IntegrityError, match=re.escape(named[:named.index(" (")])) as caught:
                store.verify(**kwargs)
            assert caught.value.position == created
        with pytest.raises(IntegrityError) as caught:
            store.verify(since=before)
        assert str(caught.value).endswith(named)


@pytest.mark.parametrize(("change", "named"), [
    ("parent_id = :other, root_id = :other", "the streams table disagrees with its thread.forked event"),
    ("parent_offset = 2", "the stream's row names no first event of its own at offset 2"),
    ("kind = 'subagent'", "stored kind 'subagent' disagrees with the events ('fork')"),
], ids=["reparented", "moved", "kind"])
def test_since_checks_where_a_fork_it_reads_from_the_middle_forks_from(tmp_path: Path, change: str, named: str) -> None:
    """A fork row rewritten to hang under another thread shows that thread's system prompt and
    history as the fork's: the stream's first event says where it forks from, even when every
    event `--since` reads is after it."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, f = busy(store)
        other = store.create_thread(system="You are someone else.")
        store.append_message(other, "user", "elsewhere")
        store.append_message(other, "user", "and more")
        before = store.checkpoint()
        store.append_message(f, "user", "after the checkpoint")
    _alter(db, f"UPDATE streams SET {change} WHERE id = :fork", {"fork": f, "other": other})
    with Store(db) as store:
        with pytest.raises(IntegrityError, match=re.escape(named)):
            store.verify(since=before)
        with pytest.raises(IntegrityError):
            store.verify()


def test_a_row_below_position_one_fails_every_verify(tmp_path: Path) -> None:
    """No scan reads below position 1, where readers still find a row by its offset: a message
    slipped in there (offset 1.5, between two real ones) would be shown and sent to the model."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, _ = busy(store)
        before = store.checkpoint()
    conn = sqlite3.connect(db)
    conn.execute('INSERT INTO events (position, stream_id, "offset", event_id, type, schema_version, data, meta, recorded_at, hash) '
                 "SELECT -1, stream_id, 1.5, x'00112233445566778899aabbccddeeff', type, schema_version, "
                 """'{"content":[{"text":"INJECTED","type":"text"}],"role":"user"}', meta, recorded_at, hash """
                 "FROM events WHERE position = 2")
    conn.commit()
    conn.close()
    with Store(db) as store:
        for check in (lambda: store.verify(), lambda: store.verify(since=before), lambda: store.verify(checkpoint=before)):
            with pytest.raises(IntegrityError, match="a row holds position -1: positions start at 1") as error:
                check()
            assert error.value.position == -1


def test_a_last_row_moved_past_the_largest_position_fails_verify(tmp_path: Path) -> None:
    """Moved in order, the chains still hold, but no later write could take a position: verify
    names the row the writes' refusals send the reader to."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        busy(store)
        last = store.last_position()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE events SET position = ? WHERE position = ?", (2**62 + 1, last))
    conn.execute("UPDATE streams SET last_position = ? WHERE last_position = ?", (2**62 + 1, last))
    conn.commit()
    conn.close()
    with Store(db) as store, pytest.raises(IntegrityError, match="a row holds position 4611686018427387905: positions go up to"):
        store.verify()


def test_a_root_row_given_a_fork_point_fails_verify(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, _ = busy(store)
    _alter(db, "UPDATE streams SET parent_offset = 0 WHERE id = ?", (t,))
    with Store(db) as store, pytest.raises(IntegrityError, match=f"{t}: the streams table gives a root thread the fork point 0"):
        store.verify()


def test_since_refuses_a_log_that_ends_before_its_checkpoint(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, _ = busy(store)
        store.append_message(t, "user", "last")
        after = store.checkpoint()
    conn = sqlite3.connect(db)
    (hash_,), = stored.events(conn, ["hash"], "WHERE position = (SELECT max(position) - 1 FROM events)")
    conn.execute("DELETE FROM events WHERE position = (SELECT max(position) FROM events)")
    conn.commit()
    conn.close()
    with Store(db) as store:
        with pytest.raises(IntegrityError, match="below checkpoint"):
            store.verify(since=after)
        with pytest.raises(InvalidEvent, match="not both"):
            store.verify(checkpoint=after, since=after)
    assert hash_


def test_since_refuses_a_checkpoint_of_another_log(tmp_path: Path) -> None:
    """Two files grown alike: a checkpoint of one given to `--since` on the other was extended
    over its new events, a checkpoint that describes neither (a later full verify of the file
    with it then failed as if the file had been tampered with)."""
    stores = []
    for name in ("a.db", "b.db"):
        with Store(tmp_path / name) as store:
            busy(store)
            stores.append(store.checkpoint())
    with Store(tmp_path / "b.db") as store:
        store.append_message(store.create_thread(), "user", "new in b")
    before = (tmp_path / "b.db").read_bytes()
    with Store(tmp_path / "b.db") as store:
        with pytest.raises(IntegrityError, match="the event at position 8 is not the one checkpoint tlc1:8:.* covered there "
                                                 r"\(its last\): the checkpoint was taken of another log") as refused:
            store.verify(since=stores[0])
        assert refused.value.position == 8
        assert store.verify(since=stores[1]).events == 2  # its own
    result = CliRunner().invoke(cli, ["verify", "--db", str(tmp_path / "b.db"), "--since", stores[0]])
    assert result.exit_code == 1 and "taken of another log" in result.output and "Traceback" not in result.output
    assert (tmp_path / "b.db").read_bytes() == before


def test_since_refuses_a_checkpoint_whose_last_event_was_removed(tmp_path: Path) -> None:
    """The last covered event deleted, and later events appended to another thread: their
    chains do not pass through it, and nothing else `since` reads would miss it."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, f = busy(store)
        store.append_message(t, "user", "last before the checkpoint")
        covered = store.checkpoint()
        store.append_message(f, "assistant", "after")
    _alter(db, "DELETE FROM events WHERE position = ?", (int(covered.split(":")[1]),))
    _alter(db, "UPDATE streams SET head = head - 1 WHERE id = ?", (t,))
    with Store(db) as store:
        with pytest.raises(IntegrityError, match="holds no event at position 9, the last one checkpoint"):
            store.verify(since=covered)


def test_a_checkpoint_of_the_first_form_still_verifies_and_comes_back_in_the_new(tmp_path: Path) -> None:
    """A checkpoint printed before checkpoints named their last event (three parts) is taken by
    both verifies; `since` returns it extended, naming its last event."""
    with Store(tmp_path / "t.db") as store:
        t, _ = busy(store)
        now = store.checkpoint()
        first_form = now.rsplit(":", 1)[0]
        assert store.verify(checkpoint=first_form).events == 8
        store.append_message(t, "user", "new")
        report = store.verify(since=first_form)
        assert report.checkpoint == store.checkpoint() and report.checkpoint.count(":") == 3
        assert store.verify(since=now).checkpoint == report.checkpoint


def test_a_checkpoint_whose_last_part_was_altered_is_refused(tmp_path: Path) -> None:
    with Store(tmp_path / "t.db") as store:
        busy(store)
        now = store.checkpoint()
        altered = now[:-1] + ("0" if now[-1] != "0" else "1")
        with pytest.raises(IntegrityError, match="does not hold together"):
            store.verify(checkpoint=altered)
        with pytest.raises(IntegrityError, match="taken of another log"):
            store.verify(since=altered)
        with pytest.raises(InvalidEvent, match="is not a checkpoint"):
            store.verify(since=now + "0")


_DIGEST = "ab" * 32
_ZEROS = "0" * 64


@pytest.mark.parametrize(("checkpoint", "why"), [
    (f"tlc1:{2**62 + 1}:{_DIGEST}:{'0' * 16}", "its position 4611686018427387905 is past 4611686018427387904 (2^62)"),
    (f"tlc1:{2**64}:{_DIGEST}", "its position 18446744073709551616 is past"),
    (f"tlc1:{'9' * 5000}:{_DIGEST}", "its position, of 5,000 digits, is past"),
    (f"tlc1:0:{_ZEROS}:{'ab' * 8}", "a checkpoint at position 0 (of an empty log) is tlc1:0:<64 zeros>"),
    (f"tlc1:0:{_DIGEST}", "a checkpoint at position 0 (of an empty log) is tlc1:0:<64 zeros>"),
], ids=["past-2^62", "past-2^64", "5000-digits", "0-with-a-last-part", "0-with-a-digest"])
def test_a_checkpoint_no_log_can_have_is_refused_as_malformed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              checkpoint: str, why: str) -> None:
    """No log holds a position past 2^62, and an empty log's checkpoint is all zeros: such a
    checkpoint was taken as a log's, and a file was accused of losing events (`--since`:
    "events were removed"), of holding an altered row (a 5,000-digit position: "a stored
    event does not have the shape its type requires"), or, on a file verified in two
    processes, a position past 2^63 raised OverflowError out of SQLite."""
    from eventstore import splitscan

    monkeypatch.setattr(splitscan, "SPLIT_FROM", 0)  # as a file of 300,000 events or more is verified
    db = tmp_path / "t.db"
    with Store(db) as store:
        busy(store)
    before = db.read_bytes()
    with Store(db) as store:
        for kwargs in ({"since": checkpoint}, {"checkpoint": checkpoint}):
            with pytest.raises(InvalidEvent, match=re.escape(why)) as refused:
                store.verify(**kwargs)  # type: ignore[arg-type]
            assert "is not a checkpoint" in str(refused.value)
    for option in ("--since", "--checkpoint"):
        result = CliRunner().invoke(cli, ["verify", "--db", str(db), option, checkpoint])
        assert result.exit_code == 1 and result.stdout == "", result.output
        assert result.stderr.count("\n") == 1 and why in result.stderr, result.stderr
    assert db.read_bytes() == before


def test_verify_names_the_checkpoint_as_it_reads_it(tmp_path: Path) -> None:
    """A checkpoint read from a file keeps its line end (`open(...).read()`), and blanks around
    it are taken: the report and every message name the checkpoint itself. The report of a
    proven checkpoint returned the text given, line end included, and `verify --since` said
    "below checkpoint   tlc1:…\\n's 50", the line end cut into the message."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        busy(store)
        now = store.checkpoint()
        assert store.verify(checkpoint=f"  {now}\n").checkpoint == now
        longer = f"tlc1:50:{_DIGEST}"
        with pytest.raises(IntegrityError) as refused:
            store.verify(since=f" {longer}\n")
        assert refused.value.why == f"the log ends at position 8, below checkpoint {longer}'s 50 (events were removed)"
    result = CliRunner().invoke(cli, ["verify", "--db", str(db), "--checkpoint", f"{now}\n"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1] == f"ok: the log still holds everything checkpoint {now} covered"


def test_cli_verify_since_prints_the_extended_checkpoint(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, _ = busy(store)
        before = store.checkpoint()
        store.append_message(t, "user", "new")
        now = store.checkpoint()
    runner = CliRunner()
    text = runner.invoke(cli, ["verify", "--db", str(db), "--since", before])
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines() == ["ok: 1 event appended since the checkpoint verified, in 1 thread (0 redacted)",
                                        f"checkpoint: {now}"]
    as_json = runner.invoke(cli, ["verify", "--db", str(db), "--since", before, "--json"])
    assert json.loads(as_json.stdout)["checkpoint"] == now
    both = runner.invoke(cli, ["verify", "--db", str(db), "--since", before, "--checkpoint", before])
    assert both.exit_code == 2


def test_cli_verify_since_says_how_many_events_were_redacted_since(tmp_path: Path) -> None:
    """A redaction after a checkpoint erases an event it covered, and anyone who can write the
    file can write one: `--since` passed printing only the count of new events, so a message
    erased since the last check went unseen unless `--json` was read."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t = store.create_thread()
        said = store.append_message(t, "user", "the deal is off")
        before = store.checkpoint()
        store.redact(said.position, reason="tidy", actor="someone")
    text = CliRunner().invoke(cli, ["verify", "--db", str(db), "--since", before])
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines()[0] == "ok: 1 event appended since the checkpoint verified, in 1 thread (1 redacted)"


def test_cli_verify_since_json_names_the_given_checkpoint_since_on_failure_too(tmp_path: Path) -> None:
    """On success `since` is the checkpoint given and `checkpoint` the next one to keep; a
    failure put the given one under `checkpoint` and had no `since`, so a script keeping
    `.checkpoint` kept the old one as if it had been extended."""
    db = tmp_path / "t.db"
    with Store(db) as store:
        t, _ = busy(store)
        before = store.checkpoint()
        store.append_message(t, "user", "new")
    _alter(db, "UPDATE events SET data = replace(data, 'new', 'NEW') WHERE position = (SELECT max(position) FROM events)")
    failed = CliRunner().invoke(cli, ["verify", "--db", str(db), "--since", before, "--json"])
    report = json.loads(failed.stdout)
    assert failed.exit_code == 1 and report["ok"] is False, failed.output
    assert report["since"] == before and report["checkpoint"] is None


def test_cli_verify_since_json_names_the_given_checkpoint_since_when_the_file_cannot_be_read(tmp_path: Path) -> None:
    """A file too damaged to open is a failed check too: it put the checkpoint given with
    --since under `checkpoint`, the next one to keep, as a failed chain did."""
    with Store(tmp_path / "t.db") as store:
        busy(store)
        before = store.checkpoint()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all " * 300)
    failed = CliRunner().invoke(cli, ["verify", "--db", str(junk), "--since", before, "--json"])
    report = json.loads(failed.stdout)
    assert failed.exit_code == 1 and report["ok"] is False and report["position"] is None, failed.output
    assert report["since"] == before and report["checkpoint"] is None


def test_tree_pages_roots_by_activity(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with Store(db) as store:
        roots = [store.create_thread(title=f"root {i}") for i in range(4)]
        fork = store.fork(store.append_message(roots[0], "user", "hi").stream_id)
        store.append_message(roots[2], "user", "latest")
    runner = CliRunner()
    first = runner.invoke(cli, ["tree", "--db", str(db), "-n", "2", "--json"])
    assert [t["id"] for t in json.loads(first.stdout)] == [roots[2], roots[0], fork]  # the two most active roots' trees
    everything = runner.invoke(cli, ["tree", "--db", str(db), "--all", "--json"])
    assert len(json.loads(everything.stdout)) == 5


# Random histories: threads and forks appended in any interleaving. The one-pass verify passes,
# and from any checkpoint, `since` checks exactly the later events and extends it to a fresh one.
steps = st.lists(st.tuples(st.sampled_from(["append", "fork", "thread"]), st.integers(0, 1000)), min_size=1, max_size=30)


@settings(max_examples=25, deadline=None)
@given(steps=steps, cut=st.integers(0, 30))
def test_any_history_verifies_whole_and_since_any_checkpoint(steps: list[tuple[str, int]], cut: int) -> None:
    with Store(":memory:") as store:
        streams = [store.create_thread(title="first")]
        checkpoint, counted = store.checkpoint(), 1
        for i, (kind, pick) in enumerate(steps):
            if i == cut:
                checkpoint, counted = store.checkpoint(), store.counts().events
            target = streams[pick % len(streams)]
            if kind == "thread":
                streams.append(store.create_thread(title=str(i)))
            elif kind == "fork" and store.count(target, "message.appended"):
                first = store.thread(target).head - store.count(target, "message.appended")  # messages only follow it
                streams.append(store.fork(target, at=first + 1 + pick % (store.head(target) - first)))
            else:
                store.append_message(target, "user" if pick % 2 else "assistant", f"m{i}")
        report = store.verify()
        assert report.events == store.counts().events
        for stream in streams:  # counted from the index of the other events, offsets having no gaps
            events = list(store.read(stream))
            for type_ in ("message.appended", "thread.created", "thread.forked"):
                assert store.count(stream, type_) == sum(e.type == type_ for e in events)
        since = store.verify(since=checkpoint)
        assert since.events == store.counts().events - counted
        assert since.checkpoint == store.checkpoint()


def test_since_reads_the_ancestry_of_a_deep_chain_of_forks_only_to_each_fork_point(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each stream with new events read its whole ancestry, up to the root: after a chain of N
    forks was appended, `verify --since` read about N²/2 stream rows."""
    from eventstore.sqlite import SQLiteBackend
    from tests.backends import counting_ancestry

    read = {}
    for depth in (20, 40):
        backend = SQLiteBackend(tmp_path / f"chain{depth}.db")
        with Store(backend) as store:
            t = store.create_thread(title="root")
            store.append_message(t, "user", "hi")
            checkpoint = store.checkpoint()
            for i in range(depth):
                t = store.fork(t)
                store.append_message(t, "user", f"m{i}")
            with monkeypatch.context() as patch:
                counted = counting_ancestry(backend, patch)
                store.verify(since=checkpoint)
            read[depth] = counted[0]
    assert read[40] <= 2 * read[20], read


def test_since_counts_the_older_events_the_new_redactions_erased(tmp_path: Path) -> None:
    """`redacted` counted only the new events that were redacted: a redaction since the
    checkpoint of an event it covers said 0, so the viewer's badge, which adds the counts of
    each run, never showed it."""
    with Store(tmp_path / "t.db") as store:
        t = store.create_thread()
        old = store.append_message(t, "user", "my card is 4111")
        checkpoint = store.checkpoint()
        new = store.append_message(t, "user", "and my pin is 1234")
        store.redact(old.position, "pii", "ops")
        store.redact(new.position, "pii", "ops")
        assert store.verify(since=checkpoint).redacted == 2
        assert store.verify().redacted == 2
