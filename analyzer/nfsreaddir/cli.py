"""nfs-readdir: find NFS readdir cookie restarts, cache invalidations and dcache growth in traces.

Each TRACE is a trace.dat file, the text of `trace-cmd report` (default or -R), a packet capture
of the NFS traffic (pcap or pcapng, also gzip'd; decoded with tshark), or a results
directory of the project's reproducers: readdir-loopback (every *.dat in it) or a dcache-*
reproducer (its dcache section: per-phase dentry deltas, growth rates, negative share, lookup
slowdown and the reproducer's figures). A trace with kmem allocation events also gets a slab
section (growth per cache, the dentry cache singled out), and needs no READDIR in it.

exit status: 0 done (check: good), 1 check: bad, 2 the input could not be used (the message
says why and what to record), 3 internal error (a bug: please report it with the trace),
125 check: cannot decide (also on an internal error), 130 interrupted.
"""

import argparse
import glob
import json
import os
import sys

from . import __version__, capture, dcache, events, results, slab, verdict, wire
from .analysis import NS, AnalysisError, analyze
from .export import ExportError
from .trace import OnePass, TraceError, open_trace
from .tracing import Refused

EXIT_INPUT = 2
EXIT_BUG = 3
EXIT_SKIP = 125


class UsageError(Exception):
    pass


def expand(paths):
    """Trace files named by the arguments; a results directory stands for its traces."""
    out = []
    for p in paths:
        if p == "-":                    # standard input: a trace or report text, read once
            out.append(p)
        elif os.path.isdir(p):
            found = sorted(glob.glob(os.path.join(p, "*.dat")))
            if not found:
                raise UsageError(f"{p} is a directory with no *.dat trace in it")
            out.extend(found)
        elif not os.path.exists(p):
            raise UsageError(f"{p}: no such file")
        else:
            out.append(p)
    return out


def load_all(paths, with_slab=False):
    """The readdir analysis of each trace; with_slab: (path, analysis, slab summary) triples,
    where a trace with kmem allocation events but no READDIR has no analysis (None)."""
    res = []
    paths = expand(paths)
    big = sum(os.path.getsize(p) for p in paths if p != "-" and os.path.isfile(p)) > PROGRESS_BYTES
    for n, path in enumerate(paths, 1):
        if len(paths) > 1 or big:
            progress(f"reading {n}/{len(paths)}: {path}")
        if capture.is_capture(path):    # a packet capture: its own reader, the same listings
            a = wire.analyze(path)
            res.append((path, a, None) if with_slab else a)
            continue
        t = open_trace(path)
        kmem = slab.read_request(t) if with_slab else {}
        readdir = events.has_readdir_source(t)
        if kmem and readdir:        # both analyses from one pass over the file
            want = events.wanted(t)
            for ev, cols in kmem.items():
                want.setdefault(ev, set()).update(cols)
            t = OnePass(t, want)
        summary = slab.summarize(t) if kmem else None
        a = None
        if readdir or summary is None:      # (without a source: the "no READDIR" error)
            try:
                a = analyze(t)
                a.info = dict(a.info, path=path)
            except AnalysisError as e:
                if summary is None:
                    raise AnalysisError(f"{path}: {e}") from None
        res.append((path, a, summary) if with_slab else a)
    progress(None)
    return res


# Above this many bytes of traces, or for several traces, say what is being read.
PROGRESS_BYTES = 1 << 30


def progress(what):
    """A progress line rewritten in place on a terminal (never in a pipe or in JSON);
    None clears it."""
    if not sys.stderr.isatty():
        return
    sys.stderr.write("\r\033[K" + (f"nfs-readdir: {what}" if what else ""))
    sys.stderr.flush()


def _fmt_dentries(d):
    x = d.get("nr_dentry")
    return f"{x['added']:+,}" if x else "-"


def _q(v):
    """A value for the text tables: '?' where the trace cannot know it."""
    return "?" if v is None else v


# A process with more quiet listings than this (a tree walk, a poller) gets one row for them.
QUIET_ROWS = 3


