/*
 * The zstd chunks of a trace.dat v7 CPU stream, decompressed by libzstd straight into the
 * block the ring-buffer walk reads next (nfsreaddir.trace.ringbuf).
 *
 * A v7 file stores each CPU's pages as a count of chunks, then per chunk its compressed and
 * decompressed sizes (32 bits each, file endianness) and one zstd frame.  Chunks hold a few
 * pages each, so a large trace has tens of thousands of them: decompressing them one by one
 * from Python (python-zstandard) cost a call, a bytes object and a copy into the block per
 * chunk, about a quarter of the reader's time on the bench's 8.4 M-event trace.  Here a
 * whole block's worth of chunks is decompressed without the GIL, so the CPU streams inflate
 * in parallel.  python-zstandard remains the path where libzstd's header was not found at
 * install; both make the same checks and the caller words the same messages.
 *
 * chain() follows the chunk headers alone, so that one CPU's stream can be cut at chunk
 * boundaries into parts that inflate in parallel: a trace whose events sit mostly on one CPU
 * would otherwise be read by one thread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <pthread.h>
#include <string.h>
#include <zstd.h>

/* Each thread's decompression context, made at its first inflate() and freed when the thread
 * ends: a context is some 100 KiB of tables, made and freed at every call before (a block of
 * a few MiB each). */
static pthread_key_t dctx_key;

static void free_dctx(void *d)
{
	ZSTD_freeDCtx(d);
}

static ZSTD_DCtx *thread_dctx(void)
{
	ZSTD_DCtx *d = pthread_getspecific(dctx_key);

	if (!d) {
		d = ZSTD_createDCtx();
		if (d && pthread_setspecific(dctx_key, d)) {
			ZSTD_freeDCtx(d);
			d = NULL;
		}
	}
	return d;
}

/* Why a chunk stopped the run: the caller's messages, by number. */
enum { OK, HEADER_CUT, BAD_SIZE, DATA_CUT, SIZE_MISMATCH, CORRUPT, SHORT };

static uint32_t u32(const uint8_t *p, int big)
{
	if (big)
		return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
	return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

PyDoc_STRVAR(
	inflate_doc,
	"inflate(src, pos, stop, nchunks, block, page_size, big_endian)\n"
	"    -> (pos, chunks, fill, why, a, b, text)\n"
	"\n"
	"Decompress chunks of ``src`` from offset ``pos`` (at most ``nchunks``; none read past\n"
	"``stop``) one after the other into ``block`` from its start, until the next would not fit.\n"
	"Gives the offset after the last chunk done, how many were done, the bytes filled and, when a\n"
	"chunk is damaged, why (0: none; 1 header cut short, 2 implausible size ``a``, 3 data cut\n"
	"short (``a`` bytes at offset ``b``), 4 the frame declares ``a`` bytes, 5 corrupt (libzstd's\n"
	"``text``), 6 gave ``a`` bytes; in 4 and 6 ``b`` is the size the file gives), the chunk being\n"
	"the one after those done.  Nothing done and no damage: the next chunk needs a block of ``a``\n"
	"bytes.");

static PyObject *inflate(PyObject *Py_UNUSED(self), PyObject *args)
{
	Py_buffer src, blk;
	Py_ssize_t pos, stop, nchunks, P;
	int big;
	Py_ssize_t done = 0, fill = 0;
	long long a = 0, b = 0;
	int why = OK;
	const char *text = NULL;
	ZSTD_DCtx *dctx;
	PyObject *res = NULL;

	if (!PyArg_ParseTuple(args, "y*nnnw*np", &src, &pos, &stop, &nchunks, &blk, &P, &big))
		return NULL;
	if (pos < 0 || stop > src.len || P < 1) {
		PyErr_SetString(PyExc_ValueError, "inflate: offsets outside the data");
		goto out;
	}
	dctx = thread_dctx();
	if (!dctx) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	while (done < nchunks) {
		const uint8_t *p = (const uint8_t *)src.buf + pos;
		uint32_t csize, usize;
		unsigned long long declared;
		size_t got;

		if (pos + 8 > stop) {
			why = HEADER_CUT;
			break;
		}
		csize = u32(p, big);
		usize = u32(p + 4, big);
		if (usize % P || usize > (1u << 30)) {
			why = BAD_SIZE;
			a = usize;
			break;
		}
		if (pos + 8 + (Py_ssize_t)csize > stop) {
			why = DATA_CUT;
			a = csize;
			b = pos + 8;
			break;
		}
		if (fill + (Py_ssize_t)usize > blk.len) {
			if (!fill)
				a = usize; /* the block is too small for this chunk alone */
			break;
		}
		declared = ZSTD_getFrameContentSize(p + 8, csize);
		if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != ZSTD_CONTENTSIZE_ERROR &&
		    declared != usize) {
			why = SIZE_MISMATCH;
			a = (long long)declared;
			b = usize;
			break;
		}
		got = ZSTD_decompressDCtx(dctx, (uint8_t *)blk.buf + fill, usize, p + 8, csize);
		if (ZSTD_isError(got)) {
			why = CORRUPT;
			text = ZSTD_getErrorName(got); /* static strings */
			break;
		}
		if (got != usize) {
			why = SHORT;
			a = (long long)got;
			b = usize;
			break;
		}
		fill += usize;
		pos += 8 + csize;
		done++;
	}
	Py_END_ALLOW_THREADS
	res = Py_BuildValue("(nnniLLz)", pos, done, fill, why, a, b, text);
out:
	PyBuffer_Release(&src);
	PyBuffer_Release(&blk);
	return res;
}

