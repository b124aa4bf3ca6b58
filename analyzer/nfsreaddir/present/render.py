"""The analyses as text: the readdir listings (the table, the notes on what a trace lacks or
lost, then each listing's restarts and invalidations (listingevents): `nfs-readdir analyze`,
`watch`'s summary), a dcache run's report, and a trace's slab section."""

import os
import sys
from collections import Counter

from .. import events
from ..recordtype import field, record
from ..units import NS
from . import fleet, listingevents, roundtrips
from .glossary import TIME_SPANS
from .jsonout import Stream
from .table import Table

# pandas (0.5 s to import) and the dcache judgement are imported by the functions that use
# them: the slab section of a kmem trace is written without either.


def _fmt_dentries(d):
    x = d.get("nr_dentry")
    return f"{x['added']:+,}" if x else "-"


def _q(v):
    """A value for the text tables: '?' where the trace cannot know it."""
    return "?" if v is None else v


def _range(s, key):
    """A count the trace knows, or the bounds it allows ('0-23'), or '?'."""
    lo, hi = s.get(f"{key}_min"), s.get(f"{key}_max")
    if s[key] is not None or lo is None or hi is None:
        return _q(s[key])
    return f"{lo}-{hi}" if hi != lo else lo


# A process with more quiet listings than this (a tree walk, a poller) gets one row for them.
QUIET_ROWS = 3


def _quiet(lst):
    """A listing with nothing to tell: it reached the end with no restart, no change of its
    directory, and nothing unknown."""
    return (
        lst.complete
        and not lst.restarts
        and not lst.invalidations
        and not lst.ambiguous_rows
        and not lst.damage
        and lst.cookies_known
        and lst.invalidations_known
    )


TABLE_COLUMNS = (
    "trace",
    "phase",
    "dir",
    "process",
    "time (s)",
    "ended",
    "entries",
    "READDIRs",
    "restarts",
    "refetched",
    "invalidations",
    "dentries",
)


def _row(trace, lst):
    """A listing's row of the table."""
    s = lst.summary()
    inv = s["invalidations"]
    followed = _range(s, "invalidations_followed_by_restart")
    return (
        trace,
        s["phase"] or "-",
        s["dir_fileid"] if s["dir_fileid"] is not None else "?",
        # A capture's listing has a client, not a process.
        s.get("who") or f"{s['comm']}[{s['pid']}]",
        f"{s['seconds']:.2f}",
        s["ending"] + ("" if not s["began_before_trace"] else " (began before)"),
        s["entries"] if s["entries"] is not None else "-",
        s["readdirs"],
        _range(s, "restarts"),
        _range(s, "refetched_readdirs"),
        f"{inv} ({followed} restarted)" if inv and followed != "?" else _q(inv),
        _fmt_dentries(s["dentries"]),
    )


class _Quiet:
    """A process's quiet listings: their rows while they are few enough to show, and what their
    one row says once they are more."""

    def __init__(self):
        self.count = self.ns = self.readdirs = 0
        self.rows: list = []  # (position, row) while count <= QUIET_ROWS
        self.known: set = set()  # their directories' inode numbers
        self.unknown = False  # one of them sent no READDIR to name its directory

    def add(self, lst, position, trace):
        self.count += 1
        # (a row only while it may be shown: a tree walk has thousands of quiet listings)
        self.rows = [*self.rows, (position, _row(trace, lst))] if self.count <= QUIET_ROWS else []
        self.ns += lst.end - lst.start
        self.readdirs += len(lst.rpcs)
        if lst.fileid is None:
            self.unknown = True
        else:
            self.known.add(lst.fileid)

    def row(self, trace, who):
        known = self.known
        dirs = f"{len(known)}{'+' if self.unknown else ''} dirs" if known else "?"
        return (
            trace,
            "-",
            dirs,
            who,
            f"{self.ns / NS:.2f}",
            f"eof x{self.count}",
            "-",
            self.readdirs,
            0,
            0,
            0,
            "-",
        )


@record
class _Seen:
    """What the text says of an analysis' listings besides their rows."""

    delimited: set = field(default_factory=set)  # what delimits them
    lost: list = field(default_factory=list)  # labels of those that overlap lost events
    events: list = field(default_factory=list)  # numbers of those with events to tell


