/*
 * The slab analysis (nfsreaddir.slab) as one compiled pass over the kmem events in time
 * order, reading the reader's columns where they are: no merged copy, no sort, nothing
 * kept per event.
 *
 * The columns come in pieces, per event kind and CPU as the trace.dat reader decoded them
 * (read_pieces()), so each is one run in time order or a few.  Merging the runs with a
 * heap keyed by (time, run) visits the events in the order a stable sort of the
 * concatenated columns gives (the allocation kinds are passed first, so at equal times an
 * allocation comes before a free): the order of the numpy version, which slab.py keeps as
 * the fallback and as the tests' oracle.
 *
 * What is kept: a table of the pointers allocated and not freed yet, with their cache (the
 * objects live at that moment, not every pointer ever seen: a free ends its entry, since a
 * free never changes the meaning of a later event of its pointer), the runs, and a few
 * counters per cache.  The cache of an event is looked up as it is visited: table[key],
 * the key being the object size or the name's code (-1: none), so no column of codes is
 * made either.  The GIL is released while the loops run; only the buffer protocol is used.
 *
 * This file is the module's entry: tally()'s arguments and results, and PyInit; the passes
 * are csrc/slab/passes.c, and csrc/slab/slab.h what the two share.
 */
#include "csrc/slab/slab.h"

static const char *const row_names[N_ROWS] = {
	"allocs", "frees", "frees_matched", "live", "untraced_frees", "peak_live",
	"peak_live_ts", "peak_net", "alloc_bytes", "object_size",
};

static int get(PyObject *obj, Py_buffer *v, const char *what, Py_ssize_t item, Py_ssize_t n)
{
	if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
		return -1;
	if ((item && v->itemsize != item) || (!item && v->itemsize != 1 && v->itemsize != 2 &&
	    v->itemsize != 4 && v->itemsize != 8) || (n >= 0 && v->len / v->itemsize != n)) {
		PyErr_Format(PyExc_ValueError, "tally: %s: %zd items of %zd bytes, expected %zd of %zd",
			     what, v->len / v->itemsize, v->itemsize, n, item);
		PyBuffer_Release(v);
		v->obj = NULL;
		return -1;
	}
	return 0;
}

/* Take piece (alloc, ts, ptr, bytes|None, key|None, table|None)'s buffers. */
static int take(PyObject *tuple, struct piece *p)
{
	PyObject *ts, *ptr, *bytes, *key, *table;

	if (!PyArg_ParseTuple(tuple, "pOOOOO;tally: a piece is (alloc, ts, ptr, bytes, key, table)",
			      &p->alloc, &ts, &ptr, &bytes, &key, &table))
		return -1;
	if (get(ts, &p->b[0], "ts", 8, -1) < 0)
		return -1;
	p->n = p->b[0].len / 8;
	p->ts = p->b[0].buf;
	if (get(ptr, &p->b[1], "ptr", 8, p->n) < 0)
		return -1;
	p->ptr = p->b[1].buf;
	if (p->alloc) {
		if (get(bytes, &p->b[2], "bytes", 8, p->n) < 0)
			return -1;
		p->bytes = p->b[2].buf;
	}
	if (key != Py_None) {
		if (get(key, &p->b[3], "key", 0, p->n) < 0 || get(table, &p->b[4], "table", 4, -1) < 0)
			return -1;
		p->key_size = (int)p->b[3].itemsize;
		p->key = p->b[3].buf;
		p->table = p->b[4].buf;
		p->ntable = p->b[4].len / 4;
	}
	return 0;
}

PyDoc_STRVAR(tally_doc,
"tally(pieces, ncaches, out) -> (failed, unknown, unpaired, mismatch, t0, t1)\n"
"\n"
"The slab counts of the events in ``pieces``: a sequence of (alloc, ts, ptr, bytes, key,\n"
"table), the allocation kinds first, each kind's columns (ts int64, ptr uint64, bytes int64\n"
"or None for frees) in any order; an event's cache is table[key] (table int32 of cache\n"
"codes, key an integer column; a key of -1 or no key: no cache).  Into ``out`` (int64,\n"
"len(ROWS) * ncaches, zeroed by the caller): per cache, the rows ROWS names.  Returns the\n"
"failed allocations (no object), the frees counting for no cache, the allocations proving\n"
"an untraced free, the frees naming another cache than their allocation, and the first\n"
"and last time (0, 0 without events).");

