/*
 * libFuzzer harness of nfsreaddir._slab: the slab tally fed the columns a trace's kmem events
 * decode to (their values are the file's), in two windows, then its result.  The module's entry
 * is included whole (Tally's methods are static); its passes are linked.
 *
 * Input: [0] pieces - 1 (low 2 bits)  [1] caches - 1 (low 4 bits), then per piece:
 *   [0] bit 0 an allocation kind; bit 1 a key column, its item 1 << (bits 2-3) bytes
 *   [1] events (low 5 bits)  [2] table entries - 1
 *   then its columns: ts (int64), ptr (uint64), bytes (int64, allocations), key, table (int32)
 * each copied into a buffer of exactly its size.
 */
#include "fuzzpy.h"
#include "../../../analyzer/nfsreaddir/_slab.c"

#define MAXPIECES 4

static PyObject *slab_module;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_python_init();
	slab_module = PyInit__slab();
	if (!slab_module)
		abort();
	return 0;
}

/* ``n`` bytes of the input at ``*at`` into a buffer of their own; NULL when it has fewer. */
static void *take_bytes(const uint8_t *data, size_t size, size_t *at, size_t n)
{
	void *p;

	if (*at + n > size)
		return NULL;
	p = malloc(n ? n : 1);
	memcpy(p, data + *at, n);
	*at += n;
	return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const key_formats[4] = { "b", "h", "i", "q" };
	void *bufs[MAXPIECES][5] = { { 0 } };
	PyObject *pieces[2], *tally, *out;
	Py_ssize_t k;
	size_t at = 2;
	int np_, i, j;
	int64_t *res;

	if (size < 2)
		return 0;
	np_ = 1 + (data[0] & 3);
	k = 1 + (data[1] & 15);
	pieces[0] = PyList_New(0);
	pieces[1] = PyList_New(0);
	for (i = 0; i < np_ && at + 3 <= size; i++) {
		uint8_t flags = data[at];
		int alloc = flags & 1, keyed = flags & 2, ks = 1 << ((flags >> 2) & 3);
		Py_ssize_t n = data[at + 1] & 31, nt = 1 + (Py_ssize_t)data[at + 2];
		PyObject *cols[5], *piece;

		at += 3;
		bufs[i][0] = take_bytes(data, size, &at, n * 8);
		bufs[i][1] = take_bytes(data, size, &at, n * 8);
		bufs[i][2] = alloc ? take_bytes(data, size, &at, n * 8) : NULL;
		bufs[i][3] = keyed ? take_bytes(data, size, &at, n * ks) : NULL;
		bufs[i][4] = keyed ? take_bytes(data, size, &at, nt * 4) : NULL;
		if (!bufs[i][0] || !bufs[i][1] || (alloc && !bufs[i][2]) ||
		    (keyed && (!bufs[i][3] || !bufs[i][4])))
			break;
		cols[0] = fuzz_array(bufs[i][0], n, 8, "q");
		cols[1] = fuzz_array(bufs[i][1], n, 8, "Q");
		cols[2] = alloc ? fuzz_array(bufs[i][2], n, 8, "q") : Py_NewRef(Py_None);
		cols[3] = keyed ? fuzz_array(bufs[i][3], n, ks, key_formats[(flags >> 2) & 3])
				: Py_NewRef(Py_None);
		cols[4] = keyed ? fuzz_array(bufs[i][4], nt, 4, "i") : Py_NewRef(Py_None);
		piece = Py_BuildValue("(iNNNNNL)", alloc, cols[0], cols[1], cols[2], cols[3],
				      cols[4], (long long)i);
		PyList_Append(pieces[i >= (np_ + 1) / 2], piece);
		Py_DECREF(piece);
	}
	tally = PyObject_CallNoArgs((PyObject *)&TallyType);
	if (!tally)
		abort();
	fuzz_drop(fuzz_call(tally_feed, tally, Py_BuildValue("(On)", pieces[0], k)));
	fuzz_drop(fuzz_call(tally_feed, tally, Py_BuildValue("(On)", pieces[1], k)));
	res = calloc(N_ROWS * k, 8);
	out = fuzz_array(res, N_ROWS * k, 8, "q");
	fuzz_drop(fuzz_call(tally_result, tally, Py_BuildValue("(O)", out)));
	Py_DECREF(out);
	free(res);
	Py_DECREF(tally);
	Py_DECREF(pieces[0]);
	Py_DECREF(pieces[1]);
	for (i = 0; i < MAXPIECES; i++)
		for (j = 0; j < 5; j++)
			free(bufs[i][j]);
	return 0;
}
