"""A fuzzer of the importers: a real session file with one to three of its JSON values replaced
by a value of another type (a list, an object, a number, null, a bool, a huge or hostile string,
a deeply nested value), imported through the CLI and the library.

What a user relies on, whatever the file holds: the import succeeds (a line it cannot read
counted as skipped, by file and line), or it is refused in one `error:` line naming the file
(and, for a file of lines, the line), with exit status 1 and the database exactly as it was.
Never a traceback, never a refusal blaming the store. The threads an import wrote read back
(`show`, `rows`, `transcript`, `request --check`) without a traceback either.

`run(cases, seed)` returns the failures found; `tests/test_import_fuzz.py` runs a bounded number.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from threadlog import Store, StoreError, export_all, import_claude_code, import_event_files, import_pi, import_swe_agent
from threadlog.cli import cli
from threadlog.export import dump_lines
from tests.backends import file_dump

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OLD = time.time() - 3600  # a file's time an hour ago: no longer being written
# A refusal that blames the store for what the file holds.
BLAMES_THE_STORE = ("does not have the shape", "bug in threadlog", "altered outside threadlog", "Traceback")


IMPORTERS: dict[str, Any] = {"claude-code": import_claude_code, "pi": import_pi, "swe-agent": import_swe_agent}


@dataclass(frozen=True)
class Sample:
    kind: str  # the `threadlog import` command: claude-code, pi, swe-agent, events
    path: Path  # a file, or a directory (a Claude Code session and its sub-agents)


def fixture_samples() -> list[Sample]:
    """The test fixtures: small real files of each kind."""
    claude = FIXTURES / "claude-code"
    return [
        Sample("claude-code", claude / "-experiments-ideas" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"),
        Sample("claude-code", claude / "-src-deep-manifest" / "a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl"),
        Sample("claude-code", claude / "-src-experiments-claude_p"),
        Sample("claude-code", claude / "dag" / "dag_compact_after_rewind_preserved.jsonl"),
        Sample("pi", FIXTURES / "pi" / "large-session-head.jsonl"),
        Sample("pi", FIXTURES / "pi-failed.jsonl"),
        Sample("pi", FIXTURES / "pi-merged.jsonl"),
        Sample("swe-agent", FIXTURES / "swe-agent" / "function_calling_simple.traj"),
        Sample("swe-agent", FIXTURES / "swe-agent" / "warmup.traj"),
    ]


def _hostile_string(rng: random.Random) -> str:
    return rng.choice([
        "", " ", "x" * rng.choice([10_000, 300_000]), "\x1b[31mred\x1b[0m\u202egnp.exe", "\ud800", "\x00\x07\r",
        "null", "true", "0", "[]", "{}", "2025-13-45T99:99:99Z", "../../etc/passwd", "toolu_" + "9" * 40,
    ])


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


def hostile_value(rng: random.Random, old: Any) -> Any:
    """A value of another type than `old` (or a hostile one of its own)."""
    while True:
        value = rng.choice([
            lambda: [], lambda: [1, "a", None], lambda: [{"type": "text"}], lambda: {}, lambda: {"a": [1, {}]},
            lambda: {"type": "text", "text": 5}, lambda: 0, lambda: -1, lambda: 2**70, lambda: 1.5, lambda: 1e308,
            lambda: float("nan"), lambda: float("inf"), lambda: None, lambda: True, lambda: False,
            lambda: _hostile_string(rng), lambda: _deep(rng.choice([40, 200, 5000])),
        ])()
        if type(value) is not type(old) or isinstance(value, str):
            return value


def _paths(value: Any, here: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield here
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*here, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*here, index))


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    holder = document
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return document


def _dumps(value: Any) -> str:
    """JSON of `value`, however deep (`json.dumps` recurses)."""
    try:
        return json.dumps(value)
    except RecursionError:
        return "[" * 100_000 + "]" * 100_000


def mutate(text: str, lines: bool, rng: random.Random) -> tuple[str, str]:
    """`text` with one to three values replaced, and what was replaced (for a failure's report)."""
    said: list[str] = []
    if lines:
        records = text.split("\n")
        numbered = [i for i, line in enumerate(records) if line.strip()]
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            i = rng.choice(numbered)
            try:
                document = json.loads(records[i])
            except RecursionError:  # a value nested deep by an earlier replacement: left as it is
                continue
            path = rng.choice(list(_paths(document)))
            old = document
            for step in path:
                old = old[step]
            new = hostile_value(rng, old)
            records[i] = _dumps(_replace(document, path, new))
            said.append(f"line {i + 1} {list(path)} -> {_dumps(new)[:60]}")
        return "\n".join(records), "; ".join(said)
    document = json.loads(text)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        try:
            path = rng.choice(list(_paths(document)))
        except RecursionError:  # a value nested deep by an earlier replacement: left as it is
            break
        old = document
        for step in path:
            old = old[step]
        new = hostile_value(rng, old)
        document = _replace(document, path, new)
        said.append(f"{list(path)} -> {_dumps(new)[:60]}")
    return _dumps(document), "; ".join(said)


def _copy(sample: Sample, into: Path, rng: random.Random) -> tuple[Path, Path, str]:
    """The sample copied under `into` (its files an hour old), one of its files fuzzed: the path to
    import, the file fuzzed, and what was changed."""
    target = into / sample.path.name
    if sample.path.is_dir():
        shutil.copytree(sample.path, target)
        files = sorted(target.rglob("*.jsonl"))
    else:
        shutil.copy(sample.path, target)
        files = [target]
    fuzzed = rng.choice(files)
    text, said = mutate(fuzzed.read_text(encoding="utf-8"), fuzzed.suffix == ".jsonl", rng)
    fuzzed.write_text(text, encoding="utf-8")
    for path in [target, *target.rglob("*")] if target.is_dir() else [target]:
        os.utime(path, (OLD, OLD))
    return target, fuzzed, said


def _one_error_line(result: Result) -> str | None:
    """What is wrong with a refusal's output, or None."""
    lines = result.stderr.splitlines()
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return f"not one error line: {result.stderr[:500]!r}"
    if any(word in lines[0] for word in BLAMES_THE_STORE):
        return f"blames the store: {lines[0][:500]}"
    return None


def _read_back(db: Path, threads: list[str]) -> list[str]:
    """Read the imported threads back: a refusal is one `error:` line (`request --check` may
    instead report a request that does not rebuild, exit 1), never a traceback."""
    failures = []
    runner = CliRunner()
    commands = [["show", "--no-pager"], ["rows", "--no-pager"], ["transcript", "--no-pager"], ["log", "--no-pager"],
                ["request", "--check"], ["request", "--model", "claude-x"]]
    for thread in threads[:3]:
        for command in commands:
            result = runner.invoke(cli, ["--db", str(db), command[0], thread, *command[1:]])
            name = " ".join(command)
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                failures.append(f"`{name}` raised {type(result.exception).__name__}: {str(result.exception)[:300]}")
            elif result.exit_code not in (0, 1):
                failures.append(f"`{name}` exit {result.exit_code}: {result.output[:300]!r}")
            elif any(word in result.output for word in BLAMES_THE_STORE):
                failures.append(f"`{name}` blames the store: {result.output[:500]}")
            elif result.exit_code == 1 and command != ["request", "--check"] and _one_error_line(result) is not None:
                failures.append(f"`{name}` {_one_error_line(result)}")
    return failures


def _library(sample: Sample, path: Path, db: Path, skip_bad: bool) -> str | None:
    """Import through the library: a refusal is a `StoreError`, anything else a failure."""
    before = file_dump(db)
    try:
        with Store(db) as store:
            if sample.kind == "events":
                import_event_files(store, [path])
            else:
                IMPORTERS[sample.kind](store, [path], skip_bad=skip_bad)
    except StoreError as error:
        if any(word in str(error) for word in BLAMES_THE_STORE):
            return f"library blames the store: {str(error)[:500]}"
        if file_dump(db) != before:
            return "library refusal changed the database"
    except Exception as error:  # noqa: BLE001 - what the fuzzer looks for
        return f"library raised {type(error).__name__}: {str(error)[:300]}"
    return None


def case(sample: Sample, work: Path, seeded: Path, rng: random.Random) -> list[str]:
    """One fuzzed file, imported: the failures found (none when every contract held)."""
    work.mkdir()
    path, fuzzed, said = _copy(sample, work, rng)
    db = work / "t.db"
    shutil.copy(seeded, db)
    skip_bad = sample.kind != "events" and rng.random() < 0.4
    failures: list[str] = []
    before = file_dump(db)
    args = ["--db", str(db), "import", sample.kind, *(["--skip-bad"] if skip_bad else []), str(path), "--json"]
    result = CliRunner().invoke(cli, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        failures.append(f"raised {type(result.exception).__name__}: {str(result.exception)[:300]}")
    elif result.exit_code == 1:
        problem = _one_error_line(result)
        if problem is not None:
            failures.append(problem)
        elif str(fuzzed) not in result.stderr and str(path) not in result.stderr:
            failures.append(f"refusal names no file: {result.stderr[:300]}")
        if file_dump(db) != before:
            failures.append("a refused import changed the database")
    elif result.exit_code == 0 and sample.kind != "events":
        failures.extend(_read_back(db, json.loads(result.stdout)["thread_ids"]))
    elif result.exit_code == 0:
        with Store(db) as store:
            threads = [info.id for info in store.all_threads()]
        failures.extend(_read_back(db, threads))
    else:
        failures.append(f"exit {result.exit_code}: {result.output[:300]!r}")
    library_db = work / "library.db"
    shutil.copy(seeded, library_db)
    problem = _library(sample, path, library_db, skip_bad)
    if problem is not None:
        failures.append(problem)
    return [f"{sample.kind} {fuzzed.name} ({said}){' --skip-bad' if skip_bad else ''} => {f}" for f in failures]


def seeded_dbs(samples: list[Sample], into: Path) -> dict[Sample, Path]:
    """For each sample, a database holding it imported unchanged (the fuzzed file is imported over it)."""
    dbs = {}
    for i, sample in enumerate(samples):
        db = into / f"seed{i}.db"
        copy = into / f"seed{i}"
        copy.mkdir()
        target = copy / sample.path.name
        (shutil.copytree if sample.path.is_dir() else shutil.copy)(sample.path, target)
        for path in [target, *target.rglob("*")] if target.is_dir() else [target]:
            os.utime(path, (OLD, OLD))
        with Store(db) as store:
            if sample.kind != "events":  # an export (`export_samples`) is restored into an empty database
                IMPORTERS[sample.kind](store, [target], skip_bad=True)
        dbs[sample] = db
    return dbs


def export_samples(samples: list[Sample], into: Path) -> list[Sample]:
    """An export (`threadlog export --all`) of each sample's import: `import events` input."""
    exports = []
    for i, sample in enumerate(samples):
        db = into / f"export{i}.db"
        with Store(db) as store:
            IMPORTERS[sample.kind](store, [sample.path], skip_bad=True)
            path = into / f"export{i}.jsonl"
            path.write_text("".join(dump_lines(export_all(store))), encoding="utf-8")
        exports.append(Sample("events", path))
    return exports


def run(cases: int, seed: int, into: Path, samples: list[Sample] | None = None) -> list[str]:
    """`cases` fuzzed imports, each of a sample chosen with `seed`: the failures found."""
    samples = samples or fixture_samples()
    firsts = {s.kind: s for s in reversed(samples) if s.kind in IMPORTERS}  # the first sample of each kind
    samples = [*samples, *export_samples(list(firsts.values()), into)]
    seeded = seeded_dbs(samples, into)
    rng = random.Random(seed)
    failures: list[str] = []
    for n in range(cases):
        sample = rng.choice(samples)
        failures.extend(case(sample, into / f"case{n}", seeded[sample], rng))
    return failures
