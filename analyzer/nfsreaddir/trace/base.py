"""What every trace reader shares: the error it raises and the base columns of its frames."""

BASE_COLUMNS = ("ts", "cpu", "pid", "comm")


def field_column(name):
    """Column name of event field ``name`` in the frames returned by ``read()``."""
    return f"field_{name}" if name in BASE_COLUMNS else name


class TraceError(Exception):
    """A trace cannot be read (or only partly).

    The message says what is wrong and what to do about it.  When some events
    could be read before the damage, ``partial`` holds the frames decoded so
    far (same shape as the return value of ``read()``), otherwise ``None``.
    """

    def __init__(self, message, partial=None):
        super().__init__(message)
        self.partial = partial


def columns_of(frames):
    """``read_columns()`` of a reader whose own form is read()'s DataFrames: each frame as
    {column: Series} (no copy)."""
    return {k: {c: df[c] for c in df.columns} for k, df in frames.items()}


def one_piece(columns):
    """``read_pieces()`` of a reader without pieces of its own: each event's columns as its
    one piece (none where it has no rows)."""
    return {k: [c] if len(next(iter(c.values()), ())) else [] for k, c in columns.items()}
