"""Parser for the text of ``trace-cmd report`` and ``trace-cmd report -R``.

Event lines look like::

    [instance:] comm-pid [cpu] [flags] secs.frac: [(+delta)] event_name: payload

(``--ts-diff`` adds the ``(+delta)``, ns since the previous event: the time is the event's own;
trace-cmd 3.3's ``-R`` prints the flags as ``[cpu]-0x0``.)  The events come in the order of
their nanoseconds (ties: the lower CPU first, and on one CPU as its buffer holds them), which
ties of the microseconds printed keep (textcolumns.event_frame).

A line cut short (at a column, by an editor or a mail) or garbled is damage where its fields
are read, never a value taken for another (textcolumns.cut_short).

With ``-R`` the payload is ``field=value`` pairs with the exact field names.
Without ``-R`` it is the event's print format; ``key=value`` tokens are taken
and the compound forms printed by the NFS and SUNRPC events are normalised so
that, where possible, the same field names come out as with ``-R``:

* ``fileid=MAJ:MIN:INO`` (hex major/minor) -> ``dev`` (kernel dev_t,
  ``MAJ << 20 | MIN``) and ``fileid``; ``dev=MAJ:MIN`` -> ``dev``;
* ``a:b=x:y`` -> ``a=x`` and ``b=y`` (e.g. ``cookie:verifier=``);
* ``key=A->B`` (a change, e.g. ``nrpages=3->0``) -> ``key_before=A`` and ``key=B``;
* ``cookie=VERIFIERHEX:0xCOOKIE`` (6.x readdir events) -> ``verifier`` (the hex
  text) and ``cookie``;
* ``task:ID@CLIENT`` (decimal, or 8-digit hex as in newer kernels) ->
  ``task_id`` and ``client_id``; ``rpc_request``'s ``nfsv4 READDIR (async)``
  -> ``progname``, ``version``, ``procname``, ``async`` (and ``rpc_stats_latency``'s
  ``xid=0x2225ae4e nfsv4 OPEN`` -> ``xid``, ``progname``, ``version``, ``procname``);
* a kprobe's leading ``(ffffffffc07f2bf0)`` -> ``__probe_ip``;
* ``nfs_flags`` -> ``nfsi_flags``;
* ``error=-5 (EIO)`` -> ``error=5`` (NFS events store the error positive and print
  it negated with its name); quoted strings are unquoted;
* ftrace ``print`` (``tracing_mark_write: text``) -> ``buf``;
* ``cache_index`` -> ``index`` (nfs readdir events).

Integers are decimal, ``0x`` hex, or (a whole column of) bare hex digits that
contain a-f or a leading zero, as ``-R`` prints fields whose print format uses
``%x`` (textcolumns types the columns).  Timestamps with 6 or 9 decimals are converted to ns.
"""

from __future__ import annotations

import re

import pandas as pd

from .base import (
    BASE_COLUMNS,
    TraceError,
    bare_name,
    columns_of,
    field_column,
    new_info,
    one_piece,
)
from .format import EventFormat, Field
from .payload import normalised
from .textcolumns import cut_short, event_frame, typed_column

_EVENT_RE = re.compile(
    r"^\s*(?:(?P<inst>[^\s:\[\]]+):\s+)?(?P<comm>.*?)-(?P<pid>-?\d+)\s+"
    r"(?:\(\s*(?P<tgid>-?[\d-]+)\)\s+)?\[(?P<cpu>\d+)\](?:-0x[0-9a-fA-F]+)?\s+(?:(?P<flags>\S+)\s+)?"
    r"(?P<sec>\d+)\.(?P<frac>\d+):\s+(?:\(\+\d+\)\s+)?(?P<event>[^\s:]+):"
    r"(?:\s+(?P<payload>.*))?$"
)
_LOST_RE = re.compile(
    r"^\s*(?:(?P<inst>[^\s:\[\]]+):\s+)?CPU:\s*(?P<cpu>\d+)\s+\["
    r"(?:(?:(?P<n>\d+)\s+)?EVENTS DROPPED|LOST(?:\s+(?P<n2>\d+))?\s+EVENTS)\]"
)


