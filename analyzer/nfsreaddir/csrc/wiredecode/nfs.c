/*
 * The NFS bodies the capture decoder reads: NFSv3 READDIR, READDIRPLUS and GETATTR calls and
 * replies, and NFSv4 COMPOUNDs ranked as Wireshark ranks them.
 */
#include "wiredecode.h"

static void fh_hash(struct run *r, const uint8_t *p, uint32_t n)
{
	put(r, C_FH, "0x%08llx", crc32(0L, p, n));
}

static void fattr3(struct run *r, struct xdr *x)
{
	const uint8_t *a = skip(x, 84);
	if (!a)
		return;
	struct xdr f = { a + 52, a + 84, 0 };
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

void reply3(struct run *r, struct xdr *x, int kind)
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
		put(r, C_VERF3, "%016llx",
		    (unsigned long long)v[0] << 56 | (unsigned long long)v[1] << 48 |
			    (unsigned long long)v[2] << 40 | (unsigned long long)v[3] << 32 |
			    (unsigned long long)v[4] << 24 | (unsigned long long)v[5] << 16 |
			    (unsigned long long)v[6] << 8 | v[7]);
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
	case 53: return 5; /* SEQUENCE */
	case 10:
	case 22:
	case 31:
	case 32: return 4; /* GETFH PUTFH RESTOREFH SAVEFH */
	case 9:
	case 23:
	case 24: return 3; /* GETATTR PUTPUBFH PUTROOTFH */
	case 3:
	case 17: return 2; /* ACCESS NVERIFY */
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
	case 3:
	case 45:
	case 52:
	case 58: u32(x); return 1;     /* ACCESS FREE_STATEID.. */
	case 4: skip(x, 20); return 1; /* CLOSE */
	case 5: skip(x, 12); return 1; /* COMMIT */
	case 8: skip(x, 16); return 1; /* DELEGRETURN */
	case 9: bitmap4(x); return 1;  /* GETATTR */
	case 10:
	case 16:
	case 23:
	case 24:
	case 27:
	case 31:
	case 32: return 1;
	case 15:
	case 28:
	case 33: opaque(x, &n); return 1; /* LOOKUP REMOVE SECINFO */
	case 29:
		opaque(x, &n);
		opaque(x, &n);
		return 1; /* RENAME */
	case 30:
	case 57: u64(x); return 1; /* RENEW DESTROY_CLIENTID */
	case 17:
	case 37:
		bitmap4(x);
		opaque(x, &n);
		return 1; /* NVERIFY VERIFY */
	case 34:
		skip(x, 16);
		bitmap4(x);
		opaque(x, &n);
		return 1;		/* SETATTR */
	case 25: skip(x, 28); return 1; /* READ */
	case 38:
		skip(x, 28);
		opaque(x, &n);
		return 1;		/* WRITE */
	case 53: skip(x, 32); return 1; /* SEQUENCE */
	case 22:			/* PUTFH */
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
int call4(struct run *r, struct xdr *x)
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
	uint32_t nw = u32(x), w[8] = { 0 }, n;
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
	struct xdr a = { vals, vals + n, 0 };
	for (int bit = 0; bit <= 20; bit++) {
		if (!(w[bit / 32] >> (bit % 32) & 1))
			continue;
		switch (bit) {
		case 0: bitmap4(&a); break;
		case 1:
		case 2:
		case 5:
		case 6:
		case 7:
		case 9:
		case 10:
		case 11:
		case 13:
		case 14:
		case 15:
		case 16:
		case 17:
		case 18: u32(&a); break;
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
int reply4(struct run *r, struct xdr *x)
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
		case 22:
		case 23:
		case 24:
		case 31:
		case 32: break;
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
		default: return -1;
		}
	}
	return x->bad ? -1 : 0;
}

/* An NFSv3 call's arguments: the directory's filehandle and, for READDIR(PLUS), the cookie,
 * verifier and counts. 1 when the call is cut short (and said so), else 0. */
int call3(struct run *r, struct xdr *x, int kind)
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
