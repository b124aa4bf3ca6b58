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
enum { R_ALLOCS, R_FREES, R_FREES_MATCHED, R_LIVE, R_UNTRACED_FREES, R_PEAK_LIVE,
       R_PEAK_LIVE_TS, R_PEAK_NET, R_ALLOC_BYTES, R_OBJECT_SIZE, N_ROWS };

struct piece {
	int alloc;
	long long rank;         /* its place in the columns' order: the last size of a cache wins */
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

/* 12 bytes, not 16: the table is most of what the tally keeps (the live objects: 600,000 at the
 * end of the 50 M-event bench trace, a table of 2^21 slots) */
struct __attribute__((packed)) slot {
	uint64_t ptr;           /* 0: empty (no object has it) */
	int32_t cache;
};

struct table {
	struct slot *s;
	int bits;
	size_t used;
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
