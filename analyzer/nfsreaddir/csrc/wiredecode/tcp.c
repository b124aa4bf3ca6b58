/*
 * TCP reassembly per direction and ONC RPC record marking, reading through loss: a hole in a
 * stream (bytes the capture never saw: a packet dropped while capturing, a frame cut by the
 * snaplen) is reported (run.holes) and the stream read on from the next record mark; a segment
 * that comes late into a hole (reordered in the capture, not lost) fills it again.
 *
 * Where the next record mark lies is known when the hole ends inside the fragment being read
 * (its mark gave its length): the record is dropped and the stream stays in step. Otherwise the
 * stream hunts for it, as a stream joined mid-way does: a record mark whose message begins an
 * ONC RPC call of NFS, or a reply to a call of this connection still waiting (hunt_start), the
 * header Wireshark's RPC heuristic looks for.
 *
 * The holes (gaps.c) are the bytes tcpholes.walk finds missing (the tshark decoder's walk),
 * placed alike: from the last segment with bytes before the hole to the one after it.
 */
#include "wiredecode.h"

#define MAX_RECORD (64u << 20) /* an RPC record longer than this is no record mark */
#define NFS_PROGRAM 100003
#define NFSACL_PROGRAM 100227

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

void stream_free_all(struct run *r)
{
	for (size_t i = 0; i < r->streams_cap; i++) {
		free(r->streams[i].rec);
		free(r->streams[i].gaps);
		free(r->streams[i].orph);
		free(r->streams[i].pend);
	}
	free(r->streams);
	r->streams = NULL, r->nstreams = r->streams_cap = 0;
	free(r->calls);
	r->calls = NULL, r->ncalls = r->calls_cap = 0;
}

void record_reset(struct stream *s)
{
	s->nmark = 0, s->frag_left = 0, s->nrec = 0, s->broken = 0;
}

/* In-order stream bytes through the record marking. */
int stream_bytes(struct run *r, struct stream *s, const uint8_t *p, size_t n, int to_server)
{
	while (n && !s->dead) {
		if (s->frag_left == 0 && s->nmark < 4) {
			s->mark[s->nmark++] = *p++, n--;
			if (s->nmark == 4) {
				uint32_t m = be32(s->mark);
				s->last_frag = m >> 31;
				s->frag_left = m & 0x7fffffff;
				if (s->nrec + s->frag_left > MAX_RECORD) {
					set_unknown(
						r, "an RPC record over 64 MiB (not a record mark)");
					s->dead = 1;
					return 0;
				}
			}
			continue;
		}
		size_t take = n < s->frag_left ? n : s->frag_left;
		if (s->broken != 1) {
			if (s->nrec + take > s->caprec) {
				size_t cap = (s->nrec + take) * 2;
				uint8_t *q = realloc(s->rec, cap);
				if (!q) {
					PyErr_NoMemory();
					return -1;
				}
				s->rec = q, s->caprec = cap;
			}
			if (take) /* (an empty fragment: rec may be NULL) */
				memcpy(s->rec + s->nrec, p, take);
			s->nrec += take;
		}
		s->frag_left -= (uint32_t)take, p += take, n -= take;
		if (s->frag_left == 0) {
			s->nmark = 0;
			if (s->last_frag) {
				size_t len = s->nrec;
				int broken = s->broken;
				s->nrec = 0, s->broken = 0;
				if (!broken && len && rpc_message(r, s->rec, len, to_server))
					return -1;
				/* whole but for its hole: kept for a late segment */
				if (broken == 2) {
					free(s->pend);
					s->pend = s->rec, s->npend = len, s->pend_off = s->hole_off;
					s->pend_len = s->hole_len, s->pend_at = s->hole_at;
					s->rec = NULL, s->late_age = 0;
				}
				/* A server's capture has thousands of connections, each idle between its
				 * records: a buffer kept for each grew the memory with the clients. */
				free(s->rec);
				s->rec = NULL, s->caprec = 0;
			}
		}
	}
	return 0;
}

/* n bytes of the stream lost where it stands (a hole, or a frame's rest cut by the snaplen):
 * the record under way is dropped. Where they end inside its fragment the stream stays in step
 * (the next mark is where that fragment ends); else it hunts for the next record mark. A hole
 * that a late segment may fill (at: its position; NEVER for a snaplen's cut) keeps its place
 * in the record, once in a record. */
