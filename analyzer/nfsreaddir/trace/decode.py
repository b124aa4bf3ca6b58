"""Decode plans: each wanted event's records decoded from one copy of their fixed head
(integers, pid, ``__data_loc`` words) read through a structured dtype; strings are keyed by a
hash of their masked bytes, so each distinct value is decoded once."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ringbuf
from .arrays import Pieces, Strs, bytes_view, extract_strings, gather_uint, to_int_column


class Decoder:
    """Decodes the records of wanted events of one read: ``endian`` the file's byte order,
    ``want_pid`` whether the pid (and so the comm) is read."""

    def __init__(self, endian, want_pid):
        self._e = endian
        self.want_pid = want_pid

    def plan(self, w):
        """How to decode one event: the fixed head of its records (integers, pid and the
        __data_loc words) as a structured dtype read from one copy of the head."""
        e = self._e
        _, fmt, fields, _ = w
        pf = fmt.fields.get("common_pid")
        if pf is None or pf.kind != "int" or not self.want_pid:
            pf = None
        fixed = [f for f in fields if f.loc is None and f.kind == "int"]
        locs = [f for f in fields if f.loc in ("data", "rel")]
        heads = list(dict.fromkeys(fixed + locs + ([pf] if pf is not None else [])))
        dt = None
        width = 0
        if heads:
            width = (max(f.offset + (f.size if f.loc is None else 4) for f in heads) + 7) & ~7
            names, formats, offsets = [], [], []
            for i, f in enumerate(heads):
                size = f.size if f.loc is None else 4
                signed = f.signed and f.loc is None
                names.append(f"f{i}")
                formats.append(("|" if size == 1 else e) + ("i" if signed else "u") + str(size))
                offsets.append(f.offset)
            dt = np.dtype(
                {"names": names, "formats": formats, "offsets": offsets, "itemsize": width}
            )
        return {
            "fields": fields,
            "pf": pf,
            "heads": heads,
            "dtype": dt,
            "width": width,
            "hidx": {id(f): f"f{i}" for i, f in enumerate(heads)},
            "asked": {id(f) for f in fields},
        }

    def decode(self, block, pos, ts, dlen, cpu, plan, out):
        """The records at ``pos`` (their times ``ts``, data lengths ``dlen``) of one event
        by its ``plan``, appended to its pieces ``out``."""
        rb = ringbuf.compiled()
        if (
            rb is not None
            and isinstance(out["ts"], Pieces)
            and pos.dtype == np.int32
            and dlen.dtype == np.int32
        ):
            return self._decode_compiled(rb, block, pos, ts, dlen, cpu, plan, out)
        e = self._e
        n = len(pos)
        pf = plan["pf"]
        pre: dict[str | int | tuple[str, int], Any] = {}
        dmin = int(dlen.min()) if n else 0
        if plan["heads"] and int(pos.max()) + plan["width"] <= len(block):
            rec = bytes_view(block, plan["width"])[pos].view(plan["dtype"])
            packed = isinstance(out["ts"], Pieces)
            for f in plan["heads"]:
                col = rec[plan["hidx"][id(f)]]
                if f is pf:
                    if packed:  # straight into the pieces kept (no copy after)
                        pid = out["pid"].reserve(n, np.int32)
                        np.copyto(pid, col, casting="unsafe")
                        pre["pid"] = pid
                        pre["pid_kept"] = True
                    else:
                        pre["pid"] = col.astype(np.int32)
                    if id(f) not in plan["asked"]:
                        continue
                if f.loc is None:
                    if packed:
                        dst = out["f:" + f.name].reserve(n, f.dtype)
                        np.copyto(dst, col, casting="unsafe")
                        col = dst
                        pre[("kept", id(f))] = True
                    else:
                        col = col.astype(f.dtype)
                    if dmin < f.offset + f.size:
                        col[dlen < f.offset + f.size] = 0
                    pre[id(f)] = col
                else:
                    pre[id(f)] = col.astype(np.uint32)
        if not self.want_pid:
            pid = None
        elif pf is not None and dmin >= pf.offset + pf.size:
            pid = pre.get("pid")
            if pid is None:
                pid = to_int_column(gather_uint(block, pos + pf.offset, pf.size, e), pf).astype(
                    np.int32
                )
        elif pre.get("pid_kept"):
            pid = pre["pid"]
            pid[...] = -1
        else:
            pid = np.full(n, -1, dtype=np.int32)
        cols = {}
        for f in plan["fields"]:
            if pre.get(("kept", id(f))):
                continue
            col = pre.get(id(f)) if f.loc is None else None
            if col is None:
                col = self._decode_field(block, pos, dlen, f, pre.get(id(f)))
            cols["f:" + f.name] = col
        out["ts"].append(ts)
        out["cpu"].append((cpu, n))
        if pid is not None and not (pre.get("pid_kept") and pid is pre.get("pid")):
            out["pid"].append(pid)
        for k, v in cols.items():
            out[k].append(v)

    def _decode_compiled(self, rb, block, pos, ts, dlen, cpu, plan, out):
        """:meth:`_decode` by the compiled loops: integers straight into the pieces kept,
        __data_loc strings keyed in one pass (others as :meth:`_decode_field` does)."""
        n = len(pos)
        big = self._e == ">"
        pf = plan["pf"]
        if self.want_pid:
            pid = out["pid"].reserve(n, np.int32)
            # as in _decode: records too short for the pid (damage) make all of them -1
            if pf is not None and int(dlen.min()) >= pf.offset + pf.size:
                rb.ints(block, pos, dlen, pf.offset, pf.size, pf.signed, big, pid)
            else:
                pid[...] = -1
        for f in plan["fields"]:
            pieces = out["f:" + f.name]
            if f.loc is None and f.kind == "int":
                rb.ints(
                    block, pos, dlen, f.offset, f.size, f.signed, big, pieces.reserve(n, f.dtype)
                )
            elif f.loc in ("data", "rel") and f.kind == "str":
                codes = pieces.reserve(n, np.int32)
                values = rb.strings(block, pos, dlen, f.offset, f.loc == "rel", big, codes)
                pieces[-1] = Strs(codes, values)
            else:
                pieces.append(self._decode_field(block, pos, dlen, f))
        # the time piece last: it marks the record set as finished (see Scan's _whole_records)
        out["ts"].append(ts)
        out["cpu"].append((cpu, n))

    def _decode_field(self, block, pos, dlen, f, word=None):
        e = self._e
        if f.loc in ("data", "rel"):
            okrow = dlen >= f.offset + 4
            allok = bool(okrow.all())
            if word is None:
                word = gather_uint(
                    block, pos + (f.offset if allok else np.where(okrow, f.offset, 0)), 4, e
                )
            v = word.astype(np.uint32, copy=False).view(np.int32)  # native order
            start = v & 0xFFFF
            if f.loc == "rel":
                start += f.offset + f.size
            ln = (v >> 16) & 0xFFFF
            np.minimum(ln, dlen - start, out=ln)
            np.maximum(ln, 0, out=ln)
            if not allok:
                ln[~okrow] = 0
                start[~okrow] = 0
            return extract_strings(block, pos + start, ln, f.kind)
        if f.loc == "tail":
            ln = np.clip(dlen - f.offset, 0, None)
            return extract_strings(block, pos + np.minimum(f.offset, dlen), ln, f.kind)
        short = dlen < f.offset + f.size
        if f.kind == "int":
            if short.any():
                raw = gather_uint(block, pos + np.where(short, 0, f.offset), f.size, e)
                raw = np.where(short, 0, raw).astype(raw.dtype)
            else:
                raw = gather_uint(block, pos + f.offset, f.size, e)
            return to_int_column(raw, f)
        ln = np.where(short, np.clip(dlen - f.offset, 0, None), f.size)
        return extract_strings(block, pos + f.offset, ln, f.kind)
