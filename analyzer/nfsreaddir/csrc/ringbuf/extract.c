/*
 * The Extract type of nfsreaddir._ringbuf (what it does: csrc/ringbuf/columns.c): its
 * columns' memory (mappings grown by mremap, handed to Python as Mem buffers), its set-up
 * from the map and plan, and the accessors rows(), take(), view(), values() and restart().
 */
#include "ringbuf.h"

/* A column's memory handed to Python: a read-write buffer that frees it when released. */
typedef struct {
	PyObject_HEAD
	void *data;
	Py_ssize_t len;
	size_t mapped;
} Mem;

static size_t page_round(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (n + pg - 1) / pg * pg;
}

/* The mapping ``*p`` of ``*mapped`` bytes (NULL, 0: none yet) made at least ``n`` bytes long;
 * 0: no memory (then it is as it was). */
int remap(void **p, size_t *mapped, size_t n)
{
	void *q;

	n = page_round(n);
	if (n == *mapped)
		return 1;
	if (!*p)
		q = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	else
		q = mremap(*p, *mapped, n, MREMAP_MAYMOVE);
	if (q == MAP_FAILED)
		return 0;
	*p = q;
	*mapped = n;
	return 1;
}

static void unmap(void **p, size_t *mapped)
{
	if (*p)
		munmap(*p, *mapped);
	*p = NULL;
	*mapped = 0;
}

static int mem_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
	Mem *m = (Mem *)self;

	return PyBuffer_FillInfo(view, self, m->data ? m->data : (void *)"", m->len, 0, flags);
}

static void mem_dealloc(PyObject *self)
{
	unmap(&((Mem *)self)->data, &((Mem *)self)->mapped);
	Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs mem_as_buffer = { mem_getbuffer, NULL };

PyTypeObject MemType = {
	/* (the macro ends in a comma, which clang-format does not see) */
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "nfsreaddir._ringbuf.Mem",
	/* clang-format on */
	.tp_basicsize = sizeof(Mem),
	.tp_dealloc = mem_dealloc,
	.tp_as_buffer = &mem_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Memory of one column, freed with the last reference to it.",
};

static void col_free(struct col *c)
{
	unmap((void **)&c->data, &c->mapped);
	free(c->tab);
	free(c->arena);
	free(c->vat);
	free(c->vlen);
	memset(c, 0, sizeof(*c));
}

static void extract_dealloc(PyObject *self)
{
	Extract *x = (Extract *)self;
	int i, j;

	for (i = 0; i < x->nslots; i++) {
		for (j = 0; j < x->slots[i].ncols; j++)
			col_free(&x->slots[i].cols[j]);
		free(x->slots[i].cols);
		unmap((void **)&x->slots[i].ts, &x->slots[i].ts_mapped);
	}
	free(x->slots);
	free(x->map);
	free(x->minlen);
	Py_TYPE(self)->tp_free(self);
}

static int extract_init(PyObject *self, PyObject *args, PyObject *Py_UNUSED(kw))
{
	Extract *x = (Extract *)self;
	Py_buffer vmap = { 0 };
	PyObject *plan, *seq = NULL;
	int i, j, ok = -1;

	if (!PyArg_ParseTuple(args, "y*O", &vmap, &plan))
		return -1;
	if (x->slots) {
		PyErr_SetString(PyExc_RuntimeError, "Extract: already initialised");
		goto out;
	}
	if (vmap.len % 2) {
		PyErr_SetString(PyExc_ValueError, "Extract: the map is int16");
		goto out;
	}
	x->maplen = vmap.len / 2;
	if (x->maplen < 1) {
		PyErr_SetString(PyExc_ValueError, "Extract: empty map");
		goto out;
	}
	x->map = malloc(vmap.len);
	x->minlen = malloc(x->maplen * sizeof(*x->minlen));
	seq = PySequence_Fast(plan, "Extract: the plan is a sequence");
	if (!x->map || !x->minlen) {
		PyErr_NoMemory();
		goto out;
	}
	if (!seq)
		goto out;
	memcpy(x->map, vmap.buf, vmap.len);
	for (i = 0; i < x->maplen; i++)
		x->minlen[i] = INT32_MAX;
	x->nslots = (int)PySequence_Fast_GET_SIZE(seq);
	x->slots = calloc(x->nslots ? x->nslots : 1, sizeof(*x->slots));
	if (!x->slots) {
		PyErr_NoMemory();
		goto out;
	}
	for (i = 0; i < x->nslots; i++) {
		PyObject *cols = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i),
						 "Extract: a slot is a sequence of columns");
		struct eslot *s = &x->slots[i];

		if (!cols)
			goto out;
		s->ncols = (int)PySequence_Fast_GET_SIZE(cols);
		s->cols = calloc(s->ncols ? s->ncols : 1, sizeof(*s->cols));
		if (!s->cols) {
			Py_DECREF(cols);
			PyErr_NoMemory();
			goto out;
		}
		for (j = 0; j < s->ncols; j++) {
			struct col *c = &s->cols[j];
			long long off, size;

			if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(cols, j), "iLLppi", &c->kind,
					      &off, &size, &c->sgn, &c->pid, &c->isz)) {
				Py_DECREF(cols);
				goto out;
			}
			c->off = off;
			c->size = size;
			c->last_code = -1;
			if (c->kind < 0 || c->kind > 3 || off < 0 || size < 1 || size > 8 ||
			    (c->kind == 0 && c->isz != 8 && c->isz != 4) ||
			    (c->kind != 0 && c->isz != 1)) {
				Py_DECREF(cols);
				PyErr_SetString(PyExc_ValueError, "Extract: bad column");
				goto out;
			}
		}
		Py_DECREF(cols);
	}
	ok = 0;
