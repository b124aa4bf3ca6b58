"""The trace.dat container (file versions 6 and 7): header, v6 sections or v7 section chain,
options, event formats, cmdlines, and where each CPU's ring-buffer data lies. A file cut short
is recovered by :mod:`.recover`; the pages are read by :mod:`.streams` and :mod:`.ringbuf`.

Layout notes (trace-cmd 3.x files; they differ from the published v7 text):
the v7 section header's size field is 8 bytes, the BUFFER option carries a
4-byte page size after the clock string, the per-CPU size of compressed data
does not count the leading 4-byte chunk count, and a v6 options list ends with
a bare 2-byte 0.  v6 instance data starts with "flyrecord\0" and the per-CPU
offset/size pairs.
"""

from __future__ import annotations

import mmap
import os
import sys

from .base import TraceError, new_info
from .format import parse_cpu_stats
from .formats import Formats
from .magic import TRACE_DAT_MAGIC
from .metadata import read_cmdlines, read_event_formats, read_ftrace_formats, read_header_info
from .options import (
    OPT_BUFFER,
    OPT_BUFFER_TEXT,
    OPT_CMDLINES,
    OPT_DONE,
    OPT_EVENT_FORMATS,
    OPT_FTRACE_EVENTS,
    OPT_HEADER_INFO,
    OPT_KALLSYMS,
    SECTION_OPTIONS,
    TimeConversion,
    read_buffer_option,
    read_option,
)
from .page import PageLayout
from .raw import Cursor, Damage, decompress
from .recover import recover_buffer, section_chain_damage

# counters of ``per_cpu/cpuN/stats`` that count events the ring buffer lost: overwritten
# (overwrite mode), dropped (buffer full, no overwrite), lost to nested writes
LOST_STATS = ("overrun", "dropped_events", "commit_overrun")


class Buffer:
    def __init__(self, name, clock, page_size, cpus, compressed):
        self.name, self.clock, self.page_size = name, clock, page_size
        self.cpus = cpus  # list of (cpu, offset, size)
        self.compressed = compressed


