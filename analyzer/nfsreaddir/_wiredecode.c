/*
 * The compiled capture decoder (nfsreaddir.trace.wiredecode): pcap or pcapng, gzip'd or not ->
 * Ethernet / Linux cooked / raw IP -> IPv4 or IPv6 -> TCP reassembled per direction (or UDP
 * datagrams) on the server's ports -> ONC RPC record marking -> the NFS calls and replies the
 * wire analysis reads: NFSv3 READDIR, READDIRPLUS and GETATTR, and NFSv4 COMPOUNDs whose main
 * operation (as Wireshark ranks a compound's operations) is READDIR or GETATTR.
 *
 * Each such message is handed to a Python callback as one row of tshark's -T fields text
 * (the columns are named by the caller, tshark_fields.FIELDS), so that the one matcher of
 * calls and replies (rpcmatch) reads both decoders' rows alike and tshark stays the oracle.
 * One exception: a reply's entry cookies are one bytes object of native 64-bit integers.
 *
 * What it does not know it says instead of guessing: decode() returns the reason in
 * stats["unknown"] (a lost segment, a frame cut by the snaplen, RPCSEC_GSS, a body it cannot
 * parse...), and the caller decodes the whole capture with tshark instead.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define NFS_PROGRAM 100003
/* segments held past a hole before the hole counts as lost */
#define MAX_HELD 256
#define MAX_RECORD (64u << 20) /* an RPC record longer than this is no record mark */

/* ------------------------------------------------------------------ columns of a row */
enum {
	C_FRAME, C_TS, C_CAPLEN, C_LEN, C_SRC, C_DST, C_SRC6, C_DST6, C_SPORT, C_DPORT, C_USPORT,
	C_UDPORT, C_XID, C_MSGTYP, C_PROG, C_VERS, C_PROC, C_REPLYSTAT, C_ACCEPT, C_MAINOP, C_MINOR,
	C_FH, C_COOKIE4, C_VERF4, C_DIRCOUNT4, C_MAXCOUNT4, C_EOF4, C_STATUS4, C_CHANGE4,
	C_FILEID4, C_COOKIE3, C_VERF3, C_COUNT3, C_DIRCOUNT3, C_MAXCOUNT3, C_ECOOKIE3, C_EPCOOKIE3,
	C_EOF3, C_STATUS3, C_MTIME_S, C_MTIME_NS, C_CTIME_S, C_CTIME_NS, C_FILEID3, N_COLS
};
static const char *const col_names[N_COLS] = {
	"frame", "ts", "cap_len", "len", "src", "dst", "src6", "dst6", "sport", "dport", "usport",
	"udport", "xid", "msgtyp", "prog", "vers", "proc", "replystat", "accept", "mainop", "minor",
	"fh", "cookie4", "verf4", "dircount4", "maxcount4", "eof4", "status4", "change4",
	"fileid4", "cookie3", "verf3", "count3", "dircount3", "maxcount3", "ecookie3", "epcookie3",
	"eof3", "status3", "mtime_s", "mtime_ns", "ctime_s", "ctime_ns", "fileid3",
};

/* A growing text buffer: one column's values, comma-joined. */
struct text {
	char *p;
	size_t n, cap;
};

static int text_add(struct text *t, const char *s, size_t n)
{
	if (t->n + n + 2 > t->cap) {
		size_t cap = (t->cap ? t->cap * 2 : 64) + n;
		char *p = realloc(t->p, cap);
		if (!p)
			return -1;
		t->p = p, t->cap = cap;
	}
	if (t->n)
		t->p[t->n++] = ',';
	memcpy(t->p + t->n, s, n);
	t->n += n;
	return 0;
}

/* A value as 8 native bytes, not text: a reply's entry cookies, millions in a big capture,
 * go to Python as one bytes object an array("Q") takes whole, never formatted and parsed. */
