"""One exit status table for every command, as `git bisect run` reads it: 0 good, 125 skip,
any other 1-127 bad, above 127 stop. Only a verdict may land in 1-127; whatever is not one (a
usage error, a missing, empty-handed or unreadable input, an internal error) stops a bisect."""

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from conftest import FIXTURES, NFS_READDIR, TOP, run_cli
from nfsreaddir import status

BAD = os.path.join(FIXTURES, "5.10-v4.1")
GOOD = os.path.join(FIXTURES, "6.1-v4.1")
COMMANDS = ("check", "analyze", "results", "export", "plot", "compare", "report")


def git_bisect_reads(code):
    """What `git bisect run` makes of a step's exit status (git's bisect--helper)."""
    if code == 0:
        return "good"
    if code == 125:
        return "skip"
    return "bad" if 0 < code < 128 else "stop"


def test_only_a_verdict_reads_as_an_answer():
    from nfsreaddir.rules import verdict

    assert (status.GOOD, status.BAD, status.UNDECIDED) == (
        verdict.GOOD,
        verdict.BAD,
        verdict.UNDECIDED,
    )
    answers = {status.GOOD: "good", status.BAD: "bad", status.UNDECIDED: "skip"}
    for code in status.TABLE:
        assert git_bisect_reads(code) == answers.get(code, "stop"), code


@pytest.mark.parametrize("command", ("",) + COMMANDS + ("slab", "record", "watch"))
def test_every_help_and_the_readme_give_the_table(command):
    """nfs-readdir --help and the commands with a verdict give the whole table; the others the
    statuses they exit with (no 1 or 125, which only a verdict gives, and 0 is "done")."""
    from nfsreaddir import cli

    p = run_cli(*([command] if command else []), "--help", check=0)
    table = p.stdout[p.stdout.index("exit status:") :]
    verdict = not command or command in cli.VERDICT_COMMANDS
    codes = [int(x) for x in re.findall(r"^  (\d+) ", table, re.M)]
    own = cli.OWN_STATUSES.get(command, {})
    if verdict:
        assert codes == sorted(status.TABLE), table
        for code, (*_, what) in status.TABLE.items():
            assert what.split()[0] in table, (code, table)
    else:
        assert codes == sorted({0, 128, 130, 141} | set(own)), table
        assert "  0    done\n" in table
    with open(os.path.join(TOP, "README.md")) as f:
        readme = f.read()
    for code in status.TABLE:
        assert f"| {code} |" in readme, code


def _argv(command, path, out):
    return {
        "check": ["check", path],
        "analyze": ["analyze", path],
        "results": ["results", "--verdict", path],
        "export": ["export", path, "-o", os.path.join(out, "tables")],
        "plot": ["plot", path, "-o", os.path.join(out, "p.png")],
        "compare": ["compare", path, GOOD],
        "report": ["report", path, "-o", os.path.join(out, "r.html")],
    }[command]


