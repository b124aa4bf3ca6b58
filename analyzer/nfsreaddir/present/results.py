"""The reproducer's results directory: results.json and its PASS/FAIL verdict.

    nfs-readdir results DIR            write DIR/results.json
    nfs-readdir results --verdict DIR  print the PASS/FAIL line of DIR/results.json
    nfs-readdir results --table DIR... the runs side by side (kernels, phases)

(`python3 -m nfsreaddir results ...` where the package is importable but not installed, as in
the reproducers' guests.)

The reproducer leaves `facts` (key=value lines: run settings, per-phase timings and READDIR
counts from /proc/self/mountstats), one trace.dat and one sorted names file per phase. The
traces are analysed here, so results.json and `nfs-readdir analyze` never disagree.
"""

import contextlib
import json
import os

from .. import __version__, runs
from ..facts import read_facts
from ..status import UNDECIDED, result_word


def _num(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        try:
            return float(v)
        except (TypeError, ValueError):
            return v


def phase_result(phase, facts, analyses):
    out = {k: _num(v) for k, v in facts.items()}
    out["readdir_rpcs"] = out.get("readdir", 0) + out.get("readdirplus", 0)
    out["timed_out"] = bool(out.get("timed_out"))
    found = [(a, x) for a in analyses for x in a.listings if x.phase == phase]
    if not found:
        out["analysis_error"] = f"no {phase} listing in the traces"
        return out
    a, lst = found[0]
    s = lst.summary()
    out["trace"] = os.path.basename(a.info.get("path", ""))
    out["trace_readdirs"] = s["readdirs"]
    for k in (
        "restarts",
        "restarts_min",
        "restarts_max",
        "cookie_zero_readdirs",
        "refetched_readdirs",
        "invalidations",
        "invalidations_followed_by_restart",
        "invalidations_followed_by_restart_min",
        "invalidations_followed_by_restart_max",
        "survived_changes",
        "cache_range_trims",
        "version_changes",
        "ending",
        "complete",
        "exercised",
        "dentries",
    ):
        out[k] = s[k]
    out["cookies_known"] = a.cookies_known
    out["evidence"] = a.evidence
    return out


def build(directory):
    facts = read_facts(runs.require(directory, "facts"))
    # (the analyses load pandas: a directory that is no run never pays for it)
    from .. import pipeline

    kind = runs.kind(directory)
    if kind == runs.DCACHE:
        return pipeline.dcache_results(directory)
    if kind == runs.OVERHEAD:
        return overhead(facts)
    run = {k: _num(v) for k, v in facts.pop("run", {}).items()}
    res = {"analyzer": __version__, **run, "phases": {}}
    try:
        found = pipeline.readdir_run(directory)
    except Exception as e:  # noqa: BLE001 - any failure to read is "could not decide"
        res["analysis_error"] = f"{type(e).__name__}: {e}"
        res["verdict"], res["reasons"] = (
            result_word(UNDECIDED),
            [f"the traces could not be analysed: {e}"],
        )
        return res
    analyses, names = found.analyses, found.names
    for phase, pf in facts.items():
        res["phases"][phase] = phase_result(phase, pf, analyses)
        res["phases"][phase].update(names.get(phase, {}))
    res["names_checked"] = run.get("fs") in runs.NAMES_CHECKED_FS
    res["listings"] = [
        dict(
            lst.summary(),
            trace=os.path.basename(a.info.get("path", "")),
            trace_id=a.info["trace_id"],
            listing=i,
        )
        for a in analyses
        for i, lst in enumerate(a.listings)
    ]
    ph = res["phases"]
    if "idle" in ph and "modified" in ph:
        res["readdir_ratio"] = round(
            ph["modified"]["readdir_rpcs"] / max(ph["idle"]["readdir_rpcs"], 1), 2
        )
    v = found.judge()
    res["verdict"], res["reasons"] = v.result, [v.reason]
    res["exit"] = v.code
    return res


def write(directory):
    """Write directory/results.json afresh from its traces and facts (build), whole or not at
    all; a write that fails names the file."""
    res = build(directory)
    path = os.path.join(directory, "results.json")
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(res, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(path + ".tmp", path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(path + ".tmp")
        e.filename = path
        raise
    return path


def overhead(facts):
    """readdir-overhead: median listing time traced against untraced, from the same run."""
    import statistics

    from .. import pipeline

    run = {k: _num(v) for k, v in facts.pop("run", {}).items()}
    res = {"analyzer": __version__, **run}
    for kind in ("untraced", "traced"):
        times = [float(v) for k, v in sorted(facts.get(kind, {}).items())]
        res[kind] = {
            "seconds": times,
            "median": round(statistics.median(times), 3) if times else None,
        }
    code, text, slowdown = pipeline.overhead(
        res["untraced"]["median"], res["traced"]["median"], float(res.get("max_slowdown", 1.10))
    )
    if slowdown is not None:
        res["slowdown"] = slowdown
    res["verdict"], res["reasons"] = result_word(code), [text]
    return res


TABLE_ROWS = [
    # The reproducer's clock: from starting the lister to its exit (mount, exec and the last
    # getdents included).
    ("lister's run (s)", "seconds"),
    # The trace's: from the listing's first event in the phase to its close, as analyze shows it.
    ("listing in trace (s)", "trace_seconds"),
    ("READDIR RPCs", "readdir_rpcs"),
    ("invalidations", "invalidations"),
    ("restarts", "restarts"),
    ("entries listed", "entries"),
    ("timed out", "timed_out"),
    ("duplicate names", "duplicates"),
    ("missing names", "missing"),
]


def _cell(phase, key):
    """A phase's figure for the table: '-' where unknown, the bounds where only they are."""
    v = phase.get(key)
    lo, hi = phase.get(f"{key}_min"), phase.get(f"{key}_max")
    if v is None and lo is not None and hi is not None:
        return f"{lo}-{hi}"
    return "-" if v is None else v


def _trace_seconds(res, phase):
    """The time analyze gives the phase's listing (results.json's listings), or None."""
    found = [x["seconds"] for x in res.get("listings", []) if x.get("phase") == phase]
    return round(found[0], 3) if found else None


def _names(dirs, kernels):
    """A column name per run: its kernel, and its directory where runs share a kernel, so
    that no run hides another."""
    shared = {k for k in kernels if kernels.count(k) > 1}
    names = [
        f"{k} ({os.path.basename(os.path.normpath(d))})" if k in shared else k
        for d, k in zip(dirs, kernels)
    ]
    return [n if names.count(n) == 1 else f"{n} #{i + 1}" for i, n in enumerate(names)]


def table(dirs):
    """The runs of several results directories side by side: readdir runs in one table, a
    column per run and phase, each run's settings above it; dcache and overhead runs each in a
    section of their own (their phases are not listings; an overhead run times idle listings
    traced against untraced)."""
    import pandas as pd

    from .render import dcache_report

    loaded = []
    for d in dirs:
        with open(runs.results_json(d)) as f:
            loaded.append((d, json.load(f)))
    kinds = [runs.kind(d) for d, _ in loaded]
    readdir = [x for x, k in zip(loaded, kinds) if k not in (runs.DCACHE, runs.OVERHEAD)]
    names = _names([d for d, _ in readdir], [r.get("kernel", d) for d, r in readdir])
    cols, heads, verdicts = {}, [], []
    for name, (_, res) in zip(names, readdir):
        for phase, p in res["phases"].items():
            p = dict(p, trace_seconds=_trace_seconds(res, phase))
            cols[(name, phase)] = [_cell(p, key) for _, key in TABLE_ROWS]
        verdicts.append(f"{name}: {res['verdict']}: " + "; ".join(res["reasons"]))
        heads.append(
            f"{name}: NFSv{res.get('nfs')}, {res.get('files')} files on {res.get('fs')}, "
            f"a file added every {res.get('interval')}s during 'modified'"
        )
    parts = []
    if readdir:
        df = pd.DataFrame(cols, index=[label for label, _ in TABLE_ROWS])
        parts.append("\n".join(heads) + "\n\n" + df.to_string() + "\n\n" + "\n".join(verdicts))
    for (d, r), k in zip(loaded, kinds):
        if k == runs.DCACHE:
            parts.append(f"{d}: " + dcache_report(r))
        elif k == runs.OVERHEAD:
            parts.append(f"{d}: " + overhead_report(r))
    return "\n\n".join(parts)


def overhead_report(res):
    """A readdir-overhead run as text: its verdict, then the listing times of each repetition,
    untraced and traced, and their medians (what the verdict compares)."""
    import pandas as pd

    rows = {
        kind: {
            **{f"run {i}": t for i, t in enumerate(res[kind]["seconds"], 1)},
            "median": res[kind]["median"],
        }
        for kind in ("untraced", "traced")
        if kind in res
    }
    head = (
        f"{res.get('name')} on {res.get('kernel')}: {res.get('verdict')}: "
        + "; ".join(res.get("reasons", []))
        + f"\nNFSv{res.get('nfs')}, {res.get('files')} files on {res.get('fs')}, "
        f"{res.get('repeat')} idle listings each way, recorders {res.get('recorders')}"
    )
    table = pd.DataFrame(rows).T.to_string(na_rep="-")
    return f"{head}\n\nlisting time (s):\n{table}\n"
