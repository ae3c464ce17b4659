"""Every reader marks the same answers as refused or cut short, in the same words, as
`projections.stops` says of them, the paused answer (`pause_turn`) only when it is the last
message of the view as of the point read (a message of calls a fork dropped is out of it): display
rows, the model view, transcripts (bounded too), `show`, `diff` and the viewer's thread, replay
and diff pages, over random threads with forks (dropping calls or not), note forks, compactions,
redactions and snapshots, at random replay points."""

from __future__ import annotations

import html
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from eventstore import ForkRefused, InvalidEvent, RecordedEvent, Store
from projections import diff, display_rows, save_snapshot, thread_state, transcript
from projections.stops import CALLS, CONTINUED_STOPS, WHOLE_STOPS, _CUT_BY, REFUSED, cut_by, cut_short, refusal
from threadlog.cli import cli

# Every stop reason this release knows, text it does not, a known one in capitals, and none.
STOPS: list[str | None] = sorted({*WHOLE_STOPS, *CONTINUED_STOPS, *CALLS, *_CUT_BY, REFUSED} - {None}) + [
    "weird", "MAX_TOKENS", "odd reason", None]
Mark = tuple[str, str]  # ("refused", what it said) or ("cut", what cut it short and its stop reason)
_TOKEN = re.compile(r"\b[wt](\d+)x\b")


def _mark(data: dict[str, Any], last: bool) -> Mark | None:
    """What `projections.stops` says of a message (its event's data) read as `last` or not."""
    said = refusal(data)
    if said is not None:
        return ("refused", said)
    cut = cut_short(data, last)
    return None if cut is None else ("cut", cut)


def _expected(events: list[RecordedEvent], view: bool = True) -> dict[int, Mark | None]:
    """Each message's mark by offset, the last message of the view as of the point read being
    the last: a message of calls a fork dropped and nothing else is out of it (call ids are
    never used twice here). `view=False`: the last message read (a diff side shows every message)."""
    dropped = {call for e in events if e.type == "thread.forked" for call in e.data.get("dropped_tool_use_ids") or []}
    messages = [e for e in events if e.type == "message.appended"]
    shown = [e for e in messages if not (view and _gone(e.data, dropped))]
    last = shown[-1].offset if shown else None
    return {e.offset: _mark(e.data, e.offset == last) for e in messages}


def _gone(data: dict[str, Any], dropped: set[str]) -> bool:
    """Whether a message holds nothing but tool calls a fork dropped: the model view leaves it out."""
    content = data.get("content") or []
    return bool(content) and all(b.get("type") == "tool_use" and b.get("id") in dropped for b in content)


def _note_start(events: list[RecordedEvent]) -> int:
    """Where rows and the transcript start over: the last note fork's card, else 0."""
    return max((e.offset for e in events if e.type == "thread.forked" and e.data.get("options", {}).get("context") == "note"),
               default=0)


