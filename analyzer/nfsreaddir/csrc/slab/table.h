/*
 * The operations on the table of live objects (laid out as slab.h says) that
 * csrc/slab/passes.c's visit makes: static inline, so that they stay inlined into the passes'
 * loops.  Every slot index is taken modulo its part's size (& mask_of()), and every part's
 * index is h's top PART_BITS, below NPARTS.
 */
#ifndef NFSREADDIR_SLAB_TABLE_H
#define NFSREADDIR_SLAB_TABLE_H

#include "slab.h"

/* h of a pointer: Fibonacci hashing, whose top bits (the part, then the home) depend on all of
 * the pointer's (object pointers differ in their middle bits) */
static inline uint64_t hash_of(uint64_t ptr)
{
	return ptr * 0x9E3779B97F4A7C15ull;
}

static inline struct part *part_of(const struct table *t, uint64_t h)
{
	return &t->parts[h >> REM_BITS]; /* (below NPARTS: h has 64 bits) */
}

/* the home of a slot's or a pointer's REM_BITS in part q: their top q->bits */
static inline size_t home_of(const struct part *q, uint64_t w)
{
	return (size_t)((w & REM_MASK) >> (REM_BITS - q->bits));
}

static inline size_t mask_of(const struct part *q)
{
	return ((size_t)1 << q->bits) - 1;
}

/* how far slot i's entry w is from its home */
static inline size_t dist_of(const struct part *q, uint64_t w, size_t i)
{
	return (i - home_of(q, w)) & mask_of(q);
}

static inline int32_t cache_of(uint64_t w)
{
	return (int32_t)(w >> REM_BITS) - 2;
}

static inline uint64_t slot_of(uint64_t rem, int32_t cache)
{
	return (uint64_t)(cache + 2) << REM_BITS | rem;
}

/* Whether part q holds rem; *at: its slot, or where it would go.  In Robin Hood order an entry
 * is never farther from its home than the ones after it in its run, so the search stops at the
 * first that is nearer than rem would be. */
static inline int lookup(const struct part *q, uint64_t rem, size_t *at)
{
	size_t mask = mask_of(q), i = home_of(q, rem), d = 0;

	for (;; i = (i + 1) & mask, d++) {
		uint64_t w = q->s[i];

		if (!w || dist_of(q, w, i) < d)
			break;
		if ((w & REM_MASK) == rem) {
			*at = i;
			return 1;
		}
	}
	*at = i;
	return 0;
}

/* Put w at slot i (where lookup() left it), the run from there moved one slot on. */
static inline void insert(struct part *q, size_t i, uint64_t w)
{
	size_t mask = mask_of(q);

	while (w) {
		uint64_t next = q->s[i];

		q->s[i] = w;
		w = next;
		i = (i + 1) & mask;
	}
	q->used++;
}

/* Empty slot i, the entries after it that are not at their home moved one slot back
 * (deletion leaves no tombstones to slow later probes). */
static inline void erase(struct part *q, size_t i)
{
	size_t mask = mask_of(q), j = (i + 1) & mask;

	while (q->s[j] && dist_of(q, q->s[j], j)) {
		q->s[i] = q->s[j];
		i = j;
		j = (j + 1) & mask;
	}
	q->s[i] = 0;
	q->used--;
}

/* Whether part q has no room for one more entry: no slots yet, or 3/4 of them used. */
static inline int full(const struct part *q)
{
	return !q->s || ((size_t)q->used + 1) * 4 > ((size_t)3 << q->bits);
}

/* Room in the full part q: its first slots, or twice as many; 0 when out of memory. */
static inline int room(struct table *t, struct part *q)
{
	struct part n;
	size_t i, at, cap;

	if (!q->s) {
		q->s = calloc((size_t)1 << PART_MIN_BITS, sizeof(*q->s));
		q->bits = PART_MIN_BITS;
		t->slots += (size_t)1 << PART_MIN_BITS;
		return q->s != NULL;
	}
	cap = (size_t)1 << q->bits;
	n = (struct part){ calloc(cap * 2, sizeof(*n.s)), 0, (uint8_t)(q->bits + 1) };
	if (!n.s)
		return 0;
	for (i = 0; i < cap; i++)
		if (q->s[i]) {
			lookup(&n, q->s[i] & REM_MASK, &at);
			insert(&n, at, q->s[i]);
		}
	free(q->s);
	*q = n;
	t->slots += cap;
	return 1;
}

#endif
