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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

/* ZERO_SIZE_PTR is 16: pointers at or below it are no objects (failed allocs, kfree(NULL)) */
#define NO_OBJECT 16
/* how many events of a run ahead the table slot is prefetched */
#define AHEAD 16

/* The rows of ``out``, ncaches values each, in this order (the module's ROWS names them). */
enum { R_ALLOCS, R_FREES, R_FREES_MATCHED, R_LIVE, R_UNTRACED_FREES, R_PEAK_LIVE,
       R_PEAK_LIVE_TS, R_PEAK_NET, R_ALLOC_BYTES, R_OBJECT_SIZE, N_ROWS };
static const char *const row_names[N_ROWS] = {
	"allocs", "frees", "frees_matched", "live", "untraced_frees", "peak_live",
	"peak_live_ts", "peak_net", "alloc_bytes", "object_size",
};

struct piece {
	int alloc;
	Py_ssize_t n, ntable;
	int key_size;           /* 0: no key, every event's cache is -1 */
	const int64_t *ts, *bytes;
	const uint64_t *ptr;
	const void *key;
	const int32_t *table;
	Py_buffer b[5];         /* ts, ptr, bytes, key, table */
};

struct run {
	const struct piece *p;
	Py_ssize_t at, end;
	int64_t ts;             /* ts[at] */
};

struct slot {
	uint64_t ptr;           /* 0: empty (no object has it) */
	int32_t cache;
};

struct table {
	struct slot *s;
	int bits;
	size_t used;
};

struct tally {
	int64_t *out, *live_now, *net_now;
	Py_ssize_t k;
	long long unknown, unpaired, mismatch;
};

static inline int64_t key_at(const struct piece *p, Py_ssize_t i)
{
	switch (p->key_size) {
	case 1: return ((const int8_t *)p->key)[i];
	case 2: return ((const int16_t *)p->key)[i];
	case 4: return ((const int32_t *)p->key)[i];
	default: return ((const int64_t *)p->key)[i];
	}
}

/* the event's cache (-1: none); keys were checked against the table before the pass */
static inline int32_t cache_at(const struct piece *p, Py_ssize_t i)
{
	int64_t key;

	if (!p->key_size)
		return -1;
	key = key_at(p, i);
	return key < 0 ? -1 : p->table[key];
}

static inline size_t home_of(uint64_t ptr, int bits)
{
	/* Fibonacci hashing: object pointers differ in their middle bits */
	return (ptr * 0x9E3779B97F4A7C15ull) >> (64 - bits);
}

/* The slot holding ptr, or the empty slot where it would go. */
static inline size_t find(const struct table *t, uint64_t ptr)
{
	size_t mask = ((size_t)1 << t->bits) - 1, s = home_of(ptr, t->bits);

	while (t->s[s].ptr && t->s[s].ptr != ptr)
		s = (s + 1) & mask;
	return s;
}

/* Empty slot s, moving later entries of the probe chain back (linear probing's deletion,
 * which leaves no tombstones to slow later probes). */
static void erase(struct table *t, size_t s)
{
	size_t mask = ((size_t)1 << t->bits) - 1, j = s, k = s;

	for (;;) {
		t->s[j].ptr = 0;
		for (;;) {
			size_t home;

			k = (k + 1) & mask;
			if (!t->s[k].ptr) {
				t->used--;
				return;
			}
			home = home_of(t->s[k].ptr, t->bits);
			/* the entry at k may fill the hole at j if its home is not in (j, k] */
			if (j <= k ? (home <= j || home > k) : (home <= j && home > k))
				break;
		}
		t->s[j] = t->s[k];
		j = k;
	}
}

/* Double the table; 0 when out of memory. */
static int grow(struct table *t)
{
	size_t i, cap = (size_t)1 << t->bits;
	struct table n = { calloc(cap * 2, sizeof(struct slot)), t->bits + 1, t->used };

	if (!n.s)
		return 0;
	for (i = 0; i < cap; i++)
		if (t->s[i].ptr)
			n.s[find(&n, t->s[i].ptr)] = t->s[i];
	free(t->s);
	*t = n;
	return 1;
}

static inline void rise(struct tally *c, int32_t cache, int64_t ts)
{
	int64_t *live = &c->out[R_PEAK_LIVE * c->k + cache];
	int64_t *net = &c->out[R_PEAK_NET * c->k + cache];

	if (++c->live_now[cache] > *live) {     /* first reached: strictly above */
		*live = c->live_now[cache];
		c->out[R_PEAK_LIVE_TS * c->k + cache] = ts;
	}
	if (++c->net_now[cache] > *net)
		*net = c->net_now[cache];
}