class _Builder:
    """Random events on a few threads, each kept only when the store takes it."""

    def __init__(self, store: Store, draw: Any) -> None:
        self.store, self.draw = store, draw
        self.threads = [store.create_thread(model="m", thread_id="t")]
        self.calls = 0
        self.forks: list[str] = []

    def step(self) -> None:
        kind = self.draw(st.sampled_from(["message"] * 6 + ["paused", "other", "fork", "compact", "redact", "snapshot"]))
        thread = self.draw(st.sampled_from(self.threads))
        try:
            getattr(self, "_" + kind)(thread)
        except (InvalidEvent, ForkRefused):
            pass  # refused: the store is as it was

    def _message(self, thread: str) -> None:
        store, draw = self.store, self.draw
        offset = store.head(thread)
        role = draw(st.sampled_from(["user", "assistant"]))
        content: list[dict[str, Any]] = []
        if role == "user":
            for call in draw(st.lists(st.sampled_from(self._waiting(thread) or ["none"]), max_size=2, unique=True)):
                if call != "none":
                    content.append({"type": "tool_result", "tool_use_id": call, "content": "done"})
        shape = draw(st.sampled_from(["text", "blank", "calls", "text+calls"] if role == "assistant" else ["text", "blank"]))
        if shape in ("text", "text+calls"):
            content.append({"type": "text", "text": f"w{offset}x"})
        if shape == "blank":
            content.append({"type": "text", "text": draw(st.sampled_from(["", " "]))})
        if shape in ("calls", "text+calls"):
            for _ in range(draw(st.integers(1, 2))):
                self.calls += 1
                content.append({"type": "tool_use", "id": f"toolu_{self.calls}", "name": f"t{offset}x", "input": {}})
        fields: dict[str, Any] = {}
        if draw(st.booleans()):
            fields["stop_reason"] = draw(st.sampled_from([*STOPS, *["pause_turn"] * 6]))  # the one that depends on where reading ends
        if fields.get("stop_reason") == REFUSED and draw(st.booleans()):
            fields["stop_details"] = {"type": "refusal", "category": draw(st.sampled_from(["cyber", "bio"])),
                                      **({"explanation": "not allowed here"} if draw(st.booleans()) else {})}
        origin = {"origin": "primed"} if role == "user" and draw(st.integers(0, 9)) == 0 else {}
        store.append_message(thread, role, content, **fields, **origin)

    def _paused(self, thread: str) -> None:
        """A paused answer, then the model's tool calls alone, and maybe a fork: one made after
        them drops the calls (they wait for results), and its view ends on the paused answer."""
        offset = self.store.head(thread)
        self.store.append_message(thread, "assistant", [{"type": "text", "text": f"w{offset}x"}], stop_reason="pause_turn")
        self.calls += 1
        stop = self.draw(st.sampled_from([{}, {"stop_reason": "tool_use"}, {"stop_reason": "pause_turn"}]))
        self.store.append_message(thread, "assistant", [{"type": "tool_use", "id": f"toolu_{self.calls}", "name": f"t{offset + 1}x",
                                                         "input": {}}], **stop)
        if self.draw(st.booleans()):
            self._fork(thread)

    def _waiting(self, thread: str) -> list[str]:
        """The tool calls of `thread` waiting for their results."""
        state = thread_state(self.store, thread)
        answered = {b.get("tool_use_id") for m in state.messages for b in m.content if b.get("type") == "tool_result"}
        calls = [b["id"] for m in state.messages for b in m.content if b.get("type") == "tool_use"]
        dropped = set(state.dropped_tool_use_ids)
        return [c for c in calls if c not in answered and c not in dropped][-3:]

    def _other(self, thread: str) -> None:
        kind = self.draw(st.sampled_from(["title", "metadata", "todos"]))
        data = {"title": {"title": "T"}, "metadata": {"patch": {"k": 1}}, "todos": {"todos": []}}[kind]
        self.store.append(thread, [{"type": f"{kind}.set" if kind != "metadata" else "metadata.set", "data": data}])

    def _fork(self, thread: str) -> None:
        head = self.store.head(thread)
        at = self.draw(st.sampled_from([head, head, max(head - 1, 1)]) | st.integers(1, max(head, 1)))
        context = self.draw(st.sampled_from(["full", "full", "note"]))
        try:
            fork = self.store.fork(thread, at, context=context)
        except ForkRefused:
            fork = self.store.fork(thread, at, context=context, unanswered="drop")
        self.threads.append(fork)
        self.forks.append(fork)

    def _compact(self, thread: str) -> None:
        through = self.draw(st.integers(0, self.store.head(thread)))
        self.store.append(thread, [{"type": "compaction.recorded", "data": {"summary": "so far", "through_offset": through}}])

    def _redact(self, thread: str) -> None:
        messages = [e for e in self.store.read(thread) if e.type == "message.appended" and not e.redacted]
        if messages:
            self.store.redact(self.draw(st.sampled_from(messages)).position, "private", "tester", purge=False)

    def _snapshot(self, thread: str) -> None:
        save_snapshot(self.store, thread, self.draw(st.integers(1, max(self.store.head(thread), 1))))


def _rows_marks(rows: list[Any]) -> dict[int, Mark]:
    out: dict[int, Mark] = {}
    for row in rows:
        kind, offset, text = (row["kind"], row["offset"], row.get("text")) if isinstance(row, dict) else (row.kind, row.offset, row.text)
        if kind == "refusal":
            out[offset] = ("refused", text or "")
        elif kind == "cut_short":
            out[offset] = ("cut", text)
    return out


def _marked(expected: dict[int, Mark | None], offsets: Any) -> dict[int, Mark]:
    return {offset: mark for offset in offsets if (mark := expected[offset]) is not None}


def _transcript_sections(text: str) -> list[tuple[str | None, Mark | None]]:
    """The message sections of a transcript: (the token naming the message, or `note`,
    `redacted`, None), and the mark it ends with."""
    out: list[tuple[str | None, Mark | None]] = []
    for section in re.split(r"\n(?=## )", text):
        heading, _, body = section.partition("\n\n")
        if heading not in ("## user", "## assistant"):
            continue
        found = _TOKEN.search(body)
        name = ("redacted" if "[redacted]" in body else found.group(1) if found else "note" if "This conversation is a fork" in body
                else None)
        mark: Mark | None = None
        lines = body.rstrip("\n").split("\n\n")
        if "refused (stop_reason refusal)" in lines:
            after = lines[lines.index("refused (stop_reason refusal)") + 1:]
            mark = ("refused", after[0].strip() if after else "")
        else:
            cut = re.fullmatch(r"(.+) \(stop_reason `? ?(.+?) ?`?\)", lines[-1]) if lines else None
            if cut is not None:
                mark = ("cut", f"{cut.group(1)} ({cut.group(2)})")
        out.append((name, mark))
    return out


