"""The event formats stored in a trace.dat, by id and by name, each parsed when first asked for."""

from __future__ import annotations

import re

from .base import TraceError
from .format import Field, parse_format

_NAME_RE = re.compile(r"^name:\s*(\S+)", re.M)
_ID_RE = re.compile(r"^ID:\s*(\d+)", re.M)


class Formats:
    def __init__(self, path):
        self.path = path
        self.by_id = {}  # id -> (system, name, format text); parsed on demand
        self._parsed = {}  # id -> EventFormat
        self.by_name = {}  # "system:name" -> id

    def add(self, data, system):
        """Keep the format text ``data`` of an event of ``system`` (parsed when asked for)."""
        text = data.decode("utf-8", "replace")
        m = _NAME_RE.search(text)
        i = _ID_RE.search(text)
        if not m or not i:
            return
        eid = int(i.group(1))
        self.by_id[eid] = (system, m.group(1), text)
        self.by_name[f"{system}:{m.group(1)}"] = eid

    def format(self, eid):
        """The :class:`.format.EventFormat` of an event id in the file."""
        fmt = self._parsed.get(eid)
        if fmt is None:
            system, _, text = self.by_id[eid]
            fmt = parse_format(text, system)
            if fmt is None:
                raise TraceError(
                    f"{self.path}: the stored format of event id {eid} cannot be parsed"
                )
            self._parsed[eid] = fmt
        return fmt

    def format_of(self, name):
        """The event format of ``"system:name"`` (or a name only one system has), or None."""
        name2 = name.replace("/", ":")
        eid = self.by_name.get(name2)
        if eid is None and ":" not in name2:
            hits = [i for i, src in self.by_id.items() if src[1] == name2]
            if len(hits) == 1:
                eid = hits[0]
        return None if eid is None else self.format(eid)

    def name_of(self, eid):
        """``"system:name"`` of an event id, or None when the file has no format for it."""
        src = self.by_id.get(eid)
        return f"{src[0]}:{src[1]}" if src else None

    def id_field(self):
        """The event id field (common_type) the records start with."""
        for eid in list(self.by_id)[:50]:
            fmt = self.format(eid)
            if "common_type" in fmt.fields:
                f = fmt.fields["common_type"]
                if f.size in (1, 2, 4):
                    return f
                break
        return Field("common_type", "unsigned short", 0, 2, False, "int", None)
