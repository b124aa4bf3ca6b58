/*
 * What the parts of nfsreaddir._slab share (the module is described in
 * analyzer/nfsreaddir/_slab.c, its entry): the rows of the output, the pieces of columns, their
 * runs, the table of live pointers and the counters, and the two passes that
 * csrc/slab/passes.c makes over them.
 */
#ifndef NFSREADDIR_SLAB_H
#define NFSREADDIR_SLAB_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

/* The rows of ``out``, ncaches values each, in this order (the module's ROWS names them). */
enum {
	R_ALLOCS,
	R_FREES,
	R_FREES_MATCHED,
	R_LIVE,
	R_UNTRACED_FREES,
	R_PEAK_LIVE,
	R_PEAK_LIVE_TS,
	R_PEAK_NET,
	R_ALLOC_BYTES,
	R_OBJECT_SIZE,
	N_ROWS
};

struct piece {
	int alloc;
	long long rank; /* its place in the columns' order: the last size of a cache wins */
	Py_ssize_t n, ntable;
	int key_size; /* 0: no key, every event's cache is -1 */
	const int64_t *ts, *bytes;
	const uint64_t *ptr;
	const void *key;
	const int32_t *table;
	Py_buffer b[5]; /* ts, ptr, bytes, key, table */
};

struct run {
	const struct piece *p;
	Py_ssize_t at, end;
	int64_t ts; /* ts[at] */
};

/* The table of live objects: 8 bytes an object's slot.  A pointer is known by h = ptr * an odd
 * constant (a bijection: no two pointers share an h); the top PART_BITS of h pick one of
 * NPARTS parts, so a slot keeps only h's REM_BITS below them, with the cache above (its code
 * + 2: a slot of 0 is empty, a cache of -1 is none).  Each part is an open-addressing table
 * of its own (linear probing in Robin Hood order, deletion by backward shift) that doubles
 * when it is 3/4 full: a part grows while the others stay, so the table never holds two
 * copies of itself (one of 2^22 12-byte slots and the one it grew to were 72 of the 95-99
 * MiB that `analyze` of the 10 M-event bench trace took, for 1.59 M live objects).  At 3/4
 * full at most, half that after a doubling, a live object costs 10.7 to 21.3 bytes (fuller
 * parts would cost less, but an insertion moves the run after it: at 7/8, 32 slots on
 * average where the part is fullest). */
#define PART_BITS 12
#define NPARTS (1 << PART_BITS)
#define REM_BITS (64 - PART_BITS)
#define REM_MASK ((UINT64_C(1) << REM_BITS) - 1)
/* the caches a slot can name (codes 0 to MAX_CACHES - 1, and -1): the cache field is what the
 * slot has above REM_BITS, and 0 there means empty */
#define MAX_CACHES ((1 << PART_BITS) - 2)
/* a part's first size (slots, as a power of two) */
#define PART_MIN_BITS 3

struct part {
	uint64_t *s; /* NULL: no object has come to this part yet */
	uint32_t used;
	uint8_t bits; /* 2^bits slots */
};

struct table {
	struct part *parts; /* NPARTS of them */
	size_t used, most;  /* live objects now, and the most there were at once */
	size_t slots;	    /* of all the parts */
};

/* What the tally keeps from window to window: per cache (``k`` of them, room for ``cap``)
 * the rows of the output (out[row * cap + cache]), the running counts and the rank of the
 * piece that gave the object size; the totals; the live pointers' table. */
struct tally {
	int64_t *out, *live_now, *net_now;
	long long *size_rank;
	Py_ssize_t k, cap;
	long long unknown, unpaired, mismatch, failed;
	int64_t t0, t1;
	struct table t;
};

enum pass_result { PASS_OK, PASS_BAD_KEY, PASS_NO_MEMORY };

enum pass_result first_pass(struct piece *pieces, Py_ssize_t np_, struct tally *c,
			    struct run **runs_out, Py_ssize_t *nruns_out);
enum pass_result merge_pass(struct tally *c, struct run *runs, Py_ssize_t nruns);

#endif
