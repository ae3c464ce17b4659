"""A redaction that lands between two commits of the search index's catch-up, each in its own
process on one SQLite file, leaves no copy of the erased text and an index a rebuild agrees with.

One process appends messages, some holding a secret; a second catches the index up a hundred
events to a commit; a third redacts the secrets' events while it is mid-way: paused after its
first commit, paused before its last, and racing it freely. Once every process has closed its
store, as a user's would, neither the database file nor its -wal or -shm holds any secret in
any form (UTF-8, JSON-escaped, UTF-16, or as FTS5 keeps a word: folded to lower case without
diacritics, prefix-compressed), `threadlog verify` passes, no search finds one, and the index
holds exactly the documents `threadlog index --rebuild` makes. One secret is left unredacted:
it must be found in each of those places, so the checks are shown to see what they look for.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from procs import Worker
from threadlog import Store, search
from workers import secret_text

COUNT, EVERY, COMMIT = 4000, 250, 100  # 16 secrets, 40 commits
KEPT = "0"  # the secret left unredacted


def folded(text: str) -> str:
    """`text` as FTS5's unicode61 tokenizer (remove_diacritics 2) keeps its words: lower case, no accents."""
    return "".join(c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c))


def forms(n: int) -> list[bytes]:
    text = secret_text(n).removesuffix(" in a message")
    token = folded(text).split("☃")[0]
    return [text.encode(), json.dumps(text).strip('"').encode(), text.encode("utf-16-le"), text.encode("utf-16-be"),
            token[3:].encode()]  # what prefix compression leaves of its index term, at the least


def holding(db: Path, names: list[str]) -> list[str]:
    found = []
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        if path.exists():
            raw = path.read_bytes()
            found += [f"{path.name}: secret {name} as {form!r}" for name in names for form in forms(int(name)) if form in raw]
    return found


def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "threadlog", "--db", str(db), *args], capture_output=True, text=True,
                          timeout=60)


def documents(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute('SELECT docid, position, stream_id, "offset", kind, role, tool, text FROM search_docs '
                            "ORDER BY docid").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("timing", ["after the first commit", "before the last commit", "racing"])
def test_a_redaction_between_a_catch_ups_commits_leaves_no_copy_and_the_index_a_rebuild_makes(tmp_path: Path,
                                                                                               timing: str) -> None:
    db = tmp_path / "race.db"
    appender = Worker("secrets", str(db), str(COUNT), str(EVERY))
    appender.finish()
    at: dict[str, int] = appender.of("done")[0]["at"]
    names = sorted(at, key=int)
    erased = [name for name in names if name != KEPT]
    with Store(db) as store:
        store.checkpoint()
    assert {line.split(": secret ")[1].split(" as ")[0] for line in holding(db, names)} == set(names)

    pause = {"after the first commit": 1, "before the last commit": COUNT // COMMIT - 1, "racing": 0}[timing]
    redactor = Worker("redact_all", str(db), *(str(at[name]) for name in erased))
    assert redactor.ready.wait(30)
    indexer = Worker("catch_up", str(db), str(COMMIT), str(pause))
    indexer.wait_for(max(pause, 1), op="commit")
    redactor.tell()
    if pause:
        redactor.wait_for(1, op="done")
        indexer.tell()
    redactor.finish()
    indexer.finish()
    # The redactions landed mid-way: after a commit of the catch-up, and before its last one
    # (which indexed their `event.redacted` events too).
    assert indexer.of("done")[0]["read"] == COUNT + 1 + len(erased), indexer.lines[-3:]

    # Every process has closed its store: no copy of an erased secret is left in any file.
    assert holding(db, erased) == []
    kept = forms(int(KEPT))
    assert holding(db, names) == [f"race.db: secret {KEPT} as {form!r}" for form in (kept[0], kept[-1])]  # text and term

    verified = cli(db, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    with Store(db) as store:
        assert store.index_position() == list(store.read_all())[-1].position
        for name in names:
            word = folded(secret_text(int(name))).split("☃")[0]
            assert [hit.position for hit in search(store, word)] == ([at[name]] if name == KEPT else []), name
    caught_up = documents(db)
    rebuilt = cli(db, "index", "--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert documents(db) == caught_up
    assert holding(db, erased) == []
