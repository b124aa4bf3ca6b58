/*
 * walk() of nfsreaddir._ringbuf: the pages of a block walked into fixed arrays of the wanted
 * records (data offset, time stamp, data length, event id), the lost-events markers and where
 * the data is damaged; the page's records themselves are walked by walk_page() (ringbuf.h).
 */
#include "ringbuf.h"

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
int lost_marker(PyObject *lost, const struct layout *l, int64_t p, int64_t base, uint64_t page_ts,
		uint64_t commit, int64_t size, int64_t limit, int64_t data_off, int64_t long_size)
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

/* walk()'s records: the wanted ones listed into its arrays (room checked per page). */
struct listing {
	int32_t *pos;
	uint64_t *ts;
	int32_t *dlen;
	uint32_t *ids;
	const uint8_t *lut; /* NULL: every event */
	int64_t lut_last;
	int64_t n;
};

static inline int list_record(void *ctx, const struct layout *Py_UNUSED(l), int64_t dpos,
			      int64_t dl, uint32_t id, uint64_t ts)
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

const char walk_doc[] = PyDoc_STR(
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
	"the page, ``detail`` that size), 'empty' (a commit word of 0: a zeroed page) or 'chain'\n"
	"(a record runs past the page's data).");

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
static int64_t list_pages(const struct layout *l, const struct page_geometry *g, int64_t first_page,
			  int64_t cap, struct listing *lc, PyObject *lost, struct walk_end *end_at)
{
	int64_t P = g->P, npages = l->len / P, p, n = 0;
	int64_t limit = P - g->data_off, min_dlen = g->id_off + g->id_size;
	int walking = 1; /* until the first broken record chain */

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
			break; /* the caller goes on from this page */
		if (page_damage(commit, size, limit)) {
			if (end_at->bad_page < 0) { /* else a broken chain came first */
				end_at->bad_page = p;
				end_at->why = page_damage(commit, size, limit);
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
			walking = 0; /* this page's records are dropped: n stays */
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
	static const Py_ssize_t sizes[4] = { 4, 8, 4, 4 };
	static const char *const names[4] = { "pos", "ts", "dlen", "ids" };
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

PyObject *walk(PyObject *Py_UNUSED(self), PyObject *args)
{
	Py_buffer blk, outv[4], vlut = { 0 };
	PyObject *lut_obj, *outs[4];
	Py_ssize_t first_page, P, commit_off, commit_size, data_off, long_size, id_off, id_size;
	int big, i;
	PyObject *lost = NULL, *res = NULL;
	struct listing lc = { 0 };
	struct walk_end end_at;
	int64_t cap, n;

	if (!PyArg_ParseTuple(args, "y*nnnnnpnnnOOOOO", &blk, &first_page, &P, &commit_off,
			      &commit_size, &data_off, &big, &long_size, &id_off, &id_size,
			      &lut_obj, &outs[0], &outs[1], &outs[2], &outs[3]))
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
	if (!plausible_geometry(P, commit_off, commit_size, data_off, long_size, id_off, id_size))
		goto out;
	if (first_page < 0) {
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
		struct page_geometry g = { P,	      commit_off, commit_size, data_off,
					   long_size, id_off,	  id_size };

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
	if (vlut.obj)
		PyBuffer_Release(&vlut);
	return res;
}
