"""A page as a whole stays within its budget (`threadlog.web.budget`), whatever the log holds.

Each test here failed before the budget: a thread of 5 messages of 200 text blocks of
100 kB each made a 66 MB thread page in 5.7 s (and as much for its replay, its diff, a
sub-agent holding it, and a live update), which a browser tab chokes on. Now each page stops
at about `PAGE_BYTES`, says so, and links on from there; the pages reached by the links show
every block exactly once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

from threadlog import Store, update_index  # noqa: E402
from threadlog.web import create_app  # noqa: E402
from threadlog.web.budget import PAGE_BYTES  # noqa: E402
from threadlog.web.live import _poll  # noqa: E402

MESSAGES, BLOCKS, BLOCK = 5, 200, 100_000
EVERY = [(m, b) for m in range(MESSAGES) for b in range(BLOCKS)]
FRAME = 100_000  # what a page holds besides the log's rows: its header, title, links, notices


def _huge(thread: str, name: str) -> list[dict[str, object]]:
    return [{"type": "message.appended", "data": {"role": "user", "content": [
        {"type": "text", "text": f"{name}{m}b{b} " + "x" * BLOCK} for b in range(BLOCKS)]}} for m in range(MESSAGES)]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    path = tmp_path_factory.mktemp("budget") / "huge.db"
    with Store(path) as store:
        store.create_thread(thread_id="huge", title="huge")
        store.append_message("huge", "user", "before")
        for message in _huge("huge", "m"):
            store.append("huge", [message])
        store.fork("huge", at=2, fork_id="agent", kind="subagent")
        for message in _huge("agent", "m"):
            store.append("agent", [message])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        yield c


def _get(client: TestClient, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    assert len(response.content) <= PAGE_BYTES + FRAME, (url, len(response.content))
    return response.text


def _blocks(page: str) -> list[tuple[int, int]]:
    return [(int(m), int(b)) for m, b in re.findall(r"m(\d+)b(\d+) x", page)]


def _walk(client: TestClient, url: str, name: str, marks: Callable[[str], list[Any]] = _blocks) -> list[list[Any]]:
    """The blocks each page shows (or other `marks`), from `url` on through its `name` links
    (class `later` or `earlier`)."""
    pages = []
    page: str | None = _get(client, url)
    while page is not None:
        pages.append(marks(page))
        found = re.search(rf'<a class="{name}" href="([^"]+)"', page)
        page = None if found is None else _get(client, found.group(1).replace("&amp;", "&"))
    return pages


@pytest.mark.parametrize("url", ["/thread?id=huge", "/thread?id=huge&start=0", "/thread?id=agent", "/replay?id=huge",
                                 "/replay?id=huge&first=0", "/diff?a=agent&b=huge"])
def test_a_page_of_huge_messages_stops_at_its_budget_and_says_so(client: TestClient, url: str) -> None:
    page = _get(client, url)
    assert "This page stops here" in page or "This side stops here" in page
    assert _blocks(page)  # something is shown: a page is never empty for being full


@pytest.mark.parametrize("path", ["/thread?id=huge", "/replay?id=huge"], ids=["thread", "replay"])
@pytest.mark.parametrize("direction", ["later", "earlier"])
def test_the_pages_a_budget_cuts_show_every_block_once(client: TestClient, path: str, direction: str) -> None:
    """Paging on from the first page, or back from the latest, reaches every block exactly once."""
    start = f"{path}&start=0&first=0" if direction == "later" else path
    pages = _walk(client, start, direction)
    seen = [block for page in (pages if direction == "later" else reversed(pages)) for block in page]
    assert seen == EVERY
    assert len(pages) > 10  # each page held a part of a message


def test_a_page_cut_inside_a_message_links_on_from_the_block_it_stopped_at(client: TestClient) -> None:
    page = _get(client, "/thread?id=huge&start=0")
    link = re.search(r'<a class="page-cut-link" href="([^"]+)"', page)
    assert link is not None
    shown = _blocks(page)
    following = _blocks(_get(client, link.group(1).replace("&amp;", "&")))
    assert following[0] == EVERY[EVERY.index(shown[-1]) + 1]


def test_a_diff_side_stops_at_half_the_budget_and_reads_on_in_the_thread(client: TestClient) -> None:
    page = _get(client, "/diff?a=agent&b=huge")
    sides = page.split('<section class="side">')[1:]
    assert len(sides) == 2
    for side in sides:
        assert "This side stops here" in side and _blocks(side)[0] == (0, 0)
        assert re.search(r'read on in the thread</a> \(from the message at offset \d+, its first \d+ blocks again\)', side)


def test_one_row_larger_than_the_page_is_cut_saying_how_much_is_left_out(tmp_path: Path) -> None:
    """A tool result of 200 parts of 100 kB is one row of 13 MB: it is cut to the page's budget."""
    path = tmp_path / "row.db"
    parts = [{"type": "text", "text": f"part{n} " + "y" * BLOCK} for n in range(BLOCKS)]
    with Store(path) as store:
        store.create_thread(thread_id="t")
        store.append("t", [{"type": "message.appended", "data": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}]}}])
        store.append("t", [{"type": "message.appended", "data": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": parts}]}}])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        for url in ("/thread?id=t", "/replay?id=t"):
            page = _get(c, url)
            assert "part0 " in page  # the row is shown, cut
            elided = [int(n) for n in re.findall(r"… (\d+) bytes elided …", page)]
            assert len(elided) == BLOCKS and sum(elided) > BLOCKS * BLOCK - PAGE_BYTES - FRAME


def test_a_live_update_past_the_budget_offers_the_latest_page(tmp_path: Path) -> None:
    """An open page whose thread gains 66 MB of messages is sent a link, not a 66 MB update."""
    path = tmp_path / "live.db"
    with Store(path) as store:
        store.create_thread(thread_id="t")
        store.append_message("t", "user", "hello")
        after = store.last_position()
        store.append("t", _huge("t", "m"))
    app = create_app(str(path))
    position, payload = _poll(app.state.viewer, "t", after, 0)
    assert payload is not None and len(payload) < FRAME
    assert '"reload": "/thread?id=t"' in payload and '"items": []' in payload


def test_links_to_an_offset_land_on_a_page_holding_it(tmp_path: Path) -> None:
    """A search hit, a blame row and a fork's link to its parent name an event (`#o-N`): the page
    they open holds it. They opened a page that started events before it, which a few huge
    messages there cut short of it, and the browser stayed at the top of another page."""
    path = tmp_path / "anchors.db"
    with Store(path) as store:
        store.create_thread(thread_id="t")
        store.append_message("t", "user", "first")
        store.append("t", _huge("t", "m")[:3])  # 3 messages of 20 MB, before the one linked to
        store.append_message("t", "user", "the needle")
        store.fork("t", fork_id="f")
        store.append_message("f", "user", "after the fork")
        update_index(store)
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        links = [
            *re.findall(r'<li class="hit"><a href="([^"]+)"', _get(c, "/?q=needle")),
            *re.findall(r'<td><a href="([^"]+)"', _get(c, "/blame?id=f")),
            *re.findall(r'class="parent-link" href="([^"]+)"', _get(c, "/thread?id=f")),
        ]
        assert len(links) == 1 + 6 + 2  # a hit; blame: "first", the three huge, the needle, its own; the meta line and the card
        for found in links:
            url, anchor = found.replace("&amp;", "&").split("#")
            assert f'id="{anchor}"' in _get(c, url), found


def test_a_page_of_control_characters_stays_within_its_budget(tmp_path: Path) -> None:
    """A page shows each control character as its escape (`\\x01`, 4 bytes for 1): the budget
    counts the page as it is sent. It counted the text before, and 40 tool results and 40
    thinking blocks of 70,000 `\\x01` made pages of 8 MB in 5 s."""
    path = tmp_path / "control.db"
    with Store(path) as store:
        store.create_thread(thread_id="t")
        for n in range(40):
            store.append("t", [{"type": "message.appended", "data": {"role": "assistant", "content": [
                {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {}}]}}])
            store.append("t", [{"type": "message.appended", "data": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "\x01" * 70_000}]}}])
        store.append("t", [{"type": "message.appended", "data": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "\x01" * 70_000, "signature": "s"} for _ in range(40)]}}])
        store.create_thread(thread_id="row")  # one row of 200 parts: larger than a page by itself
        store.append("row", [{"type": "message.appended", "data": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}]}}])
        store.append("row", [{"type": "message.appended", "data": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "text", "text": f"part{n} " + "\x01" * 20_000} for n in range(BLOCKS)]}]}}])  # 6 bytes each in JSON
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        for url in ("/thread?id=t", "/thread?id=t&start=0", "/replay?id=t", "/replay?id=t&first=0", "/thread?id=row"):
            page = _get(c, url)  # within PAGE_BYTES + FRAME, quickly
            assert "\\x01" in page and "\x01" not in page


