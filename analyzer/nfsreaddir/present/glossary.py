"""What every column of `analyze`'s table and of `export`'s tables means, with its unit: printed
by `nfs-readdir glossary` (and `analyze --explain`); the README's glossary is checked against
it."""

TEXT_TABLE = {
    "trace": "the trace file the listing is in",
    "phase": "the reproducer's phase (idle, modified) the listing ran in; - outside the reproducer",
    "dir": "the directory's fileid (inode number on the server); ? where the trace does not "
    "name it",
    "process": "the reading process, as comm[pid]",
    "time (s)": "seconds from the listing's start to its end, as the line under the table says "
    "for each way listings were told apart (a capture's is shorter than a trace's of the same "
    "listing, and results --table gives the lister's own run time beside it)",
    "ended": "how it ended: eof (reached the end of the directory), error, killed, closed (before "
    "the end), cut_off (by the end of the trace), unknown (the trace has no "
    "end-of-listing event); '(began before)' when it was opened before the trace "
    "started",
    "entries": "names the reproducer's lister printed; - outside the reproducer",
    "READDIRs": "READDIR and READDIRPLUS RPCs the listing sent",
    "restarts": "READDIRs at cookie 0 while the reader's position was past the start, or below "
    "that position (the kernel searched for it from the start); ? without cookies; "
    "a range such as 0-23 where READDIRs went back to cookie 0 for a cause the "
    "trace cannot tell (a restart, or a new open)",
    "refetched": "READDIRs spent after restarts getting back to where the listing had been; ? "
    "without cookies; a range where the restarts are",
    "invalidations": "times the directory's page cache was dropped during the listing (and how "
    "many of them a restart followed, a range where the restarts are)",
    "dentries": "change of the dcache's nr_dentry over the listing (from the reproducer's samples)",
}

# The verdict's words, as check's line and analyze's "verdict:" begin them, the page's answer
# says them and the exit status tells them (status.word).
VERDICTS = {
    "good": "no listing restarted, and one whose directory changed under it reached the end "
    "or went on past the change (exit status 0)",
    "bad": "a listing restarted (exit status 1)",
    "cannot decide": "the input cannot tell: no cookies, events lost, READDIRs that went back "
    "for a cause it cannot tell, or no directory changed under a listing (exit status 125)",
}

# What a listing's time spans, by what told the listings apart (delimited_by).
TIME_SPANS = {
    "opens": "from the opendir (or first getdents) to the close",
    "syscalls": "from the first getdents64 to the one that returned 0",
    "phases": "from the reproducer's phase marker to the next (the lister's start-up included)",
    "readdirs": "from the first READDIR to the last",
    "wire": "from the first READDIR call to the reply that ended the listing, or to the last "
    "per-name call (a stat or ACL of each name, as ls -l makes) that follows it with no pause "
    "over 1 s (no getdents or close on the wire)",
}

