"""What each command of nfs-readdir does, once cli.py has parsed its arguments: cmd_NAME(args)
runs command NAME and returns its exit status (status.*); errors go up as exceptions, which cli
turns into one line and status.ERROR.
"""

import io
import os
import sys

from . import events, runs, status
from .commandio import (
    PROGRESS_BYTES,
    OutputLost,
    UsageError,
    keep_old,
    kept_as,
    progress,
    said,
    shown,
)

# The analyses, renderers and capture reader import pandas (about 0.5 s): each command imports
# what it uses, so `--help`, `results --verdict` and the like do not pay for it.


def load(paths, with_slab=False, ports=(), ids=True):
    """pipeline.load with the user's names for spooled inputs and a progress line."""
    from . import pipeline

    loaded = pipeline.load(
        paths, with_slab=with_slab, ports=ports, shown=shown, progress=_reading, ids=ids
    )
    progress(None)
    return loaded


def _reading(n, paths, path):
    """Say which trace is read, for several traces or for big ones."""
    if (
        len(paths) > 1
        or sum(os.path.getsize(p) for p in paths if os.path.isfile(p)) > PROGRESS_BYTES
    ):
        progress(f"reading {n}/{len(paths)}: {shown(path)}")


def cmd_glossary(args):
    from .present import glossary

    sys.stdout.write(glossary.explain())
    return status.GOOD


def cmd_analyze(args):
    if args.explain:
        return cmd_glossary(args)
    if not args.traces:
        raise UsageError("usage: nfs-readdir analyze TRACE... (or --explain)")
    from . import pipeline
    from .present import jsonout

    dcache_runs, traces = pipeline.split_dcache(args.traces)
    # (the text names no trace by its id: one trace's bytes are hashed for --json only, 0.7 G
    # of the 9.7 G instructions of analyze of a 10 M-event trace)
    loaded = load(traces, with_slab=True, ports=args.port, ids=args.json) if traces else []
    # (imported once the trace is read: render imports numpy, which the trace's hash and
    # reading threads run beside, pipeline's docstring says)
    from .present.render import (
        analysis_record,
        dcache_record,
        dcache_report,
        print_analysis,
        slab_record,
        slab_text,
    )

    analyses = [x.analysis for x in loaded if x.analysis is not None]
    v = pipeline.judge(loaded, traces) if analyses else None
    if args.json:
        out = [
            slab_record(x) if x.analysis is None else analysis_record(x.analysis, v, slab=x.slab)
            for x in loaded
        ]
        for p in dcache_runs:
            res = pipeline.dcache_results(p)
            out.append(dcache_record(p, pipeline.dcache_trace_id(p, res), res))
        jsonout.dump(out, sys.stdout)  # (listings written as they are read back)
        sys.stdout.write("\n")
        return status.GOOD
    if analyses:
        print_analysis(analyses, details=args.details)
        assert v is not None  # (judged where there are analyses)
        sys.stdout.write(f"\nverdict: {v.reason}\n{advice_line(v)}")
    sections = [f"{x.path}: " + slab_text(x.slab, top=args.top) for x in loaded if x.slab]
    sections += [f"{p}: " + dcache_report(pipeline.dcache_results(p)) for p in dcache_runs]
    sys.stdout.write(("\n" if analyses else "") + "\n".join(sections))
    return status.GOOD


def cmd_check(args):
    from . import pipeline
    from .model.analysis import AnalysisError
    from .present import roundtrips

    try:
        loaded = load(args.traces, ports=args.port, ids=False)
        v = pipeline.judge(loaded, args.traces, args.max_restarts, args.max_ratio)
    except AnalysisError as e:
        # Read, but what is in it cannot decide (no READDIR, a capture cut by its snaplen): no
        # answer either way. An input that is not a trace, or cannot be read at all, is no
        # verdict and goes up as an error (status.ERROR), as analyze gives it.
        args.answer = status.UNDECIDED
        # (what to record, where the message says, on a line of its own after the answer)
        answer, _, advice = said(e).partition(". Record a listing with: ")
        print(f"cannot decide: {answer}" + (f"\nrecord a listing with: {advice}" if advice else ""))
        return status.UNDECIDED
    args.answer = v.code  # the answer stands even if the line cannot be written
    print(v.reason)
    # Where no restart explains a slow listing, one line on where its time went (the exit
    # status stays the restart answer's, for git bisect run); where the answer is a restart,
    # that is what the user needs to hear.
    slow = roundtrips.check_lines([x.analysis for x in loaded if x.analysis is not None])
    if slow and v.code != status.BAD:
        from .rules.words import counted

        more = counted(len(slow) - 1, "more listing", "more listings")
        print(slow[0] + (f" (and {more}: see analyze)" if len(slow) > 1 else ""))
    sys.stdout.write(advice_line(v))
    return v.code


def advice_line(v):
    """What to record so that the next input decides: a line after the verdict's (the verdict
    line says what this one shows), or nothing."""
    return f"record with: {v.advice}\n" if v.advice else ""