#define NEVER UINT64_MAX
static void stream_lose(struct stream *s, uint64_t n, uint64_t at)
{
	s->orph_state = 0; /* the bytes kept after a gap would not be the stream's next */
	if (s->synced && s->nmark == 4 && s->frag_left > n) {
		s->frag_left -= (uint32_t)n;
		if (!s->broken && at != NEVER && s->nrec + n <= MAX_ORPHAN) {
			size_t want = s->nrec + (size_t)n;
			uint8_t *q = want > s->caprec ? realloc(s->rec, want * 2) : s->rec;
			if (q) {
				if (want > s->caprec)
					s->rec = q, s->caprec = want * 2;
				memset(s->rec + s->nrec, 0, (size_t)n);
				s->hole_off = s->nrec, s->hole_len = (uint32_t)n, s->hole_at = at;
				s->nrec = want, s->broken = 2;
				return;
			}
		}
		s->broken = 1;
		s->nrec = 0;
		return;
	}
	record_reset(s);
	s->synced = 0, s->ntail = 0, s->starts = 0;
}

/* Whether the HEAD bytes at p can begin an RPC record: the last fragment's mark, of a length a
 * record can have, then an XID and either an NFS or NFSACL call (RPC version 2, the program, a
 * version it has) or a reply (its status, verifier and acceptance in range). A reply found
 * inside a segment must also answer a call of this connection still waiting: its header alone
 * is too common a pattern among a READDIR reply's bytes. One at a segment's start needs no
 * such call: a sender writes a record mark first in a segment, and a capture joined mid-way
 * sees replies to calls it never saw. */
static int hunt_start(struct run *r, const uint8_t *p, int seg_start, int to_server)
{
	uint32_t len = be32(p) & 0x7fffffff;
	if (!(p[0] & 0x80) || len < 24 || len > MAX_RECORD)
		return 0;
	uint32_t xid = be32(p + 4), mtype = be32(p + 8);
	if (mtype == 0) {
		uint32_t prog = be32(p + 16), vers = be32(p + 20);
		return len >= 40 && be32(p + 12) == 2 &&
		       ((prog == NFS_PROGRAM && vers >= 2 && vers <= 4) ||
			(prog == NFSACL_PROGRAM && vers >= 2 && vers <= 3));
	}
	if (mtype != 1 || be32(p + 12) > 1)
		return 0;
	if (be32(p + 12) == 0 &&
	    (be32(p + 16) > 6 || be32(p + 20) > 400 || (be32(p + 20) == 0 && be32(p + 24) > 5)))
		return 0;
	if (seg_start)
		return 1;
	const char *client = to_server ? r->src : r->dst, *server = to_server ? r->dst : r->src;
	unsigned cport = to_server ? r->sport : r->dport, sport = to_server ? r->dport : r->sport;
	return call_slot(r, conv_key(client, cport, server, sport, 0, xid), 0) != NULL;
}

/* In-order bytes of a stream hunting for a record mark: tried at each offset of the bytes kept
 * from before and of these; once found the stream reads on from it. */
static int hunt(struct run *r, struct stream *s, const uint8_t *p, size_t n, int to_server)
{
	size_t kept = s->ntail, total = kept + n;
	uint8_t head[HEAD];
	for (size_t i = 0; i + HEAD <= total; i++) {
		const uint8_t *at;
		if (i >= kept) {
			at = p + (i - kept);
		} else { /* the header straddles the kept bytes and these */
			memcpy(head, s->tail + i, kept - i);
			memcpy(head + (kept - i), p, HEAD - (kept - i));
			at = head;
		}
		if (!(at[0] & 0x80))
			continue;
		int seg_start = i == kept || (i < kept && (s->starts >> i & 1));
		if (!hunt_start(r, at, seg_start, to_server))
			continue;
		s->synced = 1, s->ntail = 0, s->starts = 0, s->resync_back = total - i;
		record_reset(s);
		if (i < kept && stream_bytes(r, s, s->tail + i, kept - i, to_server))
			return -1;
		return stream_bytes(r, s, i < kept ? p : p + (i - kept),
				    i < kept ? n : n - (i - kept), to_server);
	}
	/* not found: keep the last bytes, whose offsets were not all tried */
	size_t keep = total < HEAD - 1 ? total : HEAD - 1;
	uint8_t t[HEAD];
	uint32_t starts = 0;
	for (size_t k = 0; k < keep; k++) {
		size_t i = total - keep + k;
		t[k] = i < kept ? s->tail[i] : p[i - kept];
		if (i < kept ? (s->starts >> i & 1) : i == kept)
			starts |= 1u << k;
	}
	memcpy(s->tail, t, keep);
	s->ntail = keep, s->starts = starts;
	return 0;
}

