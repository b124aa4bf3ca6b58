/*
 * The ring-buffer walk of nfsreaddir.trace in C: one pass over a block of whole
 * ring-buffer pages that lists the event records (data offset, time stamp, data length,
 * event id) of the wanted events, the lost-events markers, and where the data is damaged.
 *
 * It computes exactly what the numpy walk (_chain, then _walk) computes, record by
 * record in file order, without the numpy passes over every record; the numpy walk stays
 * as the fallback and as the oracle of the tests.  The page and record layout are the
 * kernel's (kernel/trace/ring_buffer.c): a page header of a time stamp and a commit word
 * (size of the data in the low 27 bits, bit 31: events were lost before this page, bit 30:
 * their number is stored after the data), then records of a 32-bit header (type_len in 5
 * bits, time delta in 27) and data.
 *
 * Only the buffer protocol is used (no numpy C API): the caller passes the block and the
 * output arrays, which it allocates once and reuses.
 *
 * Why not libtracecmd/libtraceevent (the trace-cmd project's own readers): measured on the
 * same 8.44 M-record kmem trace (v7 zstd, 2 cores under load), reading ptr and bytes_alloc of
 * every kmem event through tracecmd_iterate_events() and tep_read_number_field() takes 54 s
 * (28 s CPU; analyzer/bench/tracecmd-loop.c), no faster than `trace-cmd report`: 80% of it in
 * one loop of libtracecmd 3.1.6 that walks a linked list per record.  This walk lists the
 * same records at 3-5 M/s.  docs/measurements/bench.md has the figures.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define COMMIT_MASK ((1u << 27) - 1)
#define MISSED_EVENTS (1ull << 31)
#define MISSED_STORED (1ull << 30)
#define TS_SHIFT 27
#define TS_MSB (0xF8ull << 56)
#define TYPE_PADDING 29
#define TYPE_TIME_EXTEND 30
#define TYPE_TIME_STAMP 31

struct layout {
	const uint8_t *b;
	int64_t len;
	int big;                /* file is big-endian */
};

static inline uint64_t rd(const struct layout *l, int64_t at, int size)
{
	uint64_t v = 0;
	int i;

	if (at < 0 || at + size > l->len)
		return 0;
	if (!l->big) {
		switch (size) {
		case 1: return l->b[at];
		case 2: { uint16_t x; memcpy(&x, l->b + at, 2); return x; }
		case 4: { uint32_t x; memcpy(&x, l->b + at, 4); return x; }
		case 8: { uint64_t x; memcpy(&x, l->b + at, 8); return x; }
		}
		for (i = size - 1; i >= 0; i--)
			v = (v << 8) | l->b[at + i];
		return v;
	}
	for (i = 0; i < size; i++)
		v = (v << 8) | l->b[at + i];
	return v;
}

/* The word after a record header; the last word of the block when that runs past it (as
 * numpy's take(mode="clip") in the numpy walk). */
static inline uint64_t next_word(const struct layout *l, int64_t c)
{
	int64_t at = c + 4;

	if (at + 4 > l->len)
		at = (l->len / 4 - 1) * 4;
	return rd(l, at, 4);
}

static int get_out(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *what)
{
	if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
		return -1;
	if (view->itemsize != itemsize) {
		PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes expected", what, itemsize);
		PyBuffer_Release(view);
		return -1;
	}
	return 0;
}

PyDoc_STRVAR(walk_doc,
"walk(block, first_page, page_size, commit_off, commit_size, data_off, big_endian,\n"
"     long_size, id_off, id_size, lut, pos, ts, dlen, ids)\n"
"    -> (n, lost, next_page, bad_page, why, detail)\n"
"\n"
"Walk the pages of ``block`` (bytes-like) from ``first_page``.  The event records whose\n"
"id is wanted (``lut[min(id, len(lut) - 1)]`` true; ``lut`` None: every event record)\n"
"are written to pos (int32 data offsets), ts (uint64 raw time stamps), dlen (int32 data\n"
"lengths) and ids (uint32), in file order, ``n`` of them.  The walk stops before a page\n"
"whose records might not fit (room for page_size // 8 more is needed): call again from\n"
"``next_page`` (the number of pages when the block is done).\n"
"``lost``: (page, page time stamp, count or None) of the pages before the first with\n"
"a garbage header that say events were lost.  ``bad_page``: the first damaged page\n"
"(records from it on are not listed) or -1; ``why``: 'size' (commit size larger than\n"
"the page, ``detail`` that size) or 'chain' (a record runs past the page's data).");