def _expected_sections(events: list[RecordedEvent], expected: dict[int, Mark | None], dropped: set[str],
                       start: int) -> list[tuple[str | None, Mark | None]]:
    """The message sections a transcript of these events writes, as `_transcript_sections` reads them."""
    out: list[tuple[str | None, Mark | None]] = []
    if start:
        out.append(("note", None))
    for event in events:
        if event.type != "message.appended" or event.offset < start:
            continue
        content = event.data.get("content") or []
        texts = [b for b in content if b.get("type") == "text" and str(b.get("text", "")).strip()]
        calls = [b for b in content if b.get("type") == "tool_use" and b.get("id") not in dropped]
        mark = expected[event.offset]
        if not (texts or calls or mark):
            continue
        name = "redacted" if event.redacted else str(event.offset) if (texts or calls) else None
        out.append((name, mark))
    return out


def _check_line(line: str, mark: Mark | None, where: str) -> None:
    if mark is None:
        assert not re.search(r"\((refused|cut off|may be cut short|paused by)", line), (where, line)
    elif mark[0] == "refused":
        assert line.endswith(f"(refused: {mark[1]})" if mark[1] else "(refused)"), (where, line, mark)
    else:
        assert line.endswith(f"({mark[1]})"), (where, line, mark)


_CARD = re.compile(r'<div class="card (refusal|cut-short)">(?:Refused(?:: <span class="why">(.*?)</span>| \(no reason given\))'
                   r'|Answer <span class="why">(.*?)</span>)</div>')


def _card(chunk: str) -> Mark | None:
    found = _CARD.search(chunk)
    if found is None:
        return None
    if found.group(1) == "refusal":
        return ("refused", html.unescape(found.group(2) or ""))
    return ("cut", html.unescape(found.group(3)))


def _page_marks(page: str, split: str, offset: str) -> dict[int, Mark]:
    out: dict[int, Mark] = {}
    for chunk in page.split(split)[1:]:
        found = re.search(offset, chunk)
        mark = _card(chunk)
        if mark is not None:
            assert found is not None, chunk
            out[int(found.group(1))] = mark
    return out


