"""The kernel's ring-buffer page, defined once (include/linux/ring_buffer.h,
kernel/trace/ring_buffer.c): every reader of pages (trace.dat, trace_pipe_raw) and the compiled
walk take the format from here (tests/test_tracedat.py checks the #defines of
csrc/ringbuf/ringbuf.h against it).

A page is a header (a time stamp, then the commit word: bytes of data in its low 27 bits,
with the missed-events flags in its top bits; the offsets come from the header_page format)
and records, each a 32-bit word of type_len (5 bits) and time delta (27 bits): type_len 1-28
is an event of type_len*4 bytes, 0 an event whose length is in the next word, 29 padding, 30
a time extension, 31 an absolute time stamp. A little-endian word has type_len in its low
bits, a big-endian one in its high bits.
"""

from __future__ import annotations

from typing import NamedTuple

COMMIT_MASK = (1 << 27) - 1  # the commit word's bytes of data
MISSED_EVENTS = 1 << 31  # RB_MISSED_EVENTS: events were lost before this page
MISSED_STORED = 1 << 30  # RB_MISSED_STORED: their count is stored after the data
TS_SHIFT = 27  # the bits of a record header's time delta
TS_MSB = 0xF8 << 56  # the bits an absolute time stamp does not carry (5.10+)
TYPE_DATA_MAX = 28  # type_len 1..28: an event of type_len words
TYPE_PADDING, TYPE_TIME_EXTEND, TYPE_TIME_STAMP = 29, 30, 31


class PageLayout(NamedTuple):
    """Where things are in one trace's pages: the header_page offsets, the byte order, the
    size of a long (a stored lost-events count) and the event id field (common_type)."""

    page_size: int
    commit_off: int
    commit_size: int
    data_off: int
    big: bool
    long_size: int
    id_off: int
    id_size: int

    @classmethod
    def of(cls, page_size, header, big, long_size, id_field):
        """The layout from a parsed header_page (:func:`.format.parse_header_page`) and the
        common_type field."""
        return cls(
            page_size,
            header["commit_off"],
            header["commit_size"],
            header["data_off"],
            big,
            long_size,
            id_field.offset,
            id_field.size,
        )

    @property
    def endian(self):
        return ">" if self.big else "<"

    @property
    def limit(self):
        """The most data bytes a page holds."""
        return self.page_size - self.data_off

    @property
    def not_event(self):
        """The event id that marks a record that is not an event (the largest id)."""
        return (1 << (8 * self.id_size)) - 1

    def lut_size(self):
        """Entries of an id table (a lookup by event id; the last entry: every larger id)."""
        return (1 << (8 * self.id_size)) if self.id_size <= 2 else (1 << 20)

    def compiled_args(self):
        """The layout as the compiled walks take it, after the page size."""
        return (
            self.commit_off,
            self.commit_size,
            self.data_off,
            self.big,
            self.long_size,
            self.id_off,
            self.id_size,
        )


def damage_text(cpu, why, bad, detail, limit):
    """The message of damage a walk found: ``why`` "size" (a garbage commit size ``detail``),
    "empty" (a commit word of 0) or "chain" (a record runs past the page's data), ``bad`` the
    page counted from the start of the CPU's data; None for no damage."""
    if why == "size":
        return (
            f"cpu {cpu}: page {bad} of its data has a garbage header (commit size "
            f"{detail} > {limit})"
        )
    if why == "empty":
        return (
            f"cpu {cpu}: page {bad} of its data is empty (a commit word of 0, as a zeroed page "
            "has; the ring buffer writes no page without data): its events, and the CPU's "
            "after it, are not read"
        )
    if why == "chain":
        return (
            f"cpu {cpu}: the record chain in page {bad} of its data is broken (record "
            "runs past the page's data)"
        )
    return None
