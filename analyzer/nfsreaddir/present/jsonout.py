"""JSON written as it is made: json.dump(obj, out, indent=2, default=str), byte for byte, where
some arrays of obj are Streams, each item made when it is written.

A server's capture has tens of thousands of listings, read back from disk one at a time
(model/spool); a record holding the summary of each would grow with the capture (40 MB of JSON
at 10 M packets). A Stream's items are made, written and dropped one by one.
"""

import json
from collections.abc import Iterator
from typing import Any

INDENT = 2


class Stream:
    """A JSON array whose items items() yields, made as it is written (once per writing)."""

    def __init__(self, items):
        self.items = items


def _has_stream(obj):
    if isinstance(obj, Stream):
        return True
    if isinstance(obj, dict):
        return any(_has_stream(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_has_stream(v) for v in obj)
    return False


def _leaf(obj, level):
    """obj as json.dump writes it at this depth."""
    text = json.dumps(obj, indent=INDENT, default=str)
    return text.replace("\n", "\n" + " " * (INDENT * level))


def _write(obj, out, level):
    if not _has_stream(obj):
        out.write(_leaf(obj, level))
        return
    inner = "\n" + " " * (INDENT * (level + 1))
    items: Iterator[tuple[str | None, Any]]
    if isinstance(obj, dict):
        # (a key not a string as json writes it: 1 as "1", True as "true")
        items = (
            (json.dumps(k if isinstance(k, str) else json.dumps(k)), v) for k, v in obj.items()
        )
        opening, closing = "{", "}"
    else:
        items = ((None, v) for v in (obj.items() if isinstance(obj, Stream) else obj))
        opening, closing = "[", "]"
    first = True
    for key, value in items:
        out.write((opening if first else ",") + inner)
        first = False
        if key is not None:
            out.write(key + ": ")
        _write(value, out, level + 1)
    if first:
        out.write(opening + closing)
    else:
        out.write("\n" + " " * (INDENT * level) + closing)


def dump(obj, out):
    """obj on out as json.dump(obj, out, indent=2, default=str) writes it, Streams as arrays."""
    _write(obj, out, 0)
