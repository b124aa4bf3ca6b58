/*
 * The call log: every NFS and NFSACL call of the capture and its reply's time, which a
 * listing's round trips are counted from (model/roundtrips, model/windows.wire_end), kept here
 * in columns as the messages are read and handed to rpcops.CallLog whole at the end: a Python
 * call per message cost a million-packet capture more than the rest of its decoding.
 *
 * It keeps what CallLog.message keeps from the rows of tshark's fields, the oracle: a call's
 * first transmission (one seen again with the same client and XID before its reply is counted
 * as retransmitted), the client named by the call's source and the reply's destination, and
 * for a READDIR its frame and the entries its reply carried.
 */
#include "wiredecode.h"

#define NFS_PROGRAM 100003

/* Grows the column p (a pointer to its values) to cap values: 0, or -1 with a Python error
 * set and p as it was. A macro: one for the columns of every type. */
#define GROW(p, cap) \
	((grown = realloc((p), (cap) * sizeof *(p))) ? ((p) = grown, 0) : (PyErr_NoMemory(), -1))

/* A numbering table's slot for `key`: the one whose thing `same` says is the one looked for,
 * or the free slot where it goes. */
static struct numbered *find(struct numbered *t, size_t cap, uint64_t key,
			     int (*same)(const struct calllog *, int64_t, const void *),
			     const struct calllog *log, const void *what)
{
	size_t j = home(key, cap);
	while (t[j].key && !(t[j].key == key && same(log, t[j].id, what)))
		j = (j + 1) & (cap - 1);
	return &t[j];
}

/* Room in a numbering table for one more (at most half full). */
static int room(struct numbered **t, size_t *cap, size_t n)
{
	if ((n + 1) * 2 <= *cap)
		return 0;
	size_t bigger = *cap ? *cap * 2 : 256;
	struct numbered *g = table_grow(*t, *cap, bigger, sizeof **t);
	if (!g) {
		PyErr_NoMemory();
		return -1;
	}
	*t = g, *cap = bigger;
	return 0;
}

static int same_client(const struct calllog *log, int64_t id, const void *what)
{
	return strcmp(log->clients[id], what) == 0;
}

static int same_op(const struct calllog *log, int64_t id, const void *what)
{
	const struct logop *a = &log->ops[id], *b = what;
	return a->prog == b->prog && a->vers == b->vers && a->proc == b->proc &&
	       a->mainop == b->mainop;
}

static uint64_t client_key(const char *name)
{
	uint64_t h = 1469598103934665603ULL;
	for (const char *s = name; *s; s++)
		h = mix(h, (uint8_t)*s);
	return h ? h : 1;
}

/* The client's number, a new one where add; -1 where it has none (or, with a Python error
 * set, where memory ran out). */
static int64_t client_no(struct calllog *log, const char *name, int add)
{
	uint64_t key = client_key(name);
	if (add && room(&log->client_slots, &log->client_slots_cap, log->nclients))
		return -1;
	if (!log->client_slots_cap)
		return -1;
	struct numbered *s =
		find(log->client_slots, log->client_slots_cap, key, same_client, log, name);
	if (s->key || !add)
		return s->key ? s->id : -1;
	if (log->nclients == log->capclients) {
		size_t cap = log->capclients ? log->capclients * 2 : 256;
		void *grown;
		if (GROW(log->clients, cap))
			return -1;
		log->capclients = cap;
	}
	snprintf(log->clients[log->nclients], sizeof *log->clients, "%s", name);
	s->key = key, s->id = (int64_t)log->nclients;
	return (int64_t)log->nclients++;
}

/* The operation's number (a new one the first time); -1 with a Python error set. */
static int64_t op_no(struct calllog *log, const struct logop *op)
{
	uint64_t key = mix(mix(mix(mix(1469598103934665603ULL, op->prog), op->vers), op->proc),
			   (uint64_t)op->mainop);
	key = key ? key : 1;
	if (room(&log->op_slots, &log->op_slots_cap, log->nops))
		return -1;
	struct numbered *s = find(log->op_slots, log->op_slots_cap, key, same_op, log, op);
	if (s->key)
		return s->id;
	if (log->nops == log->capops) {
		size_t cap = log->capops ? log->capops * 2 : 64;
		void *grown;
		if (GROW(log->ops, cap))
			return -1;
		log->capops = cap;
	}
	log->ops[log->nops] = *op;
	s->key = key, s->id = (int64_t)log->nops;
	return (int64_t)log->nops++;
}

