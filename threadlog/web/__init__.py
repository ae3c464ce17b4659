"""`threadlog serve`: a local, read-only web viewer over the library's calls.

Server-rendered pages (Starlette, Jinja2), one small static script as progressive
enhancement, no CDN: it works offline and without JavaScript (the live updates excepted).
Every stored string is untrusted: templates escape, Markdown is sanitised (`markdown.py`)
and every response carries a Content-Security-Policy that forbids inline script. Requests
another site's page makes the browser send are refused (`origin.py`).
"""

from .app import create_app

__all__ = ["create_app"]