# event name prefix -> system, to give "system:name" for text input
_SYSTEMS = [
    ("nfs4_", "nfs4"),
    ("nfs_", "nfs"),
    ("nfsd_", "nfsd"),
    ("rpc_", "sunrpc"),
    ("rpcb_", "sunrpc"),
    ("xprt_", "sunrpc"),
    ("xs_", "sunrpc"),
    ("svc_", "sunrpc"),
    ("rpcgss_", "rpcgss"),
    ("kmem_", "kmem"),
    ("kmalloc", "kmem"),
    ("kfree", "kmem"),
    ("mm_page_", "kmem"),
    ("sched_", "sched"),
    ("sys_enter", "raw_syscalls"),
    ("sys_exit", "raw_syscalls"),
]
_FTRACE = {"print", "bprint", "bputs", "function", "funcgraph_entry", "funcgraph_exit"}


# The line `trace-cmd report` begins a trace's text with: after events, a second trace.
_SECOND_HEADER_RE = re.compile(r"^\s*cpus=\d+\s*$")


def _system_of(name):
    if name in _FTRACE:
        return "ftrace"
    for pre, sysname in _SYSTEMS:
        if name.startswith(pre):
            return sysname
    return None


def looks_like_report(head):
    """True if the first bytes look like trace-cmd report output."""
    try:
        text = head.decode("utf-8", "replace")
    except Exception:
        return False
    if "\0" in text:
        return False
    lines = text.splitlines()[:60]
    if len(text) >= 4096 and lines:
        lines = lines[:-1]  # last line may be cut
    for ln in lines:
        if _EVENT_RE.match(ln):
            return True
    # header only (no events yet): "version = 7", "cpus=2", "CPU 0 is empty"
    hdr = [ln for ln in lines if ln.strip()]
    return bool(hdr) and all(
        re.match(
            r"^(version = \d+|cpus=\d+|CPU \d+ is empty|"
            r"CPU:\s*\d+ \[)",
            ln.strip(),
        )
        for ln in hdr
    )


def _ts_ns(sec, frac):
    if len(frac) >= 9:
        return int(sec) * 1_000_000_000 + int(frac[:9])
    return int(sec) * 1_000_000_000 + int(frac) * 10 ** (9 - len(frac))


