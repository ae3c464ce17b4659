"""Human-readable lines for the CLI: aligned, short, no Python reprs, and safe to print."""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Sequence

import json
import re
import shlex
from datetime import datetime, timezone
from typing import Any

from eventstore import RecordedEvent, ThreadInfo
from projections import BlameEntry, Diff, RequestCheck, Row, SearchHit, ThreadState, Usage
from projections.stops import refusal
from projections.search import plain

from .listing import SubAgent


# Characters that reorder the text around them where it is shown (bidirectional embeddings,
# overrides and isolates), and characters that show as nothing at all (a zero-width space, a
# word joiner, a byte order mark: `abc` and `ab\u200bc` looked like one id; the invisible
# operators and the deprecated format characters; and the tag characters, U+E0000 plus an
# ASCII code each, in which a tool result can hand a model an instruction nobody reading it
# sees). Both are shown as their escapes here and by the web viewer (`threadlog.web.render.visible`).
REORDERING = "\u202a-\u202e\u2066-\u2069"
INVISIBLE = "\u200b\u2060-\u2064\u206a-\u206f\ufeff\U000e0000-\U000e007f"

# A lone surrogate: how Python holds a byte that is not UTF-8 in a file name or an argument
# (`bad\xff.jsonl`). Printed raw it wrote that byte (output no UTF-8 reader takes) or, with a
# strict stdout, failed the command after its write had committed.
SURROGATES = "\ud800-\udfff"

# What a terminal would obey rather than show: C0 and C1 controls (ESC, CR, BEL, the CSI and
# OSC introducers, …) but the tab, DEL, the reordering characters and the marks (which reorder
# what a line shows), the line separators, and the invisible characters; and lone surrogates.
_UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029{REORDERING}{INVISIBLE}{SURROGATES}]")


def safe(text: str) -> str:
    """`text` with every control character shown escaped (`\\x1b`, `\\r`, `\\u202e`), so a stored
    string cannot recolour the terminal, rewrite a line or set its title. The CLI passes
    every line of text output through this; `--json` output keeps JSON's own escapes."""
    return _UNSAFE.sub(_escaped, text)


# What JSON leaves raw inside a string (with ensure_ascii=False) that a terminal would obey;
# `json.dumps` already escapes the C0 controls, so the newlines left are its own layout.
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029{REORDERING}{INVISIBLE}{SURROGATES}]")


def safe_json(text: str) -> str:
    """JSON text with what `safe` escapes written as JSON escapes (`\\u202e`): the value it
    parses to is unchanged, and printing it cannot drive the terminal either."""
    return _UNSAFE_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def safe_block(text: str) -> str:
    """`safe` for text of several lines: the line breaks stay, everything else is escaped."""
    return "\n".join(safe(line) for line in text.split("\n"))


def command_line(command: str, arguments: Sequence[str], options: str = "") -> str:
    """`command ARGUMENTS OPTIONS` as a user would type it, to be shown in a message: each
    argument quoted for a shell, as an id is any text (one holding `;` or `$(…)` would run a
    command of its own), and after the options and `--` when one starts with `-`, which would
    read as an option. An id of letters, digits and `_@%+=:,./-` reads as it is; one holding
    what `safe` escapes is quoted so that the shell reads the escape back (`shell_word`)."""
    quoted = " ".join(map(shell_word, arguments))
    if any(argument.startswith("-") for argument in arguments):
        return " ".join(filter(None, (command, options, "--", quoted)))
    return " ".join(filter(None, (command, quoted, options)))


def shell_word(text: str) -> str:
    """`text` quoted for a shell, to be printed: as `shlex.quote` does, or, where `safe` would
    escape a character, as `$'…'` (bash, zsh, ksh), whose escapes the shell reads back to
    `text` itself; printed in `'…'`, `safe`'s escape was read as a backslash and letters."""
    if _UNSAFE.search(text) is None:
        return shlex.quote(text)
    return "$'" + _UNSAFE.sub(_ansi_c_escaped, text.replace("\\", "\\\\").replace("'", "\\'")) + "'"