def _agree(db: str, store: Store, builder: _Builder, draw: Any, browser: Any) -> None:
    runner = CliRunner()
    for thread in builder.threads:
        head = store.head(thread)
        for at in sorted({head, *draw(st.lists(st.integers(0, head), max_size=2))}):
            events = list(store.read(thread, 0, at))
            expected = _expected(events)
            start = _note_start(events)
            primed = {e.offset for e in events if e.origin == "primed"}
            where = f"{thread} at {at}"
            # Display rows: every message from the last note fork's card on, but a primed one.
            in_rows = [o for o in expected if o >= start and o not in primed]
            assert _rows_marks(display_rows(store, thread, at)) == _marked(expected, in_rows), where
            lo = draw(st.integers(0, at))
            hi = draw(st.integers(lo, at))
            page = display_rows(store, thread, at, start=lo, stop=hi)
            # A page that ends before a note fork's card keeps its rows (a documented choice).
            since = _note_start(events[:hi])
            assert _rows_marks(page) == _marked(expected, {r.offset for r in page if r.offset in expected and r.offset >= since}), \
                (where, lo, hi)
            # The model view, whole and a slice of it.
            state = thread_state(store, thread, at)
            messages = [m for m in state.messages if m.kind == "message"]
            view = {m.offset: ("refused", m.refusal) if m.refusal is not None else ("cut", m.cut_short) for m in messages
                    if m.refusal is not None or m.cut_short is not None}
            assert view == _marked(expected, [m.offset for m in messages]), where
            paged = thread_state(store, thread, at, paged=True).view[-2:]
            assert [(m.refusal, m.cut_short) for m in paged] == [(m.refusal, m.cut_short) for m in state.messages[-2:]], where
            # Transcripts, whole and bounded.
            dropped = set(state.dropped_tool_use_ids)
            sections = _expected_sections(events, expected, dropped, start)
            assert _transcript_sections(transcript(store, thread, stop=at)) == sections, where
            last = draw(st.integers(1, 4))
            bounded = _transcript_sections(transcript(store, thread, stop=at, last=last))
            assert bounded == sections[-last:] if sections else bounded == [], (where, last)
            small = _transcript_sections(transcript(store, thread, stop=at, max_bytes=2048))
            assert small == sections[len(sections) - len(small):] if small else True, where
            if at >= 1:
                shown = json.loads(runner.invoke(cli, ["--db", db, "show", thread, "--at", str(at), "--json"]).stdout)
                marks = {m["offset"]: ("refused", m["refusal"]) if "refusal" in m else ("cut", m["cut_short"])
                         for m in shown["messages"] if m["kind"] == "message" and ("refusal" in m or "cut_short" in m)}
                assert marks == view, where
                out = runner.invoke(cli, ["--db", db, "show", thread, "--at", str(at)]).stdout.split("\n")
                lines = _message_lines(out[next(i for i, line in enumerate(out) if line.startswith("messages    ")) + 1:], 26)
                for m in messages:
                    _check_line(lines[m.offset], expected[m.offset], where)
            rows = json.loads(runner.invoke(cli, ["--db", db, "rows", thread, "--at", str(at), "--json"]).stdout)
            assert _rows_marks(rows) == _marked(expected, in_rows), where
            thread_html = browser.get("/thread", params={"id": thread, "at": at}).text
            assert _page_marks(thread_html, '<li class="item', r'data-offset="(\d+)"') == _marked(expected, in_rows), where
            replay_html = browser.get("/replay", params={"id": thread, "at": at}).text
            assert _page_marks(replay_html, '<li class="item role-', r"offset (\d+)") == view, where
    for fork in builder.forks:
        parent = store.thread(fork).parent_id
        assert parent is not None
        compared = diff(store, fork, parent)
        limited = diff(store, fork, parent, limit=draw(st.integers(1, 3)))
        text = runner.invoke(cli, ["--db", db, "diff", fork, parent]).stdout
        page = browser.get("/diff", params={"a": fork, "b": parent}).text.split('<section class="side">')[1:]
        for label, side, part, shown in (("a", compared.a, limited.a, page[0]), ("b", compared.b, limited.b, page[1])):
            # A side's messages run to its head, each shown: the paused answer is marked only as its thread's last message.
            expected = _expected(list(store.read(side.thread)), view=False)
            want = _marked(expected, [m["offset"] for m in side.messages])
            assert _side_marks(side) == want, side.thread
            assert _side_marks(part) == _marked(expected, [m["offset"] for m in part.messages]), ("limit", side.thread)
            assert _page_marks(shown, '<li class="item role-', r"offset (\d+)") == want, side.thread
            block = text.split(f"\n{label}: {side.thread}, ", 1)[1]
            block = block.split(f"\nb: {compared.b.thread}, ", 1)[0] if label == "a" else block
            found = _message_lines(block.split("\n")[1:], 20)
            for m in side.messages:
                _check_line(found[m["offset"]], expected[m["offset"]], f"diff {side.thread}")


def _side_marks(side: Any) -> dict[int, Mark]:
    out: dict[int, Mark] = {}
    for index, message in enumerate(side.messages):
        said, cut = refusal(message), side.cut_short(index)
        if said is not None or cut is not None:
            out[message["offset"]] = ("refused", said) if said is not None else ("cut", cut)
    return out


def _message_lines(lines: list[str], indent: int) -> dict[int, str]:
    """`show`'s or `diff`'s message lines by offset, each with the lines of its mark below it
    (indented `indent`) joined on; a summary's or fork note's line (`user/summary`) left out."""
    found: dict[int, str] = {}
    current: int | None = None
    for line in lines:
        head = re.match(r"  +(\d+)  (\S+) +(.*)$", line)
        if head is not None and not line.startswith(" " * indent):
            current = int(head.group(1)) if "/" not in head.group(2) else None
            if current is not None:
                found[current] = head.group(3)
        elif current is not None and line.startswith(" " * indent):
            found[current] += " " + line.strip()
        else:
            current = None
    return found


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: it took minutes; a failure prints its draws
@given(st.data())
def test_every_reader_marks_the_answers_projections_stops_marks(data: Any) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from threadlog.web import create_app

    with tempfile.TemporaryDirectory() as directory:
        db = str(Path(directory) / "t.db")
        with Store(db) as store:
            builder = _Builder(store, data.draw)
            for _ in range(data.draw(st.integers(1, 14))):
                builder.step()
        with Store(db) as store, TestClient(create_app(db), base_url="http://127.0.0.1") as browser:
            _agree(db, store, builder, data.draw, browser)
