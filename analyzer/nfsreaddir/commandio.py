"""The streams of a command: the inputs it names, checked and (standard input, pipes, FIFOs)
spooled into files before anything is read, with the names the user gave them; the files it
writes, refused where their directory is missing and the file each replaces kept as NAME~;
standard output guarded so that a closed pipe or a full disk is told from the files a command
reads or writes; and the progress line on a terminal."""

import errno
import os
import select
import stat
import sys


class UsageError(Exception):
    """The command's words cannot be run: a usage error, an input missing or unreadable."""


class OutputLost(Exception):
    """Standard output could not be written (a closed pipe, a full disk): apart from OSError, so
    that no handler of the files a command reads or writes takes it for theirs."""

    def __init__(self, error):
        self.strerror = error.strerror or str(error)
        super().__init__(self.strerror)
        self.errno = error.errno


class GuardedOutput:
    """sys.stdout while a command runs: its write errors become OutputLost."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        if self.stream is None:  # started with descriptor 1 closed (>&-)
            raise OutputLost(OSError(errno.EBADF, "standard output is closed"))
        try:
            return self.stream.write(text)
        except OSError as e:
            raise OutputLost(e) from None

    def flush(self):
        if self.stream is None:
            return
        try:
            self.stream.flush()
        except OSError as e:
            raise OutputLost(e) from None

    def __getattr__(self, name):
        return getattr(self.stream, name)


def reader_left(out):
    """OutputLost when standard output is a pipe whose reader has gone (`| head -c10`): an
    output that fit in the pipe whole was written without error, but no one read it all, and
    the command must not say it is done (status.OUTPUT_CLOSED, as when a write fails)."""
    try:
        fd = out.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's StringIO), or closed
        return
    poll = select.poll()
    poll.register(fd, select.POLLERR)
    if poll.poll(0):
        raise OutputLost(OSError(errno.EPIPE, os.strerror(errno.EPIPE)))


# The commands' arguments that name inputs (traces, captures, results directories).
INPUT_ARGS = ("traces", "before", "after", "trace")
# Spooled copies of streams, by the path they are read through: the name the user gave.
SHOWN: dict[str, str] = {}


def shown(path):
    """The name the user gave for an input, also where a stream was spooled."""
    return SHOWN.get(path, path)


def said(error):
    """An error's text with the user's names for spooled inputs."""
    text = str(error)
    for path, name in SHOWN.items():
        text = text.replace(path, name)
    return text


def open_inputs(args, stack):
    """Check that every input the command names can be read, before any is analyzed, and spool
    each stream (standard input as -, a pipe, a FIFO, <(...)) once into a private temporary
    file: every reader, tshark included, then reads a regular file, so a capture works from a
    stream as a trace does. The copy is unlinked from the start (reached through /proc/PID/fd,
    which tshark can open too), so nothing is left behind whatever ends the process; stack
    closes it. A stream named twice (check - -) would be read empty the second time: refused."""
    streams: dict[tuple[int, int], str] = {}
    for attr in INPUT_ARGS:
        value = getattr(args, attr, None)
        if value is None:
            continue
        paths = [_input(p, streams, stack) for p in (value if isinstance(value, list) else [value])]
        setattr(args, attr, paths if isinstance(value, list) else paths[0])


def _input(path, streams, stack):
    try:
        st = os.fstat(0) if path == "-" else os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode) and path != "-":
        try:
            if stat.S_ISDIR(st.st_mode):
                os.listdir(path)  # (unlisted, it would look like a directory without traces)
            else:
                open(path, "rb").close()
        except OSError as e:
            raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
        return path
    key = (st.st_dev, st.st_ino)
    if key in streams:
        name = "standard input (-)" if path == "-" else path
        same = "is named twice" if streams[key] == path else f"and {streams[key]} are one stream"
        raise UsageError(
            f"{name} {same}: a stream can be read only once; save it to a file "
            "and name the file instead"
        )
    streams[key] = path
    return _spool(path, stack)


def _spool(path, stack):
    from .trace import spool  # (here: only a stream is copied; check of a file reads none)

    copy = stack.enter_context(spool(path, progress))
    spooled = f"/proc/{os.getpid()}/fd/{copy.fileno()}"
    SHOWN[spooled] = path
    return spooled


def outputs_have_directories(args):
    """A usage error unless the directory each output goes into exists (-o, watch's
    --textfile), before any input is read: nothing is made that the user did not name."""
    textfile = getattr(args, "textfile", None)
    for path in (getattr(args, "output", None), textfile and os.path.join(textfile, "x")):
        if path is None or path == "-":
            continue
        where = os.path.dirname(path.rstrip("/")) or "."
        if os.path.isdir(where):
            continue
        what = "is not a directory" if os.path.lexists(where) else "does not exist"
        raise UsageError(f"cannot write {path}: {where} {what} (make it first, or write elsewhere)")


def keep_old(path):
    """Move a file that an output is about to replace aside to NAME~ (an older NAME~ goes),
    just before the output is written; the name it is kept as, or None where there was none.
    A device or a FIFO (-o /dev/null) is written in place, never moved."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        return None
    os.replace(path, path + "~")
    return path + "~"


def kept_as(path, kept):
    """The line that names an output written, and where the file it replaced is kept."""
    return f"{path} (the file that was there is kept as {kept})" if kept else path


# Above this many bytes of traces, or for several traces, say what is being read.
PROGRESS_BYTES = 1 << 30


def progress(what):
    """A progress line rewritten in place on a terminal (never in a pipe or in JSON);
    None clears it."""
    if not sys.stderr.isatty():
        return
    sys.stderr.write("\r\033[K" + (f"nfs-readdir: {what}" if what else ""))
    sys.stderr.flush()


# Errors of writing where space ran out: the message says to free some or write elsewhere.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def os_error_text(e, where):
    """One line for an OSError: the file it concerns and, when space ran out, what to do."""
    text = f"{where}: {e.strerror or e}" if where else str(e.strerror or e)
    if e.errno in NO_SPACE:
        text += " (free space there, or write somewhere else)"
    return text
