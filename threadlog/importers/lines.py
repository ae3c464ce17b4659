"""Reading another tool's JSONL session file: one JSON object per line, numbered.

A file that is no text to read a line at a time (compressed, a SQLite database, UTF-16 or
UTF-32, binary) is refused whole, by name, before any line is read (`not_text`); a leading
UTF-8 byte order mark is passed over. A file empty or of blank lines only holds no session
(`NoSession`). A malformed line (bad UTF-8, not JSON, JSON nested deeper than Python can
parse, not an object) is an error naming the file and the line, or, when the caller skips bad
lines, a reported skip. A last line without its newline may be half-written by a tool still
running: `partial_tail=True` leaves it unread (and unreported) so a later read picks it up whole.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eventstore import InvalidEvent, StoreError
from eventstore.events import MAX_DEPTH
from eventstore.ids import CONTROL_CHARACTER, unprintable
from eventstore.sqlite import APPLICATION_ID
from eventstore.store import special_file

from .origin import elsewhere, opening_of


class BadLine(StoreError):
    """A session file line that cannot be imported."""

    advice = "fix or delete that line, or skip bad lines (--skip-bad)"

    def __init__(self, file: str, line: int, why: str, *, skippable: bool = True) -> None:
        self.file, self.line, self.why = file, line, why
        # Not `skippable`: what the line starts (a thread, a fork) cannot be imported without it.
        super().__init__(f"{file}:{line}: {why}; {self.advice if skippable else 'fix or delete that line'}")


class NoSession(BadLine):
    """A file that holds no session at all (empty, blank lines only, a pi file without its
    header): refused, or skipped whole and named where bad lines are skipped. "Fix or delete
    that line" was advice for a damaged line, of a file no line of which was ever a session's."""

    advice = "leave that file out, or skip such files (--skip-bad)"


def is_text(value: str) -> bool:
    """Whether UTF-8 can hold `value`: `json` reads a lone surrogate (`"\\ud800"`) into a str
    that no database can store, and a Linux file name's undecodable bytes become them too."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def source_paths(paths: Any) -> list[Path]:
    """The files or directories an import reads, refused unless `paths` is a list of them: one
    path given as a string was read a character at a time (`"/home/me/sessions"` began with
    `/`, and the whole file system was searched for session files)."""
    if isinstance(paths, (str, bytes, os.PathLike)) or not isinstance(paths, Iterable):
        raise InvalidEvent("paths", f"must be a list of paths, not {type(paths).__name__}; pass [path] for one")
    items = list(paths)
    for i, item in enumerate(items):
        if not isinstance(item, (str, os.PathLike)):
            raise InvalidEvent(f"paths[{i}]", f"must be a path (text), not {type(item).__name__}")
    return [_home(Path(item)) for item in items]


def _home(path: Path) -> Path:
    """`path` with a leading `~` expanded to the home directory, as a shell expands it before a
    command sees it: `import_claude_code(store, ["~/.claude/projects"])` was refused, "no such
    file or directory", while the directory was there. A file or directory whose name does
    start with `~` and exists is taken as named."""
    return path.expanduser() if str(path).startswith("~") and not os.path.lexists(path) else path


def existing_paths(paths: Any, asks: str, *, directories: bool = True, pipes: bool = False) -> list[Path]:
    """`source_paths`, each refused unless it names a file or (with `directories`) a directory:
    a missing one raised FileNotFoundError or NotADirectoryError, and a directory where a file
    belongs IsADirectoryError, from deep in the import. A device or socket is refused too
    (/dev/zero was read until memory ran out; a socket said "No such device or address"), and
    a pipe unless `pipes` (a reader that takes each file once, as it comes): the importers
    read a file to check it and again to write it, and a named pipe no program wrote to was
    waited on forever, and two (`<(cat a) <(cat b)`) were imported as empty, with success
    reported. `asks` says what to name instead."""
    sources = source_paths(paths)
    for index, path in enumerate(sources):
        if not path.exists():
            raise InvalidEvent(f"paths[{index}]", f"no such file or directory: {path}; {asks}")
        special = special_file(str(path))
        if special == "a pipe" and not pipes:
            raise InvalidEvent(f"paths[{index}]", f"{path} is a pipe, not a file: an import reads its files more than "
                               "once, and a pipe gives its text once; save it to a file and name that")
        if special is not None and special != "a pipe":
            raise InvalidEvent(f"paths[{index}]", f"{path} is {special}, not a file; {asks}")
        if not directories and path.is_dir():
            raise InvalidEvent(f"paths[{index}]", f"{path} is a directory; {asks}")
    return sources


def source_files(paths: Any, pattern: str, asks: str, unusable: Callable[[StoreError], None] | None = None,
                 noun: str = "sessions", finished: bool = False) -> list[Path]:
    """The files an import reads: each of `paths` that is a file, and those matching `pattern`
    in or below each that is a directory (`files_below`, a refusal there naming what the files
    are: `noun`), each refused unless its name is text (`text_name`), each once (`distinct`);
    a path naming nothing is refused by `existing_paths`, saying `asks`.
    With `unusable` (a follower, which must go on), a directory it cannot read and a name that
    is not text are passed to it instead and left out, and a path gone meanwhile is passed over.
    `finished`: as `files_below`."""
    files: list[Path] = []
    for path in source_paths(paths) if unusable is not None else existing_paths(paths, asks):
        if path.is_dir():
            files.extend(files_below(path, pattern, unusable, noun, finished))
        elif path.exists():
            files.append(path)
    return [path for path in distinct(files) if usable_name(path, unusable)]


def usable_name(path: Path, unusable: Callable[[StoreError], None] | None, ids: bool = False) -> bool:
    """Whether `path`'s name makes ids (`text_name`); refused, or passed to `unusable`."""
    try:
        text_name(path, ids)
    except StoreError as refusal:
        if unusable is None:
            raise
        unusable(refusal)
        return False
    return True


