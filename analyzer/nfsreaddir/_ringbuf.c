/*
 * The ring-buffer walk of nfsreaddir.trace in C: one pass over a block of whole
 * ring-buffer pages that lists the event records (data offset, time stamp, data length,
 * event id) of the wanted events, the lost-events markers, and where the data is damaged
 * (walk(), for the decoders: ints(), strings()); and the same pass writing the wanted fields
 * of those records straight into columns (the Extract type, below).
 *
 * It computes exactly what the numpy walk (nfsreaddir/trace/numpywalk.py) computes, record by
 * record in file order, without the numpy passes over every record; the numpy walk stays
 * as the fallback and as the oracle of the tests.  The page and record layout are the
 * kernel's (kernel/trace/ring_buffer.c): a page header of a time stamp and a commit word
 * (size of the data in the low 27 bits, bit 31: events were lost before this page, bit 30:
 * their number is stored after the data), then records of a 32-bit header (type_len in 5
 * bits, time delta in 27) and data.
 *
 * Only the buffer protocol is used (no numpy C API): the caller passes the block and the
 * output arrays, which it allocates once and reuses.
 *
 * Why not libtracecmd/libtraceevent (the trace-cmd project's own readers): reading the fields
 * of every record through tracecmd_iterate_events() and tep_read_number_field() is no faster
 * than `trace-cmd report` (analyzer/bench/tracecmd-loop.c); docs/measurements/bench.md has
 * the figures, measured against this walk.
 *
 * This file is the module's entry (its functions and PyInit); the parts are in
 * csrc/ringbuf/: walk.c (walk()), decode.c (ints(), strings()), columns.c (Extract.walk() and
 * its column fills), extract.c (the Extract type), and ringbuf.h what they share (the page
 * format and the walk of one page's records).
 */
#include "csrc/ringbuf/ringbuf.h"

static PyMethodDef methods[] = {
	{ "walk", walk, METH_VARARGS, walk_doc },
	{ "ints", ints, METH_VARARGS, ints_doc },
	{ "strings", strings, METH_VARARGS, strings_doc },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "nfsreaddir._ringbuf",
	.m_doc = "The ring-buffer walk of nfsreaddir.trace, compiled.",
	.m_size = -1,
	.m_methods = methods,
};

PyMODINIT_FUNC PyInit__ringbuf(void)
{
	PyObject *m;

	if (PyType_Ready(&MemType) < 0 || PyType_Ready(&ExtractType) < 0)
		return NULL;
	m = PyModule_Create(&module);
	if (!m)
		return NULL;
	Py_INCREF(&ExtractType);
	if (PyModule_AddObject(m, "Extract", (PyObject *)&ExtractType) < 0) {
		Py_DECREF(&ExtractType);
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
