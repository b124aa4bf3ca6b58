"""What the kernel cannot have written, found in one CPU's records (the damage check of
:meth:`.tracedat.TraceDat.check_records`)."""

from __future__ import annotations

import numpy as np


def odd_records(cpu, ts, ids, page, sizes):
    """The damage findings of one CPU's records (in file order)."""
    out = []
    n = len(ts)

    def around(i):
        return int(ts[max(i - 1, 0)]), int(ts[min(i + 1, n - 1)])

    for i in np.flatnonzero(
        (ids >= 0) & np.isin(ids, [e for e, s in sizes.items() if s is None])
    ).tolist():
        lo, hi = around(i)
        out.append(
            {
                "from": min(lo, hi),
                "to": max(lo, hi),
                "cpu": cpu,
                "what": f"cpu {cpu}: an event with unknown id {int(ids[i])} at "
                f"{ts[i] / 1e9:.6f} s (trace-cmd shows [UNKNOWN EVENT])",
            }
        )
    for i in np.flatnonzero(ids < 0).tolist():
        lo, hi = around(i)
        eid = -1 - int(ids[i])
        out.append(
            {
                "from": min(lo, hi),
                "to": max(lo, hi),
                "cpu": cpu,
                "what": f"cpu {cpu}: a record of event id {eid} at {ts[i] / 1e9:.6f} s "
                f"is shorter than its fields ({sizes[eid]} bytes)",
            }
        )
    for i in (np.flatnonzero(ts[1:] < ts[:-1]) + 1).tolist():
        # a time stamp or delta with a flipped bit moves the rest of its page: the stretch
        # is both pages' span, where the moved events are and where they belong
        both = (page == page[i - 1]) | (page == page[i])
        nxt = np.flatnonzero(page > page[i])
        hi = max(int(ts[both].max()), int(ts[nxt[0]]) if len(nxt) else 0)
        out.append(
            {
                "from": int(ts[both].min()),
                "to": hi,
                "cpu": cpu,
                "what": f"cpu {cpu}: time runs backwards from {ts[i - 1] / 1e9:.6f} s "
                f"to {ts[i] / 1e9:.6f} s",
            }
        )
    return out
