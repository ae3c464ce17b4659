"""The viewer shows the images messages hold: a pasted screenshot, a tool's picture.

Served from the store by their digest, in the Messages API's four image types only and with
`nosniff`; an image naming a URL is linked, never fetched; a redacted one is gone."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

from eventstore.content import image_media_types  # noqa: E402
from threadlog import Store  # noqa: E402
from threadlog.web import create_app  # noqa: E402
from tests.webstore import image_block as block, png  # noqa: E402


SHOT, PLOT = png(3, 2), png(5, 7)
HTML = b"<script>alert(1)</script>"


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "images.db"
    with Store(path) as store:
        t = store.create_thread(title="screens", model="claude-x")
        store.append_message(t, "user", [{"type": "text", "text": "what is on my screen?"}, block(SHOT)])  # offset 1
        store.append_message(t, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "plot", "input": {}}])
        store.append_message(t, "user", [{"type": "tool_result", "tool_use_id": "toolu_1",  # offset 3
                                          "content": [{"type": "text", "text": "plotted"}, block(PLOT)]}])
        store.append_message(t, "user", [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                                         {"type": "image", "source": {"type": "url", "url": "javascript:alert(1)"}}])
    return path


@pytest.fixture
def client(store_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(str(store_path)), base_url="http://127.0.0.1") as c:
        yield c


def image_links(html: str) -> list[str]:
    return [src.replace("&amp;", "&") for src in re.findall(r'<img class="stored-image" src="([^"]+)"', html)]


@pytest.mark.parametrize("page", ["/thread?id={t}", "/replay?id={t}"])
def test_a_message_s_images_are_shown_and_served_as_they_were_stored(client: TestClient, store_path: Path, page: str) -> None:
    with Store(store_path, read_only=True) as store:
        thread = store.threads(1)[0].id
    html = client.get(page.format(t=thread)).text
    links = image_links(html)
    assert len(links) == 2  # the pasted one and the tool result's
    served = [client.get(link) for link in links]
    assert [r.content for r in served] == [SHOT, PLOT]
    for response in served:
        assert response.headers["content-type"] == "image/png"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-store"
    # An address is linked, never loaded; one that is not http(s) is not even linked.
    assert '<a href="https://example.com/a.png" rel="noreferrer">image: https://example.com/a.png</a>' in html
    assert "javascript:" not in html and 'src="https://' not in html


def test_stored_bytes_are_served_only_as_the_image_type_they_claim(tmp_path: Path) -> None:
    path = tmp_path / "types.db"
    with Store(path) as store:
        t = store.create_thread(title="types")
        # The store takes only the API's four image types; the bytes themselves are anyone's.
        store.append_message(t, "user", [block(HTML, "image/png")])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        (link,) = image_links(client.get(f"/thread?id={t}").text)
        response = client.get(link)
        # Served as the PNG it claims to be, never sniffed into a page.
        assert response.headers["content-type"] == "image/png" and response.headers["x-content-type-options"] == "nosniff"
        csp = response.headers["content-security-policy"]  # its own: nothing in it runs, whatever the bytes
        assert "default-src 'none'" in csp and "script-src" not in csp and "sandbox" in csp
        for bad in (link.replace("sha256=", "sha256=0"), link.replace("offset=1", "offset=0"), f"/image?id={t}&offset=1"):
            refused = client.get(bad)
            assert refused.status_code in (400, 404) and "image" in refused.text


def test_a_redacted_image_is_no_longer_served(client: TestClient, store_path: Path) -> None:
    with Store(store_path, read_only=True) as store:
        thread = store.threads(1)[0].id
        position = store.event_at(thread, 1).position
    links = image_links(client.get(f"/thread?id={thread}").text)
    with Store(store_path) as store:
        store.redact(position, reason="a password on screen", actor="ana")
    assert client.get(links[0]).status_code == 404
    assert client.get(links[1]).content == PLOT
    assert len(image_links(client.get(f"/thread?id={thread}").text)) == 1


def test_the_diff_page_draws_the_images_each_side_holds(tmp_path: Path) -> None:
    """The diff showed `[image]` where the thread and replay pages draw it; each side's image
    is served from that side's thread (one side a fork of a fork, its image in the middle one)."""
    left, middle, right = png(2, 2), png(3, 3), png(4, 4)
    path = tmp_path / "diff.db"
    with Store(path) as store:
        t = store.create_thread(title="root")
        store.append_message(t, "user", "compare these")
        a = store.fork(t)
        store.append_message(a, "user", [block(left)])
        b = store.fork(t)
        store.append_message(b, "user", [{"type": "text", "text": "mine"}, block(middle)])
        c = store.fork(b)
        store.append_message(c, "user", [block(right)])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        page = client.get("/diff", params={"a": a, "b": c})
        assert page.status_code == 200 and "[image]" not in page.text
        assert [client.get(link).content for link in image_links(page.text)] == [left, middle, right]


