"""The pages: threads, a thread (paged display rows), replay, the fork tree, blame, diff.

Each handler opens the store read-only, makes library calls (no SQL here) and renders one
template. Query parameters are checked here; a bad one is a 400 page saying what to pass.
"""

from __future__ import annotations

import functools
import itertools

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from eventstore import Store, StoreError
from eventstore.errors import InvalidEvent
from eventstore.ids import check_id
from eventstore.textindex import MAX_QUERY_CHARS
from projections import Message, diff, search, thread_state
from projections.lineage import DiffSide, iter_blame
from projections.stops import refusal

from ..listing import listing, sub_agents
from ..names import AmbiguousName, Unresolved, resolve
from ..render import sub_agent_details
from .budget import PAGE_BYTES, PAGE_ROWS, fill
from .cursor import Cursor, MessagePage, fill_messages, items_back, items_from
from .graph import layout
from .items import view_start
from .query import thread_param, whole_number
from .render import link
from .viewer import Viewer, viewer

PAGE = 100  # events per thread page, messages per replay or blame page
THREADS = 50  # threads per list page
HITS = 50  # search hits a list page shows
TREE_NODES = 500  # threads a fork tree draws
SHOWN_TODOS = 100  # todos a replay page lists (30,000 of 900 characters made a 28 MB page)
SHOWN_ANCESTORS = 10  # a thread page's lineage: its root and its nearest ancestors (3,000 made 362 kB)


def _canonical(store: Store, request: Request) -> Response | None:
    """A redirect to the same page with full thread ids, when one was given as a unique
    prefix or `@last` (as the CLI takes them); None when every id is already full."""
    params = dict(request.query_params)
    moved = False
    for name in ("id", "a", "b"):
        given = params.get(name)
        if given:
            try:
                params[name] = resolve(store, given)
            except AmbiguousName as error:  # headed "Not found": each match offered instead
                choices = [(link(request.url.path, **{**params, name: match}), match) for match in error.matches]
                return viewer(request).render(request, "error.html", status=300, message=str(error), status_code=300,
                                              choices=choices)
            except Unresolved as error:  # without the command line's advice
                raise HTTPException(404, error.why) from None
            except StoreError as error:
                raise HTTPException(404, str(error)) from None
            moved = moved or params[name] != given
    return RedirectResponse(link(request.url.path, **params), status_code=302) if moved else None


def _earlier(start: Cursor, floor: int = 0) -> tuple[int, Cursor]:
    """The page before one starting at `start`, as (start, stop): it ends where this one
    begins, so paging back from the latest page, which starts anywhere, repeats nothing (the
    first page overlapped the second by up to `PAGE` - 1)."""
    return max(floor, start.entry - PAGE), start


def _page_start(request: Request) -> tuple[int | None, tuple[int, str] | None]:
    """(`before`, and `Store.threads`' `below` or None): where a page of the list starts.
    `before` alone is a position, the page listing the threads last active before it. With
    `last`, the thread the page before ended with, `before` is that thread's last_position,
    and the page lists the threads after it (`below`), where `before` alone skipped the
    threads tied with it (only raw SQL gives threads one position); that position may be 0,
    a row added by hand with no events."""
    last = request.query_params.get("last")
    if not last:
        return whole_number(request, "before", 1), None
    before = whole_number(request, "before")
    if before is None:
        raise HTTPException(400, "last names the thread a page ended with: pass before=ITS_LAST_POSITION with it")
    try:
        return before, (before, check_id("last", last))
    except InvalidEvent as error:
        raise HTTPException(400, f"last {error.why}") from None


def threads_page(request: Request) -> Response:
    """The `ls` list, newest activity first, paged by position; a search box when the index exists.
    A fork whose parent is not in the file (its row deleted, or its parent_id altered, outside
    threadlog: its thread page refuses) says so after its fork point, as `ls` does."""
    view = viewer(request)
    before, below = _page_start(request)
    forks = request.query_params.get("all") == "1"
    query = request.query_params.get("q", "").strip()
    with view.open() as store:
        # One more than shown: whether there are older ones.
        infos = store.threads(THREADS + 1, None if below else before, forks=forks, below=below)
        entries = listing(store, infos[:THREADS])
        orphaned = store.orphaned(infos[:THREADS])  # as `ls` marks them: listed as any fork, one read as whole
        indexed, last = store.index_position(), store.last_position()
        searchable = indexed > 0
        hits, search_error = [], None
        if query:
            try:  # what the index covers: a read-only viewer cannot bring it up to date
                hits = search(store, query, limit=HITS + 1, catch_up=False)  # one more: whether more were found
            except StoreError as error:
                search_error = str(error)
        badge = view.integrity.badge(last)
    more = None
    if len(infos) > THREADS:  # the older page starts below the last thread shown, or after it where the next ties with it
        shown_last, next_one = infos[THREADS - 1], infos[THREADS]
        more = (shown_last.last_position, shown_last.id if next_one.last_position == shown_last.last_position else None)
    return view.render(request, "threads.html", entries=entries, orphaned=orphaned, forks=forks, before=before, more=more,
                       searchable=searchable, query=query, hits=hits[:HITS], more_hits=len(hits) > HITS,
                       search_error=search_error, badge=badge,
                       unindexed=last - indexed if searchable else 0, longest_query=MAX_QUERY_CHARS)