static int raw_add(struct text *t, uint64_t v)
{
	if (t->n + sizeof v > t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 512;
		char *p = realloc(t->p, cap);
		if (!p)
			return -1;
		t->p = p, t->cap = cap;
	}
	memcpy(t->p + t->n, &v, sizeof v);
	t->n += sizeof v;
	return 0;
}

static int text_fmt(struct text *t, const char *fmt, unsigned long long v)
{
	char b[32];
	int n = snprintf(b, sizeof b, fmt, v);
	return text_add(t, b, (size_t)n);
}

/* ------------------------------------------------------------------ XDR */
struct xdr {
	const uint8_t *p, *end;
	int bad;
};

static uint32_t u32(struct xdr *x)
{
	if (x->bad || x->end - x->p < 4) {
		x->bad = 1;
		return 0;
	}
	uint32_t v = (uint32_t)x->p[0] << 24 | (uint32_t)x->p[1] << 16 | (uint32_t)x->p[2] << 8 |
		     x->p[3];
	x->p += 4;
	return v;
}

static uint64_t u64(struct xdr *x)
{
	uint64_t hi = u32(x);
	return hi << 32 | u32(x);
}

/* n bytes and their padding; NULL when the message is shorter */
static const uint8_t *skip(struct xdr *x, uint32_t n)
{
	uint64_t padded = ((uint64_t)n + 3) & ~3ULL;
	if (x->bad || (uint64_t)(x->end - x->p) < padded) {
		x->bad = 1;
		return NULL;
	}
	const uint8_t *at = x->p;
	x->p += padded;
	return at;
}

static const uint8_t *opaque(struct xdr *x, uint32_t *n)
{
	*n = u32(x);
	return skip(x, *n);
}

/* ------------------------------------------------------------------ a decode run */
struct run {
	PyObject *callback;
	PyObject *cols; /* the caller's column order: its index for each of ours */
	Py_ssize_t ncols, where[N_COLS];
	struct text t[N_COLS];
	char raw[N_COLS]; /* the column holds raw_add's values (bytes), not text */
	const char *unknown; /* why tshark must decode this capture instead */
	int failed;	     /* a Python error is set */
	/* the frame being read */
	unsigned long long frame, ts_ns;
	uint32_t caplen, len;
	char src[48], dst[48];
	int v6, udp;
	unsigned sport, dport;
	/* what the capture holds */
	unsigned long long port_frames, rpc_frames, split_frames, messages, retransmitted, reordered;
	int frame_had_rpc; /* RPC messages the frame completed */
	unsigned versions; /* bit 2: v2, 3: v3, 8 + minor: v4.minor */
	uint16_t ports[64];
	int nports;
	/* the calls awaiting replies and the TCP streams: this run's own, so that two threads'
	 * runs (the callback lets the GIL go) never share a table */
	struct call *calls;
	size_t ncalls, calls_cap;
	struct stream *streams;
	size_t nstreams, streams_cap;
};

static void clear_row(struct run *r)
{
	for (int i = 0; i < N_COLS; i++)
		r->t[i].n = 0, r->raw[i] = 0;
}

static int put_raw(struct run *r, int c, uint64_t v)
{
	r->raw[c] = 1;
	return raw_add(&r->t[c], v);
}

static int put(struct run *r, int c, const char *fmt, unsigned long long v)
{
	return text_fmt(&r->t[c], fmt, v);
}

/* The row of one message to the callback, in the caller's column order. */
static int emit(struct run *r)
{
	char b[32];
	int n;
	clear_row(r);
	n = snprintf(b, sizeof b, "%llu", r->frame);
	text_add(&r->t[C_FRAME], b, (size_t)n);
	n = snprintf(b, sizeof b, "%llu.%09llu", r->ts_ns / 1000000000ULL, r->ts_ns % 1000000000ULL);
	text_add(&r->t[C_TS], b, (size_t)n);
	put(r, C_CAPLEN, "%llu", r->caplen);
	put(r, C_LEN, "%llu", r->len);
	text_add(&r->t[r->v6 ? C_SRC6 : C_SRC], r->src, strlen(r->src));
	text_add(&r->t[r->v6 ? C_DST6 : C_DST], r->dst, strlen(r->dst));
	put(r, r->udp ? C_USPORT : C_SPORT, "%llu", r->sport);
	put(r, r->udp ? C_UDPORT : C_DPORT, "%llu", r->dport);
	return 0;
}

