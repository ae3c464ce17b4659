"""Every importer and `import events` given a file in another encoding than UTF-8: one in
UTF-16 or UTF-32 (what Windows PowerShell 5's `>` writes) is refused by name, saying how to
convert it, with nothing written, and so is a compressed one, saying how to decompress it, and
one that is no text at all (a SQLite database, a binary file), saying what it is; a leading
UTF-8 byte order mark (a Windows editor's) is read as any UTF-8 file."""

from __future__ import annotations

import bz2
import codecs
import gzip
import lzma
import json
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import Store, export_all
from threadlog.cli import cli
from threadlog.export import dump_lines
from threadlog.importers.follow import follow_claude_code, follow_files
from tests.backends import file_dump

FIXTURES = Path(__file__).resolve().parent / "fixtures"
THREADLOG = str(Path(sys.executable).parent / "threadlog")


def _export(tmp_path: Path) -> bytes:
    with Store(tmp_path / "source.db") as store:
        thread = store.create_thread(title="trip")
        store.append_message(thread, "user", "Find me a train to Lyon, café included")
        return "".join(dump_lines(export_all(store))).encode("utf-8")


SOURCES: dict[str, Any] = {  # the command's kind -> (the file's name, its UTF-8 bytes)
    "claude-code": lambda tmp: ("03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl",
                                (FIXTURES / "claude-code" / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl")
                                .read_bytes()),
    "pi": lambda tmp: ("session.jsonl", (FIXTURES / "pi" / "large-session-head.jsonl").read_bytes()),
    "swe-agent": lambda tmp: ("run.traj", (FIXTURES / "swe-agent" / "function_calling_simple.traj").read_bytes()),
    "events": lambda tmp: ("backup.jsonl", _export(tmp)),
}

# How the file is written, and the encoding the refusal names (iconv's name for it).
WIDE = {
    "utf-16-bom": (lambda text: text.encode("utf-16"), "UTF-16"),  # PowerShell 5's `>`: little-endian, with its BOM
    "utf-16le-no-bom": (lambda text: text.encode("utf-16-le"), "UTF-16LE"),
    "utf-16be-bom": (lambda text: codecs.BOM_UTF16_BE + text.encode("utf-16-be"), "UTF-16"),
    "utf-32-bom": (lambda text: text.encode("utf-32"), "UTF-32"),
}


def _database(tmp_path: Path) -> Path:
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.append_message(store.create_thread(title="already here"), "user", "hello")
    return db


# `import events` takes no --skip-bad.
RUNS = [(kind, flags) for kind in SOURCES for flags in ([], ["--skip-bad"]) if kind != "events" or not flags]


@pytest.mark.parametrize("written", list(WIDE), ids=list(WIDE))
@pytest.mark.parametrize(("kind", "flags"), RUNS, ids=[f"{kind}{'-skip-bad' if flags else ''}" for kind, flags in RUNS])
def test_a_utf16_or_utf32_file_is_refused_by_name_saying_how_to_convert_it(tmp_path: Path, kind: str, written: str,
                                                                           flags: list[str]) -> None:
    """Read a line at a time, such a file's first line was taken alone and its second refused
    as "not UTF-8 text"; with --skip-bad, pi made a thread of the first line alone. With
    --skip-bad, SWE-agent's import leaves out a trajectory it cannot read, naming it, as it
    leaves out any it cannot import (and, that being all it was given, fails: nothing was
    imported); the others refuse the whole import, as a file they may not read: --skip-bad
    passes over a line, and the whole file is the user's to convert."""
    encode, encoding = WIDE[written]
    name, text = SOURCES[kind](tmp_path)
    path = tmp_path / "in" / name
    path.parent.mkdir()
    path.write_bytes(encode(text.decode("utf-8")))
    db = _database(tmp_path)
    before = file_dump(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, *flags, str(path)])
    if kind == "swe-agent" and flags:  # a trajectory that cannot be imported is left out whole, and named
        assert result.exit_code == 1 and "malformed 1" in result.stdout, result.output
        assert result.stderr.startswith("error: nothing was imported: --skip-bad skipped all"), result.stderr
        said = next(line for line in result.stdout.splitlines() if line.startswith(f"skipped {path}:1: "))
    else:
        assert (result.exit_code, result.stdout) == (1, ""), result.output
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), result.stderr
        said = lines[0]
    assert f"the file is {encoding} text, not UTF-8" in said, said
    assert file_dump(db) == before, "a refused import changed the database"
    # The conversion it names, run as it says, makes a file the same import takes.
    command = said.split("convert it in place: ", 1)[1].split(";", 1)[0]
    assert command.startswith(f"iconv -f {encoding} -t UTF-8 ")
    if shutil.which("iconv") is None:
        return
    subprocess.run(["sh", "-c", command], check=True, timeout=60)
    assert path.read_bytes() == text
    done = subprocess.run([THREADLOG, "--db", str(db), "import", kind, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("kind", list(SOURCES))
def test_a_leading_utf8_byte_order_mark_is_read_as_any_utf8_file(tmp_path: Path, kind: str) -> None:
    """swe-agent and `import events` refused it ("Unexpected UTF-8 BOM")."""
    name, text = SOURCES[kind](tmp_path)
    path = tmp_path / name
    imported = []
    for db, raw in ((tmp_path / "plain.db", text), (tmp_path / "marked.db", codecs.BOM_UTF8 + text)):
        path.write_bytes(raw)
        result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(path)])
        assert result.exit_code == 0, result.output
        with Store(db) as store:
            imported.append([(event.stream_id, event.event_id, event.type, event.data) for event in store.read_all()])
    assert imported[0] == imported[1] and len(imported[0]) > 1


