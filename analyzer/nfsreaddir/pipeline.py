"""The one way from inputs to results: what kind each input is, which analyses it gets, the one
pass over a trace that serves them all, and the verdict. Every front end (check, analyze,
export, plot, compare, results, watch) asks here and only shows what it gets.

An analysis says which events it reads where it is written (requires_events: the readdir
analysis on tables.load, which reads its events; the slab analysis on slab.summarize); the
pipeline merges those requests, so a trace that two analyses read is decoded once
(trace.OnePass).

The readdir analysis and the verdict read numpy columns, not pandas (about 0.5 s to import); the
dcache judgement and the slab analysis are imported where they are used, so that `check` and a
command that analyzes nothing never pay for them. Where a trace is hashed (its id named in the
output, or several inputs told apart), the model's tables (and numpy with them) are imported
only once the hash has begun, which then runs on the second core while the first imports (a
tenth of a second either way).
"""

import glob
import os
import threading

# hashlib's blake2b is this one; hashlib's import loads OpenSSL besides (_hashlib: a few ms of
# a check's CPU) for a hash the project never takes from it
from _blake2 import blake2b

from . import runs
from .model.requires import requested
from .recordtype import record
from .rules.limits import MAX_RATIO
from .trace import OnePass, is_capture, is_report_text, open_trace


class InputError(Exception):
    """An input that names nothing the pipeline can read (a directory without traces)."""


