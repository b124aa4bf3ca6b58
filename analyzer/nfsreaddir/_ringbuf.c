/*
 * The ring-buffer walk of nfsreaddir.trace in C: one pass over a block of whole
 * ring-buffer pages that lists the event records (data offset, time stamp, data length,
 * event id) of the wanted events, the lost-events markers, and where the data is damaged
 * (walk(), for the decoders: ints(), strings()); and the same pass writing the wanted fields
 * of those records straight into columns (the Extract type, below).
 *
 * It computes exactly what the numpy walk (nfsreaddir/trace/numpywalk.py) computes, record by
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
 * Why not libtracecmd/libtraceevent (the trace-cmd project's own readers): reading the fields
 * of every record through tracecmd_iterate_events() and tep_read_number_field() is no faster
 * than `trace-cmd report` (analyzer/bench/tracecmd-loop.c); docs/measurements/bench.md has
 * the figures, measured against this walk.
 *
 * The page format is nfsreaddir/trace/page.py's: tests/test_tracedat.py checks the #defines
 * below against it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>           /* (Python.h defines _GNU_SOURCE: mremap) */
#include <unistd.h>

#define COMMIT_MASK ((1u << 27) - 1)
#define MISSED_EVENTS (1ull << 31)
#define MISSED_STORED (1ull << 30)
#define TS_SHIFT 27
#define TS_MSB (0xF8ull << 56)
#define TYPE_DATA_MAX 28
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

/* Page ``p`` says events were lost before it: (page, page time stamp, count or None) onto
 * ``lost``, the count where the page stores it after its data.  Called without the GIL (it
 * takes it); 0 when the list could not grow (a Python error is set). */
static int lost_marker(PyObject *lost, const struct layout *l, int64_t p, int64_t base,
		       uint64_t page_ts, uint64_t commit, int64_t size, int64_t limit,
		       int64_t data_off, int64_t long_size)
{
	int stored = (commit & MISSED_STORED) && size + long_size <= limit;
	uint64_t cnt = stored ? rd(l, base + data_off + size, (int)long_size) : 0;
	PyGILState_STATE g = PyGILState_Ensure();
	PyObject *item = stored ? Py_BuildValue("(LKK)", (long long)p, page_ts, cnt)
				: Py_BuildValue("(LKO)", (long long)p, page_ts, Py_None);
	int ok = item && PyList_Append(lost, item) == 0;

	Py_XDECREF(item);
	PyGILState_Release(g);
	return ok;
}

/* The records of one page's data, [start, end) of the block: ``emit(ctx, data offset, data
 * length, event id, time stamp)`` for each event record in order, the time being the page's
 * time stamp plus the deltas before it (a time stamp record sets it).  Returns 0 at the end
 * of the page's data, 1 where the chain is broken (a record runs past the data or is too short
 * to hold an event id: the caller drops the page's records), -1 when emit failed.  Inlined
 * into each walk below with its own emit. */
typedef int (*emit_fn)(void *ctx, const struct layout *l, int64_t dpos, int64_t dl,
		       uint32_t id, uint64_t ts);

