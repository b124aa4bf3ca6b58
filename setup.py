"""The compiled ring-buffer walk (nfsreaddir._ringbuf), slab passes (nfsreaddir._slab), zstd
chunk inflation (nfsreaddir._zchunks, which needs libzstd's header) and capture decoder
(nfsreaddir._wiredecode, which needs zlib's header) are optional: without a C compiler, Python
headers, zstd.h or zlib.h the build goes on without them, the reader and the slab analysis use
their numpy and python-zstandard versions, and tshark decodes captures."""

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
            extra_compile_args=["-O2"],
            libraries=libs,
            optional=True,
        )
        for m, libs in (
            ("_ringbuf", []),
            ("_slab", []),
            ("_zchunks", ["zstd"]),
            ("_wiredecode", ["z"]),
        )
    ]
)
