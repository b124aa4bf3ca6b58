"""How an analysis says which events it reads, where it is written (as LISA's requires_events
does): the pipeline merges the requests of the analyses a trace gets into one pass over it, and
nothing writes the list out a second time."""


def requires_events(request_of, applies=None):
    """Mark an analysis function: request_of(trace) is {event: fields} it reads from that
    trace; applies(trace) whether the trace has anything for it (default: a request at all)."""

    def mark(fn):
        fn.requires = request_of
        fn.applies = applies or (lambda trace: bool(request_of(trace)))
        return fn

    return mark


def requested(trace, analyses):
    """{event: set of fields}: the union of what the analyses read from the trace."""
    merged: dict[str, set[str]] = {}
    for a in analyses:
        for ev, cols in a.requires(trace).items():
            merged.setdefault(ev, set()).update(cols)
    return merged
