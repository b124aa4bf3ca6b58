"""The options of a trace.dat (a v6 options list, v7 options sections): their ids, what the ones
read here say, and the time conversion the clock options give (:class:`TimeConversion`). The
container that finds the options is :mod:`.datfile`."""

from __future__ import annotations

import re
from typing import Literal

import numpy as np

from .raw import Cursor, Damage

# option ids
OPT_DONE, OPT_DATE, OPT_CPUSTAT, OPT_BUFFER, OPT_TRACECLOCK, OPT_UNAME = 0, 1, 2, 3, 4, 5
OPT_OFFSET, OPT_CPUCOUNT, OPT_VERSION, OPT_TRACEID = 7, 8, 9, 11
OPT_TSC2NSEC = 14
OPT_HEADER_INFO, OPT_FTRACE_EVENTS, OPT_EVENT_FORMATS = 16, 17, 18
OPT_KALLSYMS, OPT_PRINTK, OPT_CMDLINES, OPT_BUFFER_TEXT = 19, 20, 21, 22
# v7: the options that point to a section of their own
SECTION_OPTIONS = {
    OPT_HEADER_INFO,
    OPT_FTRACE_EVENTS,
    OPT_EVENT_FORMATS,
    OPT_KALLSYMS,
    OPT_PRINTK,
    OPT_CMDLINES,
}


class TimeConversion:
    """Raw ring-buffer time stamps to ns: the TSC conversion (OPT_TSC2NSEC: mult, shift,
    offset) and the offset (OPT_OFFSET, OPT_DATE) the file's options give."""

    def __init__(self):
        self.tsc2nsec = None
        self.offset = 0

    def convert(self, ts):
        """Raw time stamps (uint64 array) as ns (int64)."""
        if self.tsc2nsec is not None:
            mult, shift, offset = self.tsc2nsec
            if mult:
                x = ts - np.uint64(offset)
                lo = (x & np.uint64(0xFFFFFFFF)) * np.uint64(mult)
                hi = (x >> np.uint64(32)) * np.uint64(mult)
                if shift >= 32:
                    ts = (hi + (lo >> np.uint64(32))) >> np.uint64(shift - 32)
                else:
                    ts = (hi << np.uint64(32 - shift)) + (lo >> np.uint64(shift))
        out = ts.view(np.int64) if ts.dtype == np.uint64 else ts.astype(np.int64)
        if self.offset:
            out = out + np.int64(self.offset)
        return out

    def in_order(self, lo, hi):
        """Whether every raw time stamp from ``lo`` to ``hi`` converts in its order: none of
        convert()'s uint64 and int64 steps wraps between them (a damaged stamp can be below
        the TSC offset, or large enough to wrap)."""
        top = hi
        if self.tsc2nsec is not None and self.tsc2nsec[0]:
            mult, shift, offset = self.tsc2nsec
            if lo < offset or mult >= 1 << 32 or (hi - offset) * mult >= 1 << 64:
                return False
            top = ((hi - offset) * mult) >> shift
        return top + abs(self.offset) < 1 << 62


def read_option(oid, data, endian, info, time, cpustat_texts):
    """Take in what option ``oid`` (its payload ``data``, in byte order ``endian``) says: the
    uname, trace-cmd version, clock, CPU count and trace id into ``info``, the TSC conversion
    and time offsets into ``time`` (a :class:`TimeConversion`), a CPU stats text onto
    ``cpustat_texts``. Other options say nothing read here."""

    def s():
        return data.split(b"\0", 1)[0].decode("utf-8", "replace").strip()

    e: Literal["little", "big"] = "little" if endian == "<" else "big"
    if oid == OPT_UNAME:
        info["uname"] = s()
    elif oid == OPT_VERSION:
        info["trace_cmd_version"] = s()
    elif oid == OPT_TRACECLOCK:
        m = re.search(r"\[(\S+)\]", s())
        if m:
            info["clock"] = m.group(1)
    elif oid == OPT_CPUCOUNT and len(data) >= 4:
        info["cpus"] = int.from_bytes(data[:4], e)
    elif oid == OPT_CPUSTAT:
        cpustat_texts.append(s())
    elif oid == OPT_TSC2NSEC and len(data) >= 16:
        time.tsc2nsec = (
            int.from_bytes(data[0:4], e),
            int.from_bytes(data[4:8], e),
            int.from_bytes(data[8:16], e),
        )
    elif oid in (OPT_OFFSET, OPT_DATE):
        try:
            time.offset += int(s(), 0)
        except ValueError:
            pass
    elif oid == OPT_TRACEID and len(data) >= 8:
        info["trace_id"] = int.from_bytes(data[:8], e)


def read_buffer_option(data, endian):
    """A v7 BUFFER option: (offset of the instance's data section, its name, its clock, its
    page size, [(cpu, offset, size)] of its CPU data)."""
    bc = Cursor(data, 0, len(data), endian, "BUFFER option")
    soff = bc.uint(8)
    name = bc.cstr()
    clock = bc.cstr()
    page_size = bc.uint(4)
    ncpu = bc.uint(4)
    if ncpu > 65536:
        raise Damage(f"implausible cpu count {ncpu} in BUFFER option")
    cpus = []
    for _ in range(ncpu):
        cpu = bc.uint(4)
        coff = bc.uint(8)
        csize = bc.uint(8)
        cpus.append((cpu, coff, csize))
    return soff, name, clock, page_size, cpus
