"""What the kernel cannot have written, found in one CPU's records (the damage check of
:meth:`.tracedat.TraceDat.check_records`)."""

from __future__ import annotations

import numpy as np

# Records of one CPU looked at together (24 bytes each): the check's memory is this window's,
# not the trace's (all records at once: 376 MiB peak at 10 M events, 2.4 GB and more at 100 M).
# Measured on a 10 M-event kmem trace: 1 << 20 rows 187 MiB and 3.7 s, 1 << 16 91 MiB and
# 2.1 s (the walk gives parts of up to 1 << 18 records: a window is about one part).
WINDOW_ROWS = 1 << 16


def nothing_odd(screens, fixed_size, maplen, in_order):
    """Whether the screens of a read (``Extract.screen()`` of each part, (cpu, screen) in CPU
    and file order) show that every record is of an id with a format and at least its fixed
    size (``fixed_size(id)``, None: no format), and every CPU's time stamps run forwards and
    convert in order (``in_order(lo, hi)``): then check_records would find nothing."""
    span: dict[int, tuple[int, int]] = {}
    for cpu, (n, back, first, last, shortest) in screens:
        if not n:
            continue
        if back or (cpu in span and first < span[cpu][1]):
            return False
        span[cpu] = (span.get(cpu, (first,))[0], last)
        for eid, dlen in shortest:
            size = fixed_size(eid) if eid < maplen - 1 else None
            if size is None or dlen < size:
                return False
    return all(in_order(lo, hi) for lo, hi in span.values())


class OddRecords:
    """The damage findings of one CPU's records, given part by part in file order (``add``,
    then ``finish``), looked at in windows of about ``rows`` records: the findings are those
    of all the CPU's records at once. A finding at record i needs the records before and after
    it, the whole of its page and the page before, and the first record of a later page; so a
    window's findings stop before its last page, and the next window starts with the page
    before that one. The findings come by kind, then by record, as when all were looked at at
    once."""

    def __init__(self, cpu, sizes, convert_ts, rows=WINDOW_ROWS):
        self.cpu, self.sizes, self.convert_ts, self.rows = cpu, sizes, convert_ts, rows
        self.parts, self.n = [], 0
        self.start = 0  # the first record of the window whose findings are not yet made
        self.found: tuple[list, list, list] = ([], [], [])

    def add(self, ts, ids, page):
        """A part's raw time stamps, event ids (-1 - id: too short) and page numbers."""
        self.parts.append((ts, ids, page))
        self.n += len(ts)
        if self.n >= self.rows + self.start:
            self._window(final=False)

    def finish(self):
        """The findings of all the records added."""
        if self.n:
            self._window(final=True)
        return [f for kind in self.found for f in kind]

    def _window(self, final):
        ts, ids, page = (np.concatenate(a) for a in zip(*self.parts))
        end = len(ts) if final else int(np.searchsorted(page, page[-1]))
        if end <= self.start:  # the window is one page so far: wait for the next
            return
        kinds = _odd(self.cpu, self.convert_ts(ts), ids, page, self.sizes, self.start, end)
        for found, more in zip(self.found, kinds):
            found.extend(more)
        keep = len(ts) if final else int(np.searchsorted(page, page[end - 1]))
        self.parts = [(ts[keep:], ids[keep:], page[keep:])]
        self.n, self.start = len(ts) - keep, end - keep


def _odd(cpu, ts, ids, page, sizes, start, end):
    """The findings of the records from ``start`` to ``end`` (the others are their context),
    by kind: unknown ids, records too short, time running backwards."""
    unknown, short, back = [], [], []
    n = len(ts)

    def around(i):
        return int(ts[max(i - 1, 0)]), int(ts[min(i + 1, n - 1)])

    ids_in = ids[start:end]
    for i in (
        start
        + np.flatnonzero(
            (ids_in >= 0) & np.isin(ids_in, [e for e, s in sizes.items() if s is None])
        )
    ).tolist():
        lo, hi = around(i)
        unknown.append(
            {
                "from": min(lo, hi),
                "to": max(lo, hi),
                "cpu": cpu,
                "what": f"cpu {cpu}: an event with unknown id {int(ids[i])} at "
                f"{ts[i] / 1e9:.6f} s (trace-cmd shows [UNKNOWN EVENT])",
            }
        )
    for i in (start + np.flatnonzero(ids_in < 0)).tolist():
        lo, hi = around(i)
        eid = -1 - int(ids[i])
        short.append(
            {
                "from": min(lo, hi),
                "to": max(lo, hi),
                "cpu": cpu,
                "what": f"cpu {cpu}: a record of event id {eid} at {ts[i] / 1e9:.6f} s "
                f"is shorter than its fields ({sizes[eid]} bytes)",
            }
        )
    lo = max(start, 1)
    for i in (lo + np.flatnonzero(ts[lo:end] < ts[lo - 1 : end - 1])).tolist():
        # a time stamp or delta with a flipped bit moves the rest of its page: the stretch
        # is both pages' span, where the moved events are and where they belong
        both = (page == page[i - 1]) | (page == page[i])
        nxt = np.flatnonzero(page > page[i])
        hi = max(int(ts[both].max()), int(ts[nxt[0]]) if len(nxt) else 0)
        back.append(
            {
                "from": int(ts[both].min()),
                "to": hi,
                "cpu": cpu,
                "what": f"cpu {cpu}: time runs backwards from {ts[i - 1] / 1e9:.6f} s "
                f"to {ts[i] / 1e9:.6f} s",
            }
        )
    return unknown, short, back