static PyObject *tally(PyObject *self, PyObject *args)
{
	PyObject *seq_obj, *out_obj, *seq = NULL, *res = NULL;
	Py_ssize_t np_ = 0, k, i, nruns = 0;
	struct piece *pieces = NULL;
	struct run *runs = NULL;
	Py_buffer vo = {0};
	struct table t = {0};
	struct tally c = {0};
	long long failed = 0;
	int64_t t0 = INT64_MAX, t1 = INT64_MIN;
	enum pass_result r;

	if (!PyArg_ParseTuple(args, "OnO", &seq_obj, &k, &out_obj))
		return NULL;
	seq = PySequence_Fast(seq_obj, "tally: pieces must be a sequence");
	if (!seq)
		return NULL;
	np_ = PySequence_Fast_GET_SIZE(seq);
	pieces = calloc(np_ + 1, sizeof(*pieces));
	if (!pieces) {
		PyErr_NoMemory();
		goto out;
	}
	for (i = 0; i < np_; i++)
		if (take(PySequence_Fast_GET_ITEM(seq, i), &pieces[i]) < 0)
			goto out;
	if (k < 0 || get(out_obj, &vo, "out", 8, N_ROWS * k) < 0)
		goto out;
	if (vo.readonly) {
		PyErr_SetString(PyExc_ValueError, "tally: out is read-only");
		goto out;
	}
	c.out = vo.buf;
	c.k = k;
	c.live_now = calloc(k + 1, sizeof(int64_t));
	c.net_now = calloc(k + 1, sizeof(int64_t));
	t.bits = 16;
	t.s = calloc((size_t)1 << t.bits, sizeof(struct slot));
	if (!c.live_now || !c.net_now || !t.s) {
		PyErr_NoMemory();
		goto out;
	}

	Py_BEGIN_ALLOW_THREADS
	r = first_pass(pieces, np_, &c, &runs, &nruns, &failed, &t0, &t1);
	if (r == PASS_OK)
		r = merge_pass(&c, &t, runs, nruns);
	if (r == PASS_OK)                       /* the objects allocated and never freed */
		for (i = 0; i < ((Py_ssize_t)1 << t.bits); i++)
			if (t.s[i].ptr && t.s[i].cache >= 0)
				c.out[R_LIVE * k + t.s[i].cache]++;
	Py_END_ALLOW_THREADS

	if (r == PASS_BAD_KEY) {
		PyErr_SetString(PyExc_ValueError, "tally: a key past its table, or a cache past ncaches");
		goto out;
	}
	if (r == PASS_NO_MEMORY) {
		PyErr_NoMemory();
		goto out;
	}
	if (t0 > t1)
		t0 = t1 = 0;
	res = Py_BuildValue("LLLLLL", failed, c.unknown, c.unpaired, c.mismatch,
			    (long long)t0, (long long)t1);
out:
	for (i = 0; pieces && i < np_; i++) {
		int j;

		for (j = 0; j < 5; j++)
			if (pieces[i].b[j].obj)
				PyBuffer_Release(&pieces[i].b[j]);
	}
	if (vo.obj)
		PyBuffer_Release(&vo);
	free(pieces);
	free(runs);
	free(t.s);
	free(c.live_now);
	free(c.net_now);
	Py_XDECREF(seq);
	return res;
}

static PyMethodDef methods[] = {
	{"tally", tally, METH_VARARGS, tally_doc},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "nfsreaddir._slab",
	"The slab analysis' counts in one compiled pass in time order.", -1, methods,
};

PyMODINIT_FUNC PyInit__slab(void)
{
	PyObject *m = PyModule_Create(&module), *rows;
	int i;

	if (!m)
		return NULL;
	rows = PyTuple_New(N_ROWS);
	if (!rows)
		goto fail;
	for (i = 0; i < N_ROWS; i++) {
		PyObject *s = PyUnicode_FromString(row_names[i]);

		if (!s) {
			Py_DECREF(rows);
			goto fail;
		}
		PyTuple_SET_ITEM(rows, i, s);
	}
	if (PyModule_AddObject(m, "ROWS", rows) < 0) {
		Py_DECREF(rows);
		goto fail;
	}
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