class ReportText:
    """``trace-cmd report [-R]`` output.  Use :func:`nfsreaddir.trace.open_trace`."""

    def __init__(self, path, instance=None):
        self.path = path
        self.instance = instance
        self._names = None
        self.info = new_info("report text", path, instance, file_version=None)
        self._read_header()

    def _lines(self):
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                yield from f
        except OSError as e:
            raise TraceError(f"cannot read {self.path!r}: {e}") from None

    def _read_header(self):
        raw_votes = fmt_votes = 0
        seen_event = False
        for n, line in enumerate(self._lines()):
            if n > 2000:
                break
            s = line.rstrip("\n")
            m = _EVENT_RE.match(s)
            if m:
                seen_event = True
                payload = (m.group("payload") or "").strip()
                if re.match(r"^[A-Za-z_]\w*=", payload):
                    raw_votes += 1
                elif payload:
                    fmt_votes += 1
                continue
            if not seen_event:
                mm = re.match(r"^\s*version\s*=\s*(\d+)", s)
                if mm:
                    self.info["file_version"] = int(mm.group(1))
                mm = re.match(r"^\s*cpus=(\d+)", s)
                if mm:
                    self.info["cpus"] = int(mm.group(1))
        if not seen_event and self.info["cpus"] is None:
            raise TraceError(
                f"{self.path}: not trace-cmd report output (no header and no "
                "event lines 'comm-pid [cpu] ts: event: ...')"
            )
        self.raw = raw_votes > 0 and fmt_votes == 0
        self.info["format"] = "report text -R" if self.raw else "report text"

    def _qualify(self, name):
        sysname = _system_of(name)
        return f"{sysname}:{name}" if sysname else name

    def event_names(self):
        """Event names seen (``system:name`` where the system is known, else ``name``)."""
        if self._names is None:
            self._names = set(self.event_counts())
        return set(self._names)

    def _index(self):
        """One pass: line counts and the field names seen (first lines) per event."""
        if getattr(self, "_idx", None) is None:
            counts: dict[str, int] = {}
            fields: dict[str, dict] = {}
            for inst, m in self._event_matches():
                if not self._inst_ok(inst):
                    continue
                name = m.group("event")
                n = counts.get(name, 0)
                counts[name] = n + 1
                if n < 20:
                    seen = fields.setdefault(name, {})
                    for k, v in self._fields(name, m.group("payload") or "").items():
                        seen.setdefault(k, []).append(v)
            self._idx = (counts, fields)
        return self._idx

    def event_counts(self):
        """{"system:name" (or "name"): number of lines} of the events in the text."""
        counts, _ = self._index()
        return {self._qualify(k): v for k, v in counts.items()}

    def event_format(self, name):
        """The fields seen for event ``name`` (a stand-in for the binary format:
        ``.fields``, ``.user_fields()``, ``.full_name``), or None if not seen."""
        bare = bare_name(name)
        _, fields = self._index()
        if bare not in fields:
            return None
        flds = {}
        for k, vals in fields[bare].items():
            col = typed_column(vals, k)
            kind = "int" if pd.api.types.is_integer_dtype(col.dtype) else "str"
            flds[k] = Field(k, "text", 0, 8 if kind == "int" else 0, True, kind, None)
        system = _system_of(bare) or (name.split(":", 1)[0] if ":" in name else "")
        return EventFormat(system, bare, None, flds, "")

    def _event_matches(self):
        """(instance, match) of every event line (see the dropped-events rule in read)."""
        pending = None
        seen = False
        for n, line in enumerate(self._lines(), 1):
            s = line.rstrip("\n")
            m = _EVENT_RE.match(s)
            if not m:
                lm = _LOST_RE.match(s)
                if lm:
                    pending = lm.group("inst") or ""
                elif seen and _SECOND_HEADER_RE.match(s):
                    # Read on, the second trace's events would join the first's in silence.
                    raise TraceError(
                        f"{self.path}: line {n}: a second trace's header ({s.strip()!r}) after "
                        "events: the report text of two traces joined? Give each trace's text "
                        "on its own"
                    )
                continue
            seen = True
            inst = m.group("inst")
            if pending is not None:
                inst = inst or pending
                pending = None
            yield inst, m

    def _inst_ok(self, inst):
        return (inst or "") == (self.instance or "")

    def check_records(self):
        """The trace.dat reader's check of every record: here :meth:`read` finds the damaged
        lines (``info["damaged_events"]``) as it parses them."""
        return []

    def read_columns(self, events, on_damage="raise", base=BASE_COLUMNS):
        """{name: {column: Series}} of :meth:`read` (the trace.dat reader's interface)."""
        return columns_of(self.read(events, on_damage=on_damage, base=base))

    def read_pieces(self, events, on_damage="raise", base=BASE_COLUMNS):
        """:meth:`read_columns`, each event's rows as one piece (in time order)."""
        return one_piece(self.read_columns(events, on_damage=on_damage, base=base))

    def read(self, events, on_damage="raise", typed=True, base=BASE_COLUMNS):
        """Parse the requested events; same contract as ``TraceDat.read``.

        Event keys are matched on the part after the last ``:`` (the text has
        no system names).  ``None`` as the field list means every field seen.
        ``typed=False`` leaves every field as the (normalised) text.
        """
        base = [c for c in BASE_COLUMNS if c in base or c == "ts"]
        bykey = _requests(events)
        scan = _LineScan(self, bykey)
        for line in self._lines():
            scan.line(line.rstrip("\n"))
        if scan.nevents == 0 and self.info["cpus"] is None:
            raise TraceError(f"{self.path}: no trace-cmd report event lines found")
        damaged = scan.closed_damage()
        self.info["lost_events"] = scan.lost
        # (as the trace.dat reader counts them where the trace has no CPU stats)
        counts = [x["count"] for x in scan.lost]
        self.info["lost_total"] = sum(counts) if None not in counts else None
        self.info["instances"] = sorted(scan.insts)
        self.info["scanned"] = True
        frames = {}
        for name, keys in bykey.items():
            r = scan.rows[name]
            cut = cut_short(r) if name != "print" else {}
            seen = list(dict.fromkeys(k for d in r["f"] for k in d))
            for key, fields in keys:
                flist = seen if fields is None else fields
                missing = [f for f in flist if f not in seen]
                if missing and r["ts"]:
                    raise TraceError(
                        f"event {name} has no field {missing[0]!r} in {self.path}; the fields "
                        f"seen are: {', '.join(seen) or '(none)'}"
                    )
                df = event_frame(name, r, flist, typed, damaged, cut)
                frames[key] = df[base + [field_column(f) for f in flist]]
        self.info["damaged_events"] = sorted(damaged, key=lambda d: d["line"])
        return frames

    def _fields(self, name, payload):
        payload = payload.strip()
        if name == "print":
            if payload.startswith("ip="):
                i = payload.find(" buf=")
                if payload.startswith("ip=") and i >= 0:
                    return {"ip": payload[3:i], "buf": payload[i + 5 :]}
            ip, sep, rest = payload.partition(": ")
            if sep:
                return {"ip": ip, "buf": rest}
            return {"buf": payload}
        # the compound forms never occur in -R output, so normalise in both modes
        # (the mode guess from the first lines can be wrong for key=value formats)
        return normalised(name, payload)