static PyObject *walk(PyObject *self, PyObject *args)
{
	Py_buffer blk, vpos, vts, vdlen, vids, vlut = {0};
	PyObject *lut_obj, *pos_obj, *ts_obj, *dlen_obj, *ids_obj;
	Py_ssize_t first_page, P, commit_off, commit_size, data_off, long_size, id_off, id_size;
	int big;
	PyObject *lost = NULL, *res = NULL;
	int have_lut = 0;

	if (!PyArg_ParseTuple(args, "y*nnnnnpnnnOOOOO", &blk, &first_page, &P, &commit_off, &commit_size,
			      &data_off, &big, &long_size, &id_off, &id_size, &lut_obj,
			      &pos_obj, &ts_obj, &dlen_obj, &ids_obj))
		return NULL;
	memset(&vpos, 0, sizeof(vpos));
	memset(&vts, 0, sizeof(vts));
	memset(&vdlen, 0, sizeof(vdlen));
	memset(&vids, 0, sizeof(vids));
	if (get_out(pos_obj, &vpos, 4, "pos") < 0 || get_out(ts_obj, &vts, 8, "ts") < 0 ||
	    get_out(dlen_obj, &vdlen, 4, "dlen") < 0 || get_out(ids_obj, &vids, 4, "ids") < 0)
		goto out;
	if (lut_obj != Py_None) {
		if (PyObject_GetBuffer(lut_obj, &vlut, PyBUF_C_CONTIGUOUS) < 0)
			goto out;
		have_lut = 1;
		if (vlut.len < 1) {
			PyErr_SetString(PyExc_ValueError, "empty lut");
			goto out;
		}
	}
	if (P < 64 || (commit_size != 4 && commit_size != 8) || id_size < 1 || id_size > 8 ||
	    long_size < 1 || long_size > 8 || data_off >= P || first_page < 0) {
		PyErr_SetString(PyExc_ValueError, "walk: implausible layout");
		goto out;
	}
	{
		struct layout l = { blk.buf, blk.len, big };
		int64_t npages = blk.len / P, p, n = 0, cap;
		int64_t limit = P - data_off, min_dlen = id_off + id_size;
		int64_t bad_page = -1, detail = 0;
		const char *why = NULL;
		int32_t *opos = vpos.buf, *odlen = vdlen.buf;
		uint64_t *ots = vts.buf;
		uint32_t *oids = vids.buf;
		const uint8_t *lutb = have_lut ? vlut.buf : NULL;
		int64_t lut_last = have_lut ? vlut.len - 1 : 0;
		int walking = 1;        /* until the first broken record chain */

		cap = vpos.len / 4;
		if (vts.len / 8 < cap) cap = vts.len / 8;
		if (vdlen.len / 4 < cap) cap = vdlen.len / 4;
		if (vids.len / 4 < cap) cap = vids.len / 4;
		if (cap < P / 8) {
			PyErr_SetString(PyExc_ValueError, "walk: output arrays too small");
			goto out;
		}
		lost = PyList_New(0);
		if (!lost)
			goto out;
		Py_BEGIN_ALLOW_THREADS
		for (p = first_page; p < npages; p++) {
			int64_t base = p * P;
			uint64_t page_ts = rd(&l, base, 8);
			uint64_t commit = rd(&l, base + commit_off, (int)commit_size);
			int64_t size = (int64_t)(commit & COMMIT_MASK);
			int64_t start, end, cur, page_n;
			uint64_t ts;

			if (walking && n + P / 8 > cap)
				break;          /* the caller goes on from this page */
			if (size > limit) {
				if (bad_page < 0) {     /* else a broken chain came first */
					bad_page = p;
					why = "size";
					detail = size;
				}
				break;
			}
			if (commit & MISSED_EVENTS) {
				int stored = (commit & MISSED_STORED) && size + long_size <= limit;
				uint64_t cnt = stored ? rd(&l, base + data_off + size, (int)long_size) : 0;
				PyObject *item;

				Py_BLOCK_THREADS
				item = stored ? Py_BuildValue("(LKK)", (long long)p, page_ts, cnt)
					      : Py_BuildValue("(LKO)", (long long)p, page_ts, Py_None);
				if (!item || PyList_Append(lost, item) < 0) {
					Py_XDECREF(item);
					Py_UNBLOCK_THREADS
					n = -1;
					break;
				}
				Py_DECREF(item);
				Py_UNBLOCK_THREADS
			}
			if (!walking || size == 0)
				continue;
			start = base + data_off;
			end = start + size;
			cur = start;
			ts = page_ts;
			page_n = n;
			while (1) {
				uint32_t w = (uint32_t)rd(&l, cur, 4);
				uint32_t tl = big ? w >> 27 : w & 31;
				uint64_t delta = big ? (w & COMMIT_MASK) : (w >> 5);
				int64_t nx, dpos = -1, dl = 0;
				int broken = 0;

				if (tl >= 1 && tl <= 28) {
					dl = 4 * (int64_t)tl;
					dpos = cur + 4;
					nx = cur + 4 + dl;
					if (min_dlen > 4 && dl < min_dlen)
						broken = 1;
					ts += delta;
				} else {
					uint64_t a0 = next_word(&l, cur);

					if (tl == 0) {
						dl = ((int64_t)a0 - 4 + 3) & ~(int64_t)3;
						dpos = cur + 8;
						nx = cur + 8 + dl;
						ts += delta;
					} else if (tl == TYPE_PADDING) {
						nx = cur + 4 + (int64_t)a0;
						if (nx > end)
							nx = end;
						ts += delta;
					} else if (tl == TYPE_TIME_EXTEND) {
						nx = cur + 8;
						ts += (a0 << TS_SHIFT) + delta;
					} else {
						nx = cur + 8;
						ts = ((a0 << TS_SHIFT) + delta) | (page_ts & TS_MSB);
					}
					if (nx <= cur || (tl == 0 && dl < min_dlen))
						broken = 1;
				}
				if (!broken && nx > end)
					broken = 1;
				if (broken) {
					bad_page = p;
					why = "chain";
					n = page_n;     /* this page's records are dropped */
					walking = 0;
					break;
				}
				if (dpos >= 0) {
					uint32_t id = (uint32_t)rd(&l, dpos + id_off, (int)id_size);

					if (!lutb || lutb[id < lut_last ? id : lut_last]) {
						opos[n] = (int32_t)dpos;
						ots[n] = ts;
						odlen[n] = (int32_t)dl;
						oids[n] = id;
						n++;
					}
				}
				if (nx >= end)
					break;
				cur = nx;
			}
		}
		Py_END_ALLOW_THREADS
		if (n < 0)
			goto out;
		res = Py_BuildValue("(LOLLzL)", (long long)n, lost,
				    (long long)(bad_page >= 0 ? npages : p), (long long)bad_page,
				    why, (long long)detail);
	}
out:
	Py_XDECREF(lost);
	PyBuffer_Release(&blk);
	if (vpos.obj) PyBuffer_Release(&vpos);
	if (vts.obj) PyBuffer_Release(&vts);
	if (vdlen.obj) PyBuffer_Release(&vdlen);
	if (vids.obj) PyBuffer_Release(&vids);
	if (vlut.obj) PyBuffer_Release(&vlut);
	return res;
}

