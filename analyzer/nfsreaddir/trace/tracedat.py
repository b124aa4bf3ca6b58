"""Column-oriented reader for trace-cmd ``trace.dat`` files (versions 6 and 7).

Only the events and fields asked for are decoded, by name, using the event formats stored in the
file: the container (:mod:`.datfile`), the ring-buffer walk (:mod:`.ringbuf`), the decode plans
(:mod:`.decode`) and the column building (:mod:`.columns`) are the layers of this one reader.
Uncompressed data is mmapped; compressed chunks (v7 zlib/zstd) are decompressed a block at a
time.
"""

from __future__ import annotations

import numpy as np

from .. import tuning
from .base import BASE_COLUMNS, TraceError, field_column
from .arrays import _Strs
from .columns import ColumnBuilder
from .datfile import _LOST_STATS, OPT_KALLSYMS, DatFile
from .decode import Decoder
from .raw import _Cursor, _Damage
from .ringbuf import _RELEASE_ABOVE, RingWalk, _drop_inflate_block


class TraceDat(DatFile, RingWalk, Decoder, ColumnBuilder):
    """A trace.dat file.  Use :func:`nfsreaddir.trace.open_trace` to create."""

    def event_names(self):
        """Set of ``"system:name"`` the file holds formats for."""
        return set(self.by_name)

    def event_format(self, name):
        return self._lookup(name)

    def _lookup(self, name):
        name2 = name.replace("/", ":")
        eid = self.by_name.get(name2)
        if eid is None and ":" not in name2:
            hits = [i for i, src in self._fmt_src.items() if src[1] == name2]
            if len(hits) == 1:
                eid = hits[0]
        return None if eid is None else self._format(eid)

    def kallsyms(self):
        """(sorted uint64 addresses, list of names) from the saved /proc/kallsyms."""
        if self._kallsyms is None:
            addrs, names = [], []
            try:
                if self._kallsyms_loc is None:
                    text = b""
                elif self._kallsyms_loc[0] == "raw":
                    _, pos, n = self._kallsyms_loc
                    text = bytes(self._mm[pos:pos + n])
                else:
                    _, _, data, _ = self._section(self._kallsyms_loc[1], OPT_KALLSYMS, "kallsyms")
                    sc = _Cursor(data, 0, len(data), self._e, "kallsyms")
                    text = sc.take(sc.uint(4))
            except _Damage as d:
                raise TraceError(f"{self.path}: {d}") from None
            for line in text.decode("utf-8", "replace").splitlines():
                parts = line.split()
                if len(parts) >= 3:
                    try:
                        addrs.append(int(parts[0], 16))
                        names.append(parts[2])
                    except ValueError:
                        pass
            order = np.argsort(np.array(addrs, dtype=np.uint64), kind="stable")
            self._kallsyms = (np.array(addrs, dtype=np.uint64)[order],
                              [names[i] for i in order])
        return self._kallsyms

    def event_counts(self):
        """{"system:name": number of records} for the events present in the data
        (one pass over the pages, no fields decoded).  Damage is reported in
        ``info["damage"]`` and counts stop there."""
        idf = self._id_field
        lut = np.ones((1 << (8 * idf.size)) if idf.size <= 2 else (1 << 20), dtype=bool)
        lut[-1] = False
        counts = np.zeros(len(lut), dtype=np.int64)
        damage = []
        lost = []
        P = self._buf.page_size
        for cpu, off, size in self._buf.cpus:
            first_page = 0
            try:
                for block in self._cpu_blocks(cpu, off, size, self._buf.compressed, P):
                    for res, dmg in self._walks(block, P, None, cpu, lost, first_page):
                        if res is not None and len(res[0]):
                            ids = res[3].astype(np.int64)
                            counts += np.bincount(np.minimum(ids, len(counts) - 1),
                                                  minlength=len(counts))[:len(counts)]
                    if dmg:
                        damage.append(dmg)
                        break
                    first_page += len(block) // P
            except _Damage as d:
                damage.append(str(d))
            except (IndexError, ValueError, OverflowError) as e:
                damage.append(f"cpu {cpu}: undecodable ring-buffer data "
                              f"({type(e).__name__}: {e})")
        _drop_inflate_block()
        if damage:
            self.info["damage"] = list(self.info["damage"]) + damage
            self.info["partial"] = True
        self._set_lost(lost)
        counts[-1] = 0          # records that are not events (padding, time stamps)
        out = {}
        for eid in np.flatnonzero(counts).tolist():
            src = self._fmt_src.get(eid)
            name = f"{src[0]}:{src[1]}" if src else f"unknown:id{eid}"
            out[name] = int(counts[eid])
        return out

    def check_records(self):
        """Look at every record of the data for what the kernel cannot have written, and put
        each finding into ``info["damaged_events"]`` ({"from", "to", "what"}, ns): an event id
        with no format in the file (``trace-cmd report`` prints ``[UNKNOWN EVENT]``), a record
        shorter than its event's fixed fields, a CPU's time stamps running backwards (the
        ring buffer writes one CPU's events in time order). A flipped bit in the data shows
        as one of these; the events it hides or moves lie within the stretch reported. Damage
        that stops a stream (a broken page) is the reader's ``partial``, not repeated here."""
        found = []
        P = self._buf.page_size
        sizes = {}
        idf = self._id_field
        not_event = (1 << (8 * idf.size)) - 1 if idf.size <= 4 else None
        for cpu, off, size in self._buf.cpus:
            ts_all, ids_all, page_all = [], [], []
            first_page = 0
            try:
                for block in self._cpu_blocks(cpu, off, size, self._buf.compressed, P):
                    for res, dmg in self._walks(block, P, None, cpu, [], first_page):
                        if res is not None and len(res[0]):
                            pos, ts, dlen, ids = res
                            ids = ids.astype(np.int64)
                            keep = ids != not_event
                            for eid in np.unique(ids[keep]).tolist():
                                if eid not in sizes:
                                    sizes[eid] = self._fixed_size(eid)
                                if sizes[eid] is not None:
                                    short = keep & (ids == eid) & (dlen < sizes[eid])
                                    ids[short] = -1 - ids[short]        # too short: marked
                            ts_all.append(ts[keep])
                            ids_all.append(ids[keep])
                            page_all.append(first_page + pos[keep] // P)
                        if dmg:
                            break
                    first_page += len(block) // P
            except _Damage:
                pass            # the reader reports it (partial) when the events are read
            if not ts_all:
                continue
            ts = self._convert_ts(np.concatenate(ts_all).astype(np.uint64)).astype(np.int64)
            ids = np.concatenate(ids_all)
            page = np.concatenate(page_all)
            found.extend(self._odd_records(cpu, ts, ids, page, sizes))
        _drop_inflate_block()
        if found:
            self.info["damaged_events"] = list(self.info.get("damaged_events") or []) + found
        return found

    def _fixed_size(self, eid):
        """Bytes of an event's fixed fields (its record is at least that long), None when the
        file has no format for the id."""
        if eid not in self._fmt_src:
            return None
        fmt = self._format(eid)
        return max((f.offset + f.size for f in fmt.fields.values()), default=0) \
            if fmt is not None else None

    def _odd_records(self, cpu, ts, ids, page, sizes):
        """The damage findings of one CPU's records (in file order)."""
        out = []
        n = len(ts)

        def around(i):
            return int(ts[max(i - 1, 0)]), int(ts[min(i + 1, n - 1)])

        for i in np.flatnonzero((ids >= 0) & np.isin(ids, [e for e, s in sizes.items()
                                                           if s is None])).tolist():
            lo, hi = around(i)
            out.append({"from": min(lo, hi), "to": max(lo, hi), "cpu": cpu,
                        "what": f"cpu {cpu}: an event with unknown id {int(ids[i])} at "
                                f"{ts[i] / 1e9:.6f} s (trace-cmd shows [UNKNOWN EVENT])"})
        for i in np.flatnonzero(ids < 0).tolist():
            lo, hi = around(i)
            eid = -1 - int(ids[i])
            out.append({"from": min(lo, hi), "to": max(lo, hi), "cpu": cpu,
                        "what": f"cpu {cpu}: a record of event id {eid} at {ts[i] / 1e9:.6f} s "
                                f"is shorter than its fields ({sizes[eid]} bytes)"})
        for i in (np.flatnonzero(ts[1:] < ts[:-1]) + 1).tolist():
            # a time stamp or delta with a flipped bit moves the rest of its page: the stretch
            # is both pages' span, where the moved events are and where they belong
            both = (page == page[i - 1]) | (page == page[i])
            nxt = np.flatnonzero(page > page[i])
            hi = max(int(ts[both].max()), int(ts[nxt[0]]) if len(nxt) else 0)
            out.append({"from": int(ts[both].min()), "to": hi, "cpu": cpu,
                        "what": f"cpu {cpu}: time runs backwards from {ts[i - 1] / 1e9:.6f} s "
                                f"to {ts[i] / 1e9:.6f} s"})
        return out

    def _set_lost(self, lost):
        for ev in lost:
            ev["ts"] = int(self._convert_ts(np.array([ev["ts"]], dtype=np.uint64))[0])
        lost.sort(key=lambda ev: (ev["ts"], ev["cpu"]))
        self.info["lost_events"] = lost
        self.info["scanned"] = True
        self.info["lost_total"] = self._lost_total()

    def _lost_total(self):
        """Events lost by the ring buffer, when the trace says: the lost counters of the
        stored CPU stats (every CPU with data must have them), else, once the data was
        scanned, the counts of the lost-events markers (None if one has no count)."""
        stats = self.info["cpu_stats"]
        cpus = [cpu for cpu, _, size in self._buf.cpus if size]
        if cpus and all(any(k in stats.get(cpu, {}) for k in _LOST_STATS) for cpu in cpus):
            return sum(int(v) for st in stats.values() for k, v in st.items()
                       if k in _LOST_STATS and isinstance(v, int))
        if not self.info["scanned"]:
            return None
        counts = [ev["count"] for ev in self.info["lost_events"]]
        return sum(counts) if None not in counts else None

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
        try:
            cols, empty = self._read(events, on_damage, base, False)
        except TraceError as e:
            if e.partial is not None:
                e.partial = _frames(*e.partial, self._base)
            raise
        return _frames(cols, empty, self._base)

    def read_columns(self, events, on_damage="raise", base=BASE_COLUMNS):
        """:meth:`read` without pandas: ``{name: {column: array}}``, a string column as
        :class:`~nfsreaddir.trace.arrays._Strs` (codes and distinct values)."""
        try:
            cols, empty = self._read(events, on_damage, base, False)
        except TraceError as e:
            if e.partial is not None:
                e.partial = self._with_empty(*e.partial)
            raise
        return self._with_empty(cols, empty)

    def read_pieces(self, events, on_damage="raise", base=BASE_COLUMNS):
        """:meth:`read_columns` in the pieces decoded, neither joined nor sorted by time:
        ``{name: [{column: array}, ...]}``, a piece per CPU (or per block of pages where
        the compiled extract is not used), each in file order; in turn they hold the rows
        in CPU order, then file order (a stable sort by time gives read()'s order).  For a
        consumer that merges the rows by time itself (the slab analysis), without the
        copy of every column that joining them costs."""
        try:
            pieces, empty = self._read(events, on_damage, base, True)
        except TraceError as e:
            if e.partial is not None:
                e.partial = e.partial[0] | {k: [] for k in e.partial[1]}
            raise
        return pieces | {k: [] for k in empty}

    def _with_empty(self, cols, empty):
        for key, fields in empty.items():
            cols[key] = {c: (_Strs(np.zeros(0, np.int32), []) if c == "comm"
                             else np.zeros(0, np.int64)) for c in self._base} \
                | {field_column(f): np.zeros(0, object) for f in fields}
        return cols

    def _damaged_from(self, acc, stopped, damage):
        """The time (ns) from which events may be missing: the last event read on a CPU whose
        stream is damaged (a stream stops at its damage; the other CPUs' go on); -1, from the
        start, for damage that is not one CPU's stream or a CPU with nothing read before it.
        Only the requested events are seen, so the time is a lower bound: never too late."""
        if len(stopped) != len(damage):
            return -1
        last = []
        for cpu in stopped:
            seen = [int(ts.max()) for cols in acc.values()
                    for ts, (c, n) in zip(cols["ts"], cols["cpu"]) if c == cpu and n]
            if not seen:
                return -1
            last.append(max(seen))
        return int(self._convert_ts(np.array([min(last)], dtype=np.uint64))[0])

    def _read(self, events, on_damage, base, pieces):
        """(columns per requested name, or their pieces, {name: fields} of the names with no
        format)."""
        if isinstance(events, (list, tuple, set)):
            events = {e: None for e in events}
        bad = set(base) - set(BASE_COLUMNS)
        if bad:
            raise ValueError(f"base columns are {BASE_COLUMNS}, not {sorted(bad)}")
        self._base = tuple(c for c in BASE_COLUMNS if c in base or c == "ts")
        self._want_pid = "pid" in self._base or "comm" in self._base
        want = {}          # id -> (key, fmt, [Field])
        empty = {}
        for key, fields in events.items():
            if isinstance(fields, str):
                fields = [fields]
            fmt = self._lookup(key)
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
                        f"{', '.join(fmt.fields)}")
                flist.append(fmt.fields[fn])
            if fmt.id in want:
                # same event under two keys: union of fields, split at the end
                prev = want[fmt.id]
                names = [f.name for f in prev[2]]
                prev[2].extend(f for f in flist if f.name not in names)
                prev[3].append((key, list(fields)))
            else:
                want[fmt.id] = [key, fmt, flist, [(key, list(fields))]]
        acc = {eid: {"ts": [], "cpu": [], "pid": [], **{"f:" + f.name: [] for f in w[2]}}
               for eid, w in want.items()}
        lost = []
        damage = []
        stopped = set()           # CPUs whose stream is damaged: nothing after the damage
        with tuning.reading(self._size > _RELEASE_ABOVE) as memory:
            try:
                self._scan(want, acc, lost, damage, stopped)
            except MemoryError:
                raise TraceError(f"{self.path}: out of memory while decoding; ask for fewer "
                                 "events or fields") from None
            except (IndexError, ValueError, OverflowError) as e:
                # a damage pattern the checks above did not catch: still a TraceError
                damage.append(f"undecodable ring-buffer data ({type(e).__name__}: {e})")
            if damage:
                self.info["partial_from"] = self._damaged_from(acc, stopped, damage)
            with memory.building():
                frames = self._pieces(want, acc) if pieces else self._build(want, acc)
        if not damage:
            damage.extend(self._other_damage)
        self._set_lost(lost)
        if damage:
            self.info["partial"] = True
            self.info["damage"] = list(self.info["damage"]) + damage
            if on_damage != "partial":
                raise TraceError(
                    f"{self.path}: the trace data is damaged; decoded only the events before "
                    f"the damage ({'; '.join(damage[:4])}{' ...' if len(damage) > 4 else ''}). "
                    "Use the events in .partial with care, or re-copy/re-record the trace",
                    partial=(frames, empty))
        return frames, empty


def _frames(cols, empty, base):
    """DataFrames of :meth:`TraceDat.read` from the columns (pandas is imported here only:
    read_columns() does without it)."""
    import pandas as pd

    from .arrays import _series
    frames = {k: pd.DataFrame({c: _series(v) for c, v in d.items()}, copy=False)
              for k, d in cols.items()}
    for key, fields in empty.items():
        frames[key] = pd.DataFrame({c: pd.Series(dtype=np.int64 if c != "comm" else "str")
                                    for c in base}
                                   | {field_column(f): pd.Series(dtype=object)
                                      for f in fields})
    return frames

