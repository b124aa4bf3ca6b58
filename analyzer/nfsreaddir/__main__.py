"""`python3 -m nfsreaddir COMMAND ...`: nfs-readdir where the package is importable but its
command is not installed (the reproducers' guests)."""

import sys

from .cli import run

sys.exit(run())
