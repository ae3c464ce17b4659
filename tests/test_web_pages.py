"""The web viewer's pages over HTTP (Starlette's test client, no browser): the headers that
keep stored strings from running, read-only serving, paging, the integrity badge, and
`threadlog serve` without the web extra."""

from __future__ import annotations

import html
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

from threadlog import Store, display_rows, import_claude_code, import_pi, import_swe_agent, save_snapshot, thread_state  # noqa: E402
from threadlog.web import create_app  # noqa: E402
from tests.webstore import HOSTILE_ID, LONG, build  # noqa: E402
from tests.backends import file_dump  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("webpages") / "web.db"
    return path, build(path)


@pytest.fixture(scope="module")
def client(built: tuple[Path, dict[str, str]]) -> Iterator[TestClient]:
    with TestClient(create_app(str(built[0])), base_url="http://127.0.0.1") as c:
        yield c


PAGES = ["/", "/?all=1", "/thread?id=trip", "/replay?id=trip&at=2", "/tree?id=trip", "/blame?id=trip", "/diff?a=trip&b=trip",
         "/thread?id=missing", "/static/viewer.js", "/live/rows?id=trip"]


@pytest.mark.parametrize("target", PAGES, ids=PAGES)
def test_every_response_forbids_inline_script(client: TestClient, target: str) -> None:
    response = client.get(target)
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("target", PAGES, ids=PAGES)
def test_no_page_is_kept_in_the_browsers_cache(client: TestClient, target: str) -> None:
    """A page shown again from the browser's cache (Back) showed text a redaction had erased
    since: pages said nothing of caching. Each now says `no-store`; the static files, which hold
    no stored text, may be kept."""
    response = client.get(target)
    kept = response.headers.get("cache-control")
    assert kept is None if target.startswith("/static/") else kept == "no-store", (target, kept)


def test_nothing_writes_and_only_get_is_served(built: tuple[Path, dict[str, str]], client: TestClient) -> None:
    path, ids = built
    before = file_dump(path)
    for target in PAGES + [f"/thread?id={ids['bad']}", "/?q=train", "/thread?id=long&start=3"]:
        client.get(target)
    for method in ("post", "put", "delete", "patch"):
        assert getattr(client, method)("/thread?id=trip").status_code == 405
    assert file_dump(path) == before


@pytest.mark.parametrize("target", ["/thread?id=trip", "/live/rows?id=trip", "/static/viewer.js", "/favicon.ico"])
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_a_method_the_viewer_does_not_serve_is_a_405_naming_those_it_does(client: TestClient, target: str,
                                                                          method: str) -> None:
    """A POST, PUT or DELETE to a page was a 405 saying only `Method Not Allowed`, with no
    `Allow` header (which a 405 must send): now the page says the viewer is read-only and
    which methods it serves, and the header names them."""
    response = client.request(method, target)
    assert response.status_code == 405
    assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}
    message = html.unescape(re.search(r'id="error-message">(.*?)</p>', response.text, re.S).group(1))  # type: ignore[union-attr]
    assert message == f"{method} is not served here: the viewer is read-only, and answers GET and HEAD only"


def test_another_host_name_is_refused(client: TestClient) -> None:
    """A page elsewhere that rebinds its name to 127.0.0.1 cannot read the store."""
    refused = client.get("/", headers={"host": "evil.example"})
    assert refused.status_code == 400 and "<html" not in refused.text  # and nothing of the store
    # It said `Invalid host header` alone: which names are answered, and how to add one.
    assert refused.text == ("refused: the Host header 'evil.example' names no address this viewer answers to (127.0.0.1, "
                            "localhost), so that a page elsewhere cannot reach it through a name of its own; open it at one "
                            "of those, or start it with `threadlog serve --allow-host NAME`\n")
    assert client.get("/static/style.css", headers={"host": "evil.example:80"}).status_code == 400
    assert client.get("/", headers={"host": "localhost:8765"}).status_code == 200


def test_a_long_thread_shows_its_latest_page_and_pages_back(client: TestClient) -> None:
    latest = client.get("/thread?id=long").text
    assert f"message {LONG - 1}<" in latest and f"message {LONG - 100}<" in latest
    assert f"message {LONG - 101}<" not in latest
    assert 'class="earlier" href="/thread?id=long&amp;start=51&amp;stop=151"' in latest
    first = client.get("/thread?id=long&start=0").text
    assert "message 0<" in first and "message 99<" not in first  # offset 0 is thread.created: 99 messages
    assert 'class="later" href="/thread?id=long&amp;start=100"' in first


def _walk(client: TestClient, url: str, name: str) -> list[list[int]]:
    """The messages (`message N`) of each page met from `url` on by following the `name` links."""
    seen: list[list[int]] = []
    page: str | None = client.get(url).text
    while page is not None:
        seen.append([int(n) for n in re.findall(r"<p>message (\d+)</p>", page)])
        found = re.search(rf'<a class="{name}" href="([^"]+)"', page)
        page = None if found is None else client.get(found.group(1).replace("&amp;", "&")).text
    return seen


