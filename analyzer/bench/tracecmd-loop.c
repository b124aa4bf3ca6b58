/*
 * The candidate compiled core of issue 17, measured: libtracecmd/libtraceevent (the
 * trace-cmd project's own libraries, Debian's libtracecmd-dev and libtraceevent-dev) reading
 * the two fields the slab analysis needs (ptr, and bytes_alloc of allocations) of every
 * kmem_cache_alloc/free record of a trace.dat into arrays, as nfs-readdir's reader does.
 *
 *   cc -O2 $(pkg-config --cflags libtracecmd) -o tracecmd-loop analyzer/bench/tracecmd-loop.c \
 *      $(pkg-config --libs libtracecmd libtraceevent)
 *   tracecmd-loop TRACE.dat [merged|percpu]
 *
 * merged: tracecmd_iterate_events(), the records of all CPUs in time order (as `trace-cmd
 * report` reads them); percpu: tracecmd_read_data() CPU after CPU (no merge, as nfs-readdir
 * walks them).  Prints one line: mode, records, kmem events, seconds to open (headers,
 * formats, and the decompression of the data as the library does it), seconds to read, and
 * records per second of the whole.  analyzer/bench/run builds and times it beside the reader.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <trace-cmd/trace-cmd.h>
#include <event-parse.h>

struct cols {
	struct tep_handle *tep;
	int alloc_id, free_id;
	struct tep_format_field *a_ptr, *a_bytes, *f_ptr;
	unsigned long long *ptr, *bytes;
	size_t n, cap, records;
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int one(struct tracecmd_input *h, struct tep_record *rec, int cpu, void *data)
{
	struct cols *c = data;
	int id = tep_data_type(c->tep, rec);
	unsigned long long v = 0;

	c->records++;
	if (id != c->alloc_id && id != c->free_id)
		return 0;
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 1 << 20;
		c->ptr = realloc(c->ptr, c->cap * sizeof(*c->ptr));
		c->bytes = realloc(c->bytes, c->cap * sizeof(*c->bytes));
		if (!c->ptr || !c->bytes) {
			fprintf(stderr, "out of memory\n");
			exit(1);
		}
	}
	if (id == c->alloc_id) {
		tep_read_number_field(c->a_ptr, rec->data, &v);
		c->ptr[c->n] = v;
		tep_read_number_field(c->a_bytes, rec->data, &v);
		c->bytes[c->n] = v;
	} else {
		tep_read_number_field(c->f_ptr, rec->data, &v);
		c->ptr[c->n] = v;
		c->bytes[c->n] = 0;
	}
	c->n++;
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 ? argv[2] : "merged";
	struct tracecmd_input *h;
	struct tep_event *a, *f;
	struct cols c = {0};
	double t0, t1, t2;
	int cpu;

	if (argc < 2) {
		fprintf(stderr, "usage: %s TRACE.dat [merged|percpu]\n", argv[0]);
		return 2;
	}
	t0 = now();
	h = tracecmd_open(argv[1], 0);
	if (!h) {
		fprintf(stderr, "%s: cannot open\n", argv[1]);
		return 1;
	}
	c.tep = tracecmd_get_tep(h);
	a = tep_find_event_by_name(c.tep, "kmem", "kmem_cache_alloc");
	f = tep_find_event_by_name(c.tep, "kmem", "kmem_cache_free");
	if (!a || !f) {
		fprintf(stderr, "%s: no kmem_cache_alloc/free formats\n", argv[1]);
		return 1;
	}
	c.alloc_id = a->id;
	c.free_id = f->id;
	c.a_ptr = tep_find_field(a, "ptr");
	c.a_bytes = tep_find_field(a, "bytes_alloc");
	c.f_ptr = tep_find_field(f, "ptr");
	t1 = now();
	if (!strcmp(mode, "merged")) {
		tracecmd_iterate_events(h, NULL, 0, one, &c);
	} else {
		struct tep_record *r;

		for (cpu = 0; cpu < tep_get_cpus(c.tep); cpu++) {
			for (r = tracecmd_read_cpu_first(h, cpu); r; r = tracecmd_read_data(h, cpu)) {
				one(h, r, cpu, &c);
				tracecmd_free_record(r);
			}
		}
	}
	t2 = now();
	printf("%s records %zu kmem %zu open_s %.3f read_s %.3f Mrec_per_s %.3f\n", mode,
	       c.records, c.n, t1 - t0, t2 - t1, c.records / (t2 - t0) / 1e6);
	tracecmd_close(h);
	return 0;
}