def thread_page(request: Request) -> Response:
    """One page of a thread's display rows: the latest events unless `start` says otherwise
    (and `stop`, the page's end, short of a full page); `at` shows the thread as of its first
    `at` events. A page cut by its budget ends (or, paging back, starts) inside an event:
    `skip` items of event `start` are on the page before, `take` items of event `stop` on this one."""
    view = viewer(request)
    thread = thread_param(request)
    at, start, until = whole_number(request, "at"), whole_number(request, "start"), whole_number(request, "stop")
    skip, take = whole_number(request, "skip") or 0, whole_number(request, "take") or 0
    with view.open() as store:
        if (moved := _canonical(store, request)) is not None:
            return moved
        after = store.last_position()  # first: an event committed while this page is read is sent live too
        chain = store.ancestry(thread)
        info = chain[0]
        if at is not None and at > info.head:
            raise HTTPException(400, f"at {at} is past the thread's {info.head} events: pass 0..{info.head}")
        end = info.head if at is None else at
        backward = start is None or until is not None  # the latest page, and those paged back to, end where asked
        start = max(0, end - PAGE) if start is None else min(start, end)
        # A note fork's rows start over at its card: no page before it (they showed its parent's).
        card = view_start(store, chain, start, end)
        low = Cursor(start, skip) if card is None or card == start else Cursor(card)
        high = Cursor(end) if until is None or until >= end else max(Cursor(until, take), low)
        if backward:  # at most a page of events, whatever `start` asked
            low = max(low, Cursor(high.entry - PAGE))
        else:
            high = min(high, Cursor(min(low.entry + PAGE, end)))
        render = functools.partial(view.item, thread=thread)
        if backward:
            filled = fill(items_back(store, thread, low, high, at), render)
            shown = filled.shown[::-1]
            low = low if filled.rest is None else shown[0][0]
        else:
            filled = fill(items_from(store, thread, low, high.entry, at), render)
            shown = filled.shown
            high = high if filled.rest is None else filled.rest
        title = store.title(thread)
        badge = view.integrity.badge(after)
    floor = Cursor(0 if card is None else card)
    pager = {
        "first": 0 if low > Cursor(0) and card is None else None,
        "earlier": _earlier(low, floor.entry) if low > floor else None,
        "later": high if high < Cursor(end) else None,
        "latest": high < Cursor(end),
    }
    cut = None if filled.rest is None else ("end" if not backward else "start")
    return view.render(request, "thread.html", info=info, chain=chain, title=title, items=shown, start=low, stop=high,
                       end=end, at=at, pager=pager, badge=badge, live=at is None and high == Cursor(end), after=after,
                       page=PAGE, shown_ancestors=SHOWN_ANCESTORS, cut=cut, page_bytes=PAGE_BYTES, page_rows=PAGE_ROWS)


def replay_page(request: Request) -> Response:
    """`thread_state(at=N)`: the model's view, status, todos and metadata as of N events; its
    last `PAGE` messages, or those from message `first` on (up to `stop`, short of a page).
    A page cut by its budget ends (or, paging back, starts) inside a message: `skip` blocks of
    message `first` are on the page before, `take` blocks of message `stop` on this one."""
    view = viewer(request)
    thread = thread_param(request)
    at, first, until = whole_number(request, "at"), whole_number(request, "first"), whole_number(request, "stop")
    skip, take = whole_number(request, "skip") or 0, whole_number(request, "take") or 0
    with view.open() as store:
        if (moved := _canonical(store, request)) is not None:
            return moved
        head = store.ancestry(thread)[0].head
        if at is not None and at > head:
            raise HTTPException(400, f"at {at} is past the thread's {head} events: pass 0..{head}")
        at = head if at is None else at
        # The model view's messages are decoded only for the page (those of a page are read as one).
        state = thread_state(store, thread, at, paged=True)
        messages = state.view
        count = len(messages)
        backward = first is None or until is not None
        low = Cursor(max(0, count - PAGE)) if first is None else min(Cursor(first, skip), Cursor(count))
        high = Cursor(count) if until is None or until >= count else max(Cursor(until, take), low)
        if backward:
            low = max(low, Cursor(high.entry - PAGE))
        else:
            high = min(high, Cursor(low.entry + PAGE))
        page = fill_messages(messages, low, high, backward, view.blocks(thread))
        badge = view.integrity.badge(store.last_position())
    pager = {"earlier": _earlier(page.low) if page.low > Cursor(0) else None,
             "later": page.high if page.high < Cursor(count) else None}
    return view.render(request, "replay.html", state=state, thread=thread, at=at, head=head, count=count,
                       page=page, pager=pager, badge=badge, shown_todos=SHOWN_TODOS, page_bytes=PAGE_BYTES)


