/*
 * What the libFuzzer harnesses share: an embedded interpreter (the readers' entry points are
 * Python functions written in C, called here straight, without an import) and the buffers
 * they are handed.  The input is given as a memoryview of libFuzzer's own copy, exactly its
 * size, so that AddressSanitizer sees a read one byte past it; PYTHONMALLOC=malloc does the
 * same for the objects the code makes.
 */
#ifndef NFSRT_FUZZPY_H
#define NFSRT_FUZZPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

static inline void fuzz_python_init(void)
{
	setenv("PYTHONMALLOC", "malloc", 1);
	Py_InitializeEx(0);
}

/* A read-only view of ``n`` bytes at ``p``. */
static inline PyObject *fuzz_bytes(const uint8_t *p, size_t n)
{
	return PyMemoryView_FromMemory((char *)p, (Py_ssize_t)n, PyBUF_READ);
}

/* A writable one-dimensional view of ``n`` items of ``itemsize`` bytes (struct ``format``). */
static inline PyObject *fuzz_array(void *p, Py_ssize_t n, Py_ssize_t itemsize, const char *format)
{
	static Py_ssize_t shape[1], strides[1];
	Py_buffer b = { 0 };

	shape[0] = n;
	strides[0] = itemsize;
	b.buf = p;
	b.len = n * itemsize;
	b.itemsize = itemsize;
	b.format = (char *)format;
	b.ndim = 1;
	b.shape = shape;
	b.strides = strides;
	return PyMemoryView_FromBuffer(&b);
}

/* A call's result dropped; an exception (the code's answer to bad input) cleared. */
static inline void fuzz_drop(PyObject *res)
{
	if (res)
		Py_DECREF(res);
	else
		PyErr_Clear();
}

/* A C entry point called with ``args`` (a new reference, dropped; NULL: the building failed). */
static inline PyObject *fuzz_call(PyCFunction f, PyObject *self, PyObject *args)
{
	PyObject *res = args ? f(self, args) : NULL;

	Py_XDECREF(args);
	return res;
}

#endif
