/*
 * What the parts of the capture decoder (nfsreaddir._wiredecode, its entry file
 * analyzer/nfsreaddir/_wiredecode.c) share: the columns of a row, the text buffers, the XDR
 * reader, a decode run's state, the calls awaiting replies and the functions called from
 * another part. The XDR reader and the hashes are inline here, as they were in the one file:
 * they are called for every word and every packet.
 */
#ifndef NFSREADDIR_WIREDECODE_H
#define NFSREADDIR_WIREDECODE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Only PyInit__wiredecode leaves the module: the parts' names (put, frame, join...) are no
 * other library's to interpose. */
#pragma GCC visibility push(hidden)

/* ------------------------------------------------------------------ columns of a row */
enum {
	C_FRAME,
	C_TS,
	C_CAPLEN,
	C_LEN,
	C_SRC,
	C_DST,
	C_SRC6,
	C_DST6,
	C_SPORT,
	C_DPORT,
	C_USPORT,
	C_UDPORT,
	C_XID,
	C_MSGTYP,
	C_PROG,
	C_VERS,
	C_PROC,
	C_REPLYSTAT,
	C_ACCEPT,
	C_MAINOP,
	C_MINOR,
	C_FH,
	C_COOKIE4,
	C_VERF4,
	C_DIRCOUNT4,
	C_MAXCOUNT4,
	C_EOF4,
	C_STATUS4,
	C_CHANGE4,
	C_FILEID4,
	C_COOKIE3,
	C_VERF3,
	C_COUNT3,
	C_DIRCOUNT3,
	C_MAXCOUNT3,
	C_ECOOKIE3,
	C_EPCOOKIE3,
	C_EOF3,
	C_STATUS3,
	C_MTIME_S,
	C_MTIME_NS,
	C_CTIME_S,
	C_CTIME_NS,
	C_FILEID3,
	N_COLS
};
extern const char *const col_names[N_COLS];

/* A growing text buffer: one column's values, comma-joined. */
struct text {
	char *p;
	size_t n, cap;
};

/* ------------------------------------------------------------------ XDR */
struct xdr {
	const uint8_t *p, *end;
	int bad;
};

static inline uint32_t u32(struct xdr *x)
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

static inline uint64_t u64(struct xdr *x)
{
	uint64_t hi = u32(x);
	return hi << 32 | u32(x);
}

/* n bytes and their padding; NULL when the message is shorter */
static inline const uint8_t *skip(struct xdr *x, uint32_t n)
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

static inline const uint8_t *opaque(struct xdr *x, uint32_t *n)
{
	*n = u32(x);
	return skip(x, *n);
}

/* ------------------------------------------------------------------ the call log (calllog.c) */
/* A slot of an open-addressing table that numbers what it holds (the log's clients and
 * operations): the key (a hash, 0 for a free slot) and the number. */
struct numbered {
	uint64_t key;
	int64_t id;
};

/* An operation of the log, as rpcops.op_name names it: program, version, procedure and an
 * NFSv4 COMPOUND's main operation (-1 for any other call); and the reply's column of entry
 * cookies where it is a READDIR (-1 where not). */
struct logop {
	uint32_t prog, vers, proc;
	int64_t mainop;
	int cookies;
};

/* A call logged and awaiting its reply: key (client number + 1) << 32 | XID, its row and its
 * row among the READDIRs (-1: not one). */
struct logcall {
	uint64_t key;
	uint64_t row;
	int64_t readdir;
};

/* Every NFS and NFSACL call, its first transmission, as rpcops.CallLog keeps them, in columns
 * (a big capture has millions of calls: 32 bytes each): time, its reply's time (-1: none),
 * XID, client and operation (their numbers in clients and ops); a READDIR's row, frame and its
 * reply's entries (-1: none) in columns of their own. */
struct calllog {
	int64_t *ts, *reply_ts, *xid;
	int32_t *client, *op;
	size_t n, cap;
	int64_t *rd_row, *rd_frame, *rd_entries;
	size_t nrd, caprd;
	char (*clients)[56]; /* "addr:port", as tshark_fields.endpoint names it */
	size_t nclients, capclients;
	struct numbered *client_slots;
	size_t client_slots_cap;
	struct logop *ops;
	size_t nops, capops;
	struct numbered *op_slots;
	size_t op_slots_cap;
	struct logcall *pending;
	size_t npending, pending_cap;
	unsigned long long retransmitted; /* calls seen again before their reply */
};

