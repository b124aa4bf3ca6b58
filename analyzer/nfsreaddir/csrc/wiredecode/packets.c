/*
 * One captured frame: its link layer (Ethernet, Linux cooked, loopback, raw IP), IPv4 or IPv6,
 * and the TCP or UDP ports that say whether it is NFS.
 */
#include "wiredecode.h"

static int is_port(struct run *r, unsigned p)
{
	for (int i = 0; i < r->nports; i++)
		if (r->ports[i] == p)
			return 1;
	return 0;
}

static int ip_packet(struct run *r, const uint8_t *p, size_t n)
{
	const uint8_t *l4;
	size_t n4, wire4; /* the layer 4 bytes captured, and on the wire */
	int proto;
	uint64_t h = 1469598103934665603ULL;
	if (n < 1)
		return 0;
	if ((p[0] >> 4) == 4) {
		if (n < 20)
			return 0;
		size_t hl = (size_t)(p[0] & 15) * 4, tot = (size_t)p[2] << 8 | p[3];
		if (hl < 20 || tot < hl || n < hl)
			return 0;
		if ((p[6] & 0x3f) || p[7]) {
			set_unknown(r, "IP fragments");
			return 0;
		}
		wire4 = tot - hl;
		if (tot > n)
			tot = n;
		proto = p[9];
		inet_ntop(AF_INET, p + 12, r->src, sizeof r->src);
		inet_ntop(AF_INET, p + 16, r->dst, sizeof r->dst);
		r->v6 = 0;
		l4 = p + hl, n4 = tot - hl;
		for (int i = 12; i < 20; i++)
			h = mix(h, p[i]);
	} else if ((p[0] >> 4) == 6) {
		if (n < 40)
			return 0;
		size_t pl = (size_t)p[4] << 8 | p[5];
		proto = p[6];
		if (proto != 6 && proto != 17)
			return 0; /* extension headers: not on an NFS client's path */
		inet_ntop(AF_INET6, p + 8, r->src, sizeof r->src);
		inet_ntop(AF_INET6, p + 24, r->dst, sizeof r->dst);
		r->v6 = 1;
		wire4 = pl;
		l4 = p + 40, n4 = pl < n - 40 ? pl : n - 40;
		for (int i = 8; i < 40; i++)
			h = mix(h, p[i]);
	} else {
		return 0;
	}
	/* TCP and UDP both begin with the two ports: a segment not to or from an NFS port ends here. */
	if ((proto != 6 && proto != 17) || n4 < (proto == 6 ? 20u : 8u))
		return 0;
	r->sport = (unsigned)l4[0] << 8 | l4[1], r->dport = (unsigned)l4[2] << 8 | l4[3];
	int to_server = is_port(r, r->dport);
	if (!to_server && !is_port(r, r->sport))
		return 0;
	r->udp = proto == 17;
	if (r->udp) {
		r->port_frames++;
		r->udp_frames++;
		if (n4 < wire4)
			return 0; /* cut by the snaplen: the message is lost (counted in truncated) */
		return rpc_message(r, l4 + 8, n4 - 8, to_server);
	}
	size_t off = (size_t)(l4[12] >> 4) * 4;
	if (off < 20 || off > n4)
		return 0;
	r->port_frames++;
	size_t payload = wire4 - off;		/* off <= n4 <= wire4 */
	if (n4 < wire4 && r->caplen < r->len) { /* the snaplen took the rest of the payload */
		char client[56];
		frame_client(r, to_server, client, sizeof client);
		if (hole_add(r, client, r->ts_ns, r->ts_ns, wire4 - n4, 1, to_server))
			return -1;
	}
	uint32_t seq = (uint32_t)l4[4] << 24 | (uint32_t)l4[5] << 16 | (uint32_t)l4[6] << 8 | l4[7];
	h = mix(h, (uint64_t)r->sport << 16 | r->dport);
	return tcp_segment(r, h ? h : 1, seq, l4[13] & 2, l4[13] & 1, l4 + off, n4 - off, payload,
			   to_server);
}

static int link_packet(struct run *r, int linktype, const uint8_t *p, size_t n)
{
	size_t off;
	unsigned et;
	switch (linktype) {
	case 1: /* Ethernet, VLAN tags skipped */
		if (n < 14)
			return 0;
		off = 12;
		et = (unsigned)p[off] << 8 | p[off + 1];
		while ((et == 0x8100 || et == 0x88a8) && n >= off + 6) {
			off += 4;
			et = (unsigned)p[off] << 8 | p[off + 1];
		}
		off += 2;
		break;
	case 113: /* Linux cooked */
		if (n < 16)
			return 0;
		et = (unsigned)p[14] << 8 | p[15], off = 16;
		break;
	case 276: /* Linux cooked v2 */
		if (n < 20)
			return 0;
		et = (unsigned)p[0] << 8 | p[1], off = 20;
		break;
	case 0:
	case 108: /* BSD loopback */
		if (n < 4)
			return 0;
		et = 0x0800, off = 4;
		break;
	case 12:
	case 14:
	case 101:
	case 228:
	case 229: /* raw IP */ et = 0x0800, off = 0; break;
	default: set_unknown(r, "a link type it does not know"); return 0;
	}
	if (et != 0x0800 && et != 0x86dd)
		return 0;
	if (off > n)
		return 0;
	return ip_packet(r, p + off, n - off);
}

int frame(struct run *r, int linktype, const uint8_t *p, size_t n)
{
	r->frame++;
	r->frame_had_rpc = 0;
	unsigned long long before = r->port_frames;
	if (link_packet(r, linktype, p, n))
		return -1;
	if (r->caplen < r->len && r->port_frames != before) {
		r->truncated++;
		if (r->caplen > r->snaplen)
			r->snaplen = r->caplen;
	}
	if (r->frame_had_rpc)
		r->rpc_frames++;
	if (r->frame_had_rpc > 1)
		r->split_frames++;
	return 0;
}