def test_refusal_cards_are_within_a_page_s_budget_and_each_shown_once(tmp_path: Path) -> None:
    """A refused answer's card holds what the server said, up to a string's 64 kB: the replay
    and the diff had no card, and now count theirs in the page's budget as the thread page does,
    so 100 answers refused at length make pages of at most `PAGE_BYTES`, which show each once."""
    path = tmp_path / "refused.db"
    with Store(path) as store:
        store.create_thread(thread_id="t")
        store.create_thread(thread_id="other")
        for n in range(100):
            store.append("t", [{"type": "message.appended", "data": {
                "role": "assistant", "content": [{"type": "text", "text": ""}], "stop_reason": "refusal",
                "stop_details": {"type": "refusal", "category": "cyber", "explanation": f"why{n} " + "x" * 60_000}}}])

    def cards(page: str) -> list[int]:
        return [int(n) for n in re.findall(r'<div class="card refusal">Refused: <span class="why">cyber: why(\d+) x', page)]

    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        for path_ in ("/thread?id=t", "/replay?id=t"):
            later = _walk(c, f"{path_}&start=0&first=0", "later", cards)
            earlier = _walk(c, path_, "earlier", cards)
            assert [n for page in later for n in page] == list(range(100)) and len(later) > 2, path_
            assert [n for page in reversed(earlier) for n in page] == list(range(100)) and len(earlier) > 2, path_
        side = _get(c, "/diff?a=t&b=other")
        assert "This side stops here" in side and cards(side)[0] == 0