def distinct(files: Iterable[Path]) -> list[Path]:
    """Each file once, as first named: one named twice (a directory and a file in it, or a
    relative and an absolute path) was read twice, and the import counted its threads and
    events twice."""
    first: dict[str, Path] = {}
    for path in files:
        first.setdefault(real_path(path), path)
    return list(first.values())


def real_path(path: Path) -> str:
    """The file `path` names, as the path an import records for it (`meta.source.file`, a
    thread's `metadata.file`) and tells one file by: absolute, each symbolic link on the way
    resolved. A relative path named a file only from the directory it was given in, which
    nothing records; a path through a link (`current/` pointing at the latest run) names
    whatever the link points at by the time it is read; and `os.path.abspath` takes `..` out
    by its text, so `link/../x` became a file beside the link, not the one read."""
    return os.path.realpath(path)


def files_below(directory: Path, pattern: str, unreadable: Callable[[StoreError], None] | None = None,
                noun: str = "sessions", finished: bool = False) -> list[Path]:
    """The files matching `pattern` (`noun`: what they are) in or below `directory`, sorted. A
    directory there that cannot be read is refused by name: `Path.rglob` searched past it, and
    the sessions in it were left out of an import that reported success. With `unreadable`, the refusal is
    passed to it and the walk goes on past that directory. One removed while it is walked
    (another tool cleaning up) held nothing to import, and is passed over, as is an empty file
    (one just changed only if `finished` says no tool writes these files: see `_holds_bytes`)."""
    def refuse(error: OSError) -> None:
        if isinstance(error, FileNotFoundError):
            return
        refusal = StoreError(f"cannot read the directory {error.filename} ({error.strerror}): the {noun} in it would be "
                             "left out; make it readable, or name the directories and files to import")
        if unreadable is None:
            raise refusal
        unreadable(refusal)

    # One walk, not linked directories (as `rglob`, which searched past what it could not read).
    found: list[Path] = []
    for folder, _, names in os.walk(directory, onerror=refuse):
        try:
            found.extend(path for path in (Path(folder) / name for name in names if fnmatch.fnmatchcase(name, pattern))
                         if _holds_bytes(path, finished))
        except OSError as error:  # listed but not entered (no search permission): its files cannot be read
            refuse(OSError(error.errno, error.strerror, folder))
    return sorted(found)


