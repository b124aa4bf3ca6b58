"""Units and plain values the analyses share."""

NS = 1_000_000_000  # nanoseconds in a second: trace time stamps are in ns


def int_or_none(v):
    """The integer a field holds, or None where it holds none: missing (None, NaN, pandas' NA)
    or not a number (a text field of a marker, a fact or a capture)."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