static int send_row(struct run *r)
{
	PyObject *row = PyList_New(r->ncols);
	if (!row)
		return -1;
	for (Py_ssize_t i = 0; i < r->ncols; i++) {
		Py_INCREF(Py_None);
		PyList_SET_ITEM(row, i, Py_None);
	}
	for (int c = 0; c < N_COLS; c++) {
		Py_ssize_t at = r->where[c];
		if (at < 0)
			continue;
		const char *p = r->t[c].p ? r->t[c].p : "";
		PyObject *s = r->raw[c] ? PyBytes_FromStringAndSize(p, (Py_ssize_t)r->t[c].n)
					: PyUnicode_DecodeASCII(p, (Py_ssize_t)r->t[c].n, "replace");
		if (!s) {
			Py_DECREF(row);
			return -1;
		}
		PyList_SetItem(row, at, s);
	}
	for (Py_ssize_t i = 0; i < r->ncols; i++) {
		if (PyList_GET_ITEM(row, i) == Py_None) {
			PyObject *s = PyUnicode_FromString("");
			if (!s) {
				Py_DECREF(row);
				return -1;
			}
			PyList_SetItem(row, i, s);
		}
	}
	PyObject *res = PyObject_CallOneArg(r->callback, row);
	Py_DECREF(row);
	if (!res)
		return -1;
	Py_DECREF(res);
	return 0;
}

/* ------------------------------------------------------------------ calls awaiting replies */
enum { K_NONE, K_READDIR3, K_READDIRPLUS3, K_GETATTR3, K_COMPOUND4 };

/* A key's first slot in a table of cap slots (a power of two). Not the key's low bits: mix()
 * ends with a multiplication, which carries a bit only upward, so the segments towards one
 * server, whose connections differ in the client port alone, had keys with the same low bits
 * and every lookup walked the slots of every connection (a quarter of the decoder's time at
 * 2,381 connections, growing with them). The high half of a product depends on every bit. */
static size_t home(uint64_t key, size_t cap)
{
	return (size_t)((key ^ key >> 32) * 0x9e3779b97f4a7c15ULL >> 32) & (cap - 1);
}

/* The open-addressing tables below (calls, streams): entries whose first member is their
 * uint64_t key, 0 for a free slot, cap a power of two. Returns old's entries rehashed into a
 * table of cap slots (old freed), or NULL with old untouched when memory runs out. */
static void *table_grow(void *old, size_t old_cap, size_t cap, size_t size)
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

struct call {
	uint64_t key; /* 0: free */
	uint8_t kind;
};

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdULL;
}

static uint64_t conv_key(const char *client, unsigned cport, const char *server, unsigned sport,
			 int udp, uint32_t xid)
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

static struct call *call_slot(struct run *r, uint64_t key, int add)
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

/* Removes a slot (backward-shift deletion keeps the probe chains whole). */
static void call_drop(struct run *r, struct call *c)
{
	size_t i = (size_t)(c - r->calls), j = i;
	c->key = 0;
	r->ncalls--;
	for (;;) {
		j = (j + 1) & (r->calls_cap - 1);
		if (!r->calls[j].key)
			return;
		size_t h = home(r->calls[j].key, r->calls_cap);
		if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
			r->calls[i] = r->calls[j];
			r->calls[j].key = 0;
			i = j;
		}
	}
}

/* ------------------------------------------------------------------ NFS bodies */
static void fh_hash(struct run *r, const uint8_t *p, uint32_t n)
{
	put(r, C_FH, "0x%08llx", crc32(0L, p, n));
}

