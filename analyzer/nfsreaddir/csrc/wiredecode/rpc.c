/*
 * ONC RPC: one whole call or reply message, matched with its call by conversation and XID,
 * and given to the NFS bodies.
 */
#include "wiredecode.h"

#define NFS_PROGRAM 100003
#define NFSACL_PROGRAM 100227

/* The reply to a call rpc_message kept (by key), its status and, accepted, its results. */
static int rpc_reply(struct run *r, struct xdr *x, uint32_t xid, uint64_t key, int to_server)
{
	uint32_t len;
	struct call *c = call_slot(r, key, 0);
	if (!c) /* (a client's reply answers the server's callback) */
		return to_server ? 0 : orphan_add(r, x, xid);
	int kind = c->kind;
	uint32_t prog = c->prog;
	call_drop(r, c);
	uint32_t replystat = u32(x), accept = 0;
	if (replystat == 0) {
		u32(x);
		opaque(x, &len);
		accept = u32(x);
	}
	if (x->bad) {
		set_unknown(r, "an RPC reply cut short");
		return 0;
	}
	if (kind == K_OTHER)
		return log_reply(r, xid, 0); /* the log's alone: no row, its body not read */
	row_clear(r);
	emit(r);
	put(r, C_XID, "0x%08llx", xid);
	put(r, C_MSGTYP, "%llu", 1);
	put(r, C_PROG, "%llu", prog);
	put(r, C_REPLYSTAT, "%llu", replystat);
	if (replystat == 0)
		put(r, C_ACCEPT, "%llu", accept);
	if (replystat == 0 && accept == 0) {
		if (kind == K_COMPOUND4 ? reply4(r, x) : (reply3(r, x, kind), x->bad ? -1 : 0)) {
			set_unknown(r, "an NFS reply it cannot read");
			return 0;
		}
	}
	return log_reply(r, xid, 1) ? -1 : send_row(r);
}

/* One whole RPC message from the client (to_server) or the server. */
int rpc_message(struct run *r, const uint8_t *p, size_t n, int to_server)
{
	struct xdr x = { p, p + n, 0 };
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
		if (x.bad || rpcvers != 2 || (prog != NFS_PROGRAM && prog != NFSACL_PROGRAM))
			return 0;
		if (prog == NFS_PROGRAM && (vers == 2 || vers == 3))
			r->versions |= 1u << vers;
		int kind = K_OTHER;
		int64_t mainop = -1; /* an NFSv4 COMPOUND's main operation, for the call log */
		if (prog == NFS_PROGRAM && vers == 3 && (proc == 16 || proc == 17 || proc == 1))
			kind = proc == 16 ? K_READDIR3 : proc == 17 ? K_READDIRPLUS3 : K_GETATTR3;
		if (prog == NFS_PROGRAM && vers == 4 && proc == 1)
			kind = K_COMPOUND4;
		if (flavor == 6 && kind != K_OTHER) {
			set_unknown(r, "RPCSEC_GSS (Kerberos) calls");
			return 0;
		}
		row_clear(r); /* the bodies' columns: the rest once the row is known to be sent */
		if (kind == K_COMPOUND4) {
			int main = call4(r, &x);
			if (main < 0) {
				set_unknown(r, "an NFSv4 compound it cannot rank");
				return 0;
			}
			mainop = main;
			if (main != 26 && main != 9)
				kind = K_OTHER; /* counted; its reply not read */
		} else if (kind != K_OTHER && call3(r, &x, kind)) {
			return 0;
		}
		struct call *c = call_slot(r, key, 1);
		if (!c) {
			PyErr_NoMemory();
			return -1;
		}
		c->kind = (uint8_t)kind;
		c->prog = prog;
		if (log_call(r, xid, prog, vers, proc, mainop))
			return -1;
		if (kind == K_OTHER)
			return 0; /* the log's alone: no row */
		emit(r);
		put(r, C_XID, "0x%08llx", xid);
		put(r, C_MSGTYP, "%llu", 0);
		put(r, C_PROG, "%llu", prog);
		put(r, C_VERS, "%llu", vers);
		put(r, C_PROC, "%llu", proc);
		return send_row(r);
	}
	return rpc_reply(r, &x, xid, key, to_server);
}
