"""The analyzer's modules form layers: no module imports, directly or through others, a module
that imports it back (test_layers.py: nor one of a later stage). Every import counts, the ones
inside functions too (a deferred import hides a cycle from Python, not from the reader of the
code). No module imports another's private (_underscore) names, no module is over 500 lines and
no function over 100 (the Python ones and the C ones). The live commands start without
pandas."""

import ast
import os
import re
import subprocess
import sys

import pytest

from conftest import TOP

PACKAGE = os.path.join(TOP, "analyzer", "nfsreaddir")


def modules():
    """{dotted name: path} of every module of the package."""
    out = {}
    for d, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, f), os.path.dirname(PACKAGE))[:-3]
                name = rel.replace(os.sep, ".")
                out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = (
                    os.path.join(d, f)
                )
    return out


def imports(name, path, known):
    """The package's modules that module `name` imports."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            mod = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            for a in node.names:  # `from . import x` imports module x, not the package
                out.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod)
    return {m for m in out if m in known and m != name}


def cycle(graph):
    """One import cycle as a list of modules, or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return path[path.index(n) :] + [n]
            if n not in state:
                found = visit(n, path + [n])
                if found:
                    return found
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_no_import_cycle():
    mods = modules()
    graph = {m: imports(m, p, mods) for m, p in mods.items()}
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_the_walk_sees_cycles():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def private_imports(name, path, known):
    """`from M import _x` of module `name` where M is another module of the package and _x is
    no module of the package (the compiled _ringbuf, _slab, _zchunks are modules: importing
    them is fine)."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        mod = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
        if not (mod or "").startswith("nfsreaddir") or mod == name:
            continue
        for a in node.names:
            compiled = os.path.exists(
                os.path.join(os.path.dirname(PACKAGE), *f"{mod}.{a.name}".split(".")) + ".c"
            )
            dunder = a.name.startswith("__") and a.name.endswith("__")  # __version__
            if (
                a.name.startswith("_")
                and not dunder
                and f"{mod}.{a.name}" not in known
                and not compiled
            ):
                out.append(f"{name}:{node.lineno} imports {a.name} from {mod}")
    return out + private_uses(name, path, known, package)


def private_uses(name, path, known, package):
    """`m._x` in module `name`, where m is another module of the package imported as a whole
    (`from . import m`): the same reach into another module's private names, by attribute."""
    tree = ast.parse(open(path).read(), path)
    modules = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            mod = f"{base}.{node.module}" if node.module else base
            for a in node.names:
                if f"{mod}.{a.name}" in known and f"{mod}.{a.name}" != name:
                    modules[a.asname or a.name] = f"{mod}.{a.name}"
    return [
        f"{name}:{node.lineno} uses {node.attr} of {modules[node.value.id]}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in modules
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and f"{modules[node.value.id]}.{node.attr}" not in known
    ]


def test_no_private_name_is_imported_across_modules():
    mods = modules()
    found = [x for m, p in mods.items() for x in private_imports(m, p, mods)]
    assert not found, "\n".join(found)


def test_the_private_walk_sees_private_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "from .other import _hidden, shown\nfrom . import _slab, other\n"
        "other._also_hidden(other.shown, other.__name__)\n"
    )
    assert private_imports("nfsreaddir.m", str(f), {"nfsreaddir.other"}) == [
        "nfsreaddir.m:1 imports _hidden from nfsreaddir.other",
        "nfsreaddir.m:3 uses _also_hidden of nfsreaddir.other",
    ]


MAX_LINES = 500


def c_sources(*suffixes):
    """The compiled modules' sources: their entry files and their parts under csrc/."""
    return sorted(
        os.path.join(d, f)
        for d, _, files in os.walk(PACKAGE)
        for f in files
        if f.endswith(suffixes)
    )


def test_no_module_is_over_500_lines():
    """The C sources too: a compiled module is split into parts by concern (csrc/<module>/)."""
    files = dict(modules())
    files.update({os.path.relpath(p, PACKAGE): p for p in c_sources(".c", ".h")})
    long = {m: n for m, p in files.items() if (n := sum(1 for _ in open(p))) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_size_walk_sees_c_parts():
    assert {os.path.relpath(p, PACKAGE) for p in c_sources(".c", ".h")} >= {
        "_wiredecode.c",
        "csrc/wiredecode/tcp.c",
        "csrc/wiredecode/wiredecode.h",
    }


MAX_FUNCTION_LINES = 100


def long_functions(path):
    """For each function of a Python file over MAX_FUNCTION_LINES: "path:line name is N lines",
    counted from its def to its last line (decorators aside), nested functions on their own."""
    tree = ast.parse(open(path).read(), path)
    return [
        f"{path}:{n.lineno} {n.name} is {length} lines"
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := n.end_lineno - n.lineno + 1) > MAX_FUNCTION_LINES
    ]


C_TOKENS = re.compile(
    r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|[{};]|\n', re.S
)