static void fattr3(struct run *r, struct xdr *x)
{
	const uint8_t *a = skip(x, 84);
	if (!a)
		return;
	struct xdr f = {a + 52, a + 84, 0};
	put(r, C_FILEID3, "%llu", u64(&f));
	u64(&f); /* atime */
	put(r, C_MTIME_S, "%llu", u32(&f));
	put(r, C_MTIME_NS, "%llu", u32(&f));
	put(r, C_CTIME_S, "%llu", u32(&f));
	put(r, C_CTIME_NS, "%llu", u32(&f));
}

static void post_op_attr(struct run *r, struct xdr *x)
{
	if (u32(x))
		fattr3(r, x);
}

static void reply3(struct run *r, struct xdr *x, int kind)
{
	uint32_t status = u32(x), n;
	put(r, C_STATUS3, "%llu", status);
	if (kind == K_GETATTR3) {
		if (status == 0)
			fattr3(r, x);
		return;
	}
	post_op_attr(r, x);
	if (status != 0 || x->bad)
		return;
	const uint8_t *v = skip(x, 8);
	if (v)
		put(r, C_VERF3, "%016llx", (unsigned long long)v[0] << 56 | (unsigned long long)v[1] << 48 |
		    (unsigned long long)v[2] << 40 | (unsigned long long)v[3] << 32 | (unsigned long long)v[4] << 24 |
		    (unsigned long long)v[5] << 16 | (unsigned long long)v[6] << 8 | v[7]);
	while (!x->bad && u32(x)) {
		u64(x); /* fileid */
		opaque(x, &n);
		put_raw(r, kind == K_READDIRPLUS3 ? C_EPCOOKIE3 : C_ECOOKIE3, u64(x));
		if (kind == K_READDIRPLUS3) {
			post_op_attr(r, x);
			if (u32(x)) {
				const uint8_t *fh = opaque(x, &n);
				if (fh)
					fh_hash(r, fh, n);
			}
		}
	}
	put(r, C_EOF3, "%llu", u32(x));
}

/* NFSv4 operations as Wireshark ranks them to pick a compound's main one: the first of the
 * lowest tier.  Every operation not named here is of tier 1. */
static int tier4(uint32_t op)
{
	switch (op) {
	case 53: return 5;			/* SEQUENCE */
	case 10: case 22: case 31: case 32: return 4; /* GETFH PUTFH RESTOREFH SAVEFH */
	case 9: case 23: case 24: return 3;	/* GETATTR PUTPUBFH PUTROOTFH */
	case 3: case 17: return 2;		/* ACCESS NVERIFY */
	default: return 1;
	}
}

static void bitmap4(struct xdr *x)
{
	uint32_t n = u32(x);
	skip(x, n > 1000 ? 0xffffffffu : n * 4);
}

/* An operation's arguments; 0 when it is not one this decoder knows. */
static int skip_args4(struct xdr *x, uint32_t op, struct run *r, int *nfh)
{
	uint32_t n;
	const uint8_t *p;
	switch (op) {
	case 3: case 45: case 52: case 58: u32(x); return 1;     /* ACCESS FREE_STATEID.. */
	case 4: skip(x, 20); return 1;				 /* CLOSE */
	case 5: skip(x, 12); return 1;				 /* COMMIT */
	case 8: skip(x, 16); return 1;				 /* DELEGRETURN */
	case 9: bitmap4(x); return 1;				 /* GETATTR */
	case 10: case 16: case 23: case 24: case 27: case 31: case 32: return 1;
	case 15: case 28: case 33: opaque(x, &n); return 1;	 /* LOOKUP REMOVE SECINFO */
	case 29: opaque(x, &n); opaque(x, &n); return 1;	 /* RENAME */
	case 30: case 57: u64(x); return 1;			 /* RENEW DESTROY_CLIENTID */
	case 17: case 37: bitmap4(x); opaque(x, &n); return 1;	 /* NVERIFY VERIFY */
	case 34: skip(x, 16); bitmap4(x); opaque(x, &n); return 1; /* SETATTR */
	case 25: skip(x, 28); return 1;				 /* READ */
	case 38: skip(x, 28); opaque(x, &n); return 1;		 /* WRITE */
	case 53: skip(x, 32); return 1;				 /* SEQUENCE */
	case 22:						 /* PUTFH */
		p = opaque(x, &n);
		if (p) {
			fh_hash(r, p, n);
			++*nfh;
		}
		return 1;
	case 26: /* READDIR */
		put(r, C_COOKIE4, "%llu", u64(x));
		put(r, C_VERF4, "%llu", u64(x));
		put(r, C_DIRCOUNT4, "%llu", u32(x));
		put(r, C_MAXCOUNT4, "%llu", u32(x));
		bitmap4(x);
		return 1;
	default: return 0;
	}
}

