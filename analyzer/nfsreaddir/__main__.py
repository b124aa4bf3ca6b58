"""The `nfs-readdir` process: the console script's entry (run) and `python3 -m nfsreaddir
COMMAND ...`, nfs-readdir where the package is importable but its command is not installed (the
reproducers' guests)."""

import gc
import os
import sys
import threading

# The cyclic GC's youngest generation collected every 50,000 allocations, not every 700: a
# check of a small trace made 49 collections, nearly all while modules were imported (numpy's,
# the model's), that found 406 objects in all and cost 17 M of its 470 M instructions. A large
# analysis still collects, every 50,000 allocations of objects that can hold others. (Set
# before the command's modules are imported: they are most of those allocations.)
gc.set_threshold(50_000, *gc.get_threshold()[1:])

from .cli import main  # noqa: E402


def run():
    """main(), then the process's exit. Once the output is flushed and no thread of the
    command's own is left, the process ends without the interpreter's teardown: freeing every
    module's objects one by one (numpy's, the analyses') was 40 M of the 570 M instructions of
    `check` of a small trace, and gives back nothing the system does not. Each command has
    undone what it did (tracefs, mounts, writers) before main returns, and its temporary files
    are unlinked when made; where the output cannot be flushed, the interpreter's own exit
    says so as it would."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return code
    me = threading.current_thread()
    if not isinstance(code, int) or any(
        t is not me and not t.daemon and t.is_alive() for t in threading.enumerate()
    ):
        return code  # (no command leaves a thread today: the interpreter would wait for it)
    os._exit(code)


if __name__ == "__main__":
    sys.exit(run())
