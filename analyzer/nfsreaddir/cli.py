"""nfs-readdir: find NFS readdir cookie restarts, cache invalidations and dcache growth in traces.

Each TRACE is a trace.dat file, the text of `trace-cmd report` (default or -R), a packet capture
of the NFS traffic (pcap or pcapng, also gzip'd; decoded with tshark), or a results
directory of the project's reproducers: readdir-loopback (every *.dat in it) or a dcache-*
reproducer (its dcache section: per-phase dentry deltas, growth rates, negative share, lookup
slowdown and the reproducer's figures). A trace with kmem allocation events also gets a slab
section (growth per cache, the dentry cache singled out), and needs no READDIR in it.
"""

import argparse
import contextlib
import errno
import math
import os
import sys
import textwrap

# No analysis does linear algebra, but numpy's OpenBLAS starts a thread per core at import,
# whose spinning cost `analyze` of 8.4 M kmem events 0.15-0.2 s of CPU beside its own reader
# threads (1.84+0.44 s -> 1.63+0.40 s user+system). Set before anything imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from . import __version__, commands, mistakes, runs, status
from .commandio import (
    SHOWN,
    GuardedOutput,
    OutputLost,
    UsageError,
    open_inputs,
    os_error_text,
    outputs_have_directories,
    reader_left,
    said,
    shown,
)
from .rules.limits import MAX_RATIO
from .trace import TraceError


def _number(kind, v, ok, what):
    """v as kind when ok(number) holds, else the usage error that says what is expected."""
    try:
        x = kind(v)
    except ValueError:
        x = None
    if x is None or not math.isfinite(x) or not ok(x):
        raise argparse.ArgumentTypeError(f"'{v}' is not {what}")
    return x


def _seconds(v):
    return _number(float, v, lambda x: x > 0, "a positive number of seconds")


def _port(v):
    return _number(int, v, lambda x: 0 < x < 65536, "a TCP/UDP port (1-65535)")


def _every_address():
    """The address that listens on every address: IPv6's, which Linux also serves IPv4 on
    (net.ipv6.bindv6only 0, its default), where the host has IPv6; else IPv4's."""
    import socket  # (here: only a --listen without an address asks)

    try:
        socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()
    except OSError:
        return "0.0.0.0"
    return "::"


def _listen(v):
    """ADDR:PORT for watch --metrics (ADDR empty: every address, IPv4 and IPv6) as
    (addr, port)."""
    addr, sep, port = v.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{v!r} is not ADDR:PORT (e.g. 127.0.0.1:9617, :9617)")
    return addr.strip("[]") or _every_address(), _port(port)


def _port_option(parser):
    """--port, for every command that reads captures."""
    parser.add_argument(
        "--port",
        type=_port,
        action="append",
        default=[],
        metavar="PORT",
        help="captures: another NFS server port to decode as ONC RPC (2049 "
        "always is); repeat for more",
    )


def _output_option(parser, metavar, what, **kw):
    """-o, for every command that writes one file (commandio: its directory must exist)."""
    what += "; a file there is kept as NAME~"
    parser.add_argument("-o", "--output", metavar=metavar, help=what, **kw)


def _count(v):
    return _number(int, v, lambda x: x >= 0, "a whole number of 0 or more")


def _ratio(v):
    return _number(float, v, lambda x: x > 0, "a positive ratio")


# The commands that answer with a verdict; every other exits 0 when done.
VERDICT_COMMANDS = ("check", "watch", "results")
# Statuses of a command's own, beside those of status.TABLE.
OWN_STATUSES = {
    "record": {
        125: "recorded, but tracefs could not be put back as it was (the message says what)",
        143: "terminated (SIGTERM); what was recorded is kept",
    }
}


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors exit with status.ERROR: its own 2 would read as "bad" to git
    bisect run. Every command's --help ends with the exit statuses it can give."""

    def __init__(self, verdict=True, statuses=None, **kw):
        table = status.help_text(verdict, statuses)
        epilog = kw.pop("epilog", None)
        kw["epilog"] = f"{epilog}\n\n{table}" if epilog else table
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(**kw)

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(status.ERROR, f"{self.prog}: error: {message}\n")


