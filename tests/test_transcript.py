"""transcript / write_transcript: agentty's bounded Markdown export, at its extremes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import InvalidEvent, Store
from projections.transcript import clip_middle
from threadlog import drop_snapshots, save_snapshot, transcript, write_transcript

from claude_code import DATA, SESSIONS, import_session

KIB = 1024


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _header_count(text: str) -> int:
    line = next(line for line in text.splitlines() if line.startswith("- messages: "))
    return int(line.split()[2])


def test_sections_tool_calls_one_line_and_no_tool_output(mem: Store) -> None:
    t = mem.create_thread()
    mem.append_message(t, "user", "Find a train")
    mem.append_message(t, "assistant", [
        {"type": "thinking", "thinking": "SECRET REASONING", "signature": "sig"},
        {"type": "text", "text": "Searching."},
        {"type": "tool_use", "id": "toolu_1", "name": "search_trains", "input": {"to": "Lyon", "day": "Friday"}},
    ])
    mem.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "HUGE TOOL OUTPUT " * 100}])
    mem.append_message(t, "assistant", "The 08:00.")
    md = transcript(mem, t)
    assert "## user\n\n    Find a train" in md and "## assistant\n\n" in md
    assert '\ntool call `search_trains` `{"day":"Friday","to":"Lyon"}`\n' in md
    assert "HUGE TOOL OUTPUT" not in md and "SECRET REASONING" not in md and "_(thinking omitted)_" in md
    assert _header_count(md) == 4 and f"thread {t}" in md and mem.thread(t).head_hash in md


def test_one_10_mb_message_is_clipped_head_and_tail(mem: Store) -> None:
    t = mem.create_thread()
    body = "HEAD" + "x" * (10 * KIB * KIB) + "TAIL"
    mem.append_message(t, "user", body)
    md = transcript(mem, t)
    assert _size(md) <= 512 * KIB
    section = md[md.index("## user"):]
    assert _size(section) <= 16 * KIB
    assert "HEAD" in section and "TAIL" in section and " bytes elided …" in section
    elided = int(section.split("… ")[1].split(" bytes")[0])
    # the tail starts mid-line, so it is indented again: four bytes the body does not hold
    kept = _size(section) - _size(f"\n\n… {elided} bytes elided …\n\n") - 4
    assert elided == _size(f"## user\n\n    {body}\n\n") - kept
    assert "\n\n    xxx" in section.split(" bytes elided …")[1]


def test_200_000_short_messages_keep_the_most_recent_and_count_them_all(tmp_path: Path) -> None:
    with Store(tmp_path / "big.db") as store:
        t = store.create_thread()
        for batch in range(200):
            store.append(t, [{"type": "message.appended", "data": {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {batch * 1000 + i}"}} for i in range(1000)])
        md = transcript(store, t)
        assert _size(md) <= 512 * KIB
        assert _header_count(md) == 200_000
        assert md.rstrip().endswith("message 199999")
        marker = next(line for line in md.splitlines() if "earlier messages elided" in line)
        elided = int(marker.split()[1])
        assert elided + md.count("## ") == 200_000
        assert f"message {elided - 1}\n" not in md and f"message {elided}\n" in md
        small = transcript(store, t, max_bytes=4096, last=10)
        assert _size(small) <= 4096 and small.count("## ") <= 10 and _header_count(small) == 200_000


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet="aé€😀\n", min_size=1, max_size=3000), st.integers(256, 2048))
def test_multibyte_text_is_never_split(text: str, limit: int) -> None:
    raw = text.encode("utf-8")
    clipped = clip_middle(raw, limit)
    assert len(clipped) <= max(limit, 0) or clipped == raw
    clipped.decode("utf-8")  # raises if a character was split


@pytest.mark.parametrize("cut", range(4), ids=lambda c: f"shift{c}")
def test_multibyte_at_every_cut_position(mem: Store, cut: int) -> None:
    t = mem.create_thread()
    mem.append_message(t, "user", "a" * cut + "😀" * 20_000)
    for _ in range(3):
        mem.append_message(t, "assistant", "€" * 7000)
    md = transcript(mem, t, max_bytes=20_000 + cut, max_message_bytes=5000 + cut)
    assert _size(md) <= 20_000 + cut
    assert "\ufffd" not in md


def test_never_over_max_bytes_with_tiny_bounds(mem: Store) -> None:
    t = mem.create_thread()
    for i in range(50):
        mem.append_message(t, "user", f"{i} " + "ü" * 3000)
    for max_bytes in (2048, 2049, 3000, 5000, 70_000):
        md = transcript(mem, t, max_bytes=max_bytes, max_message_bytes=256)
        assert _size(md) <= max_bytes and _header_count(md) == 50
    with pytest.raises(InvalidEvent):
        transcript(mem, t, max_bytes=100)


def test_range_and_last(mem: Store) -> None:
    t = mem.create_thread()
    for i in range(10):
        mem.append_message(t, "user", f"m{i}")
    md = transcript(mem, t, start=3, stop=6)
    assert [line for line in md.splitlines() if line.startswith("    m")] == ["    m2", "    m3", "    m4"]
    assert _header_count(md) == 3
    md = transcript(mem, t, last=2)
    assert [line for line in md.splitlines() if line.startswith("    m")] == ["    m8", "    m9"]
    assert "… 8 earlier messages elided (offsets 1..8)" in md


def test_note_fork_transcript_starts_at_the_note(mem: Store) -> None:
    t = mem.create_thread()
    mem.append_message(t, "user", "parent talk")
    f = mem.fork(t, context="note", transcript="/x/p.md")
    mem.append_message(f, "user", "fork talk")
    md = transcript(mem, f)
    assert "parent talk" not in md and "/x/p.md" in md and "fork talk" in md and _header_count(md) == 2
    assert f"fork of {t} at offset 2" in md


def test_deterministic_and_independent_of_snapshots(mem: Store) -> None:
    t = mem.create_thread()
    for i in range(30):
        mem.append_message(t, "user", f"m{i} " + "z" * 500)
    save_snapshot(mem, t, 10)
    first = transcript(mem, t, max_bytes=8000)
    assert transcript(mem, t, max_bytes=8000) == first
    drop_snapshots(mem)
    assert transcript(mem, t, max_bytes=8000) == first


@pytest.mark.parametrize("session", SESSIONS[:3], ids=lambda s: s.split("/")[-1][:8])
def test_real_claude_code_sessions_within_bounds(mem: Store, session: str) -> None:
    t = import_session(mem, DATA / session)
    for max_bytes, per_message in ((512 * KIB, 16 * KIB), (8 * KIB, 1 * KIB)):
        md = transcript(mem, t, max_bytes=max_bytes, max_message_bytes=per_message)
        assert _size(md) <= max_bytes
        messages = sum(1 for e in mem.read(t) if e.type == "message.appended")
        assert _header_count(md) == messages
        assert "tool_result" not in md
        sections = md.split("\n## ")[1:]
        assert all(_size("## " + s) <= per_message + 2 for s in sections)


# -- atomic write -------------------------------------------------------------------------------


def test_write_transcript_replaces_the_file(tmp_path: Path) -> None:
    db, out = tmp_path / "t.db", tmp_path / "p.transcript.md"
    with Store(db) as store:
        t = store.create_thread()
        store.append_message(t, "user", "first")
        write_transcript(store, t, out)
        assert "first" in out.read_text()
        store.append_message(t, "user", "second")
        assert write_transcript(store, t, out) == out
        assert out.read_text(encoding="utf-8") == transcript(store, t)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_written_transcript_is_readable_and_keeps_the_mode_it_replaces(tmp_path: Path) -> None:
    out = tmp_path / "p.transcript.md"
    with Store(":memory:") as store:
        t = store.create_thread()
        store.append_message(t, "user", "first")
        write_transcript(store, t, out)
        assert out.stat().st_mode & 0o777 == 0o644  # not the 0600 of a temporary file
        out.chmod(0o640)
        write_transcript(store, t, out)
        assert out.stat().st_mode & 0o777 == 0o640


def test_sigkill_mid_write_leaves_the_old_file_intact(tmp_path: Path) -> None:
    db, out = tmp_path / "t.db", tmp_path / "p.transcript.md"
    with Store(db) as store:
        t = store.create_thread()
        store.append_message(t, "user", "old version")
        write_transcript(store, t, out)
        store.append_message(t, "user", "new version " + "n" * 400_000)
    old = out.read_bytes()
    child = textwrap.dedent(f"""
        import os, sys, time
        from eventstore import Store
        from threadlog import write_transcript
        real_fsync = os.fsync
        def slow_fsync(fd):
            sys.stdout.write("writing\\n"); sys.stdout.flush()
            time.sleep(60)  # killed here: the temp file is written, not yet renamed
        os.fsync = slow_fsync
        write_transcript(Store({str(db)!r}), {t!r}, {str(out)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "writing\n", proc.stderr.read() if proc.stderr else ""
    temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert temps and temps[0].read_bytes() != old  # the kill lands with the new text on disk
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)  # reaps the child and closes its pipes
    assert proc.returncode == -signal.SIGKILL
    assert out.read_bytes() == old
    with Store(db) as store:
        write_transcript(store, t, out)
        assert "new version" in out.read_text(encoding="utf-8")