PyDoc_STRVAR(ints_doc,
"ints(block, pos, dlen, offset, size, signed, big_endian, out)\n"
"\n"
"The integer field at ``offset`` (``size`` bytes) of the records whose data start at\n"
"``pos`` (int32) and are ``dlen`` (int32) long, into ``out`` (8-byte or 4-byte items):\n"
"sign-extended if ``signed``, 0 where the record is too short to hold it.");

static PyObject *ints(PyObject *self, PyObject *args)
{
	Py_buffer blk, vpos = {0}, vdlen = {0}, vout = {0};
	PyObject *pos_obj, *dlen_obj, *out_obj, *res = NULL;
	Py_ssize_t off, size, i, n;
	int sgn, big;

	if (!PyArg_ParseTuple(args, "y*OOnnppO", &blk, &pos_obj, &dlen_obj, &off, &size, &sgn,
			      &big, &out_obj))
		return NULL;
	if (PyObject_GetBuffer(pos_obj, &vpos, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0 ||
	    PyObject_GetBuffer(dlen_obj, &vdlen, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0 ||
	    PyObject_GetBuffer(out_obj, &vout, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
		goto out;
	n = vpos.len / 4;
	if (vpos.itemsize != 4 || vdlen.itemsize != 4 || vdlen.len / 4 != n ||
	    (vout.itemsize != 8 && vout.itemsize != 4) || vout.len / vout.itemsize != n ||
	    size < 1 || size > 8 || off < 0) {
		PyErr_SetString(PyExc_ValueError, "ints: bad arguments");
		goto out;
	}
	{
		struct layout l = { blk.buf, blk.len, big };
		const int32_t *pos = vpos.buf, *dlen = vdlen.buf;
		int shift = 64 - 8 * (int)size;

		Py_BEGIN_ALLOW_THREADS
		for (i = 0; i < n; i++) {
			uint64_t v = 0;

			if (dlen[i] >= off + size)
				v = rd(&l, (int64_t)pos[i] + off, (int)size);
			if (sgn && shift)
				v = (uint64_t)((int64_t)(v << shift) >> shift);
			if (vout.itemsize == 8)
				((uint64_t *)vout.buf)[i] = v;
			else
				((uint32_t *)vout.buf)[i] = (uint32_t)v;
		}
		Py_END_ALLOW_THREADS
	}
	res = Py_None;
	Py_INCREF(res);
out:
	PyBuffer_Release(&blk);
	if (vpos.obj) PyBuffer_Release(&vpos);
	if (vdlen.obj) PyBuffer_Release(&vdlen);
	if (vout.obj) PyBuffer_Release(&vout);
	return res;
}

struct slot {
	uint64_t hash;
	int64_t at;             /* offset of the string in the block; -1: empty slot */
	int32_t len;
	int32_t code;
};

static inline uint64_t hash_bytes(const uint8_t *p, int32_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;     /* FNV-1a */
	int32_t i;

	for (i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

PyDoc_STRVAR(strings_doc,
"strings(block, pos, dlen, offset, rel, big_endian, codes) -> values\n"
"\n"
"The __data_loc (``rel``: __rel_loc) string field whose location word is at ``offset``\n"
"of the records at ``pos`` (int32, data lengths ``dlen``): ``codes`` (int32) gets the\n"
"number of each record's string, ``values`` lists the strings (utf-8, bad bytes\n"
"replaced) in order of first appearance.  A string ends at its first NUL, at its\n"
"location's length or at the end of the record; a record too short for the word has \"\".");

static PyObject *strings(PyObject *self, PyObject *args)
{
	Py_buffer blk, vpos = {0}, vdlen = {0}, vcodes = {0};
	PyObject *pos_obj, *dlen_obj, *codes_obj, *values = NULL, *res = NULL;
	Py_ssize_t off, i, n;
	int rel, big;
	struct slot *tab = NULL;
	int64_t cap = 256, used = 0;

	if (!PyArg_ParseTuple(args, "y*OOnppO", &blk, &pos_obj, &dlen_obj, &off, &rel, &big,
			      &codes_obj))
		return NULL;
	if (PyObject_GetBuffer(pos_obj, &vpos, PyBUF_C_CONTIGUOUS) < 0 ||
	    PyObject_GetBuffer(dlen_obj, &vdlen, PyBUF_C_CONTIGUOUS) < 0 ||
	    PyObject_GetBuffer(codes_obj, &vcodes, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
		goto out;
	n = vpos.len / 4;
	if (vpos.itemsize != 4 || vdlen.itemsize != 4 || vdlen.len / 4 != n ||
	    vcodes.itemsize != 4 || vcodes.len / 4 != n || off < 0) {
		PyErr_SetString(PyExc_ValueError, "strings: bad arguments");
		goto out;
	}
	values = PyList_New(0);
	tab = malloc(cap * sizeof(*tab));
	if (!values || !tab) {
		PyErr_NoMemory();
		goto out;
	}
	for (i = 0; i < cap; i++)
		tab[i].at = -1;
	{
		struct layout l = { blk.buf, blk.len, big };
		const int32_t *pos = vpos.buf, *dlen = vdlen.buf;
		int32_t *codes = vcodes.buf;

		for (i = 0; i < n; i++) {
			int64_t start = 0, len = 0, at, j;
			const uint8_t *sp, *nul;
			uint64_t h;

			if (dlen[i] >= off + 4) {
				uint32_t w = (uint32_t)rd(&l, (int64_t)pos[i] + off, 4);

				start = w & 0xFFFF;
				if (rel)
					start += off + 4;
				len = (w >> 16) & 0xFFFF;
				if (len > dlen[i] - start)
					len = dlen[i] - start;
				if (len < 0)
					len = 0;
			}
			at = (int64_t)pos[i] + start;
			if (len == 0 || at < 0 || at + len > blk.len) {
				at = 0;
				len = 0;
			}
			sp = (const uint8_t *)blk.buf + at;
			nul = len ? memchr(sp, 0, len) : NULL;
			if (nul)
				len = nul - sp;
			h = hash_bytes(sp, (int32_t)len);
			for (j = h & (cap - 1); tab[j].at >= 0; j = (j + 1) & (cap - 1))
				if (tab[j].hash == h && tab[j].len == len &&
				    !memcmp((const uint8_t *)blk.buf + tab[j].at, sp, len))
					break;
			if (tab[j].at < 0) {
				PyObject *v = PyUnicode_DecodeUTF8((const char *)sp, len, "replace");

				if (!v || PyList_Append(values, v) < 0) {
					Py_XDECREF(v);
					goto out;
				}
				Py_DECREF(v);
				tab[j].hash = h;
				tab[j].at = at;
				tab[j].len = (int32_t)len;
				tab[j].code = (int32_t)used++;
				if (used * 2 > cap) {   /* grow: rehash */
					struct slot *old = tab;
					int64_t ocap = cap, k, m;

					cap *= 2;
					tab = malloc(cap * sizeof(*tab));
					if (!tab) {
						tab = old;
						PyErr_NoMemory();
						goto out;
					}
					for (k = 0; k < cap; k++)
						tab[k].at = -1;
					for (k = 0; k < ocap; k++) {
						if (old[k].at < 0)
							continue;
						for (m = old[k].hash & (cap - 1); tab[m].at >= 0;
						     m = (m + 1) & (cap - 1))
							;
						tab[m] = old[k];
					}
					free(old);
					codes[i] = (int32_t)(used - 1);
					continue;
				}
			}
			codes[i] = tab[j].code;
		}
	}
	res = values;
	values = NULL;
out:
	free(tab);
	Py_XDECREF(values);
	PyBuffer_Release(&blk);
	if (vpos.obj) PyBuffer_Release(&vpos);
	if (vdlen.obj) PyBuffer_Release(&vdlen);
	if (vcodes.obj) PyBuffer_Release(&vcodes);
	return res;
}

static PyMethodDef methods[] = {
	{"walk", walk, METH_VARARGS, walk_doc},
	{"ints", ints, METH_VARARGS, ints_doc},
	{"strings", strings, METH_VARARGS, strings_doc},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "nfsreaddir._ringbuf",
	"The ring-buffer walk of nfsreaddir.trace, compiled.", -1, methods,
};

PyMODINIT_FUNC PyInit__ringbuf(void)
{
	return PyModule_Create(&module);
}
