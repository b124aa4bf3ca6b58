"""What `watch --metrics ADDR:PORT` serves on /metrics and `watch --textfile DIR` writes for
node_exporter's textfile collector: the restarts and invalidations watch finds, and the RPCs
each listing sent (where its time went: per name round trips, ACL calls), as Prometheus
counters per client mount, directory and process name, and watch's own health.

The exposition is prometheus_client's (its HTTP server, its textfile writer: a temporary file
renamed over the old one, so the collector never reads half a file). Label sets stay bounded:
a directory is its mount and fileid (with the path where watch knows it, --dir), and past
MAX_SERIES directory x process series every new one is counted under the "other" labels, so a
client that lists millions of directories over months costs Prometheus a bounded number of series.
The RPC counters add only the RPC's program and operation (a few dozen of each protocol).
"""

import collections
import os
import select
import time
import weakref

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
    start_http_server,
    write_to_textfile,
)

PREFIX = "nfs_readdir"
LABELS = ("mount", "fileid", "path", "comm")
# The counters with labels past LABELS: their series start when first counted (a series of
# every program and operation at 0 for each directory would be most of Prometheus' series).
EXTRA_LABELS = {
    "listings_finished": ("ending",),
    "rpcs": ("program", "op"),
    "rpc_server_seconds": ("program", "op"),
}
MAX_SERIES = 2000
OTHER = ("other", "other", "", "other")
TEXTFILE = "nfs_readdir.prom"
TEXTFILE_SECONDS = 1.0


def mounts():
    """{dev_t as the kernel's events give it (major << 20 | minor): mount point}."""
    out: dict[int, str] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            p = line.split()
            major, minor = (int(x) for x in p[2].split(":"))
            out.setdefault(major << 20 | minor, p[4].replace("\\040", " "))
    return out


class Mounts:
    """The mount point of each dev (mounts()), the table read again only once it has changed:
    /proc/self/mountinfo polls POLLPRI once after each mount or unmount (proc(5)). So a dev
    that no mount of this namespace has (a container's own mount) costs a poll per event
    counted, not a read of the whole table, and a dev number a new mount takes over is named
    by its new mount point."""

    def __init__(self):
        fd = os.open("/proc/self/mountinfo", os.O_RDONLY)
        weakref.finalize(self, os.close, fd)
        self._poll = select.poll()
        self._poll.register(fd, select.POLLPRI)
        self._table = mounts()

    def get(self, dev):
        if self._poll.poll(0):
            self._table = mounts()
        return self._table.get(dev)