/* A compound call: its minor version, main operation and the READDIR arguments. Returns the
 * main operation, or -1 when the compound cannot be ranked. */
static int call4(struct run *r, struct xdr *x)
{
	uint32_t n, ops, best = 0, best_tier = 6;
	int nfh = 0;
	opaque(x, &n); /* tag */
	uint32_t minor = u32(x);
	ops = u32(x);
	if (x->bad)
		return -1;
	r->versions |= 1u << (8 + (minor & 15));
	put(r, C_MINOR, "%llu", minor);
	for (uint32_t i = 0; i < ops && i < 128; i++) {
		uint32_t op = u32(x);
		if (x->bad)
			return -1;
		if ((op < 3 || op > 75) && op != 10044)
			break; /* Wireshark stops at an operation it has no name for */
		int t = tier4(op);
		if (t < (int)best_tier)
			best_tier = (uint32_t)t, best = op;
		if (!skip_args4(x, op, r, &nfh) || x->bad) {
			/* what follows cannot be read, but an operation of tier 1 (as every
			 * one not read here is) ends the ranking: the first of tier 1 wins */
			if (t != 1)
				return -1;
			break;
		}
		if (best_tier == 1 && best != 26)
			break; /* neither READDIR nor GETATTR can be the main one now */
	}
	put(r, C_MAINOP, "%llu", best);
	return (int)best;
}

static int fattr4_reply(struct run *r, struct xdr *x)
{
	uint32_t nw = u32(x), w[8] = {0}, n;
	if (nw > 1000)
		return -1;
	for (uint32_t i = 0; i < nw; i++) {
		uint32_t v = u32(x);
		if (i < 8)
			w[i] = v;
	}
	const uint8_t *vals = opaque(x, &n);
	if (!vals)
		return -1;
	struct xdr a = {vals, vals + n, 0};
	for (int bit = 0; bit <= 20; bit++) {
		if (!(w[bit / 32] >> (bit % 32) & 1))
			continue;
		switch (bit) {
		case 0: bitmap4(&a); break;
		case 1: case 2: case 5: case 6: case 7: case 9: case 10: case 11: case 13: case 14:
		case 15: case 16: case 17: case 18: u32(&a); break;
		case 3: put(r, C_CHANGE4, "%llu", u64(&a)); break;
		case 4: u64(&a); break;
		case 8: skip(&a, 16); break;
		case 12: {
			uint32_t aces = u32(&a);
			for (uint32_t k = 0; k < aces && !a.bad; k++) {
				skip(&a, 12);
				opaque(&a, &n);
			}
			break;
		}
		case 19: opaque(&a, &n); break;
		case 20: put(r, C_FILEID4, "%llu", u64(&a)); break;
		}
		if (a.bad)
			return -1;
	}
	return 0;
}

