/*
 * The two passes of nfsreaddir._slab's Tally.feed() over one window's pieces (the analysis is
 * described in analyzer/nfsreaddir/_slab.c): the first in column order, the second the runs
 * merged in time order (a sorted array of the runs, or a heap where there are many), each
 * event visited once against the table of live pointers, which is kept with the counters from
 * window to window.  The visit and the queue are static here, and the table's operations in
 * csrc/slab/table.h, so that they stay inlined into the passes' loops.
 */
#include "slab.h"
#include "table.h"
#include <string.h>

/* ZERO_SIZE_PTR is 16: pointers at or below it are no objects (failed allocs, kfree(NULL)) */
#define NO_OBJECT 16
/* how many events of a run ahead the table slot is prefetched */
#define AHEAD 16

/* key i of keys of size bytes (where size is a constant, one load of that width) */
static inline int64_t key_of(const void *key, int size, Py_ssize_t i)
{
	switch (size) {
	case 1: return ((const int8_t *)key)[i];
	case 2: return ((const int16_t *)key)[i];
	case 4: return ((const int32_t *)key)[i];
	default: return ((const int64_t *)key)[i];
	}
}

static inline int64_t key_at(const struct piece *p, Py_ssize_t i)
{
	return key_of(p->key, p->key_size, i);
}

/* the event's cache (-1: none); keys were checked against the table before the pass */
static inline int32_t cache_at(const struct piece *p, Py_ssize_t i)
{
	int64_t key;

	if (!p->key_size)
		return -1;
	key = key_at(p, i);
	return key < 0 ? -1 : p->table[key];
}

static inline void rise(struct tally *c, int32_t cache, int64_t ts)
{
	int64_t *live = &c->out[R_PEAK_LIVE * c->cap + cache];
	int64_t *net = &c->out[R_PEAK_NET * c->cap + cache];

	if (++c->live_now[cache] > *live) { /* first reached: strictly above */
		*live = c->live_now[cache];
		c->out[R_PEAK_LIVE_TS * c->cap + cache] = ts;
	}
	if (++c->net_now[cache] > *net)
		*net = c->net_now[cache];
}

/* One event in time order; 0 when out of memory. */
static int visit(struct tally *c, struct table *t, const struct piece *p, Py_ssize_t i, int64_t ts)
{
	uint64_t ptr = p->ptr[i], h, rem;
	int32_t cache = cache_at(p, i), was;
	struct part *q;
	size_t s;
	int found;

	if (ptr <= NO_OBJECT)
		return 1;
	h = hash_of(ptr);
	q = part_of(t, h);
	rem = h & REM_MASK;
	found = q->s && lookup(q, rem, &s);
	if (p->alloc) {
		if (found) {
			/* allocated again with no free between: a free the trace did not see,
			 * counted just before this allocation, for the first one's cache */
			was = cache_of(q->s[s]);
			c->unpaired++;
			if (was >= 0) {
				c->out[R_UNTRACED_FREES * c->cap + was]++;
				c->live_now[was]--;
				c->net_now[was]--;
			}
			q->s[s] = slot_of(rem, cache);
		} else {
			if (full(q)) {
				if (!room(t, q))
					return 0;
				lookup(q, rem, &s); /* (its place in the new slots) */
			}
			insert(q, s, slot_of(rem, cache));
			if (++t->used > t->most)
				t->most = t->used;
		}
		if (cache >= 0) {
			c->out[R_ALLOCS * c->cap + cache]++;
			rise(c, cache, ts);
		}
		return 1;
	}
	if (found) {
		/* the free of an object allocated in the trace counts for the allocation's cache */
		was = cache_of(q->s[s]);
		erase(q, s);
		t->used--;
		if (cache >= 0 && cache != was)
			c->mismatch++;
		if (was < 0) {
			c->unknown++;
			return 1;
		}
		c->out[R_FREES_MATCHED * c->cap + was]++;
		c->live_now[was]--;
		cache = was;
	} else if (cache < 0) {
		c->unknown++;
		return 1;
	}
	c->out[R_FREES * c->cap + cache]++;
	c->net_now[cache]--;
	return 1;
}

static inline int before(const struct run *runs, int a, int b)
{
	return runs[a].ts < runs[b].ts || (runs[a].ts == runs[b].ts && a < b);
}

