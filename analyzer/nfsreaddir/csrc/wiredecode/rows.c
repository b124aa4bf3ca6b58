/*
 * The rows of the capture decoder: each NFS message it reads becomes one row of tshark's -T
 * fields text, its columns filled here and handed to the Python callback in the caller's order.
 */
#include "wiredecode.h"

const char *const col_names[N_COLS] = {
	"frame",    "ts",	 "cap_len", "len",	 "src",	      "dst",	   "src6",
	"dst6",	    "sport",	 "dport",   "usport",	 "udport",    "xid",	   "msgtyp",
	"prog",	    "vers",	 "proc",    "replystat", "accept",    "mainop",	   "minor",
	"fh",	    "cookie4",	 "verf4",   "dircount4", "maxcount4", "eof4",	   "status4",
	"change4",  "fileid4",	 "cookie3", "verf3",	 "count3",    "dircount3", "maxcount3",
	"ecookie3", "epcookie3", "eof3",    "status3",	 "mtime_s",   "mtime_ns",  "ctime_s",
	"ctime_ns", "fileid3",
};

int text_add(struct text *t, const char *s, size_t n)
{
	if (t->n + n + 2 > t->cap) {
		size_t cap = (t->cap ? t->cap * 2 : 64) + n;
		char *p = realloc(t->p, cap);
		if (!p)
			return -1;
		t->p = p, t->cap = cap;
	}
	if (t->n)
		t->p[t->n++] = ',';
	memcpy(t->p + t->n, s, n);
	t->n += n;
	return 0;
}

/* A value as 8 native bytes, not text: a reply's entry cookies, millions in a big capture,
 * go to Python as one bytes object an array("Q") takes whole, never formatted and parsed. */
static int raw_add(struct text *t, uint64_t v)
{
	if (t->n + sizeof v > t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 512;
		char *p = realloc(t->p, cap);
		if (!p)
			return -1;
		t->p = p, t->cap = cap;
	}
	memcpy(t->p + t->n, &v, sizeof v);
	t->n += sizeof v;
	return 0;
}

static int text_fmt(struct text *t, const char *fmt, unsigned long long v)
{
	char b[32];
	int n = snprintf(b, sizeof b, fmt, v);
	return text_add(t, b, (size_t)n);
}

/* A new row: every column empty. */
void row_clear(struct run *r)
{
	for (int i = 0; i < N_COLS; i++)
		r->t[i].n = 0, r->raw[i] = 0;
}

int put_raw(struct run *r, int c, uint64_t v)
{
	r->raw[c] = 1;
	return raw_add(&r->t[c], v);
}

int put(struct run *r, int c, const char *fmt, unsigned long long v)
{
	return text_fmt(&r->t[c], fmt, v);
}

/* The frame's columns of the row (its number, time, lengths, addresses and ports). */
int emit(struct run *r)
{
	char b[32];
	int n;
	n = snprintf(b, sizeof b, "%llu", r->frame);
	text_add(&r->t[C_FRAME], b, (size_t)n);
	n = snprintf(b, sizeof b, "%llu.%09llu", r->ts_ns / 1000000000ULL,
		     r->ts_ns % 1000000000ULL);
	text_add(&r->t[C_TS], b, (size_t)n);
	put(r, C_CAPLEN, "%llu", r->caplen);
	put(r, C_LEN, "%llu", r->len);
	text_add(&r->t[r->v6 ? C_SRC6 : C_SRC], r->src, strlen(r->src));
	text_add(&r->t[r->v6 ? C_DST6 : C_DST], r->dst, strlen(r->dst));
	put(r, r->udp ? C_USPORT : C_SPORT, "%llu", r->sport);
	put(r, r->udp ? C_UDPORT : C_DPORT, "%llu", r->dport);
	return 0;
}

/* The row of one message to the callback, in the caller's column order. */
int send_row(struct run *r)
{
	PyObject *row = PyList_New(r->ncols);
	if (!row)
		return -1;
	for (Py_ssize_t i = 0; i < r->ncols; i++) {
		Py_INCREF(Py_None);
		PyList_SET_ITEM(row, i, Py_None);
	}
	for (int c = 0; c < N_COLS; c++) {
		Py_ssize_t at = r->where[c];
		if (at < 0)
			continue;
		const char *p = r->t[c].p ? r->t[c].p : "";
		PyObject *s = r->raw[c]
				      ? PyBytes_FromStringAndSize(p, (Py_ssize_t)r->t[c].n)
				      : PyUnicode_DecodeASCII(p, (Py_ssize_t)r->t[c].n, "replace");
		if (!s) {
			Py_DECREF(row);
			return -1;
		}
		PyList_SetItem(row, at, s);
	}
	for (Py_ssize_t i = 0; i < r->ncols; i++) {
		if (PyList_GET_ITEM(row, i) == Py_None) {
			PyObject *s = PyUnicode_FromString("");
			if (!s) {
				Py_DECREF(row);
				return -1;
			}
			PyList_SetItem(row, i, s);
		}
	}
	PyObject *res = PyObject_CallOneArg(r->callback, row);
	Py_DECREF(row);
	if (!res)
		return -1;
	Py_DECREF(res);
	return 0;
}

void set_unknown(struct run *r, const char *why)
{
	if (!r->unknown)
		r->unknown = why;
}