/* Bytes a hunt is given, kept (up to MAX_ORPHAN) while it goes on after an aligned gap. */
static void orphan_keep(struct stream *s, const uint8_t *p, size_t n)
{
	if (s->norph + n > MAX_ORPHAN) {
		s->orph_state = 0;
		return;
	}
	if (s->norph + n > s->caporph) {
		size_t cap = (s->norph + n) * 2;
		uint8_t *q = realloc(s->orph, cap < MAX_ORPHAN ? cap : MAX_ORPHAN);
		if (!q) { /* only a late segment's record is lost */
			s->orph_state = 0;
			return;
		}
		s->orph = q, s->caporph = cap < MAX_ORPHAN ? cap : MAX_ORPHAN;
	}
	memcpy(s->orph + s->norph, p, n);
	s->norph += n;
}

/* In-order bytes of a stream, synced or hunting. */
static int stream_in(struct run *r, struct stream *s, const uint8_t *p, size_t n, int to_server)
{
	if (!n)
		return 0;
	if (s->synced)
		return stream_bytes(r, s, p, n, to_server);
	if (s->orph_state == 1)
		orphan_keep(s, p, n);
	if (hunt(r, s, p, n, to_server))
		return -1;
	if (s->synced && s->orph_state == 1) { /* the bytes up to the record mark found */
		if (s->resync_back <= s->norph)
			s->norph -= s->resync_back, s->orph_state = 2;
		else
			s->orph_state = 0;
	}
	return 0;
}

/* One TCP segment: n bytes captured of its wire bytes (more where the snaplen cut it). */
int tcp_segment(struct run *r, uint64_t key, uint32_t seq, int syn, int fin, const uint8_t *p,
		size_t n, size_t wire, int to_server)
{
	/* A bare ACK, or a keepalive (one byte below the next): no bytes of its own. */
	if (wire == 0 && !syn && !fin)
		return 0;
	struct stream *s = stream_get(r, key);
	if (!s) {
		PyErr_NoMemory();
		return -1;
	}
	size_t step = wire + (syn || fin ? 1 : 0); /* SYN and FIN count one */
	if (syn || !s->seen) {
		/* A new connection on these ports, or the first of one already under way: nothing
		 * of a former one is kept. Joined mid-way, it hunts for a record mark. */
		if (gaps_flush(r, s))
			return -1;
		record_reset(s);
		s->seen = 1, s->dead = 0, s->synced = syn != 0, s->ntail = 0, s->starts = 0;
		s->orph_state = 0;
		free(s->pend);
		s->pend = NULL;
		frame_client(r, to_server, s->client, sizeof s->client);
		s->to_server = to_server;
		s->pos = step, s->next_seq = seq + (uint32_t)step, s->last_ts = r->ts_ns;
		if (syn)
			return 0;
		if (stream_in(r, s, p, n, to_server))
			return -1;
		if (wire > n)
			stream_lose(s, wire - n, NEVER);
		return 0;
	}
	int32_t d = (int32_t)(seq - s->next_seq);
	uint64_t at = s->pos + (uint64_t)(int64_t)d;
	unsigned long long since = s->last_ts;
	s->last_ts = r->ts_ns;
	if (d < 0) { /* all or part seen already: a retransmission, or one late into a gap */
		size_t back = (size_t) - (int64_t)d;
		int late = s->ngaps ? gaps_fill(r, s, at, p, n, step, to_server) : 0;
		if (late < 0)
			return -1;
		if (late)
			r->reordered++;
		if (back >= step) {
			if (wire && !late)
				r->retransmitted++;
			return 0;
		}
		if (!late)
			r->retransmitted++;
		/* the part past what was seen is read as new */
		size_t skip = back < n ? back : n;
		p += skip, n -= skip, wire -= back < wire ? back : wire;
		step -= back, seq = s->next_seq, d = 0, at = s->pos;
	}
	if (d > 0) { /* bytes never seen before these: a hole */
		int aligned = s->synced && s->nmark == 0 && s->frag_left == 0 && s->nrec == 0 &&
			      !s->broken;
		if (gap_add(s, (struct gap){ s->pos, at, since, r->ts_ns, aligned }))
			return -1;
		stream_lose(s, (uint64_t)d, s->pos);
		s->orph_state = aligned && !s->synced, s->norph = 0, s->orph_at = at;
		s->late_age = 0;
	} else if ((s->pend || s->orph_state) && ++s->late_age > LATE_WINDOW) {
		free(s->pend), free(s->orph);
		s->pend = s->orph = NULL, s->caporph = s->norph = 0, s->orph_state = 0;
	}
	s->pos = at + step, s->next_seq = seq + (uint32_t)step;
	if (s->dead)
		return 0;
	if (stream_in(r, s, p, n, to_server))
		return -1;
	if (wire > n)
		stream_lose(s, wire - n, NEVER);
	return 0;
}