/* A compound reply, up to and through its READDIR or GETATTR result; -1: not readable. */
static int reply4(struct run *r, struct xdr *x)
{
	uint32_t n;
	put(r, C_STATUS4, "%llu", u32(x));
	opaque(x, &n);
	uint32_t ops = u32(x);
	for (uint32_t i = 0; i < ops && !x->bad; i++) {
		uint32_t op = u32(x), status = u32(x);
		put(r, C_STATUS4, "%llu", status);
		if (x->bad)
			return -1;
		if (status != 0)
			return 0; /* a compound stops at the first failure */
		switch (op) {
		case 22: case 23: case 24: case 31: case 32: break;
		case 53: skip(x, 36); break;
		case 3: skip(x, 8); break;
		case 10: opaque(x, &n); break;
		case 9:
			if (fattr4_reply(r, x))
				return -1;
			break;
		case 26:
			skip(x, 8); /* cookie verifier */
			while (!x->bad && u32(x)) {
				put_raw(r, C_COOKIE4, u64(x));
				opaque(x, &n); /* name */
				bitmap4(x);
				opaque(x, &n); /* attributes */
			}
			put(r, C_EOF4, "%llu", u32(x));
			break;
		default:
			return -1;
		}
	}
	return x->bad ? -1 : 0;
}

/* ------------------------------------------------------------------ RPC */
static void set_unknown(struct run *r, const char *why)
{
	if (!r->unknown)
		r->unknown = why;
}

/* An NFSv3 call's arguments: the directory's filehandle and, for READDIR(PLUS), the cookie,
 * verifier and counts. 1 when the call is cut short (and said so), else 0. */
static int call3(struct run *r, struct xdr *x, int kind)
{
	uint32_t len;
	const uint8_t *fh = opaque(x, &len);
	if (fh)
		fh_hash(r, fh, len);
	if (kind != K_GETATTR3) {
		put(r, C_COOKIE3, "%llu", u64(x));
		const uint8_t *v = skip(x, 8);
		if (v) {
			char h[17];
			for (int i = 0; i < 8; i++)
				snprintf(h + 2 * i, 3, "%02x", v[i]);
			text_add(&r->t[C_VERF3], h, 16);
		}
		if (kind == K_READDIRPLUS3) {
			put(r, C_DIRCOUNT3, "%llu", u32(x));
			put(r, C_MAXCOUNT3, "%llu", u32(x));
		} else {
			put(r, C_COUNT3, "%llu", u32(x));
		}
	}
	if (x->bad) {
		set_unknown(r, "an NFSv3 call cut short");
		return 1;
	}
	return 0;
}

/* The reply to a call rpc_message kept (by key), its status and, accepted, its results. */
static int rpc_reply(struct run *r, struct xdr *x, uint32_t xid, uint64_t key)
{
	uint32_t len;
	struct call *c = call_slot(r, key, 0);
	if (!c)
		return 0;
	int kind = c->kind;
	call_drop(r, c);
	uint32_t replystat = u32(x), accept = 0;
	emit(r);
	put(r, C_XID, "0x%08llx", xid);
	put(r, C_MSGTYP, "%llu", 1);
	put(r, C_PROG, "%llu", NFS_PROGRAM);
	put(r, C_REPLYSTAT, "%llu", replystat);
	if (replystat == 0) {
		u32(x);
		opaque(x, &len);
		accept = u32(x);
		put(r, C_ACCEPT, "%llu", accept);
	}
	if (x->bad) {
		set_unknown(r, "an RPC reply cut short");
		return 0;
	}
	if (replystat == 0 && accept == 0) {
		if (kind == K_COMPOUND4 ? reply4(r, x) : (reply3(r, x, kind), x->bad ? -1 : 0)) {
			set_unknown(r, "an NFS reply it cannot read");
			return 0;
		}
	}
	return send_row(r);
}

