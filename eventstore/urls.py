"""Database URLs as messages and pages show them: without their passwords.

No driver is imported here: a page that names a `postgresql://` database (the web viewer's)
needs this whether or not the PostgreSQL backend is installed.
"""

from __future__ import annotations

import re
import urllib.parse


# A `password` parameter of a URL's query (libpq reads any parameter from there).
_PASSWORD_PARAMETER = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)


def _user_part(url: str) -> tuple[str, str, str] | None:
    """A URL's text up to its password, the password, and the rest, the user part found as libpq
    finds it: up to the first `@` before any `/`, whatever urllib would make of the rest (`?`
    and `#` may be in a password, and a bracket left open stops urllib)."""
    scheme, separator, rest = url.partition("://")
    end = next((i for i, c in enumerate(rest) if c in "@/"), len(rest))
    if not separator or end == len(rest) or rest[end] != "@" or ":" not in rest[:end]:
        return None
    colon = rest.index(":")
    return scheme + separator + rest[:colon + 1], rest[colon + 1:end], rest[end:]


def safe_url(url: str) -> str:
    """The URL without its password, for messages: the user part's and a `password` parameter's."""
    found = _user_part(url)
    if found is not None:
        url = found[0] + "***" + found[2]
    return _PASSWORD_PARAMETER.sub(r"\1***", url)


def without_passwords(text: str, url: str) -> str:
    """`text` (a driver's message about `url`, which may quote the URL or a piece of it) with
    every password the URL holds, as written and decoded, replaced by `***`."""
    found = _user_part(url)
    written = [found[1]] if found is not None else []
    written += [value for _, value in _PASSWORD_PARAMETER.findall(url)]
    secrets = {secret for value in written for secret in (value, urllib.parse.unquote(value)) if secret}
    text = text.replace(url, safe_url(url))
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
