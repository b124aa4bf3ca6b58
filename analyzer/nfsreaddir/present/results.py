"""Reproducers' runs side by side, from their saved results.json (runresults.py makes them):

    nfs-readdir results --table DIR... the runs side by side (kernels, phases)

readdir runs in one table, a column per run and phase; dcache and overhead runs each in a
section of their own. Everything here is handed the results it shows: it reads no file.
"""

import os

from .. import runs

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


def table(loaded):
    """The runs of several results directories side by side, loaded: (directory, its kind
    (runs.kind), its results.json read) of each. Readdir runs in one table, a column per run and
    phase, each run's settings above it; dcache and overhead runs each in a section of their own
    (their phases are not listings; an overhead run times idle listings traced against
    untraced)."""
    import pandas as pd

    from .render import dcache_report

    readdir = [(d, r) for d, k, r in loaded if k not in (runs.DCACHE, runs.OVERHEAD)]
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
    for d, k, r in loaded:
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
