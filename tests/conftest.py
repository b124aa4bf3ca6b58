import contextlib
import fcntl
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import traceback

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(TOP, "tests", "fixtures")
NFS_READDIR = [sys.executable, "-m", "nfsreaddir.cli"]


def fixture_dirs(reproducer="readdir-loopback"):
    """The fixture directories recorded by one reproducer (run.name in their facts). Runs
    recorded with captures (*-cap) are judged by test_capture.py, against their own traces."""
    out = []
    for d in sorted(os.listdir(FIXTURES)):
        if d.endswith("-cap"):
            continue
        facts = os.path.join(FIXTURES, d, "facts")
        if os.path.exists(os.path.join(FIXTURES, d, "COMMAND")) and os.path.exists(facts):
            with open(facts) as f:
                if f"run.name={reproducer}\n" in f.read():
                    out.append(d)
    return out


def key_values(path):
    """{KEY: VALUE} of a fixture's facts or TRUTH file: KEY=VALUE lines, # comments."""
    out = {}
    with open(path) as f:
        for ln in f:
            ln = ln.strip()
            if ln and not ln.startswith("#"):
                k, sep, v = ln.partition("=")
                assert sep, f"{path}: not KEY=VALUE: {ln!r}"
                out[k] = v
    return out


@pytest.fixture(params=fixture_dirs())
def fixture(request):
    """One recorded run: its directory, name and results.json."""
    d = os.path.join(FIXTURES, request.param)
    with open(os.path.join(d, "results.json")) as f:
        return {"name": request.param, "dir": d, "results": json.load(f)}


# What drives the running kernel (tracefs, trace-cmd, signals) runs as a process, always.
PROCESS_COMMANDS = {"record", "watch"}


def run_cli(*args, check=None, process=False):
    """nfs-readdir as a user runs it: its exit status and both streams. The analyzer's own
    commands run in this process through cli.main, the function the console script calls (one
    import of Python, pandas and the analyzer serves the session), with file descriptors 1 and
    2 on files, so that what any part of it writes there is caught; record and watch, or
    process=True, run as a process."""
    args = [str(a) for a in args]
    if process or PROCESS_COMMANDS & set(args[:1]):
        p = subprocess.run(NFS_READDIR + args, text=True, capture_output=True, timeout=600)
    else:
        p = _run_main(args)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def _run_main(args):
    """cli.main(args) as `python -m nfsreaddir.cli ARGS` runs it: a CompletedProcess of its exit
    status (an exception that escapes is a traceback on stderr and status 1, as in a process)
    and its output decoded as text=True decodes it."""
    from nfsreaddir import cli

    streams, fds = (sys.stdout, sys.stderr), (os.dup(1), os.dup(2))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        for s in streams:
            s.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout, sys.stderr = open(os.dup(1), "w"), open(os.dup(2), "w")
        try:
            code = cli.main(args)
        except SystemExit as e:  # argparse refusing the words
            code = e.code
        except Exception:  # noqa: BLE001 (what the interpreter would print)
            traceback.print_exc()
            code = 1
        finally:
            for s in (sys.stdout, sys.stderr):
                try:
                    s.close()
                except OSError:
                    pass
            sys.stdout, sys.stderr = streams
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in fds:
                os.close(fd)
        if isinstance(code, str):  # SystemExit("message"): printed, status 1
            err.seek(0, os.SEEK_END)
            err.write(code.encode() + b"\n")
            code = 1
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            NFS_READDIR + args, code or 0, out.read().decode(), err.read().decode()
        )


def installed(tool):
    """The path of a tool the tests run. Missing is a failure, not a skip: `make test` installs
    every one (reproducers/setup-host), so its absence is a broken setup, and a skipped test
    would pass in silence."""
    path = shutil.which(tool)
    if not path:
        pytest.fail(f"{tool} is not installed: run reproducers/setup-host", pytrace=False)
    return path


def needs_setup(available, what):
    """Mark a test that needs WHAT, which reproducers/setup-host installs, builds or mounts:
    without it the test fails (pytest_runtest_setup), for the reason `installed` gives."""
    return pytest.mark.needs_setup(bool(available), what)


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs_setup"):
        available, what = mark.args
        if not available:
            pytest.fail(f"{what}: run reproducers/setup-host (as root)", pytrace=False)


# The lock every part of the project takes while it changes the host's top-level tracefs state
# and puts it back (analyzer/bench/make-trace takes it too): two tests on two workers, or in two
# checkouts, would otherwise each put back what they saw while the other had it changed.
TRACEFS_LOCK = "/run/lock/nfs-readdir-trace.tracefs"


