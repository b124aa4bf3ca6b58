"""The compiled ring-buffer walk (nfsreaddir._ringbuf) is optional: without a C compiler or
Python headers the build goes on without it and the reader uses its numpy walk."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("nfsreaddir._ringbuf", ["analyzer/nfsreaddir/_ringbuf.c"],
                             extra_compile_args=["-O2"], optional=True)])