PyDoc_STRVAR(
	chain_doc,
	"chain(src, pos, stop, nchunks, big_endian, step) -> list of (pos, index, inflated)\n"
	"\n"
	"Follow the headers of ``nchunks`` chunks from offset ``pos`` and give the offset and index of\n"
	"the first chunk after each further ``step`` bytes of the stream (never the first chunk nor\n"
	"one past the last), with the decompressed bytes of the chunks before it.  Stops at the\n"
	"first header that is cut short or whose chunk runs past ``stop``: inflate() reports that\n"
	"damage, in the part that holds it.");

static PyObject *chain(PyObject *Py_UNUSED(self), PyObject *args)
{
	Py_buffer src;
	Py_ssize_t pos, stop, nchunks, step, i, next;
	long long inflated = 0;
	int big;
	PyObject *out = NULL, *item;

	if (!PyArg_ParseTuple(args, "y*nnnpn", &src, &pos, &stop, &nchunks, &big, &step))
		return NULL;
	if (pos < 0 || stop > src.len || step < 1) {
		PyErr_SetString(PyExc_ValueError, "chain: offsets outside the data");
		goto out;
	}
	out = PyList_New(0);
	if (!out)
		goto out;
	next = pos + step;
	for (i = 0; i < nchunks; i++) {
		const uint8_t *p = (const uint8_t *)src.buf + pos;

		if (i && pos >= next) {
			item = Py_BuildValue("(nnL)", pos, i, inflated);
			if (!item || PyList_Append(out, item) < 0) {
				Py_XDECREF(item);
				Py_CLEAR(out);
				goto out;
			}
			Py_DECREF(item);
			next = pos + step;
		}
		if (pos + 8 > stop || pos + 8 + (Py_ssize_t)u32(p, big) > stop)
			break;
		inflated += u32(p + 4, big);
		pos += 8 + u32(p, big);
	}
out:
	PyBuffer_Release(&src);
	return out;
}

static PyMethodDef methods[] = {
	{ "inflate", inflate, METH_VARARGS, inflate_doc },
	{ "chain", chain, METH_VARARGS, chain_doc },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "nfsreaddir._zchunks",
	.m_doc = "trace.dat v7 zstd chunks decompressed by libzstd.",
	.m_size = -1,
	.m_methods = methods,
};

PyMODINIT_FUNC PyInit__zchunks(void)
{
	if (pthread_key_create(&dctx_key, free_dctx)) {
		PyErr_SetString(PyExc_OSError, "_zchunks: no thread-specific key");
		return NULL;
	}
	return PyModule_Create(&module);
}
