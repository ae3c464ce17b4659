"""Live updates: server-sent events carrying the rows of newly committed events.

An open thread page (the latest page, not a replay) connects to `/live?id=T&after=P&from=S`.
The server tails the log as `threadlog follow` does, a few times a second, each time on a
fresh read-only connection, decoding only the events the page shows or is changed by (its
thread's, the forks made from it, its lineage's redactions); when the thread's own stream
gains events (or a fork is made from it) it sends the rendered items from a little before
the first new event to the head (so a tool call answered by the new event changes status
too, and a new fork's card appears where it was made), and the tool calls and interrupts the
new events answer from further back (`REACH`). Items carry the ids of
their rows, so the page's script replaces the ones it has and appends the others. More
than `LIMIT` events at once (an import), or rows past a page's budget (`budget.PAGE_BYTES`),
are not sent as rows: the update carries a link to the latest page instead, which the script
shows in place of the live marker. Each update
names the position it reached (`id:`): a browser reconnecting after a restart of the server
sends it back (`Last-Event-ID`), and the stream goes on from there.

A browser opens six connections to a server at most, so a stream per page left a seventh
visible page (and any other page of the server) waiting. The viewer's pages in one browser
share one stream instead, `/live/log`, which only says when the log moved (its last
position; `static/follow.js` holds it); each page then asks `/live/rows` for its own update,
the same one `/live` sends, in a request that ends at once. `/live` stays for a browser
without shared workers, and for anyone following a thread by hand.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Callable

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from eventstore import RecordedEvent, Store, StoreError, ThreadInfo, ThreadNotFound
from eventstore.backend import EventRow
from eventstore.errors import UNREADABLE, Unreadable, unreadable
from eventstore.recorded import from_row
from projections import Row, display_rows
from projections.dropped import dropped_whole

from .budget import Filled, fill
from .cursor import Cursor, keyed
from .items import Item, row_item_id, thread_items
from .query import LARGEST, thread_param, whole_number
from .render import link, visible
from .viewer import UNAVAILABLE_STATUS, UNREADABLE_STATUS, Unavailable, Viewer, viewer

INTERVAL = 0.25  # seconds between looks at the log
RESTATUS = 20  # events before the first new one that are sent again (their status may have changed)
# How far back from those a tool call or an interrupt that the new events answer is looked for
# (it is sent again, its status changed): a call answered after 25 events of progress stayed
# `pending` on the open page. The page's own start bounds it too. Each update holding an answer
# reads that far: 200 events take about 25 ms, 1,000 about 165 ms (an imported pi session).
REACH = 200
KEEPALIVE = 60  # quiet looks between comment lines that keep the connection open
# The most events one update renders. An import of 30,000 events into an open thread was sent
# as one 20 MB update, 12 s after the append, with the server holding it all in memory.
LIMIT = 200
# The most streams open at once (`/live` and `/live/log` alike): each looks at the log four times
# a second, and a local client opening thousands had the server read the file thousands of times
# a second. A browser shares one stream among its pages; past this, a stream is a 503.
STREAMS = 64


def _poll(view: Viewer, thread: str, position: int, start: int, skip: int = 0) -> tuple[int, str | None]:
    """(the last position seen, the JSON to send or None)."""
    with view.open() as store:
        # The log is read as stored and only what this page shows is decoded: an event of another
        # thread that cannot be read (a row altered outside threadlog) stopped every open page's
        # updates, naming an event none of them shows. One of this thread's stops it, saying so.
        new = list(store.read_all_raw(after=position, limit=1000))
        if not new:
            _check_reached(store, position)
            return position, None
        position = new[-1].position
        own = [from_row(row) for row in new if row.stream_id == thread]
        # A fork made from this thread: its card goes after the event it was forked at.
        offsets = [event.offset for event in own] + _forked_from(store, thread, new)
        redactions = [row for row in new if row.type == "event.redacted"]
        if not offsets and not redactions:
            return position, None
        # Read only when the update may concern the page (its chain of forks is walked): a
        # thread whose first events are gone is refused as its pages are.
        chain = store.ancestry(thread)
        head = chain[0].head
        # A redaction of an event this thread shows (its own or inherited): that row is sent again,
        # erased (its record is appended at the head, far from it; the page kept the old text).
        erased = _erased(store, chain, redactions, start) if redactions else []
        if not offsets and not erased:
            return position, None
        low = min(max(start, min(offsets) - RESTATUS), head) if offsets else head
        if head - low > LIMIT:  # a batch too big to send as rows: the page offers its latest page instead
            return position, _reload(view, store, thread, head, position, erased, start, skip)
        settled = _settled(own)
        reach = max(start, low - REACH) if settled else low
        # The items of the page's first event before `skip` are on the page before it, not this one.
        found = [item for place, item in keyed(thread_items(store, thread, reach, head)) if place >= Cursor(start, skip)]
        # The calls answered and the rows erased from further back go last: the page has them and
        # replaces each where it is, while the script puts a new item after the one sent before it.
        items = [item for item in found if item.offset >= low] + \
                [item for item in found if item.offset < low and (item.offset in erased or _settles(item.row, settled))] + \
                _rows(store, thread, [offset for offset in erased if offset < reach], start, skip)
        # An update within a page's budget, or none: the page offers its latest page instead.
        filled = fill(((item.id, item) for item in items), functools.partial(view.item, thread=thread))
        if filled.rest is not None:
            return position, _reload(view, store, thread, head, position, erased, start, skip)
        resumed = _resumed(store, thread, own, start, {item.id for item in found})
    return position, json.dumps({"head": head, "position": position, "items": _sent(filled), **_erasing(erased),
                                 **({"resumed": resumed} if resumed else {})})


def _forked_from(store: Store, thread: str, new: list[EventRow]) -> list[int]:
    """The offsets of the events of `thread` that forks opened in `new` were made after, as the
    forks' stream rows say (as the page's fork cards read them): each fork's `thread.forked` is
    the first event of its own stream, another thread's, and is not decoded."""
    offsets = []
    for row in new:
        if row.type != "thread.forked" or row.stream_id == thread or row.stream_id.__class__ is not str:
            continue
        try:
            fork = store.thread(row.stream_id)
        except StoreError:  # its stream's row gone or altered: no fork this page can show (its own pages say why)
            continue
        if fork.parent_id == thread and fork.parent_offset is not None:
            offsets.append(fork.parent_offset - 1)
    return offsets