def _ansi_c_escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _escaped(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def event_line(event: RecordedEvent) -> str:
    """One log line: offset, stream, position, type, short hash and a hint of the data."""
    return f"{event.offset:>6}  {event.stream_id:<16}  {event.position:>8}  {event.type:<20} {event.hash[:12]}  {_hint(event)}"


def _hint(event: RecordedEvent) -> str:
    data = event.data
    if event.redacted:
        return "[redacted]"
    if event.type == "message.appended":
        parts = []
        for block in data.get("content", []):
            kind = block.get("type")
            if kind == "text":
                parts.append(block.get("text", ""))
            elif kind == "tool_use":
                parts.append(f"[tool_use {block.get('name')}]")
            elif kind == "tool_result":
                parts.append("[tool_result]")
            else:
                parts.append(f"[{kind}]")
        return _short(f"{data.get('role')}: {' '.join(parts)}")
    if event.type == "thread.forked":
        return f"from {data['parent_id']} at {data['parent_offset']}"
    if event.type == "run.finished":  # how it ended: a cancelled or failed run read as an ok one
        error = f": {data['error']}" if data.get("error") else ""
        return _short(f"run_id={data.get('run_id')} {data.get('status')}{error}")
    if event.type == "metadata.set" and isinstance(data.get("patch"), dict):
        return _short("patch: " + ", ".join(f"{key}={_scalar(value)}" for key, value in data["patch"].items()))
    if event.type == "todos.set" and isinstance(data.get("todos"), list):
        todos = data["todos"]
        done = sum(1 for todo in todos if isinstance(todo, dict) and todo.get("status") == "completed")
        return f"todos: {len(todos)} ({done} completed)"
    if event.type == "langgraph.checkpoint":
        return _short(_checkpoint_hint(data))
    if event.type == "langgraph.writes":
        return _short(_writes_hint(data))
    if event.type == "langgraph.deleted" and isinstance(data.get("checkpoint_ids"), list):
        return f"{data.get('reason')}: {counted(len(data['checkpoint_ids']), 'checkpoint')}"
    for key in ("title", "run_id", "interrupt_id", "summary", "position"):
        if key in data:
            return _short(f"{key}={data[key]}")
    return ""


def _checkpoint_hint(data: dict[str, Any]) -> str:
    """A LangGraph checkpoint's step and source, then the channels whose new values it stores:
    `step -1, input: __start__`. One that follows its stream's checkpoint before stores only
    how its metadata differs from that one's a step on, so it reads `next step`, and names its
    source only when the source changed."""
    metadata = data.get("metadata")
    if isinstance(metadata, dict):
        step, source = f"step {_scalar(metadata.get('step'))}", metadata.get("source")
    else:
        delta = data.get("metadata_delta")
        delta = delta if isinstance(delta, dict) else {}
        step = f"step {_scalar(delta['step'])}" if "step" in delta else "next step"
        source = delta.get("source")
    if source is not None:
        step += f", {source}" if isinstance(source, str) else f", {_scalar(source)}"
    said = "restated " + step if data.get("restated") else step
    values = data.get("values")
    return f"{said}: {', '.join(values)}" if isinstance(values, dict) and values else said


def _writes_hint(data: dict[str, Any]) -> str:
    """A LangGraph task's writes: the task (a node run as a step's pull task by its name, any
    other by its path, or its id) and the channels it writes, each once, in the order written."""
    task = str(data.get("task_path") or data.get("task_id")).removeprefix("~__pregel_pull, ")
    writes = data.get("writes")
    named = (w.get("channel") for w in writes if isinstance(w, dict)) if isinstance(writes, list) else ()
    channels = dict.fromkeys(c if isinstance(c, str) else _scalar(c) for c in named)  # (only a hand-written one is no text)
    return f"task {task}: {', '.join(channels)}" if channels else f"task {task}"


def _scalar(value: Any) -> str:
    """A metadata value in one log line: JSON for a scalar, `{…}` or `[…]` for what nests."""
    if isinstance(value, dict):
        return "{…}"
    if isinstance(value, list):
        return "[…]"
    return json.dumps(value, ensure_ascii=False)


def counted(count: int, noun: str) -> str:
    """A count and its noun, the noun singular for one: `1 thread`, `2 threads`, `0 threads`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _short(text: str, width: int = 60) -> str:
    """`text` on one line (each run of whitespace one space), cut to `width` characters, the
    last of them `…`, when longer: how every one-line view shows a title or a message."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def ls_lines(entries: Iterable[dict[str, Any]], orphaned: Container[str] = ()) -> Iterator[str]:
    """`threadlog ls`: one aligned row per thread (entries as `ls --json` prints them). The
    widths are every row's, so every entry is read before the first line is given; what is
    kept of each meanwhile is its cells, escaped, in one string. A fork in `orphaned` (its
    parent's row is gone, or its parent_id names no thread: only raw SQL does either) says its
    parent is not in the file, as `tree` does: listed as any fork, it read as whole."""
    header = ("id", "kind", "forked from", "msgs", "last activity", "title")
    # Measured as printed: escaped (a `\u202e` in an id is six characters on the screen).
    widths = [len(name) for name in header[:-1]]
    rows = []
    for e in entries:
        parent = "-" if e["parent_id"] is None else f"{_parent_named(e['parent_id'])} at {e['parent_offset']}"
        if e["id"] in orphaned:
            parent += ", not in the file"
        cells = [safe(cell) for cell in (e["id"], e["kind"], parent, str(e["messages"]), activity_time(e["last_activity"]),
                                         _short(e["title"] or "", 50) or "-")]
        widths = [max(width, len(cell)) for width, cell in zip(widths, cells)]
        # Joined by U+0000, which an escaped cell never holds: a tuple of six strings held three
        # times the memory (202,000 rows of `ls --all`).
        rows.append("\0".join(cells))

    def line(cells: Sequence[str]) -> str:
        padded = [c.rjust(w) if i == 3 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join([*padded, cells[-1]]).rstrip()

    yield line(header)
    for row in rows:
        yield line(row.split("\0"))


def _parent_named(parent_id: str) -> str:
    """A fork's parent as `ls` and `tree` print it: its id, or '' for the empty id only raw SQL
    gives a row (printed as nothing, it read as a root's `-`, or as no word at all)."""
    return parent_id or "''"


def activity_time(time: str) -> str:
    """An event's time as `ls` (and the web viewer's thread list) shows it: in UTC to the second
    when it names its zone (an imported event's `occurred_at` may name any, `+05:30`, `-0800`),
    else cut to the second as written. Not escaped: each caller escapes for where it shows it."""
    try:
        named = datetime.fromisoformat(time)
        when = named.astimezone(timezone.utc) if named.tzinfo is not None else None  # naive: not the machine's zone
    except ValueError:  # not a time
        when = None
    except OverflowError:  # past the years 1..9999 once in UTC: in its own zone, named
        return named.isoformat(" ", "seconds")
    if when is None:
        return time[:19].replace("T", " ")
    return f"{when.year:04d}-{when:%m-%d %H:%M:%S}"  # %Y leaves a year below 1000 unpadded


_DEEP = 20  # levels of a fork tree indented in full


def tree_lines(threads: Sequence[ThreadInfo], titles: dict[str, str | None] | None = None,
               agents: dict[str, SubAgent] | None = None) -> Iterator[str]:
    """The fork tree of the given threads, roots first, children by creation order, with
    each thread's title when `titles` gives it, and a sub-agent fork's agent, call and
    directive when `agents` does (`listing.sub_agents`)."""
    known = {t.id for t in threads}
    kids: dict[str | None, list[ThreadInfo]] = {}
    for info in threads:
        parent = info.parent_id if info.parent_id in known else None
        kids.setdefault(parent, []).append(info)

    # Depth first with a stack of (thread, prefix, last, root), not recursion: a chain of
    # 1,000 forks of forks passed Python's recursion limit.
    stack = [(root, "", True, True) for root in reversed(kids.get(None, []))]
    while stack:
        info, prefix, last, root = stack.pop()
        title = _short((titles or {}).get(info.id) or "", 50)  # of whitespace alone: none, as `ls` shows it
        label = f"{info.id}  {info.kind}, {counted(info.head, 'event')}" + (f"  {title}" if title else "")
        agent = sub_agent_details((agents or {}).get(info.id))
        if root and info.parent_id is not None:  # its parent's row is gone (raw SQL): no tree holds it
            yield f"⑃ {label}, forked at {info.parent_offset} from {_parent_named(info.parent_id)}, which is not in the file{agent}"
        elif root:
            yield label
        else:
            # Deeper than _DEEP levels the lines' width stays bounded (300 forks of forks made
            # lines of 963 characters): the depth is written, then the last levels' rails.
            shown = prefix if len(prefix) <= 3 * _DEEP else f"({len(prefix) // 3 + 1} deep) {prefix[-3 * (_DEEP - 5):]}"
            yield f"{shown}{'└─ ' if last else '├─ '}⑃ {label}, forked at {info.parent_offset}{agent}"
        children = kids.get(info.id, [])
        inner = prefix if root else prefix + ("   " if last else "│  ")
        stack.extend((child, inner, i == len(children) - 1, False) for i, child in reversed(list(enumerate(children))))


def sub_agent_details(agent: SubAgent | None) -> str:
    """What `tree` (and the web viewer's fork tree) adds to a sub-agent fork's line: its agent
    and the call that started it and, where it names no agent, its directive (a fan-out's forks
    have the call and the parent in common), each on one line and cut as a title is (an
    imported file or a caller wrote them); one of whitespace alone is none. A redacted
    directive shows as such."""
    if agent is None:
        return ""
    named = _short(agent.agent_id or "", 40)
    shown = [("agent", named), ("call", _short(agent.tool_use_id or "", 40))]
    if not named:
        directive = _short(agent.directive or "", 50)
        shown.append(("directive", f'"{directive}"' if directive else "[redacted]" if agent.directive_redacted else ""))
    return "".join(f", {noun} {value}" for noun, value in shown if value)


def row_line(row: Row) -> str:
    """One human-readable line for a row (what `threadlog rows` prints)."""
    if row.kind == "text":
        body = f"{row.role} (injected by {row.injected_by}): {row.text}" if row.injected_by else f"{row.role}: {row.text}"
    elif row.kind == "tool_call":
        args = json.dumps(row.input, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        body = f"→ {row.name}({args}) [{row.status}]"
    elif row.kind == "tool_result":
        body = f"← result for {row.tool_use_id}: {row.status}"
    elif row.kind == "thinking":
        body = "… thinking (collapsed)"
    elif row.kind == "run":
        body = f"run {row.status}" + (f": {row.text}" if row.text else "")
    elif row.kind == "refusal":
        body = f"{row.role}: {_refusal(row.text or '')}"
    elif row.kind == "cut_short":
        body = f"{row.role}: ({row.text})"
    elif row.kind == "interrupt":
        said = row.answer if row.status == "resolved" else row.reason
        body = f"? {row.text or row.interrupt_id} [{row.status}]"
        if said is not None:
            body += " " + (said if isinstance(said, str) else json.dumps(said, ensure_ascii=False, sort_keys=True))
    else:
        body = row.text or f"[{row.kind}]"
    return f"{row.offset:>6}  {row.kind:<11} {_short(body, 100)}"


def _text_of(content: list[dict[str, Any]]) -> str:
    parts = []
    for block in content:
        kind = block.get("type")
        parts.append(block.get("text", "") if kind == "text" else f"[{kind} {block.get('name', '')}]".replace(" ]", "]"))
    return " ".join(parts)


def _refusal(said: str) -> str:
    """A refusal as `show` and `rows` word it, from the category and explanation it gave."""
    return f"(refused: {said})" if said else "(refused)"


def _message_lines(content: list[dict[str, Any]], refused: str | None, cut: str | None = None, width: int = 70) -> list[str]:
    """A message in lines of `width` characters (`show`, `diff`): its text on one, then, for an
    answer the model refused (`refused`: `Message.refusal`), the refusal, or for one it did not
    end whole (`cut`: `Message.cut_short`), why it stopped. That mark is never cut: one that
    fits beside the text, or in its share of the line (half of it for a refusal, all but 20
    characters for why it stopped), ends the line, the text cut to make room (one cut at the width read as a whole
    answer); a longer one follows whole on lines of its own, wrapped at the width. Each line is
    one line: a run of whitespace, a line break too, is one space."""
    text = _text_of(content)
    said = _refusal(refused) if refused is not None else f"({cut})" if cut is not None else None
    if said is None:
        return [_short(text, width)]
    said, text = " ".join(said.split()), " ".join(text.split())
    if len(text) + len(said) < width or len(said) <= (width if not text else width // 2 if refused is not None else width - 21):
        return [" ".join(part for part in (_short(text, width - len(said) - 1), said) if part)]
    return [line for line in (_short(text, width),) if line] + _wrapped(said, width)


def _wrapped(text: str, width: int) -> list[str]:
    """`text` (one line) in lines of `width` characters at most, broken at spaces (a word longer
    than the width is broken where it reaches it)."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        while len(word) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + ([line] if line else [])


def state_lines(state: ThreadState, last: int | None = None) -> Iterator[str]:
    """`threadlog show`: the state's fields, then its model view one message a line (only the
    `last` N messages when given); an answer the model refused, or did not end whole, says so
    after its text, if any."""
    origin = f"fork of {state.parent_id} at {state.parent_offset} ({state.kind})" if state.parent_id else "root thread"
    yield f"thread      {state.id}  {origin}"
    if state.directive:  # a sub-agent's task, what sets it apart from its siblings
        yield f"directive   {_short(state.directive, 100)}"
    yield f"title       {_short(state.title or '', 100) or '-'}"
    yield f"model       {_short(state.model or '', 100) or '-'}"
    system = state.system if isinstance(state.system, str) or state.system is None else _text_of(state.system)
    yield f"system      {_short(system or '', 100) or '-'}"
    if state.thinking:
        yield f"thinking    {json.dumps(state.thinking, sort_keys=True)}"
    if state.settings:
        yield from _keyed_lines("settings", state.settings)
    yield f"status      {state.status}   length {state.length}   head {(state.head_hash or '-')[:12]}"
    if state.last_run is not None:
        run = state.last_run
        error = f": {run['error']}" if run.get("error") else ""
        yield "last run    " + _short(f"{run.get('status')} at offset {run['offset']} (run_id {run.get('run_id')}){error}", 100)
    yield f"context     {state.context}   retrieval {state.retrieval}"
    yield from _keyed_lines("metadata", state.metadata)
    yield from _field_lines("todos", [_short(_todo(todo), 100) for todo in state.todos])
    pending = ", ".join(f"{i['interrupt_id']} ({_short(i.get('question') or '', 60) or '-'})" for i in state.pending_interrupts)
    yield f"interrupts  {pending or '-'}" + (f"   demoted: {', '.join(state.demoted_interrupts)}" if state.demoted_interrupts else "")
    if state.compaction:
        yield f"compaction  at {state.compaction['offset']}, summarises offsets below {state.compaction['through_offset']}"
    view = state.view  # with `last`, only those are decoded
    shown = view[:] if last is None else view[-last:]
    more = f", the last {len(shown)} shown" if len(shown) < len(view) else ""
    yield f"messages    {len(view)} in the model view{more}"
    for message in shown:
        label = message.role if message.kind == "message" else f"{message.role}/{message.kind}"
        first, *below = _message_lines(message.content, message.refusal, message.cut_short)
        yield f"  {message.offset:>6}  {label:<15} {first}"
        yield from (" " * 26 + line for line in below)


def _todo(todo: dict[str, Any]) -> str:
    """A todo as `show` writes it: its status first when it has one (`[completed] pack`), so a
    done one does not read as one still to do."""
    status = todo.get("status")
    return f"[{status}] {todo.get('content', '')}" if status else str(todo.get("content", ""))


def _keyed_lines(label: str, values: dict[str, Any]) -> Iterator[str]:
    """`show`'s lines for a map a caller writes (settings, metadata): a key and its value as
    JSON a line, each cut as the title is (one value of 10 MB was one line): --json has them whole."""
    return _field_lines(label, [_short(f"{_key(key)} {json.dumps(value, ensure_ascii=False)}", 100)
                                for key, value in sorted(values.items())])


def _key(key: str) -> str:
    """A key as `show` writes it before its value: bare, unless it would read as another (empty,
    holding a space, or starting with a quote), then as JSON: `"" 1`, `"a b" 2`."""
    return json.dumps(key, ensure_ascii=False) if not key or key.startswith('"') or any(c.isspace() for c in key) else key


def _field_lines(label: str, lines: list[str]) -> Iterator[str]:
    """`lines` under `label` in `show`'s first column, the label on the first ("-" for none)."""
    for index, line in enumerate(lines or ["-"]):
        yield (f"{label:<12}" if index == 0 else " " * 12) + line


def blame_line(entry: BlameEntry) -> str:
    where = "inherited" if entry.inherited else "own"
    return (f"{entry.index:>4}  {entry.role:<9} {entry.kind:<9} {entry.stream_id:<16} offset {entry.offset:<6} "
            f"position {entry.position:<8} {entry.time}  {_short(entry.actor or '', 40) or '-'}  {entry.origin}  {where}")


def diff_lines(result: Diff) -> Iterator[str]:
    if result.common_ancestor is None:
        yield "no common history"
    else:
        yield f"common history: offsets 0..{result.fork_offset - 1} (last shared event in {result.common_ancestor})"
    for side, label in ((result.a, "a"), (result.b, "b")):
        yield f"{label}: {side.thread}, {len(side.messages)} message(s) of its own"
        for index, message in enumerate(side.messages):
            first, *more = _message_lines(message["content"] or [], refusal(message), side.cut_short(index))
            yield f"  {message['offset']:>6}  {message['role']:<9} {first}"
            yield from (" " * 20 + line for line in more)


def check_line(check: RequestCheck) -> str:
    """`threadlog request --check`: one line per recorded request."""
    state = "ok" if check.ok else "MISMATCH"
    digest = (check.recorded or "-")[:19]
    return f"{state:<8}  offset {check.offset:<6} {digest}  {check.request_id or '-'}  {check.reason}"


def usage_lines(rows: Sequence[Usage], total: Usage) -> Iterator[str]:
    """`threadlog usage`: one aligned row per thread of the subtree (indented by depth), then the total."""
    top = rows[0].depth if rows else 0
    # "answers", not "msgs": `ls` heads its count of every message so (`messages` in --json, as the library names it).
    header = ("thread", "kind", "answers", "input", "output", "cache read", "cache write", "cached")
    table = [header]
    for row in [*rows, total]:
        # At most one level a row: a depth altered by hand (verify names it) may be any integer.
        label = ("  " * min(row.depth - top, len(rows)) + row.thread) if row is not total else "total"
        table.append((safe(label), safe(row.kind), str(row.messages), f"{row.input_tokens:,}", f"{row.output_tokens:,}",
                      f"{row.cache_read_input_tokens:,}", f"{row.cache_creation_input_tokens:,}", f"{row.cached_share:.0%}"))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]  # measured as printed (escaped)
    for r in table:
        cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1])] + [c.rjust(w) for c, w in zip(r[2:], widths[2:])]
        yield "  ".join(cells).rstrip()


