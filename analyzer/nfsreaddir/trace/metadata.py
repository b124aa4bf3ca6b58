"""The metadata of a trace.dat that v6 holds in file order and v7 in sections of their own, read
the same way in both: the header info (the ring buffer's page and event headers), the ftrace
and event formats, the saved cmdlines. ``c`` is a :class:`.raw.Cursor` on the bytes; the
container that finds them is :mod:`.datfile`."""

from __future__ import annotations

import re

from .base import TraceError
from .format import parse_header_page
from .raw import Damage

# the type ids of the ring buffer's own events, the only ones this reader decodes
EVENT_HEADER_TYPES = {"padding": 29, "time_extend": 30, "time_stamp": 31}


def read_header_info(c, long_size, path):
    """The header info: the page header's layout (:func:`.format.parse_header_page`), after
    checking that the event header gives the usual type ids (``path``: for the message)."""
    if c.take(12) != b"header_page\0":
        raise Damage("'header_page' not found where expected")
    n = c.uint(8)
    hp = c.take(n).decode("utf-8", "replace")
    if c.take(13) != b"header_event\0":
        raise Damage("'header_event' not found where expected")
    n = c.uint(8)
    he = c.take(n).decode("utf-8", "replace")
    header_page = parse_header_page(hp, long_size)
    check_event_header(he, path)
    return header_page


def check_event_header(text, path):
    types = dict(EVENT_HEADER_TYPES)
    for k in list(types):
        m = re.search(rf"{k}\s*:\s*type\s*==\s*(\d+)", text)
        if m:
            types[k] = int(m.group(1))
    if types != EVENT_HEADER_TYPES:
        raise TraceError(f"{path}: unsupported ring-buffer event header {types}")


def read_ftrace_formats(c, formats):
    """The ftrace formats, into ``formats`` (:class:`.formats.Formats`)."""
    _read_formats(c, formats, "ftrace", 100000, "implausible ftrace format count {n}")


def read_event_formats(c, formats):
    """The event formats of every system, into ``formats`` (:class:`.formats.Formats`)."""
    nsys = c.uint(4)
    if nsys > 100000:
        raise Damage(f"implausible event system count {nsys}")
    for _ in range(nsys):
        system = c.cstr(4096)
        _read_formats(
            c, formats, system, 1000000, "implausible event count {n} for system {system!r}"
        )


def _read_formats(c, formats, system, most, damage):
    """A count, then that many formats of one system, each its size and its text; more
    than ``most`` is damage (the message ``damage``, with the count and the system)."""
    n = c.uint(4)
    if n > most:
        raise Damage(damage.format(n=n, system=system))
    for _ in range(n):
        size = c.uint(8)
        formats.add(c.take(size), system)


def read_cmdlines(data, cmdlines):
    """The saved cmdlines (``pid comm`` lines), into ``cmdlines`` ({pid: comm})."""
    for line in data.decode("utf-8", "replace").splitlines():
        pid, _, comm = line.strip().partition(" ")
        if pid.isdigit():
            cmdlines[int(pid)] = comm
