"""`Store.threads`: newest activity first, paged by `before`, forks included or not, on every
backend; the pages together are exactly the streams in that order, whatever was done."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadlog import Store

# (0, i): a new thread; (1, i): append to the i-th stream so far; (2, i): fork the i-th stream.
steps = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50)), min_size=1, max_size=25)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, limit=st.integers(1, 4))
def test_pages_of_threads_are_every_stream_by_latest_activity(store: Store, steps: list[tuple[int, int]],
                                                              limit: int) -> None:
    made = [t.id for t in store.all_threads()]  # what earlier examples left in this store
    for action, pick in steps:
        if action == 0 or not made:
            made.append(store.create_thread(title="t"))
            store.append_message(made[-1], "user", "first")  # a fork needs a message before it
        elif action == 1:
            store.append_message(made[pick % len(made)], "user", "hello")
        else:
            made.append(store.fork(made[pick % len(made)]))
    every = sorted(store.all_threads(), key=lambda info: info.last_position, reverse=True)
    for forks in (True, False):
        expected = [info.id for info in every if forks or info.parent_id is None]
        pages: list[str] = []
        before = None
        while True:
            page = store.threads(limit=limit, before=before, forks=forks)
            assert len(page) <= limit
            pages += [info.id for info in page]
            if len(page) < limit:
                break
            before = page[-1].last_position
        assert pages == expected
        assert [info.id for info in store.threads(limit=None, forks=forks)] == expected


# (0, i): a new thread; (1, i): a batch of 200 + 97 * i messages to the i-th stream so far
# (crossing the 1,024-position keys streams are listed by); (2, i): fork the i-th stream.
long_steps = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12)), min_size=1, max_size=10)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=long_steps, limit=st.integers(1, 5), cuts=st.lists(st.integers(0, 12_000), max_size=6))
def test_listings_stay_in_order_across_long_runs_of_appends(store: Store, steps: list[tuple[int, int]], limit: int,
                                                            cuts: list[int]) -> None:
    """Streams appended to thousands of positions apart, listed whole, in pages, and from any
    `before` (a key's edges included): always by exact latest activity."""
    made = [t.id for t in store.all_threads()]
    for action, pick in steps:
        if action == 0 or not made:
            made.append(store.create_thread(title="t"))
            store.append_message(made[-1], "user", "first")
        elif action == 1:
            store.append(made[pick % len(made)], [{"type": "message.appended", "data": {"role": "user", "content": "m"}}]
                         * (200 + 97 * pick))
        else:
            made.append(store.fork(made[pick % len(made)]))
    every = sorted(store.all_threads(), key=lambda info: info.last_position, reverse=True)
    edges = [1024 * k + d for k in range(1, 12) for d in (-1, 0, 1)]
    for forks in (True, False):
        expected = [info for info in every if forks or info.parent_id is None]
        for before in [*cuts, *edges]:
            want = [info.id for info in expected if info.last_position < before][:limit]
            assert [info.id for info in store.threads(limit=limit, before=before, forks=forks)] == want
        pages: list[str] = []
        before = None
        while page := store.threads(limit=limit, before=before, forks=forks):
            pages += [info.id for info in page]
            before = page[-1].last_position
        assert pages == [info.id for info in expected]
