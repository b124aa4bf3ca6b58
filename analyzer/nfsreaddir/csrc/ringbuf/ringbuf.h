/*
 * What the parts of nfsreaddir._ringbuf share (the module is described in
 * analyzer/nfsreaddir/_ringbuf.c, its entry): the kernel's page format, the block's reader, the
 * walk of one page's records and the string hash, as static inline functions so that every
 * walk keeps them inlined with its own emit (as when the module was one file); the Extract
 * object's columns; and the functions that cross files.
 *
 * The page format is nfsreaddir/trace/page.py's: tests/test_tracedat.py checks the #defines
 * below against it.
 */
#ifndef NFSREADDIR_RINGBUF_H
#define NFSREADDIR_RINGBUF_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* (Python.h defines _GNU_SOURCE: mremap) */
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
	int big; /* file is big-endian */
};

/* Whether the page geometry a walk is given (trace/page.py's) is one a ring buffer can have:
 * 0 with ValueError set where not, before any page is read by it.  (A negative event id offset
 * would read before a record: walk_page() reads the id unchecked, found by the fuzzer.) */
static inline int plausible_geometry(Py_ssize_t P, Py_ssize_t commit_off, Py_ssize_t commit_size,
				     Py_ssize_t data_off, Py_ssize_t long_size, Py_ssize_t id_off,
				     Py_ssize_t id_size)
{
	if (P < 64 || (commit_size != 4 && commit_size != 8) || id_size < 1 || id_size > 8 ||
	    long_size < 1 || long_size > 8 || data_off >= P || commit_off < 0 || id_off < 0) {
		PyErr_SetString(PyExc_ValueError, "walk: implausible layout");
		return 0;
	}
	return 1;
}

/* Why a page's header is damage, NULL where it is not: "size", a commit size past the page's
 * room; "empty", a commit word of 0 (no data, no flag), which the ring buffer never hands out
 * (a reader is given pages with data) but a zeroed page of a file reads as. */
static inline const char *page_damage(uint64_t commit, int64_t size, int64_t limit)
{
	if (size > limit)
		return "size";
	return commit ? NULL : "empty";
}

/* rd() of bytes known to lie inside the block: a field of a record that holds it (walk_page()
 * emits only records whose data end inside the block), read without rd()'s bounds check. */
static inline uint64_t rd_in(const struct layout *l, int64_t at, int size)
{
	uint64_t v = 0;
	int i;

	if (!l->big) {
		switch (size) {
		case 1: return l->b[at];
		case 2: {
			uint16_t x;
			memcpy(&x, l->b + at, 2);
			return x;
		}
		case 4: {
			uint32_t x;
			memcpy(&x, l->b + at, 4);
			return x;
		}
		case 8: {
			uint64_t x;
			memcpy(&x, l->b + at, 8);
			return x;
		}
		}
		for (i = size - 1; i >= 0; i--)
			v = (v << 8) | l->b[at + i];
		return v;
	}
	for (i = 0; i < size; i++)
		v = (v << 8) | l->b[at + i];
	return v;
}

/* The value of ``size`` bytes at ``at`` in the block's byte order; 0 past its end. */
static inline uint64_t rd(const struct layout *l, int64_t at, int size)
{
	if (at < 0 || at + size > l->len)
		return 0;
	return rd_in(l, at, size);
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

/* The records of one page's data, [start, end) of the block: ``emit(ctx, data offset, data
 * length, event id, time stamp)`` for each event record in order, the time being the page's
 * time stamp plus the deltas before it (a time stamp record sets it).  Returns 0 at the end
 * of the page's data, 1 where the chain is broken (a record runs past the data or is too short
 * to hold an event id: the caller drops the page's records), -1 when emit failed.  Inlined
 * into each walk below with its own emit. */
typedef int (*emit_fn)(void *ctx, const struct layout *l, int64_t dpos, int64_t dl, uint32_t id,
		       uint64_t ts);

static inline int walk_page(const struct layout *l, int64_t start, int64_t end, uint64_t page_ts,
			    int64_t min_dlen, int64_t id_off, int id_size, emit_fn emit, void *ctx)
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
		/* (a record too short for its id broke the chain above) */
		if (dpos >= 0 &&
		    emit(ctx, l, dpos, dl, (uint32_t)rd_in(l, dpos + id_off, id_size), ts) < 0)
			return -1;
		if (nx >= end)
			return 0;
		cur = nx;
	}
}

/* A string's hash for the dictionaries: eight bytes a step, one multiply each (a string
 * field is hashed once per record, and a multiply per byte was a seventh of the extract's
 * time on kmem traces), the high half folded into the low bits that pick the slot.  Whole
 * words are loaded as such (the last one overlapping the one before), a short string as two
 * overlapping halves, or (below 4 bytes) its first, middle and last byte: assembling a word
 * in memory from a shorter copy stalls the load, and a loop a byte a step was a twentieth of
 * the extract. */
#define MIX(h, w) ((h) = ((h) ^ (w)) * 0xff51afd7ed558ccdull, (h) ^= (h) >> 32)

