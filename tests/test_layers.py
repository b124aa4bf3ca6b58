"""The analyzer's stages, data flowing one way: bytes are read (trace/), given a meaning (model/),
judged (rules/), run as one way from inputs to answers (pipeline), shown (present/) and asked
for by a command (commands, cli). A module never imports one of a later stage: each stage is
written, read and tested knowing nothing of the ones after it. test_imports.py checks that
there is no cycle; this checks the order itself, and what two of the stages may take from the
others: event names and kernel traits from events.py alone, no constant of rules/ from an
analysis."""

import ast
import os

import pytest

from conftest import TOP
from test_imports import imports as imports_of
from test_imports import modules

PACKAGE = "nfsreaddir"

# Each module's stage, by its name after "nfsreaddir." or the folder it is in.
# A module that fits none fails test_every_module_has_a_stage: a new module is placed here.
STAGE_OF = [
    # Shared leaves: they import nothing of the package, and any stage may use them.
    ("", "shared"),  # the package itself (__version__; its compiled _ringbuf, _slab...)
    ("units", "shared"),
    ("recordtype", "shared"),
    ("events", "shared"),  # what the kernels' events are: read by every stage, reads none
    ("status", "shared"),
    ("tuning", "shared"),
    ("facts", "shared"),
    ("trace", "trace"),
    # The files of a command: its inputs spooled (through trace/), the files it writes kept as
    # NAME~ (present/export writes through it). Above the readers it spools for, below
    # everything that writes.
    ("commandio", "commandio"),
    ("model", "model"),
    ("rules", "rules"),
    # What a reproducer's results directory is (its kind, facts and name checks): the
    # pipeline's input besides the traces; its limits are the rules'.
    ("runs", "runs"),
    ("pipeline", "pipeline"),
    ("runresults", "pipeline"),  # results.json of a run, built and judged through the pipeline
    # live/ is a feeder and a sink of its own beside present/: it feeds a running kernel's
    # events to the model (tracker) and asks the pipeline for the verdict, as a command's
    # inputs are; what it ends with is a value (watch.Summary) that the command shows through
    # present/. So it sits above the pipeline and beside present/, and neither imports the
    # other: live/ never renders a summary, present/ never reads a ring buffer.
    ("live", "live"),
    ("present", "present"),
    ("commands", "commands"),
    ("cli", "commands"),
    ("__main__", "commands"),
    ("mistakes", "commands"),  # the command line's "did you mean" (cli's alone)
]

# The stages in the order data flows; stages of one tier are peers that import each other
# nothing.
ORDER = [
    ("shared",),
    ("trace",),
    ("commandio",),
    ("model",),
    ("rules",),
    ("runs",),
    ("pipeline",),
    ("live", "present"),
    ("commands",),
]
RANK = {stage: rank for rank, tier in enumerate(ORDER) for stage in tier}


def stage(module):
    """The stage of a dotted module name of the package, or None."""
    rest = module[len(PACKAGE) + 1 :] if module != PACKAGE else ""
    for prefix, name in STAGE_OF:
        if rest == prefix or prefix and rest.startswith(prefix + "."):
            return name
    return None


def graph():
    mods = modules()
    return {m: imports_of(m, p, mods) for m, p in mods.items()}


def against_the_flow(imports):
    """Each import {module: modules it imports} of a later stage, or of a peer stage, as
    "a (stage) imports b (stage)"."""
    out = []
    for m, targets in sorted(imports.items()):
        for n in sorted(targets):
            a, b = stage(m), stage(n)
            if a != b and RANK[b] >= RANK[a]:
                out.append(f"{m} ({a}) imports {n} ({b})")
    return out


def test_every_module_has_a_stage():
    lost = sorted(m for m in modules() if stage(m) is None)
    assert not lost, f"modules with no stage (place them in STAGE_OF): {lost}"
    assert set(RANK) == {name for _, name in STAGE_OF}


def test_no_module_imports_a_later_stage():
    """Every import counts, the ones inside functions and under TYPE_CHECKING too."""
    found = against_the_flow(graph())
    assert not found, "imports against the flow of data:\n" + "\n".join(found)