def _check_reached(store: Store, position: int) -> None:
    """Refuse a page that has shown the log past its end: the file it was read from has been
    replaced by one with a shorter log (a restore, a copy). Followed on, it was sent nothing
    until the new log passed that position, then only the events past it, among the rows of
    the old file, while it said it was live."""
    last = store.last_position()
    if position > last:
        raise StoreError(f"the log ends at position {last}, before position {position} this page has shown: "
                         "the database was replaced; reload the page")


def _erased(store: Store, chain: list[ThreadInfo], redactions: list[EventRow], start: int) -> list[int]:
    """The offsets (from `start` on) of the events `redactions` erase that the thread of `chain`
    (its ancestry) shows."""
    # How far this thread shows each stream of its lineage: its own to its head, an
    # ancestor's below the offset its child forked at. A redaction's record follows the event
    # it erased in that event's stream: those of the other streams are not read.
    shown = {info.id: (chain[i - 1].parent_offset if i else info.head) for i, info in enumerate(chain)}
    offsets = set()
    for row in redactions:
        if row.stream_id not in shown:
            continue
        target_position = from_row(row).data.get("position")
        if not isinstance(target_position, int):
            continue
        target = next(store.read_all_raw(after=target_position - 1, limit=1), None)
        if target is None or target.position != target_position or target.stream_id not in shown:
            continue
        target_offset = from_row(target).offset
        if start <= target_offset < (shown[target.stream_id] or 0):
            offsets.add(target_offset)
    return sorted(offsets)


