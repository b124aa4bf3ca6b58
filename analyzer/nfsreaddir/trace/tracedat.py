"""Column-oriented reader for trace-cmd ``trace.dat`` files (versions 6 and 7), built as a chain
of objects that each own their state: the container (:class:`.datfile.DatFile`: header, options,
event formats, where each CPU's data lies) -> the CPU streams as blocks of whole pages
(:class:`.streams.Streams`; uncompressed data is mmapped, compressed chunks are decompressed a
block at a time) -> the one page walker (:class:`.ringbuf.PageWalker`) -> the decoders
(:class:`.decode.Decoder`), per read with the scan that drives them (:class:`.scan.Scan`) -> the
columns (:class:`.columns.ColumnBuilder`). Only the events and fields asked for are decoded, by
name, using the event formats stored in the file.
"""

from __future__ import annotations

import numpy as np

from .. import tuning
from .arrays import Strs
from .base import BASE_COLUMNS, TraceError, field_column
from .columns import ColumnBuilder
from .datfile import DatFile
from .decode import Decoder
from .raw import Damage
from .records import OddRecords, nothing_odd
from .ringbuf import PageWalker
from .scan import Scan
from .streams import RELEASE_ABOVE, Streams, drop_inflate_block


class TraceDat:
    """A trace.dat file.  Use :func:`nfsreaddir.trace.open_trace` to create."""

    def __init__(self, path, instance=None):
        self.path = path
        self.file = f = DatFile(path, instance=instance)
        self.info = f.info
        self.layout = f.layout()
        self.walker = PageWalker(self.layout)
        self.streams = Streams(f.mm, f.size, f.endian, f.compression, f.buf)
        # The last read's screens of every record (scan.Scan.screens), when it read all the
        # data with the compiled extract: check_records walks the data again only when they
        # show something odd (a second walk was half of reading a trace's few needed events).
        self._screens = None
        self._sizes = {}  # event id -> its fixed fields' size (None: no format)

    def close(self):
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def event_names(self):
        """Set of ``"system:name"`` the file holds formats for."""
        return set(self.file.formats.by_name)

    def event_format(self, name):
        return self.file.formats.format_of(name)

    def _records(self, lut, damage=None, lost=None):
        """(cpu, first page, walk result) of every part of every CPU's data, the walk
        stopping at a CPU's damage (its message onto ``damage`` where given)."""
        P = self.layout.page_size
        for cpu, off, size in self.file.buf.cpus:
            first_page = 0
            try:
                for block in self.streams.blocks(cpu, off, size):
                    dmg = None  # the block's damage: the walk's last word
                    for res, dmg_so_far in self.walker.walk(
                        block, lut, cpu, [] if lost is None else lost, first_page
                    ):
                        dmg = dmg_so_far
                        if res is not None and len(res[0]):
                            yield cpu, first_page, res
                    if dmg:
                        if damage is not None:
                            damage.append(dmg)
                        break
                    first_page += len(block) // P
            except Damage as d:
                if damage is not None:
                    damage.append(str(d))
            except (IndexError, ValueError, OverflowError) as e:
                if damage is not None:
                    damage.append(
                        f"cpu {cpu}: undecodable ring-buffer data ({type(e).__name__}: {e})"
                    )

    def event_counts(self):
        """{"system:name": number of records} for the events present in the data
        (one pass over the pages, no fields decoded).  Damage is reported in
        ``info["damage"]`` and counts stop there."""
        lut = np.ones(self.layout.lut_size(), dtype=bool)
        lut[-1] = False
        counts = np.zeros(len(lut), dtype=np.int64)
        damage: list[str] = []
        lost: list[dict] = []
        for _, _, res in self._records(lut, damage, lost):
            ids = res[3].astype(np.int64)
            counts += np.bincount(np.minimum(ids, len(counts) - 1), minlength=len(counts))[
                : len(counts)
            ]
        drop_inflate_block()
        if damage:
            self.info["damage"] = list(self.info["damage"]) + damage
            self.info["partial"] = True
        self._set_lost(lost)
        counts[-1] = 0  # records that are not events (padding, time stamps)
        return {
            self.file.formats.name_of(eid) or f"unknown:id{eid}": int(counts[eid])
            for eid in np.flatnonzero(counts).tolist()
        }

    def check_records(self):
        """Look at every record of the data for what the kernel cannot have written, and put
        each finding into ``info["damaged_events"]`` ({"from", "to", "what"}, ns): an event id
        with no format in the file (``trace-cmd report`` prints ``[UNKNOWN EVENT]``), a record
        shorter than its event's fixed fields, a CPU's time stamps running backwards (the
        ring buffer writes one CPU's events in time order). A flipped bit in the data shows
        as one of these; the events it hides or moves lie within the stretch reported. Damage
        that stops a stream (a broken page) is the reader's ``partial``, not repeated here."""
        if self._screens is not None and nothing_odd(
            self._screens, self._size_of, self.layout.lut_size(), self.file.ts_in_order
        ):
            return []
        found = []
        P = self.layout.page_size
        sizes = self._sizes
        not_event = self.layout.not_event if self.layout.id_size <= 4 else None
        per_cpu = {}  # cpu -> OddRecords: a window of its records, not all of them
        # Each id's fixed size by table lookup, one pass over a part's records (a unique()
        # and a pass per id were 0.6 and 0.6 s of CPU in 10 M records): -1 not looked up
        # yet, 0 no format or no fields. Ids past the table's end, one by one.
        L = self.layout.lut_size()
        need = np.full(L, -1, np.int64)
        for cpu, first_page, (pos, ts, dlen, ids) in self._records(None):
            ids = ids.astype(np.int64)
            keep = ids != not_event
            slot = np.minimum(ids, L - 1)
            big = keep & (slot == L - 1)
            size = need[slot]
            for eid in np.unique(ids[(keep & (size < 0)) | big]).tolist():
                if eid not in sizes:
                    sizes[eid] = self._fixed_size(eid)
                if eid < L - 1:
                    need[eid] = sizes[eid] or 0
                elif sizes[eid] is not None:
                    short = (ids == eid) & (dlen < sizes[eid])
                    ids[short] = -1 - ids[short]
            size = need[slot]
            short = keep & ~big & (dlen < size)
            ids[short] = -1 - ids[short]  # too short: marked
            if cpu not in per_cpu:
                per_cpu[cpu] = OddRecords(cpu, sizes, self._ns)
            per_cpu[cpu].add(ts[keep], ids[keep], first_page + pos[keep] // P)
        for check in per_cpu.values():
            found.extend(check.finish())
        drop_inflate_block()
        if found:
            self.info["damaged_events"] = list(self.info.get("damaged_events") or []) + found
        return found

    def _ns(self, ts):
        """Raw time stamps as int64 ns (check_records' findings)."""
        return self.file.convert_ts(ts.astype(np.uint64)).astype(np.int64)

    def _size_of(self, eid):
        if eid not in self._sizes:
            self._sizes[eid] = self._fixed_size(eid)
        return self._sizes[eid]

    def _fixed_size(self, eid):
        """Bytes of an event's fixed fields (its record is at least that long), None when the
        file has no format for the id."""
        if self.file.formats.name_of(eid) is None:
            return None
        fmt = self.file.formats.format(eid)
        return (
            max((f.offset + f.size for f in fmt.fields.values()), default=0)
            if fmt is not None
            else None
        )

    def _set_lost(self, lost):
        for ev in lost:
            ev["ts"] = int(self.file.convert_ts(np.array([ev["ts"]], dtype=np.uint64))[0])
        lost.sort(key=lambda ev: (ev["ts"], ev["cpu"]))
        self.info["lost_events"] = lost
        self.info["scanned"] = True
        self.info["lost_total"] = self.file.lost_total(lost, True)

    def read(self, events, on_damage="raise", base=BASE_COLUMNS):
        """Decode the requested events.

        ``events`` maps ``"system:name"`` to a list of field names (``None``
        means all non-common fields).  Returns ``{name: DataFrame}``.

        ``base``: which of the columns ts, cpu, pid, comm every frame has (default all;
        ``ts`` always): an analysis that needs only the time skips decoding the others.

        If the data is damaged, ``on_damage="raise"`` (default) raises
        :class:`TraceError` whose ``partial`` holds the frames read before the
        damage; ``on_damage="partial"`` returns those frames instead.  Either way
        ``info["partial"]`` is set and ``info["damage"]`` says where.
        """
        return self._read_as(_frames, events, on_damage, base, False)

    def read_columns(self, events, on_damage="raise", base=BASE_COLUMNS):
        """:meth:`read` without pandas: ``{name: {column: array}}``, a string column as
        :class:`~nfsreaddir.trace.arrays.Strs` (codes and distinct values)."""
        return self._read_as(_with_empty, events, on_damage, base, False)

    def read_pieces(self, events, on_damage="raise", base=BASE_COLUMNS):
        """:meth:`read_columns` in the pieces decoded, neither joined nor sorted by time:
        ``{name: [{column: array}, ...]}``, a piece per CPU (or per block of pages where
        the compiled extract is not used), each in file order; in turn they hold the rows
        in CPU order, then file order (a stable sort by time gives read()'s order).  For a
        consumer that merges the rows by time itself (the slab analysis), without the
        copy of every column that joining them costs."""
        return self._read_as(
            lambda pieces, empty, base: pieces | {k: [] for k in empty},
            events,
            on_damage,
            base,
            True,
        )

    def read_windows(self, events, base=BASE_COLUMNS):
        """:meth:`read_pieces` a window of time at a time, for a consumer that visits the
        rows in time order and keeps its state between windows (memory: a window's columns,
        not the trace's): an iterable of ``{name: [(part, piece)]}``, ``part`` the index of
        the piece's CPU stream; every row of a window comes after every row of the windows
        before it (:class:`.windows.Windows`). Raises :class:`.base.NotWindowed`, when made
        or while iterated, where only a whole read gives the answer (damage among them):
        then call read_pieces()."""
        # (imported here: its thread pools' import, with logging's, is not a check's to pay)
        from .windows import Windows

        want, empty = self._wanted(events)

        def done(lost, screens):
            self._screens = screens
            self._set_lost(lost)

        return Windows(self, want, empty, _base(base), done)

    def _read_as(self, shape, events, on_damage, base, pieces):
        """_read's (columns, events with no rows) as ``shape`` makes them: the result, and a
        damaged trace's partial result alike."""
        base = _base(base)
        try:
            got, empty = self._read(events, on_damage, base, pieces)
        except TraceError as e:
            if e.partial is not None:
                e.partial = shape(*e.partial, base)
            raise
        return shape(got, empty, base)

    def _damaged_from(self, acc, stopped, damage):
        """The time (ns) from which events may be missing: the last event read on a CPU whose
        stream is damaged (a stream stops at its damage; the other CPUs' go on); -1, from the
        start, for damage that is not one CPU's stream or a CPU with nothing read before it.
        Only the requested events are seen, so the time is a lower bound: never too late."""
        if len(stopped) != len(damage):
            return -1
        last = []
        for cpu in stopped:
            seen = [
                int(ts.max())
                for cols in acc.values()
                for ts, (c, n) in zip(cols["ts"], cols["cpu"])
                if c == cpu and n
            ]
            if not seen:
                return -1
            last.append(max(seen))
        return int(self.file.convert_ts(np.array([min(last)], dtype=np.uint64))[0])

    def _read(self, events, on_damage, base, pieces):
        """(columns per requested name, or their pieces, {name: fields} of the names with no
        format); ``base``: the base columns, in order."""
        want, empty = self._wanted(events)
        want_pid = "pid" in base or "comm" in base
        acc: dict[int, dict[str, list]] = {
            eid: {"ts": [], "cpu": [], "pid": [], **{"f:" + f.name: [] for f in w[2]}}
            for eid, w in want.items()
        }
        lost: list[dict] = []
        damage: list[str] = []
        stopped: set[int] = set()  # CPUs whose stream is damaged: nothing after the damage
        scan = Scan(self.streams, self.walker, Decoder(self.layout.endian, want_pid), want)
        columns = ColumnBuilder(self.file.convert_ts, self.file.cmdlines, base, want_pid)
        with tuning.reading(self.file.size > RELEASE_ABOVE) as memory:
            try:
                scan.run(acc, lost, damage, stopped)
            except MemoryError:
                raise TraceError(
                    f"{self.path}: out of memory while decoding; ask for fewer events or fields"
                ) from None
            except (IndexError, ValueError, OverflowError) as e:
                # a damage pattern the checks above did not catch: still a TraceError
                damage.append(f"undecodable ring-buffer data ({type(e).__name__}: {e})")
            if damage:
                self.info["partial_from"] = self._damaged_from(acc, stopped, damage)
            with memory.building():
                frames = columns.pieces(want, acc) if pieces else columns.build(want, acc)
        if not damage and self.file.other_damage:
            # Damage outside this instance's event streams (a section after them, another
            # instance): every event of the streams was read, none is missing.
            damage.extend(self.file.other_damage)
            self.info["partial_from"] = 1 << 62
        self._screens = scan.screens if not damage else None
        self._set_lost(lost)
        if damage:
            self.info["partial"] = True
            self.info["damage"] = list(self.info["damage"]) + damage
            if on_damage != "partial":
                raise TraceError(
                    f"{self.path}: the trace data is damaged; decoded only the events before "
                    f"the damage ({'; '.join(damage[:4])}{' ...' if len(damage) > 4 else ''}). "
                    "Use the events in .partial with care, or re-copy/re-record the trace",
                    partial=(frames, empty),
                )
        return frames, empty

    def _wanted(self, events):
        """({id: [key, format, [Field], [(key, fields)]]} of the requested events the file
        has formats for, {key: fields} of those it has not)."""
        if isinstance(events, (list, tuple, set)):
            events = {e: None for e in events}
        want: dict[int, list] = {}
        empty = {}
        for key, fields in events.items():
            if isinstance(fields, str):
                fields = [fields]
            fmt = self.event_format(key)
            if fmt is None:
                empty[key] = list(fields or [])
                continue
            if fields is None:
                fields = fmt.user_fields()
            flist = []
            for fn in fields:
                if fn not in fmt.fields:
                    raise TraceError(
                        f"event {fmt.full_name} has no field {fn!r}; its fields are: "
                        f"{', '.join(fmt.fields)}"
                    )
                flist.append(fmt.fields[fn])
            if fmt.id in want:
                # same event under two keys: union of fields, split at the end
                prev = want[fmt.id]
                names = [f.name for f in prev[2]]
                prev[2].extend(f for f in flist if f.name not in names)
                prev[3].append((key, list(fields)))
            else:
                want[fmt.id] = [key, fmt, flist, [(key, list(fields))]]
        return want, empty


def _base(base):
    """The base columns asked for, in their order (``ts`` always)."""
    bad = set(base) - set(BASE_COLUMNS)
    if bad:
        raise ValueError(f"base columns are {BASE_COLUMNS}, not {sorted(bad)}")
    return tuple(c for c in BASE_COLUMNS if c in base or c == "ts")


def _with_empty(cols, empty, base):
    """The columns of read_columns() with those of the names the file has no format for."""
    for key, fields in empty.items():
        cols[key] = {
            c: (Strs(np.zeros(0, np.int32), []) if c == "comm" else np.zeros(0, np.int64))
            for c in base
        } | {field_column(f): np.zeros(0, object) for f in fields}
    return cols


def _frames(cols, empty, base):
    """DataFrames of :meth:`TraceDat.read` from the columns (pandas is imported here only:
    read_columns() does without it)."""
    import pandas as pd

    from .arrays import series

    frames = {
        k: pd.DataFrame({c: series(v) for c, v in d.items()}, copy=False) for k, d in cols.items()
    }
    for key, fields in empty.items():
        frames[key] = pd.DataFrame(
            {c: pd.Series(dtype=np.int64 if c != "comm" else "str") for c in base}
            | {field_column(f): pd.Series(dtype=object) for f in fields}
        )
    return frames