/* One whole RPC message from the client (to_server) or the server. */
static int rpc_message(struct run *r, const uint8_t *p, size_t n, int to_server)
{
	struct xdr x = {p, p + n, 0};
	uint32_t xid = u32(&x), mtype = u32(&x), len;
	if (x.bad || mtype > 1)
		return 0;
	r->messages++;
	r->frame_had_rpc++;
	const char *client = to_server ? r->src : r->dst, *server = to_server ? r->dst : r->src;
	unsigned cport = to_server ? r->sport : r->dport, sport = to_server ? r->dport : r->sport;
	uint64_t key = conv_key(client, cport, server, sport, r->udp, xid);
	if (mtype == 0) {
		uint32_t rpcvers = u32(&x), prog = u32(&x), vers = u32(&x), proc = u32(&x);
		uint32_t flavor = u32(&x);
		opaque(&x, &len);
		u32(&x);
		opaque(&x, &len);
		if (x.bad || rpcvers != 2 || prog != NFS_PROGRAM)
			return 0;
		if (vers == 2 || vers == 3)
			r->versions |= 1u << vers;
		int kind = K_NONE;
		if (vers == 3 && (proc == 16 || proc == 17 || proc == 1))
			kind = proc == 16 ? K_READDIR3 : proc == 17 ? K_READDIRPLUS3 : K_GETATTR3;
		if (vers == 4 && proc == 1)
			kind = K_COMPOUND4;
		if (kind == K_NONE)
			return 0;
		if (flavor == 6) {
			set_unknown(r, "RPCSEC_GSS (Kerberos) calls");
			return 0;
		}
		emit(r);
		put(r, C_XID, "0x%08llx", xid);
		put(r, C_MSGTYP, "%llu", 0);
		put(r, C_PROG, "%llu", prog);
		put(r, C_VERS, "%llu", vers);
		put(r, C_PROC, "%llu", proc);
		if (kind == K_COMPOUND4) {
			int main = call4(r, &x);
			if (main < 0) {
				set_unknown(r, "an NFSv4 compound it cannot rank");
				return 0;
			}
			if (main != 26 && main != 9)
				return 0;
		} else if (call3(r, &x, kind)) {
			return 0;
		}
		struct call *c = call_slot(r, key, 1);
		if (!c) {
			PyErr_NoMemory();
			return -1;
		}
		c->kind = (uint8_t)kind;
		return send_row(r);
	}
	return rpc_reply(r, &x, xid, key);
}

/* ------------------------------------------------------------------ TCP streams */
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
static int streams_have_holes(struct run *r)
{
	for (size_t i = 0; i < r->streams_cap; i++)
		if (r->streams[i].key && r->streams[i].held)
			return 1;
	return 0;
}

static void stream_free_all(struct run *r)
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

static int tcp_segment(struct run *r, uint64_t key, uint32_t seq, int syn, int fin_rst,
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

/* ------------------------------------------------------------------ packets */
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
	size_t n4;
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
		return rpc_message(r, l4 + 8, n4 - 8, to_server);
	}
	size_t off = (size_t)(l4[12] >> 4) * 4;
	if (off < 20 || off > n4)
		return 0;
	r->port_frames++;
	uint32_t seq = (uint32_t)l4[4] << 24 | (uint32_t)l4[5] << 16 | (uint32_t)l4[6] << 8 | l4[7];
	h = mix(h, (uint64_t)r->sport << 16 | r->dport);
	return tcp_segment(r, h ? h : 1, seq, l4[13] & 2, l4[13] & 5, l4 + off, n4 - off, to_server);
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
	case 0: case 108: /* BSD loopback */
		if (n < 4)
			return 0;
		et = 0x0800, off = 4;
		break;
	case 12: case 14: case 101: case 228: case 229: /* raw IP */
		et = 0x0800, off = 0;
		break;
	default:
		set_unknown(r, "a link type it does not know");
		return 0;
	}
	if (et != 0x0800 && et != 0x86dd)
		return 0;
	if (off > n)
		return 0;
	return ip_packet(r, p + off, n - off);
}