def long_c_functions(path):
    """The same for a C file, by brace depth: a function is a `{` at depth 0 whose header (the
    text since the last `;` or `}` at depth 0, preprocessor lines aside) ends in a parameter
    list; its name is the first identifier before a `(`, its length from the name's line to
    the closing brace's. Comments, strings and character constants hide their braces."""
    text = open(path).read()
    out, depth, line, header, start, name = [], 0, 1, "", 0, None
    pos = 0
    for m in C_TOKENS.finditer(text):
        gap, tok = text[pos : m.start()], m.group()
        pos = m.end()
        if depth == 0:
            header += gap
        if tok == "\n" or tok.startswith(("/*", "//")):
            line += tok.count("\n")
            header += "\n" * tok.count("\n") if depth == 0 else ""
            continue
        if tok == "{":
            if depth == 0:
                decl = re.sub(r"(?m)^\s*#.*$", "", header)
                call = re.search(r"(\w+)\s*\([^=]*\)\s*$", decl)
                name = call and call[1]
                start = line - decl[call.start(1) :].count("\n") if call else line
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                if name and line - start + 1 > MAX_FUNCTION_LINES:
                    out.append(f"{path}:{start} {name} is {line - start + 1} lines")
                header = ""
        elif depth == 0:
            header = ""
    return out


def test_no_function_is_over_100_lines():
    """A function that long does several steps of the data's way at once; each step named on
    its own says what it does and can be read, tested and changed alone."""
    long = [x for p in modules().values() for x in long_functions(p)]
    long += [x for p in c_sources(".c") for x in long_c_functions(p)]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_the_function_scans_measure_length(tmp_path):
    body = "    x = 1\n" * 99
    py = tmp_path / "m.py"
    py.write_text(f"@staticmethod\ndef fits():\n{body}\n\ndef long():\n{body}    x = 2\n")
    assert long_functions(str(py)) == [f"{py}:104 long is 101 lines"]
    stmts = "\tx = '}';  /* } */ // {\n" * 96
    c = tmp_path / "m.c"
    c.write_text(
        "static const int t[] = {\n1,\n};\nstruct s { int a; };\n"
        f"static int\nfits(int a)\n{{\n{stmts}\tx = 2;\n}}\n#define MIX(h) ((h) = 1)\n"
        f'static int\nlong_one(int a,\n\t int b)\n{{\n{stmts}\tif (a) {{ b = "{{"; }}\n}}\n'
    )
    assert long_c_functions(str(c)) == [f"{c}:108 long_one is 101 lines"]


@pytest.mark.parametrize("module", ["nfsreaddir.live.record", "nfsreaddir.live.watch"])
def test_live_commands_start_without_pandas(module):
    """record and watch run in the guest being traced; under emulation pandas alone was 320 s
    of a watch start's 500 s of imports, all before the first event could be read. Only the
    summary at the end builds frames."""
    code = f"import sys, {module}; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", f"importing {module} imports pandas"


SMALL_TRACE = os.path.join(TOP, "tests", "fixtures", "6.1-v4.1", "idle.dat")


def imported(args):
    """The modules a Python run of ``args`` imports, from -X importtime (the import of each,
    whatever module imports it and wherever, in a fresh interpreter)."""
    p = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True, timeout=120
    )
    return {
        line.rsplit("|", 1)[1].strip()
        for line in p.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_the_trace_reader_reads_without_pandas():
    """What the readdir analysis reads before it makes a table (its events' columns and the
    damage check of every record) costs no pandas: most of the 0.46 s of CPU and 148 MiB that
    check of a small trace took (issue 45) were imports, pandas the largest."""
    code = (
        "import sys; from nfsreaddir.trace import open_trace; t = open_trace(sys.argv[1]); "
        "t.read_columns({'nfs:nfs_readdir_enter': None}); t.check_records()"
    )
    mods = imported(["-c", code, SMALL_TRACE])
    assert "nfsreaddir.trace.tracedat" in mods, "the run read no trace.dat"
    assert "pandas" not in mods


def test_what_a_listing_is_needs_no_pandas():
    """What a listing is and the error of a trace that cannot answer (model/listing) are
    asked before any table is made (check's `cannot decide` path): no pandas for them."""
    code = "import sys, nfsreaddir.model.listing; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", "importing nfsreaddir.model.listing imports pandas"


def test_the_readdir_tables_read_the_readers_columns(monkeypatch):
    """The readdir tables are made from the reader's columns (read_columns), never from the
    trace.dat reader's per-event frames: those cost a pandas frame per event before the
    tables' own, and the tables are the next to do without pandas (issue 45 point 3)."""
    from nfsreaddir.model import tables
    from nfsreaddir.trace import open_trace
    from nfsreaddir.trace.tracedat import TraceDat

    def no_frames(*args, **kw):
        raise AssertionError("tables.load asked the trace.dat reader for frames")

    monkeypatch.setattr(TraceDat, "read", no_frames)
    t = open_trace(SMALL_TRACE)
    assert isinstance(t, TraceDat)
    read = tables.load(t)
    assert len(read.frames["rpc"]) and read.sources["rpc"]


def test_check_of_a_small_trace_imports_no_matplotlib():
    """A plot's library is for plot and report alone."""
    mods = imported(["-m", "nfsreaddir.cli", "check", SMALL_TRACE])
    assert "nfsreaddir.pipeline" in mods, "check did not run"
    assert "matplotlib" not in mods


def test_check_of_a_small_trace_imports_no_pandas():
    """check's verdict needs no table, plot or export: pandas and matplotlib are for those."""
    mods = imported(["-m", "nfsreaddir.cli", "check", SMALL_TRACE])
    assert "nfsreaddir.pipeline" in mods, "check did not run"
    assert not {"pandas", "matplotlib"} & mods