@pytest.mark.parametrize("path", ["/thread", "/replay"])
def test_paging_back_from_the_latest_page_repeats_nothing(client: TestClient, path: str) -> None:
    """The latest page starts anywhere; the first page reached back from it overlapped the
    one after it (messages 50..99 shown twice on the way back through 250)."""
    back = _walk(client, f"{path}?id=long", "earlier")
    assert [n for page in reversed(back) for n in page] == list(range(LONG))
    assert back[-1] == list(range(back[-2][0]))  # the first page ends where the second begins
    assert [n for page in _walk(client, f"{path}?id=long&first=0&start=0", "later") for n in page] == list(range(LONG))


@pytest.mark.parametrize("note_above", [False, True], ids=["note-fork", "fork-of-a-note-fork"])
def test_a_note_fork_pages_from_its_fork_card(tmp_path: Path, note_above: bool) -> None:
    """A `context="note"` fork's rows start over at its ⑃ card, but its page offered « First and
    ‹ Earlier back through its parent's history: pages of the parent's messages the fork's view
    does not hold, with a gap before the card that no page showed (the latest page starts at
    the card). The pages now start at the card, and so do those of a fork below the note fork."""
    path = tmp_path / "note.db"
    with Store(path) as store:
        store.create_thread(thread_id="long")
        store.append("long", [{"type": "message.appended", "data": {"role": "user" if i % 2 == 0 else "assistant",
                                                                  "content": f"message {i}"}} for i in range(LONG)])
        fork = store.fork("long", at=240, context="note", fork_id="note")
        store.append_message(fork, "user", "message 1000")
        if note_above:
            fork = store.fork(fork, fork_id="below")
            store.append_message(fork, "assistant", "message 1001")
        whole = [int(n) for row in display_rows(store, fork) if row.text and row.text.startswith("message ")
                 for n in [row.text.split()[1]]]
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        latest = c.get("/thread", params={"id": fork}).text
        back = _walk(c, f"/thread?id={fork}", "earlier")
        first = c.get("/thread", params={"id": fork, "start": 0}).text
    assert [n for page in reversed(back) for n in page] == whole == ([1000, 1001] if note_above else [1000])
    assert "« First" not in latest and 'class="earlier"' not in latest
    assert '<span id="range-start">240</span>' in first and "<p>message 0</p>" not in first



def test_a_fork_of_a_note_fork_made_before_its_card_pages_its_own_rows(tmp_path: Path) -> None:
    """A fork of a note fork made at the note fork's own fork point holds the messages before the
    card, not the card: its page started over at that card all the same, and showed the fork's
    own ⑃ card alone, where its rows (and `show`) hold every message, a cut-short mark too."""
    path = tmp_path / "below.db"
    with Store(path) as store:
        store.create_thread(thread_id="t")
        store.append_message("t", "user", "message 1")
        store.append_message("t", "assistant", "message 2", stop_reason="max_tokens")
        note = store.fork("t", at=3, context="note", fork_id="note")
        store.append_message(note, "user", "message 1000")
        below = store.fork(note, at=3, fork_id="below")
        whole = [row.text for row in display_rows(store, below) if row.text and row.text.startswith("message ")]
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        page = c.get("/thread", params={"id": below}).text
    assert whole == ["message 1", "message 2"]
    assert re.findall(r"<p>(message \d+)</p>", page) == whole and "cut off at the token limit" in page


def test_live_rows_are_a_page_s_update_or_only_where_the_log_is(tmp_path: Path) -> None:
    """The pages of a browser share one stream that says the log moved (`/live/log`); each then
    fetches its own update: the rows new since `after`, rendered as on the page, or, when none
    of the new events is the thread's, only the position reached (where it asks from next)."""
    path = tmp_path / "rows.db"
    with Store(path) as store:
        store.create_thread(thread_id="a")
        store.create_thread(thread_id="b")
        store.append_message("a", "user", "hello")
        after = store.last_position()
        store.append_message("a", "assistant", "a **new** reply")
        store.append_message("b", "user", "elsewhere")
        last = store.last_position()
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        response = c.get("/live/rows", params={"id": "a", "after": after, "from": 0})
        assert response.headers["content-type"] == "application/json"
        update = response.json()
        assert (update["position"], update["head"]) == (last, 3)
        assert any("a <strong>new</strong> reply" in item["html"] for item in update["items"])
        assert "elsewhere" not in response.text
        assert c.get("/live/rows", params={"id": "a", "after": last - 1, "from": 0}).json() == {"position": last}
        assert c.get("/live/rows", params={"id": "a", "after": last, "from": 0}).json() == {"position": last}


def test_query_parameters_are_checked(client: TestClient) -> None:
    response = client.get("/thread?id=trip&at=-1")
    assert response.status_code == 400 and "at must be a whole number" in response.text
    assert client.get("/thread?id=trip&at=99").status_code == 400
    assert client.get("/thread").status_code == 400
    missing = client.get("/thread?id=%3Cscript%3E")
    assert missing.status_code == 404 and "&lt;script&gt;" in missing.text and "<script>" not in missing.text.split("</head>")[1]


def test_hostile_ids_are_quoted_in_links(client: TestClient) -> None:
    html = client.get("/?all=1").text
    assert HOSTILE_ID not in html  # never raw, in text or attributes
    assert client.get("/thread", params={"id": HOSTILE_ID}).status_code == 200
    assert client.get("/thread", params={"id": HOSTILE_ID + "/fork"}).status_code == 200


