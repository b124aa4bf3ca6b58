/*
 * The slab analysis (nfsreaddir.slab) as one compiled pass over the kmem events in time
 * order, reading the reader's columns where they are: no merged copy, no sort, nothing
 * kept per event.  The trace comes a window of time at a time (Tally.feed()): the table of
 * live pointers and the counters are kept between windows, so memory is the window's columns
 * and the live objects, whatever the trace's length.
 *
 * The columns come in pieces, per event kind and CPU as the trace.dat reader decoded them
 * (read_windows(), read_pieces()), so each is one run in time order or a few.  Merging the runs
 * by (time, run) visits the events in the order a stable sort of the
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
 * This file is the module's entry: the Tally type (its state, feed()'s arguments, result()),
 * and PyInit; the passes are csrc/slab/passes.c, the table's operations csrc/slab/table.h,
 * and csrc/slab/slab.h what they share.
 */
#include "csrc/slab/slab.h"
#include "csrc/slab/table.h"
#include <limits.h>
#include <string.h>

static const char *const row_names[N_ROWS] = {
	"allocs",    "frees",	     "frees_matched", "live",	     "untraced_frees",
	"peak_live", "peak_live_ts", "peak_net",      "alloc_bytes", "object_size",
};

static int get(PyObject *obj, Py_buffer *v, const char *what, Py_ssize_t item, Py_ssize_t n)
{
	if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
		return -1;
	if ((item && v->itemsize != item) ||
	    (!item && v->itemsize != 1 && v->itemsize != 2 && v->itemsize != 4 &&
	     v->itemsize != 8) ||
	    (n >= 0 && v->len / v->itemsize != n)) {
		PyErr_Format(PyExc_ValueError,
			     "tally: %s: %zd items of %zd bytes, expected %zd of %zd", what,
			     v->len / v->itemsize, v->itemsize, n, item);
		PyBuffer_Release(v);
		v->obj = NULL;
		return -1;
	}
	return 0;
}

/* Take piece (alloc, ts, ptr, bytes|None, key|None, table|None, rank)'s buffers. */
static int take(PyObject *tuple, struct piece *p)
{
	PyObject *ts, *ptr, *bytes, *key, *table;

	if (!PyArg_ParseTuple(tuple,
			      "pOOOOOL;tally: a piece is (alloc, ts, ptr, bytes, key, table, "
			      "rank)",
			      &p->alloc, &ts, &ptr, &bytes, &key, &table, &p->rank))
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
		if (get(key, &p->b[3], "key", 0, p->n) < 0 ||
		    get(table, &p->b[4], "table", 4, -1) < 0)
			return -1;
		p->key_size = (int)p->b[3].itemsize;
		p->key = p->b[3].buf;
		p->table = p->b[4].buf;
		p->ntable = p->b[4].len / 4;
	}
	return 0;
}

typedef struct {
	PyObject_HEAD
	struct tally c;
} Tally;

/* Room for ``k`` caches (the rows moved to the new stride); 0 when out of memory. */
static int reserve(struct tally *c, Py_ssize_t k)
{
	Py_ssize_t cap = c->cap ? c->cap : 64, r, i;
	int64_t *out, *live, *net;
	long long *rank;

	if (k <= c->cap)
		return 1;
	while (cap < k)
		cap *= 2;
	out = calloc((size_t)N_ROWS * cap, sizeof(*out));
	live = calloc(cap, sizeof(*live));
	net = calloc(cap, sizeof(*net));
	rank = malloc(cap * sizeof(*rank));
	if (!out || !live || !net || !rank) {
		free(out);
		free(live);
		free(net);
		free(rank);
		return 0;
	}
	for (r = 0; r < N_ROWS; r++)
		if (c->k)
			memcpy(out + r * cap, c->out + r * c->cap, c->k * sizeof(*out));
	if (c->k) {
		memcpy(live, c->live_now, c->k * sizeof(*live));
		memcpy(net, c->net_now, c->k * sizeof(*net));
		memcpy(rank, c->size_rank, c->k * sizeof(*rank));
	}
	for (i = c->k; i < cap; i++)
		rank[i] = LLONG_MIN;
	free(c->out);
	free(c->live_now);
	free(c->net_now);
	free(c->size_rank);
	c->out = out;
	c->live_now = live;
	c->net_now = net;
	c->size_rank = rank;
	c->cap = cap;
	return 1;
}

