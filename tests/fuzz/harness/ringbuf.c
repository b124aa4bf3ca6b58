/*
 * libFuzzer harness of nfsreaddir._ringbuf: the walk of a block of ring-buffer pages (walk(),
 * resumed as trace/ringbuf.py resumes it), the field decoders over what it listed (ints(),
 * strings()), and the one-pass extract into columns (Extract.walk(), screen(), values(),
 * take()), all on one block.
 *
 * Input: 8 bytes of layout, then the block.
 *   [0] bits 0-1 page size (4096, 64, 256, 1024); bit 2 a 4-byte commit word (else 8);
 *       bit 3 big-endian; bit 4 4-byte longs (else 8); bit 5 a lut (else every event);
 *       bit 6 start at page 1
 *   [1] commit word's offset  [2] data offset  [3] event id's offset (signed)
 *   [4] event id's size - 1 (low 3 bits)
 *   [5] a field's offset (bit 7: signed)  [6] its size - 1 (low 3 bits; bit 3: __rel_loc)
 *   [7] which event ids are wanted: those whose id % ([7] | 1) is 0
 * A real trace's pages (seeds.py): 00 08 10 00 01 08 03 01.
 */
#include "fuzzpy.h"
#include "../../../analyzer/nfsreaddir/csrc/ringbuf/ringbuf.h"

PyMODINIT_FUNC PyInit__ringbuf(void);

#define ROOM (4096 / 8 + 64) /* records listed per call: a few more than one page needs */
#define MAPLEN 300	     /* ids >= 299 take the map's last entry */

static int32_t pos[ROOM], dlen[ROOM];
static uint64_t ts[ROOM];
static uint32_t ids[ROOM];
static uint8_t lut[MAPLEN];
static int16_t map[MAPLEN];
static uint64_t ints_out[ROOM];
static int32_t codes[ROOM];
static PyObject *module;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_python_init();
	module = PyInit__ringbuf();
	if (!module)
		abort();
	return 0;
}

static void decode_fields(PyObject *blk, int64_t n, long long off, long long size, int sgn, int rel,
			  int big)
{
	PyObject *p = fuzz_array(pos, n, 4, "i"), *d = fuzz_array(dlen, n, 4, "i");
	PyObject *o = fuzz_array(ints_out, n, 8, "Q"), *c = fuzz_array(codes, n, 4, "i");

	fuzz_drop(fuzz_call(ints, NULL,
			    Py_BuildValue("(OOOLLiiO)", blk, p, d, off, size, sgn, big, o)));
	fuzz_drop(
		fuzz_call(strings, NULL, Py_BuildValue("(OOOLiiO)", blk, p, d, off, rel, big, c)));
	Py_DECREF(p);
	Py_DECREF(d);
	Py_DECREF(o);
	Py_DECREF(c);
}

static void extract(PyObject *blk, long long P, const long long g[7], long long off, long long size,
		    int sgn, int rel)
{
	PyObject *m = fuzz_array(map, MAPLEN, 2, "h");
	PyObject *plan = Py_BuildValue("[[(iLLiii)(iLLiii)(iLLiii)][(iLLiii)(iLLiii)]]", 0, g[5],
				       g[6], 1, 1, 4, 0, off, size, sgn, 0, 8, rel ? 2 : 1, off,
				       4LL, 0, 0, 1, 3, off, 4LL, 0, 0, 1, 0, off, size, sgn, 0, 4);
	PyObject *x = PyObject_CallFunction((PyObject *)&ExtractType, "(OO)", m, plan);
	PyObject *args;

	Py_DECREF(m);
	Py_DECREF(plan);
	if (!x) {
		PyErr_Clear();
		return;
	}
	args = Py_BuildValue("(OLLLLiLLL)", blk, P, g[0], g[1], g[2], (int)g[3], g[4], g[5], g[6]);
	fuzz_drop(args ? extract_walk(x, args) : NULL);
	fuzz_drop(PyObject_CallMethod(x, "restart", NULL));
	fuzz_drop(args ? extract_walk(x, args)
		       : NULL); /* a second window: the dictionaries go on */
	Py_XDECREF(args);
	fuzz_drop(PyObject_CallMethod(x, "screen", NULL));
	fuzz_drop(PyObject_CallMethod(x, "values", "ii", 0, 1));
	fuzz_drop(PyObject_CallMethod(x, "values", "ii", 0, 2));
	fuzz_drop(PyObject_CallMethod(x, "take", "ii", 0, 1));
	fuzz_drop(PyObject_CallMethod(x, "view", "ii", 1, -1));
	fuzz_drop(PyObject_CallMethod(x, "take", "ii", 1, 0));
	Py_DECREF(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const long long sizes[4] = { 4096, 64, 256, 1024 };
	long long P, g[7], page, fsize, foff;
	int wanted, sgn, rel, i;
	PyObject *blk, *outs[4], *lut_obj;

	if (size < 8)
		return 0;
	P = sizes[data[0] & 3];
	g[0] = data[1];		     /* commit_off */
	g[1] = data[0] & 4 ? 4 : 8;  /* commit_size */
	g[2] = data[2];		     /* data_off */
	g[3] = !!(data[0] & 8);	     /* big */
	g[4] = data[0] & 16 ? 4 : 8; /* long_size */
	g[5] = (int8_t)data[3];	     /* id_off */
	g[6] = 1 + (data[4] & 7);    /* id_size */
	foff = data[5] & 127;
	sgn = data[5] >> 7;
	fsize = 1 + (data[6] & 7);
	rel = !!(data[6] & 8);
	wanted = data[7] | 1;
	for (i = 0; i < MAPLEN; i++) {
		lut[i] = i % wanted == 0;
		map[i] = lut[i] ? (int16_t)(i & 1) : -1;
	}
	blk = fuzz_bytes(data + 8, size - 8);
	outs[0] = fuzz_array(pos, ROOM, 4, "i");
	outs[1] = fuzz_array(ts, ROOM, 8, "Q");
	outs[2] = fuzz_array(dlen, ROOM, 4, "i");
	outs[3] = fuzz_array(ids, ROOM, 4, "I");
	lut_obj = data[0] & 32 ? fuzz_array(lut, MAPLEN, 1, "B") : Py_NewRef(Py_None);
	page = data[0] & 64 ? 1 : 0;
	for (;;) {
		long long n, next, bad;
		PyObject *res =
			fuzz_call(walk, NULL,
				  Py_BuildValue("(OLLLLLiLLLOOOOO)", blk, page, P, g[0], g[1], g[2],
						(int)g[3], g[4], g[5], g[6], lut_obj, outs[0],
						outs[1], outs[2], outs[3]));

		if (!res) {
			PyErr_Clear();
			break;
		}
		if (!PyArg_ParseTuple(res, "LOLLzL", &n, &(PyObject *){ 0 }, &next, &bad,
				      &(const char *){ 0 }, &(long long){ 0 }))
			abort();
		Py_DECREF(res);
		if (n < 0 || n > ROOM)
			abort(); /* more records than the arrays hold */
		decode_fields(blk, n, foff, fsize, sgn, rel, (int)g[3]);
		if (next <= page || next >= (long long)(size - 8) / P)
			break;
		page = next;
	}
	extract(blk, P, g, foff, fsize, sgn, rel);
	for (i = 0; i < 4; i++)
		Py_DECREF(outs[i]);
	Py_DECREF(lut_obj);
	Py_DECREF(blk);
	return 0;
}
