"""The web viewer in a real browser: Debian's chromium driven by Playwright, against
`threadlog serve` running as its own process on 127.0.0.1 over a store built here.

One server and one browser for the whole module (starting chromium costs seconds). The
screenshots of the main pages are written to a temporary artifact directory, printed at
the end; `docs/viewer.png` in the README is one of them.
"""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from threadlog import Store
from tests.procs import announced_url
from tests.webstore import FLAG, HOSTILE_MESSAGES, IMG, SCRIPT, build, image_block, png

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if not Path(CHROMIUM).exists():
    pytest.skip(f"no browser at {CHROMIUM} (apt-get install chromium; .ci/run does)", allow_module_level=True)


def start_server(path: Path, port: int = 0) -> tuple[subprocess.Popen[str], str]:
    """`threadlog serve` of `path` in a child process, once it answers: (the process, its base URL)."""
    proc = subprocess.Popen([sys.executable, "-c", "from threadlog.cli import main; main()", "serve", "--db", str(path),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = announced_url(proc)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(base + "/favicon.ico", timeout=1).close()
            return proc, base
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"threadlog serve did not start: {proc.communicate()[1][-2000:]}") from None
            time.sleep(0.1)


def stop_server(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """(base URL, database path, ids): `threadlog serve` in a child process."""
    path = tmp_path_factory.mktemp("web") / "web.db"
    ids = build(path)
    proc, base = start_server(path)
    yield base, path, ids
    stop_server(proc)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go (printed with -s; kept with pytest's temporary directories)."""
    return Path(os.environ.get("THREADLOG_WEB_SHOTS") or tmp_path_factory.mktemp("screenshots"))


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1100, "height": 800})  # type: ignore[attr-defined]
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    context.close()
    assert errors == [], f"the page raised: {errors}"


def url(base: str, path: str, **params: object) -> str:
    return f"{base}{path}?{urlencode(params)}" if params else base + path


def test_list_to_thread_and_fork_card_to_fork_and_back(served, page, shots: Path) -> None:
    base, _, ids = served
    page.goto(base + "/")
    page.screenshot(path=str(shots / "threads.png"), full_page=True)
    page.get_by_role("link", name="Trip to Lyon").click()
    page.wait_for_url(re.compile(r"/thread\?id=trip$"))
    assert page.inner_text("#thread-title") == "Trip to Lyon"
    assert "Find me a train to Lyon" in page.inner_text("#rows")  # Markdown rendered: ** gone, <strong> shown
    assert page.locator("#rows strong").first.inner_text() == "train"
    page.screenshot(path=str(shots / "thread.png"), full_page=True)

    page.locator(".fork-here a.fork-link", has_text=ids["fork"]).click()  # the ⑃ card at the fork point
    page.wait_for_url(re.compile(rf"id={ids['fork']}$"))
    assert "Actually, what about a bus?" in page.inner_text("#rows")
    assert "Book the first one" not in page.inner_text("#rows")  # the parent's events after the fork point
    page.locator(".card.fork a.parent-link").click()  # the fork's own card links back to the fork point
    page.wait_for_url(re.compile(r"id=trip&start=1#o-1$"))  # the page starting at the fork point: none cut short of it
    assert page.inner_text("#thread-title") == "Trip to Lyon"


def test_replay_slider_changes_the_message_count(served, page, shots: Path) -> None:
    base, _, _ = served
    page.goto(url(base, "/replay", id="trip"))
    assert page.inner_text("#message-count") == "3 messages"
    page.locator("#at-slider").focus()
    with page.expect_navigation():
        page.keyboard.press("ArrowLeft")  # 4 events -> 3: the last message goes
    assert "at=3" in page.url
    assert page.inner_text("#message-count") == "2 messages"
    page.screenshot(path=str(shots / "replay.png"), full_page=True)
    page.goto(url(base, "/replay", id="trip", at=0))
    assert page.inner_text("#message-count") == "0 messages"


def open_live(page: Any, base: str, thread: str) -> None:
    """Open a thread's page and wait until its live stream is connected."""
    page.goto(url(base, "/thread", id=thread))
    page.wait_for_selector("#rows[data-connected='1']", timeout=10_000)


def test_a_page_without_javascript_does_not_say_it_is_live(served, browser) -> None:
    """The server's HTML said `· live`, so a browser running no script showed a page as live
    that would never update; the script says it (`· connecting…`, then `· live`) as it follows."""
    base, path, _ = served
    (thread,) = make_threads(path, "no-script", 1)
    context = browser.new_context(java_script_enabled=False)  # type: ignore[attr-defined]
    try:
        tab = context.new_page()
        tab.goto(url(base, "/thread", id=thread))
        assert tab.inner_text("#rows") and "opening message of no-script 0" in tab.inner_text("body")
        assert "live" not in tab.inner_text("p.range")
    finally:
        context.close()


def test_an_appended_event_appears_on_the_open_page_within_two_seconds(served, page) -> None:
    base, path, _ = served
    open_live(page, base, "trip")
    with Store(path) as store:
        store.append_message("trip", "assistant", "Booked: **08:04**, coach 12, seat 45")
        appended = time.monotonic()
    page.get_by_text("coach 12, seat 45").wait_for(timeout=2_000)
    assert time.monotonic() - appended < 2.0
    assert page.locator("#rows strong", has_text="08:04").count() == 1  # rendered like the rest
    assert page.inner_text("#range-end") == "5"
    with Store(path) as store:
        fork = store.fork("trip", at=3)
    page.locator(".fork-here a.fork-link", has_text=fork).wait_for(timeout=2_000)  # a new fork's card, where it was made


def test_a_fork_made_at_an_earlier_offset_appears_live_where_it_was_made(served, page) -> None:
    base, path, _ = served
    open_live(page, base, "long")  # the latest page: offsets 151..250
    with Store(path) as store:
        fork = store.fork("long", at=200)
    card = page.locator(".fork-here a.fork-link", has_text=fork)
    card.wait_for(timeout=2_000)
    items = page.eval_on_selector_all("#rows > li.item", "items => items.map(item => [item.id, Number(item.dataset.offset)])")
    offsets = [offset for _, offset in items]
    assert offsets == sorted(offsets)  # after offset 199, as the page shows it once reloaded; not at the end
    at = [name for name, _ in items].index("forks-200")
    assert (items[at - 1][1], items[at + 1][1]) == (199, 200)


def test_a_tool_call_answered_after_long_progress_turns_ok_on_the_open_page(served, page) -> None:
    """A call 25 events before its result (progress recorded in between) stayed `pending` on
    the open page until it was reloaded; it changes where it is, and the result goes last."""
    base, path, _ = served
    with Store(path) as store:
        store.create_thread(thread_id="slow")
        store.append_message("slow", "assistant", [{"type": "tool_use", "id": "job1", "name": "long_job", "input": {}}])
        store.append_message("slow", "assistant", "started: this takes a while")
        store.append("slow", [{"type": "metadata.set", "data": {"patch": {"progress": i}}} for i in range(24)])
    open_live(page, base, "slow")
    assert page.inner_text("#rows li.kind-tool_call .status") == "pending"
    with Store(path) as store:
        store.append_message("slow", "user", [{"type": "tool_result", "tool_use_id": "job1", "content": "done"}])
    page.locator("#rows li.kind-tool_result").wait_for(timeout=2_000)
    page.wait_for_function("document.querySelector('#rows li.kind-tool_call .status').textContent === 'ok'", timeout=2_000)
    kinds = page.eval_on_selector_all("#rows > li.item", "items => items.map(item => item.className.split(' ')[1])")
    assert kinds == ["kind-tool_call", "kind-text", "kind-tool_result"]


def test_an_answer_cut_short_comes_to_the_open_page_with_its_card(served, page) -> None:
    """An answer cut off at the token limit came to the open page as a whole one: it comes
    with the card that says so, after its text, as the reloaded page shows it."""
    base, path, _ = served
    with Store(path) as store:
        store.create_thread(thread_id="cut")
        store.append_message("cut", "user", "Hi")
    open_live(page, base, "cut")
    with Store(path) as store:
        store.append_message("cut", "assistant", [{"type": "text", "text": "The first step is"}], stop_reason="max_tokens")
    page.locator("#rows li.kind-cut_short .card.cut-short").wait_for(timeout=2_000)
    assert page.inner_text("#rows li.kind-cut_short .card.cut-short") == "Answer cut off at the token limit (max_tokens)"
    kinds = page.eval_on_selector_all("#rows > li.item", "items => items.map(item => item.className.split(' ')[1])")
    assert kinds == ["kind-text", "kind-text", "kind-cut_short"]
    page.reload()
    assert page.inner_text("#rows li.kind-cut_short .card.cut-short") == "Answer cut off at the token limit (max_tokens)"


@pytest.mark.parametrize("progress", [0, 30], ids=["next", "after-long-progress"])
def test_a_paused_answers_card_leaves_the_open_page_once_the_model_goes_on(served, page, progress: int) -> None:
    """The card of a paused answer (`pause_turn`) nothing followed stays on the open page while
    the thread ends on it; the message that goes on from it takes it away, as a page loaded then
    shows none. With more events between them than an update sends again (progress recorded
    while the turn waited), the card stayed until the page was reloaded."""
    base, path, _ = served
    thread = f"paused-{progress}"
    with Store(path) as store:
        store.create_thread(thread_id=thread)
        store.append_message(thread, "user", "Search trains")
        store.append_message(thread, "assistant", [{"type": "text", "text": "Searching."}], stop_reason="pause_turn")
        if progress:
            store.append(thread, [{"type": "metadata.set", "data": {"patch": {"progress": i}}} for i in range(progress)])
    open_live(page, base, thread)
    card = page.locator("#rows li.kind-cut_short .card.cut-short")
    assert card.inner_text() == "Answer paused by the server and not resumed (pause_turn)"
    with Store(path) as store:
        store.append_message(thread, "assistant", [{"type": "text", "text": "Found the 08:04."}], stop_reason="end_turn")
    page.get_by_text("Found the 08:04.").wait_for(timeout=2_000)
    page.locator("#rows li.kind-cut_short").wait_for(state="detached", timeout=2_000)
    texts = page.eval_on_selector_all("#rows > li.kind-text", "items => items.map(item => item.innerText)")
    assert [said in text for said, text in zip(["Search trains", "Searching.", "Found the 08:04."], texts, strict=True)] == [True] * 3
    page.reload()
    assert card.count() == 0


def test_hostile_strings_run_nothing_and_show_as_text(served, page, shots: Path) -> None:
    base, _, ids = served
    page.goto(base + "/?all=1")
    assert SCRIPT in page.inner_text("#threads")  # a <script> title is text in the list
    page.goto(url(base, "/thread", id=ids["bad"]))
    page.screenshot(path=str(shots / "hostile.png"), full_page=True)
    text = page.inner_text("main")
    assert page.inner_text("#thread-title") == SCRIPT
    assert page.inner_text("#thread-id") == ids["bad"]
    assert f"plain {SCRIPT} and {IMG}" in text
    assert "javascript:window" not in " ".join(page.eval_on_selector_all("a", "links => links.map(a => a.href)"))
    assert page.eval_on_selector_all("main *", "els => els.filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length") == 0
    assert page.locator("main script, main iframe, main svg[onload]").count() == 0
    page.locator("details.tool summary").first.click()
    assert IMG in page.inner_text(".tool-name")  # the tool's name, as text
    assert f"question {SCRIPT}" in page.inner_text(".card.interrupt")
    assert page.inner_text(".card.interrupt .status") == "resolved"
    page.locator(".thinking summary").click()
    assert f"thinking {SCRIPT}" in page.inner_text(".thinking")
    page.locator(".compaction summary").click()
    assert f"summary {IMG}" in page.inner_text(".compaction")
    assert "my password" not in text  # the redacted message: erased, who and why shown as text
    assert page.locator(".redacted-note .actor").first.inner_text() == SCRIPT
    assert IMG in page.inner_text(".redaction .reason")
    for shown in (f"[click me](javascript:window.{FLAG}=1)", f'<a href="javascript:window.{FLAG}=1">raw link</a>',
                  f'<svg onload="window.{FLAG}=1"></svg>', f'<iframe src="javascript:window.{FLAG}=1"></iframe>'):
        assert shown in text  # Markdown that would render to them, and raw HTML: text
    assert len(HOSTILE_MESSAGES) == 4
    for path in ("/blame", "/replay", "/tree"):
        page.goto(url(base, path, id=ids["bad"]))
    page.goto(url(base, "/diff", a=ids["bad"] + "/fork"))
    assert page.evaluate(f"typeof window.{FLAG}") == "undefined"


def test_a_long_unbroken_string_stays_inside_its_row(served, page) -> None:
    """A word longer than the row (a pasted minified line, a long path, an id) ran out of its
    row and widened the page to 32,000 px: in a message, a heading, inline code, an interrupt's
    question, the replay, and a fork's id on its page and on the diff beside its parent."""
    base, path, _ = served
    word = "A" * 3000
    with Store(path) as store:
        wide = store.create_thread(title="wide", thread_id="wide")
        store.append_message(wide, "user", f"word {word}")
        store.append_message(wide, "assistant", f"# {word}\n\ncode `{word}`")
        store.append(wide, [{"type": "interrupt.raised", "data": {"interrupt_id": "ask", "question": word}}])
        fork = store.fork(wide, fork_id="F" * 200)
        store.append_message(fork, "user", word)
    for target in (url(base, "/thread", id=wide), url(base, "/replay", id=wide), url(base, "/thread", id=fork),
                   url(base, "/diff", a=fork)):
        page.goto(target)
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"), target


def test_a_long_run_of_kerned_letters_is_laid_out_in_a_moment(served, page) -> None:
    """Chromium kerns a word as it breaks it into lines, at a cost that grows with the square
    of its length: a message of 60,000 `A` (or `AV` repeated), a proportional font, took 4 to
    11 s to lay out, the tab frozen meanwhile; base64 or hex of that length took 0.1 s. The
    pages do not kern."""
    base, path, _ = served
    with Store(path) as store:
        kern = store.create_thread(title="A" * 20000, thread_id="kern")
        store.append_message(kern, "user", "A" * 60000)
        store.append_message(kern, "assistant", "AV" * 30000)
    for target in (url(base, "/thread", id=kern), url(base, "/replay", id=kern)):
        started = time.monotonic()
        page.goto(target)
        page.evaluate("document.body.offsetHeight")  # the layout, done now if it was not yet
        assert time.monotonic() - started < 2, target


def test_text_shown_preformatted_keeps_its_first_line_break(served, page) -> None:
    """The browser drops a line break right after `<pre>`: a tool result, a thinking block or
    an answer that began with blank lines was shown one line short, and one that was only a
    line break showed as nothing, on the page, the replay and live."""
    base, path, _ = served
    output, thought, answer = "\nline 2 of the output", "\n\nthought on line 3", "\nyes"
    with Store(path) as store:
        pre = store.create_thread(title="pre", thread_id="pre")
        store.append_message(pre, "assistant", [{"type": "thinking", "thinking": thought, "signature": "c2ln"},
                                                {"type": "tool_use", "id": "toolu_pre", "name": "run", "input": {}},
                                                {"type": "tool_use", "id": "toolu_pre2", "name": "run", "input": {}}])
        store.append_message(pre, "user", [{"type": "tool_result", "tool_use_id": "toolu_pre", "content": output},
                                           {"type": "tool_result", "tool_use_id": "toolu_pre2",
                                            "content": [{"type": "text", "text": output}]}])
        store.append(pre, [{"type": "interrupt.raised", "data": {"interrupt_id": "ask", "question": "ok?"}},
                           {"type": "interrupt.resolved", "data": {"interrupt_id": "ask", "answer": answer}}])
    texts = "els => els.map(el => el.textContent)"
    open_live(page, base, "pre")
    assert page.eval_on_selector_all("details.thinking pre", texts) == [thought]
    assert page.eval_on_selector_all("details.tool pre", texts) == ["{}", "{}", output, output]
    assert page.eval_on_selector_all(".answer pre", texts) == [answer]
    with Store(path) as store:  # and a row that arrives live
        store.append_message("pre", "assistant", [{"type": "thinking", "thinking": "\nlive", "signature": "c2ln"}])
    page.locator("details.thinking pre", has_text="live").wait_for(state="attached", timeout=2_000)
    assert page.eval_on_selector_all("details.thinking pre", texts) == [thought, "\nlive"]
    page.goto(url(base, "/replay", id="pre"))
    assert page.eval_on_selector_all("details.thinking pre", texts) == [thought, "\nlive"]
    assert page.eval_on_selector_all("details.tool pre", texts) == ["{}", "{}", output, output]


def test_a_stored_image_is_drawn_and_a_named_one_is_not_fetched(served, page) -> None:
    """A pasted screenshot showed as `[image]` only. It is now drawn from the store (within
    the page's policy, which loads images from the viewer itself only); an image that names
    an address stays a link: opening a page fetches nothing from elsewhere."""
    base, path, _ = served
    with Store(path) as store:
        shot = store.create_thread(title="shot", thread_id="shot")
        store.append_message(shot, "user", [{"type": "text", "text": "my screen"}, image_block(png(3, 2))])
        store.append_message(shot, "user", [{"type": "image", "source": {"type": "url", "url": "https://example.com/x.png"}}])
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    for target in (url(base, "/thread", id=shot), url(base, "/replay", id=shot)):
        requested.clear()
        page.goto(target)
        img = page.locator("img.stored-image")
        img.wait_for()
        drawn = page.wait_for_function("(i) => i.complete && i.naturalWidth > 0 && [i.naturalWidth, i.naturalHeight]",
                                       arg=img.element_handle(), timeout=5_000)  # loading="lazy": not at once
        assert drawn.json_value() == [3, 2]
        assert all(seen.startswith(base) for seen in requested), requested
        assert page.locator("a", has_text="image: https://example.com/x.png").count() == 1


def test_an_image_opened_on_its_own_shows_without_a_console_error(served, page) -> None:
    """Following an image's link opens the browser's own image view, which styles itself
    inline: the viewer's policy (`style-src 'self'`) refused that style, an error in the
    console each time an image was opened and the picture left unstyled."""
    base, path, _ = served
    with Store(path) as store:
        alone = store.create_thread(title="alone", thread_id="alone")
        store.append_message(alone, "user", [image_block(png(4, 3))])
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(url(base, "/thread", id=alone))
    page.locator("a.image").click()
    page.wait_for_url(re.compile(r"/image\?"))
    drawn = page.wait_for_function("() => { const i = document.querySelector('img'); "
                                   "return i && i.complete && [i.naturalWidth, i.naturalHeight]; }", timeout=5_000)
    assert drawn.json_value() == [4, 3]
    assert errors == []


def test_an_image_appended_while_the_page_is_open_is_drawn_live(served, page) -> None:
    """The live update renders a new row alone, where the macro that draws an image was not
    imported: a pasted screenshot broke the open page's stream (the server raised on every
    poll), and no later message reached the page until it was reloaded."""
    base, path, _ = served
    with Store(path) as store:
        store.create_thread(title="pasting", thread_id="pasting")
        store.append_message("pasting", "user", "watch this")
    open_live(page, base, "pasting")
    with Store(path) as store:
        store.append_message("pasting", "user", [{"type": "text", "text": "here it is"}, image_block(png(4, 3))])
        store.append_message("pasting", "assistant", [{"type": "tool_use", "id": "toolu_shot", "name": "screenshot", "input": {}}])
        store.append_message("pasting", "user", [{"type": "tool_result", "tool_use_id": "toolu_shot",
                                                  "content": [image_block(png(6, 5))]}])
        store.append_message("pasting", "assistant", "a grey rectangle")
    page.get_by_text("a grey rectangle").wait_for(timeout=5_000)
    page.locator("#rows details.tool").last.evaluate("(d) => { d.open = true; }")
    images = page.locator("#rows img.stored-image")
    assert images.count() == 2
    sizes = [page.wait_for_function("(i) => i.complete && i.naturalWidth > 0 && [i.naturalWidth, i.naturalHeight]",
                                    arg=images.nth(n).element_handle(), timeout=5_000).json_value() for n in range(2)]
    assert sizes == [[4, 3], [6, 5]]


def test_a_page_left_open_takes_one_page_of_live_rows_then_offers_the_latest(served, page) -> None:
    """Each live update was bounded, but a page left open on a busy thread appended every update
    it got, with no bound on the page. It takes one page's worth of new rows (1,000), then
    stops and links to the thread's latest page, as after a batch too big to send."""
    base, path, _ = served
    with Store(path) as store:
        store.create_thread(title="busy", thread_id="busy")
        store.append_message("busy", "user", "go")
    open_live(page, base, "busy")
    shown = page.locator("#rows > li.item").count()
    head = 2
    for batch in range(7):  # 150 rows each: under what one update sends (`live.LIMIT`)
        with Store(path) as store:
            head = store.append("busy", [{"type": "message.appended", "data": {"role": "user", "content": f"{batch}.{i}"}}
                                         for i in range(150)])[-1].offset + 1
        if batch < 6:
            page.wait_for_selector(f"#range-end:text-is('{head}')", timeout=5_000)
            assert page.locator("#live-reload").count() == 0
    page.locator("#live-reload").wait_for(timeout=5_000)
    assert page.locator("#live-reload").inner_text() == f"{head} events now: show the latest"
    assert page.get_attribute("#live-reload", "href") == "/thread?id=busy"
    assert page.locator("#rows > li.item").count() == shown + 900  # the 7th update was not added


def test_a_redaction_erases_the_row_of_a_page_that_offers_the_latest(served, page) -> None:
    """A page that stopped adding rows (it offers the latest page) closed its live stream: a
    redaction made after that left the erased text on it."""
    base, path, _ = served
    with Store(path) as store:
        store.create_thread(thread_id="stale")
        secret = store.append_message("stale", "user", "my card 4111")
    open_live(page, base, "stale")
    with Store(path) as store:
        store.append("stale", [{"type": "message.appended", "data": {"role": "user", "content": f"imported {i}"}}
                               for i in range(300)])
    page.locator("#live-reload").wait_for(timeout=5_000)
    with Store(path) as store:
        store.redact(secret.position, reason="pci", actor="ops")
    page.locator("#rows li.redacted").wait_for(timeout=5_000)
    assert "4111" not in page.inner_text("#rows")
    assert page.locator("#rows > li.item").count() == 1  # the erased row in place; the import is on the latest page
    assert page.locator("#live-reload").count() == 1


@pytest.mark.parametrize("stale", [False, True])
def test_a_redaction_takes_every_row_of_its_message_off_an_open_page(served, page, stale: bool) -> None:
    """A redacted message keeps one `[redacted]` text block: the update replaced the row of its
    first block, and the page kept its other blocks' text and the card of an answer cut short,
    with its stop reason, that a reload no longer shows."""
    base, path, _ = served
    thread = f"erased-blocks-{int(stale)}"
    with Store(path) as store:
        store.create_thread(thread_id=thread)
        store.append_message(thread, "user", "go")
        secret = store.append_message(thread, "assistant", [{"type": "text", "text": "part one"}, {"type": "text", "text": "card 4111"}],
                                      stop_reason="odd-reason-4111")
        store.fork(thread, at=2, fork_id=f"{thread}-fork")  # its card, at the same offset, stays
    open_live(page, base, thread)
    assert page.locator("#rows .card.cut-short").count() == 1 and "card 4111" in page.inner_text("#rows")
    if stale:  # a page that offers the latest page: it only replaces the rows it holds
        with Store(path) as store:
            store.append(thread, [{"type": "message.appended", "data": {"role": "user", "content": f"more {i}"}} for i in range(300)])
        page.locator("#live-reload").wait_for(timeout=5_000)
    with Store(path) as store:
        store.redact(secret.position, reason="pci", actor="ops")
    page.locator("#rows li.redacted").wait_for(timeout=5_000)
    page.wait_for_function("() => !document.getElementById('rows').innerText.includes('4111')", timeout=5_000)
    assert page.locator("#rows .card.cut-short").count() == 0
    assert page.locator("#rows li.redacted").count() == 1 and page.locator("#rows .fork-here").count() == 1
    assert "go" in page.inner_text("#rows")


# What a browser does to a page when its tab goes to the background or comes back: a headless
# browser keeps every page visible, so the test says which is hidden, as a browser would.
SHOW = """hidden => {
  Object.defineProperty(document, "hidden", {configurable: true, get: () => hidden});
  Object.defineProperty(document, "visibilityState", {configurable: true, get: () => hidden ? "hidden" : "visible"});
  document.dispatchEvent(new Event("visibilitychange"));
}"""


# How each page follows the log: through the stream the browser's pages share (a SharedWorker),
# or, in a browser without shared workers, through a stream of its own.
FOLLOWERS = {"shared": "", "own": "delete window.SharedWorker"}


@pytest.mark.parametrize("follower", list(FOLLOWERS))
def test_pages_in_the_background_give_back_their_connection_so_a_seventh_tab_loads(served, browser, follower: str) -> None:
    """A browser opens six connections to a server at most, and each open thread page held one
    for its live stream: a seventh tab did not even load. A hidden page stops following (a page
    with a stream of its own closes it), and catches up when shown, from the last update it got:
    what was appended meanwhile appears."""
    base, path, _ = served
    context = browser.new_context()  # type: ignore[attr-defined]
    context.add_init_script(FOLLOWERS[follower])
    appended = f"Appended while the first tab was hidden ({follower})"
    errors: list[str] = []
    try:
        tabs = []
        for _ in range(6):
            tab = context.new_page()
            tab.on("pageerror", lambda error: errors.append(str(error)))
            open_live(tab, base, "trip")
            tabs.append(tab)
        for tab in tabs:
            tab.evaluate(SHOW, True)
        seventh = context.new_page()
        open_live(seventh, base, "trip")  # timed out with the six streams open
        for tab in tabs:
            assert tab.get_attribute("#rows", "data-connected") is None
            assert tab.inner_text("#live-state") == "· paused while hidden"
        with Store(path) as store:
            store.append_message("trip", "assistant", appended)
        seventh.get_by_text(appended).wait_for(timeout=5_000)
        first = tabs[0]
        first.wait_for_timeout(1_000)
        assert appended not in first.inner_text("#rows")
        first.evaluate(SHOW, False)
        first.get_by_text(appended).wait_for(timeout=5_000)
        first.wait_for_selector("#rows[data-connected='1']", timeout=5_000)
        assert first.inner_text("#live-state") == "· live"
        assert first.get_by_text(appended).count() == 1  # sent once, not again
    finally:
        context.close()
    assert errors == [], f"the page raised: {errors}"


@pytest.mark.parametrize("follower", list(FOLLOWERS))
def test_a_page_opened_in_the_background_connects_when_first_shown(served, page, follower: str) -> None:
    """A link opened in a background tab connected at once, holding one of the six connections
    for a page no one looks at: it connects when shown."""
    base, path, _ = served
    page.add_init_script(FOLLOWERS[follower])
    page.add_init_script("(" + SHOW + ")(true)")
    page.goto(url(base, "/thread", id="trip"))
    page.wait_for_timeout(1_000)
    assert page.get_attribute("#rows", "data-connected") is None
    page.evaluate(SHOW, False)
    page.wait_for_selector("#rows[data-connected='1']", timeout=10_000)
    with Store(path) as store:
        store.append_message("trip", "assistant", f"Seen by the page shown late ({follower})")
    page.get_by_text(f"Seen by the page shown late ({follower})").wait_for(timeout=5_000)


def make_threads(path: Path, name: str, count: int) -> list[str]:
    """Threads `{name}-0`.. of one message each, in the database the tests of this file share:
    a name for each test that writes to them, so each may run alone, or after the others."""
    threads = [f"{name}-{n}" for n in range(count)]
    with Store(path) as store:
        for n, thread in enumerate(threads):
            store.create_thread(title=f"{name} {n}", thread_id=thread)
            store.append_message(thread, "user", f"opening message of {name} {n}")
    return threads


def open_tabs(context: Any, base: str, threads: list[str], errors: list[str]) -> list[Any]:
    """One visible live page of each thread in `threads`, in one browser (one pool of connections)."""
    tabs = []
    for thread in threads:
        tab = context.new_page()
        tab.set_default_timeout(10_000)
        tab.on("pageerror", lambda error: errors.append(str(error)))
        open_live(tab, base, thread)
        tabs.append(tab)
    return tabs


def test_eight_visible_pages_all_load_and_follow_their_threads(served, browser) -> None:
    """A browser opens six connections to a server at most, and each visible thread page held one
    for its live stream: a seventh page did not load at all, nor did any other page of the
    server. The pages of one browser share one connection that says when the log moved; each
    then asks for its own rows, a request that ends at once."""
    base, path, _ = served
    threads = ["trip"] * 4 + make_threads(path, "many", 4)
    context = browser.new_context()  # type: ignore[attr-defined]
    errors: list[str] = []
    try:
        tabs = open_tabs(context, base, threads, errors)  # the seventh timed out
        for tab, thread in zip(tabs, threads):
            assert tab.inner_text("#thread-id") == thread
            assert tab.locator("#rows > li.item").count() > 0
        assert "opening message of many 3" in tabs[7].inner_text("#rows")
        listing = context.new_page()
        listing.goto(base + "/?all=1", timeout=10_000)  # an ordinary page of the server loads too
        assert "many 3" in listing.inner_text("#threads")
        with Store(path) as store:
            store.append_message("trip", "assistant", "Seen by every page of the trip")
            store.append_message("many-1", "assistant", "A reply in many 1")
            store.append_message("many-3", "assistant", "A reply in many 3")
            appended = time.monotonic()
        for tab in tabs[:4]:
            tab.get_by_text("Seen by every page of the trip").wait_for(timeout=2_000)
        tabs[5].get_by_text("A reply in many 1").wait_for(timeout=2_000)
        tabs[7].get_by_text("A reply in many 3").wait_for(timeout=2_000)
        assert time.monotonic() - appended < 2.0
        for tab in tabs[:4]:
            assert tab.get_by_text("Seen by every page of the trip").count() == 1
            assert tab.inner_text("#live-state") == "· live"
        for tab in (tabs[4], tabs[6]):  # the threads nothing was appended to: unchanged
            assert tab.locator("#rows > li.item").count() == 1
    finally:
        context.close()
    assert errors == [], f"the page raised: {errors}"


def test_closing_the_first_page_leaves_the_others_following(served, browser) -> None:
    """The page that opened first is not special: once it is closed, the pages left go on
    showing new events, and a page opened afterwards follows too."""
    base, path, _ = served
    first, second = make_threads(path, "left", 2)
    context = browser.new_context()  # type: ignore[attr-defined]
    errors: list[str] = []
    try:
        tabs = open_tabs(context, base, ["trip", first, second], errors)
        tabs[0].close()
        with Store(path) as store:
            store.append_message(first, "assistant", "After the first page closed")
            store.append_message(second, "assistant", "After the first page closed, too")
        tabs[1].get_by_text("After the first page closed").wait_for(timeout=2_000)
        tabs[2].get_by_text("After the first page closed, too").wait_for(timeout=2_000)
        tabs[1].close()
        (later,) = open_tabs(context, base, ["trip"], errors)
        with Store(path) as store:
            store.append_message("trip", "assistant", "Seen by a page opened after the others closed")
            store.append_message(second, "assistant", "And by the one left open")
        later.get_by_text("Seen by a page opened after the others closed").wait_for(timeout=2_000)
        tabs[2].get_by_text("And by the one left open").wait_for(timeout=2_000)
    finally:
        context.close()
    assert errors == [], f"the page raised: {errors}"


def test_the_list_keeps_ids_kinds_and_times_on_one_line(served, page) -> None:
    """Beside a long title the list broke its short columns anywhere: an id over three lines,
    `thr` / `ead`, a date split at its hyphens."""
    base, path, _ = served
    with Store(path) as store:
        store.create_thread(title=" ".join(["a long title of many words"] * 8), thread_id="titled")
    page.goto(base + "/?all=1")
    # What each cell of the short columns holds is one line of its text tall.
    lines = page.eval_on_selector_all("#threads td:not(:first-child)", """cells => cells.map(cell => {
        const text = document.createRange();
        text.selectNodeContents(cell);
        return Math.round(text.getBoundingClientRect().height / (parseFloat(getComputedStyle(cell).fontSize) * 1.5));
    })""")
    assert lines and set(lines) == {1}, lines


def test_the_list_fits_a_narrow_window(served, page) -> None:
    """Kept on one line, the list's short columns (a fork's `⑃ of <id> at N` among them) made
    the page 793 px wide in a window of 375 or 600: the whole page scrolled sideways, its
    header and search too. The table scrolls in its own box; the page keeps the window's width."""
    base, _, _ = served
    for width in (375, 600):
        page.set_viewport_size({"width": width, "height": 800})
        page.goto(base + "/?all=1")
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"), width
        lines = page.eval_on_selector_all("#threads td:not(:first-child)", """cells => cells.map(cell => {
            const text = document.createRange();
            text.selectNodeContents(cell);
            return Math.round(text.getBoundingClientRect().height / (parseFloat(getComputedStyle(cell).fontSize) * 1.5));
        })""")
        assert lines and set(lines) == {1}, (width, lines)


def test_the_tree_has_one_node_per_thread(served, page, shots: Path) -> None:
    base, path, ids = served
    page.goto(url(base, "/tree", id=ids["deeper"]))
    page.screenshot(path=str(shots / "tree.png"), full_page=True)
    with Store(path, read_only=True) as store:
        threads = store.subtree("trip")  # trip, its fork, the fork's fork (and the live test's fork)
    nodes = page.eval_on_selector_all("svg a.node", "nodes => nodes.map(n => n.dataset.thread)")
    assert sorted(nodes) == sorted(info.id for info in threads) and len(threads) >= 3
    labels = page.locator("svg .edge-label").all_text_contents()
    assert sorted(labels) == sorted(f"@{info.parent_offset}" for info in threads if info.parent_id)
    assert {"@2", "@4"} <= set(labels)  # trip at 2; the fork at its head (fork card + 1 message)
    page.locator(f"svg a.node[data-thread='{ids['fork']}']").click()
    page.wait_for_url(re.compile(rf"/thread\?id={ids['fork']}$"))


def test_screenshots_were_saved(shots: Path) -> None:
    saved = sorted(p.name for p in shots.glob("*.png"))
    print(f"\nweb viewer screenshots in {shots}: {', '.join(saved)}")
    assert {"threads.png", "thread.png", "replay.png", "tree.png", "hostile.png"} <= set(saved)


def test_the_tree_scrolls_in_its_own_box_in_a_narrow_window(served, page) -> None:
    """The tree is drawn at its full width (a node is 360 px, each level 56 more): in a window
    of 380 px the page scrolled sideways, header and all, and a chain of forks made it as wide
    at any width. The tree scrolls in its own box; the page keeps the window's width, and every
    node can still be scrolled to and opened."""
    base, path, _ = served
    with Store(path) as store:
        chain = store.create_thread(title="chain", thread_id="chain")
        store.append_message(chain, "user", "a root")
        deepest = chain
        for _ in range(16):  # 16 + 16 * 56 + 360 = 1272 px wide: wider than the page's 1100 at any width
            deepest = store.fork(deepest)
    fits_window = "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    for width, target in ((380, "trip"), (380, deepest), (1280, "trip"), (1280, deepest)):
        page.set_viewport_size({"width": width, "height": 800})
        page.goto(url(base, "/tree", id=target))
        assert page.evaluate(fits_window), (width, target)
        box = page.locator("#tree-box")
        inside = box.evaluate("b => [b.scrollWidth, b.clientWidth, b.getBoundingClientRect().right]")
        assert inside[2] <= width, (width, target, inside)  # the box itself within the window
        drawn = page.locator("#tree").evaluate("svg => svg.getBoundingClientRect().width")
        assert drawn == int(page.locator("#tree").get_attribute("width")), (width, target)  # not shrunk to unreadable
        assert (inside[0] > inside[1]) == (drawn > inside[1]), (width, target, inside)  # scrolls only when it must
        # Scrolled to its end, the box shows the drawing's right edge: nothing is cut off for good.
        edges = box.evaluate("""b => { b.scrollLeft = b.scrollWidth;
            return [b.querySelector('svg').getBoundingClientRect().right, b.getBoundingClientRect().right]; }""")
        assert edges[0] <= edges[1] + 1, (width, target, edges)
        assert page.evaluate(fits_window), (width, target)
    page.set_viewport_size({"width": 380, "height": 800})
    page.goto(url(base, "/tree", id=deepest))
    page.locator(f"svg a.node[data-thread='{deepest}']").click()
    page.wait_for_url(re.compile(rf"/thread\?id={re.escape(deepest)}$"))


def test_a_refused_update_stops_the_page_instead_of_asking_every_second(served, page) -> None:
    """An update the server refuses (a 4xx page, e.g. the thread is gone from a database the
    server now serves) is not asked for again and again: the page says it stopped, and why."""
    base, path, _ = served
    (thread,) = make_threads(path, "refused", 1)
    asked: list[str] = []

    def refuse(route: Any) -> None:
        asked.append(route.request.url)
        route.fulfill(status=404, content_type="text/html", body="<!doctype html><p>thread not found</p>")

    page.route("**/live/rows*", refuse)
    open_live(page, base, thread)
    with Store(path) as store:
        store.append_message(thread, "assistant", "Never shown: the update is refused")
    page.locator("#live-state", has_text="stopped").wait_for(timeout=5_000)
    page.wait_for_timeout(2_500)
    assert len(asked) == 1, asked
    assert page.inner_text("#live-state") == "· live updates stopped: the server refused this page's update (HTTP 404); reload the page"


class _BadGateway(http.server.BaseHTTPRequestHandler):
    """What a proxy in front of the viewer answers while the viewer restarts: a 502 page."""

    def do_GET(self) -> None:
        self.send_response(502)
        self.send_header("content-type", "text/html")
        self.end_headers()
        self.wfile.write(b"<!doctype html><p>bad gateway</p>")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize("follower", list(FOLLOWERS))
def test_a_pages_stream_opens_again_after_an_answer_that_is_not_a_stream(tmp_path: Path, browser, follower: str) -> None:
    """A browser gives up on a stream answered by anything but a stream (a proxy's 502 while the
    server restarts), where it opens a dropped one again by itself. The stream the pages share
    was then never opened again: every page of the browser said `reconnecting…` for good, and a
    page opened, or reloaded, afterwards did not follow either, as the pages open kept it. A
    page's own stream (no shared workers) said `reconnecting…` for good too."""
    path = tmp_path / "restart.db"
    (thread,) = make_threads(path, "restart", 1)
    proc, base = start_server(path)
    port = int(base.rsplit(":", 1)[1])
    context = browser.new_context()  # type: ignore[attr-defined]
    context.add_init_script(FOLLOWERS[follower])
    errors: list[str] = []
    try:
        (tab,) = open_tabs(context, base, [thread], errors)
        stop_server(proc)
        gateway = http.server.ThreadingHTTPServer(("127.0.0.1", port), _BadGateway)
        threading.Thread(target=gateway.serve_forever, daemon=True).start()
        try:
            tab.locator("#live-state", has_text="reconnecting").wait_for(timeout=5_000)
            tab.wait_for_timeout(5_000)  # the browser opens the stream again, and is answered the 502
        finally:
            gateway.shutdown()
            gateway.server_close()
        proc, _ = start_server(path, port)
        tab.wait_for_selector("#rows[data-connected='1']", timeout=10_000)
        with Store(path) as store:
            store.append_message(thread, "assistant", "Appended once the server was back")
        tab.get_by_text("Appended once the server was back").wait_for(timeout=5_000)
        assert tab.inner_text("#live-state") == "· live"
        (later,) = open_tabs(context, base, [thread], errors)  # a page opened afterwards follows too
        later.get_by_text("Appended once the server was back").wait_for(timeout=5_000)
    finally:
        context.close()
        stop_server(proc)
    assert errors == [], f"the page raised: {errors}"


def _unavailable(times: int, asked: list[float], content_type: str, body: str) -> Callable[[Any], None]:
    """A route answering its first `times` requests 503 with `body`, then passing them on; the
    time of each request is added to `asked`."""
    def route_(route: Any) -> None:
        asked.append(time.monotonic())
        if len(asked) <= times:
            route.fulfill(status=503, content_type=content_type, body=body)
        else:
            route.continue_()

    return route_


def test_a_page_whose_update_failed_once_says_live_again_once_it_has_it(served, page) -> None:
    """An update that failed (a server error page) is asked for again a second later, and the
    page says `reconnecting…` meanwhile. Once it came, the page went on saying `reconnecting…`,
    and held no `data-connected`, until the log next moved: maybe hours on a quiet thread."""
    base, path, _ = served
    (thread,) = make_threads(path, "flaky", 1)
    asked: list[float] = []
    page.route("**/live/rows*", _unavailable(1, asked, "text/html", "<!doctype html><p>busy</p>"))
    open_live(page, base, thread)
    with Store(path) as store:
        store.append_message(thread, "assistant", "Shown once asked again")
    page.get_by_text("Shown once asked again").wait_for(timeout=5_000)
    page.wait_for_selector("#rows[data-connected='1']", timeout=2_000)
    assert page.inner_text("#live-state") == "· live"
    assert len(asked) == 2, asked


@pytest.mark.parametrize("follower", list(FOLLOWERS))
def test_a_page_goes_on_following_once_a_database_that_could_not_be_opened_is_back(tmp_path: Path, browser,
                                                                                 follower: str) -> None:
    """The database moved away for a while (a restore, a copy put back) is a 503, which passes:
    the page said `live updates stopped: the database cannot be opened now` and followed nothing
    more once the file was back, until reloaded. It says so while it lasts, and goes on after."""
    folder, away = tmp_path / "served", tmp_path / "away"
    folder.mkdir()
    away.mkdir()
    path = folder / "moving.db"
    (thread,) = make_threads(path, "moving", 1)
    proc, base = start_server(path)
    context = browser.new_context()  # type: ignore[attr-defined]
    context.add_init_script(FOLLOWERS[follower])
    errors: list[str] = []
    try:
        (tab,) = open_tabs(context, base, [thread], errors)
        for side in list(folder.iterdir()):  # the file and what SQLite keeps beside it
            side.rename(away / side.name)
        tab.locator("#live-state", has_text="database unavailable").wait_for(timeout=5_000)
        tab.wait_for_timeout(2_000)  # looked at again, still missing: the page still waits, saying so
        assert tab.inner_text("#live-state") == "· database unavailable, retrying…"
        assert tab.get_attribute("#rows", "data-connected") is None
        for side in list(away.iterdir()):
            side.rename(folder / side.name)
        with Store(path) as store:
            store.append_message(thread, "assistant", "Appended once the database was back")
        tab.get_by_text("Appended once the database was back").wait_for(timeout=10_000)
        tab.wait_for_selector("#rows[data-connected='1']", timeout=5_000)
        assert tab.inner_text("#live-state") == "· live"
    finally:
        context.close()
        stop_server(proc)
    assert errors == [], f"the page raised: {errors}"


def test_an_update_answered_database_unavailable_is_asked_again_less_often_then_shown(served, page) -> None:
    """A page's update answered 503 (the database cannot be opened now) stopped the page for
    good, as a refusal does. It is asked again, each time after a longer wait, with a notice."""
    base, path, _ = served
    (thread,) = make_threads(path, "unavailable", 1)
    asked: list[float] = []
    said = '{"error": "the database cannot be opened now: no database at /srv/t.db"}'
    page.route("**/live/rows*", _unavailable(3, asked, "application/json", said))
    open_live(page, base, thread)
    with Store(path) as store:
        store.append_message(thread, "assistant", "Shown once the database opened")
    page.locator("#live-state", has_text="database unavailable").wait_for(timeout=5_000)
    assert page.inner_text("#live-state") == "· database unavailable, retrying…"
    page.get_by_text("Shown once the database opened").wait_for(timeout=15_000)
    page.wait_for_selector("#rows[data-connected='1']", timeout=2_000)
    assert page.inner_text("#live-state") == "· live"
    waits = [later - earlier for earlier, later in zip(asked, asked[1:])]
    assert len(asked) == 4 and 0.8 < waits[0] < waits[1] < waits[2], waits


def test_a_page_of_a_replaced_database_says_it_stopped(tmp_path: Path, browser) -> None:
    """A file replaced under the server by one with a shorter log (a restore, a copy): the page
    of the old file asked for nothing until the new log passed the position it had shown,
    saying `· live` all along, then showed the new file's events among the old one's rows."""
    path = tmp_path / "replaced.db"
    (thread,) = make_threads(path, "replaced", 1)
    with Store(path) as store:
        for n in range(10):
            store.append_message(thread, "user", f"old file {n}")
    proc, base = start_server(path)
    context = browser.new_context()  # type: ignore[attr-defined]
    errors: list[str] = []
    try:
        (tab,) = open_tabs(context, base, [thread], errors)
        make_threads(tmp_path / "other.db", "replaced", 1)
        os.replace(tmp_path / "other.db", path)
        with Store(path) as store:
            store.append_message(thread, "assistant", "In the new file")
        tab.locator("#live-state", has_text="stopped").wait_for(timeout=5_000)
        assert tab.inner_text("#live-state") == "· live updates stopped: the log ends at position 3, before position 12 " \
                                                "this page has shown: the database was replaced; reload the page"
        assert "In the new file" not in tab.inner_text("#rows")
    finally:
        context.close()
        stop_server(proc)
    assert errors == [], f"the page raised: {errors}"


# A page of another site that makes the browser ask the viewer for its streams and pages (it
# cannot read the answers), and links to a thread page of it.
ELSEWHERE = """<!doctype html><title>elsewhere</title>
<script>
new EventSource("{base}/live/log");
new EventSource("{base}/live?id={thread}&after=0");
fetch("{base}/live/rows?id={thread}").catch(() => {{}});
fetch("{base}/?all=1", {{mode: "no-cors"}}).catch(() => {{}});
</script>
<img src="{base}/static/style.css" alt="">
<a id="to-the-viewer" href="{base}/thread?id={thread}">the thread</a>"""


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"], ids=["another-port", "another-site"])
def test_another_sites_page_is_refused_and_its_link_to_a_thread_goes_live(served, page, name: str) -> None:
    """A page elsewhere open in the same browser (another site, or another local tool on another
    port of 127.0.0.1) made the browser open the viewer's live streams and load its pages, as
    many as it liked: each a server thread polling the log, or a read of it. Each such request
    is refused; a link from there to a thread page still opens it, and the page goes live."""
    base, path, _ = served
    (thread,) = make_threads(path, f"elsewhere-{name}", 1)
    body = ELSEWHERE.format(base=base, thread=thread).encode()

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    # What the viewer answered, as the browser received it: a page sees no answer to a request
    # the browser refuses to show it (CORS), nor does Playwright, but the browser's own log does
    # (by request: the answer may be logged before the request it answers).
    asked: dict[str, str] = {}
    statuses: dict[str, int] = {}
    log = page.context.new_cdp_session(page)
    log.on("Network.requestWillBeSent", lambda sent: asked.__setitem__(sent["requestId"], sent["request"]["url"]))
    log.on("Network.responseReceivedExtraInfo", lambda got: statuses.__setitem__(got["requestId"], got["statusCode"]))
    log.send("Network.enable")

    def answered() -> dict[str, int]:
        return {asked[request]: status for request, status in statuses.items() if request in asked}
    elsewhere = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    threading.Thread(target=elsewhere.serve_forever, daemon=True).start()
    try:
        page.goto(f"http://{name}:{elsewhere.server_address[1]}/")
        made = [f"{base}/live/log", f"{base}/live?id={thread}&after=0", f"{base}/live/rows?id={thread}",
                f"{base}/?all=1", f"{base}/static/style.css"]
        deadline = time.monotonic() + 10
        while not all(url in answered() for url in made) and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert {url: answered().get(url) for url in made} == dict.fromkeys(made, 403)
        statuses.clear()
        page.click("#to-the-viewer")
        page.wait_for_selector("#rows[data-connected='1']", timeout=10_000)
        with Store(path) as store:
            store.append_message(thread, "assistant", f"Seen by the page a link from {name} opened")
        page.get_by_text(f"Seen by the page a link from {name} opened").wait_for(timeout=5_000)
        assert page.inner_text("#live-state") == "· live"
        assert answered()[f"{base}/thread?id={thread}"] == 200
        assert [url for url, status in answered().items() if status == 403] == []
    finally:
        elsewhere.shutdown()
        elsewhere.server_close()


# A letter under thousands of combining marks (Zalgo text), and ids and titles in scripts
# written right to left: stored text a page shows among its own.
ZALGO = "Z" + "\u0301" * 3000 + "\u0316" * 3000
HEBREW, ARABIC = "שלום", "مرحبا"


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of `threadlog serve` over threads holding `ZALGO` and right-to-left ids."""
    path = tmp_path_factory.mktemp("scripts") / "scripts.db"
    with Store(path) as store:
        for thread, middle in (("zalgo", ZALGO), ("plain", "Z")):
            store.create_thread(thread_id=thread)
            for text in ("above", middle, "below"):
                store.append_message(thread, "user", text)
        root = store.create_thread(title="שלום עולם", thread_id=HEBREW)
        store.append_message(root, "user", "first")
        fork = store.fork(root, fork_id=ARABIC)
        store.append_message(fork, "user", "in the fork")
        store.append_message(store.fork(fork, fork_id="deeper"), "user", "deeper still")
    proc, base = start_server(path)
    yield base
    stop_server(proc)


def test_combining_marks_paint_inside_their_own_row(scripts: str, page) -> None:
    """A letter under 6,000 combining marks drew a line down the whole page, across the header
    and the rows above and below its own: the page around it looks as around a plain letter."""
    looks = {}
    for thread in ("zalgo", "plain"):
        page.goto(url(scripts, "/thread", id=thread))
        rows = page.locator("#rows > li.item")
        looks[thread] = [page.locator("header.top").screenshot(), rows.nth(0).screenshot(), rows.nth(2).screenshot()]
    assert looks["zalgo"] == looks["plain"]


def test_right_to_left_ids_and_titles_leave_the_text_around_them_in_order(scripts: str, page) -> None:
    """An id or title in Hebrew or Arabic took the page's own words next to it into its
    direction: the tree read `Root 3 · שלום threads` and a node `T · 2 · שלום עולם ev`, and a
    thread's lineage showed its forks and their offsets out of order."""

    def left(selector: str, text: str) -> float:
        """Where `text` starts on the page, in the element `selector`."""
        return float(page.evaluate("""([selector, text]) => {
            const walker = document.createTreeWalker(document.querySelector(selector), NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                const at = node.data.indexOf(text);
                if (at < 0) continue;
                const range = document.createRange();
                range.setStart(node, at);
                range.setEnd(node, at + text.length);
                return range.getBoundingClientRect().left;
            }
            throw new Error(`no ${text} in ${selector}`);
        }""", [selector, text]))

    page.goto(url(scripts, "/tree", id="deeper"))
    assert left("main p.meta", HEBREW) < left("main p.meta", "3 threads")
    node = page.locator("svg a.node text").first
    label = node.evaluate("(text, word) => text.getStartPositionOfChar(text.textContent.indexOf(word)).x", "עולם")
    count = node.evaluate("text => text.getStartPositionOfChar(text.textContent.indexOf(' ev') - 1).x")
    assert label < count
    page.goto(url(scripts, "/thread", id="deeper"))
    order = [left("nav.lineage", text) for text in (HEBREW, "@2", ARABIC, "@4", "deeper")]
    assert order == sorted(order), order


@pytest.mark.parametrize("follower", list(FOLLOWERS))
def test_a_page_whose_stream_is_refused_does_not_say_live_and_follows_once_a_stream_closes(tmp_path: Path, browser,
                                                                                         follower: str) -> None:
    """Past `STREAMS` live streams open at once, the server refuses one (a 503 with Retry-After).
    A page opened then said `· live` all the while it followed nothing: an event appended
    meanwhile did not appear, and nothing said so. It now says it is connecting until its
    stream is taken, and once a stream elsewhere closes it follows, showing what came meanwhile."""
    from threadlog.web.live import STREAMS
    path = tmp_path / "full.db"
    (thread,) = make_threads(path, "full", 1)
    proc, base = start_server(path)
    held: list[Any] = []
    context = browser.new_context()  # type: ignore[attr-defined]
    context.add_init_script(FOLLOWERS[follower])
    errors: list[str] = []
    try:
        for _ in range(STREAMS):
            stream = urllib.request.urlopen(f"{base}/live/log", timeout=20)
            assert stream.readline() == b": connected\n"
            held.append(stream)
        tab = context.new_page()
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tab.goto(url(base, "/thread", id=thread))
        with Store(path) as store:
            store.append_message(thread, "assistant", "Appended while every stream was taken")
        tab.wait_for_timeout(4_000)  # the browser asks again after 3 s, and is refused again
        assert tab.get_attribute("#rows", "data-connected") is None
        assert tab.inner_text("#live-state") == "· connecting…"
        assert tab.get_by_text("Appended while every stream was taken").count() == 0
        held.pop().close()
        tab.wait_for_selector("#rows[data-connected='1']", timeout=15_000)
        tab.get_by_text("Appended while every stream was taken").wait_for(timeout=5_000)
        assert tab.inner_text("#live-state") == "· live"
    finally:
        context.close()
        for stream in held:
            stream.close()
        stop_server(proc)
    assert errors == [], f"the page raised: {errors}"
