"""The one ring-buffer page walker, for trace.dat's pages and trace_pipe_raw's alike: the
compiled :mod:`nfsreaddir._ringbuf` (``pip install -e .``, as ``reproducers/setup-host`` runs
it, builds it or fails), or the numpy walk (:mod:`.numpywalk`) where NFSRT_READER=numpy asks for
the pure Python readers: the tests' oracle, and a reader where no C compiler is. A compiled part
that is not built is an error, never a silent fallback. The page format is :mod:`.page`'s."""

from __future__ import annotations

import os
import threading

import numpy as np

from .base import TraceError
from .page import damage_text
from .raw import Damage

try:
    # The compiled ring-buffer walk (setup.py builds it); a C extension without a stub, so
    # mypy cannot see its attributes.
    from .. import _ringbuf  # type: ignore[attr-defined]
except ImportError:
    _ringbuf = None

_WALK_ROWS = 1 << 18  # records listed per call of the compiled walk
_walk_local = threading.local()


def compiled():
    """The compiled walk's module, or None where NFSRT_READER=numpy asks for the pure Python
    readers (the numpy walk, python-zstandard for zstd chunks)."""
    return None if os.environ.get("NFSRT_READER", "") == "numpy" else built(_ringbuf, "_ringbuf")


def built(module, name):
    """``module``, the compiled part nfsreaddir.NAME; where it is not built (an install that
    failed, or a tree never built), the error that says so and what to do."""
    if module is None:
        raise TraceError(
            f"the compiled reader nfsreaddir.{name} is not built: install nfs-readdir again "
            "(pip install -e ., with the C compiler and headers reproducers/setup-host "
            "installs), or set NFSRT_READER=numpy for the slower pure Python reader"
        )
    return module


def _walk_arrays():
    """This thread's output arrays of the compiled walk (pos, ts, dlen, ids)."""
    out = getattr(_walk_local, "out", None)
    if out is None:
        out = _walk_local.out = (
            np.empty(_WALK_ROWS, np.int32),
            np.empty(_WALK_ROWS, np.uint64),
            np.empty(_WALK_ROWS, np.int32),
            np.empty(_WALK_ROWS, np.uint32),
        )
    return out


class PageWalker:
    """Walks blocks of whole pages of one layout (:class:`.page.PageLayout`)."""

    def __init__(self, layout):
        self.layout = layout

    def walk(self, block, lut, cpu, lost, first_page=0):
        """The records of ``block`` in one or more parts ((pos, ts, dlen, ids), damage or
        None), in file order: data offset in ``block``, raw time stamp, data length and
        event id of the data records (``lut``: the ids wanted, or None for all; others may
        come too). The damage, if any, comes with the last part; records on and after the
        damaged page are dropped. The lost-events markers ({"cpu", "ts" (raw), "count"})
        go onto ``lost``; ``first_page``: the number of the block's first page in the
        CPU's data (for the messages).

        The compiled walk lists the records of whole pages into arrays of a fixed size,
        reused from part to part (so its memory does not grow with the block); each part
        is used before the next is made."""
        if len(block) >= (1 << 31):
            raise Damage(f"cpu {cpu}: a data block of {len(block)} bytes is too large")
        lay = self.layout
        rb = compiled()
        if rb is None:  # (the numpy walk, the oracle, is imported only where it walks)
            from . import numpywalk

            yield numpywalk.walk(block, lay, lut, cpu, lost, first_page)
            return
        out = _walk_arrays()
        page = 0
        npages = len(block) // lay.page_size
        while True:
            n, marks, page, bad, why, detail = rb.walk(
                block, page, lay.page_size, *lay.compiled_args(), lut, *out
            )
            for _, page_ts, count in marks:
                lost.append({"cpu": cpu, "ts": page_ts, "count": count})
            yield (
                tuple(a[:n] for a in out),
                damage_text(cpu, why, first_page + bad, detail, lay.limit),
            )
            if page >= npages:
                return
