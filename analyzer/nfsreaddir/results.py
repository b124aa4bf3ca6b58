"""The reproducer's results directory: results.json and its PASS/FAIL verdict.

    python3 -m nfsreaddir.results DIR            write DIR/results.json
    python3 -m nfsreaddir.results --verdict DIR  print the PASS/FAIL line of DIR/results.json
    python3 -m nfsreaddir.results --table DIR... the runs side by side (kernels, phases)

The reproducer leaves `facts` (key=value lines: run settings, per-phase timings and READDIR
counts from /proc/self/mountstats), one trace.dat and one sorted names file per phase. The
traces are analysed here, so results.json and `nfs-readdir analyze` never disagree.
"""

import argparse
import collections
import json
import os
import sys

from . import __version__

# Only disk file systems give names that can be checked: tmpfs directory cookies are positions
# before 6.6, so entries created during a listing shift the others.
NAMES_CHECKED_FS = ("ext4", "xfs")


def read_facts(path):
    facts = collections.defaultdict(dict)
    with open(path) as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("=")
            if not sep:
                continue
            group, _, name = key.partition(".")
            facts[group][name] = value
    return facts


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
    listing stopped by its timeout is only checked for duplicates."""
    with open(os.path.join(directory, "names-expected.txt")) as f:
        expected = set(f.read().split())
    with open(os.path.join(directory, f"names-{phase}.txt")) as f:
        listed = f.read().split()
    counts = collections.Counter(listed)
    dups = sorted(n for n, c in counts.items() if c > 1)
    missing = sorted(expected - counts.keys()) if finished else []
    return {"duplicates": len(dups), "missing": len(missing) if finished else None,
            "duplicate_examples": dups[:10], "missing_examples": missing[:10]}


def phase_result(directory, phase, facts):
    # Imported here: --verdict and --table need no pandas, which is slow to load in a guest.
    from .analysis import AnalysisError, analyze
    from .trace import TraceError, open_trace
    out = {k: _num(v) for k, v in facts.items()}
    out["readdir_rpcs"] = out.get("readdir", 0) + out.get("readdirplus", 0)
    out["timed_out"] = bool(out.get("timed_out"))
    trace = os.path.join(directory, f"{phase}.dat")
    out["trace"] = os.path.basename(trace)
    try:
        a = analyze(open_trace(trace))
        lst = next((x for x in a.listings if x.phase == phase), None)
        if lst is None:
            raise AnalysisError(f"no {phase} listing in {trace}")
        s = lst.summary()
        out["trace_readdirs"] = s["readdirs"]
        for k in ("restarts", "cookie_zero_readdirs", "refetched_readdirs", "invalidations",
                  "invalidations_followed_by_restart", "cache_range_trims", "dentries"):
            out[k] = s[k]
        out["cookies_known"] = a.cookies_known
        out["evidence"] = a.evidence
    except (TraceError, AnalysisError) as e:
        out["analysis_error"] = str(e)
    return out


def build(directory):
    facts = read_facts(os.path.join(directory, "facts"))
    name = facts.get("run", {}).get("name", "")
    if name.startswith("dcache-"):
        from . import dcache
        return dcache.build_results(directory)
    if name == "readdir-overhead":
        return overhead(facts)
    run = {k: _num(v) for k, v in facts.pop("run", {}).items()}
    res = {"analyzer": __version__, **run, "phases": {}}
    for phase, pf in facts.items():
        res["phases"][phase] = phase_result(directory, phase, pf)
        if run.get("fs") in NAMES_CHECKED_FS:
            res["phases"][phase].update(check_names(
                directory, phase, finished=not res["phases"][phase]["timed_out"]))
    res["names_checked"] = run.get("fs") in NAMES_CHECKED_FS
    res["verdict"], res["reasons"] = judge(res)
    return res


def overhead(facts):
    """readdir-overhead: median listing time traced against untraced, from the same run."""
    import statistics
    run = {k: _num(v) for k, v in facts.pop("run", {}).items()}
    res = {"analyzer": __version__, **run}
    for kind in ("untraced", "traced"):
        times = [float(v) for k, v in sorted(facts.get(kind, {}).items())]
        res[kind] = {"seconds": times,
                     "median": round(statistics.median(times), 3) if times else None}
    u, t = res["untraced"]["median"], res["traced"]["median"]
    if not (u and t):
        res["verdict"], res["reasons"] = "FAIL", ["no listing of one kind was timed"]
        return res
    res["slowdown"] = round(t / u, 3)
    limit = float(res.get("max_slowdown", 1.10))
    what = (f"traced listing median {t:.3f}s against {u:.3f}s untraced "
            f"({(res['slowdown'] - 1) * 100:+.1f}%, limit {(limit - 1) * 100:+.0f}%)")
    res["verdict"], res["reasons"] = ("PASS" if res["slowdown"] <= limit else "FAIL"), [what]
    return res


# Without cookies, a ratio of small counts means little: 6.1 spends one READDIR per
# invalidation to continue a listing, 3 against 9 on a small directory. Ask for both.
MIN_EXTRA_READDIRS = 10


def judge(res):
    """FAIL when the modified listing restarts at cookie 0 (or, where the trace has no cookies,
    needs clearly more READDIRs than the idle one), does not finish, or (on a disk file
    system) repeats or loses a name."""
    ph = res["phases"]
    reasons = []
    ratio_max = float(res.get("max_ratio", 1.5))
    for name, p in ph.items():
        if p.get("timed_out"):
            reasons.append(f"{name} listing did not finish within {res.get('timeout')}s")
        if p.get("duplicates") or p.get("missing"):
            reasons.append(f"{name} listing: {p['duplicates']} duplicate and "
                           f"{p['missing'] or 0} missing names")
        if p.get("restarts"):
            reasons.append(f"{name} listing restarted {p['restarts']} times at cookie 0 "
                           f"after {p.get('invalidations_followed_by_restart', 0)} "
                           f"invalidations ({p['readdir_rpcs']} READDIRs)")
    if "idle" in ph and "modified" in ph:
        idle, mod = ph["idle"]["readdir_rpcs"], ph["modified"]["readdir_rpcs"]
        res["readdir_ratio"] = round(mod / max(idle, 1), 2)
        if (not ph["modified"].get("cookies_known") and res["readdir_ratio"] > ratio_max
                and mod - idle >= MIN_EXTRA_READDIRS):
            reasons.append(f"modified listing needed {mod} READDIRs against {idle} idle "
                           f"({res['readdir_ratio']}x > {ratio_max}x)")
    if reasons:
        return "FAIL", reasons
    ok = ["no restart at cookie 0" if any(p.get("cookies_known") for p in ph.values())
          else "READDIR cookies not traced"]
    if "readdir_ratio" in res:
        ok.append(f"modified/idle READDIRs {res['readdir_ratio']}x")
    return "PASS", ok


TABLE_ROWS = [("time (s)", "seconds"), ("READDIR RPCs", "readdir_rpcs"),
              ("invalidations", "invalidations"), ("restarts at cookie 0", "restarts"),
              ("entries listed", "entries"), ("timed out", "timed_out"),
              ("duplicate names", "duplicates"), ("missing names", "missing")]


def table(dirs):
    """The runs of several results directories side by side, one column per kernel and phase."""
    import pandas as pd
    cols, verdicts = {}, []
    for d in dirs:
        with open(os.path.join(d, "results.json")) as f:
            res = json.load(f)
        kernel = res.get("kernel", d)
        for phase, p in res["phases"].items():
            cols[(kernel, phase)] = [p.get(key) if p.get(key) is not None else "-"
                                     for _, key in TABLE_ROWS]
        verdicts.append(f"{kernel}: {res['verdict']}: " + "; ".join(res["reasons"]))
        head = (f"NFSv{res.get('nfs')}, {res.get('files')} files on {res.get('fs')}, "
                f"a file added every {res.get('interval')}s during 'modified'")
    df = pd.DataFrame(cols, index=[label for label, _ in TABLE_ROWS])
    return head + "\n\n" + df.to_string() + "\n\n" + "\n".join(verdicts)


def main(argv=None):
    p = argparse.ArgumentParser(prog="nfsreaddir.results", description=__doc__.split("\n\n")[0])
    p.add_argument("--verdict", action="store_true", help="print the verdict line only")
    p.add_argument("--table", action="store_true", help="print the runs side by side")
    p.add_argument("dir", nargs="+")
    args = p.parse_args(argv)
    if args.table:
        try:
            print(table(args.dir))
        except (OSError, ValueError, KeyError) as e:
            print(f"nfsreaddir.results: cannot tabulate: {e}", file=sys.stderr)
            return 1
        return 0
    if len(args.dir) > 1:
        p.error("one DIR unless --table")
    args.dir = args.dir[0]
    path = os.path.join(args.dir, "results.json")
    if args.verdict:
        try:
            with open(path) as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            print(f"NORESULT: cannot read {path}: {e}")
            return 1
        print(f"{res['verdict']}: " + "; ".join(res["reasons"]))
        return 0
    try:
        res = build(args.dir)
    except OSError as e:
        print(f"nfsreaddir.results: {e}", file=sys.stderr)
        return 1
    with open(path + ".tmp", "w") as f:
        json.dump(res, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
