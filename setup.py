"""The compiled ring-buffer walk (nfsreaddir._ringbuf), slab passes (nfsreaddir._slab), zstd
chunk inflation (nfsreaddir._zchunks, which needs libzstd's header) and capture decoder
(nfsreaddir._wiredecode, which needs zlib's header), each built with -Wall -Wextra. An extension
that does not compile fails the install: the numpy, python-zstandard and tshark readers run only
where asked for (NFSRT_READER=numpy, NFSRT_DECODER=tshark), never in place of a build that
failed unseen."""

import glob

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            f"nfsreaddir.{m}",
            [
                f"analyzer/nfsreaddir/{m}.c",
                *sorted(glob.glob(f"analyzer/nfsreaddir/csrc/{m.lstrip('_')}/*.c")),
            ],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
            libraries=libs,
        )
        for m, libs in (
            ("_ringbuf", []),
            ("_slab", []),
            ("_zchunks", ["zstd"]),
            ("_wiredecode", ["z"]),
        )
    ]
)