/* ------------------------------------------------------------------ a decode run */
struct run {
	PyObject *callback;
	PyObject *cols; /* the caller's column order: its index for each of ours */
	Py_ssize_t ncols, where[N_COLS];
	struct text t[N_COLS];
	char raw[N_COLS];    /* the column holds raw_add's values (bytes), not text */
	const char *unknown; /* why tshark must decode this capture instead */
	const char *cut;     /* how the file ends before its end: the packets after are not in it */
	int failed;	     /* a Python error is set */
	/* the frame being read */
	unsigned long long frame, ts_ns;
	uint32_t caplen, len;
	char src[48], dst[48];
	int v6, udp;
	unsigned sport, dport;
	/* what the capture holds */
	unsigned long long port_frames, rpc_frames, split_frames, messages, retransmitted,
		reordered;
	unsigned long long udp_frames, truncated; /* truncated: frames cut by the snaplen */
	uint32_t snaplen;			  /* the longest of them */
	int frame_had_rpc;			  /* RPC messages the frame completed */
	unsigned versions;			  /* bit 2: v2, 3: v3, 8 + minor: v4.minor */
	uint16_t ports[64];
	int nports;
	/* the calls awaiting replies and the TCP streams: this run's own, so that two threads'
	 * runs (the callback lets the GIL go) never share a table */
	struct call *calls;
	size_t ncalls, calls_cap;
	struct stream *streams;
	size_t nstreams, streams_cap;
	/* the bytes the capture lost, in the order they are known (tcp.c) */
	struct hole *holes;
	size_t nholes, holes_cap;
	/* the replies whose call the capture lost, and what each answered (gaps.c) */
	struct orphan *orphans;
	size_t norphans, orphans_cap;
	struct calllog log;
};

/* Bytes of a TCP stream the capture lost: its client ("addr:port"), from the last segment
 * with bytes before them to the one after (ns), how many, whether the snaplen cut them from a
 * frame (then from = to, that frame's time) rather than a packet was not captured, and
 * whether they were on their way to the server (calls) rather than to the client (replies). */
struct hole {
	char client[56];
	unsigned long long from, to, bytes;
	int cut, to_server;
};

/* A reply whose call the capture does not have: its client, XID, time (ns), and the
 * operation it answers where the reply says (an NFSv4 COMPOUND's first operation after
 * SEQUENCE and the PUTFHs), else -1. A hole on the way to the server hid that call. */
struct orphan {
	char client[56];
	uint32_t xid;
	int op;
	unsigned long long ts;
};

/* K_OTHER: any other NFS or NFSACL call, in the call log alone (calllog.c): its body not read */
enum { K_NONE, K_READDIR3, K_READDIRPLUS3, K_GETATTR3, K_COMPOUND4, K_OTHER };

/* A key's first slot in a table of cap slots (a power of two). Not the key's low bits: mix()
 * ends with a multiplication, which carries a bit only upward, so the segments towards one
 * server, whose connections differ in the client port alone, had keys with the same low bits
 * and every lookup walked the slots of every connection (a quarter of the decoder's time at
 * 2,381 connections, growing with them). The high half of a product depends on every bit. */
static inline size_t home(uint64_t key, size_t cap)
{
	return (size_t)((key ^ key >> 32) * 0x9e3779b97f4a7c15ULL >> 32) & (cap - 1);
}

struct call {
	uint64_t key; /* 0: free */
	uint8_t kind;
	uint32_t prog; /* the call's program: its reply says only the XID */
};

static inline uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdULL;
}

/* A big-endian word (a record mark, an RPC header's) at p. */
static inline uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ------------------------------------------------------------------ TCP streams (tcp.c, gaps.c) */
#define HEAD 28 /* a record mark and the longest header a hunt for one reads (tcp.c) */

/* Bytes of a stream not seen, not yet filled by a segment coming late: [from, to) in the
 * stream's unwrapped positions, between the segments at since and until (ns). aligned: the
 * stream stood between two records at `from`, so a late segment beginning there begins one. */
struct gap {
	uint64_t from, to;
	unsigned long long since, until;
	int aligned;
};

