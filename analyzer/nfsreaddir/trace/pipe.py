"""Decoding the kernel's ring-buffer pages as trace_pipe_raw hands them out.

A page is a header (timestamp, commit = bytes of data, with the missed-events flags in its top
bits) and records, each a 32-bit word of type_len (5 bits) and time delta (27 bits): type_len
1-28 is an event of type_len*4 bytes, 0 an event whose length is in the next word, 29 padding,
30 a time extension, 31 an absolute time stamp (include/linux/ring_buffer.h). Event payloads
are decoded by their format (format.EventFormat) into the fields asked for. Knows nothing of
NFS or of files; trace.dat's own pages are walked by trace/ringbuf.py.
"""

import struct

MISSED_EVENTS = 1 << 31      # RB_MISSED_EVENTS: events were lost before this page
MISSED_STORED = 1 << 30      # RB_MISSED_STORED: their count is stored after the data
TS_SHIFT = 27
TS_MSB = 0xF8 << 56          # the bits an absolute time stamp does not carry (5.10+)


class PageError(Exception):
    pass


def decode_page(page, header, formats, wanted):
    """Events of one page: yields (ts, event id, pid, {field: value}) for event ids in
    wanted ({id: [field names]}); the last item is ("lost", count or None) when the page says
    events were lost before it. header: offsets from the header_page format."""
    ts = int.from_bytes(page[0:8], "little")
    coff, csize, doff = header["commit_off"], header["commit_size"], header["data_off"]
    commit = int.from_bytes(page[coff:coff + csize], "little")
    flags = commit & (MISSED_EVENTS | MISSED_STORED)
    size = commit & (MISSED_STORED - 1)
    pos, end = doff, min(doff + size, len(page))
    while pos + 4 <= end:
        word = int.from_bytes(page[pos:pos + 4], "little")
        tlen, delta = word & 31, word >> 5
        if tlen == 29:                           # padding
            if delta == 0:
                break
            pos += 4 + int.from_bytes(page[pos + 4:pos + 8], "little")
            continue
        if tlen == 30:                           # time extension
            ts += (int.from_bytes(page[pos + 4:pos + 8], "little") << TS_SHIFT) + delta
            pos += 8
            continue
        if tlen == 31:                           # absolute time stamp
            abs_ts = (int.from_bytes(page[pos + 4:pos + 8], "little") << TS_SHIFT) + delta
            ts = abs_ts | (ts & TS_MSB)
            pos += 8
            continue
        ts += delta
        if tlen == 0:
            length = int.from_bytes(page[pos + 4:pos + 8], "little") - 4
            data = pos + 8
        else:
            length = tlen * 4
            data = pos + 4
        if length < 8 or data + length > len(page):
            raise PageError(f"a record of {length} bytes at offset {pos} runs past the page")
        pos = data + length
        eid = int.from_bytes(page[data:data + 2], "little")
        names = wanted.get(eid)
        if names is None:
            continue
        rec = page[data:data + length]
        fmt = formats[eid]
        yield ts, eid, struct.unpack_from("<i", rec, 4)[0], {n: _value(rec, fmt.fields[n])
                                                               for n in names}
    if flags & MISSED_EVENTS:
        count = None
        if flags & MISSED_STORED and end + 8 <= len(page):
            count = int.from_bytes(page[end:end + 8], "little")
        yield "lost", count


def _value(rec, f):
    if f.loc in ("data", "rel"):
        word = int.from_bytes(rec[f.offset:f.offset + 4], "little")
        off, ln = word & 0xFFFF, word >> 16
        if f.loc == "rel":
            off += f.offset + 4
        raw = rec[off:off + ln]
    elif f.loc == "tail":
        raw = rec[f.offset:]
    elif f.kind == "int":
        return int.from_bytes(rec[f.offset:f.offset + f.size], "little", signed=f.signed)
    else:
        raw = rec[f.offset:f.offset + f.size]
    if f.kind == "str":
        return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")
    return bytes(raw)
