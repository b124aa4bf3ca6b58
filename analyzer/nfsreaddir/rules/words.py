"""Counts and damage in the words every surface says them: one noun for one, and a listing's
damage places, a thousand alike, as one clause with a count (issue 58)."""

from __future__ import annotations


def counted(count: int, word: str, words: str | None = None) -> str:
    """'1 listing', '2 listings', '1,024 places': a count and its noun, plural (words, or
    word + s) but for one (every surface's counts are said through here)."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"


def damage_summary(damage: list[dict]) -> str:
    """A listing's damages: the first kind, once, with how many places and what they lost,
    and how many other kinds (a ring-buffer loss or a capture's drops leave a thousand places
    in one listing, each worded alike). The input's own losses (events lost, records that
    cannot be read, packets dropped) come first, in the order they came; then what the
    events around them made look wrong (a task's call with no end: its pid). A place says its
    kind and what it lost where the model gave them ("kind", and "bytes" of a capture's hole
    or "events" of a ring-buffer loss, None where the count is not known)."""
    # clause -> [places, bytes or events, places that did not count their events]
    kinds: dict[str, list[int]] = {}
    places = {(d.get("pid") is not None, d["from"], d["to"], d["what"]): d for d in damage}
    for place in sorted(places):
        d = places[place]
        k = kinds.setdefault(d.get("kind", d["what"]), [0, 0, 0])
        k[0] += 1
        lost = d.get("bytes", d.get("events", 0))
        if lost is None:
            k[2] += 1
        else:
            k[1] += lost
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