/* The slot of a call awaiting its reply, or the free one where it goes. */
static struct logcall *pending_slot(struct calllog *log, uint64_t key)
{
	size_t j = home(key, log->pending_cap);
	while (log->pending[j].key && log->pending[j].key != key)
		j = (j + 1) & (log->pending_cap - 1);
	return &log->pending[j];
}

/* The column of a READDIR reply's entry cookies (-1: the call is no READDIR), as rpcops names
 * them: NFSv3 READDIR and READDIRPLUS, and a COMPOUND whose main operation is READDIR. */
static int cookies_column(const struct logop *op)
{
	if (op->prog != NFS_PROGRAM)
		return -1;
	if (op->vers == 3 && (op->proc == 16 || op->proc == 17))
		return op->proc == 16 ? C_ECOOKIE3 : C_EPCOOKIE3;
	if (op->vers == 4 && op->proc == 1 && op->mainop == 26)
		return C_COOKIE4;
	return -1;
}

/* A call of the frame being read (mainop: an NFSv4 COMPOUND's main operation, else -1). 0, or
 * -1 with a Python error set. */
int log_call(struct run *r, uint32_t xid, uint32_t prog, uint32_t vers, uint32_t proc,
	     int64_t mainop)
{
	struct calllog *log = &r->log;
	char name[sizeof *log->clients];
	frame_client(r, 1, name, sizeof name);
	int64_t client = client_no(log, name, 0);
	if (client < 0 && PyErr_Occurred())
		return -1;
	uint64_t key = 0;
	if (client >= 0) {
		key = (uint64_t)(client + 1) << 32 | xid;
		if (log->pending_cap && pending_slot(log, key)->key) {
			log->retransmitted++;
			return 0;
		}
	} else {
		client = client_no(log, name, 1);
		if (client < 0)
			return -1;
		key = (uint64_t)(client + 1) << 32 | xid;
	}
	struct logop op = { prog, vers, proc, mainop, 0 };
	op.cookies = cookies_column(&op);
	int64_t no = op_no(log, &op);
	if (no < 0)
		return -1;
	if (log->n == log->cap) {
		size_t cap = log->cap ? log->cap * 2 : 4096;
		void *grown;
		if (GROW(log->ts, cap) || GROW(log->reply_ts, cap) || GROW(log->xid, cap) ||
		    GROW(log->client, cap) || GROW(log->op, cap))
			return -1;
		log->cap = cap;
	}
	size_t row = log->n++;
	log->ts[row] = (int64_t)r->ts_ns;
	log->reply_ts[row] = -1;
	log->xid[row] = xid;
	log->client[row] = (int32_t)client;
	log->op[row] = (int32_t)no;
	int64_t readdir = -1;
	if (op.cookies >= 0) {
		if (log->nrd == log->caprd) {
			size_t cap = log->caprd ? log->caprd * 2 : 1024;
			void *grown;
			if (GROW(log->rd_row, cap) || GROW(log->rd_frame, cap) ||
			    GROW(log->rd_entries, cap))
				return -1;
			log->caprd = cap;
		}
		readdir = (int64_t)log->nrd++;
		log->rd_row[readdir] = (int64_t)row;
		log->rd_frame[readdir] = (int64_t)r->frame;
		log->rd_entries[readdir] = -1;
	}
	if ((log->npending + 1) * 2 > log->pending_cap) {
		size_t cap = log->pending_cap ? log->pending_cap * 2 : 1024;
		struct logcall *g = table_grow(log->pending, log->pending_cap, cap, sizeof *g);
		if (!g) {
			PyErr_NoMemory();
			return -1;
		}
		log->pending = g, log->pending_cap = cap;
	}
	struct logcall *c = pending_slot(log, key);
	c->key = key, c->row = row, c->readdir = readdir;
	log->npending++;
	return 0;
}

/* The first value of a column of the row, as text: 1 where it is "0" or there is none (the
 * reply's status, as rpcops reads it: NFSv3's, else NFSv4's). */
static int status_ok(const struct run *r)
{
	const struct text *t = r->t[C_STATUS3].n ? &r->t[C_STATUS3] : &r->t[C_STATUS4];
	return !t->n || (t->p[0] == '0' && (t->n == 1 || t->p[1] == ','));
}

/* A reply of the frame being read, to the call it answers if the log has it. row_read: the
 * reply's row was filled (its status and entries read), else it counts as one without them.
 * 0, or -1 with a Python error set. */
