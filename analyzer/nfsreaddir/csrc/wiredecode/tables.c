/*
 * The capture decoder's open-addressing tables (calls, streams) and the calls awaiting
 * replies, keyed by conversation and XID.
 */
#include "wiredecode.h"

/* The open-addressing tables below (calls, streams): entries whose first member is their
 * uint64_t key, 0 for a free slot, cap a power of two. Returns old's entries rehashed into a
 * table of cap slots (old freed), or NULL with old untouched when memory runs out. */
void *table_grow(void *old, size_t old_cap, size_t cap, size_t size)
{
	char *n = calloc(cap, size);
	uint64_t key;

	if (!n)
		return NULL;
	for (size_t i = 0; i < old_cap; i++) {
		const char *e = (const char *)old + i * size;

		memcpy(&key, e, sizeof key);
		if (!key)
			continue;
		size_t j = home(key, cap);
		for (;;) {
			uint64_t taken;

			memcpy(&taken, n + j * size, sizeof taken);
			if (!taken)
				break;
			j = (j + 1) & (cap - 1);
		}
		memcpy(n + j * size, e, size);
	}
	free(old);
	return n;
}

uint64_t conv_key(const char *client, unsigned cport, const char *server, unsigned sport, int udp,
		  uint32_t xid)
{
	uint64_t h = 1469598103934665603ULL;
	for (const char *s = client; *s; s++)
		h = mix(h, (uint8_t)*s);
	for (const char *s = server; *s; s++)
		h = mix(h, (uint8_t)*s);
	h = mix(h, cport);
	h = mix(h, sport);
	h = mix(h, (uint64_t)udp << 32 | xid);
	return h ? h : 1;
}

struct call *call_slot(struct run *r, uint64_t key, int add)
{
	if (add && (r->ncalls + 1) * 2 > r->calls_cap) {
		size_t cap = r->calls_cap ? r->calls_cap * 2 : 1024;
		struct call *n = table_grow(r->calls, r->calls_cap, cap, sizeof *n);
		if (!n)
			return NULL;
		r->calls = n, r->calls_cap = cap;
	}
	if (!r->calls_cap)
		return NULL;
	size_t j = home(key, r->calls_cap);
	while (r->calls[j].key && r->calls[j].key != key)
		j = (j + 1) & (r->calls_cap - 1);
	if (!r->calls[j].key && !add)
		return NULL;
	if (!r->calls[j].key) {
		r->calls[j].key = key;
		r->ncalls++;
	}
	return &r->calls[j];
}

/* Empties slot i of a table like table_grow's (backward-shift deletion keeps the probe chains
 * whole: no slot is left marked deleted). */
void table_drop(void *t, size_t cap, size_t size, size_t i)
{
	char *b = t;
	uint64_t key = 0;
	size_t j = i;

	memcpy(b + i * size, &key, sizeof key);
	for (;;) {
		j = (j + 1) & (cap - 1);
		memcpy(&key, b + j * size, sizeof key);
		if (!key)
			return;
		size_t h = home(key, cap);
		if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
			memcpy(b + i * size, b + j * size, size);
			key = 0;
			memcpy(b + j * size, &key, sizeof key);
			i = j;
		}
	}
}

void call_drop(struct run *r, struct call *c)
{
	table_drop(r->calls, r->calls_cap, sizeof *c, (size_t)(c - r->calls));
	r->ncalls--;
}
