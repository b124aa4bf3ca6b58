/*
 * The holes of the TCP streams (tcp.c): each gap a stream's bytes show, reported once no
 * segment can fill it (run.holes, placed on its client and in time as tcpholes.walk places
 * them), and the segments that come late into one, read in their place.
 */
#include "wiredecode.h"

/* Room for one more of an array's n items of size bytes each (*p, *cap: the array, first
 * items at first, then grown by doubling); -1 with a Python error set where memory runs out. */
static int room(void **p, size_t *cap, size_t n, size_t size, size_t first)
{
	if (n < *cap)
		return 0;
	size_t want = *cap ? *cap * 2 : first;
	void *q = realloc(*p, want * size);
	if (!q) {
		PyErr_NoMemory();
		return -1;
	}
	*p = q, *cap = want;
	return 0;
}

/* One hole into the run's report. */
int hole_add(struct run *r, const char *client, unsigned long long from, unsigned long long to,
	     unsigned long long bytes, int cut, int to_server)
{
	if (room((void **)&r->holes, &r->holes_cap, r->nholes, sizeof *r->holes, 64))
		return -1;
	struct hole *h = &r->holes[r->nholes++];
	snprintf(h->client, sizeof h->client, "%s", client);
	h->from = from, h->to = to, h->bytes = bytes, h->cut = cut, h->to_server = to_server;
	return 0;
}

/* The client of the frame being read, "addr:port" ([addr]:port for IPv6). */
void frame_client(const struct run *r, int to_server, char *out, size_t size)
{
	const char *a = to_server ? r->src : r->dst;
	unsigned port = to_server ? r->sport : r->dport;
	snprintf(out, size, r->v6 ? "[%s]:%u" : "%s:%u", a, port);
}

/* What an NFSv4 COMPOUND reply answers: its first operation that is neither SEQUENCE nor a
 * PUTFH (the main one of every compound the Linux client sends), or -1 where the reply does
 * not say (a status that stopped the compound first, bytes that are no such reply). */
static int compound_answers(struct xdr *x)
{
	uint32_t n;
	u32(x);	       /* the compound's status */
	opaque(x, &n); /* tag */
	uint32_t ops = u32(x);
	if (x->bad || n > 64 || ops > 128)
		return -1;
	for (uint32_t i = 0; i < ops; i++) {
		uint32_t op = u32(x), status = u32(x);
		if (x->bad || op < 3 || op > 75)
			return -1;
		if (op != 53 && op != 22 && op != 23 && op != 24)
			return (int)op;
		if (status != 0)
			return -1;
		if (op == 53)
			skip(x, 36); /* SEQUENCE's result: session, sequence, slots, flags */
	}
	return -1;
}

/* A reply of the server whose call is not in the capture (x after its XID and message type),
 * into the run's report. Only an all-NFSv4 capture's reply is read for what it answers: an
 * NFSv3 reply does not name its procedure. */
int orphan_add(struct run *r, struct xdr *x, uint32_t xid)
{
	if (room((void **)&r->orphans, &r->orphans_cap, r->norphans, sizeof *r->orphans, 64))
		return -1;
	struct orphan *o = &r->orphans[r->norphans++];
	frame_client(r, 0, o->client, sizeof o->client);
	o->xid = xid;
	o->op = -1;
	o->ts = r->ts_ns;
	uint32_t len, replystat = u32(x);
	if (replystat != 0 || (r->versions & 0xff) || !(r->versions >> 8))
		return 0;
	u32(x); /* verifier */
	opaque(x, &len);
	if (u32(x) == 0 && !x->bad)
		o->op = compound_answers(x);
	return 0;
}

/* A stream's gaps not filled, into the report (a new connection, or the capture's end). */
int gaps_flush(struct run *r, struct stream *s)
{
	for (size_t i = 0; i < s->ngaps; i++) {
		struct gap *g = &s->gaps[i];
		if (hole_add(r, s->client, g->since, g->until, g->to - g->from, 0, s->to_server))
			return -1;
	}
	s->ngaps = 0;
	return 0;
}

int streams_end(struct run *r)
{
	for (size_t i = 0; i < r->streams_cap; i++)
		if (r->streams[i].key && gaps_flush(r, &r->streams[i]))
			return -1;
	return 0;
}