/* One event in time order; 0 when out of memory. */
static int visit(struct tally *c, struct table *t, const struct piece *p, Py_ssize_t i,
		 int64_t ts)
{
	uint64_t ptr = p->ptr[i];
	int32_t cache = cache_at(p, i), was;
	size_t s;

	if (ptr <= NO_OBJECT)
		return 1;
	s = find(t, ptr);
	if (p->alloc) {
		if (t->s[s].ptr) {
			/* allocated again with no free between: a free the trace did not see,
			 * counted just before this allocation, for the first one's cache */
			was = t->s[s].cache;
			c->unpaired++;
			if (was >= 0) {
				c->out[R_UNTRACED_FREES * c->k + was]++;
				c->live_now[was]--;
				c->net_now[was]--;
			}
		} else {
			t->s[s].ptr = ptr;
			if (++t->used * 2 > ((size_t)1 << t->bits)) {
				if (!grow(t))
					return 0;
				s = find(t, ptr);
			}
		}
		t->s[s].cache = cache;
		if (cache >= 0) {
			c->out[R_ALLOCS * c->k + cache]++;
			rise(c, cache, ts);
		}
		return 1;
	}
	if (t->s[s].ptr) {
		/* the free of an object allocated in the trace counts for the allocation's cache */
		was = t->s[s].cache;
		erase(t, s);
		if (cache >= 0 && cache != was)
			c->mismatch++;
		if (was < 0) {
			c->unknown++;
			return 1;
		}
		c->out[R_FREES_MATCHED * c->k + was]++;
		c->live_now[was]--;
		cache = was;
	} else if (cache < 0) {
		c->unknown++;
		return 1;
	}
	c->out[R_FREES * c->k + cache]++;
	c->net_now[cache]--;
	return 1;
}

static inline int before(const struct run *runs, int a, int b)
{
	return runs[a].ts < runs[b].ts || (runs[a].ts == runs[b].ts && a < b);
}

static void sift_down(int *heap, int n, const struct run *runs, int i)
{
	for (;;) {
		int l = 2 * i + 1, m = i, x;

		if (l < n && before(runs, heap[l], heap[m]))
			m = l;
		if (l + 1 < n && before(runs, heap[l + 1], heap[m]))
			m = l + 1;
		if (m == i)
			return;
		x = heap[i];
		heap[i] = heap[m];
		heap[m] = x;
		i = m;
	}
}

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

enum pass_result { PASS_OK, PASS_BAD_KEY, PASS_NO_MEMORY };

/* First pass, in column order: the keys checked, what does not depend on time order (sizes,
 * allocated bytes, failed allocations; the first and last time), and the runs: the stretches
 * of a piece whose times do not go back. */
static enum pass_result first_pass(struct piece *pieces, Py_ssize_t np_, struct tally *c,
				   struct run **runs_out, Py_ssize_t *nruns_out, long long *failed,
				   int64_t *t0, int64_t *t1)
{
	struct run *runs = NULL;
	Py_ssize_t i, nruns = 0, k = c->k;

	for (i = 0; i < np_; i++) {
		struct piece *p = &pieces[i];
		Py_ssize_t j;

		for (j = 0; j < p->n; j++) {
			int64_t ts = p->ts[j];
			int32_t cache;

			if (p->key_size) {
				int64_t key = key_at(p, j);

				if (key >= p->ntable || (key >= 0 && (p->table[key] < -1 ||
								      p->table[key] >= k))) {
					*runs_out = runs;
					return PASS_BAD_KEY;
				}
			}
			if (ts < *t0)
				*t0 = ts;
			if (ts > *t1)
				*t1 = ts;
			if (p->alloc) {
				cache = cache_at(p, j);
				if (cache >= 0) {
					c->out[R_ALLOC_BYTES * k + cache] += p->bytes[j];
					c->out[R_OBJECT_SIZE * k + cache] = p->bytes[j];
				}
				*failed += p->ptr[j] <= NO_OBJECT;
			}
			if (j && ts >= p->ts[j - 1])
				continue;
			if (!(nruns & (nruns - 1))) {           /* at 0 and each power of two */
				struct run *r = realloc(runs, (nruns ? 2 * nruns : 1) * sizeof(*r));

				if (!r) {
					*runs_out = runs;
					return PASS_NO_MEMORY;
				}
				runs = r;
			}
			if (nruns && runs[nruns - 1].p == p)
				runs[nruns - 1].end = j;       /* a run of this piece ends here */
			runs[nruns++] = (struct run){ p, j, p->n, ts };
		}
	}
	*runs_out = runs;
	*nruns_out = nruns;
	return PASS_OK;
}

/* Second pass: the runs merged by (time, run), each event visited once. */
static enum pass_result merge_pass(struct tally *c, struct table *t, struct run *runs,
				   Py_ssize_t nruns)
{
	int *heap;
	int nheap = (int)nruns;
	Py_ssize_t i;

	if (!nruns)
		return PASS_OK;
	heap = malloc(nruns * sizeof(*heap));
	if (!heap)
		return PASS_NO_MEMORY;
	for (i = 0; i < nruns; i++)
		heap[i] = (int)i;
	for (i = nheap / 2 - 1; i >= 0; i--)
		sift_down(heap, nheap, runs, (int)i);
	while (nheap) {
		struct run *r = &runs[heap[0]];

		/* pointers are scattered over the table: ask for the slot of this run's event
		 * AHEAD on, so that memory is not waited for when it comes */
		if (r->at + AHEAD < r->end)
			__builtin_prefetch(&t->s[home_of(r->p->ptr[r->at + AHEAD], t->bits)]);
		if (!visit(c, t, r->p, r->at, r->ts)) {
			free(heap);
			return PASS_NO_MEMORY;
		}
		if (++r->at == r->end)
			heap[0] = heap[--nheap];
		else
			r->ts = r->p->ts[r->at];
		sift_down(heap, nheap, runs, 0);
	}
	free(heap);
	return PASS_OK;
}

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
