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

import collections
import contextlib
import json
import os

from . import __version__
from .facts import read_facts

# Only disk file systems give names that can be checked: tmpfs directory cookies are positions
# before 6.6, so entries created during a listing shift the others.
NAMES_CHECKED_FS = ("ext4", "xfs")


def _num(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        try:
            return float(v)
        except (TypeError, ValueError):
            return v


def check_names(directory, phase, finished):
    """Duplicates and missing names of a listing against the files created before it; a
    listing that did not finish is only checked for duplicates."""
    with open(os.path.join(directory, "names-expected.txt")) as f:
        expected = set(f.read().split())
    with open(os.path.join(directory, f"names-{phase}.txt")) as f:
        listed = f.read().split()
    counts = collections.Counter(listed)
    dups = sorted(n for n, c in counts.items() if c > 1)
    missing = sorted(expected - counts.keys()) if finished else []
    return {"duplicates": len(dups), "missing": len(missing) if finished else None,
            "duplicate_examples": dups[:10], "missing_examples": missing[:10]}


READDIR_RUNS = ("readdir-loopback", "readdir-multi")


class NotARun(Exception):
    """A directory that is not a reproducer's results directory; the message says what it
    lacks."""


def _require(directory, name):
    """directory/name, or NotARun saying what the directory lacks and what to give instead."""
    path = os.path.join(directory, name)
    if os.path.isfile(path):
        return path
    if not os.path.isdir(directory):
        raise NotARun(f"{directory}: no such directory (give a reproducer's --results "
                      "directory)")
    if name == "results.json" and os.path.isfile(os.path.join(directory, "facts")):
        raise NotARun(f"{directory} has no results.json yet: write it from the run's traces "
                      f"with `nfs-readdir results {directory}`")
    what = "facts file (the run's settings)" if name == "facts" else name
    raise NotARun(f"{directory} is not a reproducer's results directory: it has no {what} "
                  "(the reproducers and vm-run write one into their --results directory)")


def results_json(directory):
    """The path of a run's results.json; NotARun where there is none."""
    return _require(directory, "results.json")


def is_readdir_run(path):
    """True for a results directory of a readdir reproducer (its facts say so)."""
    try:
        with open(os.path.join(path, "facts")) as f:
            return any(line.rstrip("\n") in {f"run.name={n}" for n in READDIR_RUNS}
                       for line in f)
    except OSError:
        return False


def run_checks(directory):
    """What a readdir reproducer's run adds to its traces for the verdict, for results.json and
    `check` alike: the name check of each phase's listing and the run's READDIR ratio limit."""
    facts = read_facts(os.path.join(directory, "facts"))
    run = facts.get("run", {})
    names = {}
    if run.get("fs") in NAMES_CHECKED_FS:
        for phase in facts:
            if os.path.exists(os.path.join(directory, f"names-{phase}.txt")):
                names[phase] = check_names(directory, phase,
                                           finished=facts[phase].get("status") == "0")
    return names, float(run.get("max_ratio") or 1.5)


def analyses_of(directory):
    """The analysis of every trace of a results directory."""
    import glob
    from .analysis import analyze
    from .trace import open_trace
    out = []
    for trace in sorted(glob.glob(os.path.join(directory, "*.dat"))):
        a = analyze(open_trace(trace))
        a.info = dict(a.info, path=trace)
        out.append(a)
    return out


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
    for k in ("restarts", "restarts_min", "restarts_max", "cookie_zero_readdirs",
              "refetched_readdirs", "invalidations", "invalidations_followed_by_restart",
              "invalidations_followed_by_restart_min", "invalidations_followed_by_restart_max",
              "survived_changes", "cache_range_trims", "version_changes", "ending",
              "complete", "exercised", "dentries"):
        out[k] = s[k]
    out["cookies_known"] = a.cookies_known
    out["evidence"] = a.evidence
    return out


def build(directory):
    facts = read_facts(_require(directory, "facts"))
    name = facts.get("run", {}).get("name", "")
    if name.startswith("dcache-"):
        from . import dcache_judge
        return dcache_judge.build_results(directory)
    if name == "readdir-overhead":
        return overhead(facts)
    from . import verdict
    run = {k: _num(v) for k, v in facts.pop("run", {}).items()}
    res = {"analyzer": __version__, **run, "phases": {}}
    try:
        analyses = analyses_of(directory)
        names, max_ratio = run_checks(directory)
    except Exception as e:      # noqa: BLE001 - any failure to read is "could not decide"
        res["analysis_error"] = f"{type(e).__name__}: {e}"
        res["verdict"], res["reasons"] = verdict.RESULT_WORDS[verdict.UNDECIDED], [
            f"the traces could not be analysed: {e}"]
        return res
    for phase, pf in facts.items():
        res["phases"][phase] = phase_result(phase, pf, analyses)
        res["phases"][phase].update(names.get(phase, {}))
    res["names_checked"] = run.get("fs") in NAMES_CHECKED_FS
    res["listings"] = [dict(lst.summary(), trace=os.path.basename(a.info.get("path", "")))
                       for a in analyses for lst in a.listings]
    ph = res["phases"]
    if "idle" in ph and "modified" in ph:
        res["readdir_ratio"] = round(ph["modified"]["readdir_rpcs"]
                                     / max(ph["idle"]["readdir_rpcs"], 1), 2)
    v = verdict.judge(analyses, max_ratio=max_ratio, names=names)
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
    from . import verdict
    run = {k: _num(v) for k, v in facts.pop("run", {}).items()}
    res = {"analyzer": __version__, **run}
    for kind in ("untraced", "traced"):
        times = [float(v) for k, v in sorted(facts.get(kind, {}).items())]
        res[kind] = {"seconds": times,
                     "median": round(statistics.median(times), 3) if times else None}
    code, text, slowdown = verdict.judge_overhead(res["untraced"]["median"],
                                                  res["traced"]["median"],
                                                  float(res.get("max_slowdown", 1.10)))
    if slowdown is not None:
        res["slowdown"] = slowdown
    res["verdict"], res["reasons"] = verdict.RESULT_WORDS[code], [text]
    return res


TABLE_ROWS = [("time (s)", "seconds"), ("READDIR RPCs", "readdir_rpcs"),
              ("invalidations", "invalidations"), ("restarts at cookie 0", "restarts"),
              ("entries listed", "entries"), ("timed out", "timed_out"),
              ("duplicate names", "duplicates"), ("missing names", "missing")]


def _cell(phase, key):
    """A phase's figure for the table: '-' where unknown, the bounds where only they are."""
    v = phase.get(key)
    lo, hi = phase.get(f"{key}_min"), phase.get(f"{key}_max")
    if v is None and lo is not None and hi is not None:
        return f"{lo}-{hi}"
    return "-" if v is None else v


def table(dirs):
    """The runs of several results directories side by side, one column per kernel and phase."""
    import pandas as pd
    cols, verdicts = {}, []
    for d in dirs:
        with open(results_json(d)) as f:
            res = json.load(f)
        kernel = res.get("kernel", d)
        for phase, p in res["phases"].items():
            cols[(kernel, phase)] = [_cell(p, key) for _, key in TABLE_ROWS]
        verdicts.append(f"{kernel}: {res['verdict']}: " + "; ".join(res["reasons"]))
        head = (f"NFSv{res.get('nfs')}, {res.get('files')} files on {res.get('fs')}, "
                f"a file added every {res.get('interval')}s during 'modified'")
    df = pd.DataFrame(cols, index=[label for label, _ in TABLE_ROWS])
    return head + "\n\n" + df.to_string() + "\n\n" + "\n".join(verdicts)
