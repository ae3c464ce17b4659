"""The Jinja environment: the templates, their filters, and the links between pages.

Autoescaping is on for every template: a stored string is text unless it goes through
`markdown` (rendered and sanitised). Links carry thread ids in the query string, quoted,
so an id with `/`, `?` or `<` in it is still one id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape

from .markdown import render_markdown

TEMPLATES = Path(__file__).resolve().parent / "templates"


def link(path: str, **params: Any) -> str:
    """A URL of the viewer: `path` with its query (None values left out)."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{path}?{query}" if query else path


def _short(value: str | None, size: int = 16) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= size else text[: size - 1] + "…"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"], default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["markdown"] = render_markdown
    env.filters["short"] = _short
    env.filters["pretty"] = _pretty
    env.globals["link"] = link
    return env