def _quiet(lst):
    """A listing with nothing to tell: it reached the end with no restart, no change of its
    directory, and nothing unknown."""
    return (lst.complete and not lst.restarts and not lst.invalidations
            and not lst.ambiguous_rows and not lst.damage and lst.cookies_known)


def listing_table(analyses):
    import pandas as pd
    rows = []
    for a in analyses:
        trace = os.path.basename(a.info.get("path", ""))
        quiet = {}
        for lst in a.listings:
            if _quiet(lst):
                quiet.setdefault((lst.pid, lst.comm), []).append(lst)
        folded = {id(x) for group in quiet.values() if len(group) > QUIET_ROWS for x in group}
        for lst in a.listings:
            if id(lst) in folded:
                continue
            s = lst.summary()
            inv = s["invalidations"]
            followed = s["invalidations_followed_by_restart"]
            rows.append({
                "trace": trace,
                "phase": s["phase"] or "-",
                "dir": s["dir_fileid"] if s["dir_fileid"] is not None else "?",
                # A capture's listing has a client, not a process.
                "process": s.get("who") or f"{s['comm']}[{s['pid']}]",
                "time (s)": f"{s['seconds']:.2f}",
                "ended": s["ending"] + ("" if not s["began_before_trace"] else " (began before)"),
                "entries": s["entries"] if s["entries"] is not None else "-",
                "READDIRs": s["readdirs"],
                "restarts": _q(s["restarts"]),
                "refetched": _q(s["refetched_readdirs"]),
                "invalidations": (f"{inv} ({followed} restarted)" if inv and followed is not None
                                  else inv),
                "dentries": _fmt_dentries(s["dentries"]),
            })
        for (pid, comm), group in quiet.items():
            if len(group) <= QUIET_ROWS:
                continue
            # A listing the page cache served whole sent no READDIR to name its directory.
            known = {x.fileid for x in group if x.fileid is not None}
            dirs = (f"{len(known)} dirs" if len(known) == len({x.fileid for x in group})
                    else f"{len(known)}+ dirs" if known else "?")
            rows.append({
                "trace": trace, "phase": "-",
                "dir": dirs,
                "process": f"{comm}[{pid}]",
                "time (s)": f"{sum(x.end - x.start for x in group) / NS:.2f}",
                "ended": f"eof x{len(group)}", "entries": "-",
                "READDIRs": sum(len(x.rpcs) for x in group), "restarts": 0, "refetched": 0,
                "invalidations": 0, "dentries": "-"})
    return pd.DataFrame(rows)


def lost_text(info):
    """The events a trace lost, in words: the count where the trace stores it."""
    lost = info.get("lost_events") or []
    total = info.get("lost_total")
    if not lost:
        return f"{total:,} events lost (the trace's CPU stats; where is not known)" if total \
            else None
    if total is None and all(x.get("count") is not None for x in lost):
        total = sum(x["count"] for x in lost)
    cpus = sorted({x.get("cpu") for x in lost if x.get("cpu") is not None})
    n = f"{total:,}" if total is not None else "an unknown number of"
    return f"{n} events lost in {len(lost)} places (CPU {', '.join(map(str, cpus)) or '?'})"