def _rows(store: Store, thread: str, offsets: list[int], start: int, skip: int) -> list[Item]:
    """The items of the events at `offsets` a page from `start` (past its first `skip` items) shows."""
    return [item for offset in offsets for place, item in keyed(thread_items(store, thread, offset, offset + 1))
            if place >= Cursor(start, skip)]


def _sent(filled: Filled[str, Item]) -> list[dict[str, str]]:
    """The rendered items, each with its id as the row's element holds it on the page (`visible`):
    the live script finds the row by it. The rows' HTML is so already (`fill` measures them as shown)."""
    return [{"id": visible(item.id), "html": str(html)} for _, item, html in filled.shown]


def _reload(view: Viewer, store: Store, thread: str, head: int, position: int, erased: list[int], start: int, skip: int) -> str:
    """An update carrying the link to the thread's latest page instead of its new rows, and the
    rows the page shows of the events at the `erased` offsets (within a page's budget): the page
    replaces those."""
    rows = _rows(store, thread, erased, start, skip)
    filled = fill(((item.id, item) for item in rows), functools.partial(view.item, thread=thread))
    return json.dumps({"head": head, "position": position, "items": _sent(filled), "reload": link("/thread", id=thread),
                       **_erasing(erased)})


def _resumed(store: Store, thread: str, own: list[RecordedEvent], start: int, now: set[str]) -> list[str]:
    """The update's `resumed`: the ids of the rows that marked a paused answer (`pause_turn`)
    no message followed, which the first new message took away (the model went on from it).
    The page drops them: it keeps the rows an update does not send. Only the last message
    of the view before the new one can hold such a row; it is found however far back it is
    (progress recorded while the turn waited), on the page (from `start`)."""
    first = next((event.offset for event in own if event.type == "message.appended"), None)
    if first is None or first <= start:
        return []
    last = _last_in_view(store, thread, start, first)
    if last is None:
        return []
    before = display_rows(store, thread, last + 1, start=last, stop=last + 1)  # as of that message, the last then
    return [visible(row_item_id(row)) for row in before if row.kind == "cut_short" and row_item_id(row) not in now]


def _last_in_view(store: Store, thread: str, start: int, stop: int) -> int | None:
    """The offset of the last message in start..stop-1 the view holds (`_last_message`), past
    those a fork after them left out: every block a tool call it dropped (`display_rows`)."""
    end = stop
    while (last := _last_message(store, thread, start, stop)) is not None:
        events = list(store.read(thread, last, end))
        dropped = {call for event in events if event.type == "thread.forked" for call in event.data.get("dropped_tool_use_ids") or []}
        if not dropped_whole(events[0].data.get("content") or [], dropped):
            return last
        stop = last
    return None


def _last_message(store: Store, thread: str, start: int, stop: int) -> int | None:
    """The offset of the last message of `thread` in start..stop-1, or None: read backwards in
    growing spans, as stored (only their types are looked at)."""
    span = RESTATUS + 1
    while stop > start:
        low = max(start, stop - span)
        offsets = [offset for offset, type_, *_ in store.read_raw(thread, low, stop) if type_ == "message.appended"]
        if offsets:
            return int(offsets[-1])
        stop, span = low, span * 2
    return None


def _erasing(erased: list[int]) -> dict[str, list[int]]:
    """The update's `erased`: the offsets of the events a redaction erased since the page's last
    update. A redacted message keeps one `[redacted]` text block: the page replaced the row of
    its first block and kept its other blocks' rows (their text) and the card of an answer cut
    short or refused (its stop reason, its refusal's words). The page drops its rows of those
    events that the update does not send again."""
    return {"erased": erased} if erased else {}


