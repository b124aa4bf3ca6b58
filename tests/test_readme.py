"""The README as a user runs it: every snippet marked `<!-- snippet: runs -->` runs as written,
in a folder where its example names are the fixtures (trace.dat, out/5.10, client.pcap.gz...),
and no command in it fails but `check`, whose status is its answer; a snippet that needs VMs,
root or a Spark cluster has its syntax checked, and every option it gives a command of this
project is one that command's --help lists. The SQL it shows is the file it tells the reader
to run."""

import os
import re
import subprocess
import sys

import pytest

from conftest import FIXTURES, TOP

README = os.path.join(TOP, "README.md")
# The README's two first commands, as CI and the demo run them.
FIRST = (
    "apt-get update && apt-get install -y make && make demo",
    "apt-get update && apt-get install -y make && make check && make test",
)
MAX_LINES = 300
# The example names of the README and the fixture each stands for.
NAMES = {
    "trace.dat": os.path.join(FIXTURES, "5.10-v4.1", "modified.dat"),
    "client.pcap.gz": os.path.join(FIXTURES, "5.10-v4.1-cap", "modified.pcap.gz"),
    "server.pcap.gz": os.path.join(FIXTURES, "fleet-5.10", "fleet.pcap.gz"),
    "out/5.10": os.path.join(FIXTURES, "5.10-v4.1"),
    "out/6.1": os.path.join(FIXTURES, "6.1-v4.1"),
    "out/neg-5.10": os.path.join(FIXTURES, "dcache-negative-5.10"),
    "out/neg-6.1": os.path.join(FIXTURES, "dcache-negative-6.1"),
    "traces/modified.dat": os.path.join(FIXTURES, "5.10-v4.1", "modified.dat"),
    "traces/client.pcap.gz": os.path.join(FIXTURES, "6.1-v4.1-cap", "modified.pcap.gz"),
    "contrib": os.path.join(TOP, "contrib"),
}
# A command that fails in a snippet, as the ERR trap reports it.
FAILED = re.compile(r"^FAILED (\d+): (.*)$", re.M)


def snippets():
    """[(marker or None, language, code, line number)] of the README's fenced blocks."""
    lines = open(README).read().split("\n")
    out, n = [], 0
    while n < len(lines):
        m = re.match(r"```(\w*)$", lines[n])
        if m:
            end = lines.index("```", n + 1)
            mark = re.match(r"<!-- snippet: (.+) -->$", lines[n - 1])
            out.append((mark and mark.group(1), m.group(1), "\n".join(lines[n + 1 : end]), n + 1))
            n = end
        n += 1
    return out


def test_the_readme_is_short_and_starts_with_the_two_commands():
    text = open(README).read()
    assert len(text.splitlines()) <= MAX_LINES
    first = snippets()[0][2]
    assert [x for x in first.splitlines() if not x.startswith("#") and x] == list(FIRST)
    assert "docs/report/" in text.split("\n## ", 1)[0]  # the page's screenshot, first screen
    for shown in re.findall(r"\]\(([^)#]+\.(?:png|md|yml|sql|service))\)", text):
        assert os.path.exists(os.path.join(TOP, shown)), shown


def test_every_shell_and_python_snippet_is_marked():
    for mark, lang, _, line in snippets():
        if lang in ("sh", "python"):
            assert mark == "runs" or (mark or "").startswith("needs "), (line, mark)


@pytest.fixture
def sandbox(tmp_path):
    for name, target in NAMES.items():
        os.makedirs(os.path.dirname(tmp_path / name), exist_ok=True)
        os.symlink(target, tmp_path / name)
    return tmp_path


RUNNABLE = [(line, code) for mark, lang, code, line in snippets() if mark == "runs"]


@pytest.mark.parametrize("line,code", RUNNABLE, ids=[f"line-{x[0]}" for x in RUNNABLE])
def test_a_snippet_marked_runs_runs_as_written(sandbox, line, code):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    trap = "trap 'echo \"FAILED $?: $BASH_COMMAND\" >&2' ERR\n"
    p = subprocess.run(
        ["bash", "-c", trap + code],
        cwd=sandbox,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in p.stderr, p.stderr
    for status, command in FAILED.findall(p.stderr):
        # check's status is its answer; the snippet prints it
        assert command.startswith("nfs-readdir check") and status in ("1", "125"), p.stderr
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip(), "the snippet printed nothing"


def _options(code):
    """{(program words, option)} of the project's commands in a snippet: nfs-readdir SUB and
    reproducers/NAME, with each --option they are given."""
    out = set()
    for cmd in re.split(r"&&|\n|;|\|", code):
        words = cmd.split("#", 1)[0].split()
        for k, w in enumerate(words):
            if w == "nfs-readdir" and k + 1 < len(words):
                prog = ("nfs-readdir", words[k + 1])
            elif re.search(r"(^|/)reproducers/[\w-]+$", w):
                prog = (os.path.join(TOP, "reproducers", os.path.basename(w)),)
            else:
                continue
            rest = words[k + 1 :]
            if "--" in rest:  # what follows -- is the reproducer's or the command's own
                rest = rest[: rest.index("--")]
            out |= {(prog, o.split("=")[0]) for o in rest if o.startswith("--")}
            out.add((prog, "--help"))
            break
    return out


NEEDING = [
    (line, lang, code) for mark, lang, code, line in snippets() if (mark or "").startswith("needs ")
]


@pytest.mark.parametrize("line,lang,code", NEEDING, ids=[f"line-{x[0]}" for x in NEEDING])
def test_a_snippet_that_needs_more_is_valid_and_its_options_exist(line, lang, code):
    if lang == "python":
        compile(code, f"README.md:{line}", "exec")
        return
    p = subprocess.run(["bash", "-n", "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    helps: dict = {}
    for prog, option in _options(code):
        if prog not in helps:
            argv = [*prog, "--help"]
            if prog[0] == "nfs-readdir":
                argv = [sys.executable, "-m", "nfsreaddir.cli", *prog[1:], "--help"]
            helps[prog] = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        h = helps[prog]
        assert h.returncode == 0 and option in h.stdout, (prog, option, h.stderr)


def test_the_sql_shown_is_the_file_the_snippets_read():
    (sql,) = [code for _, lang, code, _ in snippets() if lang == "sql"]
    with open(os.path.join(TOP, "contrib", "per-listing.sql")) as f:
        shipped = "\n".join(x for x in f.read().splitlines() if not x.startswith("--"))
    assert shipped.strip() == sql.strip()
