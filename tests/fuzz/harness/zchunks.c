/*
 * libFuzzer harness of nfsreaddir._zchunks: a CPU stream's zstd chunks followed (chain()) and
 * inflated block after block into a reused block, as trace/streams.py reads them.  The module's
 * source is included whole: its entry points are static.
 *
 * Input: 4 bytes of settings, then the chunks as stored (after the count).
 *   [0] bit 0 big-endian  [1] page size (0: 4096, else the byte)
 *   [2] block size: 64 KiB << (low 2 bits)  [3] chunks to read (255: all)
 */
#include "fuzzpy.h"
#include "../../../analyzer/nfsreaddir/_zchunks.c"

static uint8_t block[256 << 10];
static PyObject *zchunks_module;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_python_init();
	zchunks_module = PyInit__zchunks();
	if (!zchunks_module)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	long long P, nchunks, pos = 0, stop, fill, done;
	int big;
	PyObject *src, *blk, *res;

	if (size < 4)
		return 0;
	big = data[0] & 1;
	P = data[1] ? data[1] : 4096;
	nchunks = data[3] == 255 ? 1LL << 31 : data[3];
	stop = (long long)size - 4;
	src = fuzz_bytes(data + 4, size - 4);
	blk = fuzz_array(block, (64 << 10) << (data[2] & 3), 1, "B");
	fuzz_drop(fuzz_call(chain, NULL,
			    Py_BuildValue("(OLLLiL)", src, 0LL, stop, nchunks, big,
					  (long long)(size / 3 + 1))));
	while (nchunks > 0) {
		int why;

		res = fuzz_call(inflate, NULL,
				Py_BuildValue("(OLLLOLi)", src, pos, stop, nchunks, blk, P, big));
		if (!res) {
			PyErr_Clear();
			break;
		}
		if (!PyArg_ParseTuple(res, "LLLi|LLz", &pos, &done, &fill, &why, &(long long){ 0 },
				      &(long long){ 0 }, &(const char *){ 0 }))
			abort();
		Py_DECREF(res);
		if (pos < 0 || pos > stop || fill < 0 || fill > (long long)sizeof(block))
			abort(); /* an answer outside what it was given */
		if (why || !done)
			break;
		nchunks -= done;
	}
	Py_DECREF(blk);
	Py_DECREF(src);
	return 0;
}
