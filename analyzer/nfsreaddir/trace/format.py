"""Event formats as the kernel writes them (``events/<system>/<name>/format``, ``header_page``)
and the ring-buffer statistics trace-cmd stores: the leaf every reader builds on (trace.dat,
``trace-cmd report`` text, tracefs pages). Knows nothing of files or of NFS."""

from __future__ import annotations

import re

import numpy as np

from .base import TraceError

_FIELD_RE = re.compile(
    r"^\s*field:(?P<decl>[^;]*);\s*offset:(?P<off>\d+);\s*size:(?P<size>\d+);"
    r"(?:\s*signed:(?P<signed>-?\d+);)?"
)
_DECL_RE = re.compile(r"^(?P<type>.*?)(?P<name>[A-Za-z_]\w*)\s*(?P<arr>\[[^\]]*\])?\s*$")
_CHAR_RE = re.compile(r"\b(?:const|volatile|signed)\b")


class Field:
    """One field of an event format.

    ``kind`` is ``"int"`` (1/2/4/8-byte integers), ``"str"`` (char arrays,
    ``__data_loc char[]``) or ``"bytes"`` (other arrays and structs).
    ``loc`` is ``None`` (fixed), ``"data"`` (``__data_loc``), ``"rel"``
    (``__rel_loc``) or ``"tail"`` (zero-size array up to the end of the record).
    """

    __slots__ = ("name", "type", "offset", "size", "signed", "kind", "loc")

    def __init__(self, name, ftype, offset, size, signed, kind, loc):
        self.name, self.type, self.offset, self.size = name, ftype, offset, size
        self.signed, self.kind, self.loc = signed, kind, loc

    @property
    def dtype(self):
        if self.kind == "int":
            return np.dtype(np.uint64 if (self.size == 8 and not self.signed) else np.int64)
        return np.dtype(object)

    def __repr__(self):
        return (
            f"Field({self.name!r}, {self.type!r}, off={self.offset}, size={self.size}, "
            f"{self.kind}{'/' + self.loc if self.loc else ''})"
        )


def _parse_field(decl, off, size, signed):
    decl = decl.strip()
    m = _DECL_RE.match(decl)
    if not m:
        return None
    ftype, name, arr = m.group("type").strip(), m.group("name"), m.group("arr")
    loc = None
    base = ftype
    if ftype.startswith("__data_loc"):
        loc, base = "data", ftype[len("__data_loc") :]
    elif ftype.startswith("__rel_loc"):
        loc, base = "rel", ftype[len("__rel_loc") :]
    base = base.replace("[]", "").strip()
    is_char = _CHAR_RE.sub("", base).strip() == "char"
    if arr is not None and loc is None and size == 0:
        loc = "tail"
    if signed is None:
        signed = not (base.startswith("unsigned") or re.match(r"^u\d+$", base) or "*" in base)
    else:
        signed = int(signed) != 0
    if loc is not None or arr is not None:
        kind = "str" if is_char else "bytes"
    elif size in (1, 2, 4, 8):
        kind = "int"
    else:
        kind = "bytes"
    return Field(name, ftype, off, size, signed, kind, loc)


class EventFormat:
    """An event format as stored in the file (``events/<system>/<name>/format``)."""

    def __init__(self, system, name, eid, fields, print_fmt):
        self.system, self.name, self.id = system, name, eid
        self.fields = fields  # dict name -> Field (common_* included)
        self.print_fmt = print_fmt

    @property
    def full_name(self):
        return f"{self.system}:{self.name}"

    def user_fields(self):
        return [f for f in self.fields if not f.startswith("common_")]

    def __repr__(self):
        return f"EventFormat({self.full_name!r}, id={self.id}, fields={list(self.fields)})"


def parse_format(text, system):
    """Parse one format file; returns an :class:`EventFormat` or ``None``."""
    name = eid = None
    fields = {}
    print_fmt = ""
    for line in text.splitlines():
        if line.startswith("name:"):
            name = line[5:].strip()
        elif line.startswith("ID:"):
            try:
                eid = int(line[3:].strip())
            except ValueError:
                return None
        elif line.startswith("print fmt:"):
            print_fmt = line[10:].strip()
        else:
            m = _FIELD_RE.match(line)
            if m:
                f = _parse_field(
                    m.group("decl"), int(m.group("off")), int(m.group("size")), m.group("signed")
                )
                if f is not None:
                    fields[f.name] = f
    if name is None or eid is None:
        return None
    return EventFormat(system, name, eid, fields, print_fmt)


def parse_header_page(text, long_size):
    """Offsets of the page header fields (timestamp, commit, data)."""
    hp = {"ts_off": 0, "commit_off": 8, "commit_size": long_size, "data_off": 8 + long_size}
    for line in text.splitlines():
        m = _FIELD_RE.match(line)
        if not m:
            continue
        f = _parse_field(
            m.group("decl"), int(m.group("off")), int(m.group("size")), m.group("signed")
        )
        if f is None:
            continue
        if f.name == "timestamp":
            hp["ts_off"] = f.offset
        elif f.name == "commit":
            hp["commit_off"], hp["commit_size"] = f.offset, f.size
        elif f.name == "data":
            hp["data_off"] = f.offset
    if hp["commit_size"] not in (4, 8) or hp["ts_off"] != 0 or hp["data_off"] not in (12, 16):
        raise TraceError(
            "the header_page format stored in the file is not one this reader "
            f"knows ({hp}); the file may be corrupt"
        )
    return hp


def parse_cpu_stats(texts):
    """The ring-buffer statistics trace-cmd stores (one CPUSTAT option per CPU, the text of
    ``per_cpu/cpuN/stats`` after a ``CPU: N`` line; the stats of a buffer instance follow a
    ``Buffer: NAME`` option).  Returns {instance: {cpu: {name: value}}}, names as in the
    file with spaces as underscores (``overrun``, ``commit_overrun``, ``dropped_events``,
    ``entries``, ``bytes``, ``read_events``, ``oldest_event_ts``, ...), values int, or
    float for the time stamps in seconds; a value that is neither stays a string."""
    out: dict[str, dict[int, dict[str, int | float | str]]] = {}
    instance = ""
    for text in texts:
        cpu = None
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            key, value = key.strip().lower().replace(" ", "_"), value.strip()
            if not sep or not key:
                continue
            if key == "buffer":
                instance = value
            elif key == "cpu":
                cpu = int(value) if value.isdigit() else None
                if cpu is not None:
                    out.setdefault(instance, {})[cpu] = {}
            elif cpu is not None:
                v: int | float | str
                try:
                    v = int(value)
                except ValueError:
                    try:
                        v = float(value)
                    except ValueError:
                        v = value
                out[instance][cpu][key] = v
    return out
