"""`fork_with_transcript`: a note fork whose transcript is on disk before the fork exists.

`Store.fork(thread, context="note", transcript=path)` only records `path` in the fork note:
the store writes no file. A model told to read the transcript there must find it, so this
writes the parent's transcript as of the fork point beside `path` (synced), makes the fork,
then renames the file into place: a refused fork leaves `path` as it was, and a failed write
forks nothing. `threadlog fork --context note --transcript PATH` is this call. A device or a
pipe (`/dev/null`, `/dev/stdout`) is refused: the model could read nothing there later. So is
a file holding another thread's transcript: a note fork of that thread may name it.

A redaction does not reach such a file: `transcripts_holding` names the ones written from a
history that held the erased event (`threadlog redact` lists them), to rewrite or delete.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from eventstore import InvalidEvent, RecordedEvent, Store, ThreadInfo
from eventstore.cuts import is_note
from eventstore.errors import shown
from eventstore.ids import check_id
from eventstore.ranges import check_index, is_index
from eventstore.store import special_file
from projections import transcript
from projections.transcript import WRITTEN_TYPES
from projections.atomic import check_path, staged


def fork_with_transcript(store: Store, thread: str, path: str | os.PathLike[str], at: int | None = None, **options: Any) -> str:
    """Write `thread`'s transcript up to the fork point (`at`, default its head) to `path`
    atomically, and fork it there with `context="note"` naming `path` (made absolute);
    returns the fork's id.
    `options` are `Store.fork`'s (`retrieval`, `todos`, `metadata`, `unanswered`, ...)."""
    if options.get("context", "note") != "note":
        raise InvalidEvent("context", f"a fork with a transcript is a note fork (context='note'), not {options['context']!r}")
    options.pop("context", None)
    check_path(path, "the transcript")
    special = special_file(os.fspath(path))
    if special is not None:  # written to as `>` would, it would keep nothing (or print it amid the fork's id)
        raise InvalidEvent("path", f"{shown(os.fspath(path))} is {special}: the fork note tells the model the transcript "
                                   "is saved there, to read later, and it keeps nothing to read; name a file "
                                   "(nothing was written)")
    named = os.path.abspath(path)  # the note is read later, from anywhere: a relative path would name another file
    head = store.head(thread)
    stop = head if at is None else at
    if not is_index(stop, 0, head):  # the fork refuses it, naming the range or type: nothing to write before that
        return store.fork(thread, at, context="note", transcript=named, **options)
    made = store.event(check_id("meta.event_id", options["event_id"])) if at is None and "event_id" in options else None
    if made is not None and made.type == "thread.forked" and made.data.get("parent_id") == thread:
        stop = made.offset  # a retry: the transcript of the fork it made
    text = transcript(store, thread, stop=stop)
    refuse_another_threads(path, text)
    with staged(path, [text.encode("utf-8")], "the transcript", keep=store.files):
        # At `stop`, not at the head as it is now: another writer may have appended to the
        # parent since the transcript was read, and the file would lack what the fork holds.
        return store.fork(thread, stop, context="note", transcript=named, **options)


# A transcript's first line names its thread; an id is at most 200 characters, written escaped.
_HEADER = "# Transcript of thread "
_LONGEST_HEADER = 4096


def refuse_another_threads(path: str | os.PathLike[str], text: str) -> None:
    """Refuse to write `text`, a transcript, over the transcript of another thread at `path`: a
    note fork of that thread names the file to its model, which would read this thread's
    conversation as its own. One of the same thread (a later fork of it: agentty keeps one file
    per parent) is written over."""
    try:
        with open(path, "rb") as file:
            first = file.readline(_LONGEST_HEADER).decode("utf-8").rstrip("\n")
    except (OSError, UnicodeDecodeError):  # nothing there, or no transcript (a write that fails says why)
        return
    if first.startswith(_HEADER) and first != text.split("\n", 1)[0]:
        raise InvalidEvent("path", f"{shown(os.fspath(path))} holds the transcript of another thread "
                                   f"({shown(first.removeprefix(_HEADER))}), which a note fork of it may name to its model; "
                                   "written over, that model would read this thread's conversation as its own. Name "
                                   "another file, or delete that one first (nothing was written)")


def fork_options(store: Store, info: ThreadInfo) -> dict[str, Any]:
    """The options `info`'s own fork event records (`context`, `transcript`, ...): none for a
    root thread, or for a fork whose event was redacted."""
    forked = _fork_event(store, info)
    return dict(forked.data.get("options") or {}) if forked is not None and forked.type == "thread.forked" else {}


def is_note_fork(store: Store, thread: str) -> bool:
    """Whether `thread` is a note fork (`context="note"`), read from its own fork event."""
    forked = _fork_event(store, store.thread(thread))
    return forked is not None and is_note(forked.type, forked.data)


def _fork_event(store: Store, info: ThreadInfo) -> RecordedEvent | None:
    """The event at `info`'s fork point, its own first: none for a root thread."""
    return None if info.parent_offset is None else store.event_at(info.id, info.parent_offset)


class NoteTranscript(NamedTuple):
    """A note fork's transcript file, and how it was written: `transcript(store, parent, stop=at)`."""

    fork: str
    path: str
    parent: str
    at: int


def transcripts_holding(store: Store, position: int) -> list[NoteTranscript]:
    """The note forks whose transcript file was written from a history holding the event at
    `position` (forked after it, in its thread or a fork of it), in creation order. After the
    event is redacted each file still holds its text: rewrite it (`threadlog transcript PARENT
    --stop AT -o PATH`, which now writes `[redacted]`) or delete it. None for an event of a
    type no transcript writes (a title, an interrupt's question, metadata, todos)."""
    check_index("position", position, 1, what="a position")
    event = next(store.read_all(after=position - 1, limit=1), None)
    if event is None or event.position != position or event.type not in WRITTEN_TYPES:
        return []
    holding = {event.stream_id}  # the streams whose history holds the event
    found = []
    for info in store.subtree(event.stream_id)[1:]:  # parents before their forks
        if info.parent_id not in holding or info.parent_offset is None or info.parent_offset <= event.offset:
            continue
        holding.add(info.id)
        options = fork_options(store, info)
        if options.get("context") == "note" and isinstance(options.get("transcript"), str):
            found.append(NoteTranscript(info.id, options["transcript"], info.parent_id, info.parent_offset))
    return found