static void sift_down(int *heap, int n, const struct run *runs, int i)
{
	for (;;) {
		int l = 2 * i + 1, m = i, x;

		if (l < n && before(runs, heap[l], heap[m]))
			m = l;
		if (l + 1 < n && before(runs, heap[l + 1], heap[m]))
			m = l + 1;
		if (m == i)
			return;
		x = heap[i];
		heap[i] = heap[m];
		heap[m] = x;
		i = m;
	}
}

/* Whether every key of piece p names a cache or none: below its table, table[key] -1 or a
 * cache below k (a key below 0: none).  The keys' range is found in a loop of its own (for
 * int8 keys, the table's first 128 entries stand for it) and the table checked over that
 * range; each key's entry is looked at only where the range is wider than the piece or holds
 * a bad entry (which no key may use). */
#define KEY_RANGE(T)                                  \
	do {                                          \
		const T *kp = p->key;                 \
		for (j = 0; j < p->n; j++) {          \
			lo = kp[j] < lo ? kp[j] : lo; \
			hi = kp[j] > hi ? kp[j] : hi; \
		}                                     \
	} while (0)

static int keys_ok(const struct piece *p, Py_ssize_t k)
{
	int64_t lo = INT64_MAX, hi = INT64_MIN, key;
	Py_ssize_t j;

	if (!p->key_size || !p->n)
		return 1;
	switch (p->key_size) {
	case 1:
		/* a name's codes: the table covers every int8 key (the keys are not read) */
		if (p->ntable >= 128) {
			lo = 0;
			hi = 127;
		} else {
			KEY_RANGE(int8_t);
		}
		break;
	case 2: KEY_RANGE(int16_t); break;
	case 4: KEY_RANGE(int32_t); break;
	default: KEY_RANGE(int64_t); break;
	}
	if (hi >= p->ntable)
		return 0;
	lo = lo < 0 ? 0 : lo;
	if (hi - lo < p->n) { /* (a range wider than the piece: its keys are fewer) */
		for (key = lo; key <= hi; key++)
			if (p->table[key] < -1 || p->table[key] >= k)
				break;
		if (key > hi)
			return 1;
	}
	for (j = 0; j < p->n; j++) {
		key = key_at(p, j);
		if (key >= 0 && (p->table[key] < -1 || p->table[key] >= k))
			return 0;
	}
	return 1;
}
#undef KEY_RANGE

/* An allocation piece's bytes per cache and the size of each of its caches (the last
 * allocation's in the columns' order: bytes_alloc is s->size, constant within a cache), the
 * key (the piece has one) read as ``key_size`` says (a constant where inlined: one loop per
 * key width). */
static inline void alloc_sizes(const struct piece *p, struct tally *c, int key_size)
{
	Py_ssize_t j, cap = c->cap;
	int64_t *bytes = &c->out[R_ALLOC_BYTES * cap], *size = &c->out[R_OBJECT_SIZE * cap];

	for (j = 0; j < p->n; j++) {
		int64_t key = key_of(p->key, key_size, j);
		int32_t cache;

		if (key < 0 || (cache = p->table[key]) < 0)
			continue;
		/* unsigned: a damaged trace's sizes may overflow, which must stay defined */
		bytes[cache] = (int64_t)((uint64_t)bytes[cache] + (uint64_t)p->bytes[j]);
		if (p->rank >= c->size_rank[cache]) {
			size[cache] = p->bytes[j];
			c->size_rank[cache] = p->rank;
		}
	}
}

/* First pass, in column order: the keys checked (before anything is counted), what does not
 * depend on time order (sizes, allocated bytes, failed allocations), the runs: the stretches
 * of a piece whose times do not go back, and from them the first and last time.  Each a loop
 * of its own over the piece. */
enum pass_result first_pass(struct piece *pieces, Py_ssize_t np_, struct tally *c,
			    struct run **runs_out, Py_ssize_t *nruns_out)
{
	struct run *runs = NULL;
	Py_ssize_t i, nruns = 0;

