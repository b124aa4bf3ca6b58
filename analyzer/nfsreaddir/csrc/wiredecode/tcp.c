/*
 * TCP reassembly per direction (retransmissions dropped, segments past a hole held) and ONC
 * RPC record marking, joining a stream mid-way where a segment begins a record.
 */
#include "wiredecode.h"

/* segments held past a hole before the hole counts as lost */
#define MAX_HELD 256
#define MAX_RECORD (64u << 20) /* an RPC record longer than this is no record mark */

struct seg {
	uint32_t seq;
	size_t n;
	struct seg *next;
	uint8_t data[];
};

struct stream {
	uint64_t key; /* 0: free */
	uint32_t next_seq;
	int synced, dead;
	uint8_t mark[4];
	int nmark;
	uint32_t frag_left;
	int last_frag;
	uint8_t *rec;
	size_t nrec, caprec;
	struct seg *held;
	int nheld;
	/* joined mid-stream, not synced yet: the bytes of segments too short to tell whether
	 * they begin a record, from join_seq on */
	uint8_t join[12];
	uint32_t join_seq;
	size_t njoin;
};

static struct stream *stream_get(struct run *r, uint64_t key)
{
	if ((r->nstreams + 1) * 2 > r->streams_cap) {
		size_t cap = r->streams_cap ? r->streams_cap * 2 : 256;
		struct stream *n = table_grow(r->streams, r->streams_cap, cap, sizeof *n);
		if (!n)
			return NULL;
		r->streams = n, r->streams_cap = cap;
	}
	size_t j = home(key, r->streams_cap);
	while (r->streams[j].key && r->streams[j].key != key)
		j = (j + 1) & (r->streams_cap - 1);
	if (!r->streams[j].key) {
		r->streams[j].key = key;
		r->nstreams++;
	}
	return &r->streams[j];
}

/* A hole still open at the end of the capture: a segment never seen. */
int streams_have_holes(struct run *r)
{
	for (size_t i = 0; i < r->streams_cap; i++)
		if (r->streams[i].key && r->streams[i].held)
			return 1;
	return 0;
}

void stream_free_all(struct run *r)
{
	for (size_t i = 0; i < r->streams_cap; i++) {
		struct seg *s = r->streams[i].held;
		while (s) {
			struct seg *nx = s->next;
			free(s);
			s = nx;
		}
		free(r->streams[i].rec);
	}
	free(r->streams);
	r->streams = NULL, r->nstreams = r->streams_cap = 0;
	free(r->calls);
	r->calls = NULL, r->ncalls = r->calls_cap = 0;
}

/* In-order stream bytes through the record marking. */
static int stream_bytes(struct run *r, struct stream *s, const uint8_t *p, size_t n, int to_server)
{
	while (n) {
		if (s->frag_left == 0 && s->nmark < 4) {
			s->mark[s->nmark++] = *p++, n--;
			if (s->nmark == 4) {
				uint32_t m = (uint32_t)s->mark[0] << 24 | (uint32_t)s->mark[1] << 16 |
					     (uint32_t)s->mark[2] << 8 | s->mark[3];
				s->last_frag = m >> 31;
				s->frag_left = m & 0x7fffffff;
				if (s->nrec + s->frag_left > MAX_RECORD) {
					set_unknown(r, "an RPC record over 64 MiB (not a record mark)");
					s->dead = 1;
					return 0;
				}
			}
			continue;
		}
		size_t take = n < s->frag_left ? n : s->frag_left;
		if (s->nrec + take > s->caprec) {
			size_t cap = (s->nrec + take) * 2;
			uint8_t *q = realloc(s->rec, cap);
			if (!q) {
				PyErr_NoMemory();
				return -1;
			}
			s->rec = q, s->caprec = cap;
		}
		memcpy(s->rec + s->nrec, p, take);
		s->nrec += take, s->frag_left -= (uint32_t)take, p += take, n -= take;
		if (s->frag_left == 0) {
			s->nmark = 0;
			if (s->last_frag) {
				size_t len = s->nrec;
				s->nrec = 0;
				if (rpc_message(r, s->rec, len, to_server))
					return -1;
				/* A server's capture has thousands of connections, each idle between its
				 * records: a buffer kept for each grew the memory with the clients. */
				free(s->rec);
				s->rec = NULL, s->caprec = 0;
			}
		}
	}
	return 0;
}