def cmd_export(args):
    from . import pipeline
    from .present import export

    dcache_runs, traces = pipeline.split_dcache(pipeline.expand(args.traces))
    if export.one_file(args.output, args.format, len(dcache_runs) + len(traces)) and traces:
        (x,) = load(traces, ports=args.port)
        done = export.write_one(x.analysis, args.output)
        if done is not None and done.backups:
            print(kept_as(args.output, done.backups[0]))
        elif done is not None:
            _say_exported(done)
        return status.GOOD
    for path in dcache_runs:
        res, markers = pipeline.dcache_with_markers(path)
        _say_exported(
            export.write_dcache(
                res, markers, pipeline.dcache_trace_id(path, res), path, args.output, args.format
            )
        )
    for path in traces:
        # (what cannot be judged, a capture without NFS traffic, says why as on every command)
        (x,) = load([path], ports=args.port)
        _say_exported(export.write(x.analysis, args.output, args.format, pipeline.finding))
    return status.GOOD


def _say_exported(done):
    """Each file and what export did with it: a new file's path alone (as scripts read it)."""
    for w in done.new:
        print(w)
    for w in done.replaced:
        print(f"{w}: replaced (the file there differed from this export: stale or damaged)")
    for k in done.kept:
        print(f"{k}: left as it was (already this export, byte for byte)")


def cmd_plot(args):
    from .present import plot

    try:
        plot.output_format(args.output)  # refused before any trace is read
    except ValueError as e:
        raise UsageError(str(e)) from None
    from . import pipeline

    dcache_runs, traces = pipeline.split_dcache(args.traces)
    if dcache_runs and traces:
        raise UsageError("plot readdir traces and dcache runs separately (one kind per figure)")
    to_stdout = args.output == "-"
    image = io.BytesIO() if to_stdout else None
    if dcache_runs:
        runs_read = [(pipeline.dcache_saved(p), pipeline.dcache_markers(p)) for p in dcache_runs]
        kept = None if to_stdout else keep_old(args.output)
        plot.dcache_runs(runs_read, args.output, image)
    else:
        analyses = [x.analysis for x in load(traces, ports=args.port)]
        kept = None if to_stdout else keep_old(args.output)
        plot.listings(analyses, args.output, image)
    if image is not None:  # (to stdout)
        sys.stdout.flush()
        try:
            sys.stdout.buffer.write(image.getvalue())
            sys.stdout.buffer.flush()
        except OSError as e:
            raise OutputLost(e) from None
    else:
        print(kept_as(args.output, kept))
    return status.GOOD


def cmd_compare(args):
    from . import pipeline
    from .present import compare

    dcache_runs, _ = pipeline.split_dcache([args.before, args.after])
    if len(dcache_runs) == 1:
        raise UsageError(
            f"{dcache_runs[0]} is a dcache run and the other is not: compare two "
            "runs of the same kind"
        )
    if dcache_runs:
        table = compare.dcache_table(
            pipeline.dcache_results(args.before), pipeline.dcache_results(args.after)
        )
    else:
        before, after = (
            [x.analysis for x in load([p], ports=args.port) if x.analysis is not None]
            for p in (args.before, args.after)
        )
        paths = (shown(args.before), shown(args.after))
        if args.json:  # listings as records: no tuple keys, null where it cannot tell
            import json  # (where used: a check need not pay its import)

            json.dump(compare.to_json(before, after, paths), sys.stdout, indent=2, default=str)
            sys.stdout.write("\n")
            return status.GOOD
        table = compare.table(before, after, paths)
    if args.json:
        print(table.to_json(orient="index", indent=2))
    else:
        print(f"before: {shown(args.before)}\nafter:  {shown(args.after)}\n")
        print(table.to_string())
    return status.GOOD


def cmd_report(args):
    """One HTML page of the inputs: each input's verdict, listings and timelines (a dcache run:
    its report); for two readdir inputs, their listings paired with the ratios."""
    from . import pipeline
    from .present import html, samplechart
    from .present.render import dcache_report, slab_text

    dcache_runs, _ = pipeline.split_dcache(args.traces)
    sections, sides, verdicts = [], [], []
    for path in args.traces:
        if path in dcache_runs:
            res, markers = pipeline.dcache_with_markers(path)
            charts = samplechart.charts(markers, res)
            sections.append(html.dcache_section(shown(path), res, dcache_report(res), charts))
            word = res.get("verdict")
            verdicts.append((shown(path), word, {"PASS": 0, "FAIL": 1}.get(word, 125), ""))
            continue
        loaded = load([path], with_slab=True, ports=args.port)
        analyses = [x.analysis for x in loaded if x.analysis is not None]
        slabs = [f"{x.path}: " + slab_text(x.slab) for x in loaded if x.slab]
        if not analyses:  # kmem events alone: its slab figures, no listing to judge
            sections.append(html.slab_section(shown(path), slabs))
            continue
        sides.append((shown(path), analyses))
        v = pipeline.judge(loaded, [path])
        verdicts.append((shown(path), v.word, v.code, v.reason))
        sections.append(html.readdir_section(shown(path), analyses, v, slabs))
    if len(sides) == 2:
        (pa, a), (pb, b) = sides
        sections.insert(0, html.pairs_section(a, b, (pa, pb)))
    if len(verdicts) > 1:  # what a reader sees first: every input's verdict
        sections.insert(0, html.verdicts_section(verdicts))
    title = f"nfs-readdir report: {', '.join(map(shown, args.traces))}"
    page = html.page(sections, title)
    kept = None if args.output == "-" else keep_old(args.output)
    html.write(args.output, page)
    if args.output != "-":  # (the page itself went to standard output)
        print(kept_as(args.output, kept))
    return status.GOOD


