"""Human-readable lines for the CLI: aligned, short, no Python reprs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from eventstore import RecordedEvent, ThreadInfo


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
    for key in ("title", "run_id", "interrupt_id", "summary", "position"):
        if key in data:
            return _short(f"{key}={data[key]}")
    return ""


def _short(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def tree_lines(threads: Sequence[ThreadInfo]) -> Iterator[str]:
    """The fork tree of the given threads, roots first, children by creation order."""
    known = {t.id for t in threads}
    kids: dict[str | None, list[ThreadInfo]] = {}
    for info in threads:
        parent = info.parent_id if info.parent_id in known else None
        kids.setdefault(parent, []).append(info)

    def walk(info: ThreadInfo, prefix: str, last: bool, root: bool) -> Iterator[str]:
        label = f"{info.id}  {info.kind}, {info.head} events"
        if root:
            yield label
        else:
            yield f"{prefix}{'└─ ' if last else '├─ '}⑃ {label}, forked at {info.parent_offset}"
        children = kids.get(info.id, [])
        inner = prefix if root else prefix + ("   " if last else "│  ")
        for i, child in enumerate(children):
            yield from walk(child, inner, i == len(children) - 1, False)

    for root in kids.get(None, []):
        yield from walk(root, "", True, True)