struct stream {
	uint64_t key;		    /* 0: free */
	uint32_t next_seq;	    /* the next byte's sequence number */
	uint64_t pos;		    /* and its position, unwrapped */
	unsigned long long last_ts; /* the last segment with bytes (or SYN, FIN) */
	int seen, synced, dead;
	/* the record under way lost bytes: 1, read to its end and dropped; 2, its rec keeps their
	 * place (hole_len bytes at hole_off, the stream's bytes from hole_at on), so that a
	 * segment coming late with them makes it whole again, before its end or (pend) after */
	int broken;
	size_t hole_off;
	uint32_t hole_len;
	uint64_t hole_at;
	uint8_t *pend; /* a record whole but for its hole, waiting for the late segment */
	size_t npend, pend_off;
	uint32_t pend_len;
	uint64_t pend_at;
	uint8_t mark[4];
	int nmark;
	uint32_t frag_left;
	int last_frag;
	uint8_t *rec;
	size_t nrec, caprec;
	/* hunting (not synced): the last bytes seen, ending at next_seq, whose offsets from
	 * HEAD - 1 on are not tried yet; bit i of starts: tail[i] began a segment */
	uint8_t tail[HEAD];
	size_t ntail;
	uint32_t starts;
	struct gap *gaps;
	size_t ngaps, capgaps;
	/* After a gap where the stream stood between two records: the bytes past it, from
	 * orph_at on, that the hunt for a record mark passed over (orph_state 1 while it hunts, 2
	 * once it found one, 0 none kept), for the gap's segment if it comes late (gaps_fill). */
	uint8_t *orph;
	size_t norph, caporph;
	uint64_t orph_at;
	int orph_state;
	int late_age;	    /* in-order segments since the bytes kept for a late one were */
	size_t resync_back; /* a hunt's find: bytes from it to the end of what the hunt was given */
	char client[56];    /* "addr:port", as tshark_fields.endpoint names it */
	int to_server;	    /* the stream's bytes go to the server */
};

#define MAX_ORPHAN (1u << 20) /* past this the bytes after a gap are not kept */
/* A segment comes late by a few segments where a capture reorders (two queues of a bridge):
 * what is kept for it is freed after this many more in order. */
#define LATE_WINDOW 8

/* the state of the file being read (files.c) */
struct in {
	gzFile f;
	uint8_t *buf;
	size_t cap;
};

/* rows.c: a row's columns and its hand-over to Python */
int text_add(struct text *t, const char *s, size_t n);
int put_raw(struct run *r, int c, uint64_t v);
int put(struct run *r, int c, const char *fmt, unsigned long long v);
void row_clear(struct run *r);
int emit(struct run *r);
int send_row(struct run *r);
void set_unknown(struct run *r, const char *why);

/* tables.c: the open-addressing tables, and the calls awaiting replies */
void *table_grow(void *old, size_t old_cap, size_t cap, size_t size);
uint64_t conv_key(const char *client, unsigned cport, const char *server, unsigned sport, int udp,
		  uint32_t xid);
struct call *call_slot(struct run *r, uint64_t key, int add);
void call_drop(struct run *r, struct call *c);
void table_drop(void *t, size_t cap, size_t size, size_t i);

/* calllog.c: every NFS and NFSACL call and its reply, for the round trips */
int log_call(struct run *r, uint32_t xid, uint32_t prog, uint32_t vers, uint32_t proc,
	     int64_t mainop);
int log_reply(struct run *r, uint32_t xid, int row_read);
PyObject *log_result(struct run *r);
void log_free(struct run *r);

/* nfs.c: NFSv3 and NFSv4 call and reply bodies */
int call3(struct run *r, struct xdr *x, int kind);
void reply3(struct run *r, struct xdr *x, int kind);
int call4(struct run *r, struct xdr *x);
int reply4(struct run *r, struct xdr *x);

/* rpc.c: one ONC RPC message */
int rpc_message(struct run *r, const uint8_t *p, size_t n, int to_server);

/* tcp.c: TCP reassembly and record marking */
int tcp_segment(struct run *r, uint64_t key, uint32_t seq, int syn, int fin, const uint8_t *p,
		size_t n, size_t wire, int to_server);
int stream_bytes(struct run *r, struct stream *s, const uint8_t *p, size_t n, int to_server);
void record_reset(struct stream *s);
void stream_free_all(struct run *r);

/* gaps.c: the holes of the streams, and segments that come late into them */
int hole_add(struct run *r, const char *client, unsigned long long from, unsigned long long to,
	     unsigned long long bytes, int cut, int to_server);
void frame_client(const struct run *r, int to_server, char *out, size_t size);
int orphan_add(struct run *r, struct xdr *x, uint32_t xid);
int gap_add(struct stream *s, struct gap g);
int gaps_flush(struct run *r, struct stream *s);
int gaps_fill(struct run *r, struct stream *s, uint64_t at, const uint8_t *p, size_t n, size_t step,
	      int to_server);
int streams_end(struct run *r);

/* packets.c: link, IP and port layers of one frame */
int frame(struct run *r, int linktype, const uint8_t *p, size_t n);

/* files.c: pcap and pcapng, gzip'd or not */
int read_pcap(struct run *r, struct in *in, const uint8_t *head);
int read_pcapng(struct run *r, struct in *in);

#pragma GCC visibility pop

#endif