def _requests(events):
    """{event name as the text prints it: [(key asked, fields or None), ...]} of read()'s
    ``events`` (a list of names, or a mapping of names to fields)."""
    if isinstance(events, (list, tuple, set)):
        events = {e: None for e in events}
    bykey: dict[str, list[tuple[str, list | None]]] = {}
    for key, fields in events.items():
        if isinstance(fields, str):
            fields = [fields]
        bykey.setdefault(bare_name(key), []).append((key, None if fields is None else list(fields)))
    return bykey


class _LineScan:
    """One pass of read() over the lines: the rows of the events asked for, the lost-events
    lines, the instances seen and the damaged lines (not an event line after the first event,
    a time before the line above)."""

    def __init__(self, reader, names):
        self.reader = reader
        self.rows: dict[str, dict[str, list]] = {
            name: {"ts": [], "cpu": [], "pid": [], "comm": [], "f": [], "line": [], "whole": []}
            for name in names
        }
        self.lost = []
        self.damaged = []
        self.insts = set()
        self.last_ts = None
        self.nlines = self.nevents = 0
        # trace-cmd prints "<instance>: " and then, when events were dropped,
        # "CPU:n [.. EVENTS DROPPED]" and a new line holding the event without
        # the prefix: that event belongs to the instance of the dropped line
        self.pending_inst = None

    def line(self, s):
        self.nlines += 1
        m = _EVENT_RE.match(s)
        if m:
            ts = _ts_ns(m.group("sec"), m.group("frac"))
            self._time_order(ts)
            self._event(m, ts)
        elif (
            self.nevents and s.strip() and not s.lstrip().startswith("=>") and not _LOST_RE.match(s)
        ):
            # After the first event every line is an event, a loss, or a stack line.
            self.damaged.append(
                {
                    "line": self.nlines,
                    "from": self.last_ts,
                    "to": None,
                    "pid": None,
                    "what": f"line {self.nlines} is not an event line: {s[:60]!r}",
                }
            )
        else:
            self._lost(s)

    def _time_order(self, ts):
        last = self.last_ts
        if last is not None and ts < last:
            # trace-cmd report prints events in time order: an edited or mixed line.
            self.damaged.append(
                {
                    "line": self.nlines,
                    "from": ts,
                    "to": last,
                    "pid": None,
                    "what": f"line {self.nlines}: its time {ts / 1e9:.6f} is "
                    f"before the line above ({last / 1e9:.6f})",
                }
            )
        if self.damaged and self.damaged[-1].get("to") is None:
            self.damaged[-1]["to"] = ts
        self.last_ts = ts if last is None else max(last, ts)

    def _lost(self, s):
        lm = _LOST_RE.match(s)
        if lm:
            self.pending_inst = lm.group("inst") or ""
            if self.reader._inst_ok(lm.group("inst")):
                n = lm.group("n") or lm.group("n2")
                # ts: that of the next event (the first after the loss)
                self.lost.append(
                    {"cpu": int(lm.group("cpu")), "ts": None, "count": int(n) if n else None}
                )

    def _event(self, m, ts):
        self.nevents += 1
        inst = m.group("inst")
        if self.pending_inst is not None:
            if not inst:
                inst = self.pending_inst
            self.pending_inst = None
        self.insts.add(inst or "")
        if not self.reader._inst_ok(inst):
            return
        if self.lost and self.lost[-1]["ts"] is None:
            self.lost[-1]["ts"] = ts
        name = m.group("event")
        r = self.rows.get(name)
        if r is None:
            return
        r["ts"].append(ts)
        r["cpu"].append(int(m.group("cpu")))
        r["pid"].append(int(m.group("pid")))
        r["comm"].append(m.group("comm").strip())
        payload = m.group("payload") or ""
        r["f"].append(self.reader._fields(name, payload))
        # whether the line's last value is whole even if the line was cut short: something
        # follows it, after a space ("0xa (INVALID_D", "5 page_in")
        r["whole"].append(" " in payload[payload.rfind("=") + 1 :].strip())
        r["line"].append(self.nlines)

    def closed_damage(self):
        """The damaged stretches, each with both ends (the trace's ends where open)."""
        for d in self.damaged:
            if d["from"] is None:
                d["from"] = d["to"] if d["to"] is not None else 0
            if d["to"] is None:
                d["to"] = 1 << 62
        return self.damaged