def print_analysis(analyses, out=sys.stdout, details=10):
    for a in analyses:
        i = a.info
        kernel = a.kernel or "unknown kernel"
        out.write(f"{i.get('path')}: {i.get('format', '?')}, {i.get('cpus', '?')} CPUs, "
                  f"{kernel}\n")
        ev = a.evidence
        dirs = (f" (directories from {', '.join(ev['rpc_directory'])})"
                if ev.get("rpc_directory") else "")
        out.write(f"  READDIRs from {', '.join(ev['rpc']) or '-'}{dirs}; invalidations from "
                  f"{', '.join(a.recorded.get('invalidations') or []) or '-'}; listings by "
                  f"{', '.join(sorted({x.delimited_by for x in a.listings})) or '-'}\n")
        missing = set()
        if not a.cookies_known:
            out.write("  READDIR cookies are not in this trace, so restarts cannot be seen\n")
            missing.add("rpc")
        if not a.recorded.get("invalidations"):
            out.write("  invalidation events were not recorded\n")
            missing.add("invalidations")
        if missing:
            out.write(f"  record with: {events.record_advice(a.kernel, missing)}\n")
        for note in i.get("notes") or []:       # what a capture says about its own limits
            out.write(f"  {note}\n")
        lost = lost_text(i)
        if lost:
            hit = [x.label() for x in a.listings if any("lost" in d["what"] for d in x.damage)]
            out.write(f"  WARNING: {lost}: counts below are lower bounds (record with a larger "
                      f"-b); listings that overlap the loss: {', '.join(hit) or 'none'}\n")
        damaged = i.get("damaged_events") or []
        if damaged:
            out.write(f"  WARNING: {len(damaged)} damaged events, e.g. {damaged[0]['what']}\n")
        if i.get("partial"):
            out.write("  WARNING: the trace is damaged; only the part before the damage was "
                      "read\n")
    table = listing_table(analyses)
    out.write("\n" + table.to_string(index=False) + "\n" if len(table) else "\nno listing\n")
    for a in analyses:
        for lst in a.listings:
            if not (lst.restarts or lst.invalidations or lst.ambiguous_rows):
                continue
            out.write(f"\n{os.path.basename(a.info['path'])} {lst.phase or ''} "
                      f"{lst.summary().get('who') or f'{lst.comm}[{lst.pid}]'} "
                      f"dir {_q(lst.fileid)}:\n")
            # An invalidation before the restart it caused, even at the same timestamp.
            events_ = sorted([(r.ts, "restart", r) for r in lst.restarts] +
                             [(v.ts, "invalidation", v) for v in lst.invalidations],
                             key=lambda x: (x[0], x[1] == "restart"))
            for ts, kind, x in events_[:details]:
                t = (ts - lst.start) / NS
                if kind == "restart":
                    at = ("at cookie 0" if not x.cookie else
                          f"at cookie {x.cookie}, below the reader's position")
                    out.write(f"  {t:9.3f}s  restart {at} (READDIR #{x.rpc_index + 1}): "
                              f"{x.refetched} READDIRs and {x.cost_ns / NS:.3f}s to get back\n")
                else:
                    chain = " -> ".join(x.chain + [x.reason]) if x.chain else x.reason
                    after = {True: "", False: " (no restart)", None: ""}[x.followed_by_restart]
                    out.write(f"  {t:9.3f}s  invalidation: {chain}{after}\n")
            if len(events_) > details:
                out.write(f"  ... {len(events_) - details} more (--details N, or --json)\n")
            if lst.ambiguous_rows:
                out.write(f"  {len(lst.ambiguous_rows)} cookie-0 READDIRs after the start: "
                          "restarts, rewinds or new opens (the trace cannot tell)\n")


def split_dcache(paths):
    """(dcache runs, other traces): a dcache reproducer's directory or trace has its own
    analysis, from its markers and facts rather than from READDIRs."""
    runs = [p for p in paths if dcache.is_dcache_run(p)]
    return runs, [p for p in paths if p not in runs]


def dcache_results(path):
    """results.json of a dcache run, made afresh from its trace and facts."""
    d = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    return dcache.build_results(d)