def _settled(events: list[RecordedEvent]) -> set[tuple[str, str]]:
    """The tool calls (`("tool", id)`) and interrupts (`("interrupt", id)`) these events answer."""
    found: set[tuple[str, str]] = set()
    for event in events:
        if event.type == "message.appended":
            found.update(("tool", str(block.get("tool_use_id"))) for block in event.data.get("content") or []
                         if isinstance(block, dict) and block.get("type") == "tool_result")
        elif event.type in ("interrupt.resolved", "interrupt.cancelled"):
            found.add(("interrupt", str(event.data.get("interrupt_id"))))
    return found


def _settles(row: Row | None, settled: set[tuple[str, str]]) -> bool:
    """Whether `row` is a tool call or an interrupt of `settled`."""
    if row is None:
        return False
    if row.kind == "tool_call":
        return ("tool", str(row.tool_use_id)) in settled
    return row.kind == "interrupt" and ("interrupt", str(row.interrupt_id)) in settled


def _exists(view: Viewer, thread: str, start: int) -> None:
    with view.open() as store:
        head = store.head(thread)
    if start > head:  # the rows from `start` on: none there (a poll then failed mid-stream)
        raise HTTPException(400, f"from {start} is past the thread's {head} events: pass 0..{head}")


def _still_held(view: Viewer, thread: str, start: int) -> None:
    """`_exists` for a file opened again after it could not be, which may be another file now:
    a thread it does not hold, or that holds fewer events than the page starts at, ends the
    page's stream saying so (it said `live` and was sent nothing, for good), as `/live/rows`
    stops a page with a refusal."""
    try:
        _exists(view, thread, start)
    except HTTPException as error:
        raise StoreError(str(error.detail)) from None


def _moved(view: Viewer, position: int) -> tuple[int, str | None]:
    """(the log's last position, the JSON to send or None when it is still `position`)."""
    with view.open() as store:
        last = store.last_position()
    return (position, None) if last == position else (last, json.dumps({"position": last}))


def _why(error: Exception) -> str:
    """What a failed look at the log says to the page: the store's message, not a traceback."""
    return str(unreadable(error))


def _failed(error: Exception) -> str:
    """The event that ends a stream whose look at the log failed: the page stops on it, saying why."""
    return _said("failed", error)


def _said(name: str, error: Exception | None = None) -> str:
    """An event `name` carrying what `error` says (`{}` without one)."""
    return f"event: {name}\ndata: {json.dumps({'error': _why(error)} if error is not None else {})}\n\n"


def _asked(request: Request) -> tuple[str, int, int, int]:
    """(thread, after, from, skip) of a thread page's request for its live rows."""
    thread = thread_param(request)  # none given: a 400 saying what to pass (it was "thread '' not found")
    after, start = whole_number(request, "after") or 0, whole_number(request, "from") or 0
    skip = whole_number(request, "skip") or 0  # the items of event `start` on the page before the open one
    return thread, after, start, skip


class _Counted(StreamingResponse):
    """A live stream, counted in `view.streams` from the check of the count until its response
    ends, however it ends (the client gone before it began included). Counted only once its
    response began, streams asked for all at once each passed the check before any was
    counted: 320 asked together opened 97. The count changes on the event loop's thread alone,
    with no wait between the check and the count, nor between this response made and called."""

    def __init__(self, view: Viewer, content: AsyncIterator[str]) -> None:
        super().__init__(content, media_type="text/event-stream")  # not kept by the browser: `app.NO_STORE`
        self.view = view
        view.streams += 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.view.streams -= 1


