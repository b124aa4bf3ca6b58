"""The reproducer's results directory judged: its results.json and PASS/FAIL verdict.

    nfs-readdir results DIR            write DIR/results.json
    nfs-readdir results --verdict DIR  print the PASS/FAIL line of DIR/results.json

(`python3 -m nfsreaddir results ...` where the package is importable but not installed, as in
the reproducers' guests.)

The reproducer leaves `facts` (key=value lines: run settings, per-phase timings and READDIR
counts from /proc/self/mountstats), one trace.dat and one sorted names file per phase. The
traces are analysed through the pipeline, so results.json and `nfs-readdir analyze` never
disagree. present/results.py puts saved results side by side; it reads no trace.
"""

import contextlib
import json
import os

from . import __version__, runs
from .facts import read_facts
from .status import UNDECIDED, result_word


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
    from . import pipeline

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

    from . import pipeline

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
