/*
 * The capture files: pcap and pcapng (gzip'd or not, through zlib), each packet record
 * given to frame(). A file that ends inside a record is read up to that record (run.cut).
 */
#include "wiredecode.h"

#define CUT "the capture is cut short in the middle of a packet"

static int need(struct in *in, size_t n)
{
	if (n > in->cap) {
		uint8_t *b = realloc(in->buf, n);
		if (!b)
			return -1;
		in->buf = b, in->cap = n;
	}
	int got = gzread(in->f, in->buf, (unsigned)n);
	return got == (int)n ? 0 : got <= 0 ? 1 : 2;
}

static uint32_t rd32(const uint8_t *p, int swap)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return swap ? __builtin_bswap32(v) : v;
}

int read_pcap(struct run *r, struct in *in, const uint8_t *head)
{
	uint32_t magic;
	memcpy(&magic, head, 4);
	int swap = magic == 0xd4c3b2a1 || magic == 0x4d3cb2a1;
	int nano = magic == 0xa1b23c4d || magic == 0x4d3cb2a1;
	if (need(in, 20))
		return 0;
	int linktype = (int)(rd32(in->buf + 16, swap) & 0xffff);
	for (;;) {
		int end = need(in, 16);
		if (end) {
			if (end == 2)
				r->cut = CUT;
			return 0;
		}
		uint32_t sec = rd32(in->buf, swap), frac = rd32(in->buf + 4, swap);
		r->caplen = rd32(in->buf + 8, swap), r->len = rd32(in->buf + 12, swap);
		r->ts_ns = (unsigned long long)sec * 1000000000ULL + (nano ? frac : frac * 1000ULL);
		if (r->caplen > (256u << 20)) {
			set_unknown(r, "a damaged packet record");
			return 0;
		}
		if (need(in, r->caplen)) {
			r->cut = CUT;
			return 0;
		}
		if (frame(r, linktype, in->buf, r->caplen) || r->unknown)
			return r->unknown ? 0 : -1;
	}
}

struct iface {
	int linktype;
	unsigned long long div, mul; /* ticks -> ns */
};

/* A pcapng interface description: its link type and time resolution, appended to ifs.
 * 1 when it cannot be read (and said so), else 0. */
static int pcapng_iface(struct run *r, struct iface *ifs, int *nifs, const uint8_t *b, size_t body,
			int swap)
{
	if (*nifs >= 64 || body < 8) {
		set_unknown(r, "a damaged pcapng interface");
		return 1;
	}
	struct iface *f = &ifs[(*nifs)++];
	f->linktype = (int)(rd32(b, swap) & 0xffff);
	f->div = 1, f->mul = 1000; /* microseconds unless said */
	size_t o = 8;
	while (o + 4 <= body) {
		unsigned code = (unsigned)(rd32(b + o, swap) & 0xffff);
		unsigned olen = rd32(b + o, swap) >> 16;
		if (swap) {
			uint16_t c2, l2;
			memcpy(&c2, b + o, 2), memcpy(&l2, b + o + 2, 2);
			code = __builtin_bswap16(c2), olen = __builtin_bswap16(l2);
		} else {
			uint16_t c2, l2;
			memcpy(&c2, b + o, 2), memcpy(&l2, b + o + 2, 2);
			code = c2, olen = l2;
		}
		if (code == 0)
			break;
		if (code == 9 && olen >= 1 && o + 5 <= body) {
			unsigned v = b[o + 4];
			unsigned long long ticks = 1;
			for (unsigned k = 0; k < (v & 127) && k < 19; k++)
				ticks *= (v & 128) ? 2 : 10;
			if (v & 128 || ticks > 1000000000ULL) {
				set_unknown(r, "a pcapng time resolution it does not read");
				return 1;
			}
			f->mul = 1000000000ULL / ticks, f->div = 1;
		}
		o += 4 + ((olen + 3u) & ~3u);
	}
	return 0;
}

/* A pcapng enhanced (type 6) or simple (3) packet, given to frame(). -1 on an error raised,
 * 1 when the capture cannot be read on (said so), else 0. */
static int pcapng_packet(struct run *r, const struct iface *ifs, int nifs, uint32_t type,
			 const uint8_t *b, size_t body, int swap)
{
	uint32_t ifid = 0, hi = 0, lo = 0, cap, orig;
	const uint8_t *data;
	if (type == 6) {
		if (body < 20)
			return 1;
		ifid = rd32(b, swap), hi = rd32(b + 4, swap), lo = rd32(b + 8, swap);
		cap = rd32(b + 12, swap), orig = rd32(b + 16, swap), data = b + 20;
		if (cap > body - 20) {
			set_unknown(r, "a damaged pcapng packet");
			return 1;
		}
	} else {
		if (body < 4)
			return 1;
		orig = rd32(b, swap), data = b + 4;
		cap = orig < body - 4 ? orig : (uint32_t)(body - 4);
	}
	if (nifs <= 0 || ifid >= (uint32_t)nifs) {
		set_unknown(r, "a pcapng packet of no interface");
		return 1;
	}
	unsigned long long t = (unsigned long long)hi << 32 | lo;
	r->ts_ns = t * ifs[ifid].mul / ifs[ifid].div;
	r->caplen = cap, r->len = orig;
	if (frame(r, ifs[ifid].linktype, data, cap))
		return -1;
	return r->unknown ? 1 : 0;
}

int read_pcapng(struct run *r, struct in *in)
{
	struct iface ifs[64];
	int nifs = 0, swap = 0;
	const uint8_t *h;
	for (int first = 1;; first = 0) {
		uint32_t type, blen;
		if (first) {
			/* the 4 bytes of the block type were read by the caller */
			if (need(in, 8))
				return 0;
			swap = in->buf[4] == 0x1a;
			blen = rd32(in->buf, swap);
			if (blen < 28 || blen > (256u << 20) || need(in, blen - 12))
				return 0;
			nifs = 0;
			continue;
		}
		int end = need(in, 8);
		if (end) {
			if (end == 2)
				r->cut = CUT;
			return 0;
		}
		h = in->buf;
		type = rd32(h, 0);
		if (type == 0x0a0d0d0a) {
			set_unknown(r, "several pcapng sections");
			return 0;
		}
		blen = rd32(h + 4, swap);
		type = swap ? __builtin_bswap32(type) : type;
		if (blen < 12 || blen > (256u << 20) || (blen & 3)) {
			set_unknown(r, "a damaged pcapng block");
			return 0;
		}
		if (need(in, blen - 8)) {
			r->cut = CUT;
			return 0;
		}
		const uint8_t *b = in->buf;
		size_t body = blen - 12;
		if (type == 1) { /* interface description */
			if (pcapng_iface(r, ifs, &nifs, b, body, swap))
				return 0;
		} else if (type == 6 || type == 3) { /* enhanced / simple packet */
			int stop = pcapng_packet(r, ifs, nifs, type, b, body, swap);
			if (stop)
				return stop < 0 ? -1 : 0;
		}
	}
}