static int tally_init(PyObject *self, PyObject *args, PyObject *Py_UNUSED(kw))
{
	struct tally *c = &((Tally *)self)->c;

	if (!PyArg_ParseTuple(args, ":Tally"))
		return -1;
	if (c->t.parts) {
		PyErr_SetString(PyExc_RuntimeError, "Tally: already initialised");
		return -1;
	}
	c->t0 = INT64_MAX;
	c->t1 = INT64_MIN;
	c->t.parts = calloc(NPARTS, sizeof(*c->t.parts));
	if (!c->t.parts) {
		PyErr_NoMemory();
		return -1;
	}
	return 0;
}

static void tally_dealloc(PyObject *self)
{
	struct tally *c = &((Tally *)self)->c;
	Py_ssize_t i;

	for (i = 0; c->t.parts && i < NPARTS; i++)
		free(c->t.parts[i].s);
	free(c->t.parts);
	free(c->out);
	free(c->live_now);
	free(c->net_now);
	free(c->size_rank);
	Py_TYPE(self)->tp_free(self);
}

PyDoc_STRVAR(
	feed_doc,
	"feed(pieces, ncaches)\n"
	"\n"
	"Count the events of ``pieces``, a window of the trace: a sequence of (alloc, ts, ptr, bytes,\n"
	"key, table, rank), the allocation kinds first, each kind's columns (ts int64, ptr uint64,\n"
	"bytes int64 or None for frees) in any order; an event's cache is table[key] (table int32 of\n"
	"cache codes below ncaches, ncaches at most MAX_CACHES; key an integer column; a key of -1\n"
	"or no key: no cache); rank, the piece's place in the order of the trace's columns (per kind\n"
	"and CPU: the object size of a cache is the one its last allocation in that order gives).  Every event of a window comes\n"
	"after every event of the windows fed before it (in time; at equal times a window is never\n"
	"cut): the events are then counted as if all the windows were one.");

static PyObject *tally_feed(PyObject *self, PyObject *args)
{
	struct tally *c = &((Tally *)self)->c;
	PyObject *seq_obj, *seq = NULL, *res = NULL;
	Py_ssize_t np_ = 0, k, i, nruns = 0;
	struct piece *pieces = NULL;
	struct run *runs = NULL;
	enum pass_result r;

	if (!PyArg_ParseTuple(args, "On", &seq_obj, &k))
		return NULL;
	if (!c->t.parts) {
		PyErr_SetString(PyExc_RuntimeError, "Tally: not initialised");
		return NULL;
	}
	if (k < c->k) {
		PyErr_SetString(PyExc_ValueError, "tally: fewer caches than before");
		return NULL;
	}
	if (k > MAX_CACHES) {
		PyErr_Format(PyExc_ValueError,
			     "tally: %zd caches, more than the %d a table slot can "
			     "name (MAX_CACHES)",
			     k, MAX_CACHES);
		return NULL;
	}
	seq = PySequence_Fast(seq_obj, "tally: pieces must be a sequence");
	if (!seq)
		return NULL;
	np_ = PySequence_Fast_GET_SIZE(seq);
	pieces = calloc(np_ + 1, sizeof(*pieces));
	if (!pieces || !reserve(c, k)) {
		PyErr_NoMemory();
		goto out;
	}
	c->k = k;
	for (i = 0; i < np_; i++)
		if (take(PySequence_Fast_GET_ITEM(seq, i), &pieces[i]) < 0)
			goto out;

	Py_BEGIN_ALLOW_THREADS
	r = first_pass(pieces, np_, c, &runs, &nruns);
	if (r == PASS_OK)
		r = merge_pass(c, runs, nruns);
	Py_END_ALLOW_THREADS

	if (r == PASS_BAD_KEY) {
		PyErr_SetString(PyExc_ValueError,
				"tally: a key past its table, or a cache past ncaches");
		goto out;
	}
	if (r == PASS_NO_MEMORY) {
		PyErr_NoMemory();
		goto out;
	}
	res = Py_None;
	Py_INCREF(res);
out:
	for (i = 0; pieces && i < np_; i++) {
		int j;

		for (j = 0; j < 5; j++)
			if (pieces[i].b[j].obj)
				PyBuffer_Release(&pieces[i].b[j]);
	}
	free(pieces);
	free(runs);
	Py_XDECREF(seq);
	return res;
}