def test_the_order_check_sees_an_import_against_the_flow():
    """What the check above would say of imports that go the wrong way or between peers."""
    ok = {
        "nfsreaddir.rules.verdict": {"nfsreaddir.model.reader", "nfsreaddir.events"},
        "nfsreaddir.commands": {"nfsreaddir.present.render", "nfsreaddir.live.watch"},
    }
    assert against_the_flow(ok) == []
    bad = {
        "nfsreaddir.model.reader": {"nfsreaddir.rules.verdict"},
        "nfsreaddir.live.watch": {"nfsreaddir.present.render"},
        "nfsreaddir.events": {"nfsreaddir.units"},
    }
    assert against_the_flow(bad) == [
        "nfsreaddir.live.watch (live) imports nfsreaddir.present.render (present)",
        "nfsreaddir.model.reader (model) imports nfsreaddir.rules.verdict (rules)",
    ]


def test_present_is_handed_what_it_shows():
    """present/ runs no pipeline (nor builds a run's results): it renders what a command hands
    it."""
    found = [
        f"{m} imports {n}"
        for m, targets in graph().items()
        if stage(m) == "present"
        for n in targets
        if stage(n) == "pipeline"
    ]
    assert not found, "\n".join(found)


def test_rules_take_nothing_from_the_analysis():
    """A rule's constants and types come from what a listing is (model/listing, model/reader:
    its endings), never from the analysis that finds listings in a trace."""
    found = [
        f"{m} imports {n}"
        for m, targets in graph().items()
        if stage(m) == "rules"
        for n in targets
        if n == f"{PACKAGE}.model.analysis"
    ]
    assert not found, "\n".join(found)


# ------------------------------------------------------------------ events.py, the one home
# An event's full name: a tracing system of the kernels the project reads, and the event.
SYSTEMS = ("nfs", "nfs4", "sunrpc", "kmem", "syscalls", "raw_syscalls", "ftrace", "nfsprobe")


def event_names_defined(tree):
    """(line, name) of each module-level constant whose value holds an event's full name."""
    out = []
    for node in tree.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        for c in ast.walk(node.value):
            if (
                isinstance(c, ast.Constant)
                and isinstance(c.value, str)
                and c.value.partition(":")[0] in SYSTEMS
                and c.value.partition(":")[2].isidentifier()
            ):
                out.append((node.lineno, c.value))
    return out


def kernel_versions_compared(tree):
    """(line, version) of each ordering (<, >) with a kernel's (major, minor) written out."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not all(
            isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in node.ops
        ):
            continue
        for c in [node.left, *node.comparators]:
            if (
                isinstance(c, ast.Tuple)
                and len(c.elts) == 2
                and all(isinstance(e, ast.Constant) and type(e.value) is int for e in c.elts)
                and 2 <= c.elts[0].value <= 9
            ):
                out.append((node.lineno, tuple(e.value for e in c.elts)))
    return out


def test_event_names_and_kernel_traits_live_in_events_py():
    """A name or a kernel version in a second place is a second definition that can drift from
    events.py's (which kernel has which event, since when a kernel behaves so)."""
    found = []
    for m, path in sorted(modules().items()):
        if m == f"{PACKAGE}.events":
            continue
        tree = ast.parse(open(path).read(), path)
        rel = os.path.relpath(path, TOP)
        found += [f"{rel}:{n} defines {v}" for n, v in event_names_defined(tree)]
        found += [f"{rel}:{n} compares with kernel {v}" for n, v in kernel_versions_compared(tree)]
    assert not found, "defined outside events.py:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source, names, versions",
    [
        ('READDIRS = ("nfs4:nfs4_readdir", "x")\n', [(1, "nfs4:nfs4_readdir")], []),
        ('PREFIX = "nfs_readdir"\nTIME = "10:30"\n', [], []),
        ("def f(gen):\n    return gen < (5, 18)\n", [], [(2, (5, 18))]),
        ("def f(x):\n    return x in (4, 8)\n", [], []),
    ],
)
def test_the_events_scan_sees_names_and_versions(source, names, versions):
    tree = ast.parse(source)
    assert event_names_defined(tree) == names
    assert kernel_versions_compared(tree) == versions
