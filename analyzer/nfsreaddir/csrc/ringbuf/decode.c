/*
 * The field decoders of nfsreaddir._ringbuf for the records walk() lists: ints() for integer
 * fields, strings() for __data_loc and __rel_loc strings, numbered in a dictionary of the
 * block's distinct strings.
 */
#include "ringbuf.h"

const char ints_doc[] = PyDoc_STR(
	"ints(block, pos, dlen, offset, size, signed, big_endian, out)\n"
	"\n"
	"The integer field at ``offset`` (``size`` bytes) of the records whose data start at\n"
	"``pos`` (int32) and are ``dlen`` (int32) long, into ``out`` (8-byte or 4-byte items):\n"
	"sign-extended if ``signed``, 0 where the record is too short to hold it.");

PyObject *ints(PyObject *Py_UNUSED(self), PyObject *args)
{
	Py_buffer blk, vpos = { 0 }, vdlen = { 0 }, vout = { 0 };
	PyObject *pos_obj, *dlen_obj, *out_obj, *res = NULL;
	Py_ssize_t off, size, i, n;
	int sgn, big;

	if (!PyArg_ParseTuple(args, "y*OOnnppO", &blk, &pos_obj, &dlen_obj, &off, &size, &sgn, &big,
			      &out_obj))
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
	if (vpos.obj)
		PyBuffer_Release(&vpos);
	if (vdlen.obj)
		PyBuffer_Release(&vdlen);
	if (vout.obj)
		PyBuffer_Release(&vout);
	return res;
}

struct slot {
	uint64_t hash;
	int64_t at; /* offset of the string in the block; -1: empty slot */
	int32_t len;
	int32_t code;
};

const char strings_doc[] = PyDoc_STR(
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
static inline int64_t record_string(const struct layout *l, int64_t pos, int64_t dlen, int64_t off,
				    int rel, int64_t *at)
{
	int64_t start = 0, len = 0;

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
	return nul_at(l->b + *at, len);
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
		for (m = old.tab[k].hash & (d->cap - 1); d->tab[m].at >= 0;
		     m = (m + 1) & (d->cap - 1))
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
		    same_bytes(l->b + d->tab[j].at, sp, len))
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

PyObject *strings(PyObject *Py_UNUSED(self), PyObject *args)
{
	Py_buffer blk, vpos = { 0 }, vdlen = { 0 }, vcodes = { 0 };
	PyObject *pos_obj, *dlen_obj, *codes_obj, *values = NULL, *res = NULL;
	Py_ssize_t off, i, n;
	int rel, big;
	struct strdict d = { 0 };

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
	if (vpos.obj)
		PyBuffer_Release(&vpos);
	if (vdlen.obj)
		PyBuffer_Release(&vdlen);
	if (vcodes.obj)
		PyBuffer_Release(&vcodes);
	return res;
}