int log_reply(struct run *r, uint32_t xid, int row_read)
{
	struct calllog *log = &r->log;
	char name[sizeof *log->clients];
	frame_client(r, 0, name, sizeof name);
	int64_t client = client_no(log, name, 0);
	if (client < 0 || !log->pending_cap)
		return 0;
	struct logcall *c = pending_slot(log, (uint64_t)(client + 1) << 32 | xid);
	if (!c->key)
		return 0;
	size_t row = c->row;
	int64_t readdir = c->readdir;
	table_drop(log->pending, log->pending_cap, sizeof *c, (size_t)(c - log->pending));
	log->npending--;
	log->reply_ts[row] = (int64_t)r->ts_ns;
	if (readdir < 0 || (row_read && !status_ok(r)))
		return 0;
	int col = log->ops[log->op[row]].cookies;
	log->rd_entries[readdir] = row_read && r->raw[col] ? (int64_t)(r->t[col].n / 8) : 0;
	return 0;
}

/* Into the dict d under name: value, its reference taken; -1 where value is NULL (an error
 * set) or cannot be put. */
static int put_item(PyObject *d, const char *name, PyObject *value)
{
	int rc = value ? PyDict_SetItemString(d, name, value) : -1;
	Py_XDECREF(value);
	return rc;
}

static PyObject *column(const void *p, size_t n, size_t size)
{
	return PyBytes_FromStringAndSize(p ? p : "", (Py_ssize_t)(n * size));
}

/* The log for rpcops.CallLog.decoded: its columns as bytes of native integers (int64, but
 * client and op int32), the clients' names and the operations' (program, version, procedure,
 * main operation or None) by number, and the retransmitted calls. NULL with an error set. */
PyObject *log_result(struct run *r)
{
	struct calllog *log = &r->log;
	PyObject *d = PyDict_New();
	PyObject *clients = PyList_New((Py_ssize_t)log->nclients);
	PyObject *ops = PyList_New((Py_ssize_t)log->nops);
	for (size_t i = 0; clients && i < log->nclients; i++) {
		PyObject *s = PyUnicode_DecodeASCII(log->clients[i],
						    (Py_ssize_t)strlen(log->clients[i]), "replace");
		if (!s)
			Py_CLEAR(clients);
		else
			PyList_SET_ITEM(clients, (Py_ssize_t)i, s);
	}
	for (size_t i = 0; ops && i < log->nops; i++) {
		const struct logop *o = &log->ops[i];
		PyObject *t = o->mainop < 0
				      ? Py_BuildValue("(IIIO)", o->prog, o->vers, o->proc, Py_None)
				      : Py_BuildValue("(IIIL)", o->prog, o->vers, o->proc,
						      (long long)o->mainop);
		if (!t)
			Py_CLEAR(ops);
		else
			PyList_SET_ITEM(ops, (Py_ssize_t)i, t);
	}
	if (!d) {
		Py_XDECREF(clients);
		Py_XDECREF(ops);
		return NULL;
	}
	int bad = put_item(d, "clients", clients);
	bad = put_item(d, "ops", ops) || bad;
	if (bad || put_item(d, "ts", column(log->ts, log->n, 8)) ||
	    put_item(d, "reply_ts", column(log->reply_ts, log->n, 8)) ||
	    put_item(d, "xid", column(log->xid, log->n, 8)) ||
	    put_item(d, "client", column(log->client, log->n, 4)) ||
	    put_item(d, "op", column(log->op, log->n, 4)) ||
	    put_item(d, "readdir_row", column(log->rd_row, log->nrd, 8)) ||
	    put_item(d, "readdir_frame", column(log->rd_frame, log->nrd, 8)) ||
	    put_item(d, "readdir_entries", column(log->rd_entries, log->nrd, 8)) ||
	    put_item(d, "retransmitted", PyLong_FromUnsignedLongLong(log->retransmitted))) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

void log_free(struct run *r)
{
	struct calllog *log = &r->log;
	free(log->ts);
	free(log->reply_ts);
	free(log->xid);
	free(log->client);
	free(log->op);
	free(log->rd_row);
	free(log->rd_frame);
	free(log->rd_entries);
	free(log->clients);
	free(log->client_slots);
	free(log->ops);
	free(log->op_slots);
	free(log->pending);
	memset(log, 0, sizeof *log);
}
