"""Damage the canonical tables show (see :mod:`.tables`): rows no kernel writes, or an order of
events no kernel makes, each as {"from", "to", "pid", "what"} (ns, and the sentence to show).
A damaged trace (a deleted line of report text, a flipped bit) still parses; these checks are what
say that its listings cannot decide.
"""

import numpy as np

from .. import events
from ..trace.payload import int_of
from .columns import Columns, concat, groups, inferred, isin, isna


def unpaired_readdirs(rpc, paired, name):
    """Where a task's READDIR kprobes and the tracepoint that ends each call (``name``,
    nfs4:nfs4_readdir) do not alternate, as damage ({"from", "to", "pid", "what"}): the
    kernel's nfs4_proc_readdir() runs the call and logs the tracepoint after each try, retrying
    only after an error, so a task's kprobe is followed by one tracepoint, or by more only after
    a try that failed. Two kprobes with no tracepoint between, or a second tracepoint after a
    successful try, mean a line or record lost (a deleted line of report text, a flipped bit).
    A tracepoint before the task's first kprobe (recording began during the call) and a kprobe
    after its last tracepoint (it ended during one) are what a trace's edges hold."""
    if paired is None or not len(paired) or not len(rpc):
        return []
    err = paired["error"]
    err = np.where(isna(err), 0, err) if err.dtype.kind in "fO" else err
    both = concat(
        [
            Columns(
                {
                    "ts": rpc["ts"],
                    "pid": rpc["pid"],
                    "_k": np.ones(len(rpc), np.int64),
                    "_err": np.zeros(len(rpc), np.int64),
                }
            ),
            Columns(
                {
                    "ts": paired["ts"],
                    "pid": paired["pid"],
                    "_k": np.zeros(len(paired), np.int64),
                    "_err": err,
                }
            ),
        ]
    ).sorted_by("ts")
    out = []
    for pid, rows in groups(both["pid"]):
        ts, k, err = _untied(both["ts"][rows], both["_k"][rows], both["_err"][rows])
        started = False
        for i in range(1, len(k)):
            started = started or k[i - 1] == 1
            if k[i] == 1 and k[i - 1] == 1:
                what = "two READDIR calls with no end logged between"
            elif started and k[i] == 0 and k[i - 1] == 0 and err[i - 1] == 0:
                what = f"two ends ({name}) of one successful READDIR call"
            else:
                continue
            lo, hi = int(ts[max(i - 2, 0)]), int(ts[min(i + 1, len(ts) - 1)])
            out.append(
                {
                    "from": lo,
                    "to": hi,
                    "pid": int(pid),
                    "what": f"task {int(pid)}: {what} at {ts[i - 1] / 1e9:.6f} s and "
                    f"{ts[i] / 1e9:.6f} s: an event is missing",
                }
            )
    return out


def _untied(ts, k, err):
    """A task's READDIR calls (k 1) and ends (k 0, err: the end's error) in time order, each run
    of one time stamp in the order that keeps a call and its end together. A coarse clock (the
    `global` clock under emulation, report text's microseconds) gives several events one time
    stamp, and two tables' rows of one instant carry no order between them: a tie is never a
    missing event."""
    out = []
    pending = False  # a call's end is still to come
    i, n = 0, len(ts)
    while i < n:
        j = i
        while j < n and ts[j] == ts[i]:
            j += 1
        group = list(range(i, j))
        while group:
            want = 0 if pending else 1
            pick = next((g for g in group if k[g] == want), group[0])
            group.remove(pick)
            out.append(pick)
            pending = k[pick] == 1 or (pending and err[pick] != 0)
        i = j
    return ts[out], k[out], err[out]


def position_back(calls):
    """Where a task's directory position goes back with no seek, as damage ({"from", "to",
    "pid", "what"}): getdents only moves a file's position forward (iterate_dir() starts at
    f_pos and stores where the filler stopped); only llseek (rewinddir, seekdir) or a new open
    moves it elsewhere. A getdents that starts before where the task's last one on the
    directory ended, with no seek or open of the directory (by any task: threads share the
    file) between, is an edited or damaged position (a `pos=` changed to 0 makes a restart
    that never happened, or hides one)."""
    if calls is None or not len(calls) or "pos" not in calls:
        return []
    rows = calls[
        isin(calls["call"], ["getdents", "getdents_done", "llseek", "opendir"])
        & ~isna(calls["fileid"])
    ]
    # report text gives microseconds: a seek and the getdents after it can share a time stamp
    rows["_after"] = ~isin(rows["call"], ["llseek", "opendir"])
    rows = rows.sorted_by("ts", "_after")
    out = []
    ended: dict[tuple, tuple] = {}  # (pid, dev, fileid) -> (pos, ts) where its last getdents ended
    # (dev, fileid) -> when it was last opened or sought: a coarse clock (the `global` clock
    # under emulation) gives a getdents' return and the next open one time stamp, which then
    # come in no known order; a tie is never damage.
    reset: dict[tuple, int] = {}
    for ts, pid, call, dev, fileid, pos in zip(
        rows["ts"].tolist(),
        rows["pid"].tolist(),
        rows["call"].tolist(),
        rows["dev"].tolist(),
        rows["fileid"].tolist(),
        rows["pos"].tolist(),
    ):
        if call in ("llseek", "opendir"):
            for k in [k for k in ended if k[1:] == (dev, fileid)]:
                del ended[k]
            reset[dev, fileid] = ts
            continue
        if pos is None or pos != pos:  # (missing: None, or NaN, which is not itself)
            continue
        key = (pid, dev, fileid)
        if call == "getdents_done":
            ended[key] = (int(pos), ts)
        elif (
            key in ended
            and int(pos) < ended[key][0]
            and reset.get((dev, fileid)) != ended[key][1] != ts
        ):
            last, since = ended.pop(key)
            out.append(
                {
                    "from": int(since),
                    "to": int(ts),
                    "pid": int(pid),
                    "what": f"task {int(pid)}: a getdents of directory {fileid} at "
                    f"{ts / 1e9:.6f} s starts at position {int(pos)}, before "
                    f"{last} where its last one ended, with no seek between",
                }
            )
    return out


