/*
 * The compiled capture decoder (nfsreaddir.trace.wiredecode): pcap or pcapng, gzip'd or not ->
 * Ethernet / Linux cooked / raw IP -> IPv4 or IPv6 -> TCP reassembled per direction (or UDP
 * datagrams) on the server's ports -> ONC RPC record marking -> the NFS calls and replies the
 * wire analysis reads: NFSv3 READDIR, READDIRPLUS and GETATTR, and NFSv4 COMPOUNDs whose main
 * operation (as Wireshark ranks a compound's operations) is READDIR or GETATTR, read whole; every
 * other NFS and NFSACL (100227) call and its reply with their RPC header alone (program,
 * version, procedure, an NFSv4 compound's main operation), which a listing's round trips count.
 *
 * Each such message is handed to a Python callback as one row of tshark's -T fields text
 * (the columns are named by the caller, tshark_fields.FIELDS), so that the one matcher of
 * calls and replies (rpcmatch) reads both decoders' rows alike and tshark stays the oracle.
 * One exception: a reply's entry cookies are one bytes object of native 64-bit integers.
 *
 * What it does not know it says instead of guessing: decode() returns the reason in
 * stats["unknown"] (a lost segment, a frame cut by the snaplen, RPCSEC_GSS, a body it cannot
 * parse...), and the caller decodes the whole capture with tshark instead.
 *
 * This file holds the module's glue (decode(), its method table and PyInit); the parts are in
 * csrc/wiredecode/, what they share in csrc/wiredecode/wiredecode.h.
 */
#include "csrc/wiredecode/wiredecode.h"

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
