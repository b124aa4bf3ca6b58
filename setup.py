"""The compiled ring-buffer walk (nfsreaddir._ringbuf) and slab passes (nfsreaddir._slab) are
optional: without a C compiler or Python headers the build goes on without them and the reader
and the slab analysis use their numpy versions."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(f"nfsreaddir.{m}", [f"analyzer/nfsreaddir/{m}.c"],
                             extra_compile_args=["-O2"], optional=True)
                   for m in ("_ringbuf", "_slab")])