class _Commands(argparse._SubParsersAction):
    """The subcommands: each one's --help starts with the line `nfs-readdir --help` gives it and
    ends with its own exit statuses."""

    def add_parser(self, name, **kw):
        kw.setdefault("description", textwrap.fill(kw.get("help") or "", 80))
        return super().add_parser(
            name, verdict=name in VERDICT_COMMANDS, statuses=OWN_STATUSES.get(name), **kw
        )


TRACE_HELP = (
    "a trace.dat, `trace-cmd report` text, a packet capture (pcap, pcapng, gzip'd or not), a "
    "reproducer's results directory, or - for standard input"
)


def parser(argv=None):
    """The command line: one function per command adds it and its arguments, in the order
    `nfs-readdir --help` lists them. Where argv begins with a command, only that one is added:
    building the other ten is a tenth of what `check` of a small trace may take, and the
    command's usage, help and errors are its own parser's either way."""
    p = _Parser(
        prog="nfs-readdir",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1].strip(),
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", action=_Commands)
    adders = list(COMMANDS.values())
    if argv and argv[0] in COMMANDS:
        adders = [COMMANDS[argv[0]]]
    for add in adders:
        add(sub)
    return p


def _add_analyze(sub):
    s = sub.add_parser(
        "analyze",
        help="per listing: entries, time, READDIRs, restarts, "
        "invalidations, dentries added; per dcache run: "
        "phase deltas, rates, negative share, slowdown",
    )
    s.add_argument("traces", nargs="*", metavar="TRACE", help=TRACE_HELP)
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument(
        "--explain",
        action="store_true",
        help="what every column of the table and of the exports means, and exit (the same as "
        "`nfs-readdir glossary`)",
    )
    s.add_argument(
        "--details",
        type=_count,
        default=10,
        metavar="N",
        help="restarts and invalidations shown per listing (default 10)",
    )
    s.add_argument(
        "--top",
        type=_count,
        default=10,
        metavar="N",
        help="slab caches shown, by growth, for traces with kmem events (default 10)",
    )
    _port_option(s)
    s.set_defaults(func=commands.cmd_analyze)


def _add_check(sub):
    s = sub.add_parser(
        "check",
        help="verdict for git bisect run: 0 good, 1 bad, 125 skip, 128 error (stops the bisect)",
    )
    s.add_argument("traces", nargs="+", metavar="TRACE", help=TRACE_HELP)
    s.add_argument(
        "--max-restarts",
        type=_count,
        default=0,
        metavar="N",
        help="restarts allowed per listing, at cookie 0 or below the reader's position (default 0)",
    )
    s.add_argument(
        "--max-ratio",
        type=_ratio,
        default=None,
        metavar="R",
        help="without cookies: modified/idle READDIR ratio allowed (default: the "
        f"run's own, else {MAX_RATIO})",
    )
    _port_option(s)
    s.set_defaults(func=commands.cmd_check)


def _add_export(sub):
    s = sub.add_parser("export", help="canonical events as CSV or Parquet tables")
    s.add_argument("traces", nargs="+", metavar="TRACE", help=TRACE_HELP)
    s.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="DIR|FILE.json|-",
        help="csv, parquet: the dataset folder, one folder per table and one file per trace "
        "named by its id (made if missing, in a directory that exists; a table already there "
        "as this export writes it is left, one that differs is replaced). chrome-trace of one "
        "trace: that file (- : standard output), or where -o names a directory (one that "
        "exists, or a name ending in /) DIR/chrome-trace/ID.json, as for several traces",
    )
    s.add_argument(
        "--format",
        choices=("csv", "parquet", "chrome-trace"),
        default="csv",
        help="csv (default), parquet (needs pyarrow), or chrome-trace: Trace Event JSON for "
        "Perfetto's UI or chrome://tracing",
    )
    _port_option(s)
    s.set_defaults(func=commands.cmd_export)


def _add_plot(sub):
    s = sub.add_parser(
        "plot",
        help="cookie progress per listing, invalidations, restarts and "
        "dentries over time; dcache runs: dentries and negative "
        "dentries over time, one panel per run (PNG or SVG)",
    )
    s.add_argument("traces", nargs="+", metavar="TRACE", help=TRACE_HELP)
    what = "the image, its format from the extension; - writes a PNG to standard output"
    _output_option(s, "FILE.png|FILE.svg|FILE.pdf|-", what, required=True)
    _port_option(s)
    s.set_defaults(func=commands.cmd_plot)


