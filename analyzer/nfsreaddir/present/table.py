"""Text tables written as their rows are made, in the layout of pandas' to_string(index=False).

A server's capture has tens of thousands of listings, read back one at a time (model/spool);
their table would hold every cell until the widths were known. Here each row goes to an
unlinked temporary file as it is made, and only each column's width stays in memory; the
table is written once every row is in. The layout is pandas' (tests/test_plain_outputs holds
the two side by side): each column right-justified to its widest cell or its name, one space
between columns, and a column of integers alone one wider than its name.
"""

from __future__ import annotations

import heapq
import marshal
from numbers import Integral

from ..model.spool import spooled, temporary_file

# Rows kept in memory before they go to the file, and read back at a time.
PART_ROWS = 500

# What pandas shows in place of these characters in a cell.
_ESCAPES = str.maketrans({"\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _int(v):
    return isinstance(v, Integral) and not isinstance(v, bool)


class Table:
    """A table of the given columns: add(position, row) in any order of positions (a row
    held back and added late goes where its position puts it), then write(out)."""

    def __init__(self, columns):
        self.columns = tuple(columns)
        self._file = temporary_file("text's table")
        self._part: list = []
        self._parts = 0
        self._late: list = []  # rows added after rows with higher positions, sorted at write
        self._last = -1
        self.rows = 0
        self._ints = [True] * len(self.columns)  # whether a column holds integers alone
        self._width = [0] * len(self.columns)  # its widest cell

    def add(self, position, row):
        row = tuple(int(v) if _int(v) else str(v).translate(_ESCAPES) for v in row)
        for k, v in enumerate(row):
            self._width[k] = max(self._width[k], len(str(v)))
            if not isinstance(v, int):
                self._ints[k] = False
        self.rows += 1
        if position < self._last:
            self._late.append((position, row))
            return
        self._last = position
        self._part.append((position, row))
        if len(self._part) >= PART_ROWS:
            self._flush()

    def _flush(self):
        spooled(lambda: marshal.dump(self._part, self._file), "text's table")
        self._parts += 1
        self._part = []

    def _in_order(self):
        """(position, row) of every row, by position."""

        def stored():
            spooled(lambda: self._file.seek(0), "text's table")
            for _ in range(self._parts):
                yield from marshal.load(self._file)
            yield from self._part

        return heapq.merge(stored(), sorted(self._late, key=lambda x: x[0]), key=lambda x: x[0])

    def write(self, out):
        """The table and a newline on out, as pandas' to_string(index=False) writes it."""
        # (pandas gives each integer a sign's place, " 5", and then takes from the column
        # the spaces every value has: what stays is the name's one more.)
        widths = [
            max(len(name) + self._ints[k], self._width[k]) for k, name in enumerate(self.columns)
        ]

        def line(cells):
            return " ".join(c.rjust(w) for c, w in zip(cells, widths)) + "\n"

        out.write(line(name.translate(_ESCAPES) for name in self.columns))
        for _, row in self._in_order():
            out.write(line(map(str, row)))

    def frame(self):
        """The table as a DataFrame (for the HTML report)."""
        import pandas as pd

        rows = [row for _, row in self._in_order()]
        return pd.DataFrame(rows, columns=list(self.columns)) if rows else pd.DataFrame()
