"""The viewer's thread, replay and diff pages end an answer the model did not end whole with a
card saying why it stopped, as they end a refused answer with its refusal's card: within the
page's budget, after the count of blocks past an event's cap, its stop reason escaped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eventstore import Store

from test_cut_short import _answers

CARD = '<div class="card cut-short">Answer <span class="why">cut off at the token limit (max_tokens)</span></div>'
HOSTILE_CARD = ('<div class="card cut-short">Answer <span class="why">may be cut short: a stop reason this release does not '
                'know (&lt;b&gt;odd&lt;/b&gt;\\u202e \\x1b[31mred\nnext)</span></div>')


def test_the_viewer_shows_a_cut_short_answer_as_cut_short_on_every_page(tmp_path: Path) -> None:
    """The thread, replay and diff pages drew the cut answer as a whole one (and the one cut off
    by the context window as an empty bubble). Each ends it with a card saying why it stopped,
    the stop reason's words escaped; the live rows carry the same card."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from threadlog.web import create_app

    db, t, events = _answers(tmp_path)
    with Store(db) as store:
        store.create_thread(thread_id="other")
    with TestClient(create_app(db), base_url="http://127.0.0.1") as browser:
        pages = {url: browser.get(url).text for url in (f"/thread?id={t}", f"/replay?id={t}", f"/diff?a={t}&b=other")}
        live = browser.get("/live/rows", params={"id": t, "after": 0, "from": 0}).json()
    for url, page in pages.items():
        assert page.count(CARD) == 1 and page.count(HOSTILE_CARD) == 1, url
        assert page.count('class="card cut-short"') == 4, url
        assert "cut off by the context window (model_context_window_exceeded)" in page, url
        assert '<div class="text markdown"></div>' not in page, url  # the empty bubble
        assert "<b>odd" not in page and "\u202e" not in page and "\x1b" not in page, url
        assert page.index("The first step is") < page.index(CARD), url
    assert f'id="r-{events[2].event_id}:1"' in pages[f"/thread?id={t}"]
    [html] = [item["html"] for item in live["items"] if item["id"] == f"r-{events[2].event_id}:1"]
    assert CARD in html


def test_a_cut_short_answer_of_more_rows_than_an_event_shows_still_ends_with_its_card(tmp_path: Path) -> None:
    """An event shows its first 200 rows, then a card counting the rest: the cut-short card
    comes after that count, as a refusal's does, on each page."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from threadlog.web import create_app

    path = tmp_path / "t.db"
    with Store(path) as store:
        store.create_thread(thread_id="t")
        [answer] = store.append("t", [{"type": "message.appended", "data": {
            "role": "assistant", "content": [{"type": "text", "text": f"part {i}"} for i in range(250)],
            "stop_reason": "max_tokens"}}])
        store.create_thread(thread_id="other")
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        pages = {url: client.get(url).text for url in ("/thread?id=t", "/replay?id=t", "/diff?a=t&b=other")}
    for url, page in pages.items():
        assert "part 199<" in page and "part 200<" not in page and "and 50 more blocks of this message" in page, url
        assert page.count(CARD) == 1 and page.index("and 50 more blocks") < page.index(CARD), url
    assert f'id="r-{answer.event_id}:250"' in pages["/thread?id=t"]


def test_cut_short_cards_are_within_a_page_s_budget_and_each_shown_once(tmp_path: Path) -> None:
    """A stop reason is any text an import kept, up to a string's 64 kB on a card: 100 answers
    stopped for such reasons make pages within the budget, which show each card once."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from threadlog.web import create_app
    from threadlog.web.budget import PAGE_BYTES

    path = tmp_path / "cut.db"
    with Store(path) as store:
        store.create_thread(thread_id="t")
        for n in range(100):
            store.append("t", [{"type": "message.appended", "data": {
                "role": "assistant", "content": [{"type": "text", "text": ""}], "stop_reason": f"why{n} " + "x" * 60_000}}])

    def cards(page: str) -> list[int]:
        return [int(n) for n in re.findall(r'<div class="card cut-short">Answer <span class="why">may be cut short: '
                                           r'a stop reason this release does not know \(why(\d+) x', page)]

    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        for start in ("/thread?id=t&start=0", "/replay?id=t&first=0"):
            seen: list[int] = []
            url: str | None = start
            pages = 0
            while url is not None:
                response = client.get(url)
                assert response.status_code == 200 and len(response.content) <= PAGE_BYTES + 64 * 1024, url
                seen += cards(response.text)
                pages += 1
                found = re.search(r'<a class="later" href="([^"]+)"', response.text)
                url = None if found is None else found.group(1).replace("&amp;", "&")
            assert seen == list(range(100)) and pages > 2, start
