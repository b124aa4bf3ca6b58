/*
 * libFuzzer harness of nfsreaddir._wiredecode: decode() of one capture, pcap or pcapng, gzip'd
 * or not (the input, whole), through TCP reassembly and RPC record marking to the rows of the
 * NFS READDIR and GETATTR calls and replies, handed to a callback that drops them.  The
 * decoder reads a path: the input is written to a memfd and given as /proc/self/fd/N.  The
 * module's glue is included whole (decode() is static); its parts are linked.
 *
 * NFSRT_FUZZ_GZCLOSE_LATE=1: decode()'s gzclose() is put off until decode() has returned, so
 * that a run goes past the use-after-free of gzerror()'s text (_wiredecode.c: the text is
 * read after gzclose() freed it, tests/fuzz/wiredecode/crash-b8607b6d...), and a pcapng
 * whose packet names an interface id of 2**31 or more is skipped (csrc/wiredecode/files.c
 * compares it as an int and reads far outside its table: crash-a10c84ae...); the replay of
 * make test leaves it unset.  Remove both with those bugs.
 */
#define _GNU_SOURCE
#include "fuzzpy.h"
#include <zlib.h>

static gzFile closed_late;
static int close_late;

static int fuzz_gzclose(gzFile f)
{
	if (!close_late)
		return gzclose(f);
	closed_late = f;
	return Z_OK;
}

#define gzclose fuzz_gzclose
#include "../../../analyzer/nfsreaddir/_wiredecode.c"
#undef gzclose
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
	close_late = getenv("NFSRT_FUZZ_GZCLOSE_LATE") && *getenv("NFSRT_FUZZ_GZCLOSE_LATE") == '1';
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

/* Whether an uncompressed pcapng's enhanced packet block names an interface id of 2**31 or
 * more (the blocks followed by their lengths, in the byte order of the section's header). */
static int huge_interface_id(const uint8_t *p, size_t n)
{
	size_t at = 0;
	int swap = 0;

	if (n < 12 || memcmp(p, "\x0a\x0d\x0d\x0a", 4))
		return 0;
	while (at + 12 <= n) {
		uint32_t type, len;

		memcpy(&type, p + at, 4);
		if (type == 0x0a0d0d0a)
			swap = p[at + 8] == 0x1a; /* (the byte-order magic, big-endian) */
		memcpy(&len, p + at + 4, 4);
		if (swap) {
			type = __builtin_bswap32(type);
			len = __builtin_bswap32(len);
		}
		if (type == 6 && at + 12 <= n && (swap ? p[at + 8] : p[at + 11]) & 0x80)
			return 1;
		if (len < 12 || len > n - at)
			return 0;
		at += len;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (close_late && huge_interface_id(data, size))
		return 0;
	if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	fuzz_drop(decode(NULL, args));
	if (closed_late) {
		gzclose(closed_late);
		closed_late = NULL;
	}
	return 0;
}