class DatFile:
    """The container of a trace.dat file: opening it reads everything but the ring-buffer
    pages."""

    def __init__(self, path, instance=None):
        self.path = path
        try:
            self._f = open(path, "rb")
            self.size = os.fstat(self._f.fileno()).st_size
            self.mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if self.size else b""
        except (OSError, ValueError) as e:
            raise TraceError(f"cannot open {path!r}: {e}") from None
        self.formats = Formats(path)
        self.cmdlines = {}
        self.buffers: dict[str, Buffer] = {}
        self.options = {}
        self._time = TimeConversion()
        self.info = new_info("trace.dat", path, instance)
        self._cpustat_texts: list[str] = []
        self.cut_options = None  # v7: why the options after the data could not be read
        try:
            self._parse_meta()
        except Damage as d:
            self.close()
            raise TraceError(
                f"{path}: cannot read the trace metadata: {d}. The file is "
                "truncated or corrupt; re-copy it or record again"
            ) from None
        except TraceError:
            self.close()
            raise
        except (ValueError, IndexError, OverflowError, UnicodeDecodeError, MemoryError) as e:
            self.close()
            raise TraceError(
                f"{path}: corrupt trace metadata ({type(e).__name__}: {e}); "
                "re-copy the file or record again"
            ) from None
        name = instance or ""
        if instance is None and not self._holds_data(""):
            name = self._only_instance_with_data()
            self.info["instance"] = name
        if name not in self.buffers:
            self.close()
            have = ", ".join(repr(b) for b in self.buffers) or "none"
            raise TraceError(
                f"{path}: no trace data for instance {name!r} (instances with data: {have})"
            )
        self.buf = self.buffers[name]
        self._refuse_a_second_trace(path)
        # data of other instances past the end of the file: the file is truncated
        self.other_damage = []
        if self.version >= 7 and self.cut_options is None:
            msg = section_chain_damage(self)
            if msg:
                self.other_damage.append(msg)
        for bname, b in self.buffers.items():
            if bname == name:
                continue
            for cpu, off, size in b.cpus:
                if size and off + size + (4 if b.compressed else 0) > self.size:
                    self.other_damage.append(
                        f"instance {bname!r} cpu {cpu}: data runs past the end of the file "
                        f"(truncated)"
                    )
                    break
        self.info["cpu_stats"] = parse_cpu_stats(self._cpustat_texts).get(name, {})
        self.info["lost_total"] = self.lost_total([], False)
        self.info["clock"] = self.buf.clock or self.info.get("clock")
        self.info["instances"] = list(self.buffers)
        if self.info["cpus"] is None:
            self.info["cpus"] = len(self.buf.cpus)

    # How far past the end of its ring-buffer data a second trace's header is looked for (the
    # options trace-cmd writes after the data of a v7 file take a few kB).
    SECOND_TRACE_WITHIN = 16 << 20

    def _refuse_a_second_trace(self, path):
        """Two trace.dat files joined (`cat a.dat b.dat`) read as the first alone, the second
        dropped in silence: refused, naming where the second begins."""
        end = max(
            (
                off + size + (4 if b.compressed else 0)
                for b in self.buffers.values()
                for _, off, size in b.cpus
            ),
            default=0,
        )
        at = self.mm.find(TRACE_DAT_MAGIC, end, end + self.SECOND_TRACE_WITHIN) if end else -1
        if at >= 0:
            self.close()
            raise TraceError(
                f"{path}: a second trace begins at byte {at} (trace.dat files joined?); give "
                f"each trace on its own: head -c {at} FILE > first.dat; "
                f"tail -c +{at + 1} FILE > second.dat"
            )

    def layout(self):
        """The layout of the pages of the buffer read (:class:`.page.PageLayout`)."""
        return PageLayout.of(
            self.buf.page_size,
            self.header_page,
            self.endian == ">",
            self.long_size,
            self.formats.id_field(),
        )

    def convert_ts(self, ts):
        """Raw ring-buffer time stamps (uint64 array) as ns (int64): the TSC conversion and
        the offset the file's options give."""
        return self._time.convert(ts)

    def ts_in_order(self, lo, hi):
        """Whether the raw time stamps from lo to hi convert in their order."""
        return self._time.in_order(lo, hi)

    def lost_total(self, lost_events, scanned):
        """Events lost by the ring buffer, when the trace says: the lost counters of the
        stored CPU stats (every CPU with data must have them), else, once the data was
        scanned, the counts of the lost-events markers (None if one has no count)."""
        stats = self.info["cpu_stats"]
        cpus = [cpu for cpu, _, size in self.buf.cpus if size]
        if cpus and all(any(k in stats.get(cpu, {}) for k in LOST_STATS) for cpu in cpus):
            return sum(
                int(v)
                for st in stats.values()
                for k, v in st.items()
                if k in LOST_STATS and isinstance(v, int)
            )
        if not scanned:
            return None
        counts = [ev["count"] for ev in lost_events]
        return sum(counts) if None not in counts else None

    def _holds_data(self, name):
        b = self.buffers.get(name)
        return b is not None and any(size for _, _, size in b.cpus)

    def _only_instance_with_data(self):
        """The instance to read when the top-level buffer holds nothing (``trace-cmd record
        -B NAME`` or ``extract -B NAME`` alone): the one instance with data, named on stderr;
        with several, which one is meant cannot be guessed."""
        have = [n for n in self.buffers if n and self._holds_data(n)]
        if len(have) == 1:
            sys.stderr.write(
                f"nfs-readdir: {self.path}: the top-level buffer holds no events; "
                f"reading those of instance {have[0]!r}\n"
            )
            return have[0]
        if not have:
            return ""
        self.close()
        raise TraceError(
            f"{self.path}: the top-level buffer holds no events, and the instances "
            f"{', '.join(map(repr, have))} do; one is read at a time: extract each into a "
            f"file of its own (trace-cmd extract -B NAME -o NAME.dat), or record the events "
            f"in the top-level buffer"
        )

    # ---------------------------------------------------------------- meta
    def close(self):
        try:
            if isinstance(self.mm, mmap.mmap):
                self.mm.close()
        except (BufferError, AttributeError):
            pass
        try:
            self._f.close()
        except AttributeError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def _cur(self, pos, end=None, what="file"):
        end = self.size if end is None else min(end, self.size)
        return Cursor(self.mm, pos, end, self.endian, what)

    def _parse_meta(self):
        mm = self.mm
        c = Cursor(mm, 0, self.size, "<", "file header")
        if c.take(10) != b"\x17\x08\x44tracing":
            raise Damage("bad magic: not a trace.dat file")
        ver = c.cstr(16)
        if ver not in ("6", "7"):
            raise TraceError(
                f"{self.path}: trace.dat file version {ver!r} is not supported "
                "(versions 6 and 7 are); convert it with `trace-cmd convert "
                "--file-version 7`"
            )
        self.version = int(ver)
        endian = c.uint(1)
        if endian not in (0, 1):
            raise Damage(f"bad endianness flag {endian}")
        self.endian = "<" if endian == 0 else ">"
        c.e = self.endian
        self.long_size = c.uint(1)
        if self.long_size not in (4, 8):
            raise Damage(f"bad long size {self.long_size}")
        self.page_size = c.uint(4)
        if self.page_size < 64 or self.page_size > (1 << 24) or self.page_size % 8:
            raise Damage(f"implausible page size {self.page_size}")
        self.info.update(
            version=self.version,
            endian="little" if endian == 0 else "big",
            long_size=self.long_size,
            page_size=self.page_size,
        )
        if self.version == 6:
            self.compression = "none"
            self._parse_v6(c)
            self.info["format"] = "trace.dat v6"
        else:
            self.compression = c.cstr(64)
            self.compression_version = c.cstr(64)
            if self.compression not in ("none", "zstd", "zlib"):
                raise TraceError(
                    f"{self.path}: compression {self.compression!r} is not "
                    "supported (none, zlib and zstd are); convert with "
                    "`trace-cmd convert --compression none`"
                )
            first = c.uint(8)
            self.sections_start = c.pos
            self._parse_v7(first)
            self.info["format"] = "trace.dat v7" + (
                "" if self.compression == "none" else f" {self.compression}"
            )
        self.info["compression"] = self.compression
        if not self.formats.by_id:
            raise Damage("no event formats found")

    # v6 --------------------------------------------------------------
    def _parse_v6(self, c):
        self.header_page = read_header_info(c, self.long_size, self.path)
        read_ftrace_formats(c, self.formats)
        read_event_formats(c, self.formats)
        n = c.uint(4)
        c.take(n)  # kallsyms
        n = c.uint(4)
        c.take(n)  # printk formats
        n = c.uint(8)
        read_cmdlines(c.take(n), self.cmdlines)
        cpus = c.uint(4)
        if cpus > 65536:
            raise Damage(f"implausible cpu count {cpus}")
        self.info["cpus"] = cpus
        self._v6_cpus = cpus
        kind = c.take(10)
        v6_buffers = []
        if kind == b"options  \0":
            while True:
                oid = c.uint(2)
                if oid == 0:
                    break
                size = c.uint(4)
                data = c.take(size)
                if oid == OPT_BUFFER:
                    oc = Cursor(data, 0, len(data), self.endian, "BUFFER option")
                    off = oc.uint(8)
                    v6_buffers.append((oc.cstr(), off))
                else:
                    self._option(oid, data)
            kind = c.take(10)
        if kind == b"latency  \0":
            raise TraceError(
                f"{self.path}: this trace.dat holds latency-tracer text, not "
                "event records; it cannot be decoded into events"
            )
        if kind != b"flyrecord\0":
            raise Damage(f"expected 'flyrecord' at offset {c.pos - 10}, found {kind!r}")
        clock = self.info.get("clock")
        self.buffers[""] = Buffer("", clock, self.page_size, self._v6_cpu_list(c, cpus), False)
        for name, off in v6_buffers:
            try:
                bc = self._cur(off, what=f"instance {name!r} data header")
                if bc.take(10) != b"flyrecord\0":
                    raise Damage(f"instance {name!r}: 'flyrecord' not found at offset {off}")
                self.buffers[name] = Buffer(
                    name, clock, self.page_size, self._v6_cpu_list(bc, cpus), False
                )
            except Damage as d:
                self.info["damage"].append(str(d))

    @staticmethod
    def _v6_cpu_list(c, cpus):
        out = []
        for cpu in range(cpus):
            off = c.uint(8)
            size = c.uint(8)
            out.append((cpu, off, size))
        return out

    # v7 --------------------------------------------------------------
    def _section(self, off, expect_id, what):
        """Read the section at ``off``; returns (flags, bytes of the payload)."""
        c = self._cur(off, what=what)
        sid = c.uint(2)
        flags = c.uint(2)
        c.uint(4)  # description string id
        size = c.uint(8)
        if expect_id is not None and sid != expect_id:
            raise Damage(f"{what}: section id {sid} at offset {off}, expected {expect_id}")
        if size > self.size - c.pos:
            raise Damage(
                f"{what}: section size {size} at offset {off} runs past the end "
                f"of the file ({self.size} bytes)"
            )
        if flags & 1:
            csize = c.uint(4)
            usize = c.uint(4)
            if csize > size:
                raise Damage(f"{what}: compressed size {csize} larger than section {size}")
            data = decompress(self.compression, c.take(csize), usize, what)
        else:
            data = c.take(size)
        return sid, flags, data, c.pos

    def _parse_v7(self, first):
        seen: set[int] = set()
        off = first
        section_opts = []
        buffers = []
        while off:
            if off in seen or len(seen) > 1000:
                raise Damage("options sections form a loop")
            seen.add(off)
            try:
                _, _, data, _ = self._section(off, 0, "options section")
            except Damage as d:
                if off == first:
                    raise
                # trace-cmd writes the last options (the BUFFER option among them) after
                # the data: a cut file loses them, and the data is found without them
                self.cut_options = str(d)
                break
            oc = Cursor(data, 0, len(data), self.endian, "options section")
            off = 0
            while oc.pos < oc.end:
                oid = oc.uint(2)
                size = oc.uint(4)
                odata = oc.take(size)
                if oid == OPT_DONE:
                    off = (
                        int.from_bytes(odata[:8], "little" if self.endian == "<" else "big")
                        if len(odata) >= 8
                        else 0
                    )
                    break
                if oid in SECTION_OPTIONS:
                    section_opts.append(
                        (oid, int.from_bytes(odata[:8], "little" if self.endian == "<" else "big"))
                    )
                elif oid == OPT_BUFFER:
                    buffers.append(odata)
                elif oid == OPT_BUFFER_TEXT:
                    self.info["damage"].append("latency (text) buffers are not decoded")
                else:
                    self._option(oid, odata)
        got = {oid for oid, _ in section_opts}
        for need in (OPT_HEADER_INFO, OPT_EVENT_FORMATS):
            if need not in got:
                raise Damage(
                    f"the options do not point to a section {need} (header info / event formats)"
                )
        # header info first: other sections need the long size and endianness
        section_opts.sort(key=lambda x: x[0] != OPT_HEADER_INFO)
        for oid, soff in section_opts:
            if oid == OPT_KALLSYMS:
                continue  # kernel symbols: not read
            what = {
                16: "header info",
                17: "ftrace formats",
                18: "event formats",
                20: "printk formats",
                21: "saved cmdlines",
            }[oid]
            _, _, data, _ = self._section(soff, oid, what)
            sc = Cursor(data, 0, len(data), self.endian, what)
            if oid == OPT_HEADER_INFO:
                self.header_page = read_header_info(sc, self.long_size, self.path)
            elif oid == OPT_FTRACE_EVENTS:
                read_ftrace_formats(sc, self.formats)
            elif oid == OPT_EVENT_FORMATS:
                read_event_formats(sc, self.formats)
            elif oid == OPT_CMDLINES:
                n = sc.uint(8)
                read_cmdlines(sc.take(n), self.cmdlines)
        if self.cut_options is not None and not buffers:
            cpus, compressed = recover_buffer(self, OPT_BUFFER)
            self.buffers[""] = Buffer("", self.info.get("clock"), self.page_size, cpus, compressed)
        for odata in buffers:
            soff, name, clock, page_size, cpus = read_buffer_option(odata, self.endian)
            try:
                c = self._cur(soff, what=f"buffer {name!r} section")
                c.uint(2)
                flags = c.uint(2)
            except Damage as d:
                self.info["damage"].append(str(d))
                flags = 0
            if page_size != self.page_size and (
                page_size < 64 or page_size > (1 << 24) or page_size % 8
            ):
                raise Damage(f"implausible page size {page_size} for buffer {name!r}")
            self.buffers[name] = Buffer(name, clock, page_size, cpus, bool(flags & 1))

    def _option(self, oid, data):
        read_option(oid, data, self.endian, self.info, self._time, self._cpustat_texts)
        self.options.setdefault(oid, []).append(data)