def _add_compare(sub):
    s = sub.add_parser(
        "compare",
        help="two traces or results directories side by side (e.g. one reproducer on two kernels)",
    )
    s.add_argument("before", metavar="A", help="the first trace or results directory (before)")
    s.add_argument("after", metavar="B", help="the second (after); the ratios are B/A")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    _port_option(s)
    s.set_defaults(func=commands.cmd_compare)


def _add_report(sub):
    s = sub.add_parser(
        "report",
        help="one self-contained HTML page: per input its verdict, listings table and a "
        "timeline per listing; two inputs: their listings paired, with the ratios",
        description="Write one HTML page that works offline (no network request): per input "
        "the verdict and its evidence, the listings table, and a timeline per listing "
        "(READDIRs, getdents, invalidations, restarts and their cost; hover for the event). "
        "Two readdir inputs also get their listings paired by process and directory.",
    )
    s.add_argument(
        "traces", nargs="+", metavar="TRACE", help="traces, captures or results directories"
    )
    _output_option(s, "FILE.html|-", "the page (- : standard output)", required=True)
    _port_option(s)
    s.set_defaults(func=commands.cmd_report)


def _add_record(sub):
    s = sub.add_parser(
        "record",
        help="record a trace on this machine with the events and "
        "kprobes its kernel has (root; tracefs is put back as "
        "it was)",
    )
    _output_option(s, "FILE", "trace file (default trace.dat)", default="trace.dat")
    s.add_argument(
        "--dcache",
        action="store_true",
        help="also dcache samples every second and the dentries READDIR adds",
    )
    s.add_argument("--slab", action="store_true", help="also the kmem allocation events")
    s.add_argument(
        "--duration", type=_seconds, metavar="S", help="record for S seconds (instead of a command)"
    )
    s.add_argument("command", nargs="*", metavar="-- COMMAND", help="record while COMMAND runs")
    s.set_defaults(func=commands.cmd_record)


WATCH_SERVICE = """\
As a service (root: watch adds kprobes and a tracefs instance):
  ln -s "$PWD/.venv/bin/nfs-readdir" /usr/local/bin/nfs-readdir   # from the checkout
  cp contrib/nfs-readdir-watch.service /etc/systemd/system/
  systemctl daemon-reload && systemctl enable --now nfs-readdir-watch
It serves Prometheus metrics on port 9617 (--metrics :9617), on every IPv4 and IPv6 address;
--metrics 127.0.0.1:9617 or [::1]:9617 listens on one. Scrape it with contrib/prometheus.yml,
alert with contrib/nfs-readdir-alerts.yml; systemctl stop puts tracefs back as it was."""


def _add_watch(sub):
    s = sub.add_parser(
        "watch",
        help="print invalidations and restarts as they happen; the "
        "summary and exit status of check at Ctrl-C or the end",
        epilog=WATCH_SERVICE,
    )
    s.add_argument("--duration", type=_seconds, metavar="S", help="stop after S seconds")
    s.add_argument("--dir", metavar="PATH", help="only listings of this directory")
    s.add_argument("--json", action="store_true", help="the summary as analyze --json gives it")
    s.add_argument(
        "--metrics",
        type=_listen,
        metavar="ADDR:PORT",
        help="run as a service: Prometheus metrics on http://ADDR:PORT/metrics instead of lines "
        "(ADDR empty: every IPv4 and IPv6 address)",
    )
    s.add_argument(
        "--textfile",
        metavar="DIR",
        help="run as a service: the metrics in DIR/nfs_readdir.prom (node_exporter's textfile "
        "collector), written atomically every second",
    )
    s.set_defaults(func=commands.cmd_watch)


def _add_results(sub):
    s = sub.add_parser(
        "results",
        help="a reproducer's results directory: write its "
        "results.json; --verdict: its PASS/FAIL line and exit "
        "status (0, 1, 125); --table: runs side by side",
    )
    s.add_argument(
        "dir",
        nargs="+",
        metavar="DIR",
        help="a reproducer's --results directory (several with --table)",
    )
    s.add_argument("--verdict", action="store_true", help="print the verdict line only")
    s.add_argument("--table", action="store_true", help="print the runs side by side")
    s.set_defaults(func=commands.cmd_results)


