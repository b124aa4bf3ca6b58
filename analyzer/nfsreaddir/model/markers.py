"""The reproducer's trace markers: run facts, phase boundaries and periodic samples.

Each is one trace_marker write of `nfsrt: ` followed by space-separated key=value pairs
(reproducers/lib/loopback.sh writes them):

    nfsrt: run kernel=5.10.0-46-amd64 nfs=4.1 fs=ext4 files=50000 interval=1
    nfsrt: phase=modified event=start dir_fileid=12
    nfsrt: sample nr_dentry=16974 nr_unused=165 nr_negative=10 slab_active=... readdir=3 ...
    nfsrt: phase=modified event=end status=0 entries=50000

The dcache reproducers add timing, exec, paired and per-phase key=value lines and sample every
counter they write; parse() reads them all, for either analysis.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..recordtype import field, record
from ..units import NS
from .columns import Columns, objects

if TYPE_CHECKING:
    import pandas as pd


def _frame(*args, **kw):
    """A DataFrame, pandas imported here: `record` writes sample markers (sample_text) in guests,
    and `check` reads the counters alone (as Columns); the samples and timings are frames for
    the dcache analysis and the plots, made when they are asked for."""
    import pandas as pd

    return pd.DataFrame(*args, **kw)


def _no_counters():
    return Columns({c: np.zeros(0, dtype=object) for c in ["ts"] + SAMPLE_COLUMNS})


PREFIX = "nfsrt: "
SAMPLE_COLUMNS = [
    "nr_dentry",
    "nr_unused",
    "nr_negative",
    "slab_active",
    "slab_total",
    "slab_objsize",
    "readdir",
    "readdirplus",
]


@record
class Phase:
    """One phase of a reproducer, from its start marker to its end marker, with the key=value
    pairs the two carry (the readdir reproducer's dir_fileid, status and entries; the dcache
    reproducers' counts and seconds)."""

    name: str
    start: int  # ns
    end: int | None = None  # ns; None when the trace stops inside the phase
    pid: int | None = None  # the reproducer's shell, not the lister
    attrs: dict = field(default_factory=dict)  # key=value of the start and end markers

    @property
    def seconds(self):
        return None if self.end is None else (self.end - self.start) / NS

    def _int(self, key):
        v = self.attrs.get(key)
        return v if isinstance(v, int) else None

    @property
    def dir_fileid(self):
        return self._int("dir_fileid")

    @property
    def status(self):
        """The lister's exit status (124: timed out)."""
        return self._int("status")

    @property
    def entries(self):
        return self._int("entries")


@record
class Markers:
    run: dict = field(default_factory=dict)
    phases: list = field(default_factory=list)
    # The readdir reproducer's counters of the samples (SAMPLE_COLUMNS): ts, and each counter
    # an integer or missing ("Int64").
    counters: Columns = field(default_factory=_no_counters)
    # `nfsrt: exec loop=... target=... n=... sys_s=...`: the 2020 thread's exec-of-cat loops
    execs: list = field(default_factory=list)
    # `nfsrt: paired cycle=... step=misses|block ...`: the same loops with the states alternated
    paired: list = field(default_factory=list)
    sample_rows: list = field(default_factory=list, repr=False)  # {key: value} of each sample
    timing_rows: list = field(default_factory=list, repr=False)  # ... of each timing line

    @cached_property
    def samples(self) -> pd.DataFrame:
        """Every key of the sample lines, a row a sample in time order (with slab_bytes where
        the slab's objects and their size were sampled)."""
        if not self.sample_rows:
            return _frame(columns=["ts", "label"])
        df = _frame(self.sample_rows).sort_values("ts", kind="stable").reset_index(drop=True)
        if {"slab_active", "slab_objsize"} <= set(df.columns):
            df["slab_bytes"] = df["slab_active"] * df["slab_objsize"]
        return df

    @cached_property
    def timings(self) -> pd.DataFrame:
        if not self.timing_rows:
            return _frame(columns=["ts", "loop", "target", "n", "ns", "ref_ns"])
        return _frame(self.timing_rows)


def lines(markers_df, column="text"):
    """(ts, pid, words) of each `nfsrt:` line of a markers table; other writes are skipped."""
    if markers_df is None or len(markers_df) == 0:
        return
    pids = markers_df["pid"] if "pid" in markers_df else [None] * len(markers_df)
    for ts, pid, text in zip(markers_df["ts"], pids, markers_df[column]):
        text = str(text).strip()
        if text.startswith(PREFIX):
            words = text[len(PREFIX) :].split()
            if words:
                yield int(ts), pid, words


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
                    words += [f"slab_active={p[1]}", f"slab_total={p[2]}", f"slab_objsize={p[3]}"]
                    break
    except OSError:
        pass
    return PREFIX + "sample " + " ".join(words) + "\n"


def value(v):
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


def _pairs(words, typed=True):
    """{key: value} of the key=value words (values typed by value, or the text as written)."""
    out = {}
    for w in words:
        k, sep, v = w.partition("=")
        if sep:
            out[k] = value(v) if typed else v
    return out


def parse(markers_df):
    """Markers from a table with columns ts, pid and text (or buf: the raw ftrace:print);
    other writes are ignored. Every key of the sample lines is kept, plus the timing and exec
    lines and the key=value pairs of phase markers."""
    m = Markers()
    if markers_df is None or len(markers_df) == 0:
        return m
    col = "text" if "text" in markers_df else "buf"
    samples, counters, timings = m.sample_rows, [], m.timing_rows
    for ts, pid, words in lines(markers_df, col):
        if words[0] == "run":
            m.run.update(_pairs(words[1:], typed=False))
        elif words[0] == "sample":
            kv = _pairs(words[1:])
            counters.append(
                [ts] + [v if isinstance(v := kv.get(c), int) else None for c in SAMPLE_COLUMNS]
            )
            kv["ts"] = ts
            kv.setdefault("label", None)
            samples.append(kv)
        elif words[0] == "exec":
            m.execs.append({"ts": ts, **_pairs(words[1:])})
        elif words[0] == "paired":
            m.paired.append({"ts": ts, **_pairs(words[1:])})
        elif words[0] == "timing":
            kv = _pairs(words[1:])
            for k in ("ns", "ref_ns"):
                v = kv.get(k)
                kv[k] = [float(v)] if isinstance(v, (int, float)) else (v or [])
            kv["ts"] = ts
            timings.append(kv)
        else:
            kv = _pairs(words, typed=False)
            name, event = kv.pop("phase", None), kv.pop("event", None)
            if name is None:
                continue
            kv = {k: value(v) for k, v in kv.items()}
            if event == "start":
                m.phases.append(Phase(name, ts, pid=None if pid is None else int(pid), attrs=kv))
            elif event == "end":
                for p in reversed(m.phases):
                    if p.name == name and p.end is None:
                        p.end = ts
                        p.attrs.update(kv)
                        break
    if counters:
        rows = list(zip(*counters))
        m.counters = Columns(
            {"ts": np.array(rows[0], dtype=np.int64)}
            | {c: objects(list(v)) for c, v in zip(SAMPLE_COLUMNS, rows[1:])},
            {c: "Int64" for c in SAMPLE_COLUMNS},
        )
    return m