class Metrics:
    """The counters and gauges, fed by watch's tracker (count()) and its loop (health())."""

    def __init__(self, paths=None, max_series=MAX_SERIES):
        self.paths = paths or {}  # fileid -> path, where watch knows it
        self.max_series = max_series
        self.series = set()
        self._mounts = Mounts()
        # Each series' counters as the client library hands them out (.labels() validates and
        # looks up the labels under a lock: most of what counting an event cost); the gauge's
        # series of the last listings() (it is set again only when they change).
        self._children = {}
        self._in_progress: collections.Counter = collections.Counter()
        r = self.registry = CollectorRegistry()
        # process_cpu_seconds_total, process_start_time_seconds (a restart of watch is seen by
        # it changing), process_resident_memory_bytes: watch's own cost.
        ProcessCollector(registry=r)

        def counter(name, doc):
            return Counter(f"{PREFIX}_{name}", doc, LABELS + EXTRA_LABELS.get(name, ()), registry=r)

        self.by_name = {
            "readdirs": counter("readdirs", "READDIR and READDIRPLUS calls of listings"),
            "restarts": counter(
                "restarts", "READDIRs that searched the directory again from its start (cookie 0)"
            ),
            "ambiguous_restarts": counter(
                "ambiguous_restarts",
                "READDIRs at cookie 0 that may be a restart or the reader's own rewind",
            ),
            "refetched_readdirs": counter(
                "refetched_readdirs",
                "READDIRs from a restart until the listing was back where it had been",
            ),
            "refetch_seconds": counter(
                "refetch_seconds", "Time from each restart until the listing was back"
            ),
            "invalidations": counter(
                "invalidations", "Invalidations of a directory's page cache during a listing"
            ),
            "listings_finished": counter(
                "listings_finished",
                "Listings finished, by how (eof, closed, killed, error)",
            ),
            # What `analyze` accounts (model/roundtrips): the listing's process's RPCs from its
            # first READDIR (its start where the cache served it all) to its last event.
            "rpcs": counter(
                "rpcs",
                "RPCs the lister's process sent during a listing, by program (NFS3, NFSACL3, "
                "NFS4) and operation (an NFSv4 COMPOUND by its main one), from the listing's "
                "first READDIR to its last event",
            ),
            "rpc_server_seconds": counter(
                "rpc_server_seconds",
                "Server time (sunrpc:rpc_stats_latency rtt) of those RPCs whose reply was "
                "traced, by program and operation",
            ),
        }
        self.in_progress = Gauge(
            f"{PREFIX}_listings_in_progress",
            "Listings under way, once the kernel has named their directory",
            LABELS,
            registry=r,
        )
        self.events = Counter(f"{PREFIX}_watch_events", "Trace events watch has read", registry=r)
        self.lost = Counter(
            f"{PREFIX}_watch_lost_events",
            "Trace events the ring buffer dropped before watch read them",
            registry=r,
        )
        self.losses = Counter(
            f"{PREFIX}_watch_lost_event_reports",
            "Ring-buffer pages saying events were lost (the count is not always known)",
            registry=r,
        )
        self.tracing = Gauge(
            f"{PREFIX}_watch_tracing",
            "1 while watch's tracefs instance is tracing, 0 once it is put back",
            registry=r,
        )
        self.overflow = Counter(
            f"{PREFIX}_watch_series_overflow",
            f"Events counted under the 'other' labels: more than {max_series} series",
            registry=r,
        )
        self._seen = (0, 0, 0)

    def labels(self, o):
        """The labels of an open: its mount, fileid, path where known and process name; the
        "other" ones once there are max_series others."""
        dev, fileid = o.dev, o.fileid
        mount = "" if dev is None else self._mounts.get(dev) or str(dev)
        key = (mount, "" if fileid is None else str(fileid), self.paths.get(fileid, ""), o.comm)
        if key not in self.series:
            if len(self.series) >= self.max_series:
                return OTHER
            self.series.add(key)
            # Every counter of a new series starts at 0, so that rate() and increase() count
            # its first restart (a series that appears at 1 shows no increase).
            for name, c in self.by_name.items():
                if name not in EXTRA_LABELS:
                    c.labels(*key)
        return key

    def count(self, what, o, n=1, *extra):
        """Add n to counter `what` of open o's series (extra: the labels after LABELS)."""
        if n:
            key = (what, self.labels(o), extra)
            # (Here, not in labels(): listings() takes the labels of the listings under way at
            # each of watch's polls, which counted them again 5 times a second.)
            if key[1] is OTHER:
                self.overflow.inc()
            c = self._children.get(key)
            if c is None:
                c = self._children[key] = self.by_name[what].labels(*key[1], *extra)
            c.inc(n)

    def listings(self, live_opens):
        """Set the gauge of listings under way to the opens being read now (watch calls this
        at every poll, 5 times a second: the gauge is set again only when they changed)."""
        now = collections.Counter(self.labels(o) for o in live_opens)
        if now == self._in_progress:
            return
        self._in_progress = now
        self.in_progress.clear()
        for key, n in now.items():
            self.in_progress.labels(*key).set(n)

    def health(self, live):
        """Take the ring buffer's counts so far (LiveTrace.events, lost, losses)."""
        now = (live.events, live.lost, live.losses)
        for c, n, before in zip((self.events, self.lost, self.losses), now, self._seen):
            if n > before:
                c.inc(n - before)
        self._seen = now


class Exposition:
    """Where the metrics go: an HTTP server on ADDR:PORT, a textfile in DIR, or both."""

    def __init__(self, metrics, listen=None, textfile_dir=None):
        self.metrics, self.dir = metrics, textfile_dir
        self.server = None
        self.written = -TEXTFILE_SECONDS
        if textfile_dir is not None and not os.path.isdir(textfile_dir):
            raise OSError(f"--textfile {textfile_dir}: not a directory")
        if listen is not None:
            self.server = start_http_server(listen[1], listen[0], registry=metrics.registry)
        self.write()

    def write(self):
        """The textfile again, at most every TEXTFILE_SECONDS (watch polls 5 times a second)."""
        now = time.monotonic()
        if self.dir is not None and now - self.written >= TEXTFILE_SECONDS:
            write_to_textfile(os.path.join(self.dir, TEXTFILE), self.metrics.registry)
            self.written = now

    def close(self):
        """Stop serving; the textfile goes too (a stopped watch exports nothing, as its HTTP
        server does, rather than its last counters for ever)."""
        if self.dir is not None:
            try:
                os.unlink(os.path.join(self.dir, TEXTFILE))
            except FileNotFoundError:
                pass
        if self.server is not None:
            server, thread = self.server
            server.shutdown()
            server.server_close()
            thread.join()
            self.server = None
