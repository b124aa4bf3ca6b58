"""tuning.in_threads: the reader's parallel map, as a pool's map() would give it."""

import threading
import time

import pytest

from nfsreaddir import tuning


def test_results_come_in_item_order_from_several_threads():
    seen = set()

    def square(x):
        seen.add(threading.get_ident())
        time.sleep(0.02 * (1 + x % 3))  # items finish out of order
        return x * x

    assert tuning.in_threads(square, range(12), 3) == [x * x for x in range(12)]
    assert len(seen) == 3 and threading.get_ident() in seen  # the caller works too
    assert tuning.in_threads(square, [], 4) == []
    assert tuning.in_threads(square, [5], 4) == [25]


def test_the_first_item_that_raised_is_raised_and_no_item_is_taken_after():
    """Item 1 raises after item 3 has: item 1's exception is the one map() would raise; and
    once an item has raised, the items not taken yet are left."""
    started = []

    def work(x):
        started.append(x)
        if x == 1:
            time.sleep(0.2)
            raise ValueError("one")
        if x == 3:
            raise KeyError("three")
        time.sleep(0.05)
        return x

    with pytest.raises(ValueError, match="one"):
        tuning.in_threads(work, range(40), 4, name="in-threads-test")
    assert sorted(started)[:4] == [0, 1, 2, 3]
    assert len(started) < 40
    assert not [t for t in threading.enumerate() if t.name == "in-threads-test"]  # joined
