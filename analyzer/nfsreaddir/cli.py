"""nfs-readdir: find NFS readdir cookie restarts, cache invalidations and dcache growth in traces.

Each TRACE is a trace.dat file, the text of `trace-cmd report` (default or -R), a packet capture
of the NFS traffic (pcap or pcapng, also gzip'd; decoded with tshark), or a results
directory of the project's reproducers: readdir-loopback (every *.dat in it) or a dcache-*
reproducer (its dcache section: per-phase dentry deltas, growth rates, negative share, lookup
slowdown and the reproducer's figures). A trace with kmem allocation events also gets a slab
section (growth per cache, the dentry cache singled out), and needs no READDIR in it.

exit status: 0 done (check: good, results --verdict: PASS), 1 check: bad (FAIL), 2 the input
could not be used (the message says why and what to record), 3 internal error (a bug: please
report it with the trace), 125 check: cannot decide (also on an internal error), 130
interrupted.
"""

import argparse
import glob
import json
import os
import sys

# No analysis does linear algebra, but numpy's OpenBLAS starts a thread per core at import,
# whose spinning cost `analyze` of 8.4 M kmem events 0.15-0.2 s of CPU beside its own reader
# threads (1.84+0.44 s -> 1.63+0.40 s user+system). Set before anything imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from . import __version__, events, results
from .trace import OnePass, TraceError, open_trace

# The analyses, renderers and capture reader import pandas (about 0.5 s): each command imports
# what it uses, so `--help`, `results --verdict` and the like do not pay for it.

# The exit statuses of every command, in one place: check (and results --verdict, watch) give
# git bisect run its answer in the first and the next-to-last.
EXIT_GOOD = 0           # done; check: good
EXIT_BAD = 1            # check: bad
EXIT_INPUT = 2          # the input could not be used (the message says why)
EXIT_BUG = 3            # an internal error (check, watch, results: EXIT_SKIP, never a verdict)
EXIT_SKIP = 125         # check: cannot decide
EXIT_INTERRUPTED = 130


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
    from . import capture, slab, tables
    res = []
    paths = expand(paths)
    big = sum(os.path.getsize(p) for p in paths if p != "-" and os.path.isfile(p)) > PROGRESS_BYTES
    for n, path in enumerate(paths, 1):
        if len(paths) > 1 or big:
            progress(f"reading {n}/{len(paths)}: {path}")
        if capture.is_capture(path):    # a packet capture: its own reader, the same listings
            from . import wire
            a = wire.analyze(path)
            res.append((path, a, None) if with_slab else a)
            continue
        t = open_trace(path)
        kmem = slab.read_request(t) if with_slab else {}
        readdir = tables.has_readdir_source(t)
        if kmem and readdir:        # both analyses from one pass over the file
            want = tables.wanted(t)
            for ev, cols in kmem.items():
                want.setdefault(ev, set()).update(cols)
            t = OnePass(t, want)
        summary = slab.summarize(t) if kmem else None
        a = None
        if readdir or summary is None:      # (without a source: the "no READDIR" error)
            # (the readdir analysis needs pandas: a trace of kmem events alone never loads it)
            from .analysis import AnalysisError, analyze
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


def split_dcache(paths):
    """(dcache runs, other traces): a dcache reproducer's directory or trace has its own
    analysis, from its markers and facts rather than from READDIRs."""
    from .facts import is_dcache_run
    runs = [p for p in paths if is_dcache_run(p)]
    return runs, [p for p in paths if p not in runs]


def dcache_run_dir(path):
    """The results directory of a dcache run given as the directory or its trace."""
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def dcache_results(path):
    """results.json of a dcache run, made afresh from its trace and facts."""
    from . import dcache_judge
    return dcache_judge.build_results(dcache_run_dir(path))


def cmd_analyze(args):
    if args.explain:
        from . import glossary
        sys.stdout.write(glossary.explain())
        return EXIT_GOOD
    if not args.traces:
        raise UsageError("usage: nfs-readdir analyze TRACE... (or --explain)")
    from .render import dcache_report, print_analysis, slab_text
    runs, traces = split_dcache(args.traces)
    loaded = load_all(traces, with_slab=True) if traces else []
    analyses = [a for _, a, _ in loaded if a is not None]
    v = None
    if analyses:
        from . import verdict
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
        return EXIT_GOOD
    if analyses:
        print_analysis(analyses, details=args.details)
        sys.stdout.write(f"\nverdict: {v.reason}\n")
    sections = [f"{p}: " + slab_text(s, top=args.top) for p, _, s in loaded if s]
    sections += [f"{p}: " + dcache_report(dcache_results(p)) for p in runs]
    sys.stdout.write(("\n" if analyses else "") + "\n".join(sections))
    return EXIT_GOOD


def run_checks(paths, max_ratio=None):
    """What the verdict takes besides the traces: the name checks and the READDIR ratio limit of
    the readdir reproducer runs among the paths (a run is judged as its results.json is)."""
    from . import verdict
    names, ratio = {}, None
    for p in paths:
        if os.path.isdir(p) and results.is_readdir_run(p):
            n, ratio = results.run_checks(p)
            names.update(n)
    ratio = max_ratio if max_ratio is not None else ratio
    return names, ratio if ratio is not None else verdict.MAX_RATIO


def judge_paths(paths, max_restarts=0, max_ratio=None):
    """The verdict on traces and results directories, as `check` gives it."""
    from . import verdict
    names, ratio = run_checks(paths, max_ratio)
    return verdict.judge(load_all(paths), max_restarts=max_restarts, max_ratio=ratio,
                         names=names)


