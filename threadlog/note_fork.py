"""`fork_with_transcript`: a note fork whose transcript is on disk before the fork exists.

`Store.fork(thread, context="note", transcript=path)` only records `path` in the fork note:
the store writes no file. A model told to read the transcript there must find it, so this
writes the parent's transcript as of the fork point beside `path` (synced), makes the fork,
then renames the file into place: a refused fork leaves `path` as it was, and a failed write
forks nothing. `threadlog fork --context note --transcript PATH` is this call.
"""

from __future__ import annotations

import os
from typing import Any

from eventstore import InvalidEvent, Store
from projections import transcript
from projections.atomic import staged


def fork_with_transcript(store: Store, thread: str, path: str | os.PathLike[str], at: int | None = None, **options: Any) -> str:
    """Write `thread`'s transcript up to the fork point (`at`, default its head) to `path`
    atomically, and fork it there with `context="note"` naming `path` (made absolute);
    returns the fork's id.
    `options` are `Store.fork`'s (`retrieval`, `todos`, `metadata`, `unanswered`, ...)."""
    if options.get("context", "note") != "note":
        raise InvalidEvent("context", f"a fork with a transcript is a note fork (context='note'), not {options['context']!r}")
    options.pop("context", None)
    named = os.path.abspath(path)  # the note is read later, from anywhere: a relative path would name another file
    head = store.head(thread)
    stop = head if at is None else at
    if not 0 <= stop <= head:  # the fork refuses it, naming the range: nothing to write before that
        return store.fork(thread, at, context="note", transcript=named, **options)
    text = transcript(store, thread, stop=stop)
    with staged(path, [text.encode("utf-8")], "the transcript", keep=store.files):
        return store.fork(thread, at, context="note", transcript=named, **options)