EXPORT_COLUMNS = {
    "trace_id": "the trace's id: 16 hex digits of a hash of its bytes, the trace_id of "
    "analyze --json (every entry: a readdir trace's under trace, a kmem trace's and a dcache "
    "run's beside path) and results.json too; joins every table of one trace; null in watch "
    "--json, which reads the live ring buffer and keeps no file to hash (record one with "
    "`nfs-readdir record`)",
    "trace": "the trace's path as given to export",
    "kernel": "the kernel release the trace was recorded on",
    "nfs": "the NFS version, where the trace says (the reproducer's run marker)",
    "listing": "the listing's number within its trace (null outside any listing): with trace_id, "
    "the key into the listings table, and the listing and trace_id of analyze --json",
    "ts": "event time, ns (the trace's clock)",
    "cpu, pid, comm, source": "where the event was logged, and the trace event it was read from",
    "phase, pid, comm, dir_fileid, dev": "as in analyze's table; dev is the kernel's dev_t",
    "delimited_by": "what told the listing apart: opens, syscalls, phases or readdirs",
    "start_ns, end_ns, seconds": "the listing's span (ns, ns, s)",
    "ending, complete, error, began_before_trace": "how the listing ended (see 'ended'); complete "
    "is ending = eof and opened in the trace; "
    "error is the errno that stopped it",
    "entries, status": "the reproducer's lister: names printed and exit status",
    "getdents": "getdents calls into NFS (null where the trace has no such event)",
    "readdirs, cookie_zero_readdirs, restarts, ambiguous_cookie_zero_readdirs": "READDIRs, those "
    "at cookie 0, the restarts among them, and those whose cause the trace cannot tell "
    "(null without cookies)",
    "rewinds": "seeks of the reader back to the start (null where not observable)",
    "restarts_min, restarts_max": "the fewest and most restarts the trace allows (restarts is "
    "null where they differ: READDIRs that went back to cookie 0 for a cause the trace "
    "cannot tell)",
    "refetched_readdirs, restart_cost_seconds": "what the restarts cost: READDIRs and seconds "
    "(null where the restarts are a range)",
    "refetched_readdirs_min, refetched_readdirs_max, restart_cost_seconds_max": "what the "
    "fewest and the most restarts would have cost",
    "invalidations_followed_by_restart_min, invalidations_followed_by_restart_max": "the "
    "invalidations that a restart followed, at the fewest and the most",
    "survived_changes": "READDIRs that met a change of the directory mid-way and asked for a "
    "cookie above every one asked before: the kernel went on there (null without cookies)",
    "start_refills": "READDIRs at cookie 0 that filled again the first page while the reader was "
    "still in it: neither a restart nor a test of the bug",
    "invalidations, invalidations_followed_by_restart, cache_range_trims, version_changes": (
        "changes of the directory during the listing: page cache drops, those a restart "
        "followed, 5.18+ range trims, and moves of its change attribute (5.18+; null elsewhere)"
    ),
    "exercised": "the directory changed under the listing, so a restart was possible",
    "damaged_events": "damaged or lost stretches of the trace that overlap the listing",
    "max_dtsize, dentries_added": "the largest READDIR size asked (bytes), dcache growth",
    "finding, why": "the listing's verdict: bad, undecided, survived, unfinished, good or "
    "untested, and why",
    "cookie, dtsize, plus, version, error, restart (rpc)": "the cookie asked for, the buffer "
    "size (bytes), READDIRPLUS, the directory's change attribute, the RPC's errno, and "
    "whether this READDIR is a restart",
    "rpc_index, cookie, refetched, cost_ns, after_invalidation (restarts)": "which READDIR of "
    "the listing restarted and the cookie it asked (0, or below the reader's position), "
    "READDIRs and ns until it got back, whether an invalidation preceded it",
    "reason, chain, followed_by_restart (invalidations)": "the kernel's reason, the steps "
    "that led to it (revalidate -> GETATTR -> ...), whether a restart followed (null where "
    "not known)",
    "followed_by_ambiguous, refilled_start (invalidations)": "the listing's next READDIR went "
    "back to cookie 0 for a cause the trace cannot tell (a restart or a new open); it "
    "filled again the first page, which still held the reader",
    "call, file, fd, pos, old_pos, ret, eof (calls)": "what the reader did (opendir, "
    "getdents, llseek, closedir, system calls), the open file, its position before and "
    "after, and how a call returned",
    "step, cache_validity (revalidations)": "the attribute check and the inode's "
    "cache_validity flags",
    "text (markers)": "the reproducer's trace_marker line",
    "nr_dentry ... readdirplus (samples)": "/proc/sys/fs/dentry-state, the dentry slab and the "
    "mounts' READDIR counts, sampled by the reproducer",
    "program, op, window, calls, replied (round_trips)": "the RPCs a listing's reader sent, "
    "one row per program and operation (NFS3, NFSACL3, NFS4: a COMPOUND by its main "
    "operation): window is true for its calls from its first READDIR to its end (a capture: "
    "to the client's next listing), false for the same process's or client's calls outside "
    "it; replied: the calls whose server time is known",
    "server_seconds, per_name, share, names, names_from (round_trips)": "server time (s, call "
    "to reply; a trace's from sunrpc:rpc_stats_latency, null without it), calls per name, "
    "server time over the listing's time, the names and where their count came from (the "
    "READDIR replies' entries, the reproducer lister's count, or the files it stat'd)",
    "rank, client, dirs, listings, complete, readdirs, ambiguous (clients)": "a server's "
    "capture of several clients, one row per client connection (address:port): its rank by "
    "refetched_readdirs (then restarts, READDIRs), the directories and listings it had, those "
    "that reached eof, its READDIRs, and its listings whose restarts the capture cannot count "
    "(two passes interleaved)",
    "restarts, refetched_readdirs, refetched_share, refetched_entries (clients)": "the restarts "
    "the capture is sure of, the READDIRs they spent getting back, that as a share of the "
    "client's READDIRs, and the entries fetched again",
    "client, dir_fileid, fh, version_changes (client_dirs)": "the same sums per client and "
    "directory (its inode number where the capture gave it, its filehandle hash), with the "
    "moves of the directory's version its listings met",
    "reproducer (dcache tables)": "the dcache reproducer that made the run: with trace_id, the "
    "key of its rows",
    "verdict, reasons, phases (dcache_runs)": "the run's PASS or FAIL, why, and its phases in "
    "order",
    "figure, value, text (dcache_figures)": "a figure of the run's results (nested ones as "
    "a.b.c), its number, or its text when it is not a number; both null when the run "
    "could not measure it",
    "phase, seq, counter, before, after, delta, peak, rate_per_s (dcache_phases)": "a sampled "
    "counter at the samples framing the phase, its change, its highest sample inside and "
    "its change per second; `event:NAME` rows count a kernel event in the phase (delta)",
    "ts, phase, label, counter, value (dcache_samples)": "one counter of one sample: its time "
    "(ns), the phase it fell in (null between phases), the reproducer's label of an "
    "explicit sample",
}

# The lines under a capture's header (analyze's text; "notes" in the JSON trace block).
CAPTURE_NOTES = {
    "TCP: ... retransmitted, ... out of order, ... holes": "the compiled decoder's reassembly "
    "of the NFS connections: segments whose data it had already read (read once), segments "
    "that came late into a hole and were read in their place, and holes: bytes never "
    "captured (a packet dropped, a frame cut by the snaplen), which it reads on from the "
    "next record mark and places on their connection, in time and direction, as damage of "
    "the listings whose calls they could hide (retransmitted_segments, reordered_segments, "
    "decoder_fallback in --json; null where tshark decoded)",
}


def explain():
    """The glossary as text."""
    out = ["The verdict (check's first word, analyze's and the report's):"]
    out += [f"  {k:14} {v}" for k, v in VERDICTS.items()]
    out += ["", "Columns of `nfs-readdir analyze`'s table:"]
    out += [f"  {k:14} {v}" for k, v in TEXT_TABLE.items()]
    out += ["", "What a listing's time spans, by what told the listings apart:"]
    out += [f"  {k:14} {v}" for k, v in TIME_SPANS.items()]
    out += ["", "What a capture's notes count:"]
    out += [f"  {k}\n      {v}" for k, v in CAPTURE_NOTES.items()]
    out += ["", "Columns of `nfs-readdir export`'s tables (see the README's glossary):"]
    out += [f"  {k}\n      {v}" for k, v in EXPORT_COLUMNS.items()]
    return "\n".join(out) + "\n"
