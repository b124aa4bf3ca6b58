"""A listing's window, the span its time and its RPCs are counted in (the table's time, and
model/roundtrips, and watch's live/attribution as the events come): from its first READDIR's
call to its end. A trace's listing ends with its last event (its close); where its READDIR
events fire at the reply, their call comes before the first of them, and is found by pairing
the process's READDIR events with its READDIR calls (ReplyCalls). A capture's listing has no
close on the wire: it ends with its reader's last call (wire_end)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..events import REPLY_TIME_READDIR

READDIR_OPS = ("READDIR", "READDIRPLUS")

MAX_PENDING_CALLS = 64  # a process's READDIR calls not paired yet (its READDIRs are one by one)


# The calls a directory's reader makes for the names it lists (ls -l's stat and ACL of each, a
# lookup), by operation name in every NFS version and NFSACL: a listing on the wire goes on
# through them after its last READDIR. An NFSv4 client's lease renewals (a COMPOUND of SEQUENCE
# alone; RENEW on 4.0) come from its state manager on a timer, never from a reader: they
# neither end a listing nor belong to one. Any other operation (REMOVE, WRITE, CREATE...) is
# another program's work on the same client.
PER_NAME_OPS = ("GETATTR", "LOOKUP", "LOOKUPP", "ACCESS", "READLINK", "GETACL")
LEASE_RENEWALS = ("SEQUENCE", "RENEW")
# A reader that stats each name sends the next call within a round trip of the last reply:
# a client quiet this long after its listing's last call has finished with that listing.
IDLE_NS = 10**9


def wire_end(readdir_end, ts, reply_ts, op, frame, own):
    """A capture's listing's end: its last READDIR's reply (readdir_end), or, where the client
    goes on with the names (per-name calls, PER_NAME_OPS), the last reply of those that follow
    it with no gap longer than IDLE_NS, up to the client's first call that is neither (a READDIR
    of another pass, another program's operation: from there the client's calls cannot be told
    apart). ts, reply_ts (-1: none), op, frame (-1 but for READDIRs): the client's calls in the
    capture's order; own: the frames of the listing's READDIR calls."""
    end = int(readdir_end)
    k = int(np.searchsorted(ts, end, side="right"))
    last = end
    for t, r, o, f in zip(ts[k:].tolist(), reply_ts[k:].tolist(), op[k:], frame[k:].tolist()):
        if f in own or o in LEASE_RENEWALS:
            continue
        if o not in PER_NAME_OPS or t - last > IDLE_NS:
            break
        last = t
        end = max(end, r if r >= 0 else t)
    return end


def window(first_readdir, start, end):
    """A trace's listing's window, (from, to) in ns, both ends in: from its first READDIR's
    call (ReplyCalls; its start where it sent none: a listing the page cache served) to its
    end (its last event). The one rule analyze (from_trace, _owners) and watch
    (live/attribution.py) count a listing's RPCs by; a capture's listing has no end of its
    own (from_capture)."""
    return (int(first_readdir) if first_readdir is not None else int(start), int(end))


class ReplyCalls:
    """A process's READDIR events that fire at the reply, each paired with its own call (its
    sunrpc:rpc_request), in the order both come: a process sends its READDIRs one at a time,
    so an event's call is the first one not paired yet that is neither before the process's
    previous READDIR event (the call of an event lost) nor after this one (its call was not
    traced). On a coarse clock a call ties with its reply, and the next call with it too.
    Fed call(ts) for each READDIR call, reply(ts) for each READDIR event; analyze replays a
    trace through it (first_calls), watch feeds it as the events come."""

    def __init__(self):
        self._calls: list[int] = []
        self._last: int | None = None  # the previous event's time

    def call(self, ts):
        self._calls.append(int(ts))
        if len(self._calls) > MAX_PENDING_CALLS:
            del self._calls[0]

    def reply(self, ts):
        """The time of the call of the READDIR event at ts, None where it is not known."""
        ts = int(ts)
        calls, last = self._calls, self._last
        self._last = ts
        while calls and last is not None and calls[0] < last:
            del calls[0]
        if calls and calls[0] <= ts:
            return calls.pop(0)
        return None


def first_calls(listings, requests):
    """Per listing (by number), the time of its first READDIR's call where its READDIR events
    fire at the reply and the call is in requests (ReplyCalls), else its first READDIR's time
    (first_readdir): integer ns. Every READDIR event of a process is replayed, as watch sees
    them, in time order (ties: in the listings' order)."""
    out = {n: first_readdir(lst) for n, lst in enumerate(listings)}
    if requests is None or not len(requests):
        return out
    events: dict[Any, list] = {}
    for n, lst in enumerate(listings):
        if lst.pid is None or not len(lst.rpcs) or "source" not in lst.rpcs:
            continue
        for t, src in zip(lst.rpcs["ts"], lst.rpcs["source"]):
            if src in REPLY_TIME_READDIR and t is not None and t == t:
                events.setdefault(lst.pid, []).append((int(t), n))
    if not events:
        return out
    pid, op = np.asarray(requests["pid"]), np.asarray(requests["op"], dtype=object)
    ts = np.asarray(requests["ts"], dtype=np.int64)
    rd = np.isin(op, READDIR_OPS)
    for p, evs in events.items():
        calls = np.sort(ts[rd & (pid == p)]).tolist()
        pair, i, seen = ReplyCalls(), 0, set()
        for t, n in sorted(evs, key=lambda e: e[0]):
            # (calls before the event or tied with it come first: a reply follows its call)
            while i < len(calls) and calls[i] <= t:
                pair.call(calls[i])
                i += 1
            got = pair.reply(t)
            if n not in seen:
                seen.add(n)
                if got is not None and t == out[n]:
                    out[n] = got
    return out


def first_readdir(lst):
    """The listing's first READDIR event (its start where it has none), in integer ns: never
    through a float, which rounds an epoch in ns by up to 256 ns."""
    ts = [int(t) for t in lst.rpcs["ts"] if t is not None and t == t] if len(lst.rpcs) else []
    return window(min(ts) if ts else None, lst.start, lst.start)[0]
