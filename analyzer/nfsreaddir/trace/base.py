"""What every trace reader shares: the interface it provides (:class:`Trace`), the error it
raises, the base columns of its frames and the types of its columns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, Union, runtime_checkable

# (numpy and pandas only where a column is made: a command that reads no trace imports neither)
if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from .arrays import Strs

BASE_COLUMNS = ("ts", "cpu", "pid", "comm")


def field_column(name):
    """Column name of event field ``name`` in the frames returned by ``read()``."""
    return f"field_{name}" if name in BASE_COLUMNS else name


def bare_name(name):
    """An event's name without its system: "nfs:nfs_readdir", "nfs/nfs_readdir" and report
    text's "nfs_readdir" are one event."""
    return name.replace("/", ":").rsplit(":", 1)[-1]


def new_info(fmt, path, instance, **more):
    """A reader's ``info`` before it has read anything: what every reader says of a trace
    (``more``: what only this format says, in its place after the kernel's name)."""
    return {
        "format": fmt,
        "path": path,
        "cpus": None,
        "clock": None,
        "trace_cmd_version": None,
        "uname": None,
        **more,
        "lost_events": [],
        "partial": False,
        "damage": [],
        "instance": instance or "",
        "instances": [],
        "scanned": False,
    }


class TraceError(Exception):
    """A trace cannot be read (or only partly).

    The message says what is wrong and what to do about it.  When some events
    could be read before the damage, ``partial`` holds the frames decoded so
    far (same shape as the return value of ``read()``), otherwise ``None``.
    """

    def __init__(self, message, partial=None):
        super().__init__(message)
        self.partial = partial


class NotWindowed(Exception):
    """A reader's windows (trace.dat's ``read_windows``) cannot give what one whole read gives
    (no compiled extract, damaged data, a CPU's times running back): the message says why,
    and the caller reads the whole trace instead, which gives the answer or the damage."""


# A column of read_columns() and read_pieces(), whichever the reader: numbers (and bytes) as a
# numpy array, strings as Strs (codes into the distinct values; -1: no value).
Column = Union["np.ndarray", "Strs"]
Request = Mapping[str, Iterable[str] | str | None] | Iterable[str]


class Format(Protocol):
    """What the readers' event formats give (format.py's EventFormat, which format.py builds
    with this module's TraceError: hence declared here, not imported)."""

    full_name: str  # "system:name"
    fields: dict[str, Any]  # name -> Field (offset, size, signed, kind), common_* too
    print_fmt: str | None

    def user_fields(self) -> list[str]: ...


@runtime_checkable
class Trace(Protocol):
    """What every reader of a trace file gives (:func:`nfsreaddir.trace.open_trace`'s
    TraceDat and ReportText, and OnePass over either): what the tables, the analyses, slab and
    dcache ask of a trace. ``events`` maps ``"system:name"`` to the fields wanted (``None``:
    all); ``base`` names which of :data:`BASE_COLUMNS` the frames have (``ts`` always)."""

    path: str
    info: dict[str, Any]  # format, cpus, clock, uname, lost_events, lost_total,
    # partial, damage, damaged_events, ... (see the package doc)

    def event_names(self) -> set[str]: ...

    def event_format(self, name: str) -> Format | None: ...

    def event_counts(self) -> dict[str, int]: ...

    def check_records(self) -> list[dict[str, Any]]: ...

    def read(
        self, events: Request, on_damage: str = "raise", base: Iterable[str] = BASE_COLUMNS
    ) -> dict[str, pd.DataFrame]: ...

    def read_columns(
        self, events: Request, on_damage: str = "raise", base: Iterable[str] = BASE_COLUMNS
    ) -> dict[str, dict[str, Column]]: ...

    def read_pieces(
        self, events: Request, on_damage: str = "raise", base: Iterable[str] = BASE_COLUMNS
    ) -> dict[str, list[dict[str, Column]]]: ...


def column_of(series):
    """A column of a read() frame as read_columns() gives it: a string column (the text
    reader's, or a categorical from a trace.dat) as :class:`Strs`, any other as its numpy
    array (no copy where pandas holds one)."""
    import pandas as pd  # (a frame was made: pandas is loaded)

    from .arrays import Strs

    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return Strs(series.cat.codes.to_numpy(), list(dtype.categories))
    if isinstance(dtype, pd.StringDtype):
        codes, uniq = pd.factorize(series.to_numpy(dtype=object), use_na_sentinel=True)
        return Strs(codes, list(uniq))
    return series.to_numpy()


def columns_of(frames):
    """``read_columns()`` of a reader whose own form is read()'s DataFrames: each frame as
    {column: :data:`Column`}."""
    return {k: {c: column_of(df[c]) for c in df.columns} for k, df in frames.items()}


def one_piece(columns):
    """``read_pieces()`` of a reader without pieces of its own: each event's columns as its
    one piece (none where it has no rows)."""
    return {k: [c] if len(next(iter(c.values()), ())) else [] for k, c in columns.items()}