out:
	Py_XDECREF(seq);
	PyBuffer_Release(&vmap);
	return ok;
}

static struct eslot *get_slot(Extract *x, int i)
{
	if (!x->slots || i < 0 || i >= x->nslots) {
		PyErr_SetString(PyExc_IndexError, "Extract: no such slot");
		return NULL;
	}
	return &x->slots[i];
}

static PyObject *extract_rows(PyObject *self, PyObject *args)
{
	int i;
	struct eslot *s;

	if (!PyArg_ParseTuple(args, "i", &i) || !(s = get_slot((Extract *)self, i)))
		return NULL;
	return PyLong_FromLongLong(s->n);
}

PyDoc_STRVAR(
	extract_take_doc,
	"take(slot, column) -> buffer\n"
	"\n"
	"The memory of a column of ``slot`` (-1: the raw time stamps, uint64), ``rows(slot)`` items\n"
	"(a string column's codes: 1, 2 or 4 bytes each, signed), handed over without a copy: the\n"
	"Extract forgets it (take it once).");

static PyObject *extract_take(PyObject *self, PyObject *args)
{
	int i, j;
	struct eslot *s;
	Mem *m;
	void **data;
	size_t *mapped;
	int isz;

	if (!PyArg_ParseTuple(args, "ii", &i, &j) || !(s = get_slot((Extract *)self, i)))
		return NULL;
	if (j < -1 || j >= s->ncols) {
		PyErr_SetString(PyExc_IndexError, "Extract: no such column");
		return NULL;
	}
	data = j < 0 ? (void **)&s->ts : (void **)&s->cols[j].data;
	mapped = j < 0 ? &s->ts_mapped : &s->cols[j].mapped;
	isz = j < 0 ? 8 : s->cols[j].isz;
	if (!*data && s->n) {
		PyErr_SetString(PyExc_ValueError, "Extract: column already taken");
		return NULL;
	}
	m = PyObject_New(Mem, &MemType);
	if (!m)
		return NULL;
	if (s->n)
		remap(data, mapped, s->n * isz); /* give back the room beyond the rows */
	else
		unmap(data, mapped);
	m->data = *data;
	m->mapped = *mapped;
	m->len = s->n * isz;
	*data = NULL;
	*mapped = 0;
	return (PyObject *)m;
}

PyDoc_STRVAR(extract_values_doc,
	     "values(slot, column) -> list of str\n"
	     "\n"
	     "The distinct strings of a string column, by code (utf-8, bad bytes replaced).");

static PyObject *extract_values(PyObject *self, PyObject *args)
{
	int i, j;
	int64_t k;
	struct eslot *s;
	struct col *c;
	PyObject *out;

	if (!PyArg_ParseTuple(args, "ii", &i, &j) || !(s = get_slot((Extract *)self, i)))
		return NULL;
	if (j < 0 || j >= s->ncols || s->cols[j].kind == 0) {
		PyErr_SetString(PyExc_IndexError, "Extract: no such string column");
		return NULL;
	}
	c = &s->cols[j];
	out = PyList_New(c->used);
	if (!out)
		return NULL;
	for (k = 0; k < c->used; k++) {
		PyObject *v = PyUnicode_DecodeUTF8(c->arena + c->vat[k], c->vlen[k], "replace");

		if (!v) {
			Py_DECREF(out);
			return NULL;
		}
		PyList_SET_ITEM(out, k, v);
	}
	return out;
}

PyDoc_STRVAR(
	extract_view_doc,
	"view(slot, column) -> memoryview\n"
	"\n"
	"The rows of a column of ``slot`` (-1: the raw time stamps) as take() would give them, read-only\n"
	"and without handing them over: valid until the next walk() or restart() only (copy them).");

static PyObject *extract_view(PyObject *self, PyObject *args)
{
	int i, j;
	struct eslot *s;
	void *data;

	if (!PyArg_ParseTuple(args, "ii", &i, &j) || !(s = get_slot((Extract *)self, i)))
		return NULL;
	if (j < -1 || j >= s->ncols) {
		PyErr_SetString(PyExc_IndexError, "Extract: no such column");
		return NULL;
	}
	data = j < 0 ? (void *)s->ts : (void *)s->cols[j].data;
	if (!data && s->n) {
		PyErr_SetString(PyExc_ValueError, "Extract: column already taken");
		return NULL;
	}
	return PyMemoryView_FromMemory(data ? data : (char *)"",
				       s->n * (j < 0 ? 8 : s->cols[j].isz), PyBUF_READ);
}