	*runs_out = NULL;
	for (i = 0; i < np_; i++)
		if (!keys_ok(&pieces[i], c->k))
			return PASS_BAD_KEY;
	for (i = 0; i < np_; i++) {
		struct piece *p = &pieces[i];
		const int64_t *ts = p->ts;
		Py_ssize_t j, failed = 0;

		if (p->alloc) {
			for (j = 0; j < p->n; j++)
				failed += p->ptr[j] <= NO_OBJECT;
			c->failed += failed;
			switch (p->key_size) {
			case 0: break;
			case 1: alloc_sizes(p, c, 1); break;
			case 2: alloc_sizes(p, c, 2); break;
			case 4: alloc_sizes(p, c, 4); break;
			default: alloc_sizes(p, c, 8); break;
			}
		}
		for (j = 0; j < p->n; j++) {
			if (j && ts[j] >= ts[j - 1])
				continue;
			if (!(nruns & (nruns - 1))) { /* at 0 and each power of two */
				struct run *r = realloc(runs, (nruns ? 2 * nruns : 1) * sizeof(*r));

				if (!r) {
					*runs_out = runs;
					return PASS_NO_MEMORY;
				}
				runs = r;
			}
			if (nruns && runs[nruns - 1].p == p)
				runs[nruns - 1].end = j; /* a run of this piece ends here */
			runs[nruns++] = (struct run){ p, j, p->n, ts[j] };
		}
	}
	/* the first and last time: a run's first and last (its times do not go back) */
	for (i = 0; i < nruns; i++) {
		if (runs[i].ts < c->t0)
			c->t0 = runs[i].ts;
		if (runs[i].p->ts[runs[i].end - 1] > c->t1)
			c->t1 = runs[i].p->ts[runs[i].end - 1];
	}
	*runs_out = runs;
	*nruns_out = nruns;
	return PASS_OK;
}

/* Up to this many runs the merge keeps them in an array sorted by (time, run), beyond in a
 * heap: a window's pieces are a few runs (one per event kind and CPU: 5 to 9 in the bench's
 * trace), and the run that was on top finds its new place a step or two down the array, with
 * one compare a step where the heap makes two a level. */
#define FEW_RUNS 16

/* The sorted q[0, n) again after q[0]'s run moved on (to a later place: it is after q[1]). */
static inline void resort_top(int *q, int n, const struct run *runs)
{
	int x = q[0], i = 1;

	while (i < n && before(runs, q[i], x)) {
		q[i - 1] = q[i];
		i++;
	}
	q[i - 1] = x;
}

/* Second pass: the runs merged by (time, run), each event visited once.  The run on top of
 * the queue (a sorted array or a heap) stays there while its next event comes before the best
 * of the others: the queue is put in order again only when another run's turn comes, not at
 * every event. */
enum pass_result merge_pass(struct tally *c, struct run *runs, Py_ssize_t nruns)
{
	struct table *t = &c->t;
	int *q;
	int nq = (int)nruns, sorted = nruns <= FEW_RUNS;
	Py_ssize_t i;

	if (!nruns)
		return PASS_OK;
	q = malloc(nruns * sizeof(*q));
	if (!q)
		return PASS_NO_MEMORY;
	for (i = 0; i < nruns; i++)
		q[i] = (int)i;
	if (sorted) {
		/* (the runs come in (piece, place) order: sorted by insertion) */
		for (i = nq - 2; i >= 0; i--)
			resort_top(q + i, nq - (int)i, runs);
	} else {
		for (i = nq / 2 - 1; i >= 0; i--)
			sift_down(q, nq, runs, (int)i);
	}
	while (nq) {
		int top = q[0], next = -1;
		struct run *r = &runs[top];
		const struct piece *p = r->p;
		Py_ssize_t at = r->at, end = r->end;
		int64_t ts = r->ts, bound = INT64_MAX;

		if (nq > 1)
			next = q[1];
		if (!sorted && nq > 2 && before(runs, q[2], next))
			next = q[2];
		if (next >= 0)
			bound = runs[next].ts;
		for (;;) {
			/* pointers are scattered over the table: ask for the slot of this run's
			 * event AHEAD on, so that memory is not waited for when it comes */
			if (at + AHEAD < end) {
				uint64_t h = hash_of(p->ptr[at + AHEAD]);
				const struct part *q = part_of(t, h);

				if (q->s)
					__builtin_prefetch(&q->s[home_of(q, h)]);
			}
			if (!visit(c, t, p, at, ts)) {
				free(q);
				return PASS_NO_MEMORY;
			}
			if (++at == end)
				break;
			ts = p->ts[at];
			/* (at equal times the lower run first: the run below goes on only if next
			 * is a later run) */
			if (ts > bound || (ts == bound && next < top))
				break;
		}
		r->at = at;
		if (at < end) {
			r->ts = ts;
			if (sorted)
				resort_top(q, nq, runs);
			else
				sift_down(q, nq, runs, 0);
		} else if (sorted) {
			memmove(q, q + 1, --nq * sizeof(*q));
		} else {
			q[0] = q[--nq];
			sift_down(q, nq, runs, 0);
		}
	}
	free(q);
	return PASS_OK;
}