def test_the_badge_names_the_first_bad_position(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(title="t")
        store.append_message(thread, "user", "first")
        second = store.append_message(thread, "assistant", "Two trains fit.")
    assert "✓ verified: 3 events" in _settled_page(path, "/")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET data = replace(data, 'Two', 'Six') WHERE position = ?", (second.position,))
    conn.commit()
    conn.close()
    assert f"integrity check failed at position {second.position}" in _settled_page(path, f"/thread?id={thread}")


def _settled_page(path: Path, target: str) -> str:
    """`target` from a new viewer of `path`, once its first integrity run has finished: the page
    that starts a run waits only a moment for it, and a loaded machine can take longer."""
    app = create_app(str(path))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        client.get(target)
        app.state.viewer.integrity.join(30)
        return client.get(target).text


def test_the_badge_checks_only_new_events_between_full_runs(tmp_path: Path) -> None:
    """After a full run, the badge checks what was appended since its checkpoint: the count
    grows by the new events, and a new event rewritten by hand fails it."""
    from threadlog.web.integrity import Integrity

    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(title="t")
        store.append_message(thread, "user", "first")
    badges = Integrity(lambda: Store(path, read_only=True), wait=30, interval=0, full_every=3600)
    assert badges.badge(2).events == 2
    with Store(path) as store:
        store.append_message(thread, "assistant", "one")
        store.append_message(thread, "user", "two")
    good = badges.badge(4)
    assert (good.state, good.events) == ("ok", 4)
    with Store(path) as store:
        late = store.append_message(thread, "assistant", "Two trains fit.")
        store.append_message(thread, "user", "thanks")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET data = replace(data, 'Two', 'Six') WHERE position = ?", (late.position,))
    conn.commit()
    conn.close()
    failed = badges.badge(6)
    assert (failed.state, failed.position) == ("failed", late.position)


def test_the_badge_runs_the_full_check_again_though_the_log_did_not_grow(tmp_path: Path) -> None:
    """A run started only when the log grew: an old event rewritten in place (the log as long
    as before) kept the badge at "verified" until the server restarted, and redactions made
    while serving were not counted (a redaction erases an older event)."""
    from threadlog.web.integrity import Integrity

    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(title="t")
        paid = store.append_message(thread, "user", "Pay 10 EUR")
        secret = store.append_message(thread, "user", "my card is 4111")
    badges = Integrity(lambda: Store(path, read_only=True), wait=30, interval=0, full_every=3600)
    assert (badges.badge(3).state, badges.badge(3).redacted) == ("ok", 0)
    with Store(path) as store:
        store.redact(secret.position, "pii", "ops")
    grown = badges.badge(4)  # the run since the checkpoint
    assert (grown.state, grown.events, grown.redacted) == ("ok", 4, 1)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET data = replace(data, '10', '99') WHERE position = ?", (paid.position,))
    conn.commit()
    conn.close()
    assert badges.badge(4).state == "ok"  # the full check is not due yet
    badges._full_every = 0  # it is now
    failed = badges.badge(4)
    assert (failed.state, failed.position) == ("failed", paid.position)


def test_page_rows_are_the_whole_view_sliced(built: tuple[Path, dict[str, str]]) -> None:
    """display_rows(start, stop) == the rows of the whole view whose offsets are in the page,
    statuses included (a tool call answered after the page still shows its answer)."""
    path, ids = built
    with Store(path, read_only=True) as store:
        for thread in (ids["bad"], "trip", ids["fork"]):
            head = store.head(thread)
            whole = display_rows(store, thread)
            for start in range(head):
                for stop in range(start, head + 1):
                    page = display_rows(store, thread, start=start, stop=stop)
                    assert page == [row for row in whole if start <= row.offset < stop], (thread, start, stop)


def test_serve_without_the_web_extra_says_how_to_install_it(built: tuple[Path, dict[str, str]]) -> None:
    code = "import sys; sys.modules['starlette'] = None; from threadlog.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", code, "serve", "--db", str(built[0])], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: threadlog serve needs the web extra (starlette is missing): pip install 'threadlog[web]'"]


def test_search_blame_and_diff_pages(client: TestClient, built: tuple[Path, dict[str, str]]) -> None:
    _, ids = built
    listing = client.get("/").text
    assert 'type="search" name="q"' in listing
    hits = client.get("/?q=bus").text
    assert 'class="hit"' in hits and f"/thread?id={ids['fork']}" in hits
    # The match marked, not between the asterisks the snippet marks it with (the page showed them).
    assert "what about a <mark>bus</mark>?" in hits and "**" not in hits
    assert "No match." in client.get("/?q=zeppelin").text
    blame = client.get(f"/blame?id={ids['fork']}").text
    assert blame.count("<tr class=\"inherited\">") == 1 and blame.count("<tr class=\"own\">") == 1  # the parent's message, the fork's
    both = client.get(f"/diff?a={ids['fork']}").text  # b: the fork's parent
    assert "Actually, what about a bus?" in both and "Two trains fit" in both and "Book the first one" in both


