"""What an import did: the counts the command prints and `--json` returns."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .lines import BadLine


# The characters of a skipped kind's name shown: a line or block type is the file's text, and
# a hostile one may be megabytes.
KIND_SHOWN = 100


@dataclass
class ImportSummary:
    """Counts over every file an import read.

    `threads`, `forks` and `subagents` count the streams the files hold (created now or
    by an earlier import); `added` counts events written now, so a re-import reports 0.
    `skipped` counts lines that became no event, by line type (`progress`, `system/…`,
    `file-history-snapshot`, …), plus `malformed` lines skipped on request; `bad` names
    each of those (file, line, why). `waiting` counts the files of a session still being written
    that do not show complete yet (a last response, a sub-agent's file), left for a later
    import, and `waiting_files` names each once.
    `failed_turns` counts model calls the source shows aborted or failed before they gave
    anything, each recorded as a run that ended so (pi's).
    `changed` counts events already stored whose content the source now gives otherwise (an
    edited file), and `changed_lines` names their source lines (file, line): they are kept
    as stored, since the log is never rewritten. `gone` counts events already stored that the
    source no longer gives at all (a file cut shorter, or an older copy): kept as stored too.
    `cycles_cut` names each line (file, line) where a cycle of parents was cut (a line whose
    chain of parents comes back to it: an edited or corrupted file), taken as the start of a
    thread: the file's, so named at each import of it, whatever the store holds.
    `self_parents` names each pi entry (file, line) naming itself as its parent (a cycle of
    one), taken as following the entry before it, as one naming an entry the file does not
    hold is: named at each import too.
    """

    files: int = 0
    threads: int = 0
    forks: int = 0
    subagents: int = 0
    prompts: int = 0
    assistant_messages: int = 0
    tool_calls: int = 0
    compactions: int = 0
    failed_turns: int = 0
    events: int = 0
    added: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    bad: list[tuple[str, int, str]] = field(default_factory=list)
    thread_ids: list[str] = field(default_factory=list)
    waiting: int = 0
    waiting_files: list[str] = field(default_factory=list)
    changed: int = 0
    changed_lines: list[tuple[str, int]] = field(default_factory=list)
    gone: int = 0
    cycles_cut: list[tuple[str, int]] = field(default_factory=list)
    self_parents: list[tuple[str, int]] = field(default_factory=list)

    def merge(self, other: ImportSummary) -> None:
        """Add `other`'s counts, skipped and bad lines and thread ids to this summary's."""
        for name in ("files", "threads", "forks", "subagents", "prompts", "assistant_messages", "tool_calls", "compactions",
                     "failed_turns", "events", "added", "changed", "gone"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.skipped.update(other.skipped)
        self.bad.extend(in_line_order(other.bad))
        self.thread_ids.extend(other.thread_ids)
        for file in other.waiting_files:
            self.wait(file)
        self.changed_lines.extend(other.changed_lines)
        self.cycles_cut.extend(other.cycles_cut)
        self.self_parents.extend(other.self_parents)

    def wait(self, file: str) -> None:
        """Count `file`, which does not show complete yet, as left for a later import: once, however
        many of its parts wait (a sub-agent's last response, and its session not naming it yet)."""
        if file not in self.waiting_files:
            self.waiting += 1
            self.waiting_files.append(file)

    def kinds(self) -> list[tuple[str, int]]:
        """The kinds `skipped` counts (none counted 0: a summary line that became a title), in
        order, each name cut to `KIND_SHOWN` characters (the counts of names cut alike added)."""
        out: Counter[str] = Counter()
        for kind, n in self.skipped.items():
            if n:
                out[kind if len(kind) <= KIND_SHOWN else kind[:KIND_SHOWN - 1] + "…"] += n
        return sorted(out.items())

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON-ready dict (as `--json` prints it)."""
        return {
            "files": self.files,
            "threads": self.threads,
            "forks": self.forks,
            "subagents": self.subagents,
            "prompts": self.prompts,
            "assistant_messages": self.assistant_messages,
            "tool_calls": self.tool_calls,
            "compactions": self.compactions,
            "failed_turns": self.failed_turns,
            "events": self.events,
            "added": self.added,
            "skipped": dict(self.kinds()),
            "bad": [{"file": f, "line": n, "why": why} for f, n, why in self.bad],
            "thread_ids": self.thread_ids,
            "waiting": self.waiting,
            "waiting_files": self.waiting_files,
            "changed": self.changed,
            "changed_lines": [{"file": f, "line": n} for f, n in self.changed_lines],
            "gone": self.gone,
            "cycles_cut": [{"file": f, "line": n} for f, n in self.cycles_cut],
            "self_parents": [{"file": f, "line": n} for f, n in self.self_parents],
        }


def in_line_order(bad: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """`bad` lines (file, line, why) with each file's in line order, the files in the order
    they came: a file is checked in passes (each line's JSON, then each record's shape), and
    `skipped F:13`, `F:15`, `F:10` read as if the import had gone back."""
    files: dict[str, int] = {}
    for file, _, _ in bad:
        files.setdefault(file, len(files))
    return sorted(bad, key=lambda one: (files[one[0]], one[1]))


def note_written(error: BaseException, before: ImportSummary, sources: str, partly: tuple[str, int] | None = None,
                 refused: bool = False) -> None:
    """Tell, on `error` (a refused session or file, a Ctrl-C), what the `sources` before it
    ("3 session(s)") wrote, and `partly` (the source it stopped in, and the events its writes
    committed): each is written in its own transactions, so that stays, and a refusal naming
    only the bad line, or `interrupted` alone, read as if nothing had been imported. A write
    the store `refused` says "nothing was written" of itself: those of `partly` came before it."""
    kept = [f"the {sources} before it were imported ({before.added} event(s) added)"] if before.added else []
    if partly is not None and partly[1]:
        kept.append(f"{partly[1]} event(s) of {partly[0]} were written" + (" before it" if refused else ""))
    if kept:
        error.add_note(f"{' and '.join(kept)}; importing again adds only what is missing")


def on_bad_line(summary: ImportSummary, skip_bad: bool) -> Callable[[BadLine], None]:
    """What an import does with a line it cannot import: raise it (the import is refused), or
    with `skip_bad` count it as `malformed`, name it in `summary.bad`, and go on without it."""
    def on_bad(error: BadLine) -> None:
        if not skip_bad:
            raise error
        summary.skipped["malformed"] += 1
        summary.bad.append((error.file, error.line, error.why))

    return on_bad
