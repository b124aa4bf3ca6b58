"""The reproducer's trace markers: run facts, phase boundaries and periodic samples.

Each is one trace_marker write of `nfsrt: ` followed by space-separated key=value pairs
(reproducers/lib/loopback.sh writes them):

    nfsrt: run kernel=5.10.0-46-amd64 nfs=4.1 fs=ext4 files=50000 interval=1
    nfsrt: phase=modified event=start dir_fileid=12
    nfsrt: sample nr_dentry=16974 nr_unused=165 nr_negative=10 slab_active=... readdir=3 ...
    nfsrt: phase=modified event=end status=0 entries=50000
"""

from dataclasses import dataclass, field

import pandas as pd

PREFIX = "nfsrt: "
SAMPLE_COLUMNS = ["nr_dentry", "nr_unused", "nr_negative", "slab_active", "slab_total",
                  "slab_objsize", "readdir", "readdirplus"]


@dataclass
class Phase:
    name: str
    start: int                      # ns
    end: int | None = None          # ns; None when the trace stops inside the phase
    pid: int | None = None          # the reproducer's shell, not the lister
    dir_fileid: int | None = None
    status: int | None = None       # the lister's exit status (124: timed out)
    entries: int | None = None


@dataclass
class Markers:
    run: dict = field(default_factory=dict)
    phases: list = field(default_factory=list)
    samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=["ts"] + SAMPLE_COLUMNS))


def _pairs(words):
    out = {}
    for w in words:
        k, sep, v = w.partition("=")
        if sep:
            out[k] = v
    return out


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def lines(markers_df, column="text"):
    """(ts, pid, words) of each `nfsrt:` line of a markers table; other writes are skipped."""
    if markers_df is None or len(markers_df) == 0:
        return
    pids = markers_df["pid"] if "pid" in markers_df else [None] * len(markers_df)
    for ts, pid, text in zip(markers_df["ts"], pids, markers_df[column]):
        text = str(text).strip()
        if text.startswith(PREFIX):
            words = text[len(PREFIX):].split()
            if words:
                yield int(ts), pid, words


def parse(markers_df):
    """Markers from the canonical `markers` table (ts, pid, text); other writes are ignored."""
    m = Markers()
    rows = []
    for ts, pid, words in lines(markers_df):
        if words[0] == "run":
            m.run.update(_pairs(words[1:]))
        elif words[0] == "sample":
            kv = _pairs(words[1:])
            rows.append([int(ts)] + [_int(kv.get(c)) for c in SAMPLE_COLUMNS])
        else:
            kv = _pairs(words)
            if "phase" not in kv:
                continue
            if kv.get("event") == "start":
                m.phases.append(Phase(kv["phase"], int(ts), pid=int(pid),
                                      dir_fileid=_int(kv.get("dir_fileid"))))
            elif kv.get("event") == "end":
                for p in reversed(m.phases):
                    if p.name == kv["phase"] and p.end is None:
                        p.end, p.status, p.entries = int(ts), _int(kv.get("status")), _int(
                            kv.get("entries"))
                        break
    if rows:
        m.samples = pd.DataFrame(rows, columns=["ts"] + SAMPLE_COLUMNS).astype(
            {c: "Int64" for c in SAMPLE_COLUMNS})
    return m


def sample_text():
    """One `sample` marker of the dcache now (the keys lb_sample writes, without the mounts'
    READDIR counts): /proc/sys/fs/dentry-state and the dentry line of /proc/slabinfo."""
    with open("/proc/sys/fs/dentry-state") as f:
        d = f.read().split()
    words = [f"nr_dentry={d[0]}", f"nr_unused={d[1]}", f"nr_negative={d[4]}"]
    try:
        with open("/proc/slabinfo") as f:
            for line in f:
                p = line.split()
                if p and p[0] == "dentry":
                    words += [f"slab_active={p[1]}", f"slab_total={p[2]}",
                              f"slab_objsize={p[3]}"]
                    break
    except OSError:
        pass
    return PREFIX + "sample " + " ".join(words) + "\n"
