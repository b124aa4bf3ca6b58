/*
 * The compiled capture decoder (nfsreaddir.trace.wiredecode): pcap or pcapng, gzip'd or not ->
 * Ethernet / Linux cooked / raw IP -> IPv4 or IPv6 -> TCP reassembled per direction (or UDP
 * datagrams) on the server's ports -> ONC RPC record marking -> the NFS calls and replies the
 * wire analysis reads: NFSv3 READDIR, READDIRPLUS and GETATTR, and NFSv4 COMPOUNDs whose main
 * operation (as Wireshark ranks a compound's operations) is READDIR or GETATTR, read whole; every
 * other NFS and NFSACL (100227) call and its reply with their RPC header alone (program,
 * version, procedure, an NFSv4 compound's main operation), which a listing's round trips count.
 *
 * Each READDIR and GETATTR message is handed to a Python callback as one row of tshark's -T
 * fields text (the columns are named by the caller, tshark_fields.FIELDS), so that the one
 * matcher of calls and replies (rpcmatch) reads both decoders' rows alike and tshark stays the
 * oracle. One exception: a reply's entry cookies are one bytes object of native 64-bit
 * integers. Every NFS and NFSACL call, those included, goes into the call log
 * (csrc/wiredecode/calllog.c), returned whole in stats["calls"] for rpcops.CallLog: no row,
 * no Python call, for the calls the round trips alone count.
 *
 * What the capture lost it reads through and reports: stats["holes"], the bytes of each TCP
 * stream not captured (a packet dropped, a frame cut by the snaplen: csrc/wiredecode/tcp.c),
 * and stats["cut"], a file (or its gzip stream) that ends inside a packet. What it does not
 * know it says instead of guessing: decode() returns the reason in stats["unknown"] (IP
 * fragments, RPCSEC_GSS, a body it cannot parse...), and the caller decodes the whole capture
 * with tshark instead.
 *
 * This file holds the module's glue (decode(), its method table and PyInit); the parts are in
 * csrc/wiredecode/, what they share in csrc/wiredecode/wiredecode.h.
 */
#include "csrc/wiredecode/wiredecode.h"

static PyObject *decode(PyObject *Py_UNUSED(self), PyObject *args)
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
			int eq = o && PyUnicode_Check(o) &&
				 PyUnicode_CompareWithASCIIString(o, col_names[c]) == 0;
			Py_XDECREF(o);
			if (eq)
				r.where[c] = i;
		}
	}
	if (PyErr_Occurred())
		return NULL;
	struct in in = { gzopen(path, "rb"), NULL, 0 };
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
	gzerror(in.f, &errnum);
	/* zlib says Z_BUF_ERROR where the gzip stream ends before its end, an error of its own
	 * where its bytes are damaged: the packets read up to there are the capture's. */
	if (errnum == Z_BUF_ERROR)
		r.cut = "the capture's gzip stream is cut short";
	else if (errnum != Z_OK && errnum != Z_STREAM_END)
		r.cut = "the capture's gzip stream is damaged";
	gzclose(in.f);
	free(in.buf);
	for (int c = 0; c < N_COLS; c++)
		free(r.t[c].p);
	if (!rc && streams_end(&r))
		rc = -1;
	stream_free_all(&r);
	PyObject *calls = rc ? NULL : log_result(&r);
	log_free(&r);
	PyObject *holes = calls ? PyList_New((Py_ssize_t)r.nholes) : NULL;
	for (size_t i = 0; holes && i < r.nholes; i++) {
		const struct hole *h = &r.holes[i];
		PyObject *t = Py_BuildValue("(sKKOKO)", h->client, h->from, h->to,
					    h->cut ? Py_True : Py_False, h->bytes,
					    h->to_server ? Py_True : Py_False);
		if (!t)
			Py_CLEAR(holes);
		else
			PyList_SET_ITEM(holes, (Py_ssize_t)i, t);
	}
	free(r.holes);
	PyObject *orphans = holes ? PyList_New((Py_ssize_t)r.norphans) : NULL;
	for (size_t i = 0; orphans && i < r.norphans; i++) {
		const struct orphan *o = &r.orphans[i];
		PyObject *t = Py_BuildValue("(sIiK)", o->client, o->xid, o->op, o->ts);
		if (!t)
			Py_CLEAR(orphans);
		else
			PyList_SET_ITEM(orphans, (Py_ssize_t)i, t);
	}
	free(r.orphans);
	if (!orphans) {
		Py_XDECREF(holes);
		Py_XDECREF(calls);
		return NULL;
	}
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:s,s:s,s:N,s:N,s:K,s:K,s:I,s:N}",
			     "frames", r.frame, "port_frames", r.port_frames, "rpc_frames",
			     r.rpc_frames, "split_frames", r.split_frames, "messages", r.messages,
			     "retransmitted_segments", r.retransmitted, "reordered_segments",
			     r.reordered, "versions", r.versions, "unknown", r.unknown, "cut",
			     r.cut, "holes", holes, "orphans", orphans, "udp_frames", r.udp_frames,
			     "truncated_frames", r.truncated, "snaplen", r.snaplen, "calls", calls);
}

static PyMethodDef methods[] = {
	{ "decode", decode, METH_VARARGS,
	  "decode(path, ports, columns, callback) -> stats: each NFS READDIR/GETATTR call and "
	  "reply as a row of the named columns, given to callback; every NFS and NFSACL call "
	  "in stats['calls'] (rpcops.CallLog.decoded)" },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "_wiredecode", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wiredecode(void)
{
	return PyModule_Create(&module);
}