def _holds_bytes(path: Path, finished: bool) -> bool:
    """Whether `path` is a file to import: not one left empty, unchanged for `LIVE_SECONDS`. A
    tool creates its session file before writing its first line, and may leave it so: found in
    a directory it holds no session and is left out (named alone it is refused as empty:
    `nothing_in`); one just changed may be written yet, and waits, named, unless `finished` (the
    files are copies, made now). One removed meanwhile holds nothing."""
    try:
        if not path.is_file():
            return False
        found = path.stat()
    except FileNotFoundError:
        return False
    return found.st_size > 0 or (not finished and abs(time.time() - found.st_mtime) < LIVE_SECONDS)


def text_name(path: Path, ids: bool = False) -> Path:
    """`path`, refused unless its name, and its real path (`real_path`), are UTF-8 text: thread
    ids, event ids and each event's source are made from them, and a Linux file name may hold
    bytes no text decodes to (a directory's too, the one a relative path is given in). With
    `ids` (the importer makes ids from the file's own name, `path.stem`), a control character
    there is refused too, once, by name: else every line of the file is refused for its ids."""
    for name in (str(path), real_path(path)):
        if not is_text(name):
            shown = name.encode("utf-8", "backslashreplace").decode()  # its byte as `\udcff`, as every command prints it
            raise StoreError(f"{shown}: its name is not UTF-8 text, which the ids made from it and the "
                             "path an import records must be; rename it to import it") from None
    bad = CONTROL_CHARACTER.search(path.stem) if ids else None
    if bad is not None:
        raise StoreError(f"{path}: its name holds {unprintable(bad)}; rename it to import it "
                         "(ids are made from it, and must be printable text)")
    return path


# The encodings other than UTF-8 that `json.detect_encoding` tells from a file's first four bytes
# (a byte order mark, or the NULs of ASCII text written two or four bytes a character), as iconv
# names them.
_WIDE = {"utf-16": "UTF-16", "utf-16-le": "UTF-16LE", "utf-16-be": "UTF-16BE",
         "utf-32": "UTF-32", "utf-32-le": "UTF-32LE", "utf-32-be": "UTF-32BE"}


# Compressed files, by the bytes they start with: the format, the command that prints one
# decompressed, and the suffix its name usually ends with.
_COMPRESSED = ((b"\x1f\x8b", "gzip", "zcat", ".gz"), (b"\xfd7zXZ\x00", "xz", "xzcat", ".xz"),
               (b"\x28\xb5\x2f\xfd", "zstd", "zstdcat", ".zst"), *((b"BZh" + bytes([d]), "bzip2", "bzcat", ".bz2") for d in b"123456789"))

# What every SQLite database file starts with; a threadlog database holds `APPLICATION_ID` at
# byte 68 of it (once written back from its write-ahead log: a new database open in another
# process may not yet, and is named a SQLite database alone).
_SQLITE = b"SQLite format 3\x00"
_THREADLOG = APPLICATION_ID.to_bytes(4, "big")

# A session with a file changed this recently is taken as still being written: what it does
# not show complete waits for a later import (`import_claude_code`'s `live_within`, and
# `follow_claude_code`, which reads a session again once it has been quiet this long).
LIVE_SECONDS = 600.0

# How many bytes of a file `not_text` looks at for a NUL byte, as git does to tell a binary file.
HEAD_BYTES = 8000