def _cookie_zero_elsewhere(rpc):
    """Cache fills at cookie 0 that name a page other than the first, as damage: the kernel
    fills page 0 for cookie 0 (events.COOKIE_ZERO_FILLS_PAGE_ZERO), so one of the two fields
    was edited or damaged, and a restart read from that cookie alone would be made up (the
    model then counts it as ambiguous, near_loss)."""
    if not len(rpc) or "index" not in rpc or isna(rpc["index"]).all():
        return []
    out = []
    index, cookie = rpc["index"], rpc["cookie"]
    fills = isin(rpc["source"], list(events.COOKIE_ZERO_FILLS_PAGE_ZERO))
    for i in np.flatnonzero(fills & ~isna(index) & ~isna(cookie)).tolist():
        if int(cookie[i]) != 0 or int(index[i]) == 0:
            continue
        ts = int(rpc["ts"][i])
        out.append(
            {
                "from": ts,
                "to": ts,
                "pid": int(rpc["pid"][i]),
                "what": f"a READDIR cache fill at {ts / 1e9:.6f} s asks for cookie 0 but fills "
                f"page {int(index[i])}, not page 0: a field is damaged",
            }
        )
    return out


# The kernel's PID_MAX_LIMIT on 64-bit (include/linux/threads.h): no task has a larger pid.
PID_MAX_LIMIT = 4 * 1024 * 1024


def impossible_values(tables):
    """Rows of the canonical tables no kernel writes, as damage ({"from", "to", "pid",
    "what"}): a pid above PID_MAX_LIMIT or negative; a READDIR naming a directory that no
    other event of the trace names, amid READDIRs of one other directory by the same task (a
    task's READDIRs of one listing go to one directory; a flipped bit in the fileid or dev
    makes a directory that exists nowhere else)."""
    out = []
    for name in ("rpc", "invalidations", "calls"):
        df = tables[name]
        pid = np.asarray(df["pid"])
        for i in np.flatnonzero((pid > PID_MAX_LIMIT) | (pid < 0)).tolist():
            ts = int(df["ts"][i])
            out.append(
                {
                    "from": ts,
                    "to": ts,
                    "what": f"a {name} event at {ts / 1e9:.6f} s "
                    f"has pid {int(pid[i])}, beyond the kernel's PID_MAX_LIMIT",
                }
            )
    rpc = tables["rpc"]
    out += _cookie_zero_elsewhere(rpc)
    if not len(rpc) or isna(rpc["fileid"]).all():
        return out
    named: dict[tuple, int] = {}
    for name in ("rpc", "invalidations", "revalidations", "calls"):
        df = tables[name]
        if df is None or "fileid" not in df or not len(df):
            continue
        for key in zip(df["dev"].tolist(), df["fileid"].tolist()):
            named[key] = named.get(key, 0) + 1
    for pid, rows in groups(rpc["pid"]):
        ts = rpc["ts"][rows]
        keys = list(zip(rpc["dev"][rows].tolist(), rpc["fileid"][rows].tolist()))
        for k in range(1, len(keys) - 1):
            if (
                named.get(keys[k]) == 1
                and keys[k - 1] == keys[k + 1] != keys[k]
                and not any(v != v for v in keys[k])
            ):  # (NaN: not named)
                lo, hi = int(ts[k - 1]), int(ts[k + 1])
                out.append(
                    {
                        "from": lo,
                        "to": hi,
                        "pid": int(pid),
                        "what": f"a READDIR at {ts[k] / 1e9:.6f} s names "
                        f"directory {keys[k][1]} (dev {keys[k][0]}), which no "
                        "other event names, amid READDIRs of directory "
                        f"{keys[k - 1][1]}",
                    }
                )
    return out


# The canonical fields that hold text (or a name the print format gives a number); every other
# one is an integer, whatever the input printed.
TEXT_FIELDS = {"reason", "text", "program", "op"}


def not_numbers(out, canon, event):
    """Column ``canon`` of a table being made as integers: a report text's column that came
    out as text (its lines cut or garbled in that field, in every row of the event or most)
    keeps the integers it holds, and every other value is missing and damage (returned, at its
    time, of its task), never text an analysis takes for a number."""
    col = out[canon]
    if col.dtype.kind != "O":
        return []
    damaged = []
    fixed = np.empty(len(col), dtype=object)
    for k, v in enumerate(col.tolist()):
        if isinstance(v, str):
            v = int_of(v.strip())
            if v is None:
                ts = int(out["ts"][k])
                damaged.append(
                    {
                        "from": ts,
                        "to": ts,
                        "pid": int(out["pid"][k]),
                        "event": event,
                        "field": canon,
                        "what": f"{event} at {ts / 1e9:.6f} s: its {canon} "
                        f"({col[k]!r}) is not a number",
                    }
                )
                v = np.nan
        fixed[k] = v
    out[canon] = inferred(fixed.tolist())
    return damaged