def test_a_blame_page_past_the_last_entry_is_a_400_naming_how_many_there_are(tmp_path: Path) -> None:
    # It was an empty page whose "Earlier" link led to another empty page (start 150 of 250
    # entries, and so on down); a start below 0 or not a number is a 400 saying what to pass.
    path = tmp_path / "blame.db"
    with Store(path) as store:
        store.create_thread(thread_id="long")
        store.append("long", [{"type": "message.appended", "data": {"role": "user", "content": f"m{i}"}} for i in range(250)])
        store.append("long", [{"type": "compaction.recorded", "data": {"summary": "s", "through_offset": 51}}])
        store.create_thread(thread_id="empty")
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        # The view: the summary, then the 200 messages from offset 51 on.
        for start in (201, 202, 400, 10**18):
            refused = c.get(f"/blame?id=long&start={start}")
            assert refused.status_code == 400, (start, refused.text[:300])
            assert f"start {start} is past the thread&#39;s 201 blame entries: pass 0..200" in refused.text
        last = c.get("/blame?id=long&start=200")
        assert last.status_code == 200 and last.text.count("<tr class=") == 1 and "/blame?id=long&amp;start=100" in last.text
        assert c.get("/blame?id=long&start=-1").status_code == 400
        assert c.get("/blame?id=empty&start=0").status_code == 200  # a thread with no message: its one empty page
        empty = c.get("/blame?id=empty&start=1")
        assert empty.status_code == 400 and "start 1 is past the thread&#39;s 0 blame entries: pass 0<" in empty.text


def test_a_diff_of_unrelated_threads_says_they_share_nothing(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    with Store(path) as store:
        a, b = store.create_thread(title="a"), store.create_thread(title="b")
        store.append_message(a, "user", "one")
        store.append_message(b, "user", "two")
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        page = c.get("/diff", params={"a": a, "b": b}).text
    assert "No shared history: the two threads have no common ancestor" in page and "0..-1" not in page


def test_a_diff_shows_what_each_side_s_tool_calls_sent_and_got(tmp_path: Path) -> None:
    """Two forks that ran the same tool differently read the same on the diff: each side said
    "tool call bash" and "tool result c1", not the command, its output or that one failed, and
    a thinking block was `[thinking]`. Each block is shown as the replay shows it."""
    path = tmp_path / "forks.db"
    with Store(path) as store:
        store.append_message(store.create_thread(thread_id="t"), "user", "delete the build files")
        for fork, command, output, failed in (("a", "rm -rf build/", "removed 3 files", False),
                                              ("b", "rm -rf /", "rm: permission denied", True)):
            store.fork("t", fork_id=fork)
            store.append_message(fork, "assistant", [{"type": "thinking", "thinking": f"I will run {command}", "signature": "s"},
                                                     {"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": command}}])
            store.append_message(fork, "user", [{"type": "tool_result", "tool_use_id": "c1", "content": output, "is_error": failed}])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        page = c.get("/diff", params={"a": "a", "b": "b"}).text
    a, b = (html.unescape(side) for side in page.split('<section class="side">')[1:])
    assert '"command": "rm -rf build/"' in a and "<pre>\nremoved 3 files</pre>" in a and "I will run rm -rf build/" in a
    assert '"command": "rm -rf /"' in b and "<pre>\nrm: permission denied</pre>" in b and "I will run rm -rf /" in b
    assert 'status-error' in b and 'status-error' not in a and "[thinking]" not in page


def test_forks_that_keep_their_parent_s_title_are_told_apart_in_the_tree(tmp_path: Path) -> None:
    """A fork keeps its parent's title: two sub-agents of "Trip to Lyon" were drawn as two nodes
    reading "S · Trip to Lyon · 3 ev", their ids only in a tooltip. A node whose title is its
    parent's names its id instead; a fork with a title of its own shows that title."""
    path = tmp_path / "tree.db"
    with Store(path) as store:
        store.append_message(store.create_thread(title="Trip to Lyon", thread_id="trip"), "user", "plan it")
        store.fork("trip", fork_id="hotels-agent")
        store.fork("trip", fork_id="trains-agent")
        store.fork("trip", fork_id="bus", title="By bus")
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        page = c.get("/tree", params={"id": "trip"}).text
    labels = {thread: re.sub("<[^>]+>", "", text)  # the label's own element (`tspan`) left out: what the node reads
              for thread, text in re.findall(r'data-thread="([^"]+)">\s*<rect[^>]*/>\s*<text[^>]*>(.*?)</text>', page)}
    assert labels == {"trip": "T · Trip to Lyon · 2 ev", "hotels-agent": "F · hotels-agent · 3 ev",
                      "trains-agent": "F · trains-agent · 3 ev", "bus": "F · By bus · 4 ev"}, labels


def test_a_texts_own_bold_is_not_taken_for_a_match(tmp_path: Path) -> None:
    """The snippet marks matches with `**`, as Markdown marks bold: a text's `**Note**` was
    shown as a match of every search that found the text."""
    from threadlog import update_index

    path = tmp_path / "bold.db"
    with Store(path) as store:
        t = store.create_thread(title="t")
        store.append_message(t, "user", "**Note**: the hotel is booked")
        store.append_message(t, "assistant", "The **ferry** leaves from *pier 4*, a\\b")
        update_index(store)
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        page = c.get("/?q=hotel").text
        ferry = c.get("/?q=ferry").text
    assert "**Note**: the <mark>hotel</mark> is booked" in page, page
    # A bold match: it was `****ferry****`, shown as `<mark>**ferry</mark>**`.
    assert "The **<mark>ferry</mark>** leaves from *pier 4*, a\\b" in ferry, ferry