def cmd_analyze(args):
    if args.explain:
        from . import glossary
        sys.stdout.write(glossary.explain())
        return 0
    if not args.traces:
        raise UsageError("usage: nfs-readdir analyze TRACE... (or --explain)")
    runs, traces = split_dcache(args.traces)
    loaded = load_all(traces, with_slab=True) if traces else []
    analyses = [a for _, a, _ in loaded if a is not None]
    v = None
    if analyses:
        names, ratio = run_checks(traces)
        v = verdict.judge(analyses, max_ratio=ratio, names=names)
    if args.json:
        found = {id(f.listing): {"finding": f.word, "why": f.why} for f in v.findings} if v \
            else {}
        out = []
        for p, a, s in loaded:
            if a is None:
                out.append({"path": p, "slab": s})
                continue
            d = dict(a.to_dict(), slab=s)
            for lst, summ in zip(a.listings, d["listings"]):
                summ.update(found.get(id(lst), {}))
            # The verdict on all the traces given, as `check` gives it.
            d["verdict"] = {"code": v.code, "word": v.word, "reason": v.reason}
            out.append(d)
        out += [{"path": p, "dcache": dcache_results(p)} for p in runs]
        json.dump(out, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    if analyses:
        print_analysis(analyses, details=args.details)
        sys.stdout.write(f"\nverdict: {v.reason}\n")
    sections = [f"{p}: " + slab.format_text(s, top=args.top) for p, _, s in loaded if s]
    sections += [f"{p}: " + dcache.report(dcache_results(p)) for p in runs]
    sys.stdout.write(("\n" if analyses else "") + "\n".join(sections))
    return 0


def run_checks(paths, max_ratio=None):
    """What the verdict takes besides the traces: the name checks and the READDIR ratio limit of
    the readdir reproducer runs among the paths (a run is judged as its results.json is)."""
    names, ratio = {}, None
    for p in paths:
        if os.path.isdir(p) and results.is_readdir_run(p):
            n, ratio = results.run_checks(p)
            names.update(n)
    ratio = max_ratio if max_ratio is not None else ratio
    return names, ratio if ratio is not None else verdict.MAX_RATIO


def judge_paths(paths, max_restarts=0, max_ratio=None):
    """The verdict on traces and results directories, as `check` gives it."""
    names, ratio = run_checks(paths, max_ratio)
    return verdict.judge(load_all(paths), max_restarts=max_restarts, max_ratio=ratio,
                         names=names)


def cmd_check(args):
    try:
        v = judge_paths(args.traces, args.max_restarts, args.max_ratio)
    except (TraceError, AnalysisError, UsageError, OSError) as e:
        print(f"cannot decide: {e}")
        return EXIT_SKIP
    print(v.reason)
    return v.code


def cmd_export(args):
    from . import export
    for path in expand(args.traces):
        t = None if capture.is_capture(path) else open_trace(path)
        try:
            a = wire.analyze(path) if t is None else analyze(t)
        except AnalysisError as e:
            raise AnalysisError(f"{path}: nothing to export: {e} (slab figures are in "
                                "`analyze --json`)") from None
        a.info = dict(a.info, path=path)
        findings = {id(lst): verdict.judge_listing(lst) for lst in a.listings}
        written, kept = export.write(a, path if t is None else t.path, args.output, args.format,
                                     findings)
        for w in written:
            print(w)
        for k in kept:
            print(f"{k}: the same trace was exported before; left as it was")
    return 0


def cmd_plot(args):
    from . import plot
    try:
        plot.output_format(args.output)     # refused before any trace is read
    except ValueError as e:
        raise UsageError(str(e)) from None
    runs, traces = split_dcache(args.traces)
    if runs and traces:
        raise UsageError("plot readdir traces and dcache runs separately (one kind per "
                         "figure)")
    if runs:
        dcache.plot_runs([p if os.path.isdir(p) else os.path.dirname(os.path.abspath(p))
                          for p in runs], args.output)
    else:
        plot.listings(load_all(traces), args.output)
    print(args.output)
    return 0


def cmd_compare(args):
    runs, _ = split_dcache([args.before, args.after])
    if len(runs) == 1:
        raise UsageError(f"{runs[0]} is a dcache run and the other is not: compare two runs "
                         "of the same kind")
    if runs:
        table = dcache.compare_table(dcache_results(args.before), dcache_results(args.after))
    else:
        from . import compare
        table = compare.table(load_all([args.before]), load_all([args.after]),
                              (args.before, args.after))
    if args.json:
        print(table.to_json(orient="index", indent=2))
    else:
        print(f"before: {args.before}\nafter:  {args.after}\n")
        print(table.to_string())
    return 0


def cmd_record(args):
    from . import record
    if bool(args.command) == (args.duration is not None):
        raise UsageError("record needs either -- COMMAND or --duration SECONDS (one of them)")
    return record.run(args.output, args.command, args.duration, args.dcache, args.slab)


def cmd_watch(args):
    from . import watch
    return watch.run(args.duration, args.dir, args.json)


def _seconds(v):
    try:
        x = float(v)
    except ValueError:
        x = -1
    if x <= 0:
        raise argparse.ArgumentTypeError(f"'{v}' is not a positive number of seconds")
    return x


def parser():
    p = argparse.ArgumentParser(prog="nfs-readdir", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("analyze", help="per listing: entries, time, READDIRs, restarts, "
                                       "invalidations, dentries added; per dcache run: "
                                       "phase deltas, rates, negative share, slowdown")
    s.add_argument("traces", nargs="*", metavar="TRACE")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--explain", action="store_true",
                   help="what every column of the table and of the exports means, and exit")
    s.add_argument("--details", type=int, default=10, metavar="N",
                   help="restarts and invalidations shown per listing (default 10)")
    s.add_argument("--top", type=int, default=10, metavar="N",
                   help="slab caches shown, by growth, for traces with kmem events "
                        "(default 10)")
    s.set_defaults(func=cmd_analyze)

    s = sub.add_parser("check", help="verdict for git bisect run: 0 good, 1 bad, 125 skip")
    s.add_argument("traces", nargs="+", metavar="TRACE")
    s.add_argument("--max-restarts", type=int, default=0, metavar="N",
                   help="restarts at cookie 0 allowed per listing (default 0)")
    s.add_argument("--max-ratio", type=float, default=None, metavar="R",
                   help="without cookies: modified/idle READDIR ratio allowed (default: the "
                        "run's own, else 1.5)")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("export", help="canonical events as CSV or Parquet tables")
    s.add_argument("traces", nargs="+", metavar="TRACE")
    s.add_argument("-o", "--output", required=True, metavar="DIR")
    s.add_argument("--format", choices=("csv", "parquet"), default="csv")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("plot", help="cookie progress per listing, invalidations, restarts and "
                                    "dentries over time; dcache runs: dentries and negative "
                                    "dentries over time, one panel per run (PNG or SVG)")
    s.add_argument("traces", nargs="+", metavar="TRACE")
    s.add_argument("-o", "--output", required=True, metavar="FILE.png|FILE.svg|FILE.pdf")
    s.set_defaults(func=cmd_plot)

    s = sub.add_parser("compare", help="two traces or results directories side by side (e.g. "
                                       "one reproducer on two kernels)")
    s.add_argument("before", metavar="A")
    s.add_argument("after", metavar="B")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_compare)

    s = sub.add_parser("record", help="record a trace on this machine with the events and "
                                      "kprobes its kernel has (root; tracefs is put back as "
                                      "it was)")
    s.add_argument("-o", "--output", default="trace.dat", metavar="FILE",
                   help="trace file (default trace.dat)")
    s.add_argument("--dcache", action="store_true",
                   help="also dcache samples every second and the dentries READDIR adds")
    s.add_argument("--slab", action="store_true", help="also the kmem allocation events")
    s.add_argument("--duration", type=_seconds, metavar="S",
                   help="record for S seconds (instead of a command)")
    s.add_argument("command", nargs="*", metavar="-- COMMAND",
                   help="record while COMMAND runs")
    s.set_defaults(func=cmd_record)

    s = sub.add_parser("watch", help="print invalidations and restarts as they happen; the "
                                     "summary and exit status of check at Ctrl-C or the end")
    s.add_argument("--duration", type=_seconds, metavar="S", help="stop after S seconds")
    s.add_argument("--dir", metavar="PATH", help="only listings of this directory")
    s.add_argument("--json", action="store_true", help="the summary as analyze --json gives it")
    s.set_defaults(func=cmd_watch)
    return p


def main(argv=None):
    # File names are bytes: one that is not UTF-8 is written back as the bytes it was.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (TraceError, AnalysisError, UsageError, dcache.DcacheError, ExportError,
            events.KernelLacks, Refused) as e:
        print(f"nfs-readdir: {e}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:     # the reader of our output went away (| head): not an error
        sys.stderr.close()
        return 0
    except OSError as e:
        where = e.filename or getattr(args, "output", None) or ""
        print(f"nfs-readdir: {where}: {e.strerror or e}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("nfs-readdir: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: say so in one line; check must not give a false verdict
        print(f"nfs-readdir: internal error: {type(e).__name__}: {e} (please report it with "
              "the trace and the command)", file=sys.stderr)
        return EXIT_SKIP if args.cmd in ("check", "watch") else EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
