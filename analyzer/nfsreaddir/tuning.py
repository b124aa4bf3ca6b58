"""Memory and thread settings for whole-array work on large columns (reading a trace, the slab
analysis), each scoped to the work that needs it: nothing here changes the process at import,
and every setting made is undone when its `with` block ends.

glibc's malloc, by default, serves each allocation above a (dynamic) threshold from a mapping of
its own and unmaps it when freed: for the many same-sized temporaries of a block-by-block scan
that is a fresh page fault per 4 KiB every time (most of the system time on a loaded VM). A
fixed, higher threshold keeps them in the heap, which hands the same memory out again. glibc
cannot be told to go back to its dynamic threshold: on exit the thresholds are set to its
starting values (128 KiB) and the heap is trimmed, so what was freed goes back to the system.
"""

import contextlib
import ctypes
import functools
import os
import threading

import numpy as np

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_START = 128 << 10  # glibc's mmap and trim thresholds before any mallopt()
SCAN_MMAP_THRESHOLD = 32 << 20  # above the scan's per-block temporaries (up to ~10 MiB)
BUILD_MMAP_THRESHOLD = 1 << 20  # building columns: few, column-sized temporaries
TRIM_THRESHOLD = 1 << 30  # freeing the heap's top would only be faulted in again


@functools.lru_cache(maxsize=1)
def _libc():
    try:
        libc = ctypes.CDLL(None)
        # glibc: both there (the lookups raise AttributeError otherwise), or neither is used
        if libc.mallopt and libc.malloc_trim:
            return libc
        return None
    except (OSError, AttributeError):
        return None


def _mallopt(mmap_threshold, trim_threshold):
    """Set glibc's mmap and trim thresholds; False where that cannot be done (not glibc)."""
    libc = _libc()
    return bool(
        libc
        and libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
        and libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )


def trim():
    """Give the heap's free memory back to the system (after a phase whose temporaries are
    gone: the next phase's results are new allocations, and the peak should be about them)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def _no_hugepages():
    """Stop numpy from asking for transparent huge pages: with the usual "defrag=madvise"
    setting each huge-page fault may compact memory first, which made reads slower and less
    even here (the columns are written once, in order). Returns what undoes it, or None."""
    f = getattr(getattr(np, "_core", None), "multiarray", None)
    f = getattr(f, "_set_madvise_hugepage", None)
    if f is None:
        return None
    try:
        return (f, f(False))
    except Exception:  # noqa: BLE001 - an optimisation only
        return None


def _restore_hugepages(state):
    if state is not None:
        f, prev = state
        f(prev)


class reading:
    """While a trace is read: no huge pages and, for a large file (``large``), the scan's
    threshold; ``building()`` switches to the threshold of building the columns."""

    def __init__(self, large):
        self.large = large

    def __enter__(self):
        self._set = self.large and _mallopt(SCAN_MMAP_THRESHOLD, TRIM_THRESHOLD)
        self._huge = _no_hugepages()
        return self

    @contextlib.contextmanager
    def building(self):
        """Building: each temporary its own mapping, given back when freed, so the peak stays
        near the result."""
        switched = self._set and _mallopt(BUILD_MMAP_THRESHOLD, TRIM_THRESHOLD)
        try:
            yield
        finally:
            if switched:
                _mallopt(SCAN_MMAP_THRESHOLD, TRIM_THRESHOLD)

    def __exit__(self, *exc):
        _undo(self._set, self._huge)
        return False


class heap_reuse:
    """Whole-array analysis of large columns: while it runs, glibc keeps freed blocks in its
    heap and hands them out again (no unmapping), so the many temporaries of the same size
    cost no fresh page faults; on exit the thresholds go back and the heap is trimmed."""

    def __enter__(self):
        self._set = _mallopt(1 << 30, 1 << 30)
        self._huge = _no_hugepages()
        return self

    def __exit__(self, *exc):
        _undo(self._set, self._huge)
        return False


def _undo(thresholds_set, huge):
    """Put numpy's huge pages back as they were and, where the thresholds were set, glibc's
    back at its starting values, then trim the heap."""
    _restore_hugepages(huge)
    if thresholds_set:
        _mallopt(_GLIBC_START, _GLIBC_START)
        trim()


def reader_stretch_bytes():
    """The least of a CPU's stored stream read as one unit of parallel work (a stretch of
    zstd chunks or pages): 1 MiB, about 150,000 kmem events and 15 ms of reading, against
    well under a millisecond of setting one up; or $NFSRT_READER_STRETCH_KB."""
    env = os.environ.get("NFSRT_READER_STRETCH_KB", "")
    if env.isdigit() and int(env) > 0:
        return int(env) << 10
    return 1 << 20


# Streams are cut into stretches only when reading them whole would leave the reader's
# threads idle for more than this share of the read: cutting costs about 3% on the bench's
# 50 M-event trace, whose two streams are of one size (the headers followed, more pieces
# merged), and saves up to half on a trace whose events are on one CPU.
STRETCH_IDLE = 0.10


def reader_threads():
    """Threads for reading CPU streams in parallel: the usable cores (at most 8), or
    $NFSRT_READER_THREADS."""
    env = os.environ.get("NFSRT_READER_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    # Every usable core, whatever the load: the streams are independent and the scheduler
    # shares the cores. Counting only the cores the load average left idle (as before)
    # read the load of the process just finished (a 1-minute average) and kept one
    # thread: 8.4 M kmem events took 1.99-2.35 s with one thread, 1.47-1.73 s with two,
    # 242 MB and 243 MB peak.
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def in_threads(fn, items, nthreads, name="tracedat"):
    """[fn(x) for x in items] on nthreads threads, the caller's one of them; where items
    raised, the exception of the first, as a pool's map() gives it (items are taken in order,
    and none is taken once one has raised). Plain threads, not concurrent.futures: its import,
    with logging's and queue's, costs a check of a small trace more than reading the trace."""
    items = list(items)
    out = [None] * len(items)
    failed: list[tuple[int, BaseException]] = []
    todo = iter(range(len(items)))
    lock = threading.Lock()

    def work():
        while not failed:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                out[i] = fn(items[i])
            except BaseException as e:  # the caller's to raise, in item order
                failed.append((i, e))

    others = [
        threading.Thread(target=work, name=name) for _ in range(min(nthreads, len(items)) - 1)
    ]
    for t in others:
        t.start()
    try:
        work()
    finally:
        for t in others:
            t.join()
    if failed:
        raise min(failed, key=lambda f: f[0])[1]
    return out