def _add_slab(sub):
    s = sub.add_parser("slab", help="slab growth per cache from a trace's kmem events alone")
    s.add_argument("trace", metavar="TRACE", help="a trace with kmem allocation events")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument(
        "--top", type=_count, default=10, metavar="N", help="caches shown, by growth (default 10)"
    )
    s.set_defaults(func=commands.cmd_slab)


def _add_glossary(sub):
    s = sub.add_parser(
        "glossary",
        help="what every column of analyze's table and of export's tables means, with its unit",
    )
    s.set_defaults(func=commands.cmd_glossary)


# Every command, by name, with the function that adds it (parser()), in `--help`'s order.
COMMANDS = {
    "analyze": _add_analyze,
    "check": _add_check,
    "export": _add_export,
    "plot": _add_plot,
    "compare": _add_compare,
    "report": _add_report,
    "record": _add_record,
    "watch": _add_watch,
    "results": _add_results,
    "slab": _add_slab,
    "glossary": _add_glossary,
}


def input_errors():
    """The exceptions that mean the input could not be used: UsageError, TraceError, a
    directory that is no reproducer's results, and those of the modules this run imported (a
    module never imported raised nothing)."""
    errors = [UsageError, TraceError, runs.NotARun]
    for module, name in (
        ("pipeline", "InputError"),
        ("model.listing", "AnalysisError"),
        ("model.dcache", "DcacheError"),
        ("present.export", "ExportError"),
        ("live.recordplan", "KernelLacks"),
        ("live.tracing", "Refused"),
    ):
        loaded = sys.modules.get(f"{__package__}.{module}")
        if loaded is not None:
            errors.append(getattr(loaded, name))
    return tuple(errors)


def main(argv=None):
    # File names are bytes: one that is not UTF-8 is written back as the bytes it was.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    if argv is None:
        argv = sys.argv[1:]
    args = mistakes.parse(parser(argv), argv, parser)
    with contextlib.ExitStack() as stack:
        stack.callback(setattr, sys, "stdout", sys.stdout)
        stack.callback(SHOWN.clear)
        sys.stdout = GuardedOutput(sys.stdout)
        return _run(args, stack)


def _run(args, stack):
    """The command's exit status; every error is one line on stderr and status.ERROR, never a
    traceback and never a status git bisect run would take for an answer."""
    try:
        outputs_have_directories(args)
        open_inputs(args, stack)
        code = args.func(args)
        sys.stdout.flush()
        reader_left(sys.stdout)
        return code
    except OutputLost as e:
        return _output_lost(e, args)
    except input_errors() as e:
        print(f"nfs-readdir: {said(e)}", file=sys.stderr)
    except OSError as e:
        where = e.filename or getattr(args, "output", None)
        print(
            f"nfs-readdir: {said(os_error_text(e, where and shown(os.fsdecode(where))))}",
            file=sys.stderr,
        )
    except KeyboardInterrupt:
        print("nfs-readdir: interrupted", file=sys.stderr)
        return status.INTERRUPTED
    except Exception as e:  # a bug: say so in one line; no command may give a false verdict
        print(
            f"nfs-readdir: internal error: {type(e).__name__}: {said(e)} (please report it "
            "with the trace and the command)",
            file=sys.stderr,
        )
    return status.ERROR


def _output_lost(e, args):
    """The status when standard output failed: a command that had its answer (check, results
    --verdict) still gives it; any other never exits 0 with its output lost."""
    # What is still buffered for it goes nowhere: the interpreter's own flush at exit would
    # fail again, print a traceback and exit 120.
    assert isinstance(sys.stdout, GuardedOutput)  # (main guards it while the command runs)
    stdout = sys.stdout.stream
    with contextlib.suppress(AttributeError, OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stdout.fileno())
        os.close(null)
    answer = getattr(args, "answer", None)
    if e.errno != errno.EPIPE:  # a closed pipe is the reader's choice (| head): no message
        then = f"; the exit status is the verdict ({answer})" if answer is not None else ""
        print(
            f"nfs-readdir: cannot write the output: {os_error_text(e, 'standard output')}{then}",
            file=sys.stderr,
        )
    if answer is not None:
        return answer
    return status.OUTPUT_CLOSED if e.errno == errno.EPIPE else status.ERROR


if __name__ == "__main__":
    sys.exit(main())
