/*
 * Extract: the walk and the field decoding in one pass, straight into the columns.
 *
 * walk() (csrc/ringbuf/walk.c) lists the records of a block into fixed arrays from which the
 * fields are then gathered (ints(), strings()), part after part.  An Extract object instead
 * writes the time stamp and the requested fields of each wanted record into columns of its
 * own as it meets the record, and keeps them from block to block: no per-record offset
 * arrays, nothing held of a block once it is walked.  Columns are mappings of their own that
 * grow by mremap (no copy, never two copies in memory, whatever malloc's thresholds are set
 * to; the pages past the rows are not resident until rows fill them) and are handed to the
 * caller without a copy (take()).  Strings are numbered in a dictionary kept across blocks;
 * their codes are a byte a row while the dictionary fits, widened in place as it grows (slab
 * cache and function names are few: 3 bytes a row less than int32 codes, 143 MiB at 50 M
 * events).
 *
 * This file: the column fills (rows grown, strings numbered, codes widened, one record put)
 * and Extract.walk(), the walk that puts each wanted record, in one file so that they stay
 * inlined into its loop; the Extract object itself (its memory, set-up and accessors) is
 * csrc/ringbuf/extract.c.
 */
#include "ringbuf.h"

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

/* The column's dictionary made twice as large (256 slots at first), the strings placed
 * again; 0: no memory. */
static int str_room(struct col *c)
{
	int64_t ncap = c->tcap ? c->tcap * 2 : 256, k, m;
	struct sslot *t;

	t = malloc(ncap * sizeof(*t));
	if (!t)
		return 0;
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
	return 1;
}

/* The code of the string sp[0:len] in the column's dictionary (added if new); -1: no memory.
 * The room for a new string is made when one comes, not checked for each string met. */
static int32_t str_code(struct col *c, const uint8_t *sp, int32_t len)
{
	uint64_t h = hash_bytes(sp, len);
	int64_t j = 0;

	if (c->tab) {
		for (j = h & (c->tcap - 1); c->tab[j].at >= 0; j = (j + 1) & (c->tcap - 1))
			if (c->tab[j].hash == h && c->tab[j].len == len &&
			    same_bytes((const uint8_t *)c->arena + c->tab[j].at, sp, len))
				return c->tab[j].code;
	}
	if (!c->tab || (c->used + 1) * 2 > c->tcap) { /* kept at most half full */
		if (!str_room(c))
			return -1;
		for (j = h & (c->tcap - 1); c->tab[j].at >= 0; j = (j + 1) & (c->tcap - 1))
			;
	}
	/* (an arena there even for a first string that is empty: no offset of a null pointer) */
	if (!c->arena || c->alen + len > c->acap) {
		int64_t ncap = (c->acap + len) * 2 + 64;
		char *a = realloc(c->arena, ncap);

		if (!a)
			return -1;
		c->arena = a;
		c->acap = ncap;
	}
	if ((c->used & (c->used - 1)) == 0) { /* 0, 1, 2, 4, ...: double the value index */
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

/* Whether the len bytes at sp hold the column's last string (up to its NUL, if any): a
 * cache's events often come in runs of one name, whose code is then known without the NUL
 * search, the hash and the probe of str_code(). */
static inline int same_last(const struct col *c, const uint8_t *sp, int64_t len)
{
	int64_t n;

	if (c->last_code < 0)
		return 0;
	n = c->vlen[c->last_code];
	return same_bytes((const uint8_t *)c->arena + c->vat[c->last_code], sp, n) &&
	       (n == len || sp[n] == 0);
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
	/* (in locals: the columns' byte stores may alias them, so they would be read again) */
	int j, ncols = s->ncols;
	struct col *cols = s->cols;

	if (i == s->cap && !slot_grow(s))
		return 0;
	s->ts[i] = ts;
	for (j = 0; j < ncols; j++) {
		struct col *c = &cols[j];

		if (c->kind == 0) {
			uint64_t v = 0;
			int shift = 64 - 8 * (int)c->size;

			if (dl >= c->off + c->size)
				v = rd_in(l, dpos + c->off, (int)c->size);
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
			const uint8_t *sp;
			int32_t code;

			if (c->kind == 3) { /* char buf[]: the rest of the record */
				start = c->off < dl ? c->off : dl;
				len = dl - start;
			} else if (dl >= c->off + 4) {
				uint32_t w = (uint32_t)rd_in(l, dpos + c->off, 4);

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
			if (len == c->last_len && same_last(c, sp, len)) {
				code = c->last_code;
			} else {
				c->last_len = len;
				len = nul_at(sp, len);
				code = str_code(c, sp, (int32_t)len);
				c->last_code = code;
				if (code < 0 || (c->isz < 4 && code >= (1 << (8 * c->isz - 1)) &&
						 !widen(s, c, code)))
					return 0;
			}
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

/* Extract.walk()'s records: each one screened, the wanted ones (by the id's slot) into their
 * columns. */
static inline int extract_record(void *ctx, const struct layout *l, int64_t dpos, int64_t dl,
				 uint32_t id, uint64_t ts)
{
	Extract *x = ctx;
	int64_t k = id < x->maplen - 1 ? id : x->maplen - 1;
	int16_t sl = x->map[k];

	if (dl < x->minlen[k])
		x->minlen[k] = (int32_t)dl;
	if (x->nrec++ == 0)
		x->first_ts = ts;
	else if (ts < x->last_ts)
		x->back++;
	x->last_ts = ts;
	return sl < 0 || put(&x->slots[sl], l, dpos, dl, ts) ? 0 : -1;
}

const char extract_walk_doc[] = PyDoc_STR(
	"walk(block, page_size, commit_off, commit_size, data_off, big_endian, long_size, id_off,\n"
	"     id_size) -> (lost, bad_page, why, detail)\n"
	"\n"
	"Walk all pages of ``block`` as walk() does and append each wanted record (its id's entry\n"
	"of the map is its slot) to its slot's columns.  ``lost``, ``bad_page``, ``why``, ``detail``\n"
	"as walk() gives them; records from the damaged page on are not appended.");

/* flatten: the page walk, the record and its column fills inlined into the loop, as gcc did
 * while the module was one file (in this smaller file its unit-growth limit declines). */
__attribute__((flatten)) PyObject *extract_walk(PyObject *self, PyObject *args)
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
	if (!plausible_geometry(P, commit_off, commit_size, data_off, long_size, id_off, id_size))
		goto out;
	lost = PyList_New(0);
	if (!lost)
		goto out;
	{
		struct layout l = { blk.buf, blk.len, big };
		int64_t npages = blk.len / P, p;
		int64_t limit = P - data_off, min_dlen = id_off + id_size;
		int64_t bad_page = -1, detail = 0;
		const char *why = NULL;
		int walking = 1; /* until the first broken record chain */
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

			if (page_damage(commit, size, limit)) {
				if (bad_page < 0) {
					bad_page = p;
					why = page_damage(commit, size, limit);
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
			/* one walk per byte order, in which it is a constant (l escapes to
			 * lost_marker: its byte order is read at each use) */
			if (big)
				r = walk_page(&(const struct layout){ l.b, l.len, 1 }, start, end,
					      page_ts, min_dlen, id_off, (int)id_size,
					      extract_record, x);
			else
				r = walk_page(&(const struct layout){ l.b, l.len, 0 }, start, end,
					      page_ts, min_dlen, id_off, (int)id_size,
					      extract_record, x);
			if (r < 0) {
				nomem = 1;
				break;
			}
			if (r > 0) {
				bad_page = p;
				why = "chain";
				for (k = 0; k < x->nslots; k++) /* drop this page's records */
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
