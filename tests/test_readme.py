"""The README's Python examples run as written, and its commands name real CLI commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from threadlog.cli import cli

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```python\n(.*?)```", README, flags=re.S)


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_python_examples_run(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})


def test_documented_commands_exist() -> None:
    used = set(re.findall(r"^\s*(?:\w+=\$\()?threadlog ([\w-]+)", README, flags=re.M))
    assert used and used <= set(cli.commands), used - set(cli.commands)
