"""What kind of input a file is, from its first bytes: the one place every input format is told
apart (trace.dat, `trace-cmd report` text, and packet captures, gzip'd or not)."""

import os

TRACE_DAT_MAGIC = b"\x17\x08\x44tracing"
# pcap (both byte orders, microsecond and nanosecond), pcapng, gzip.
PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
GZIP_MAGIC = b"\x1f\x8b"


def capture_format(path):
    """'pcap', 'pcapng', 'gzip-pcap', 'gzip-pcapng' or None, from the first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            if head[:2] == GZIP_MAGIC:
                import gzip  # (here: most inputs are not gzip'd)

                f.seek(0)
                try:
                    inner = gzip.GzipFile(fileobj=f).read(4)
                except (OSError, EOFError):
                    return None
                kind = _plain_capture(inner)
                return f"gzip-{kind}" if kind else None
            return _plain_capture(head)
    except OSError:
        return None


def _plain_capture(head):
    if head in PCAP_MAGICS:
        return "pcap"
    if head == PCAPNG_MAGIC:
        return "pcapng"
    return None


# What a file must be, for a message that refuses one that is none of them.
THE_KINDS = (
    "a trace.dat (`trace-cmd record`), `trace-cmd report` text, or a pcap or pcapng capture "
    "(`tcpdump -s 0 -w FILE port 2049`), each gzip'd or not"
)


def looks_like_input(head):
    """Whether the first bytes of a file (4 KiB, or all of a shorter one) begin one of
    THE_KINDS: a gzip stream is taken on its magic alone (what it holds is read later)."""
    if head.startswith(TRACE_DAT_MAGIC[:3]) or head[:2] == GZIP_MAGIC:
        return True
    if _plain_capture(head[:4]):
        return True
    from .text import looks_like_report  # (pandas: only where a text is looked at)

    return looks_like_report(head)


def not_an_input(name, head):
    """The sentence for a file that is none of THE_KINDS, from its first bytes: what it is
    instead where that can be told. name: as the sentence shows it (quoted, or "standard
    input")."""
    if not head:
        what = "is empty"
    elif head[:2] == GZIP_MAGIC:
        what = "is gzip'd, but what it holds is not a pcap or pcapng capture"
    else:
        what = "is none of the kinds nfs-readdir reads"
    return f"{name} {what}: give {THE_KINDS}"


def is_capture(path):
    """A packet capture (read by trace.capture), as against a trace (read by open_trace)."""
    return path != "-" and os.path.isfile(path) and capture_format(path) is not None