def cmd_results(args):
    """A reproducer's results directory: write its results.json, print its verdict line
    (exit status the verdict's), or put several runs side by side."""
    if args.table:
        import json

        from .present import results

        try:
            loaded = []
            for d in args.dir:
                with open(runs.results_json(d)) as f:
                    loaded.append((d, runs.kind(d), json.load(f)))
            print(results.table(loaded))
        except (ValueError, KeyError) as e:
            raise UsageError(f"cannot tabulate: {e}") from None
        return status.GOOD
    if len(args.dir) > 1:
        raise UsageError("results takes one DIR unless --table")
    if args.verdict:
        path = runs.results_json(args.dir[0])
        with open(path, "rb") as f:  # unreadable: an error (status.ERROR), no verdict
            text = f.read()
        # vm-run and the reproducers take this exit status as the run's verdict; a
        # results.json whose content holds none (a run cut short writing it) cannot decide.
        import json

        try:
            res = json.loads(text)
            code = status.code_of_result(res["verdict"])
            line = f"{res['verdict']}: " + "; ".join(res["reasons"])
        except (ValueError, KeyError, TypeError) as e:
            args.answer = status.UNDECIDED
            print(f"UNDECIDED: cannot read the verdict in {path}: {e}")
            return status.UNDECIDED
        args.answer = code
        print(line)
        return code
    from . import runresults

    runresults.write(args.dir[0])
    return status.GOOD


def cmd_slab(args):
    from . import pipeline
    from .present.render import slab_text

    s = pipeline.slab_of(args.trace)
    if s is None:
        raise UsageError(
            f"{shown(args.trace)}: no kmem allocation/free events; record with "
            + events.record_advice(None, {"slab"})
        )
    if args.json:
        import json

        json.dump(s, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(slab_text(s, top=args.top))
    return status.GOOD


def cmd_record(args):
    from .live import record

    if bool(args.command) == (args.duration is not None):
        raise UsageError("record needs either -- COMMAND or --duration SECONDS (one of them)")
    if args.output == "-":
        # trace-cmd writes a trace.dat by seeking in it: a pipe cannot hold one.
        raise UsageError("record -o - : record writes a trace.dat file; name one (-o FILE)")
    kept = keep_old(args.output)
    if kept:
        print(f"nfs-readdir: the {args.output} that was there is kept as {kept}", file=sys.stderr)
    return record.run(args.output, args.command, args.duration, args.dcache, args.slab)


def cmd_watch(args):
    from .live import watch

    # (its output: the guarded stdout of this run, not the one bound when watch was imported)
    end = watch.run(
        args.duration, args.dir, args.json, sys.stdout, listen=args.metrics, textfile=args.textfile
    )
    return print_watch(end, args.json, sys.stdout)


def print_watch(end, as_json, out):
    """How watch ended, on out: a service's last line, or the summary of what it read (text,
    or with as_json the analysis record alone); returns the exit status (a service stopped:
    GOOD; else the summary's verdict)."""
    from .live.watch import ServiceEnd

    if isinstance(end, ServiceEnd):
        out.write("nfs-readdir watch: " + ("stopped" if end.interrupted else "done"))
        if end.counts is not None:
            read, lost, restarts = end.counts
            out.write(f"; {read} events read, {lost} lost; {restarts} restart(s)")
        out.write("\n")
        return status.GOOD
    from .present import jsonout
    from .present.render import analysis_record, print_analysis

    a, v, lines = end.analysis, end.verdict, end.restart_lines
    # The lines against the summary: they differ only where the stream missed what the whole
    # trace shows (an event read after Ctrl-C, a READDIR before its open was seen).
    total = sum(len(lst.restarts) for lst in a.listings) if a is not None else 0
    if as_json:
        d = analysis_record(a, v) if a is not None else {"listings": [], "verdict": v.to_dict()}
        # No file holds what watch read from the live ring buffer: there are no bytes to hash
        # into an id (the glossary says so; `record` makes a trace that has one).
        d.setdefault("trace", {})["trace_id"] = None
        d["restart_lines"] = lines
        jsonout.dump(d, out)
        out.write("\n")
    else:
        out.write(
            "\nnfs-readdir watch: " + ("interrupted; " if end.interrupted else "") + "summary\n"
        )
        if a is not None and a.listings:
            print_analysis([a], out=out)
        if lines is not None and lines != total:
            out.write(
                f"\nnote: {lines} restart line(s) above, {total} restart(s) in the "
                "whole trace: the summary is the one to go by\n"
            )
        out.write(f"\nverdict: {v.reason}\n{advice_line(v)}")
    out.flush()
    return v.code