int gap_add(struct stream *s, struct gap g)
{
	if (room((void **)&s->gaps, &s->capgaps, s->ngaps, sizeof *s->gaps, 4))
		return -1;
	s->gaps[s->ngaps++] = g;
	return 0;
}

/* The whole records at the start of a segment that came late into a gap where the stream
 * stood between two records; a record it does not end went on in bytes read as lost. 1 when
 * the segment held whole records only. */
static int late_records(struct run *r, const uint8_t *p, size_t n, int to_server)
{
	while (n >= 4) {
		uint32_t m = be32(p), len = m & 0x7fffffff;
		if (!(m >> 31) || len > n - 4)
			return 0;
		if (rpc_message(r, p + 4, len, to_server))
			return -1;
		p += 4 + len, n -= 4 + len;
	}
	return n == 0;
}

/* The segment p (n bytes) that fills the stream's gap g whole, late, where the bytes past the
 * gap were kept: read as if it had come in its place. Still hunting, the stream reads on from
 * it, in step; past the record mark the hunt found, the records it and the bytes before that
 * mark hold are read. 1 done, 0 not kept, -1 on an error raised. */
static int late_fill(struct run *r, struct stream *s, const struct gap *g, const uint8_t *p,
		     size_t n, int to_server)
{
	if (!s->orph_state || s->orph_at != g->to || !g->aligned)
		return 0;
	int state = s->orph_state;
	s->orph_state = 0;
	if (state == 1) {
		record_reset(s);
		s->synced = 1, s->ntail = 0, s->starts = 0;
		if (stream_bytes(r, s, p, n, to_server))
			return -1;
		return stream_bytes(r, s, s->orph, s->norph, to_server) ? -1 : 1;
	}
	uint8_t *both = malloc(n + s->norph + 1);
	if (!both)
		return 0;
	memcpy(both, p, n);
	memcpy(both + n, s->orph, s->norph);
	int rc = late_records(r, both, n + s->norph, to_server);
	free(both);
	return rc < 0 ? -1 : 1;
}

/* The segment p (n bytes) that fills the stream's gap g whole, late, where the record the gap
 * fell in kept its place (stream_lose): copied in, and the record read if it is whole now.
 * 1 done, 0 no such record, -1 on an error raised. */
static int late_patch(struct run *r, struct stream *s, const struct gap *g, const uint8_t *p,
		      size_t n, int to_server)
{
	if (s->broken == 2 && s->hole_at == g->from && s->hole_len == n) {
		memcpy(s->rec + s->hole_off, p, n); /* the record goes on in step */
		s->broken = 0;
		return 1;
	}
	if (!s->pend || s->pend_at != g->from || s->pend_len != n)
		return 0;
	memcpy(s->pend + s->pend_off, p, n);
	uint8_t *rec = s->pend;
	s->pend = NULL;
	int rc = rpc_message(r, rec, s->npend, to_server);
	free(rec);
	return rc ? -1 : 1;
}

/* A segment [at, at + step) that came after the bytes past it: what it covers of the stream's
 * gaps is no longer missing; one beginning a gap the stream had reached between two records
 * is read for its whole records (with the bytes past the gap, where it fills it whole and they
 * were kept). 1 when it covered a gap, 0 when none, -1 on an error raised. */
int gaps_fill(struct run *r, struct stream *s, uint64_t at, const uint8_t *p, size_t n, size_t step,
	      int to_server)
{
	uint64_t end = at + step;
	int covered = 0;
	for (size_t i = 0; i < s->ngaps; i++) {
		struct gap g = s->gaps[i];
		if (!(at < g.to && end > g.from))
			continue;
		s->gaps[i] = s->gaps[--s->ngaps];
		i--;
		covered = 1;
		int whole = 0;
		if (at == g.from && end == g.to && n == step) {
			int done = late_patch(r, s, &g, p, n, to_server);
			if (!done)
				done = late_fill(r, s, &g, p, n, to_server);
			if (done < 0)
				return -1;
			if (done)
				continue;
		}
		if (at == g.from && g.aligned && n) {
			whole = late_records(r, p, n, to_server);
			if (whole < 0)
				return -1;
		}
		if (g.from < at &&
		    gap_add(s, (struct gap){ g.from, at, g.since, g.until, g.aligned }))
			return -1;
		if (end < g.to && gap_add(s, (struct gap){ end, g.to, g.since, g.until, whole }))
			return -1;
	}
	return covered;
}