@pytest.fixture
def shared_dir():
    """A directory another user can enter (pytest's tmp_path is its owner's alone): an
    unreadable file is made unreadable by dropping to that user, root reading everything."""
    d = tempfile.mkdtemp(prefix="nfsrt-exit-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)


@pytest.mark.parametrize("case", ["usage", "missing", "no-trace", "unreadable"])
@pytest.mark.parametrize("command", COMMANDS)
def test_what_is_not_a_verdict_stops_a_bisect(command, case, shared_dir):
    empty = os.path.join(shared_dir, "empty")
    os.mkdir(empty)
    if case == "unreadable":
        if command == "results":  # a run whose results.json cannot be read
            path = os.path.join(shared_dir, "run")
            shutil.copytree(GOOD, path)
            locked = os.path.join(path, "results.json")
        elif command == "compare":  # a results directory that cannot be listed
            path = locked = os.path.join(shared_dir, "run")
            shutil.copytree(GOOD, path)
        else:
            path = locked = os.path.join(shared_dir, "t.dat")
            shutil.copy(os.path.join(BAD, "modified.dat"), path)
        os.chmod(locked, 0)
        # As a process, as another user where this is root (root reads any file).
        as_user = (
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            if os.geteuid() == 0
            else []
        )
        p = subprocess.run(
            as_user + NFS_READDIR + _argv(command, path, shared_dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        words = ["Permission denied", path]
    else:
        path = {
            "usage": os.path.join(BAD, "modified.dat"),
            "missing": os.path.join(shared_dir, "none.dat"),
            "no-trace": empty,
        }[case]
        argv = _argv(command, path, shared_dir)
        p = run_cli(*(argv + ["--no-such-option"] if case == "usage" else argv))
        words = {"usage": ["usage:", "--no-such-option"], "missing": [path], "no-trace": [empty]}[
            case
        ]
    assert p.returncode == status.ERROR, (p.returncode, p.stdout, p.stderr)
    assert git_bisect_reads(p.returncode) == "stop"
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)
    # One line, or argparse's usage and the line that says what is wrong with it.
    assert len(p.stderr.splitlines()) == 1 or case == "usage" and "error:" in p.stderr, p.stderr


def test_git_bisect_run_stops_where_the_step_cannot_run(tmp_path):
    """A real `git bisect run` of `nfs-readdir check` over three commits, each naming the
    trace its step judges: the good (6.1) and bad (5.10) fixtures at the ends, and in the
    middle a trace that is not there. git stops at the middle one instead of taking it for
    bad (or skipping it into "the first bad commit could be any of")."""
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"] + list(args),
            capture_output=True,
            text=True,
            timeout=120,
        )

    git("init", "-q")
    for n, trace in enumerate((GOOD, str(tmp_path / "lost.dat"), BAD)):
        (repo / "trace").write_text(trace + "\n")
        git("add", "trace")
        git("commit", "-q", "-m", f"step {n}")
    first, middle, last = git("rev-list", "--reverse", "HEAD").stdout.split()
    step = tmp_path / "step"
    step.write_text(f'#!/bin/sh\nexec {" ".join(NFS_READDIR)} check "$(cat trace)"\n')
    step.chmod(step.stat().st_mode | stat.S_IXUSR)
    git("bisect", "start", last, first)
    p = git("bisect", "run", str(step))
    log = git("bisect", "log").stdout
    assert p.returncode != 0 and "128" in p.stdout + p.stderr, p.stdout + p.stderr
    assert f"bad: [{middle}" not in log and f"skip: [{middle}" not in log, log
    assert "is the first bad commit" not in p.stdout, p.stdout


BISECT_RUN = os.path.join(TOP, "reproducers", "bisect-run")


@pytest.mark.parametrize(
    "results,code,word", [(BAD, 1, "bad"), (GOOD, 0, "good"), (None, 128, "stop")]
)
def test_bisect_run_stops_when_the_analyzer_fails(tmp_path, results, code, word):
    """reproducers/bisect-run's answer from `nfs-readdir check` of the step's results: the
    verdict, or a stop when the analyzer cannot run on them (here a results directory without
    its traces), never "bad" nor a skip. The kernel build and boot are not what is tested:
    bisect-run is copied beside stand-ins for build-kernel and vm-run that succeed and leave a
    recorded fixture run (or an empty one) as the step's results; the analyzer is the real one
    (the copy's .venv is this tree's)."""
    here = tmp_path / "reproducers"
    here.mkdir()
    shutil.copy(BISECT_RUN, here)
    os.symlink(os.path.dirname(os.path.dirname(sys.executable)), tmp_path / ".venv")
    (here / "build-kernel").write_text("#!/bin/sh\nexit 0\n")
    fill = f'cp -r {results}/. "$results"' if results else ":"
    (here / "vm-run").write_text(
        '#!/bin/bash\nwhile [ $# -gt 0 ]; do [ "$1" = --results ] && results=$2; '
        f'shift; done\nmkdir -p "$results"; {fill}; exit 0\n'
    )
    for f in here.iterdir():
        f.chmod(0o755)
    tree = tmp_path / "linux"
    (tree / "kernel").mkdir(parents=True)
    (tree / "Makefile").write_text("")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(tree),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "a kernel",
        ],
        check=True,
    )
    p = subprocess.run(
        [str(here / "bisect-run")], cwd=tree, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == code, (p.returncode, p.stderr)
    assert git_bisect_reads(p.returncode) == word
    with open(tree / ".git" / "nfsrt-bisect" / "steps.tsv") as f:
        assert f.read().splitlines()[-1].split("\t")[5] == word


@pytest.mark.parametrize("what", ["empty", "text", "cut header"])
def test_check_and_analyze_give_one_status_for_a_file_that_is_not_a_trace(tmp_path, what):
    """An empty file, a text file and a trace.dat cut inside its header are no trace: 128 from
    check as from analyze, as the table says (before: check gave 125, a skip to a bisect)."""
    p = tmp_path / "t.dat"
    with open(os.path.join(BAD, "modified.dat"), "rb") as f:
        p.write_bytes({"empty": b"", "text": b"hello\n", "cut header": f.read(300)}[what])
    for command in ("check", "analyze"):
        r = run_cli(command, p)
        assert r.returncode == status.ERROR, (command, r.returncode, r.stdout, r.stderr)
        assert str(p) in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_capture_without_nfs_traffic_gets_one_answer_on_every_command(tmp_path):
    """A capture of the TCP connection's packets alone (the 5.10 fixture's idle capture without
    a packet that carries data): check cannot decide (125), and every other command says the
    same sentence and stops (128), as the README's table says. analyze, report and compare
    called it an internal error, export "nothing to export"."""
    sys.path.insert(0, os.path.join(TOP, "tests"))
    import pcapedit

    head, packets = pcapedit.read(os.path.join(FIXTURES, "5.10-v3-cap", "idle.pcap.gz"))
    cap = tmp_path / "no-nfs.pcap"
    pcapedit.write(str(cap), head, [p for p in packets if not p.payload()])
    why = f"{cap}: no ONC RPC (NFS) message in this capture; capture the NFS traffic with "
    p = run_cli("check", cap)
    assert p.returncode == status.UNDECIDED and p.stdout.startswith(f"cannot decide: {why}"), p
    for args in (
        ["analyze", cap],
        ["report", cap, "-o", tmp_path / "r.html"],
        ["compare", cap, os.path.join(BAD, "modified.dat")],
        ["export", cap, "-o", tmp_path / "tables"],
        ["plot", cap, "-o", tmp_path / "p.png"],
    ):
        p = run_cli(*args)
        assert p.returncode == status.ERROR and p.stdout == "", (args, p)
        assert p.stderr.startswith(f"nfs-readdir: {why}") and p.stderr.count("\n") == 1, p
    assert os.listdir(tmp_path) == ["no-nfs.pcap"]