# How the file is compressed: the suffix its name gets ("" for none), the bytes, and the command
# the refusal names.
COMPRESSED = {
    "gzip": (".gz", gzip.compress, "zcat"),
    "bzip2": (".bz2", bz2.compress, "bzcat"),
    "xz": (".xz", lzma.compress, "xzcat"),
    "gzip-no-suffix": ("", gzip.compress, "zcat"),
}


@pytest.mark.parametrize("compressed", list(COMPRESSED), ids=list(COMPRESSED))
@pytest.mark.parametrize("kind", list(SOURCES))
def test_a_compressed_file_is_refused_by_name_saying_how_to_decompress_it(tmp_path: Path, kind: str, compressed: str) -> None:
    """A backup kept as `backup.jsonl.gz`, or a session copied compressed, was refused as
    `line 1: not UTF-8 text (invalid start byte at byte 1); fix or delete that line, or skip
    bad lines`: advice for a damaged line, of a file that is whole. The refusal says the file
    is compressed and the command that decompresses it; that command, run as it says, makes a
    file the same import takes."""
    suffix, compress, tool = COMPRESSED[compressed]
    name, text = SOURCES[kind](tmp_path)
    path = tmp_path / "in" / (name + suffix)
    path.parent.mkdir()
    path.write_bytes(compress(text))
    db = _database(tmp_path)
    before = file_dump(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, str(path)])
    assert (result.exit_code, result.stdout) == (1, ""), result.output
    [said] = result.stderr.splitlines()
    assert said.startswith(f"error: {path}") and f"the file is {compressed.split('-')[0]}-compressed, not text" in said, said
    assert "fix or delete" not in said, said  # SWE-agent's said "...&& mv ...; fix or delete that file", of a file that is whole
    assert file_dump(db) == before, "a refused import changed the database"
    command = said.split("decompress it and import that: " if suffix else "decompress it in place: ", 1)[1].split(";", 1)[0]
    assert command.startswith(f"{tool} {shlex.quote(str(path))} > ")
    if shutil.which(tool) is None:
        return
    subprocess.run(["sh", "-c", command], check=True, timeout=60)
    plain = tmp_path / "in" / name
    assert plain.read_bytes() == text
    done = subprocess.run([THREADLOG, "--db", str(db), "import", kind, str(plain)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# What each command's refusal says a file should have been.
FORMATS = {"claude-code": "a Claude Code session (JSON Lines text)", "pi": "a pi session (JSON Lines text)",
           "swe-agent": "a SWE-agent trajectory (JSON text)", "events": "a threadlog export (JSON Lines text)"}


def _threadlog_database(path: Path) -> None:
    with Store(path) as store:
        store.append_message(store.create_thread(title="mine"), "user", "hello")


def _sqlite_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('hello')")
    conn.close()


# A file that is no text, given where a session belongs: how it is made, and what the refusal
# calls it (before the format it is not).
NOT_TEXT: dict[str, tuple[Any, str]] = {
    "threadlog-database": (_threadlog_database, "a threadlog database, not "),
    "sqlite-database": (_sqlite_database, "a SQLite database, not "),
    "png": (lambda path: path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4), "a binary file (it holds NUL bytes), not "),
    "zeros": (lambda path: path.write_bytes(bytes(4096)), "a binary file (it holds NUL bytes), not "),
}


@pytest.mark.parametrize("given", list(NOT_TEXT), ids=list(NOT_TEXT))
@pytest.mark.parametrize(("kind", "flags"), RUNS, ids=[f"{kind}{'-skip-bad' if flags else ''}" for kind, flags in RUNS])
def test_a_database_or_binary_file_is_refused_saying_what_it_is(tmp_path: Path, kind: str, given: str, flags: list[str]) -> None:
    """`threadlog import pi threadlog.db` (the database named where the session belongs) was
    refused as `threadlog.db:1: not UTF-8 text (invalid start byte at byte 106); fix or delete
    that line`, and with --skip-bad, Claude Code's and pi's imports went through it line by line,
    dozens of lines named, and said they had imported it. It is refused as what it is, told from
    its first bytes, as a compressed file is: a threadlog database with how --db names it, a
    SQLite database, a binary file; with --skip-bad too, but SWE-agent's, which leaves out the
    file (named) as any it cannot read. The database and the file given are left as they were."""
    make, says = NOT_TEXT[given]
    path = tmp_path / "in" / "threadlog.db"
    path.parent.mkdir()
    make(path)
    content = path.read_bytes()
    db = _database(tmp_path)
    before = file_dump(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, *flags, str(path)])
    if kind == "swe-agent" and flags:  # left out whole, and named; nothing was imported
        assert result.exit_code == 1 and "malformed 1" in result.stdout, result.output
        said = next(line for line in result.stdout.splitlines() if line.startswith(f"skipped {path}:1: "))
    else:
        assert (result.exit_code, result.stdout) == (1, ""), result.output
        [said] = result.stderr.splitlines()
        assert said.startswith(f"error: {path}: ") and "fix or delete" not in said, said
    assert says + FORMATS[kind] in said and "UTF-8" not in said, said
    if given == "threadlog-database":
        assert f"name it with --db before `import` (threadlog --db {path} import ...)" in said, said
    assert file_dump(db) == before, "a refused import changed the database"
    assert path.read_bytes() == content


