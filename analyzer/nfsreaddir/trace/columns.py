"""The decoded pieces of each CPU and block moved into the final, time-sorted columns one by
one, so memory follows the selected columns (about their size) rather than the file."""

from __future__ import annotations

import numpy as np

from .. import tuning
from .arrays import Strs, empty, narrowest
from .base import field_column

_PARALLEL_BUILD_ROWS = 1 << 20  # events built by parallel threads only below this


# A column at least this big gives the memory of its pieces back to the system once placed
# (the peak stays about the result); below it, malloc_trim costs more than it returns (1.3 ms
# a call in a grown process: 18,138 calls were 24 s of 124 s of the reading tests).
TRIM_BYTES = 8 << 20


class ColumnBuilder:
    """Builds one read's columns: ``convert_ts`` turns raw time stamps into ns (the
    container's clock), ``cmdlines`` names the pids, ``base`` the base columns asked for,
    ``want_pid`` whether pids were decoded."""

    def __init__(self, convert_ts, cmdlines, base, want_pid):
        self._convert_ts = convert_ts
        self.cmdlines = cmdlines
        self._base = base
        self._want_pid = want_pid

    def _comm(self, pid, out=None):
        """The comm column of ``pid`` as :class:`Strs` (codes in ``out`` if given)."""
        lo, hi = (int(pid.min()), int(pid.max())) if len(pid) else (0, -1)
        if lo >= -1 and hi < (1 << 23):
            # pids are small: a direct table instead of hashing
            seen = np.zeros(hi + 2, bool)
            seen[pid + 1] = True
            uniq = np.flatnonzero(seen) - 1
            table = np.zeros(hi + 2, np.int32)
            table[uniq + 1] = np.arange(len(uniq), dtype=np.int32)
            codes = np.take(table, pid + 1, out=out)
        else:
            uniq, c = np.unique(pid, return_inverse=True)
            codes = np.asarray(c, np.int32).reshape(-1)
        names = ["<idle>" if p == 0 else self.cmdlines.get(int(p), "<...>") for p in uniq.tolist()]
        return Strs(codes, names)

    @staticmethod
    def _place(parts, n, order, dtype, scratch, out=None):
        """One array of ``n`` rows from ``parts`` (consumed: the list is emptied as it
        goes), in the row order ``order`` (None: as they come).  ``scratch(dtype)`` gives
        a buffer reused between columns, so the only new memory is the result."""
        dtype = np.dtype(dtype)
        if order is None and out is None and len(parts) == 1 and parts[0].dtype == dtype:
            return parts.pop()  # one piece (the compiled extract's): no copy
        if order is not None and dtype.kind == "O":
            tmp = np.concatenate(parts)
            parts.clear()
            return tmp[order]
        if out is None:
            out = empty(n, dtype)
        tmp = scratch(dtype) if order is not None else out
        at = 0
        while parts:
            p = parts.pop(0)
            tmp[at : at + len(p)] = p
            at += len(p)
            del p
        if n * dtype.itemsize >= TRIM_BYTES:
            tuning.trim()
        if order is not None:
            np.take(tmp, order, out=out)
        return out

    @staticmethod
    def _merge_strs(parts):
        """Codes of string parts renumbered into one dictionary (parts consumed), each piece
        in the narrowest type for the whole dictionary."""
        index: dict[str, int] = {}
        remaps = [[index.setdefault(v, len(index)) for v in p.values] for p in parts]
        dtype = narrowest(len(index))
        pieces = []
        for remap in remaps:
            p = parts.pop(0)
            if remap == list(range(len(remap))) and p.codes.dtype == dtype:
                pieces.append(p.codes)
            else:
                pieces.append(np.array(remap + [-1], dtype=dtype)[p.codes])  # -1 stays -1
            del p
        return pieces, list(index)

    def build(self, want, acc):
        """{key: {column: array or Strs}} from the decoded pieces, sorted by time (ties: cpu,
        then file order).

        Pieces are moved into the final columns one by one and dropped, and one scratch
        buffer serves all columns of an event, so memory stays near the size of the
        result.  Events are independent: several are built by parallel threads."""
        jobs = [(w, acc.pop(eid)) for eid, w in want.items()]
        rows = [sum(len(x) for x in j[1]["ts"]) for j in jobs]
        big = [r for r in rows if r > (1 << 16)]
        # Each build holds a scratch buffer and the sort order beside its result: in
        # parallel only while that is small, so the peak stays near the result's size.
        nthreads = (
            min(len(big), tuning.reader_threads()) if sum(rows) <= _PARALLEL_BUILD_ROWS else 1
        )
        done = tuning.in_threads(lambda j: self._build_event(*j), jobs, nthreads)
        frames = {}
        for d in done:
            frames.update(d)
        return frames

    def _build_event(self, w, a):
        key, fmt, fields, keys = w
        series = {}
        if a["ts"]:
            n = sum(len(x) for x in a["ts"])
            raw = self._place(a.pop("ts"), n, None, np.uint64, None)
            ts = self._convert_ts(raw)
            order: np.ndarray | None
            order = np.argsort(ts, kind="stable")
            if (order[1:] > order[:-1]).all():
                order = None
            else:
                ts = np.take(ts, order, out=empty(n, ts.dtype))
            # the raw time stamps' memory (8 bytes a row) is the scratch buffer of the
            # other columns from here on, unless the time column still uses it
            box = [
                raw.view(np.uint8) if order is not None or not np.shares_memory(ts, raw) else None
            ]
            del raw

            def scratch(dtype):
                buf = box[0]
                if buf is None:
                    buf = box[0] = empty(8 * n, np.uint8)
                return buf[: n * np.dtype(dtype).itemsize].view(dtype)

            series["ts"] = ts
            cpus = a.pop("cpu")
            if "cpu" in self._base:
                cpu = empty(n, np.int64)
                tmp = cpu if order is None else scratch(np.int64)
                at = 0
                for c, k in cpus:
                    tmp[at : at + k] = c
                    at += k
                if order is not None:
                    np.take(tmp, order, out=cpu)
                series["cpu"] = cpu
            if self._want_pid:
                pid = self._place(a.pop("pid"), n, order, np.int64, scratch)
                if "pid" in self._base:
                    series["pid"] = pid
                if "comm" in self._base:
                    series["comm"] = self._comm(pid, out=empty(n, np.int32))
                del pid
            for f in fields:
                parts = a.pop("f:" + f.name)
                if isinstance(parts[0], Strs):
                    pieces, values = self._merge_strs(parts)
                    # (the narrowest codes: cache and function names are few, so a byte
                    # a row where the compiled extract gave that, without a copy)
                    codes = self._place(pieces, n, order, narrowest(len(values)), scratch)
                    series["f:" + f.name] = _text(fmt, f, Strs(codes, values))
                else:
                    series["f:" + f.name] = self._place(parts, n, order, parts[0].dtype, scratch)
            del order, box
        else:
            cols = {
                "ts": np.zeros(0, np.int64),
                "cpu": np.zeros(0, np.int64),
                "pid": np.zeros(0, np.int64),
                "comm": Strs(np.zeros(0, np.int32), []),
            }
            for f in fields:
                cols["f:" + f.name] = (
                    Strs(np.zeros(0, np.int32), [])
                    if f.kind == "str"
                    else np.empty(0, dtype=f.dtype)
                )
            series = cols
        frames = {}
        for k, flist in keys:
            data = {c: series[c] for c in self._base}
            for c in flist:
                data[field_column(c)] = series["f:" + c]
            frames[k] = data
        return frames

    def pieces(self, want, acc):
        """{key: [{column: array or Strs}, ...]}: the decoded pieces as they are, each in
        file order, neither joined nor sorted (what read_pieces() gives)."""
        frames = {}
        for eid, (_, fmt, fields, keys) in want.items():
            a = acc.pop(eid)
            pieces = []
            for i, raw in enumerate(a["ts"]):
                cpu, n = a["cpu"][i]
                p = {"ts": self._convert_ts(raw)}
                if "cpu" in self._base:
                    p["cpu"] = np.full(n, cpu, np.int64)
                if self._want_pid:
                    pid = a["pid"][i]
                    if "pid" in self._base:
                        p["pid"] = pid.astype(np.int64)
                    if "comm" in self._base:
                        p["comm"] = self._comm(pid)
                for f in fields:
                    v = a["f:" + f.name][i]
                    p["f:" + f.name] = _text(fmt, f, v) if isinstance(v, Strs) else v
                pieces.append(p)
            for k, flist in keys:
                frames[k] = [
                    {c: p[c] for c in self._base} | {field_column(c): p["f:" + c] for c in flist}
                    for p in pieces
                ]
        return frames


def _text(fmt, f, s):
    """A string column as the user sees it: trace_marker text without its final newline,
    as trace-cmd report shows it."""
    if fmt.system == "ftrace" and fmt.name == "print" and f.name == "buf":
        return s.map_values(lambda v: v[:-1] if v.endswith("\n") else v)
    return s