def _go_through(a, table, position):
    """One pass over the listings of analysis a (a capture's are read back from disk one at a
    time): their rows into the table from `position` on, a process's quiet listings past
    QUIET_ROWS in one row after the others, and what else the text says of them. Returns
    (_Seen, the position after its rows)."""
    trace = os.path.basename(a.info.get("path", ""))
    seen = _Seen()
    quiet: dict[tuple, _Quiet] = {}
    for n, lst in enumerate(a.listings):
        seen.delimited.add(lst.delimited_by)
        if any("lost" in d["what"] for d in lst.damage):
            seen.lost.append(lst.label())
        if lst.restarts or lst.invalidations or lst.ambiguous_rows:
            seen.events.append(n)
        if _quiet(lst):
            quiet.setdefault((lst.pid, lst.comm), _Quiet()).add(lst, position, trace)
        else:
            table.add(position, _row(trace, lst))
        position += 1
    for (pid, comm), group in quiet.items():
        if group.count <= QUIET_ROWS:
            for at, row in group.rows:
                table.add(at, row)
        else:
            table.add(position, group.row(trace, f"{comm}[{pid}]"))
            position += 1
    return seen, position


def _tabled(analyses):
    """(the listing Table of the analyses, a _Seen of each)."""
    table, seen, position = Table(TABLE_COLUMNS), [], 0
    for a in analyses:
        s, position = _go_through(a, table, position)
        seen.append(s)
    return table, seen


def listing_table(analyses):
    """The listing table of the analyses, a present.table.Table."""
    return _tabled(analyses)[0]


def lost_text(info):
    """The events a trace lost, in words: the count where the trace stores it."""
    lost = info.get("lost_events") or []
    total = info.get("lost_total")
    if not lost:
        return (
            f"{total:,} events lost (the trace's CPU stats; where is not known)" if total else None
        )
    if total is None and all(x.get("count") is not None for x in lost):
        total = sum(x["count"] for x in lost)
    cpus = sorted({x.get("cpu") for x in lost if x.get("cpu") is not None})
    n = f"{total:,}" if total is not None else "an unknown number of"
    return f"{n} events lost in {len(lost)} places (CPU {', '.join(map(str, cpus)) or '?'})"


def analysis_record(analysis, verdict, **extra):
    """The JSON record of one analysis, as `analyze --json` and `watch --json` give it: its
    summary (then extra), each listing numbered as export's rows number it ((trace_id,
    listing)) and with the verdict's finding on it, a server's capture's triage, and the
    verdict on all the inputs. Its arrays of listings are jsonout.Streams: write it with
    jsonout.dump."""

    def each(n, lst):
        f = verdict.finding(lst)
        return {"finding": f.word, "why": f.why, "listing": n, **roundtrips.record(analysis, n)}

    d = dict(analysis.to_dict(each, array=Stream), **extra)
    triage = fleet.to_dict(analysis)  # a server's capture, client by client
    if triage is not None:
        d["triage"] = triage
    d["verdict"] = verdict.to_dict()
    return d


def slab_record(loaded):
    """The JSON record of a trace of kmem events alone (a pipeline.Loaded): no listing, its
    slab summary, named and identified as a readdir record's trace is."""
    return {"path": loaded.path, "trace_id": loaded.trace_id, "slab": loaded.slab}


def dcache_record(path, trace_id, results):
    """The JSON record of a dcache run: the run's directory, its trace's id, its results."""
    return {"path": path, "trace_id": trace_id, "dcache": results}


def print_analysis(analyses, out=None, details=10):
    """The text of analyze, on out (default: sys.stdout as it is when called)."""
    out = sys.stdout if out is None else out
    table, seen = _tabled(analyses)
    for a, s in zip(analyses, seen):
        _write_input(a, s, out)
    if table.rows:
        out.write("\n")
        table.write(out)
    else:
        out.write("\nno listing\n")
    spans = sorted(set().union(*(s.delimited for s in seen)))
    if spans:  # a listing's time is not the same span for every input: say which it is
        out.write(
            "time (s): "
            + "; ".join(f"{TIME_SPANS[k]} ({k})" for k in spans if k in TIME_SPANS)
            + "\n"
        )
    for a, s in zip(analyses, seen):
        listingevents.write(a, s.events, details, out)
    out.write(roundtrips.text(analyses, details))  # where the listings' time went
    # A server's capture: its clients ranked by what their restarts cost.
    out.write(fleet.text(analyses))


