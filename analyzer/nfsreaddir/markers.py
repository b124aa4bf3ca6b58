"""The reproducer's trace markers: run facts, phase boundaries and periodic samples.

Each is one trace_marker write of `nfsrt: ` followed by space-separated key=value pairs
(reproducers/lib/loopback.sh writes them):

    nfsrt: run kernel=5.10.0-46-amd64 nfs=4.1 fs=ext4 files=50000 interval=1
    nfsrt: phase=modified event=start dir_fileid=12
    nfsrt: sample nr_dentry=16974 nr_unused=165 nr_negative=10 slab_active=... readdir=3 ...
    nfsrt: phase=modified event=end status=0 entries=50000

parse() reads the readdir reproducer's; parse_dcache() the dcache reproducers', which add
timing, exec and per-phase key=value lines and sample every counter they write.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from .units import NS, int_or_none

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
            rows.append([int(ts)] + [int_or_none(kv.get(c)) for c in SAMPLE_COLUMNS])
        else:
            kv = _pairs(words)
            if "phase" not in kv:
                continue
            if kv.get("event") == "start":
                m.phases.append(Phase(kv["phase"], int(ts), pid=int(pid),
                                      dir_fileid=int_or_none(kv.get("dir_fileid"))))
            elif kv.get("event") == "end":
                for p in reversed(m.phases):
                    if p.name == kv["phase"] and p.end is None:
                        p.end = int(ts)
                        p.status = int_or_none(kv.get("status"))
                        p.entries = int_or_none(kv.get("entries"))
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


# The dcache reproducers' markers: every sample key, timings, execs, phase key=value pairs.
@dataclass
class DPhase:
    name: str
    start: int                      # ns
    end: int | None = None          # None: the trace stops inside the phase
    attrs: dict = field(default_factory=dict)   # key=value of the start and end markers

    @property
    def seconds(self):
        return None if self.end is None else (self.end - self.start) / NS


@dataclass
class DcacheMarkers:
    run: dict = field(default_factory=dict)
    phases: list = field(default_factory=list)
    samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["ts", "label"]))
    timings: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=["ts", "loop", "target", "n", "ns", "ref_ns"]))
    # `nfsrt: exec loop=... target=... n=... sys_s=...`: the 2020 thread's exec-of-cat loops
    execs: list = field(default_factory=list)


def _value(v):
    """int, float, or list of floats (comma-separated), else the string."""
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        pass
    if "," in v:
        try:
            return [float(x) for x in v.split(",") if x]
        except ValueError:
            pass
    return v


def _dcache_pairs(words):
    out = {}
    for w in words:
        k, sep, v = w.partition("=")
        if sep:
            out[k] = _value(v)
    return out


def parse_dcache(markers_df):
    """DcacheMarkers from a table with columns ts and text (or buf): every key of the sample
    lines is kept (markers.parse keeps only the readdir reproducer's), plus timing lines and
    the key=value pairs of phase markers."""
    m = DcacheMarkers()
    if markers_df is None or len(markers_df) == 0:
        return m
    col = "text" if "text" in markers_df else "buf"
    samples, timings = [], []
    for ts, _, words in lines(markers_df, col):
        if words[0] == "run":
            m.run.update({k: v for k, v in (w.partition("=")[::2] for w in words[1:]) if v})
        elif words[0] == "sample":
            kv = _dcache_pairs(words[1:])
            kv["ts"] = ts
            kv.setdefault("label", None)
            samples.append(kv)
        elif words[0] == "exec":
            m.execs.append({"ts": ts, **_dcache_pairs(words[1:])})
        elif words[0] == "timing":
            kv = _dcache_pairs(words[1:])
            for k in ("ns", "ref_ns"):
                v = kv.get(k)
                kv[k] = [float(v)] if isinstance(v, (int, float)) else (v or [])
            kv["ts"] = ts
            timings.append(kv)
        else:
            kv = _dcache_pairs(words)
            name, event = kv.pop("phase", None), kv.pop("event", None)
            if name is None:
                continue
            name = str(name)
            if event == "start":
                m.phases.append(DPhase(name, ts, attrs=kv))
            elif event == "end":
                for p in reversed(m.phases):
                    if p.name == name and p.end is None:
                        p.end = ts
                        p.attrs.update(kv)
                        break
    if samples:
        df = pd.DataFrame(samples).sort_values("ts", kind="stable").reset_index(drop=True)
        if {"slab_active", "slab_objsize"} <= set(df.columns):
            df["slab_bytes"] = df["slab_active"] * df["slab_objsize"]
        m.samples = df
    if timings:
        m.timings = pd.DataFrame(timings)
    return m