def test_a_search_with_more_hits_than_shown_says_so(tmp_path: Path) -> None:
    """The page showed the best 50 hits of a search that found 80 as if they were all: only
    "No match." or the hits, nothing saying that more were found."""
    from threadlog import update_index

    path = tmp_path / "many.db"
    with Store(path) as store:
        for count, word in ((50, "fifty"), (80, "eighty")):
            thread = store.create_thread(thread_id=word)
            store.append(thread, [{"type": "message.appended", "data": {"role": "user", "content": f"ferry {word} number {i}"}}
                                  for i in range(count)])
        update_index(store)
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        many, fifty = c.get("/", params={"q": "ferry eighty"}).text, c.get("/", params={"q": "ferry fifty"}).text
    assert many.count('class="hit"') == 50 and "The best 50 hits are shown: more were found" in many
    assert fifty.count('class="hit"') == 50 and "more were found" not in fifty


def test_a_file_without_an_index_has_no_search_box(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with Store(path) as store:
        store.create_thread(title="t")
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        page = client.get("/").text
    assert 'name="q"' not in page and "threadlog index" in page


def test_prefixes_and_at_last_redirect_to_the_full_id(client: TestClient, built: tuple[Path, dict[str, str]]) -> None:
    _, ids = built
    moved = client.get("/replay?id=tri&at=2", follow_redirects=False)
    assert moved.status_code == 302 and moved.headers["location"] == "/replay?id=trip&at=2"
    with Store(built[0], read_only=True) as store:
        latest = store.threads(limit=1)[0].id
    last = client.get("/thread?id=@last", follow_redirects=False)
    assert last.status_code == 302 and last.headers["location"] == "/thread?" + urlencode({"id": latest})
    assert client.get(f"/diff?a={ids['fork'][:8]}&b=tri").url.query.decode() == urlencode({"a": ids["fork"], "b": "trip"})
    unknown = client.get("/thread?id=zzz")
    assert unknown.status_code == 404 and "no thread id starts with it" in unknown.text
    assert "threadlog ls" not in unknown.text  # the command line's advice, on a web page


def test_a_name_that_names_no_thread_is_a_404_without_command_line_advice(tmp_path: Path) -> None:
    """The pages took the command line's refusals as they were: a 404 page told the reader to run
    `threadlog ls --all`, or to start a thread with `threadlog new`."""
    path = tmp_path / "empty.db"
    Store(path).close()
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        for url, says in (("/thread?id=@last", "holds no thread yet"), ("/replay?id=zzz", "no thread id starts with it")):
            page = client.get(url)
            assert page.status_code == 404 and says in page.text, (url, page.status_code)
            assert "threadlog new" not in page.text and "threadlog ls" not in page.text, url


def test_an_ambiguous_prefix_offers_the_threads_it_starts(tmp_path: Path) -> None:
    """A prefix of several ids gave a page headed "Not found" (404), though each thread exists.
    The page asks which, and links each one, on the page asked for."""
    path = tmp_path / "twins.db"
    with Store(path) as store:
        for thread in ("abc1", "abc2", "abd"):
            store.create_thread(thread_id=thread)
            store.append_message(thread, "user", "hi")
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        page = c.get("/replay?id=ab&at=1")
        assert page.status_code == 300 and "<h1>Which thread?</h1>" in page.text
        assert "&#39;ab&#39; is ambiguous: it starts the ids abc1, abc2, abd" in page.text
        links = [f'<a href="/replay?id={t}&amp;at=1"><code>{t}</code></a>' for t in ("abc1", "abc2", "abd")]
        assert all(link in page.text for link in links), page.text
        assert c.get("/replay?id=abc1&at=1").status_code == 200


def test_each_row_carries_its_provenance(client: TestClient, built: tuple[Path, dict[str, str]]) -> None:
    path, ids = built
    with Store(path, read_only=True) as store:
        inherited = store.event_at(ids["fork"], 1)  # the parent's message, seen from the fork
    html = client.get(f"/thread?id={ids['fork']}").text
    item = html.split(f'id="r-{inherited.event_id}:0"')[1].split("</li>")[0]
    for name, value in (("stream", inherited.stream_id), ("offset", inherited.offset), ("position", inherited.position),
                        ("time", inherited.time), ("origin", "live")):
        assert f"<dt>{name}</dt><dd>" in item and str(value) in item.split(f"<dt>{name}</dt><dd>")[1].split("</dd>")[0]


def test_the_list_offers_older_threads_only_when_there_are_some(tmp_path: Path) -> None:
    """A file of exactly one page of threads offered "Older threads →", to a page that said
    "No threads in this file yet"."""
    from threadlog.web.pages import THREADS

    path = tmp_path / "t.db"
    with Store(path) as store:
        for i in range(THREADS):
            store.create_thread(title=f"thread {i}")
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        page = client.get("/").text
        assert page.count('class="thread-row"') == THREADS and 'rel="next"' not in page
        with Store(path) as store:
            store.create_thread(title="one more")
        page = client.get("/").text
        assert page.count('class="thread-row"') == THREADS and 'rel="next"' in page
        older = client.get("/?before=" + page.split('rel="next" href="/?before=')[1].split('"')[0]).text
        assert older.count('class="thread-row"') == 1 and "thread 0" in older


@pytest.mark.parametrize("tied_at", [2, 0], ids=["position-2", "no-event-yet"])
def test_older_pages_list_threads_tied_at_the_cut_once(tmp_path: Path, tied_at: int) -> None:
    """Threads of one last_position (only raw SQL makes them) straddling a page's end: the
    "Older threads" link named only the position, and the page it opened started below it,
    skipping the tied threads the first page had not shown. It names the last thread shown too
    when the next one ties with it, and every thread is listed once, in the listing's order.
    Tied at 0 (the last_position of a row added by hand with no events), the link named
    `before=0`, which the list refused (400) as a page before no position."""
    from threadlog.web.pages import THREADS

    path = tmp_path / "t.db"
    with Store(path) as store:
        ids = [store.create_thread(title=f"thread {i}") for i in range(THREADS + 6)]
        order = [info.id for info in store.threads(None)]
    tied = order[THREADS - 3:]  # the oldest: tied at 0 too, they still straddle the cut
    with sqlite3.connect(path) as conn:  # recency kept in step: a tie, not a misfiled row
        conn.execute(f"UPDATE streams SET last_position = {tied_at}, recency = 0 WHERE id IN ({','.join('?' * len(tied))})",
                     tied)
    with Store(path) as store:
        expected = [info.id for info in store.threads(None)]
    seen: list[str] = []
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        address: str | None = "/"
        while address is not None:
            page = client.get(address)
            assert page.status_code == 200, page.text
            assert (">Newest</a>" in page.text) == (address != "/"), address  # an older page links back
            seen += re.findall(r'<a class="thread-link" href="/thread\?id=([0-9a-f]+)"', page.text)
            found = re.search(r'rel="next" href="([^"]+)"', page.text)
            address = html.unescape(found.group(1)) if found else None
        assert client.get("/?last=x").status_code == 400  # a last thread needs its position
        assert client.get("/?before=3&last=a%00b").status_code == 400
    assert sorted(ids) == sorted(expected)
    assert seen == expected


def test_the_replay_pages_back_to_the_first_message(client: TestClient) -> None:
    """The replay showed the last 100 messages of the model view and no way to the others."""
    def texts(html: str) -> list[int]:
        return [int(n) for n in re.findall(r"<p>message (\d+)</p>", html)]

    def follow(html: str, name: str) -> str | None:
        found = re.search(rf'<a class="{name}" href="([^"]+)"', html)
        return None if found is None else client.get(found.group(1).replace("&amp;", "&")).text

    page: str | None = client.get("/replay?id=long").text
    seen: list[list[int]] = []
    while page is not None:
        seen.append(texts(page))
        page = follow(page, "earlier")
    # Pages of 100, as the thread page's: the last, then back to the first (which ends where the second begins).
    assert seen == [list(range(150, 250)), list(range(50, 150)), list(range(50))]
    first = client.get("/replay?id=long&first=0").text
    assert texts(first) == list(range(100)) and "messages 1–100 of 250" in first
    assert texts(follow(first, "later") or "") == list(range(100, 200))
    past = client.get("/replay?id=long&first=9999").text
    assert texts(past) == []  # past the end: an empty page, not an error, saying so (it said "messages 251–250")
    assert "past the last of 250 messages" in past and "251–250" not in past
    assert texts(follow(past, "earlier") or "") == list(range(150, 250))


FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _replay_walks(path: Path) -> dict[tuple[str, int, str], list[str]]:
    """Every replay page of every thread at `path`, as of its head and of half of it: (thread,
    at, the link followed) -> the pages met from the latest page back, or from the first on,
    each less its integrity badge (which says how far a check in the background has got)."""
    with Store(path, read_only=True) as store:
        heads = {info.id: info.head for info in store.all_threads()}
    walks: dict[tuple[str, int, str], list[str]] = {}
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        for thread, head in heads.items():
            for at in (head, head // 2):
                for name, first in (("earlier", ""), ("later", "&first=0")):
                    pages = walks.setdefault((thread, at, name), [])
                    address: str | None = f"/replay?id={thread}&at={at}{first}"
                    while address is not None:
                        page = client.get(address)
                        assert page.status_code == 200, (address, page.text[:300])
                        pages.append(re.sub(r'<span id="integrity".*?</span>', "", page.text, flags=re.S))
                        found = re.search(rf'<a class="{name}" href="([^"]+)"', page.text)
                        address = html.unescape(found.group(1)) if found else None
    return walks


def test_the_replay_pages_of_imported_sessions_show_the_model_view_each_message_once(tmp_path: Path) -> None:
    # The replay decoded the whole model view to show a page of it; a page now decodes only its
    # own messages, placed from the fold, or from a snapshot's ranges and read from the store.
    # Both give the same pages, which hold the whole view between them, each message once.
    path = tmp_path / "sessions.db"
    with Store(path) as store:
        import_claude_code(store, [FIXTURES / "claude-code"], skip_bad=True)
        import_pi(store, [FIXTURES / "pi" / "large-session-head.jsonl"])
        import_swe_agent(store, [FIXTURES / "swe-agent"], skip_bad=True)
        views = {(info.id, at): [m.offset for m in thread_state(store, info.id, at).messages]
                 for info in store.all_threads() for at in (info.head, info.head // 2)}
    plain = _replay_walks(path)
    with Store(path) as store:
        for info in store.all_threads():
            if info.head > 2:
                save_snapshot(store, info.id, info.head // 3)
    assert len(views) > 60 and _replay_walks(path) == plain
    for (thread, at, name), pages in plain.items():
        shown = [[int(n) for n in re.findall(r'<span class="meta">offset (\d+)</span>', page)] for page in pages]
        in_order = [offset for page in (shown if name == "later" else shown[::-1]) for offset in page]
        assert in_order == views[thread, at], (thread, at, name)


def test_the_replay_shows_a_tool_result_as_the_thread_page_does(tmp_path: Path) -> None:
    """The replay showed a tool result's content as JSON: a file a tool read was one line of
    `"text": "…\\n…"`, and an image in a result its base64 data, where the thread page shows
    the text and the image (served by its own link: its data is not in the page)."""
    path = tmp_path / "t.db"
    picture = "iVBORw0KGgo" * 100
    with Store(path) as store:
        thread = store.create_thread(thread_id="t")
        store.append_message(thread, "user", "read it")
        store.append_message(thread, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.py"}},
                                                   {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"path": "b.py"}}])
        store.append_message(thread, "user", [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "text", "text": "def f():\n    return '<ok>'"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": picture}}]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "import os\nimport sys", "is_error": True}])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        rows, replay = client.get("/thread?id=t").text, client.get("/replay?id=t").text
    for page in (rows, replay):
        assert "<pre>\ndef f():\n    return &#39;&lt;ok&gt;&#39;</pre>" in page and '<img class="stored-image"' in page
        assert "<pre>\nimport os\nimport sys</pre>" in page and picture not in page


def test_text_a_harness_injected_is_headed_as_the_cli_heads_it(tmp_path: Path) -> None:
    """The page headed Claude Code's command output "user (written by tool claude-code)", which
    reads as a tool call's result; `rows` and the transcript say "injected by claude-code"."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        store.create_thread(thread_id="t")
        store.append(
            "t", [{"type": "message.appended", "data": {"role": "user", "content": "<local-command-stdout>ok</local-command-stdout>"},
                   "meta": {"source": {"tool": "claude-code", "file": "s.jsonl", "flags": {"injected": True}}}}])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        page = client.get("/thread?id=t").text
    assert '<div class="who">user <span class="meta">(injected by claude-code)</span></div>' in page


def test_thinking_returned_empty_is_not_called_redacted(tmp_path: Path) -> None:
    """A thinking block with no text (a signed one Claude Code stored empty, as newer models
    return it) showed "(redacted thinking)", read as erased when nothing was: only a
    `redacted_thinking` block says so."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(thread_id="t")
        store.append_message(thread, "user", "think")
        store.append_message(thread, "assistant", [{"type": "thinking", "thinking": "", "signature": "sig"},
                                                   {"type": "text", "text": "answer"}])
        store.append_message(thread, "user", "again")
        store.append_message(thread, "assistant", [{"type": "redacted_thinking", "data": "opaque"}, {"type": "text", "text": "more"}])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        for page in (client.get("/thread?id=t").text, client.get("/replay?id=t").text):
            assert page.count("(redacted thinking)") == 1 and page.count("(empty: no thinking text was returned)") == 1


def test_a_search_of_a_file_with_no_index_says_nothing_was_searched(tmp_path: Path) -> None:
    """A shared link with `?q=` opened on a file no search has indexed: the viewer cannot build the
    index (it only reads), and "No match." would say the words are in no message."""
    path = tmp_path / "plain.db"
    with Store(path) as store:
        store.append_message(store.create_thread(title="trip"), "user", "a ferry to the island")
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        page = c.get("/", params={"q": "ferry"}).text
    assert "Nothing was searched: this file has no search index" in page and "No match." not in page


def test_the_replay_shows_the_model_thinking_and_request_settings_as_of_its_offset(tmp_path: Path) -> None:
    """The viewer showed none of what a thread's requests send besides its messages: a fork
    that changed the model or a request setting looked like its parent."""
    db = tmp_path / "t.db"
    with Store(str(db)) as store:
        thread = store.create_thread(model="claude-a", settings={"stop_sequences": ["</script><script>alert(1)</script>"],
                                                                 "metadata": {"user_id": "u1"}})
        store.append_message(thread, "user", "hi")
        fork = store.fork(thread, config={"model": "claude-b", "settings": {"stop_sequences": None}})
    with TestClient(create_app(str(db)), base_url="http://127.0.0.1") as browser:
        page = browser.get("/replay", params={"id": thread}).text
        fork_page = browser.get("/replay", params={"id": fork}).text
    shown = page.split('<details id="request-config">', 1)[1].split("</details>", 1)[0]
    assert "claude-a" in shown and "&#34;user_id&#34;: &#34;u1&#34;" in shown
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in shown and "<script>alert" not in page
    forked = fork_page.split('<details id="request-config">', 1)[1].split("</details>", 1)[0]
    assert "claude-b" in forked and "stop_sequences" not in forked and "u1" in forked


def test_a_refused_answer_of_more_rows_than_an_event_shows_still_says_it_was_refused(tmp_path: Path) -> None:
    """An event shows its first 200 rows, then a card counting the rest: the refusal row of an
    answer of 250 blocks was counted among them, and the page never said the answer was refused.
    It ends the event still, after the count, which counts the blocks alone; so on the replay
    and the diff, which show a message's blocks as many."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        thread = store.create_thread(thread_id="t")
        store.append_message(thread, "user", "go on")
        [answer] = store.append(thread, [{"type": "message.appended", "data": {
            "role": "assistant", "content": [{"type": "text", "text": f"part {i}"} for i in range(250)],
            "stop_reason": "refusal", "stop_details": {"type": "refusal", "category": "cyber", "explanation": "<i>No.</i>"}}}])
        store.create_thread(thread_id="other")
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        pages = {url: client.get(url).text for url in ("/thread?id=t", "/replay?id=t", "/diff?a=t&b=other")}
    card = '<div class="card refusal">Refused: <span class="why">cyber: &lt;i&gt;No.&lt;/i&gt;</span></div>'
    for url, page in pages.items():
        assert "part 199<" in page and "part 200<" not in page and "and 50 more blocks of this message" in page, url
        assert page.count(card) == 1 and page.index("and 50 more blocks") < page.index(card), url
    assert f'id="r-{answer.event_id}:250"' in pages["/thread?id=t"]


def test_the_tree_says_which_agent_call_and_directive_each_sub_agent_is(tmp_path: Path) -> None:
    """`threadlog tree` ends a sub-agent fork's line with its agent, call or directive; the
    viewer's fork tree drew the two sub-agents a fan-out made as nodes that differed only by id.
    Their tooltips now say the same as tree's line, escaped as any stored text."""
    path = tmp_path / "fan.db"
    with Store(path) as store:
        t = store.create_thread(title="Trip", thread_id="trip")
        store.append_message(t, "user", "plan it")
        store.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "agents", "input": {}}])
        kids = store.fan_out(t, ["Find a hotel", "<script>alert(1)</script> trains"])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as c:
        page = c.get("/tree", params={"id": "trip"}).text
    tips = {k: html.unescape(v) for k, v in re.findall(r'data-thread="([^"]+)">.*?<title>([^<]*)</title>', page, flags=re.S)}
    assert tips[kids[0]].endswith(', call toolu_1, directive "Find a hotel"'), tips
    assert tips[kids[1]].endswith(', call toolu_1, directive "<script>alert(1)</script> trains"'), tips
    assert tips["trip"] == "trip (thread, 3 events)" and "<script>alert" not in page


def test_a_run_that_kept_its_answer_but_ended_with_an_error_says_so(tmp_path: Path) -> None:
    """A stream that fails after the whole answer came keeps the answer: its run ends `ok`,
    that failure its `error` (`threadlog show` says so of the last run). The thread page, `rows`
    and the transcript showed the answer and nothing of the failure, as a run that went well.
    Each now shows the run's end, its status and its error, escaped as any stored string."""
    from click.testing import CliRunner

    from threadlog.cli import cli

    path = tmp_path / "t.db"
    error = "the API's stream failed after the whole answer had come; the answer is kept: <b>reset</b>"
    with Store(path) as store:
        thread = store.create_thread(thread_id="t")
        store.append(thread, [{"type": "run.started", "data": {"run_id": "r1"}}])
        store.append_message(thread, "user", "go")
        store.append(thread, [{"type": "message.appended", "data": {"role": "assistant", "stop_reason": "end_turn",
                                                                    "content": [{"type": "text", "text": "the answer"}]}}])
        store.append(thread, [{"type": "run.finished", "data": {"run_id": "r1", "status": "ok", "error": error}}])
        store.append(thread, [{"type": "run.started", "data": {"run_id": "r2"}},
                              {"type": "run.finished", "data": {"run_id": "r2", "status": "ok"}}])
    runner = CliRunner()
    rows = runner.invoke(cli, ["--db", str(path), "rows", "t"])
    transcript = runner.invoke(cli, ["--db", str(path), "transcript", "t"])
    assert rows.exit_code == 0 and transcript.exit_code == 0, (rows.output, transcript.output)
    assert f"run ok: {error}" in rows.output and rows.output.count("run ok") == 1, rows.output
    assert "## run ok" in transcript.output and "<b>reset</b>" in transcript.output, transcript.output
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        page = client.get("/thread", params={"id": "t"}).text
    card = page.split('<div class="card run">', 1)[1].split("</li>", 1)[0]
    assert 'status-ok">ok</span>' in card and "the answer is kept: &lt;b&gt;reset&lt;/b&gt;" in card, card
    assert page.count('<div class="card run">') == 1 and "<b>reset</b>" not in page