/* Whether 12 bytes can begin an RPC record: the last fragment's mark, of a length a record can
 * have, then an XID and a message type (0 call, 1 reply). */
static int record_start(const uint8_t *p)
{
	uint32_t len = (uint32_t)(p[0] & 0x7f) << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
	return (p[0] & 0x80) && len >= 8 && len <= MAX_RECORD && !p[8] && !p[9] && !p[10] && p[11] <= 1;
}

/* Joined mid-stream: begin where a segment begins a record. A record mark can come in a
 * segment of its own (a server sends it apart from the message): a segment too short to tell
 * is kept and read with the next one. 1 once synced (the kept bytes read), 0 not yet, -1 on an
 * error raised. */
static int join(struct run *r, struct stream *s, uint32_t seq, const uint8_t *p, size_t n,
		int to_server)
{
	uint8_t head[12];
	size_t have = 0;
	if (!n)
		return 0;
	if (s->njoin && seq == s->join_seq + (uint32_t)s->njoin)
		memcpy(head, s->join, have = s->njoin);
	else
		s->join_seq = seq;
	size_t more = n < sizeof head - have ? n : sizeof head - have;
	memcpy(head + have, p, more);
	if (have + more < sizeof head) {
		memcpy(s->join, head, s->njoin = have + more);
		return 0;
	}
	s->njoin = 0;
	if (have && record_start(head)) {
		s->next_seq = s->join_seq, s->synced = 1;
		if (stream_bytes(r, s, head, have, to_server))
			return -1;
		s->next_seq += (uint32_t)have;
		return 1;
	}
	if (n >= sizeof head && record_start(p)) {
		s->next_seq = seq, s->synced = 1;
		return 1;
	}
	return 0;
}

int tcp_segment(struct run *r, uint64_t key, uint32_t seq, int syn, int fin_rst,
		       const uint8_t *p, size_t n, int to_server)
{
	struct stream *s = stream_get(r, key);
	if (!s) {
		PyErr_NoMemory();
		return -1;
	}
	if (syn) { /* a new connection on these ports: nothing of the last one is kept */
		while (s->held) {
			struct seg *g = s->held;
			s->held = g->next;
			free(g);
		}
		s->nheld = 0;
		s->next_seq = seq + 1, s->synced = 1;
		s->nmark = 0, s->frag_left = 0, s->nrec = 0, s->dead = 0;
		return 0;
	}
	if (!s->synced) {
		int rc = join(r, s, seq, p, n, to_server);
		if (rc <= 0)
			return rc;
	}
	if (s->dead || (n == 0 && !fin_rst))
		return 0;
	int32_t d = (int32_t)(seq - s->next_seq);
	if (d < 0) { /* all or part seen: a retransmission */
		if ((size_t)-d >= n) {
			if (n)
				r->retransmitted++;
			return 0;
		}
		r->retransmitted++;
		p += -d, n -= (size_t)-d, seq = s->next_seq, d = 0;
	}
	if (d > 0) { /* ahead of a hole: held until the hole is filled */
		if (n == 0)
			return 0;
		if (s->nheld >= MAX_HELD) {
			set_unknown(r, "a TCP segment lost (a hole never filled)");
			s->dead = 1;
			return 0;
		}
		struct seg *g = malloc(sizeof *g + n), **at = &s->held;
		if (!g) {
			PyErr_NoMemory();
			return -1;
		}
		g->seq = seq, g->n = n;
		memcpy(g->data, p, n);
		while (*at && (int32_t)((*at)->seq - seq) < 0)
			at = &(*at)->next;
		g->next = *at, *at = g;
		s->nheld++;
		r->reordered++;
		return 0;
	}
	s->next_seq = seq + (uint32_t)n;
	if (stream_bytes(r, s, p, n, to_server))
		return -1;
	while (s->held && !s->dead) {
		struct seg *g = s->held;
		int32_t e = (int32_t)(g->seq - s->next_seq);
		if (e > 0)
			break;
		s->held = g->next, s->nheld--;
		if ((size_t)-e < g->n) {
			s->next_seq = g->seq + (uint32_t)g->n;
			if (stream_bytes(r, s, g->data - e, g->n + (size_t)e, to_server)) {
				free(g);
				return -1;
			}
		}
		free(g);
	}
	if (fin_rst && s->held)
		set_unknown(r, "a TCP segment lost (a hole never filled)");
	return 0;
}
