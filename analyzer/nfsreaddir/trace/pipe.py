"""Decoding the kernel's ring-buffer pages as trace_pipe_raw hands them out: each page walked by
the one page walker (:class:`.ringbuf.PageWalker`, the page format of :mod:`.page`), the
payloads of the events asked for decoded by their format (format.EventFormat) into the fields
asked for. Knows nothing of NFS or of files."""

import struct

import numpy as np

from .page import PageLayout
from .ringbuf import PageWalker

_PID_END = 8  # common_type, flags, preempt_count, then the 4-byte pid


class PageError(Exception):
    pass


def decode_page(page, header, formats, wanted):
    """Events of one page: yields (ts, event id, pid, {field: value}) for event ids in
    wanted ({id: [field names]}); the last item is ("lost", count or None, the page's time
    stamp) when the page says events were lost before it. header: offsets from the
    header_page format. A damaged page raises PageError after the events before the damage."""
    walker = PageWalker(
        PageLayout(
            len(page),
            header["commit_off"],
            header["commit_size"],
            header["data_off"],
            False,
            8,
            0,
            2,
        )
    )
    lost: list[dict] = []
    block = np.frombuffer(page, np.uint8)
    for res, damage in walker.walk(block, None, 0, lost):
        if res is not None:
            for pos, ts, dlen, eid in zip(*(a.tolist() for a in res)):
                names = wanted.get(eid)
                if names is None:
                    continue
                if dlen < _PID_END:
                    raise PageError(f"a record of {dlen} bytes at offset {pos} is too short")
                rec = page[pos : pos + dlen]
                fmt = formats[eid]
                yield (
                    ts,
                    eid,
                    struct.unpack_from("<i", rec, 4)[0],
                    {n: _value(rec, fmt.fields[n]) for n in names},
                )
        if damage:
            raise PageError(damage)
    for ev in lost:
        yield "lost", ev["count"], ev["ts"]


def _value(rec, f):
    if f.loc in ("data", "rel"):
        word = int.from_bytes(rec[f.offset : f.offset + 4], "little")
        off, ln = word & 0xFFFF, word >> 16
        if f.loc == "rel":
            off += f.offset + 4
        raw = rec[off : off + ln]
    elif f.loc == "tail":
        raw = rec[f.offset :]
    elif f.kind == "int":
        return int.from_bytes(rec[f.offset : f.offset + f.size], "little", signed=f.signed)
    else:
        raw = rec[f.offset : f.offset + f.size]
    if f.kind == "str":
        return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")
    return bytes(raw)
