"""Listings kept on disk from the moment they are found, read back one at a time.

A server's capture has a listing for every client's pass over every directory: a longer capture
has more of them, tens of thousands in a long one. Held in memory they made the analysis grow
with the capture (1.8 KB a listing); here each is written to an unlinked temporary file when its
pass ends, and what stays in memory is its place in the file and what orders it (48 bytes), so
an analysis holds the passes under way and not the listings found. Whoever goes through them
gets one at a time and drops it: the verdict counts (rules/verdict), the text and the JSON are
written as they go (present/table, present/jsonout).

A listing read back is a new object each time: whoever needs to know a listing again later
(which ones to fold, which finding is whose) knows it by its number, not by id().
"""

from __future__ import annotations

import os
import pickle
import tempfile
from array import array
from collections.abc import Callable, Iterator, Sequence

import numpy as np


def temporary_file(what):
    """An unlinked temporary file for the `what`: nothing is left behind whatever ends the
    process."""
    return spooled(lambda: tempfile.TemporaryFile(prefix="nfs-readdir-"), what)


def spooled(do, what):
    """do()'s result, where do() makes or writes a temporary file for the `what`; an OSError
    from it names the directory and what to do: a full /tmp is not the input's fault."""
    try:
        return do()
    except OSError as e:
        raise OSError(
            e.errno,
            f"{e.strerror} writing the {what} to a temporary file (TMPDIR names another directory)",
            tempfile.gettempdir(),
        ) from None


class ListingSpool(Sequence):
    """The listings of one analysis, in time order once sealed: put() while they are found,
    seal() when the input is read, then len(), [i] and iteration like a list's. A listing
    read back goes through finish(listing, its number), where the reader sets one: what is
    known of a listing only once the whole input is read (damage over the whole capture, its
    directory's inode number)."""

    def __init__(self):
        self._file = temporary_file("capture's listings")
        self._at = array("q", [0])  # where each listing's bytes begin; the last: the end
        self._start = array("q")
        self._client = array("q")  # the number of its client in _clients
        self._follow = array("q")  # which directory pass it came from (ties keep that order)
        self._rpcs = array("q")  # its READDIRs
        self._clients: dict[str, int] = {}
        self._order: np.ndarray | None = None
        self.finish: Callable | None = None

    def put(self, lst, follow):
        """Keep a listing whose pass is over; follow: the number of the client's passes over
        its directory, in the order they began."""
        b = pickle.dumps(lst, protocol=pickle.HIGHEST_PROTOCOL)
        spooled(lambda: self._file.write(b), "capture's listings")
        self._at.append(self._at[-1] + len(b))
        self._start.append(lst.start)
        self._client.append(self._clients.setdefault(lst.client, len(self._clients)))
        self._follow.append(follow)
        self._rpcs.append(len(lst.rpcs))

    def seal(self):
        """Every listing is in: order them by start, then client, then the order their
        directories' passes began in (as sorting the listings themselves would)."""
        spooled(self._file.flush, "capture's listings")
        rank = np.empty(len(self._clients), dtype=np.int64)
        rank[[self._clients[c] for c in sorted(self._clients)]] = np.arange(len(self._clients))
        if not len(self):
            self._order = np.zeros(0, dtype=np.int64)
            return
        client = rank[np.frombuffer(self._client, dtype=np.int64)]
        follow, start = (np.frombuffer(x, dtype=np.int64) for x in (self._follow, self._start))
        self._order = np.lexsort((follow, client, start))

    @property
    def clients(self):
        """How many clients the listings come from."""
        return len(self._clients)

    def largest(self):
        """The number (in time order) of the listing with the most READDIRs, the first such;
        None without listings."""
        if not len(self):
            return None
        rpcs = np.frombuffer(self._rpcs, dtype=np.int64)[self._order]
        return int(np.argmax(rpcs))

    def __len__(self):
        return len(self._start)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if self._order is None:
            raise RuntimeError("ListingSpool read before it was sealed")
        k = int(self._order[i])
        b = os.pread(self._file.fileno(), self._at[k + 1] - self._at[k], self._at[k])
        lst = pickle.loads(b)
        return self.finish(lst, i) if self.finish is not None else lst

    def __iter__(self) -> Iterator:
        return (self[i] for i in range(len(self)))