def not_text(path: Path, head: bytes, kind: str) -> str | None:
    """Why a file starting with `head` (its first `HEAD_BYTES`, or more) is no text to read as
    `kind` ("a pi session (JSON Lines text)") a line at a time, and what to do instead; None when
    it may be. Read line by line, each was refused as its first bad line, "not UTF-8 text ...; fix
    or delete that line", advice for a damaged line of a file that is whole:
    - compressed (a backup kept as `.jsonl.gz`): how to decompress it;
    - a SQLite database (a threadlog database, given where the session belongs: how --db names it);
    - UTF-16 or UTF-32 text (what Windows PowerShell 5's `>` writes): how to convert it in place
      (its name may make ids); its first line was taken alone (a thread of one message with
      --skip-bad) and its second refused;
    - binary: a NUL byte in its first `HEAD_BYTES`, no line of JSON before it (a session a crash
      left zeros in after its first line is a file of lines: its bad lines are refused as such)."""
    for magic, compression, tool, suffix in _COMPRESSED:
        if head.startswith(magic):
            name = shlex.quote(str(path))
            if str(path).endswith(suffix):
                plain = shlex.quote(str(path)[:-len(suffix)])
                return f"the file is {compression}-compressed, not text; decompress it and import that: {tool} {name} > {plain}"
            copy = shlex.quote(f"{path}.plain")
            return f"the file is {compression}-compressed, not text; decompress it in place: {tool} {name} > {copy} && mv {copy} {name}"
    if head.startswith(_SQLITE):
        if head[68:72] != _THREADLOG:
            return f"a SQLite database, not {kind}"
        return (f"a threadlog database, not {kind}: to import into it, name it with --db before `import` "
                f"(threadlog --db {shlex.quote(str(path))} import ...), and the files to import after the format")
    encoding = _WIDE.get(json.detect_encoding(head[:4]))
    # `detect_encoding` calls any text opening with two NULs UTF-32BE: one of NULs alone (a
    # device's zeros, a sparse file) is no text at all, binary.
    if encoding is not None and not (encoding == "UTF-32BE" and not head[3:4].strip(b"\0")):
        shown = "starts with its byte order mark" if encoding in ("UTF-16", "UTF-32") else "holds NUL bytes between its characters"
        name, copy = shlex.quote(str(path)), shlex.quote(f"{path}.utf8")
        return (f"the file is {encoding} text, not UTF-8 (it {shown}, as Windows PowerShell 5's `>` writes); convert it in "
                f"place: iconv -f {encoding} -t UTF-8 {name} > {copy} && mv {copy} {name}")
    if b"\0" in head[:HEAD_BYTES] and not _json_first(head[:HEAD_BYTES]):
        return f"a binary file (it holds NUL bytes), not {kind}"
    return None


def _json_first(head: bytes) -> bool:
    """Whether the first line of `head` that is not blank is JSON (whole within `head`)."""
    first = next((line for line in head.split(b"\n") if line.strip()), b"")
    try:
        json.loads(first)  # of bytes: it passes over a UTF-8 byte order mark, as `read_lines`
    except ValueError:  # UnicodeDecodeError too
        return False
    except RecursionError:  # nested too deeply to read, but text: refused as that line
        return True
    return True


def nothing_in(raw: bytes, kind: str) -> str | None:
    """Why a file holding `raw` holds no `kind` ("a pi session (JSON Lines text)") at all: it is
    empty, or holds blank lines alone; None when it holds more. (`isspace` stops at the first
    byte that is not blank, and copies nothing: `strip` copied the whole file.)"""
    if raw and not raw.isspace():
        return None
    return f"{'an empty file' if not raw else 'a file of blank lines only'}, not {kind}"


class WholeFile(InvalidEvent):
    """A source file refused whole for what it is (compressed, a database, binary, empty), by
    name. `advice` is what an importer that skips bad files adds: its refusal of a damaged file,
    "fix or delete that file", read oddly after "decompress it in place: ..."."""

    def __init__(self, path: Path, why: str, advice: str = "or skip such files (--skip-bad)") -> None:
        super().__init__(str(path), why)
        self.advice = advice


class Unreadable(WholeFile):
    """A source file the import may not read, named."""

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(path, f"cannot read it ({error.strerror}): make it readable")


@dataclass(frozen=True, slots=True)
class Line:
    number: int  # 1-based
    record: dict[str, Any]