def cmd_check(args):
    from .analysis import AnalysisError
    try:
        v = judge_paths(args.traces, args.max_restarts, args.max_ratio)
    except (TraceError, AnalysisError, UsageError, OSError) as e:
        print(f"cannot decide: {e}")
        return EXIT_SKIP
    print(v.reason)
    return v.code


def cmd_export(args):
    from . import capture, export, verdict, wire
    from .analysis import AnalysisError, analyze
    from .dcache_judge import build
    runs, traces = split_dcache(expand(args.traces))
    for path in runs:
        d = dcache_run_dir(path)
        res, markers = build(d)
        written, kept = export.write_dcache(res, markers, os.path.join(d, res["trace"]), path,
                                            args.output, args.format)
        _say_exported(written, kept)
    for path in traces:
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
        _say_exported(written, kept)
    return EXIT_GOOD


def _say_exported(written, kept):
    for w in written:
        print(w)
    for k in kept:
        print(f"{k}: the same trace was exported before; left as it was")


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
        plot.dcache_runs([p if os.path.isdir(p) else os.path.dirname(os.path.abspath(p))
                          for p in runs], args.output)
    else:
        plot.listings(load_all(traces), args.output)
    print(args.output)
    return EXIT_GOOD


def cmd_compare(args):
    from . import compare
    runs, _ = split_dcache([args.before, args.after])
    if len(runs) == 1:
        raise UsageError(f"{runs[0]} is a dcache run and the other is not: compare two runs "
                         "of the same kind")
    if runs:
        table = compare.dcache_table(dcache_results(args.before), dcache_results(args.after))
    else:
        table = compare.table(load_all([args.before]), load_all([args.after]),
                              (args.before, args.after))
    if args.json:
        print(table.to_json(orient="index", indent=2))
    else:
        print(f"before: {args.before}\nafter:  {args.after}\n")
        print(table.to_string())
    return EXIT_GOOD


def cmd_results(args):
    """A reproducer's results directory: write its results.json, print its verdict line
    (exit status the verdict's), or put several runs side by side."""
    if args.table:
        try:
            print(results.table(args.dir))
        except (ValueError, KeyError) as e:
            raise UsageError(f"cannot tabulate: {e}") from None
        return EXIT_GOOD
    if len(args.dir) > 1:
        raise UsageError("results takes one DIR unless --table")
    path = os.path.join(args.dir[0], "results.json")
    if args.verdict:
        # vm-run and the reproducers take this exit status as the run's verdict; a
        # results.json that cannot be read is no verdict (125), never an input error.
        try:
            with open(path) as f:
                res = json.load(f)
            code = {"PASS": EXIT_GOOD, "FAIL": EXIT_BAD}.get(res["verdict"], EXIT_SKIP)
            line = f"{res['verdict']}: " + "; ".join(res["reasons"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"UNDECIDED: cannot read the verdict in {path}: {e}")
            return EXIT_SKIP
        print(line)
        return code
    res = results.build(args.dir[0])
    with open(path + ".tmp", "w") as f:
        json.dump(res, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return EXIT_GOOD


def cmd_slab(args):
    from . import slab
    from .render import slab_text
    s = slab.summarize(open_trace(args.trace))
    if s is None:
        raise UsageError(f"{args.trace}: no kmem allocation/free events; record with "
                         + events.record_advice(None, {"slab"}))
    if args.json:
        json.dump(s, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(slab_text(s, top=args.top))
    return EXIT_GOOD


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

    s = sub.add_parser("results", help="a reproducer's results directory: write its "
                                       "results.json; --verdict: its PASS/FAIL line and exit "
                                       "status (0, 1, 125); --table: runs side by side")
    s.add_argument("dir", nargs="+", metavar="DIR")
    s.add_argument("--verdict", action="store_true", help="print the verdict line only")
    s.add_argument("--table", action="store_true", help="print the runs side by side")
    s.set_defaults(func=cmd_results)

    s = sub.add_parser("slab", help="slab growth per cache from a trace's kmem events alone")
    s.add_argument("trace", metavar="TRACE")
    s.add_argument("--json", action="store_true")
    s.add_argument("--top", type=int, default=10, metavar="N")
    s.set_defaults(func=cmd_slab)
    return p


def input_errors():
    """The exceptions that mean the input could not be used: UsageError, TraceError and
    those of the modules this run imported (a module never imported raised nothing)."""
    errors = [UsageError, TraceError]
    for module, name in (("analysis", "AnalysisError"), ("dcache", "DcacheError"),
                         ("export", "ExportError"), ("recordplan", "KernelLacks"),
                         ("tracing", "Refused")):
        loaded = sys.modules.get(f"{__package__}.{module}")
        if loaded is not None:
            errors.append(getattr(loaded, name))
    return tuple(errors)


def main(argv=None):
    # File names are bytes: one that is not UTF-8 is written back as the bytes it was.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except input_errors() as e:
        print(f"nfs-readdir: {e}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:     # the reader of our output went away (| head): not an error
        sys.stderr.close()
        return EXIT_GOOD
    except OSError as e:
        where = e.filename or getattr(args, "output", None) or ""
        print(f"nfs-readdir: {where}: {e.strerror or e}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("nfs-readdir: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug: say so in one line; check must not give a false verdict
        print(f"nfs-readdir: internal error: {type(e).__name__}: {e} (please report it with "
              "the trace and the command)", file=sys.stderr)
        return EXIT_SKIP if args.cmd in ("check", "watch", "results") else EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