@contextlib.contextmanager
def host_tracefs():
    """The host's tracefs to change and put back, no other user of the lock changing it."""
    with open(TRACEFS_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def no_tracefs():
    """Fail the test: the host's tracefs is not writable. setup-host mounts it, and `make
    test` runs as root, so this is a broken setup."""
    pytest.fail(
        "tracefs is not writable at /sys/kernel/tracing (needs root, and tracefs "
        "mounted): run reproducers/setup-host as root",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def trace_cmd():
    return installed("trace-cmd")


@pytest.fixture(scope="session")
def editcap():
    return installed("editcap")


# `trace-cmd report` of a trace, made once in a run however many tests, in however many
# pytest-xdist workers, read it (several tests start from the same fixture's text; the 104 MB of
# record-5.10-ringloss's `report -R` take 3 s): a file per (the trace's bytes, trace-cmd, the
# options) in a directory of the run, which the run's first process makes (pytest_configure:
# before it starts its workers, which find it in REPORTS_ENV) and removes when it ends. A report
# is made under a lock, so that two workers that want it make it once, into a temporary file
# renamed when whole. What the text reader makes of a report is kept there too (report_frames).
REPORTS_ENV = "NFSRT_TEST_REPORTS"
_OWN_REPORTS = pytest.StashKey[str]()


def _made_once(name, write):
    """The file ``name`` in the run's directory of reports, written by ``write(file)`` (a file
    open for writing bytes) by the first process of the run that asks for it."""
    made = os.path.join(os.environ[REPORTS_ENV], name)
    if not os.path.exists(made):
        with open(made + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(made):
                with tempfile.NamedTemporaryFile(
                    "wb", dir=os.path.dirname(made), suffix=".partial", delete=False
                ) as f:
                    write(f)
                os.replace(f.name, made)
    return made


def report_made(trace_cmd, dat, raw=False, only=(), nanoseconds=False):
    """The path of the run's one `trace-cmd report` of a trace (the options: report_text), to
    read, never to edit."""
    args = (
        (["-R"] if raw else [])
        + (["-t"] if nanoseconds else [])
        + [a for ev in only for a in ("-F", ev)]
    )
    with open(dat, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    key = hashlib.sha256(repr((digest, os.path.realpath(trace_cmd), args)).encode()).hexdigest()

    def write(f):
        subprocess.run(
            [trace_cmd, "report"] + args + [str(dat)],
            stdout=f,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=600,
        )

    return _made_once(f"{key[:32]}.txt", write)


def report_text(trace_cmd, dat, out, raw=False, only=(), nanoseconds=False):
    """`trace-cmd report [-R] [-t]` of a trace, as a user would paste it into a bug report
    (``nanoseconds``: time stamps to the nanosecond, -t); with `only` (events as SYSTEM/NAME,
    `-F` filters), as if only those events were recorded. Written to ``out`` (a copy of the
    run's one report of that trace: a test may edit its copy)."""
    shutil.copyfile(report_made(trace_cmd, dat, raw=raw, only=only, nanoseconds=nanoseconds), out)
    return out


def report_frames(trace_cmd, dat, raw=False, nanoseconds=False, typed=True, instance=None):
    """What the text reader reads in the run's one report of a trace (report_made's options):
    ``(info, frames)`` of ``ReportText(report, instance).read(...)`` of every event the text
    holds, by the name it prints (system:name is the binary's), with every field, ``typed`` or
    not, and its ``info`` as the read left it. Parsed once in a run however many tests, in
    however many workers, compare it with something (record-5.10-ringloss's reports take 14-23 s
    a parse, test_reporttext and test_tracedat read each 2-3 times): pickled beside the report,
    and each call unpickles a copy of its own, which its test may change."""
    from nfsreaddir.trace.base import bare_name
    from nfsreaddir.trace.text import ReportText

    text = report_made(trace_cmd, dat, raw=raw, nanoseconds=nanoseconds)

    def write(f):
        rt = ReportText(text, instance=instance)
        frames = rt.read({bare_name(n): None for n in sorted(rt.event_names())}, typed=typed)
        pickle.dump((rt.info, frames), f, protocol=pickle.HIGHEST_PROTOCOL)

    key = hashlib.sha256(repr((text, instance, typed)).encode()).hexdigest()
    with open(_made_once(f"{key[:32]}.pickle", write), "rb") as f:
        return pickle.load(f)


# The project's one cache, where vm-run, check-series and build-kernel keep theirs
# (reproducers/cache-dir: NFSRT_CACHE, else XDG_CACHE_HOME's nfs-readdir-trace).
CACHE = subprocess.run(
    [os.path.join(TOP, "reproducers", "cache-dir")], check=True, capture_output=True, text=True
).stdout.rstrip("\n")
# The tree check-series keeps: one extraction of the kernel source serves every kernel test.
KERNEL_TREE = os.environ.get("NFSRT_CHECK_TREE") or os.path.join(CACHE, "trees", "linux-5.10-check")
SERIES = os.path.join(TOP, "kernel-patches", "v5.10")


def series_tree(branch, tree=KERNEL_TREE):
    """The pristine Debian 5.10 tree (made once, kept with its build products) on a fresh
    branch that carries the series as commits; returns the patch files applied."""
    subprocess.run(
        [os.path.join(TOP, "kernel-patches", "prepare-tree"), "--reset", tree],
        check=True,
        capture_output=True,
        timeout=3600,
    )
    git = ["git", "-C", tree, "-c", "user.name=nfsrt-test", "-c", "user.email=test@invalid"]
    subprocess.run(git + ["checkout", "-q", "-B", branch, "nfsrt-base"], check=True)
    with open(os.path.join(SERIES, "series")) as f:
        patches = [
            os.path.join(SERIES, p.strip()) for p in f if p.strip() and not p.startswith("#")
        ]
    subprocess.run(git + ["am", "-q"] + patches, check=True, capture_output=True)
    return patches


def pytest_configure(config):
    if not os.environ.get(REPORTS_ENV):
        config.stash[_OWN_REPORTS] = os.environ[REPORTS_ENV] = tempfile.mkdtemp(
            prefix="nfsrt-reports-"
        )
    config.addinivalue_line(
        "markers",
        "guest(NAME): runs in the guest that boots its kernel once for every selected test's "
        "scenario (tests/vmrun.py's SCENARIOS); the `guest` fixture hands the test its outcome",
    )
    config.addinivalue_line(
        "markers",
        "opt_in(VARIABLE, TARGET): over make test's budget; runs only with VARIABLE=1, which "
        "the make TARGET sets, and is otherwise deselected",
    )
    config.addinivalue_line(
        "markers",
        "full: a sweep at its full size, of which make test runs a sample (conftest.FULL: "
        "opt-in, make test-full)",
    )


def pytest_collection_modifyitems(config, items):
    """Deselect the opt-in tests whose variable is not set. Deselected, not skipped: in `make
    test` a skip means something setup should have provided is missing, a failure to look at,
    so the run's summary must have none that are there by design."""
    off = [
        item
        for item in items
        if any(os.environ.get(m.args[0]) != "1" for m in item.iter_markers("opt_in"))
    ]
    if off:
        config.hook.pytest_deselected(items=off)
        items[:] = [item for item in items if item not in off]
    config.stash[OPT_IN] = sorted({m.args[1] for item in off for m in item.iter_markers("opt_in")})


OPT_IN = pytest.StashKey[list]()


def pytest_unconfigure(config):
    if _OWN_REPORTS in config.stash:
        shutil.rmtree(os.environ.pop(REPORTS_ENV), ignore_errors=True)


# The whole sweeps and every fixture where `make test` takes a sample of each kind: over its
# budget on a busy 2-core machine (docs/measurements/fresh-test.md), run by `make test-full`.
FULL = [pytest.mark.opt_in("NFSRT_TEST_FULL", "make test-full"), pytest.mark.full]


def sample_and_full(sample, full, ids=("sample", "full")):
    """A sweep's two sizes as parameters: ``sample`` in `make test`, ``full`` only in `make
    test-full`. The sample covers every kind the full sweep does (every copy, every fixture
    kind), with fewer instances of each."""
    return [pytest.param(sample, id=ids[0]), pytest.param(full, id=ids[1], marks=FULL)]


def one_of_each_kind(items, kinds_of):
    """The fewest of ``items`` (chosen greedily, the most new kinds first, ties by name) that
    hold every kind any of them holds (``kinds_of``: a set of kinds): a fixture recorded with a
    new event, a new layout, a new format, a new kernel or a new kind of loss joins the sample
    by itself."""
    kinds = {p: kinds_of(p) for p in items}
    left, chosen = set().union(*kinds.values()), []
    while left:
        best = max(sorted(items), key=lambda p: len(kinds[p] & left))
        chosen.append(best)
        left -= kinds[best]
    return sorted(chosen)


def swept_fixture(name, kinds_of, what=""):
    """A session fixture ``name`` of the trace.dat fixtures (the module's ``dat_files``) that a
    sweep reads: one of each kind (``kinds_of``) in `make test`, every one in `make test-full`."""

    @pytest.fixture(
        scope="session",
        name=name,
        params=sample_and_full("kinds", "every", ids=("one-of-each-kind", "every-fixture")),
    )
    def swept(request, dat_files):
        if request.param == "every":
            return dat_files
        chosen = one_of_each_kind(dat_files, kinds_of)
        print(f"one of each kind{what}: {len(chosen)} of {len(dat_files)} files")
        return chosen

    return swept


def pytest_terminal_summary(terminalreporter, config):
    if config.stash.get(OPT_IN, []):
        terminalreporter.write_line(
            "opt-in tests deselected (over make test's budget): run them with "
            + ", ".join(config.stash[OPT_IN])
        )


@pytest.fixture(scope="session")
def guests(request, tmp_path_factory):
    import vmrun

    wanted = {m.args[0] for item in request.session.items for m in item.iter_markers("guest")}
    return vmrun.Guests(wanted, tmp_path_factory)


@pytest.fixture
def guest(request, guests):
    """The test's scenario (its `guest` mark) as vm-run would have given it: (p, results dir)."""
    return guests.scenario(request.node.get_closest_marker("guest").args[0])