PyDoc_STRVAR(
	extract_restart_doc,
	"restart()\n"
	"\n"
	"Start every slot's columns anew, empty: the rows of the next blocks walked are handed out\n"
	"apart from those before, a window of the stream at a time.  A slot none of whose columns was\n"
	"taken keeps its memory (its pages are not faulted in again); the string dictionaries and the\n"
	"screen go on: codes keep their meaning from window to window.");

static PyObject *extract_restart(PyObject *self, PyObject *Py_UNUSED(noargs))
{
	Extract *x = (Extract *)self;
	int i, j;

	for (i = 0; i < x->nslots; i++) {
		struct eslot *s = &x->slots[i];
		int taken = s->n && !s->ts;

		for (j = 0; j < s->ncols; j++)
			taken |= s->n && !s->cols[j].data;
		if (taken) {
			for (j = 0; j < s->ncols; j++)
				unmap((void **)&s->cols[j].data, &s->cols[j].mapped);
			unmap((void **)&s->ts, &s->ts_mapped);
			s->cap = 0;
		}
		s->n = 0;
	}
	Py_RETURN_NONE;
}

PyDoc_STRVAR(
	extract_screen_doc,
	"screen() -> (records, backwards, first_ts, last_ts, [(id, shortest), ...])\n"
	"\n"
	"What every record walked so far says of damage, wanted or not: how many, how many have a\n"
	"time stamp below the one before, the first and last raw time stamps, and per event id met\n"
	"the shortest record's data length (the id maplen - 1 stands for it and every larger id).\n"
	"TraceDat.check_records() needs no walk of its own where this shows nothing odd.");

static PyObject *extract_screen(PyObject *self, PyObject *Py_UNUSED(noargs))
{
	Extract *x = (Extract *)self;
	PyObject *ids;
	int64_t k;

	if (!x->minlen) {
		PyErr_SetString(PyExc_RuntimeError, "Extract: not initialised");
		return NULL;
	}
	ids = PyList_New(0);
	if (!ids)
		return NULL;
	for (k = 0; k < x->maplen; k++) {
		PyObject *t;

		if (x->minlen[k] == INT32_MAX)
			continue;
		t = Py_BuildValue("(Li)", (long long)k, x->minlen[k]);
		if (!t || PyList_Append(ids, t) < 0) {
			Py_XDECREF(t);
			Py_DECREF(ids);
			return NULL;
		}
		Py_DECREF(t);
	}
	return Py_BuildValue("(LLKKN)", (long long)x->nrec, (long long)x->back,
			     (unsigned long long)x->first_ts, (unsigned long long)x->last_ts, ids);
}

PyDoc_STRVAR(
	extract_last_ts_doc,
	"last_ts() -> int\n"
	"\n"
	"screen()'s last raw time stamp alone (0 before any record), without its list of ids: asked\n"
	"after each block by a reader a window at a time.");

static PyObject *extract_last_ts(PyObject *self, PyObject *Py_UNUSED(noargs))
{
	return PyLong_FromUnsignedLongLong(((Extract *)self)->last_ts);
}

static PyMethodDef extract_methods[] = {
	{ "screen", extract_screen, METH_NOARGS, extract_screen_doc },
	{ "last_ts", extract_last_ts, METH_NOARGS, extract_last_ts_doc },
	{ "walk", extract_walk, METH_VARARGS, extract_walk_doc },
	{ "restart", extract_restart, METH_NOARGS, extract_restart_doc },
	{ "view", extract_view, METH_VARARGS, extract_view_doc },
	{ "rows", extract_rows, METH_VARARGS, "rows(slot) -> the number of records appended" },
	{ "take", extract_take, METH_VARARGS, extract_take_doc },
	{ "values", extract_values, METH_VARARGS, extract_values_doc },
	{ NULL, NULL, 0, NULL },
};

PyTypeObject ExtractType = {
	/* (the macro ends in a comma, which clang-format does not see) */
	/* clang-format off */
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "nfsreaddir._ringbuf.Extract",
	/* clang-format on */
	.tp_basicsize = sizeof(Extract),
	.tp_dealloc = extract_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Extract(map, plan): map, int16 per event id (-1: not wanted) its slot; plan,\n"
		  "per slot the columns (kind 0 int / 1 __data_loc / 2 __rel_loc / 3 tail (char\n"
		  "buf[]: to the record's end) string, offset,\n"
		  "size, signed, pid, output item size).  Not thread safe: one per thread.",
	.tp_methods = extract_methods,
	.tp_init = extract_init,
	.tp_new = PyType_GenericNew,
};