class Seen:
    """How many bytes each file held when an import first read it: a later read of it in the
    same import (the writing pass after the check) reads as many, so a file that grows
    meanwhile (a session still being written) is written as it was checked, and the next
    import reads the rest. `recent` keeps what the first read decided of a file's age (an
    importer that reads a recently changed file as one still being written), for the same reason:
    a file that turned ten minutes old between the check and the write was planned otherwise.
    `finished` says no file is being written (files just copied): none reads as recent."""

    def __init__(self, finished: bool = False) -> None:
        self.sizes: dict[Path, int] = {}
        self.recent: dict[Path, bool] = {}
        self.finished = finished

    def changed_within(self, path: Path, seconds: float) -> bool:
        """Whether `path` changed in the last `seconds`, as this import first found it. A time
        further ahead of the clock than that (a copy made where the clock ran ahead, `touch -d`)
        is no sign of a writer now: taken for recent, the file would wait until then."""
        recent = self.recent.get(path)
        if recent is None:
            recent = self.recent[path] = not self.finished and abs(time.time() - path.stat().st_mtime) < seconds
        return recent

    def read(self, path: Path, kind: str) -> bytes:
        """The file's bytes; one it may not read (its mode) is refused by name as `Unreadable`:
        `error: Permission denied` stopped `swe-agent --skip-bad`, which skips a file that
        cannot be imported, and said nothing of the files an import had written before it.
        One that is no text to read as `kind` ("a pi session (JSON Lines text)": compressed, a
        database, UTF-16, binary) is refused by name too (`not_text`)."""
        size = self.sizes.get(path)
        try:
            if size is None:
                raw = path.read_bytes()
                self.sizes[path] = len(raw)
            else:
                with path.open("rb") as handle:
                    raw = handle.read(size)
        except FileNotFoundError:  # removed since it was found: a follower passes over it
            raise
        except OSError as error:
            raise Unreadable(path, error) from None
        why = not_text(path, raw, kind)
        if why is not None:
            raise WholeFile(path, why)
        return raw


_DIGITS = re.compile(r"value has (\d+) digits")  # in Python's refusal of a number too long to read


def not_json(error: ValueError) -> str:
    """What is wrong with text `json.loads` refused: a number too long for Python to read is
    said so, not with the call that lifts Python's limit, which no one importing can make."""
    found = None if isinstance(error, json.JSONDecodeError) else _DIGITS.search(str(error))
    if found is None:
        return f"not JSON ({error})"
    return f"not JSON (a number of {found[1]} digits; a number may have at most {sys.get_int_max_str_digits()})"


def read_lines(
    path: Path,
    on_bad: Callable[[BadLine], None],
    partial_tail: bool = False,
    seen: Seen | None = None,
    *,
    kind: str,
) -> tuple[list[Line], int]:
    """The file's records, and the byte offset just past the last line read.

    `on_bad` gets each malformed line (it raises to refuse the file, or records a skip), and
    a file empty or of blank lines only, as `NoSession`. `kind` is what the file should be ("a
    pi session (JSON Lines text)"), as the refusal of one that is no text (`not_text`) or holds
    no session says. With `partial_tail`, an empty or blank file is one a tool has just created,
    its first line to come: nothing of it is read (the offset is 0). With `seen`, a file read
    before reads as many bytes as then (`Seen`).
    """
    raw = (seen or Seen()).read(path, kind)
    name = str(path)
    lines: list[Line] = []
    end = len(raw)
    if partial_tail and raw and not raw.endswith(b"\n"):
        end = raw.rfind(b"\n") + 1  # leave the half-written tail for the next read
    empty = nothing_in(raw[:end], kind)
    if empty is not None:
        if partial_tail:
            return [], 0
        on_bad(NoSession(name, 1, empty))
        return [], end
    loads = json.loads  # of bytes: it passes over a UTF-8 byte order mark starting the first line
    for number, chunk in enumerate(raw[:end].split(b"\n"), 1):
        if not chunk.strip():
            continue
        try:
            record = loads(chunk)
        except UnicodeDecodeError as error:
            on_bad(BadLine(name, number, f"not UTF-8 text ({error.reason} at byte {error.start})"))
            continue
        except ValueError as error:
            if not lines and opening_of(raw[:HEAD_BYTES]) == "swe-agent":
                # One JSON object over many lines: each line refused as "not JSON", with advice
                # to fix a line of a file that was never this format's.
                on_bad(NoSession(name, number, elsewhere("swe-agent", kind)))
                return [], end
            on_bad(BadLine(name, number, not_json(error)))
            continue
        except RecursionError:
            on_bad(BadLine(name, number, f"JSON nested too deeply to read (an event holds at most {MAX_DEPTH} levels)"))
            continue
        if not isinstance(record, dict):
            on_bad(BadLine(name, number, f"a line must hold a JSON object, not {type(record).__name__}"))
            continue
        lines.append(Line(number, record))
    return lines, end