def _write_input(a, seen, out):
    """One input's lines above the table: where its READDIRs, invalidations and listings
    come from, what it lacks and how to record it, and what was lost or damaged (seen: what
    its listings showed, a _Seen)."""
    i = a.info
    kernel = a.kernel or "unknown kernel"
    out.write(f"{i.get('path')}: {i.get('format', '?')}, {i.get('cpus', '?')} CPUs, {kernel}\n")
    ev = a.evidence
    dirs = (
        f" (directories from {', '.join(ev['rpc_directory'])})" if ev.get("rpc_directory") else ""
    )
    # A capture has, in place of invalidations, their cause: the directory's version.
    changes = f"; directory changes from {', '.join(ev['version'])}" if ev.get("version") else ""
    out.write(
        f"  READDIRs from {', '.join(ev['rpc']) or '-'}{dirs}; invalidations from "
        f"{', '.join(a.recorded.get('invalidations') or []) or '-'}{changes}; "
        f"listings by {', '.join(sorted(seen.delimited)) or '-'}"
        "\n"
    )
    missing = set()
    if not a.cookies_known:
        out.write("  READDIR cookies are not in this trace, so restarts cannot be seen\n")
        missing.add("rpc")
    if ev.get("version") and not a.recorded.get("invalidations"):
        out.write(
            "  the wire carries no invalidation, only its cause, so they are counted "
            "as unknown (trace the client to count them)\n"
        )
    elif not a.recorded.get("invalidations"):
        out.write("  invalidation events were not recorded\n")
        missing.add("invalidations")
    if missing:
        out.write(f"  record with: {events.record_advice(a.kernel, missing)}\n")
    for note in i.get("notes") or []:  # what a capture says about its own limits
        out.write(f"  {note}\n")
    lost = lost_text(i)
    if lost:
        out.write(
            f"  WARNING: {lost}: counts below are lower bounds (record with a larger "
            f"-b); listings that overlap the loss: {_labels(seen.lost) or 'none'}\n"
        )
    damaged = i.get("damaged_events") or []
    if damaged:
        out.write(f"  WARNING: {len(damaged)} damaged events, e.g. {damaged[0]['what']}\n")
    if i.get("partial"):
        out.write("  WARNING: the trace is damaged; only the part before the damage was read\n")


def _labels(labels):
    """Listings' labels, each once: '3 listings of dir 12 by ls[343]' for three alike."""
    counts = Counter(labels)
    return ", ".join(
        label if n == 1 else f"{n} {label.replace('listing', 'listings', 1)}"
        for label, n in counts.items()
    )


