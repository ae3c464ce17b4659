"""Every importer and `import events` given a file in another encoding than UTF-8: one in
UTF-16 or UTF-32 (what Windows PowerShell 5's `>` writes) is refused by name, saying how to
convert it, with nothing written, and so is a compressed one, saying how to decompress it; a
leading UTF-8 byte order mark (a Windows editor's) is read as any UTF-8 file."""

from __future__ import annotations

import bz2
import codecs
import gzip
import lzma
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import Store, export_all
from threadlog.cli import cli
from threadlog.export import dump_lines
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
