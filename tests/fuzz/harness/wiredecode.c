/*
 * libFuzzer harness of nfsreaddir._wiredecode: decode() of one capture, pcap or pcapng, gzip'd
 * or not (the input, whole), through TCP reassembly and RPC record marking to the rows of the
 * NFS READDIR and GETATTR calls and replies, handed to a callback that drops them.  The
 * decoder reads a path: the input is written to a memfd and given as /proc/self/fd/N.  The
 * module's glue is included whole (decode() is static); its parts are linked.
 */
#define _GNU_SOURCE
#include "fuzzpy.h"
#include "../../../analyzer/nfsreaddir/_wiredecode.c"
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static int fd;
static char path[64];
static PyObject *args;

static PyObject *drop_row(PyObject *self, PyObject *row)
{
	(void)self;
	(void)row;
	Py_RETURN_NONE;
}

static PyMethodDef drop_def = { "drop_row", drop_row, METH_O, NULL };

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	PyObject *cols, *cb;
	int c;

	(void)argc;
	(void)argv;
	fuzz_python_init();
	fd = memfd_create("capture", 0);
	if (fd < 0)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	cols = PyList_New(N_COLS);
	for (c = 0; c < N_COLS; c++)
		PyList_SET_ITEM(cols, c, PyUnicode_FromString(col_names[c]));
	cb = PyCFunction_New(&drop_def, NULL);
	args = Py_BuildValue("(s[ii]NN)", path, 2049, 20049, cols, cb);
	if (!args)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	fuzz_drop(decode(NULL, args));
	return 0;
}
