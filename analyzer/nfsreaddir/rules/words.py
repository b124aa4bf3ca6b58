"""Counts and damage in the words every surface says them: one noun for one, and a listing's
damage places, a thousand alike, as one clause with a count (issue 58)."""

from __future__ import annotations

import re


def counted(count: int, word: str, words: str | None = None) -> str:
    """'1 listing', '2 listings', '1,024 places': a count and its noun, plural (words, or
    word + s) but for one (every surface's counts are said through here)."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"


# A damage that a capture places on a connection ends with the bytes it lost there; one that a
# trace's CPU lost, with the CPU: each kind is one clause, with a count and a total.
_BYTES = re.compile(r"^(?P<what>.*) \((?P<n>[\d,]+) bytes to the (?:server|client)\)$")
_LOST = re.compile(r"^(?P<n>[\d,]+) events lost on CPU \d+$")


def damage_summary(damage: list[dict]) -> str:
    """A listing's damages: the first kind in the order they came, once, with how many places
    and what they lost, and how many other kinds (a ring-buffer loss or a capture's drops
    leave a thousand places in one listing, each worded alike)."""
    kinds: dict[str, list[int]] = {}  # clause -> [places, bytes or events]
    for _, _, what in sorted({(d["from"], d["to"], d["what"]) for d in damage}):
        m = _BYTES.match(what)
        if m:
            key, n = m["what"], int(m["n"].replace(",", ""))
        elif _LOST.match(what):
            key, n = "events lost", int(what.split()[0].replace(",", ""))
        else:
            key, n = what, 0
        k = kinds.setdefault(key, [0, 0])
        k[0] += 1
        k[1] += n
    key, (places, n) = next(iter(kinds.items()))
    if key == "events lost":
        said = f"{n:,} events lost in {counted(places, 'place')}"
    elif n:
        said = f"{key}: {counted(places, 'hole')}, {n:,} bytes"
    else:
        said = key if places == 1 else f"{key} ({places} places)"
    more = len(kinds) - 1
    return said + (f"; and {counted(more, 'other damage')}" if more else "")