def usage_left_out(rows: Sequence[Usage]) -> Iterator[str]:
    """`threadlog usage`'s word on stderr, a line per thread whose answers hold token counts the
    totals leave out (`Usage.left_out`): the table alone passed for whole."""
    for row in rows:
        if row.left_out:
            some, it = ((f"{row.left_out:,} answers' usages hold token counts that are", "them") if row.left_out > 1
                        else ("1 answer's usage holds a token count that is", "it"))
            yield safe(f"not counted: thread {row.thread}: {some} no whole number from 0 to 2**63 - 1; the totals leave {it} "
                       f"out (the log keeps {it} as recorded: {command_line('threadlog show', [row.thread])})")


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def hit_line(hit: SearchHit) -> str:
    """One search hit: thread, offset, who or what, tool, then the snippet on the same line
    (line breaks and control characters made spaces, so no text can move the cursor)."""
    who = hit.role or hit.kind
    what = hit.kind if hit.kind != "text" else ""
    if hit.tool:
        what = f"{what} {_short(_UNPRINTABLE.sub(' ', hit.tool), 80)}".strip()
    snippet = " ".join(_UNPRINTABLE.sub(" ", plain(hit.snippet)).split())
    title = _short(_UNPRINTABLE.sub(" ", hit.title or ""), 40)
    title = f" ({title})" if title else ""
    # The whole id, which a THREAD argument takes: ids may share any prefix (a cut one was ambiguous).
    return f"{hit.thread}{title} @{hit.offset} {who}{' ' + what if what else ''}: {snippet}"
