"""What commands print besides lines of text (`threadlog.output`): JSON on stdout, escaped
as every line is, and a progress bar on stderr when it is a terminal."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

import click

from ..render import safe_json


def _json(value: Any, indent: int | None = None) -> str:
    """`value` as JSON for stdout: UTF-8 text kept, what a terminal would obey escaped."""
    return safe_json(json.dumps(value, ensure_ascii=False, indent=indent))


def _emit_json(value: Any) -> None:
    click.echo(_json(value, indent=2))


def _emit_json_array(items: Iterable[Any]) -> None:
    """`_emit_json(list(items))`, byte for byte, printed as the items come (for long streams).

    Reading an item can fail once others are printed (a row altered outside threadlog, a
    Ctrl-C): the array is left unclosed, so no JSON reader takes the cut output for a whole
    one, and the error's message says so, with how many rows stdout holds."""
    opening, printed = "[", 0
    try:
        for item in items:
            body = _json(item, indent=2).replace("\n", "\n  ")
            click.echo(f"{opening}\n  {body}", nl=False)
            opening, printed = ",", printed + 1
    except BaseException as error:
        if printed:
            rows = "1 row" if printed == 1 else f"{printed} rows"
            error.add_note(f"the listing is incomplete: the JSON array on stdout holds the {rows} printed before this "
                           "error, left unclosed")
        raise
    click.echo("[]" if opening == "[" else "\n]")


def _progress(total_label: str) -> Any:
    """A progress bar on stderr when it is a terminal, else nothing."""
    if not sys.stderr.isatty():
        return None, None
    bar = click.progressbar(length=1, label=total_label, file=sys.stderr)

    def update(done: int, total: int) -> None:
        bar.length = total
        bar.update(done - bar.pos)
        if total == 0:  # nothing to do is all done, but click takes no step of 0 and leaves such a bar at 0%
            bar.finished = True
            bar.render_progress()

    return bar, update