def test_base64_wrapped_in_lines_is_drawn_and_data_that_is_not_base64_is_refused_by_name(tmp_path: Path) -> None:
    """Data wrapped in lines of 76 (as `base64` and MIME write it) was a 404, the page showing a
    broken image; data that is no base64 at all was refused as if the link named no image."""
    shot = png(9, 4)
    path = tmp_path / "wrapped.db"
    with Store(path) as store:
        t = store.create_thread(title="wrapped")
        store.append_message(t, "user", [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                        "data": base64.encodebytes(shot * 20).decode()}}])
        store.append_message(t, "user", [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                        "data": "<script>alert(1)</script>"}}])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        wrapped, broken = image_links(client.get(f"/thread?id={t}").text)
        served = client.get(wrapped)
        assert served.status_code == 200 and served.content == shot * 20
        refused = client.get(broken)
        assert refused.status_code == 404 and "not base64" in refused.text and "<script>alert" not in refused.text


def test_a_page_with_an_image_answers_without_importing_the_sdk(store_path: Path) -> None:
    """Importing `anthropic` takes over a second: the first page showing an image after the
    viewer started waited on it (1.7 s for a 20 kB page), to learn the four image types."""
    code = (
        "import sys\n"
        "from starlette.testclient import TestClient\n"
        "from threadlog import Store\n"
        "from threadlog.web import create_app\n"
        f"path = {str(store_path)!r}\n"
        "thread = Store(path, read_only=True).threads(1)[0].id\n"
        "client = TestClient(create_app(path), base_url='http://127.0.0.1')\n"
        "html = client.get('/thread?id=' + thread).text\n"
        "assert html.count('class=\"stored-image\"') == 2, html\n"
        "print('anthropic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_the_image_types_are_the_sdk_s() -> None:
    from anthropic.types import Base64ImageSourceParam

    hint = typing.get_type_hints(Base64ImageSourceParam)["media_type"]
    assert image_media_types() == frozenset(typing.get_args(hint)) == {"image/jpeg", "image/png", "image/gif", "image/webp"}


def test_an_image_address_too_long_to_link_is_shown_cut_not_linked(tmp_path: Path) -> None:
    """An image that names an address was linked with the whole address in the link: a message
    of ten images each naming 1 MB made a thread page (and its replay, and a live update) of
    10 MB. An address past 2,048 characters is shown cut short, with its length, and not linked;
    a usual one is linked as before."""
    path = tmp_path / "address.db"
    far = "https://example.com/" + "K" * 1_000_000
    with Store(path) as store:
        t = store.create_thread(title="t", thread_id="t")
        store.append_message(t, "user", [{"type": "image", "source": {"type": "url", "url": far}} for _ in range(10)]
                             + [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}])
    with TestClient(create_app(str(path)), base_url="http://127.0.0.1") as client:
        pages = [client.get("/thread?id=t"), client.get("/replay?id=t")]
    for page in pages:
        assert page.status_code == 200 and len(page.content) < 30_000, len(page.content)
        assert page.text.count("image: https://example.com/KKK") == 10
        assert page.text.count("(an address of 1,000,020 characters: not linked)") == 10
        assert '<a href="https://example.com/a.png" rel="noreferrer">image: https://example.com/a.png</a>' in page.text
