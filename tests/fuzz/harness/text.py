"""atheris harness of the reader of `trace-cmd report` text (nfsreaddir/trace/text.py): the
input is a report text, read as a trace is read (its header, the event names and counts, then
every field of some events).  Bad text must end in the reader's one-sentence
errors (TraceError, Damage), never in another exception.

Usage (as libFuzzer's): .venv/bin/python tests/fuzz/harness/text.py [libFuzzer flags] CORPUS..."""

import os
import sys
import tempfile

import atheris

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "analyzer")
)

import pandas  # noqa: E402,F401  (imported before the instrumented ones: not instrumented)

with atheris.instrument_imports(include=["nfsreaddir.trace"]):
    from nfsreaddir.trace import text
    from nfsreaddir.trace.base import TraceError
    from nfsreaddir.trace.raw import Damage

# the input as a file (the reader reads a path), in memory where there is /dev/shm
PATH = os.path.join(
    tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None), "report"
)


def one(data):
    with open(PATH, "wb") as f:
        f.write(data)
    try:
        t = text.ReportText(PATH)
        names = sorted(t.event_names())[:6]
        t.event_counts()
        t.read_columns(names, on_damage="partial")
    except (TraceError, Damage):
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