static inline uint64_t hash_bytes(const uint8_t *p, int32_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n, w = 0;
	int32_t i;

	if (n < 8) {
		if (n >= 4) {
			uint32_t a, b;

			memcpy(&a, p, 4);
			memcpy(&b, p + n - 4, 4);
			w = (uint64_t)a | (uint64_t)b << 32;
		} else if (n > 0) {
			w = (uint64_t)p[0] | (uint64_t)p[n / 2] << 8 | (uint64_t)p[n - 1] << 16;
		}
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

/* The length of sp[0:len] up to its first NUL, as memchr finds it, and whether two strings of
 * n bytes are the same, as memcmp says: inline, eight bytes a step (the strings are short
 * cache and function names, one per record, where the calls of libc's were a twentieth of
 * the extract's time on kmem traces). */
static inline int64_t nul_at(const uint8_t *sp, int64_t len)
{
	int64_t i = 0;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ZERO_BYTES(w) (((w)-0x0101010101010101ull) & ~(w)&0x8080808080808080ull)
	uint64_t w, z;

	for (; i + 8 <= len; i += 8) {
		memcpy(&w, sp + i, 8);
		/* the lowest byte flagged is a NUL (the borrows only run upwards) */
		z = ZERO_BYTES(w);
		if (z)
			return i + (__builtin_ctzll(z) >> 3);
	}
	if (i < len && len >= 8) {
		/* the last word, overlapping bytes already known not to be NUL (the string's own
		 * NUL is most often its last byte, past the last whole word) */
		memcpy(&w, sp + len - 8, 8);
		z = ZERO_BYTES(w);
		return z ? len - 8 + (__builtin_ctzll(z) >> 3) : len;
	}
#undef ZERO_BYTES
#endif
	for (; i < len; i++)
		if (!sp[i])
			return i;
	return len;
}

static inline int same_bytes(const uint8_t *a, const uint8_t *b, int64_t n)
{
	uint64_t x, y;
	int64_t i;

	if (n < 8) {
		for (i = 0; i < n; i++)
			if (a[i] != b[i])
				return 0;
		return 1;
	}
	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		if (x != y)
			return 0;
	}
	if (i < n) {
		memcpy(&x, a + n - 8, 8);
		memcpy(&y, b + n - 8, 8);
		return x == y;
	}
	return 1;
}

struct col {
	int kind; /* 0 int, 1 __data_loc, 2 __rel_loc, 3 tail (char buf[]) string */
	int64_t off, size;
	int sgn, isz;  /* sign-extend; bytes per output item (8, or 4 for the pid; codes:
				 * 1, 2 or 4, the narrowest that holds the dictionary so far) */
	int pid;       /* the pid column: -1 where the record is too short */
	uint8_t *data; /* n * isz bytes, a mapping of ``mapped`` bytes */
	size_t mapped;
	/* the strings' dictionary: open addressing over the distinct values, kept in arena */
	struct sslot {
		uint64_t hash;
		int64_t at;
		int32_t len, code;
	} * tab;
	int64_t tcap, used;
	char *arena;
	int64_t alen, acap;
	int64_t *vat; /* per code: offset in arena; length in vlen */
	int32_t *vlen;
	/* the last string put: its code (-1: none yet) and the length it was given in (its
	 * NUL, if any, within) */
	int32_t last_code;
	int64_t last_len;
};

struct eslot {
	int64_t n, cap; /* rows, and rows every column has room for */
	uint64_t *ts;
	size_t ts_mapped;
	int ncols;
	struct col *cols;
};

typedef struct {
	PyObject_HEAD
	int nslots;
	struct eslot *slots;
	int16_t *map; /* event id -> slot, -1: not wanted; ids >= maplen - 1 use the last */
	int64_t maplen;
	/* The screen of every record walked, wanted or not (screen()): the shortest record of
	 * each id (as the map, the last entry for the larger ids), the records, those whose time
	 * stamp is below the one before, and the first and last time stamps. */
	int32_t *minlen;
	int64_t nrec, back;
	uint64_t first_ts, last_ts;
} Extract;

/* csrc/ringbuf/walk.c */
int lost_marker(PyObject *lost, const struct layout *l, int64_t p, int64_t base, uint64_t page_ts,
		uint64_t commit, int64_t size, int64_t limit, int64_t data_off, int64_t long_size);
PyObject *walk(PyObject *self, PyObject *args);
extern const char walk_doc[];

/* csrc/ringbuf/decode.c */
PyObject *ints(PyObject *self, PyObject *args);
extern const char ints_doc[];
PyObject *strings(PyObject *self, PyObject *args);
extern const char strings_doc[];

/* csrc/ringbuf/columns.c */
PyObject *extract_walk(PyObject *self, PyObject *args);
extern const char extract_walk_doc[];

/* csrc/ringbuf/extract.c */
int remap(void **p, size_t *mapped, size_t n);
extern PyTypeObject MemType, ExtractType;

#endif
