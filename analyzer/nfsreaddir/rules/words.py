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
_LOST = re.compile(r"^(?P<n>[\d,]+|an unknown number of) events lost on CPU \d+$")


def damage_summary(damage: list[dict]) -> str:
    """A listing's damages: the first kind, once, with how many places and what they lost,
    and how many other kinds (a ring-buffer loss or a capture's drops leave a thousand places
    in one listing, each worded alike). The input's own losses (events lost, records that
    cannot be read, packets dropped) come first, in the order they came; then what the
    events around them made look wrong (a task's call with no end: its pid)."""
    # clause -> [places, bytes or events, places that did not count their events]
    kinds: dict[str, list[int]] = {}
    places = {(d.get("pid") is not None, d["from"], d["to"], d["what"]) for d in damage}
    for *_, what in sorted(places):
        m, lost = _BYTES.match(what), _LOST.match(what)
        key, n = (m["what"], m["n"]) if m else ("events lost", lost["n"]) if lost else (what, "0")
        k = kinds.setdefault(key, [0, 0, 0])
        k[0] += 1
        if n[0].isdigit():
            k[1] += int(n.replace(",", ""))
        else:
            k[2] += 1
    key, (where, n, uncounted) = next(iter(kinds.items()))
    if key == "events lost":
        many = f"{n:,}" if not uncounted else f"at least {n:,}" if n else "an unknown number of"
        said = f"{many} events lost in {counted(where, 'place')}"
    elif n:
        said = f"{key}: {counted(where, 'hole')}, {n:,} bytes"
    else:
        said = key if where == 1 else f"{key} ({where} places)"
    more = len(kinds) - 1
    return said + (f"; and {counted(more, 'other damage')}" if more else "")