static inline int walk_page(const struct layout *l, int64_t start, int64_t end,
			    uint64_t page_ts, int64_t min_dlen, int64_t id_off, int id_size,
			    emit_fn emit, void *ctx)
{
	int big = l->big;
	int64_t cur = start;
	uint64_t ts = page_ts;

	while (1) {
		uint32_t w = (uint32_t)rd(l, cur, 4);
		uint32_t tl = big ? w >> 27 : w & 31;
		uint64_t delta = big ? (w & COMMIT_MASK) : (w >> 5);
		int64_t nx, dpos = -1, dl = 0;
		int broken = 0;

		if (tl >= 1 && tl <= TYPE_DATA_MAX) {
			dl = 4 * (int64_t)tl;
			dpos = cur + 4;
			nx = cur + 4 + dl;
			if (min_dlen > 4 && dl < min_dlen)
				broken = 1;
			ts += delta;
		} else {
			uint64_t a0 = next_word(l, cur);

			if (tl == 0) {
				dl = ((int64_t)a0 - 4 + 3) & ~(int64_t)3;
				dpos = cur + 8;
				nx = cur + 8 + dl;
				ts += delta;
			} else if (tl == TYPE_PADDING) {
				nx = cur + 4 + (int64_t)a0;
				if (nx > end)
					nx = end;
				/* every record starts 4-byte aligned: a padding length that
				 * leaves the alignment is damage (as in the numpy walk) */
				if (nx < end && (nx & 3))
					broken = 1;
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
		if (broken || nx > end)
			return 1;
		if (dpos >= 0 && emit(ctx, l, dpos, dl, (uint32_t)rd(l, dpos + id_off, id_size), ts) < 0)
			return -1;
		if (nx >= end)
			return 0;
		cur = nx;
	}
}

/* walk()'s records: the wanted ones listed into its arrays (room checked per page). */
struct listing {
	int32_t *pos;
	uint64_t *ts;
	int32_t *dlen;
	uint32_t *ids;
	const uint8_t *lut;     /* NULL: every event */
	int64_t lut_last;
	int64_t n;
};

static inline int list_record(void *ctx, const struct layout *l, int64_t dpos, int64_t dl,
			      uint32_t id, uint64_t ts)
{
	struct listing *c = ctx;

	if (!c->lut || c->lut[id < c->lut_last ? id : c->lut_last]) {
		c->pos[c->n] = (int32_t)dpos;
		c->ts[c->n] = ts;
		c->dlen[c->n] = (int32_t)dl;
		c->ids[c->n] = id;
		c->n++;
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

/* Where a page's fields are, as walk() is given them. */
struct page_geometry {
	int64_t P, commit_off, commit_size, data_off, long_size, id_off, id_size;
};

/* Where list_pages() stopped: the page to go on from, and the first damaged page (-1: none)
 * with why ("size" with the commit size as detail, or "chain"). */
struct walk_end {
	int64_t next_page, bad_page, detail;
	const char *why;
};

/* walk()'s pass over the pages of ``l`` from ``first_page``: the wanted records into ``lc``
 * (which has room for ``cap``), the lost-events markers onto ``lost``.  Returns the number of
 * records listed, -1 when ``lost`` could not grow (a Python error is set).  Runs without the
 * GIL. */
static int64_t list_pages(const struct layout *l, const struct page_geometry *g,
			  int64_t first_page, int64_t cap, struct listing *lc, PyObject *lost,
			  struct walk_end *end_at)
{
	int64_t P = g->P, npages = l->len / P, p, n = 0;
	int64_t limit = P - g->data_off, min_dlen = g->id_off + g->id_size;
	int walking = 1;        /* until the first broken record chain */

	end_at->bad_page = -1;
	end_at->detail = 0;
	end_at->why = NULL;
	for (p = first_page; p < npages; p++) {
		int64_t base = p * P;
		uint64_t page_ts = rd(l, base, 8);
		uint64_t commit = rd(l, base + g->commit_off, (int)g->commit_size);
		int64_t size = (int64_t)(commit & COMMIT_MASK);
		int64_t start, end;

		if (walking && n + P / 8 > cap)
			break;          /* the caller goes on from this page */
		if (size > limit) {
			if (end_at->bad_page < 0) {     /* else a broken chain came first */
				end_at->bad_page = p;
				end_at->why = "size";
				end_at->detail = size;
			}
			break;
		}
		if ((commit & MISSED_EVENTS) &&
		    !lost_marker(lost, l, p, base, page_ts, commit, size, limit, g->data_off,
				 g->long_size))
			return -1;
		if (!walking || size == 0)
			continue;
		start = base + g->data_off;
		end = start + size;
		lc->n = n;
		if (walk_page(l, start, end, page_ts, min_dlen, g->id_off, (int)g->id_size,
			      list_record, lc) > 0) {
			end_at->bad_page = p;
			end_at->why = "chain";
			walking = 0;    /* this page's records are dropped: n stays */
			continue;
		}
		n = lc->n;
	}
	end_at->next_page = end_at->bad_page >= 0 ? npages : p;
	return n;
}

/* The output arrays of walk() as a listing (the lut's buffer taken by the caller); returns
 * how many records they have room for, -1 on error (a Python error is set). */
static int64_t get_listing(PyObject *const outs[4], Py_buffer views[4], struct listing *lc)
{
	static const Py_ssize_t sizes[4] = {4, 8, 4, 4};
	static const char *const names[4] = {"pos", "ts", "dlen", "ids"};
	int64_t cap = INT64_MAX;
	int i;

	for (i = 0; i < 4; i++) {
		if (get_out(outs[i], &views[i], sizes[i], names[i]) < 0)
			return -1;
		if (views[i].len / sizes[i] < cap)
			cap = views[i].len / sizes[i];
	}
	lc->pos = views[0].buf;
	lc->ts = views[1].buf;
	lc->dlen = views[2].buf;
	lc->ids = views[3].buf;
	lc->n = 0;
	return cap;
}

static PyObject *walk(PyObject *self, PyObject *args)
{
	Py_buffer blk, outv[4], vlut = {0};
	PyObject *lut_obj, *outs[4];
	Py_ssize_t first_page, P, commit_off, commit_size, data_off, long_size, id_off, id_size;
	int big, i;
	PyObject *lost = NULL, *res = NULL;
	struct listing lc = {0};
	struct walk_end end_at;
	int64_t cap, n;

	if (!PyArg_ParseTuple(args, "y*nnnnnpnnnOOOOO", &blk, &first_page, &P, &commit_off, &commit_size,
			      &data_off, &big, &long_size, &id_off, &id_size, &lut_obj,
			      &outs[0], &outs[1], &outs[2], &outs[3]))
		return NULL;
	memset(outv, 0, sizeof(outv));
	cap = get_listing(outs, outv, &lc);
	if (cap < 0)
		goto out;
	if (lut_obj != Py_None) {
		if (PyObject_GetBuffer(lut_obj, &vlut, PyBUF_C_CONTIGUOUS) < 0)
			goto out;
		if (vlut.len < 1) {
			PyErr_SetString(PyExc_ValueError, "empty lut");
			goto out;
		}
		lc.lut = vlut.buf;
		lc.lut_last = vlut.len - 1;
	}
	if (P < 64 || (commit_size != 4 && commit_size != 8) || id_size < 1 || id_size > 8 ||
	    long_size < 1 || long_size > 8 || data_off >= P || first_page < 0) {
		PyErr_SetString(PyExc_ValueError, "walk: implausible layout");
		goto out;
	}
	if (cap < P / 8) {
		PyErr_SetString(PyExc_ValueError, "walk: output arrays too small");
		goto out;
	}
	lost = PyList_New(0);
	if (!lost)
		goto out;
	{
		struct layout l = { blk.buf, blk.len, big };
		struct page_geometry g = { P, commit_off, commit_size, data_off, long_size, id_off,
					   id_size };

		Py_BEGIN_ALLOW_THREADS
		n = list_pages(&l, &g, first_page, cap, &lc, lost, &end_at);
		Py_END_ALLOW_THREADS
	}
	if (n < 0)
		goto out;
	res = Py_BuildValue("(LOLLzL)", (long long)n, lost, (long long)end_at.next_page,
			    (long long)end_at.bad_page, end_at.why, (long long)end_at.detail);
out:
	Py_XDECREF(lost);
	PyBuffer_Release(&blk);
	for (i = 0; i < 4; i++)
		if (outv[i].obj)
			PyBuffer_Release(&outv[i]);
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

/* A string's hash for the dictionaries: eight bytes a step, one multiply each (a string
 * field is hashed once per record, and a multiply per byte was a seventh of the extract's
 * time on kmem traces), the high half folded into the low bits that pick the slot.  Whole
 * words are loaded as such (the last one overlapping the one before), a short string byte by
 * byte in a register: assembling a word in memory from a shorter copy stalls the load. */
#define MIX(h, w) ((h) = ((h) ^ (w)) * 0xff51afd7ed558ccdull, (h) ^= (h) >> 32)

static inline uint64_t hash_bytes(const uint8_t *p, int32_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n, w = 0;
	int32_t i;

	if (n < 8) {
		for (i = 0; i < n; i++)
			w |= (uint64_t)p[i] << (8 * i);
		MIX(h, w);
		return h;
	}
	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&w, p + i, 8);
		MIX(h, w);
	}
	if (i < n) {
		memcpy(&w, p + n - 8, 8);
		MIX(h, w);
	}
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

/* Where the __data_loc (``rel``: __rel_loc) string of the record at ``pos`` (``dlen`` bytes
 * of data) lies in the block: its offset into ``*at`` and its length returned, up to its
 * first NUL; 0 (and offset 0) where the record has none. */
static inline int64_t record_string(const struct layout *l, int64_t pos, int64_t dlen,
				    int64_t off, int rel, int64_t *at)
{
	int64_t start = 0, len = 0;
	const uint8_t *sp, *nul;

	if (dlen >= off + 4) {
		uint32_t w = (uint32_t)rd(l, pos + off, 4);

		start = w & 0xFFFF;
		if (rel)
			start += off + 4;
		len = (w >> 16) & 0xFFFF;
		if (len > dlen - start)
			len = dlen - start;
		if (len < 0)
			len = 0;
	}
	*at = pos + start;
	if (len == 0 || *at < 0 || *at + len > l->len) {
		*at = 0;
		len = 0;
	}
	sp = l->b + *at;
	nul = len ? memchr(sp, 0, len) : NULL;
	return nul ? nul - sp : len;
}

/* strings()'s dictionary of the distinct strings of a block: open addressing on their hash,
 * the strings themselves left in the block (``at``); ``cap`` a power of two, at least twice
 * ``used``. */
struct strdict {
	struct slot *tab;
	int64_t cap, used;
};

static int strdict_init(struct strdict *d, int64_t cap)
{
	int64_t k;

	d->tab = malloc(cap * sizeof(*d->tab));
	d->cap = cap;
	d->used = 0;
	if (!d->tab)
		return -1;
	for (k = 0; k < cap; k++)
		d->tab[k].at = -1;
	return 0;
}

/* Twice the slots, the strings placed again; -1 (the dictionary unchanged) without memory. */
static int strdict_grow(struct strdict *d)
{
	struct strdict old = *d;
	int64_t k, m;

	if (strdict_init(d, old.cap * 2) < 0) {
		*d = old;
		return -1;
	}
	d->used = old.used;
	for (k = 0; k < old.cap; k++) {
		if (old.tab[k].at < 0)
			continue;
		for (m = old.tab[k].hash & (d->cap - 1); d->tab[m].at >= 0; m = (m + 1) & (d->cap - 1))
			;
		d->tab[m] = old.tab[k];
	}
	free(old.tab);
	return 0;
}

/* The code of the string of ``len`` bytes at ``at`` of the block, a new one (its value
 * appended to ``values``) when first met; -1 on error (a Python error is set). */
static int32_t strdict_code(struct strdict *d, const struct layout *l, int64_t at, int64_t len,
			    PyObject *values)
{
	const uint8_t *sp = l->b + at;
	uint64_t h = hash_bytes(sp, (int32_t)len);
	int64_t j;
	int32_t code;
	PyObject *v;

	for (j = h & (d->cap - 1); d->tab[j].at >= 0; j = (j + 1) & (d->cap - 1))
		if (d->tab[j].hash == h && d->tab[j].len == len &&
		    !memcmp(l->b + d->tab[j].at, sp, len))
			return d->tab[j].code;
	v = PyUnicode_DecodeUTF8((const char *)sp, len, "replace");
	if (!v || PyList_Append(values, v) < 0) {
		Py_XDECREF(v);
		return -1;
	}
	Py_DECREF(v);
	code = (int32_t)d->used++;
	d->tab[j].hash = h;
	d->tab[j].at = at;
	d->tab[j].len = (int32_t)len;
	d->tab[j].code = code;
	if (d->used * 2 > d->cap && strdict_grow(d) < 0) {
		PyErr_NoMemory();
		return -1;
	}
	return code;
}

static PyObject *strings(PyObject *self, PyObject *args)
{
	Py_buffer blk, vpos = {0}, vdlen = {0}, vcodes = {0};
	PyObject *pos_obj, *dlen_obj, *codes_obj, *values = NULL, *res = NULL;
	Py_ssize_t off, i, n;
	int rel, big;
	struct strdict d = {0};

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
	if (!values || strdict_init(&d, 256) < 0) {
		PyErr_NoMemory();
		goto out;
	}
	{
		struct layout l = { blk.buf, blk.len, big };
		const int32_t *pos = vpos.buf, *dlen = vdlen.buf;
		int32_t *codes = vcodes.buf;

		for (i = 0; i < n; i++) {
			int64_t at, len = record_string(&l, pos[i], dlen[i], off, rel, &at);

			codes[i] = strdict_code(&d, &l, at, len, values);
			if (codes[i] < 0)
				goto out;
		}
	}
	res = values;
	values = NULL;
out:
	free(d.tab);
	Py_XDECREF(values);
	PyBuffer_Release(&blk);
	if (vpos.obj) PyBuffer_Release(&vpos);
	if (vdlen.obj) PyBuffer_Release(&vdlen);
	if (vcodes.obj) PyBuffer_Release(&vcodes);
	return res;
}

/* ------------------------------------------------------------------------------------------
 * Extract: the walk and the field decoding in one pass, straight into the columns.
 *
 * walk() above lists the records of a block into fixed arrays from which the fields are then
 * gathered (ints(), strings()), part after part.  An Extract object instead writes the time
 * stamp and the requested fields of each wanted record into columns of its own as it meets
 * the record, and keeps them from block to block: no per-record offset arrays, nothing held
 * of a block once it is walked.  Columns are mappings of their own that grow by mremap (no
 * copy, never two copies in memory, whatever malloc's thresholds are set to; the pages past
 * the rows are not resident until rows fill them) and are handed to the caller without a
 * copy (take()).  Strings are numbered in a dictionary kept across blocks; their codes are a
 * byte a row while the dictionary fits, widened in place as it grows (slab cache and
 * function names are few: 3 bytes a row less than int32 codes, 143 MiB at 50 M events).
 */

struct col {
	int kind;               /* 0 int, 1 __data_loc string, 2 __rel_loc string */
	int64_t off, size;
	int sgn, isz;           /* sign-extend; bytes per output item (8, or 4 for the pid; codes:
				 * 1, 2 or 4, the narrowest that holds the dictionary so far) */
	int pid;                /* the pid column: -1 where the record is too short */
	uint8_t *data;          /* n * isz bytes, a mapping of ``mapped`` bytes */
	size_t mapped;
	/* the strings' dictionary: open addressing over the distinct values, kept in arena */
	struct sslot { uint64_t hash; int64_t at; int32_t len, code; } *tab;
	int64_t tcap, used;
	char *arena;
	int64_t alen, acap;
	int64_t *vat;           /* per code: offset in arena; length in vlen */
	int32_t *vlen;
};

struct eslot {
	int64_t n, cap;         /* rows, and rows every column has room for */
	uint64_t *ts;
	size_t ts_mapped;
	int ncols;
	struct col *cols;
};

typedef struct {
	PyObject_HEAD
	int nslots;
	struct eslot *slots;
	int16_t *map;           /* event id -> slot, -1: not wanted; ids >= maplen - 1 use the last */
	int64_t maplen;
} Extract;

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
static int remap(void **p, size_t *mapped, size_t n)
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

static PyTypeObject MemType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "nfsreaddir._ringbuf.Mem",
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
	Py_TYPE(self)->tp_free(self);
}

/* Room for one more row in every column of the slot; 0 when out of memory. */
static int slot_grow(struct eslot *s)
{
	int64_t cap = s->cap ? s->cap + s->cap / 2 : 4096;
	int j;

	if (!remap((void **)&s->ts, &s->ts_mapped, cap * 8))
		return 0;
	for (j = 0; j < s->ncols; j++)
		if (!remap((void **)&s->cols[j].data, &s->cols[j].mapped, cap * s->cols[j].isz))
			return 0;
	s->cap = cap;
	return 1;
}

/* The code of the string sp[0:len] in the column's dictionary (added if new); -1: no memory. */
static int32_t str_code(struct col *c, const uint8_t *sp, int32_t len)
{
	uint64_t h = hash_bytes(sp, len);
	int64_t j;

	if (!c->tab || (c->used + 1) * 2 > c->tcap) {
		int64_t ncap = c->tcap ? c->tcap * 2 : 256, k, m;
		struct sslot *t = malloc(ncap * sizeof(*t));

		if (!t)
			return -1;
		for (k = 0; k < ncap; k++)
			t[k].at = -1;
		for (k = 0; k < c->tcap; k++) {
			if (c->tab[k].at < 0)
				continue;
			for (m = c->tab[k].hash & (ncap - 1); t[m].at >= 0; m = (m + 1) & (ncap - 1))
				;
			t[m] = c->tab[k];
		}
		free(c->tab);
		c->tab = t;
		c->tcap = ncap;
	}
	for (j = h & (c->tcap - 1); c->tab[j].at >= 0; j = (j + 1) & (c->tcap - 1))
		if (c->tab[j].hash == h && c->tab[j].len == len &&
		    !memcmp(c->arena + c->tab[j].at, sp, len))
			return c->tab[j].code;
	if (c->alen + len > c->acap) {
		int64_t ncap = (c->acap + len) * 2;
		char *a = realloc(c->arena, ncap);

		if (!a)
			return -1;
		c->arena = a;
		c->acap = ncap;
	}
	if ((c->used & (c->used - 1)) == 0) {   /* 0, 1, 2, 4, ...: double the value index */
		int64_t ncap = c->used ? c->used * 2 : 1;
		int64_t *va = realloc(c->vat, ncap * sizeof(*va));
		int32_t *vl;

		if (!va)
			return -1;
		c->vat = va;
		vl = realloc(c->vlen, ncap * sizeof(*vl));
		if (!vl)
			return -1;
		c->vlen = vl;
	}
	memcpy(c->arena + c->alen, sp, len);
	c->tab[j].hash = h;
	c->tab[j].at = c->alen;
	c->tab[j].len = len;
	c->tab[j].code = (int32_t)c->used;
	c->vat[c->used] = c->alen;
	c->vlen[c->used] = len;
	c->alen += len;
	return (int32_t)c->used++;
}

/* The string column's codes made wide enough for ``code`` (int8 -> int16 -> int32), in place:
 * cache and function names are few, so most columns stay a byte a row; 0: no memory. */
static int widen(struct eslot *s, struct col *c, int32_t code)
{
	int nisz = code < (1 << 15) ? 2 : 4;
	int64_t i;

	if (!remap((void **)&c->data, &c->mapped, s->cap * nisz))
		return 0;
	/* backwards: row i moves to i * nisz >= i * isz, past every row not yet moved (by
	 * memcpy: rows of two widths over the same bytes are no case for typed pointers) */
	for (i = s->n - 1; i >= 0; i--) {
		int8_t v8;
		int16_t v16;
		int32_t v;

		if (c->isz == 1) {
			memcpy(&v8, c->data + i, 1);
			v = v8;
		} else {
			memcpy(&v16, c->data + 2 * i, 2);
			v = v16;
		}
		if (nisz == 2) {
			v16 = (int16_t)v;
			memcpy(c->data + 2 * i, &v16, 2);
		} else {
			memcpy(c->data + 4 * i, &v, 4);
		}
	}
	c->isz = nisz;
	return 1;
}

/* One wanted record into its slot's columns (as ints() and strings() decode it); 0: no memory. */
static int put(struct eslot *s, const struct layout *l, int64_t dpos, int64_t dl, uint64_t ts)
{
	int64_t i = s->n;
	int j;

	if (i == s->cap && !slot_grow(s))
		return 0;
	s->ts[i] = ts;
	for (j = 0; j < s->ncols; j++) {
		struct col *c = &s->cols[j];

		if (c->kind == 0) {
			uint64_t v = 0;
			int shift = 64 - 8 * (int)c->size;

			if (dl >= c->off + c->size)
				v = rd(l, dpos + c->off, (int)c->size);
			else if (c->pid)
				v = (uint64_t)-1;
			if (c->sgn && shift)
				v = (uint64_t)((int64_t)(v << shift) >> shift);
			if (c->isz == 8)
				((uint64_t *)c->data)[i] = v;
			else
				((uint32_t *)c->data)[i] = (uint32_t)v;
		} else {
			int64_t start = 0, len = 0, at;
			const uint8_t *sp, *nul;
			int32_t code;

			if (dl >= c->off + 4) {
				uint32_t w = (uint32_t)rd(l, dpos + c->off, 4);

				start = w & 0xFFFF;
				if (c->kind == 2)
					start += c->off + 4;
				len = (w >> 16) & 0xFFFF;
				if (len > dl - start)
					len = dl - start;
				if (len < 0)
					len = 0;
			}
			at = dpos + start;
			if (len == 0 || at < 0 || at + len > l->len) {
				at = 0;
				len = 0;
			}
			sp = l->b + at;
			nul = len ? memchr(sp, 0, len) : NULL;
			if (nul)
				len = nul - sp;
			code = str_code(c, sp, (int32_t)len);
			if (code < 0 || (c->isz < 4 && code >= (1 << (8 * c->isz - 1)) &&
					 !widen(s, c, code)))
				return 0;
			if (c->isz == 1)
				((int8_t *)c->data)[i] = (int8_t)code;
			else if (c->isz == 2)
				((int16_t *)c->data)[i] = (int16_t)code;
			else
				((int32_t *)c->data)[i] = code;
		}
	}
	s->n = i + 1;
	return 1;
}

/* Extract.walk()'s records: the wanted ones (by the id's slot) into their columns. */
static inline int extract_record(void *ctx, const struct layout *l, int64_t dpos, int64_t dl,
				 uint32_t id, uint64_t ts)
{
	Extract *x = ctx;
	int16_t sl = x->map[id < x->maplen - 1 ? id : x->maplen - 1];

	return sl < 0 || put(&x->slots[sl], l, dpos, dl, ts) ? 0 : -1;
}

static int extract_init(PyObject *self, PyObject *args, PyObject *kw)
{
	Extract *x = (Extract *)self;
	Py_buffer vmap = {0};
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
	seq = PySequence_Fast(plan, "Extract: the plan is a sequence");
	if (!x->map || !seq)
		goto out;
	memcpy(x->map, vmap.buf, vmap.len);
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
			if (c->kind < 0 || c->kind > 2 || off < 0 || size < 1 || size > 8 ||
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

PyDoc_STRVAR(extract_walk_doc,
"walk(block, page_size, commit_off, commit_size, data_off, big_endian, long_size, id_off,\n"
"     id_size) -> (lost, bad_page, why, detail)\n"
"\n"
"Walk all pages of ``block`` as walk() does and append each wanted record (its id's entry\n"
"of the map is its slot) to its slot's columns.  ``lost``, ``bad_page``, ``why``, ``detail``\n"
"as walk() gives them; records from the damaged page on are not appended.");

static PyObject *extract_walk(PyObject *self, PyObject *args)
{
	Extract *x = (Extract *)self;
	Py_buffer blk;
	Py_ssize_t P, commit_off, commit_size, data_off, long_size, id_off, id_size;
	int big, nomem = 0;
	PyObject *lost = NULL, *res = NULL;

	if (!PyArg_ParseTuple(args, "y*nnnnpnnn", &blk, &P, &commit_off, &commit_size, &data_off,
			      &big, &long_size, &id_off, &id_size))
		return NULL;
	if (!x->slots) {
		PyErr_SetString(PyExc_RuntimeError, "Extract: not initialised");
		goto out;
	}
	if (P < 64 || (commit_size != 4 && commit_size != 8) || id_size < 1 || id_size > 8 ||
	    long_size < 1 || long_size > 8 || data_off >= P) {
		PyErr_SetString(PyExc_ValueError, "walk: implausible layout");
		goto out;
	}
	lost = PyList_New(0);
	if (!lost)
		goto out;
	{
		struct layout l = { blk.buf, blk.len, big };
		int64_t npages = blk.len / P, p;
		int64_t limit = P - data_off, min_dlen = id_off + id_size;
		int64_t bad_page = -1, detail = 0;
		const char *why = NULL;
		int walking = 1;        /* until the first broken record chain */
		int64_t *undo = calloc(x->nslots ? x->nslots : 1, sizeof(int64_t));

		if (!undo) {
			PyErr_NoMemory();
			goto out;
		}
		Py_BEGIN_ALLOW_THREADS
		for (p = 0; p < npages && !nomem; p++) {
			int64_t base = p * P;
			uint64_t page_ts = rd(&l, base, 8);
			uint64_t commit = rd(&l, base + commit_off, (int)commit_size);
			int64_t size = (int64_t)(commit & COMMIT_MASK);
			int64_t start, end;
			int k, r;

			if (size > limit) {
				if (bad_page < 0) {
					bad_page = p;
					why = "size";
					detail = size;
				}
				break;
			}
			if ((commit & MISSED_EVENTS) &&
			    !lost_marker(lost, &l, p, base, page_ts, commit, size, limit, data_off,
					 long_size)) {
				nomem = 2;
				break;
			}
			if (!walking || size == 0)
				continue;
			start = base + data_off;
			end = start + size;
			for (k = 0; k < x->nslots; k++)
				undo[k] = x->slots[k].n;
			r = walk_page(&l, start, end, page_ts, min_dlen, id_off, (int)id_size,
				      extract_record, x);
			if (r < 0) {
				nomem = 1;
				break;
			}
			if (r > 0) {
				bad_page = p;
				why = "chain";
				for (k = 0; k < x->nslots; k++)     /* drop this page's records */
					x->slots[k].n = undo[k];
				walking = 0;
			}
		}
		Py_END_ALLOW_THREADS
		free(undo);
		if (nomem == 1)
			PyErr_NoMemory();
		if (nomem)
			goto out;
		res = Py_BuildValue("(OLzL)", lost, (long long)bad_page, why, (long long)detail);
	}
out:
	Py_XDECREF(lost);
	PyBuffer_Release(&blk);
	return res;
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

PyDoc_STRVAR(extract_take_doc,
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
		remap(data, mapped, s->n * isz);   /* give back the room beyond the rows */
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

static PyMethodDef extract_methods[] = {
	{"walk", extract_walk, METH_VARARGS, extract_walk_doc},
	{"rows", extract_rows, METH_VARARGS, "rows(slot) -> the number of records appended"},
	{"take", extract_take, METH_VARARGS, extract_take_doc},
	{"values", extract_values, METH_VARARGS, extract_values_doc},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject ExtractType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "nfsreaddir._ringbuf.Extract",
	.tp_basicsize = sizeof(Extract),
	.tp_dealloc = extract_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Extract(map, plan): map, int16 per event id (-1: not wanted) its slot; plan,\n"
		  "per slot the columns (kind 0 int / 1 __data_loc / 2 __rel_loc string, offset,\n"
		  "size, signed, pid, output item size).  Not thread safe: one per thread.",
	.tp_methods = extract_methods,
	.tp_init = extract_init,
	.tp_new = PyType_GenericNew,
};

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
	PyObject *m;

	if (PyType_Ready(&MemType) < 0 || PyType_Ready(&ExtractType) < 0)
		return NULL;
	m = PyModule_Create(&module);
	if (!m)
		return NULL;
	Py_INCREF(&ExtractType);
	if (PyModule_AddObject(m, "Extract", (PyObject *)&ExtractType) < 0) {
		Py_DECREF(&ExtractType);
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