PyDoc_STRVAR(
	result_doc,
	"result(out) -> (failed, unknown, unpaired, mismatch, t0, t1)\n"
	"\n"
	"The counts of the windows fed so far.  Into ``out`` (int64, len(ROWS) * ncaches, ncaches\n"
	"the last feed's): per cache, the rows ROWS names, the objects live at the end (allocated\n"
	"and never freed) among them.  Returns the failed allocations (no object), the frees\n"
	"counting for no cache, the allocations proving an untraced free, the frees naming another\n"
	"cache than their allocation, and the first and last time (0, 0 without events).");

static PyObject *tally_result(PyObject *self, PyObject *args)
{
	struct tally *c = &((Tally *)self)->c;
	PyObject *out_obj;
	Py_buffer vo = { 0 };
	Py_ssize_t r, i, k = c->k;
	int64_t *out, t0 = c->t0, t1 = c->t1;
	size_t j;

	if (!PyArg_ParseTuple(args, "O", &out_obj))
		return NULL;
	if (!c->t.parts) {
		PyErr_SetString(PyExc_RuntimeError, "Tally: not initialised");
		return NULL;
	}
	if (get(out_obj, &vo, "out", 8, N_ROWS * k) < 0)
		return NULL;
	if (vo.readonly) {
		PyBuffer_Release(&vo);
		PyErr_SetString(PyExc_ValueError, "tally: out is read-only");
		return NULL;
	}
	out = vo.buf;
	for (r = 0; r < N_ROWS; r++)
		for (i = 0; i < k; i++)
			out[r * k + i] = r == R_LIVE ? 0 : c->out[r * c->cap + i];
	/* the objects allocated and never freed (every slot's cache is below k: the keys were
	 * checked against it; checked again here, where a miss would write past out) */
	for (i = 0; i < NPARTS; i++) {
		const struct part *q = &c->t.parts[i];

		for (j = 0; q->s && j < ((size_t)1 << q->bits); j++) {
			int32_t cache = cache_of(q->s[j]);

			if (q->s[j] && cache >= 0 && cache < k)
				out[R_LIVE * k + cache]++;
		}
	}
	PyBuffer_Release(&vo);
	if (t0 > t1)
		t0 = t1 = 0;
	return Py_BuildValue("LLLLLL", c->failed, c->unknown, c->unpaired, c->mismatch,
			     (long long)t0, (long long)t1);
}

PyDoc_STRVAR(
	objects_doc,
	"objects() -> (live, most, table_bytes)\n"
	"\n"
	"The objects allocated and not freed yet (of every cache, and of none), the most there were\n"
	"at once, and the bytes their table takes now (its slots and its parts).");

static PyObject *tally_objects(PyObject *self, PyObject *Py_UNUSED(args))
{
	const struct table *t = &((Tally *)self)->c.t;

	if (!t->parts) {
		PyErr_SetString(PyExc_RuntimeError, "Tally: not initialised");
		return NULL;
	}
	return Py_BuildValue(
		"nnn", (Py_ssize_t)t->used, (Py_ssize_t)t->most,
		(Py_ssize_t)(t->slots * sizeof(*t->parts->s) + NPARTS * sizeof(*t->parts)));
}

static PyMethodDef tally_methods[] = {
	{ "feed", tally_feed, METH_VARARGS, feed_doc },
	{ "result", tally_result, METH_VARARGS, result_doc },
	{ "objects", tally_objects, METH_NOARGS, objects_doc },
	{ NULL, NULL, 0, NULL },
};

static PyTypeObject TallyType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nfsreaddir._slab.Tally",
	.tp_basicsize = sizeof(Tally),
	.tp_dealloc = tally_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Tally(): the slab counts of a trace fed to it a window at a time (feed()),\n"
		  "read with result().  Not thread safe.",
	.tp_methods = tally_methods,
	.tp_init = tally_init,
	.tp_new = PyType_GenericNew,
};

static PyMethodDef methods[] = {
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "nfsreaddir._slab",
	.m_doc = "The slab analysis' counts in one compiled pass in time order.",
	.m_size = -1,
	.m_methods = methods,
};

PyMODINIT_FUNC PyInit__slab(void)
{
	PyObject *m = PyModule_Create(&module), *rows;
	int i;

	if (!m)
		return NULL;
	if (PyType_Ready(&TallyType) < 0)
		goto fail;
	Py_INCREF(&TallyType);
	if (PyModule_AddObject(m, "Tally", (PyObject *)&TallyType) < 0) {
		Py_DECREF(&TallyType);
		goto fail;
	}
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
	if (PyModule_AddIntConstant(m, "MAX_CACHES", MAX_CACHES) < 0)
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