def expand(paths):
    """Trace files named by the paths; a results directory stands for its traces (trace.dat
    files), or where it has none, for its captures and report texts (*.txt)."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(glob.glob(os.path.join(p, "*.dat")))
            if not found:
                found = [
                    f
                    for f in sorted(glob.glob(os.path.join(p, "*")))
                    if os.path.isfile(f)
                    and (is_capture(f) or f.endswith(".txt") and is_report_text(f))
                ]
            if not found:
                raise InputError(
                    f"{p} is a directory with no trace in it (no *.dat, capture or *.txt "
                    "report text): name the trace or capture itself"
                )
            out.extend(found)
        elif not os.path.exists(p):
            raise InputError(f"{p}: no such file")
        else:
            out.append(p)
    return out


def split_dcache(paths):
    """(dcache runs, other inputs): a dcache reproducer's directory or trace has its own
    analysis, from its markers and facts rather than from READDIRs."""
    found = [p for p in paths if runs.kind(p) == runs.DCACHE]
    return found, [p for p in paths if p not in found]


# ---------------------------------------------------------------------------- readdir listings
@record
class Loaded:
    """One input read: its name as shown, its readdir analysis (None for a trace of kmem
    events alone), its slab summary (None without kmem events, or when not asked) and its id
    (trace_id; in the analysis' info where there is one)."""

    path: str
    analysis: object
    slab: object = None
    trace_id: str | None = None
    given: str | None = None  # the input it was read for (a results directory: its traces)


def trace_id(path):
    """The one id of a trace or capture: 16 hex digits of a hash of its bytes, a string (a
    64-bit number in JSON is rounded by jq and JavaScript), the same wherever the file lies and
    whatever its format. analyze --json, export and results.json all name a trace by it, and a
    listing by it and the listing's number within the trace."""
    h = blake2b(digest_size=8)
    # Read into one buffer, not mapped: a mapping's pages would count in the command's peak
    # memory (the whole file: 350 MiB for a 279 MB trace). 4 MiB at a time: the thread takes
    # the GIL back twice a read, and while the first thread imports, each time may wait a
    # switch interval (5 ms).
    buf = bytearray(4 << 20)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def _hashing(path, wanted):
    """trace_id(path), begun now in a thread of its own while the caller reads the file: the
    hash releases the GIL, so it takes the second core, not the reader's time (2.3 s of CPU
    for a 1.3 GB capture). Returns the function that waits for the id. A daemon thread: an
    interrupted command does not wait for a hash it will never use. Not wanted: no thread, and
    the id is None."""
    if not wanted:
        return lambda: None
    got: list = []  # the id, or the exception trace_id raised

    def run():
        try:
            got.append(trace_id(path))
        except BaseException as e:  # the caller's to raise, as trace_id would have
            got.append(e)

    # (a thread and a list, not concurrent.futures: its import, with logging's, is a tenth of
    # what check of a small trace may take)
    thread = threading.Thread(target=run, name=f"trace_id {path}", daemon=True)
    thread.start()

    def result():
        thread.join()
        if isinstance(got[0], BaseException):
            raise got[0]
        return got[0]

    return result


def _named(a, shown, tid):
    """The analysis with the name the user gave and the trace's id; trace-cmd's own 64-bit id
    of a trace.dat, which names the recording and not the file, is kept as tracecmd_id."""
    info = dict(a.info, path=shown, trace_id=tid)
    if a.info.get("trace_id") is not None:
        info["tracecmd_id"] = str(a.info["trace_id"])
    a.info = info
    return a


def readdir_analysis(path, ports=(), shown=None, ids=True):
    """(the readdir analysis of one trace or capture, the trace read or None for a capture);
    ids: named by its trace id (else None)."""
    tid = _hashing(path, ids)
    if is_capture(path):  # a packet capture: its own reader, the same listings
        from .model import wire

        a = wire.analyze(path, ports=ports)
        t = None
        round_trips(a)
    else:
        from .model.analysis import analyze

        t = open_trace(path)
        a = round_trips(analyze(t))
    return _named(a, shown or path, tid()), t


def round_trips(a):
    """The analysis with the RPCs of each listing accounted (model/roundtrips): a trace's
    from the requests it read, a capture's from the calls the wire analysis kept (its
    "capture_calls" table, rpcops.CallLog.table)."""
    from .model import roundtrips

    calls = a.tables.get("capture_calls") if a.tables else None
    a.round_trips = roundtrips.account(a, calls)
    return a


def _trace(path, shown, with_slab, ids):
    """Loaded of one trace; with_slab: the slab analysis beside the readdir one, both served by
    one pass over the file when both apply, but a trace.dat's slab analysis, which reads it a
    window at a time. ids: named by its trace id (else None)."""
    tid = _hashing(path, ids)
    t = open_trace(path)
    from .model import tables  # (after the hash began: see the module's docstring)

    summarize = None
    if with_slab:  # (the slab analysis' modules are not imported for a check)
        from .model import slab

        summarize = slab.summarize
    wanted = [a for a in (tables.load, summarize) if a is not None and a.applies(t)]
    # the slab analysis reads a trace.dat a window of time at a time, on its own: a pass made
    # up front for both would hold every kmem event (memory growing with the trace)
    together = [a for a in wanted if a is not summarize or not hasattr(t, "read_windows")]
    if len(together) > 1:
        t = OnePass(t, requested(t, together))
    summary = summarize(t) if summarize is not None and summarize in wanted else None
    a = None
    if tables.load in wanted or summary is None:  # (without a source: "no READDIR")
        from .model.analysis import AnalysisError, analyze

        try:
            a = _named(round_trips(analyze(t)), shown, tid())
        except AnalysisError as e:
            if summary is None:
                raise AnalysisError(f"{shown}: {e}") from None
    return Loaded(shown, a, summary, tid())


def load(paths, with_slab=False, ports=(), shown=lambda p: p, progress=None, ids=True):
    """Loaded of each trace the paths name (a results directory: its traces); with_slab: the
    slab analysis too, where a trace with kmem events but no READDIR has no readdir analysis.
    ports: NFS server ports of captures besides 2049. progress(n, total, path) is told of each
    trace as it is read. ids=False: the traces are named by their ids only where there are
    several, which judge() tells apart by them (check of one trace does not hash its bytes:
    3% of what it costs)."""
    out = []
    given = [(g, p) for g in paths for p in expand([g])]
    files = [p for _, p in given]
    ids = ids or len(files) > 1
    for n, (g, path) in enumerate(given, 1):
        if progress is not None:
            progress(n, files, path)
        if is_capture(path):
            a = readdir_analysis(path, ports, shown(path), ids)[0]
            x = Loaded(shown(path), a, trace_id=a.info.get("trace_id"))
        else:
            x = _trace(path, shown(path), with_slab, ids)
        x.given = g
        out.append(x)
    return out


def checks_of(paths, max_ratio=None):
    """What the verdict takes besides the traces: the name checks and the READDIR ratio limit of
    the readdir reproducer runs among the paths (a run is judged as its results.json is)."""
    names, ratio = {}, None
    for p in paths:
        if runs.kind(p) == runs.READDIR:
            n, ratio = runs.checks(p)
            names.update(n)
    ratio = max_ratio if max_ratio is not None else ratio
    return names, ratio if ratio is not None else MAX_RATIO


def judge(loaded, paths, max_restarts=0, max_ratio=None):
    """The verdict on what load() gave for the paths, as `check` gives it. Each input (a trace,
    a capture, or a reproducer's run: its traces together) is judged on its own evidence, its
    own kernel and events: one input's proof that the kernel goes on must not set aside
    another's restarts. Several inputs give the worst of their answers (bad, then cannot
    decide, then good); a file given twice is read as one input."""
    from .rules import verdict

    groups: dict[str, list] = {}
    seen = set()  # the trace ids read so far
    again = []
    for x in loaded:
        if x.trace_id is not None and x.trace_id in seen:
            again.append(x.path)
            continue
        seen.add(x.trace_id)
        groups.setdefault(x.given if x.given is not None else x.path, []).append(x)
    answers = []
    for g, xs in groups.items():
        names, ratio = checks_of([g] if g in paths else paths, max_ratio)
        analyses = [x.analysis for x in xs if x.analysis is not None]
        if analyses:
            v = verdict.judge(analyses, max_restarts=max_restarts, max_ratio=ratio, names=names)
            answers.append((g, v))
    if not answers:
        return verdict.judge([], max_restarts=max_restarts)
    return verdict.worst(answers, again)


def judge_paths(paths, max_restarts=0, max_ratio=None, ports=(), shown=lambda p: p, progress=None):
    """The verdict on traces and results directories, as `check` gives it."""
    return judge(
        load(paths, ports=ports, shown=shown, progress=progress), paths, max_restarts, max_ratio
    )


def slab_of(path):
    """The slab summary of one trace, or None without kmem allocation/free events."""
    from .model import slab

    return slab.summarize(open_trace(path))


def finding(lst):
    """The verdict's finding on one listing (for the exports)."""
    from .rules import verdict

    return verdict.judge_listing(lst)


def readdir_events(trace):
    """{event: fields} the readdir analysis reads from this trace (what watch enables)."""
    from .model import tables

    return requested(trace, [tables.load])


def listings_so_far(trace):
    """The readdir analysis of a trace still being read, or None while it has no listing."""
    from .model.analysis import AnalysisError, analyze

    try:
        return analyze(trace)
    except AnalysisError:
        return None


def live_summary(trace, keep=lambda lst: True):
    """(the analysis of a trace read so far, listings kept by keep, or None; its verdict), as
    watch ends."""
    import copy

    from .rules import verdict

    a = listings_so_far(trace)
    if a is not None:
        a = copy.copy(a)  # (the listings kept in a copy: the trace's analysis stays whole)
        a.listings = [lst for lst in a.listings if keep(lst)]
    return a, verdict.judge([a] if a is not None else [])


# ------------------------------------------------------------------------- results directories
def run_dir(path):
    """The results directory of a run given as the directory or as its trace."""
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def dcache_results(path):
    """results.json of a dcache run, made afresh from its trace and facts."""
    from .rules import dcache_judge

    return dcache_judge.build_results(run_dir(path))


def dcache_trace_id(path, results):
    """The trace_id of a dcache run's trace (results: its dcache_results)."""
    return trace_id(os.path.join(run_dir(path), results["trace"]))


def dcache_with_markers(path):
    """(dcache_results(path), the markers of its trace), the trace read once."""
    from .rules import dcache_judge

    return dcache_judge.build(run_dir(path))


def dcache_saved(path):
    """The results of a dcache run as saved in its results.json, else made afresh."""
    saved = os.path.join(run_dir(path), "results.json")
    if os.path.exists(saved):
        import json  # (here: a check need not pay its import)

        with open(saved) as f:
            return json.load(f)
    return dcache_results(path)


def dcache_markers(path):
    """The markers (samples and phases) of a dcache run's trace."""
    from .model import dcache

    return dcache.read_trace(dcache.trace_of(run_dir(path)))[0]


@record
class ReaddirRun:
    """A readdir reproducer's run as its results.json sees it: the analysis of every trace, the
    name check of each phase and the run's READDIR ratio limit."""

    analyses: list
    names: dict
    max_ratio: float

    def judge(self):
        from .rules import verdict

        return verdict.judge(self.analyses, max_ratio=self.max_ratio, names=self.names)


def readdir_run(directory):
    """The ReaddirRun of a readdir reproducer's results directory."""
    analyses = [
        readdir_analysis(trace)[0] for trace in sorted(glob.glob(os.path.join(directory, "*.dat")))
    ]
    return ReaddirRun(analyses, *runs.checks(directory))


def overhead(untraced_median, traced_median, limit):
    """readdir-overhead's verdict: (code, reason, slowdown or None)."""
    from .rules import verdict

    return verdict.judge_overhead(untraced_median, traced_median, limit)