def _stream(request: Request, name: str, look: Callable[[int], tuple[int, str | None]], position: int,
            reopened: Callable[[], None] | None = None) -> StreamingResponse:
    """Server-sent events `name`: `look(position)` every `INTERVAL`, on a worker thread, gives
    the position reached and what to send (None: nothing). Ends when the browser leaves or the
    server stops; a look that fails ends it with a `failed` event saying why. A file that
    cannot be opened now (removed, or no database for a while: a 503 to a page) does not end
    it: an `unavailable` event says why, the looks go on, and an `available` event says when
    the file opens again; the page goes on from the update it last took. The file back may be
    another one: `reopened()` checks it still holds what the stream is of before the look."""
    view = viewer(request)
    if view.streams >= STREAMS:
        raise HTTPException(503, f"{STREAMS} live streams are open already; close a page or another client's stream "
                            "and try again", headers={"Retry-After": "5"})

    async def looks() -> AsyncIterator[str]:
        reached, quiet, down = position, 0, False
        yield ": connected\n\n"
        while not view.stopping.is_set() and not await request.is_disconnected():
            try:
                if down and reopened is not None:
                    await run_in_threadpool(reopened)
                reached, payload = await run_in_threadpool(look, reached)
                sent = None if payload is None else f"id: {reached}\nevent: {name}\ndata: {payload}\n\n"
                if down:  # opened again
                    sent, down = _said("available") + (sent or ""), False
            except Unavailable as error:
                sent, down = (None if down else _said("unavailable", error)), True
            except (StoreError, *UNREADABLE) as error:
                yield _failed(error)
                return
            if sent is not None:
                yield sent
                quiet = 0
            else:
                quiet += 1
                if quiet >= KEEPALIVE:
                    yield ": still here\n\n"
                    quiet = 0
            await asyncio.sleep(INTERVAL)

    return _Counted(view, looks())


async def events(request: Request) -> StreamingResponse:
    """`/live`: one thread page's own stream of updates."""
    view = viewer(request)
    thread, after, start, skip = _asked(request)
    # A browser reconnecting (the server restarted) sends the position of the last update it
    # got: what the page received live before is not sent again.
    resumed = request.headers.get("last-event-id", "")
    if resumed.isascii() and resumed.isdigit() and len(resumed) <= 19 and int(resumed) <= LARGEST:
        after = max(after, int(resumed))
    try:
        await run_in_threadpool(_exists, view, thread, start)  # ThreadNotFound: a 404 page, not an empty stream
    except ThreadNotFound:
        raise
    except Unavailable:
        pass  # the file cannot be opened now (removed, or no database for a while): the stream says so, and looks on
    except (StoreError, *UNREADABLE) as error:  # an event that cannot be read: a stream saying so, which the page stops on
        return StreamingResponse(iter([_failed(error)]), media_type="text/event-stream")
    return _stream(request, "rows", lambda position: _poll(view, thread, position, start, skip), after,
                   functools.partial(_still_held, view, thread, start))


async def log(request: Request) -> StreamingResponse:
    """`/live/log`: the log's last position, sent when it changes (first at once), for all the
    pages of a browser to share."""
    view = viewer(request)
    return _stream(request, "moved", lambda position: _moved(view, position), -1)


async def rows(request: Request) -> Response:
    """`/live/rows`: a thread page's update since `after`, as `/live` would send it next, or only
    the position reached when there is none; `{"error": ...}` when the log cannot be read,
    opened or not (the page stops on it, where an error page it cannot read is asked again; a
    503, a file it cannot open now, it says and asks again, less often the longer it lasts)."""
    view = viewer(request)
    thread, after, start, skip = _asked(request)
    try:
        await run_in_threadpool(_exists, view, thread, start)
        position, payload = await run_in_threadpool(_poll, view, thread, after, start, skip)
    except ThreadNotFound:  # a 404 page: the page stops on any refusal (4xx)
        raise
    except (StoreError, *UNREADABLE) as error:  # 503: the file cannot be opened now; 409: an event cannot be read
        status = UNAVAILABLE_STATUS if isinstance(error, Unavailable) else \
            UNREADABLE_STATUS if isinstance(unreadable(error), Unreadable) else 500
        return JSONResponse({"error": _why(error)}, status_code=status)
    return Response(payload or json.dumps({"position": position}), media_type="application/json")
