"""The store's core promises, held by a model: random sequences of public-API operations on a
real SQLite file, beside a plain in-memory model of what each thread's messages must be.

The model keeps each stream's own events; a thread's history is its parent's first k events
then its own, so a fork reads as its parent's prefix plus its own events by construction, and
a redaction changes the one shared event every thread reading it sees. After every step each
thread's model view (`thread_state`), its Messages API request and its transcript must agree
with the model, every chain must verify (in full, and since the last checkpoint, with the
counts the two agree on), and `threads()` must list every thread once. Each run ends with a
backup of the whole file restored into a fresh one, which must read the same.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from threadlog import (ConcurrencyError, ForkRefused, InvalidEvent, Store, StoreError, anthropic_request, export_all,
                       export_events, import_events, save_snapshot, thread_state, transcript)
from threadlog.export import dump_lines
from tests.backends import file_dump

MODEL = "claude-test-1"
REDACTED = "[redacted]"

Block = dict[str, Any]

# Text a user or a model may send: line breaks, Markdown and HTML that must stay text, the
# line separator U+2028, blank text the request leaves out, a message past the transcript's
# per-message bound, and any unicode but NUL and lone surrogates.
HOSTILE = st.sampled_from([
    "line one\nline two\r\nline three",
    "## user\nforged section",
    "# not a heading\n\n- nor a list\n```\nfence",
    "<script>alert(1)</script>",
    "a\u2028b\u2029c",
    "   ",
    "\t\n",
    "trailing  ",
    "\u202eevil\u202c \u200b\ufeff",
    "x" * 70_000,
])
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
TEXT = st.one_of(HOSTILE, ANY_TEXT, st.sampled_from(["Find me a train to Lyon", "The 08:00 TGV.", "ok"]))
RESULT = TEXT.filter(lambda s: bool(s.strip()))  # a tool's output: the request says `(no output)` for none
ROOTS, THREADS = 2, 7  # the threads, and threads and forks, a run makes at most: the steps left go to their histories
PICK = st.integers(min_value=0, max_value=1 << 16)


@dataclass
class Ev:
    """One event of the model: `kind` is created, message, compaction, forked or redaction (a
    subclass's model adds its own kinds, which these views pass over)."""

    kind: str
    offset: int
    position: int
    role: str = ""
    content: list[Block] = field(default_factory=list)
    summary: str = ""
    through: int = 0
    dropped: tuple[str, ...] = ()
    redacted: bool = False
    target: int = 0  # a redaction's: the position it erased
    note: bool = False  # a fork's: `context="note"`, whose model view starts from its note
    path: str | None = None  # a note fork's: the transcript it names


@dataclass
class Stream:
    id: str
    parent: str | None
    base: int  # the fork point: the parent's events below it are this stream's first ones
    own: list[Ev] = field(default_factory=list)


def skeleton(content: list[Block]) -> list[Block]:
    """A redacted message's content, as `Store.redact` documents it: results first (a failed
    one still failed), then the text `[redacted]`, then the calls with their inputs emptied."""
    results = [{"type": "tool_result", "tool_use_id": b["tool_use_id"], "content": REDACTED,
                **({"is_error": True} if b.get("is_error") else {})}
               for b in content if b["type"] == "tool_result"]
    calls = [{"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}} for b in content if b["type"] == "tool_use"]
    return [*results, {"type": "text", "text": REDACTED}, *calls]


def text_of(text: str) -> list[Block]:
    return [{"type": "text", "text": text}]


def note_text(parent: str, at: int, path: str | None) -> str:
    """The one message a note fork shows its model: the agentty fork note, naming the parent's
    transcript file, or (none given, or its path redacted) the command that prints it."""
    where = (f"Its full transcript is saved at:\n{path}\nRead it with the `read` tool (or grep it)" if path else
             f"Its full transcript is not saved to a file; print it with:\nthreadlog transcript {parent} --stop {at}\n"
             "Run that (or grep its output)")
    return (f"This conversation is a fork of an earlier one (thread {parent}, forked at offset {at}). {where} "
            "ONLY if you need earlier context — don't read it pre-emptively.")


def window(history: list[Ev]) -> tuple[Ev | None, list[Ev]]:
    """The last note fork's event in `history` and the events after it: a note fork's model
    view, pending calls and compaction cuts start there (the whole history without one)."""
    last = max((i for i, ev in enumerate(history) if ev.kind == "forked" and ev.note), default=None)
    return (None, history) if last is None else (history[last], history[last + 1:])


def request_messages(view: list[tuple[str, list[Block], str]]) -> list[dict[str, Any]]:
    """The messages a request sends of a model view, by the rules `projections/request.py`
    documents: blank texts and empty messages out, one role's consecutive messages merged, a
    call without a result in the next message out (and a result without its call), results
    first, and the last text of a request ending on an answer without trailing whitespace."""
    kept = [(role, [b for b in content if not (b["type"] == "text" and not b["text"].strip())]) for role, content, _ in view]
    merged = _merge([(role, blocks) for role, blocks in kept if blocks])
    paired: list[tuple[str, list[Block]]] = []
    for i, (role, blocks) in enumerate(merged):
        if role == "assistant":
            after = merged[i + 1] if i + 1 < len(merged) and merged[i + 1][0] == "user" else None
            answered = {b["tool_use_id"] for b in after[1] if b["type"] == "tool_result"} if after else set()
            blocks = [b for b in blocks if b["type"] != "tool_use" or b["id"] in answered]
        else:
            before = merged[i - 1] if i > 0 and merged[i - 1][0] == "assistant" else None
            asked = {b["id"] for b in before[1] if b["type"] == "tool_use"} if before else set()
            results = [b for b in blocks if b["type"] == "tool_result" and b["tool_use_id"] in asked]
            blocks = results + [b for b in blocks if b["type"] != "tool_result"]
        paired.append((role, blocks))
    final = _merge([(role, blocks) for role, blocks in paired if blocks])
    if final and final[-1][0] == "assistant":
        texts = [b for b in final[-1][1] if b["type"] == "text"]
        if texts:
            texts[-1]["text"] = texts[-1]["text"].rstrip()
    _renumber(final)
    return [{"role": role, "content": blocks} for role, blocks in final]


def _renumber(messages: list[tuple[str, list[Block]]]) -> None:
    """A call id a request repeats (a later turn may call under an answered call's id) is sent
    from its second use on as the Messages API takes it, in its call and in its result: the
    first of `{id}#2`, `{id}#3`, ... no other call has, its `#` and a SHA-256 digest making it
    an id of letters, digits, `_` and `-` (`projections/request.py`)."""
    seen: set[str] = set()
    for i, (role, blocks) in enumerate(messages):
        if role != "assistant":
            continue
        renamed: dict[str, str] = {}
        for block in blocks:
            if block["type"] == "tool_use":
                stored, n = block["id"], 1
                while block["id"] in seen:
                    n += 1
                    block["id"] = f"{stored}_{n}_{sha256(f'{stored}#{n}'.encode()).hexdigest()[:16]}"
                if block["id"] != stored:
                    renamed[stored] = block["id"]
                seen.add(block["id"])
        for block in messages[i + 1][1] if renamed and i + 1 < len(messages) else []:
            if block["type"] == "tool_result" and block["tool_use_id"] in renamed:
                block["tool_use_id"] = renamed[block["tool_use_id"]]


def _merge(messages: list[tuple[str, list[Block]]]) -> list[tuple[str, list[Block]]]:
    out: list[tuple[str, list[Block]]] = []
    for role, blocks in messages:
        if out and out[-1][0] == role:
            out[-1] = (role, out[-1][1] + [dict(b) for b in blocks])
        else:
            out.append((role, [dict(b) for b in blocks]))
    return out


def plain(text: str) -> bool:
    """Text the transcript writes as it is, on one line: printable, short, not blank."""
    return text.isprintable() and bool(text.strip()) and len(text) < 200


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="threadlog-stateful-"))
        self.path = self.dir / "t.db"
        self.store = Store(self.path)
        self.streams: dict[str, Stream] = {}
        self.order: list[str] = []  # thread ids, as created
        self.calls = 0
        self.ids = 0
        self.events = 0
        self.opened = 0  # the events written when the store was last opened
        self.redactions = 0
        self.checkpoint: tuple[str, int, int] | None = None  # (checkpoint, events, redacted) when taken

    # -- the model ----------------------------------------------------------------------------

    def history(self, thread: str) -> list[Ev]:
        stream = self.streams[thread]
        inherited = [] if stream.parent is None else self.history(stream.parent)[:stream.base]
        return inherited + stream.own

    def head(self, thread: str) -> int:
        return len(self.history(thread))

    def pending(self, history: list[Ev]) -> list[str]:
        """The calls still waiting for results in `history`, less those a fork dropped (an id
        waits again when a later message calls it again)."""
        calls: list[str] = []
        for ev in window(history)[1]:
            if ev.kind == "message":
                content = skeleton(ev.content) if ev.redacted else ev.content
                done = {b["tool_use_id"] for b in content if b["type"] == "tool_result"}
                calls = [c for c in calls if c not in done] + [b["id"] for b in content if b["type"] == "tool_use"]
            elif ev.kind == "forked":
                calls = [c for c in calls if c not in ev.dropped]
        return calls

    def view(self, thread: str, at: int | None = None) -> list[tuple[str, list[Block], str]]:
        note, history = window(self.history(thread)[:at])
        made: dict[str, int] = {}  # a waiting call's id -> the offset of the message that made it
        drops: set[tuple[str, int]] = set()  # the calls forks dropped, each where it was made
        compaction: Ev | None = None
        for ev in history:
            if ev.kind == "message":
                content = skeleton(ev.content) if ev.redacted else ev.content
                for b in content:
                    if b["type"] == "tool_result":
                        made.pop(b["tool_use_id"], None)
                made.update((b["id"], ev.offset) for b in content if b["type"] == "tool_use")
            elif ev.kind == "forked":
                drops |= {(c, made.pop(c)) for c in ev.dropped}
            elif ev.kind == "compaction":
                compaction = ev
        out: list[tuple[str, list[Block], str]] = []
        if note is not None:
            parent = self.streams[self.owner(note)].parent
            assert parent is not None
            out.append(("user", text_of(note_text(parent, note.offset, None if note.redacted else note.path)), "fork_note"))
        if compaction is not None:
            out.append(("user", text_of(REDACTED if compaction.redacted else compaction.summary), "summary"))
        for ev in history:
            if ev.kind != "message" or (compaction is not None and ev.offset < compaction.through):
                continue
            content = skeleton(ev.content) if ev.redacted else ev.content
            calls = [b["id"] for b in content if b["type"] == "tool_use"]
            dropped = {c for c, where in drops if where == ev.offset}
            if calls and len(calls) == len(content) and set(calls) <= dropped:
                continue  # a message of dropped calls alone leaves the view
            out.append((ev.role, [b for b in content if not (b["type"] == "tool_use" and b["id"] in dropped)], "message"))
        return out

    def clean_cuts(self, thread: str) -> list[int]:
        """The offsets a compaction at the head may summarise through: none between a call and
        the message answering it."""
        history = self.history(thread)
        asked: dict[str, int] = {}
        pairs: list[tuple[int, int]] = []
        for ev in window(history)[1]:
            if ev.kind == "message":
                content = skeleton(ev.content) if ev.redacted else ev.content
                asked.update((b["id"], ev.offset) for b in content if b["type"] == "tool_use")
                pairs += [(asked[b["tool_use_id"]], ev.offset) for b in content if b["type"] == "tool_result"]
        return [t for t in range(len(history) + 1) if not any(a < t <= b for a, b in pairs)]

    def owner(self, ev: Ev) -> str:
        return next(s.id for s in self.streams.values() if any(own is ev for own in s.own))

    def record(self, thread: str, ev: Ev) -> None:
        assert ev.offset == self.head(thread), (ev, self.head(thread))
        self.streams[thread].own.append(ev)
        self.events += 1

    def threads_where(self, wanted: Any) -> list[str]:
        return [t for t in self.order if wanted(t)]

    def idle(self, thread: str) -> bool:
        return not self.pending(self.history(thread))

    def unchanged(self, attempt: Any) -> BaseException:
        """Run `attempt`, which must raise; the file must be as it was."""
        before = file_dump(self.path)
        try:
            attempt()
        except (ForkRefused, InvalidEvent, ConcurrencyError) as refused:
            assert file_dump(self.path) == before
            return refused
        raise AssertionError("not refused")

    # -- rules --------------------------------------------------------------------------------

    @precondition(lambda self: sum(s.parent is None for s in self.streams.values()) < ROOTS)
    @rule(title=TEXT)
    def create_thread(self, title: str) -> None:
        t = self.store.create_thread(title=title, model=MODEL)
        self.streams[t] = Stream(t, None, 0)
        self.order.append(t)
        first = next(iter(self.store.read(t)))
        self.record(t, Ev("created", 0, first.position))

    @precondition(lambda self: any(self.idle(t) for t in self.order))
    @rule(pick=PICK, role=st.sampled_from(["user", "assistant"]), text=TEXT, expect=st.sampled_from(["any", "head", "stale"]),
          retried=st.booleans())
    def append_text(self, pick: int, role: str, text: str, expect: str, retried: bool) -> None:
        idle = self.threads_where(self.idle)
        t = idle[pick % len(idle)]
        head = self.head(t)
        if expect == "stale":  # another writer got there first: refused, and nothing written
            refused = self.unchanged(lambda: self.store.append_message(t, role, text, expect=head - 1))
            assert isinstance(refused, ConcurrencyError)
            return
        self.ids += 1
        fields = {"event_id": f"ev-{self.ids}"} if retried else {}
        recorded = self.store.append_message(t, role, text, expect=head if expect == "head" else "any", **fields)
        assert (recorded.stream_id, recorded.offset) == (t, head)
        if retried:  # a retry of the same event returns the original, and adds nothing
            again = self.store.append_message(t, role, text, **fields)
            assert again.to_json() == recorded.to_json()
        self.record(t, Ev("message", recorded.offset, recorded.position, role, text_of(text)))

    @precondition(lambda self: any(self.idle(t) for t in self.order))
    @rule(pick=PICK, preface=st.one_of(st.none(), TEXT), calls=st.integers(1, 2))
    def call_tools(self, pick: int, preface: str | None, calls: int) -> None:
        idle = self.threads_where(self.idle)
        t = idle[pick % len(idle)]
        content = [] if preface is None else text_of(preface)
        for _ in range(calls):
            self.calls += 1
            content.append({"type": "tool_use", "id": f"toolu_{self.calls}", "name": "search", "input": {"q": preface or ""}})
        recorded = self.store.append_message(t, "assistant", content)
        self.record(t, Ev("message", recorded.offset, recorded.position, "assistant", content))

    @precondition(lambda self: any(not self.idle(t) for t in self.order))
    @rule(pick=PICK, output=RESULT, failed=st.booleans())
    def answer_tools(self, pick: int, output: str, failed: bool) -> None:
        waiting = self.threads_where(lambda t: not self.idle(t))
        t = waiting[pick % len(waiting)]
        content: list[Block] = []
        for call in self.pending(self.history(t)):
            result: Block = {"type": "tool_result", "tool_use_id": call, "content": output}
            if failed:
                result["is_error"] = True
            content.append(result)
        recorded = self.store.append_message(t, "user", content)
        self.record(t, Ev("message", recorded.offset, recorded.position, "user", content))
        assert self.store.pending_tool_uses(t) == ()

    def fork_points(self, thread: str) -> list[int]:
        history = self.history(thread)
        first = next((ev.offset for ev in history if ev.kind == "message"), None)
        return [] if first is None else list(range(first + 1, len(history) + 1))

    @precondition(lambda self: len(self.order) < THREADS and any(self.fork_points(t) for t in self.order))
    @rule(pick=PICK, at_pick=PICK, unanswered=st.sampled_from(["refuse", "drop"]), default_at=st.booleans())
    def fork(self, pick: int, at_pick: int, unanswered: str, default_at: bool) -> None:
        forkable = self.threads_where(self.fork_points)
        parent = forkable[pick % len(forkable)]
        points = self.fork_points(parent)
        at = points[-1] if default_at else points[at_pick % len(points)]
        waiting = self.pending(self.history(parent)[:at])
        before = [e.to_json() for e in self.store.read(parent)]
        if waiting and unanswered == "refuse":
            refused = self.unchanged(lambda: self.store.fork(parent, None if default_at else at))
            assert isinstance(refused, ForkRefused)
            assert refused.reason == "unanswered_tool_calls"
            assert sorted(refused.tool_use_ids) == sorted(waiting)
            return
        f = self.store.fork(parent, None if default_at else at, unanswered=unanswered)
        assert [e.to_json() for e in self.store.read(parent)] == before  # a fork never writes to its parent
        self.streams[f] = Stream(f, parent, at)
        self.order.append(f)
        event = next(iter(self.store.read(f, at)))
        assert (event.type, event.stream_id, event.offset) == ("thread.forked", f, at)
        assert sorted(event.data.get("dropped_tool_use_ids") or []) == sorted(waiting)
        self.record(f, Ev("forked", at, event.position, dropped=tuple(waiting)))

    @precondition(lambda self: bool(self.order))
    @rule(pick=PICK, past=st.integers(1, 3))
    def fork_refused(self, pick: int, past: int) -> None:
        t = self.order[pick % len(self.order)]
        head = self.head(t)
        empty = not self.fork_points(t)  # a thread with no message is refused as that, whatever the offset
        refused = self.unchanged(lambda: self.store.fork(t, head + past))
        assert isinstance(refused, ForkRefused)
        assert refused.reason == ("empty" if empty else "offset_out_of_range"), refused.reason
        if empty:
            refused = self.unchanged(lambda: self.store.fork(t))
            assert isinstance(refused, ForkRefused) and refused.reason == "empty", refused

    def redactable(self) -> list[tuple[str, Ev]]:
        return [(s.id, ev) for s in self.streams.values() for ev in s.own
                if ev.kind in ("message", "compaction", "forked") and not ev.redacted]

    @precondition(lambda self: bool(self.redactable()))
    @rule(pick=PICK)
    def redact(self, pick: int) -> None:
        candidates = self.redactable()
        owner, ev = candidates[pick % len(candidates)]
        recorded = self.store.redact(ev.position, reason="leaked key", actor="ops")
        assert (recorded.type, recorded.stream_id, recorded.offset) == ("event.redacted", owner, self.head(owner))
        ev.redacted = True
        self.redactions += 1
        self.record(owner, Ev("redaction", recorded.offset, recorded.position, target=ev.position))

    @precondition(lambda self: any(self.idle(t) for t in self.order))
    @rule(pick=PICK, cut_pick=PICK, summary=TEXT)
    def compact(self, pick: int, cut_pick: int, summary: str) -> None:
        idle = self.threads_where(self.idle)
        t = idle[pick % len(idle)]
        cuts = self.clean_cuts(t)
        through = cuts[cut_pick % len(cuts)]
        data = {"summary": summary, "through_offset": through}
        recorded = self.store.append(t, [{"type": "compaction.recorded", "data": data}])[0]
        self.record(t, Ev("compaction", recorded.offset, recorded.position, summary=summary, through=through))

    @precondition(lambda self: any(len(self.clean_cuts(t)) <= self.head(t) for t in self.order))
    @rule(pick=PICK, cut_pick=PICK)
    def compact_between_a_call_and_its_result(self, pick: int, cut_pick: int) -> None:
        split = self.threads_where(lambda t: len(self.clean_cuts(t)) <= self.head(t))
        t = split[pick % len(split)]
        dirty = sorted(set(range(self.head(t) + 1)) - set(self.clean_cuts(t)))
        through = dirty[cut_pick % len(dirty)]
        data = {"summary": "s", "through_offset": through}
        refused = self.unchanged(lambda: self.store.append(t, [{"type": "compaction.recorded", "data": data}]))
        assert "through_offset" in str(refused)

    @precondition(lambda self: bool(self.order))
    @rule(pick=PICK, at_pick=PICK)
    def replay(self, pick: int, at_pick: int) -> None:
        """`at=k` reads the thread as of its first k events, as a fork at k starts from."""
        t = self.order[pick % len(self.order)]
        at = at_pick % (self.head(t) + 1)
        view = self.view(t, at)
        assert [(m.role, m.content, m.kind) for m in thread_state(self.store, t, at=at).messages] == view
        if at and request_messages(view):
            assert anthropic_request(self.store, t, at=at, cache=False)["messages"] == request_messages(view)

    @precondition(lambda self: bool(self.order))
    @rule(pick=PICK, at_pick=PICK)
    def save_a_snapshot(self, pick: int, at_pick: int) -> None:
        """A snapshot is a cache: the invariants after it read through it, and must not differ."""
        t = self.order[pick % len(self.order)]
        at = 1 + at_pick % self.head(t)
        assert save_snapshot(self.store, t, at) == at

    def exported(self, thread: str) -> list[Ev]:
        """The events a thread's export holds (`threadlog/export.py`): its own, and of each
        ancestor those below its child's fork point, and at least its first."""
        out: list[Ev] = []
        child: Stream | None = None
        stream: Stream | None = self.streams[thread]
        while stream is not None:
            hi = None if child is None else max(child.base, stream.base + 1)
            out += [ev for ev in stream.own if hi is None or ev.offset < hi]
            child, stream = stream, None if stream.parent is None else self.streams[stream.parent]
        return out

    @precondition(lambda self: bool(self.order))
    @rule(pick=PICK)
    def export_one_thread(self, pick: int) -> None:
        """A thread's export restores into a fresh file as the thread reads here, unless a
        redaction in the history it shares is recorded past the fork point, which the export
        refuses, writing nothing."""
        t = self.order[pick % len(self.order)]
        held = self.exported(t)
        unrecorded = {ev.position for ev in held if ev.redacted} - {ev.target for ev in held if ev.kind == "redaction"}
        if unrecorded:
            with pytest.raises(StoreError, match=f"cannot be exported alone: position {min(unrecorded)},"):
                list(export_events(self.store, t))
            return
        backup = self.dir / "thread.jsonl"
        backup.write_text("".join(dump_lines(export_events(self.store, t))), encoding="utf-8")
        restored = Store(self.dir / f"thread-{self.ids}.db")
        self.ids += 1
        try:
            import_events(restored, backup)
            report = restored.verify()
            assert report.events == len(held)
            self.same_thread(restored, t)
        finally:
            restored.close()

    @precondition(lambda self: self.opened < self.events)
    @rule()
    def reopen(self) -> None:
        """What was written is in the file: a store opened on it again reads the same."""
        self.store.close()
        self.store = Store(self.path)
        self.opened = self.events

    @precondition(lambda self: self.checkpoint is None or self.checkpoint[1] < self.events)
    @rule()
    def take_checkpoint(self) -> None:
        self.checkpoint = (self.store.checkpoint(), self.events, self.redactions)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def each_thread_reads_as_the_model(self) -> None:
        for t in self.order:
            view = self.view(t)
            state = thread_state(self.store, t)
            assert [(m.role, m.content, m.kind) for m in state.messages] == view, t
            assert state.length == self.head(t)
            expected = request_messages(view)
            if expected:
                assert anthropic_request(self.store, t, cache=False)["messages"] == expected, t
            else:
                with pytest.raises(InvalidEvent, match="has no message to send"):
                    anthropic_request(self.store, t, cache=False)
            md = transcript(self.store, t)
            for role, content, kind in view:
                for block in content:
                    if kind == "message" and block["type"] == "text" and plain(block["text"]):
                        assert f"\n    {block['text']}\n" in md, (t, block["text"])

    @invariant()
    def every_chain_verifies(self) -> None:
        full = self.store.verify()
        assert (full.streams, full.events, full.redacted) == (len(self.order), self.events, self.redactions)
        if self.checkpoint is not None:
            kept, events, redacted = self.checkpoint
            assert self.store.verify(checkpoint=kept).checkpoint == kept
            since = self.store.verify(since=kept)
            assert since.checkpoint == self.store.checkpoint()
            assert since.events == self.events - events
            assert since.redacted == self.redactions - redacted

    @invariant()
    def threads_lists_each_thread_once(self) -> None:
        listed = [info.id for info in self.store.threads(limit=None)]
        assert sorted(listed) == sorted(self.order)

    def same_thread(self, restored: Store, t: str) -> None:
        """A restored thread reads as the one it came from: its events, its state, its request."""
        assert [e.to_json() for e in restored.read(t)] == [e.to_json() for e in self.store.read(t)]
        assert thread_state(restored, t).messages == thread_state(self.store, t).messages
        if request_messages(self.view(t)):
            assert anthropic_request(restored, t) == anthropic_request(self.store, t)

    def teardown(self) -> None:
        try:
            if self.order:
                self.backup_restores_the_same()
        finally:
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def backup_restores_the_same(self) -> None:
        backup = self.dir / "backup.jsonl"
        backup.write_text("".join(dump_lines(export_all(self.store))), encoding="utf-8")
        restored = Store(self.dir / "restored.db")
        try:
            import_events(restored, backup)
            report = restored.verify()
            assert (report.streams, report.events, report.redacted) == (len(self.order), self.events, self.redactions)
            assert sorted(info.id for info in restored.threads(limit=None)) == sorted(self.order)
            for t in self.order:
                self.same_thread(restored, t)
        finally:
            restored.close()


StoreMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None, derandomize=True,
                                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_the_store_keeps_its_promises_over_any_sequence = StoreMachine.TestCase
