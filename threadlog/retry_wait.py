"""A server's asked wait before a retry, waited at most `LONGEST` seconds.

The installed anthropic SDK waits as long as a 408, 409, 429 or 5xx answer's `retry-after`
(or `retry-after-ms`) says, up to 49 days, and says nothing meanwhile: a gateway answering 529
with `retry-after: 86400` held `threadlog ask` a day before its retry. `refuse_long_waits`, a
response hook of the client `ask` and `rerun` make, marks an answer asking for a longer wait
not to be retried (`x-should-retry: false`, which the SDK obeys before anything else), so the
try fails at once; `said` names the wait in the turn's error, for the user to ask again after it.

A live turn leaves the client a library caller gives it as it is (its retries and waits are
the caller's to choose): `refuse_long_waits` is public, for the caller's own client to take in
one line, as the README's live-turn example shows.
"""

from __future__ import annotations

import email.utils
import math
import time
from typing import Any

# Seconds: the most of a server's asked wait that is waited (what earlier SDKs honoured at most).
LONGEST = 60.0
# Seconds: an asked wait from which the error says "for ever" instead of a number.
_ENDLESS = 1e12


def asked_wait(headers: Any) -> float | None:
    """The seconds an answer's headers ask to wait before a retry, read as the SDK reads them
    (`retry-after-ms`, then `retry-after` as seconds or as a date); None when they ask none,
    and endless for a date past the calendar's end (the SDK's own reading of it raises)."""
    try:
        return float(headers.get("retry-after-ms")) / 1000
    except (TypeError, ValueError):
        pass
    after = headers.get("retry-after")
    try:
        return float(after)
    except (TypeError, ValueError):
        pass
    date = email.utils.parsedate_tz(after) if isinstance(after, str) else None
    if date is None:
        return None
    try:
        return float(email.utils.mktime_tz(date) - time.time())
    except (ValueError, OverflowError):
        # A date `parsedate_tz` reads and no calendar holds (year 99999): raised in the response
        # hook, it failed every answer carrying it, a 200 too, and the SDK sent the request again.
        return math.inf


def _too_long(headers: Any) -> float | None:
    wait = asked_wait(headers)
    return wait if wait is not None and not math.isnan(wait) and wait > LONGEST else None


def refuse_long_waits(response: Any) -> None:
    """An httpx response hook: an answer asking for a wait over `LONGEST` is not retried, so the
    try fails at once and a live turn's error names the wait. A client takes it so:
    `anthropic.Anthropic(http_client=anthropic.DefaultHttpxClient(event_hooks={"response": [refuse_long_waits]}))`."""
    if _too_long(response.headers) is not None:
        response.headers["x-should-retry"] = "false"


def said(response: Any) -> str | None:
    """The wait an answer asked for, when over `LONGEST`, as the turn's error says it; else None."""
    wait = _too_long(getattr(response, "headers", {}))
    if wait is None:
        return None
    # Past 31,000 years (and long before a float's whole digits end, at 2**53 s: a retry-after of
    # 10**23 printed as 99,999,999,999,999,991,611,392 s) the wait is endless to anyone reading it.
    shown = f"{wait:,.0f} s" if wait < _ENDLESS else "for ever"
    return (f"the API asked to wait {shown} before trying again (retry-after), longer than the {LONGEST:.0f} s a turn "
            "waits: ask again after that")