def dcache_report(r):
    """A dcache run's results (as pipeline.dcache_results gives them) as text: the verdict, the
    figures, and the per-phase changes of the dcache."""
    import pandas as pd

    lines = [
        f"{r.get('name')} on {r.get('kernel')}: {r.get('verdict')}: "
        + "; ".join(r.get("reasons", []))
    ]
    rows = []
    phases = r.get("phases", {})
    for name in r.get("phase_order") or list(phases):
        p = phases[name]
        d, rate = p.get("delta", {}), p.get("rate_per_s", {})
        rows.append(
            {
                "phase": name,
                "seconds": p.get("seconds"),
                "nr_dentry": d.get("nr_dentry"),
                "nr_negative": d.get("nr_negative"),
                "dentry slab bytes": d.get("slab_bytes"),
                "negative/s": rate.get("nr_negative"),
                "negative share": p.get("negative_share"),
                "events": ", ".join(f"{k} {v}" for k, v in p.get("events", {}).items()),
            }
        )
    if rows:
        df = pd.DataFrame(rows)
        # a column with no figure in any phase is None throughout: numbers, so it shows "-"
        num = df.columns.difference(["phase", "events"])
        df[num] = df[num].apply(pd.to_numeric)
        lines += ["", "change over each phase:", df.to_string(index=False, na_rep="-")]
    lk = r.get("lookup", {})
    if lk:
        rows = []
        for target, t in lk.items():
            loops = t.get("loops", {})
            rows.append(
                {
                    "target": target,
                    **{
                        f"{loop} median ns": (loops.get(loop) or {}).get("median_ns")
                        for loop in ("before", "after", "dropped")
                    },
                    "slowdown": t.get("slowdown"),
                    "walk slowdown": t.get("walk_slowdown"),
                }
            )
        lines += [
            "",
            "lookup loops (walk slowdown: against an fstat of the same file timed alongside):",
            pd.DataFrame(rows).to_string(index=False, na_rep="-"),
        ]
    rows = [
        {"target": target, **c} for target, t in r.get("cycles", {}).items() for c in t["cycles"]
    ]
    if rows:
        lines += [
            "",
            "paired cycles (each polluted block against the mean of its two clean "
            "neighbours; ref: fstat() timed inside the blocks):",
            pd.DataFrame(rows).to_string(index=False, na_rep="-"),
        ]
    fig = r.get("figures", {})
    if fig:
        width = max(len(k) for k in fig)
        # (a figure the run could not measure: "-", as in the tables above)
        lines += ["", "figures:"] + [
            f"  {k:<{width}}  {'-' if v is None else v}" for k, v in fig.items()
        ]
    return "\n".join(lines) + "\n"


def _mb(b):
    """Signed size with a unit: +1.5M, +17.1K, +96B."""
    if abs(b) >= 2**20 / 10:
        return f"{b / 2**20:+.1f}M"
    return f"{b / 1024:+.1f}K" if abs(b) >= 1024 else f"{b:+d}B"


def slab_text(summary, top=10):
    """The slab section of ``nfs-readdir analyze``: the ``top`` caches by net growth."""
    if not summary:
        return "slab: no kmem allocation/free events in this trace\n"
    s = summary
    ev = ", ".join(f"{k.split(':', 1)[1]} {v:,}" for k, v in s["events"].items())
    by = (
        "caches by name"
        if s["by"] == "name"
        else "caches by object size (the kernel records no cache name)"
    )
    L = [f"slab growth over {s['seconds']:.2f}s ({ev}; {by}):"]
    hdr = (
        f"  {'cache':<26} {'size':>6} {'allocs':>10} {'frees':>10} {'net':>9} "
        f"{'net size':>8} {'live':>9} {'peak live':>9} {'growth/s':>9}"
    )
    L.append(hdr)
    rows = s["caches"]
    for r in rows[:top]:
        L.append(
            f"  {r['cache'][:26]:<26} {r['object_size']:>6} {r['allocs']:>10,} "
            f"{r['frees']:>10,} {r['net']:>+9,} {_mb(r['net_bytes']):>8} "
            f"{r['live']:>9,} {r['peak_live']:>9,} "
            f"{(r['growth_per_s'] if r['growth_per_s'] is not None else 0):>+9.1f}"
        )
    if len(rows) > top:
        L.append(f"  ... {len(rows) - top} more caches (--json for all)")
    t = s["total"]
    L.append(
        f"  {'all caches':<26} {'':>6} {t['allocs']:>10,} {t['frees']:>10,} "
        f"{t['net']:>+9,} {_mb(t['net_bytes']):>8} {t['live']:>9,}"
    )
    d = s["dentry"]
    if d:
        L.append(
            f"  dentry cache ({d['identified_by']}): {d['net']:+,} objects "
            f"({_mb(d['net_bytes'])}), {d['live']:,} of the {d['allocs']:,} allocated "
            f"in the trace still live at the end, peak {d['peak_live']:,}"
            + (f" at {d['peak_live_s']:.2f}s" if d["peak_live_s"] is not None else "")
            + (f", {d['growth_per_s']:+.1f}/s" if d["growth_per_s"] is not None else "")
        )
    else:
        L.append("  dentry cache: not in this trace")
    for n in s["notes"]:
        L.append(f"  note: {n}")
    return "\n".join(L) + "\n"