static int frame(struct run *r, int linktype, const uint8_t *p, size_t n)
{
	r->frame++;
	r->frame_had_rpc = 0;
	unsigned long long before = r->port_frames;
	if (link_packet(r, linktype, p, n))
		return -1;
	if (r->caplen < r->len && r->port_frames != before)
		set_unknown(r, "frames cut short by the snaplen");
	if (r->frame_had_rpc)
		r->rpc_frames++;
	if (r->frame_had_rpc > 1)
		r->split_frames++;
	return 0;
}

/* ------------------------------------------------------------------ files */
struct in {
	gzFile f;
	uint8_t *buf;
	size_t cap;
};

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

static int read_pcap(struct run *r, struct in *in, const uint8_t *head)
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
				set_unknown(r, "a capture cut short");
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
			set_unknown(r, "a capture cut short");
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
	if ((int)ifid >= nifs) {
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

static int read_pcapng(struct run *r, struct in *in)
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
				set_unknown(r, "a capture cut short");
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
			set_unknown(r, "a capture cut short");
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

static PyObject *decode(PyObject *self, PyObject *args)
{
	const char *path;
	PyObject *ports, *cols, *cb;
	if (!PyArg_ParseTuple(args, "sOOO", &path, &ports, &cols, &cb))
		return NULL;
	struct run r;
	memset(&r, 0, sizeof r);
	r.callback = cb;
	PyObject *pl = PySequence_Fast(ports, "ports: a sequence");
	if (!pl)
		return NULL;
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(pl) && r.nports < 64; i++)
		r.ports[r.nports++] = (uint16_t)PyLong_AsLong(PySequence_Fast_GET_ITEM(pl, i));
	Py_DECREF(pl);
	r.ncols = PySequence_Length(cols);
	for (int c = 0; c < N_COLS; c++) {
		r.where[c] = -1;
		for (Py_ssize_t i = 0; i < r.ncols; i++) {
			PyObject *o = PySequence_GetItem(cols, i);
			int eq = o && PyUnicode_Check(o) && PyUnicode_CompareWithASCIIString(o, col_names[c]) == 0;
			Py_XDECREF(o);
			if (eq)
				r.where[c] = i;
		}
	}
	if (PyErr_Occurred())
		return NULL;
	struct in in = {gzopen(path, "rb"), NULL, 0};
	if (!in.f)
		return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
	gzbuffer(in.f, 1 << 18);
	int rc = 0;
	uint8_t head[4];
	if (gzread(in.f, head, 4) == 4) {
		uint32_t m;
		memcpy(&m, head, 4);
		if (m == 0x0a0d0d0a)
			rc = read_pcapng(&r, &in);
		else if (m == 0xa1b2c3d4 || m == 0xd4c3b2a1 || m == 0xa1b23c4d || m == 0x4d3cb2a1)
			rc = read_pcap(&r, &in, head);
		else
			set_unknown(&r, "not a pcap or pcapng file");
	}
	int errnum;
	const char *gzerr = gzerror(in.f, &errnum);
	int cut = !r.unknown && errnum != Z_OK && errnum != Z_BUF_ERROR ? 1 : 0;
	gzclose(in.f);
	free(in.buf);
	for (int c = 0; c < N_COLS; c++)
		free(r.t[c].p);
	if (!rc && streams_have_holes(&r))
		set_unknown(&r, "a TCP segment lost (a hole never filled)");
	stream_free_all(&r);
	if (rc)
		return NULL;
	if (cut)
		set_unknown(&r, gzerr);
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:s}", "frames", r.frame, "port_frames",
			     r.port_frames, "rpc_frames", r.rpc_frames, "split_frames", r.split_frames,
			     "messages", r.messages,
			     "retransmitted_segments", r.retransmitted, "reordered_segments",
			     r.reordered, "versions", r.versions, "unknown", r.unknown);
}

static PyMethodDef methods[] = {
	{"decode", decode, METH_VARARGS,
	 "decode(path, ports, columns, callback) -> stats: each NFS READDIR/GETATTR call and "
	 "reply as a row of the named columns, given to callback"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wiredecode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__wiredecode(void)
{
	return PyModule_Create(&module);
}