@pytest.mark.parametrize("kind", ["claude-code", "pi", "swe-agent"])
def test_skip_bad_treats_a_database_as_it_treats_a_compressed_file(tmp_path: Path, kind: str) -> None:
    """Named after a session, with --skip-bad (which writes each file as it is read): Claude
    Code's and pi's imports stop at a compressed file, the user's to decompress, keeping the
    session written before it and saying so; a database named by mistake was gone through a
    line at a time, its lines skipped, and the import reported success. Both now stop alike;
    SWE-agent's import leaves out either, named, as any file it cannot read."""
    name, text = SOURCES[kind](tmp_path)
    session = tmp_path / "in" / name
    session.parent.mkdir()
    session.write_bytes(text)
    _threadlog_database(tmp_path / "in" / "threadlog.db")
    (tmp_path / "in" / "backup.jsonl.gz").write_bytes(gzip.compress(text))
    outcomes = []
    for other, says in (("backup.jsonl.gz", "the file is gzip-compressed, not text"), ("threadlog.db", "a threadlog database, not")):
        given = tmp_path / "in" / other
        (tmp_path / other).mkdir()
        db = _database(tmp_path / other)
        with Store(db) as store:
            there = {event.event_id for event in store.read_all()}
        result = CliRunner().invoke(cli, ["--db", str(db), "import", kind, "--skip-bad", "--json", str(session), str(given)])
        if kind == "swe-agent":
            assert result.exit_code == 0, result.output
            [bad] = json.loads(result.stdout)["bad"]
            assert bad["file"] == str(given) and bad["why"].startswith(says), bad
        else:
            assert (result.exit_code, result.stdout) == (1, ""), result.output
            [said] = result.stderr.splitlines()
            assert said.startswith(f"error: {given}: {says}") and " before it were imported (" in said, said
        with Store(db) as store:
            outcomes.append((result.exit_code, [event.event_id for event in store.read_all() if event.event_id not in there]))
    assert outcomes[0] == outcomes[1] and len(outcomes[0][1]) > 2


@pytest.mark.parametrize("kind", ["claude-code", "pi", "swe-agent"])
def test_a_follower_given_a_database_names_it_and_follows_the_others(tmp_path: Path, kind: str) -> None:
    """As a compressed file, a database given to a follower is refused by name, once, and the
    sessions beside it are mirrored: it was "not UTF-8 text" at its first line."""
    name, text = SOURCES[kind](tmp_path)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / name).write_bytes(text)
    database = tmp_path / "threadlog.db"
    _threadlog_database(database)
    refused: list[str] = []
    polls = iter(range(5))
    with Store(tmp_path / "into.db") as store:
        on_refused = lambda _, error: refused.append(str(error))  # noqa: E731
        if kind == "claude-code":
            follow_claude_code(store, [sessions, database], interval=0.01, stop=lambda: next(polls, None) is None,
                               on_refused=on_refused)
        else:
            follow_files(store, kind, [sessions, database], interval=0.01, stop=lambda: next(polls, None) is None,  # type: ignore[arg-type]
                         on_refused=on_refused)
        assert store.all_threads() != []
    [said] = refused
    assert said.startswith(f"{database}: a threadlog database, not {FORMATS[kind]}: to import into it, name it with --db"), said