def tree_page(request: Request) -> Response:
    """The fork tree holding the thread: one node per thread, edges labelled with fork offsets."""
    view = viewer(request)
    thread = thread_param(request)
    with view.open() as store:
        if (moved := _canonical(store, request)) is not None:
            return moved
        chain = store.ancestry(thread)
        root = chain[0].root_id
        everything = store.subtree(root)
        # The first TREE_NODES threads in creation order (a parent before its forks), and the
        # line down to the thread asked for, its nearest TREE_NODES: 10,000 forks took 5 s and
        # 3.8 MB to draw, and the line of a thread 5,000 forks deep 2 MB.
        keep = {info.id for info in everything[:TREE_NODES]} | {info.id for info in chain[:TREE_NODES]}
        threads = [info for info in everything if info.id in keep]
        graph = layout(threads, store.titles(threads))
        # A sub-agent's agent, call and directive, in its node's tooltip as `tree` ends its line:
        # the two sub-agents a fan-out made read alike but for their ids.
        details = {thread_id: sub_agent_details(agent) for thread_id, agent in sub_agents(store, threads).items()}
        badge = view.integrity.badge(store.last_position())
    return view.render(request, "tree.html", graph=graph, thread=thread, root=root, badge=badge, details=details,
                       total=len(everything), hidden=len(everything) - len(threads))


def blame_page(request: Request) -> Response:
    """Where each message of the model view came from, a page at a time."""
    view = viewer(request)
    thread = thread_param(request)
    start = whole_number(request, "start") or 0
    with view.open() as store:
        if (moved := _canonical(store, request)) is not None:
            return moved
        store.ancestry(thread)  # a thread whose first events are gone: refused as on its other pages
        entries = list(itertools.islice(iter_blame(store, thread, start=start), PAGE + 1))
        if not entries and start:  # an empty page whose "Earlier" led to another: refused as a start below 0 is
            count = len(thread_state(store, thread, paged=True).view)  # an entry for each message of the view
            raise HTTPException(400, f"start {start} is past the thread's {count} blame entries: pass "
                                     + (f"0..{count - 1}" if count else "0"))
        badge = view.integrity.badge(store.last_position())
    more = start + PAGE if len(entries) > PAGE else None
    return view.render(request, "blame.html", thread=thread, entries=entries[:PAGE], start=start, more=more,
                       earlier=max(0, start - PAGE) if start else None, badge=badge)


def diff_page(request: Request) -> Response:
    """Two threads side by side from their common ancestor (b defaults to a's parent)."""
    view = viewer(request)
    a = thread_param(request, "a")
    with view.open() as store:
        if (moved := _canonical(store, request)) is not None:
            return moved
        # A thread whose first events are gone, either side: refused as on its other pages.
        b = request.query_params.get("b") or store.ancestry(a)[0].parent_id
        if not b:
            raise HTTPException(400, f"thread {a!r} is a root: pass ?b=THREAD_ID to compare it with")
        store.ancestry(b)
        result = diff(store, a, b, limit=PAGE + 1)  # one more than shown: whether there are more
        badge = view.integrity.badge(store.last_position())
    pages = [_side(view, side) for side in (result.a, result.b)]
    return view.render(request, "diff.html", result=result, a=a, b=b, sides=list(zip((result.a, result.b), pages)), badge=badge,
                       page_bytes=PAGE_BYTES)


def _side(view: Viewer, side: DiffSide) -> tuple[MessagePage, int | None]:
    """A diff side's first `PAGE` messages within half a page's budget, and the offset the
    thread page goes on from when that is not all of them."""
    messages = [Message(str(m["role"]), m["content"] or [], m["offset"], refusal=refusal(m), cut_short=side.cut_short(index))
                for index, m in enumerate(side.messages)]
    page = fill_messages(messages, Cursor(0), Cursor(min(len(messages), PAGE)), False, view.blocks(side.thread),
                         PAGE_BYTES // 2, PAGE_ROWS // 2)
    more = page.high < Cursor(len(messages))
    return page, (messages[page.high.entry].offset if more else None)
