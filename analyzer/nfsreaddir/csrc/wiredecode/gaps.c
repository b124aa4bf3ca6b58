/*
 * The holes of the TCP streams (tcp.c): each gap a stream's bytes show, reported once no
 * segment can fill it (run.holes, placed on its client and in time as tcpholes.walk places
 * them), and the segments that come late into one, read in their place.
 */
#include "wiredecode.h"

/* One hole into the run's report. */
int hole_add(struct run *r, const char *client, unsigned long long from, unsigned long long to,
	     unsigned long long bytes, int cut, int to_server)
{
	if (r->nholes == r->holes_cap) {
		size_t cap = r->holes_cap ? r->holes_cap * 2 : 64;
		struct hole *h = realloc(r->holes, cap * sizeof *h);
		if (!h) {
			PyErr_NoMemory();
			return -1;
		}
		r->holes = h, r->holes_cap = cap;
	}
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
	if (s->ngaps == s->capgaps) {
		size_t cap = s->capgaps ? s->capgaps * 2 : 4;
		struct gap *n = realloc(s->gaps, cap * sizeof *n);
		if (!n) {
			PyErr_NoMemory();
			return -1;
		}
		s->gaps = n, s->capgaps = cap;
	}
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
