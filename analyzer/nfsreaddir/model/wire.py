"""Listings from the wire: what a packet capture says about READDIR restarts.

A capture sees READDIR calls and replies, not processes and not open directories, so a listing
here is one client's (address:port) pass over one directory (filehandle): from a READDIR at
cookie 0 to a reply with eof. The reader model (reader.Pass) says which of its READDIRs went
back: one at cookie 0 while such a pass is under way and has not reached eof is a restart (the
client went back to the start of the directory). After an eof reply the client holds the whole
directory, but its reader may still be reading the last pages from the cache: where the
directory's version moved since the pass began, a READDIR at cookie 0 may be that reader's
restart as well as a new listing, and is counted as either (a range); where it did not move,
nothing dropped the cache, and it begins a new listing. Evidence that the
directory changed under the listing is its version moving between READDIRs (the NFSv4 change
attribute in GETATTR replies; NFSv3 mtime/ctime in post-op attributes).

What a capture cannot tell, and says:
- two readers of one directory on one client are one stream of READDIRs. A client continues a
  pass from the last cookie of its previous reply; a READDIR that continues from an older reply
  means two passes interleave, and the listing is marked so (ambiguous rows: cannot decide);
- a dropped packet or a frame cut by the snaplen hides READDIRs: the bytes a TCP stream lost
  are placed on their connection and in time (trace/tcpholes), and are damage of the listings
  they overlap; missing replies are damage too;
- a change of the directory the client made itself (a file created from the same client) is
  seen only in the next attribute reply.

The listings are listing.Listing objects, so the one verdict module judges them as it judges
a trace's.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd

from ..trace import capture as capture_mod
from ..trace import pcapng, tcpholes
from ..units import int_or_none
from . import fleet, reader, windows, wire_passes
from .listing import Analysis, AnalysisError, LazyTables
from .wire_passes import ROW, Passes, listings


def _phase_facts(path):
    """The reproducer's facts beside a capture named PHASE.pcap[ng][.gz]: the phase, its
    lister's status and entries, the kernel, and tcpdump's drop count."""
    d = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    phase = re.sub(r"\.(pcapng|pcap)(\.gz)?$", "", base)
    facts = {}
    try:
        with open(os.path.join(d, "facts")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                facts[k] = v
    except OSError:
        return None, {}
    if f"{phase}.seconds" not in facts:
        return None, facts
    return phase, facts


def _whole(what):
    """Damage over the whole capture: what it says of itself, not of one listing."""
    return {"from": -1, "to": 1 << 62, "what": what}


def analyze(path, tshark=None, ports=()):
    """Analysis of a capture file: listings, restarts and what limits them. ports: server
    ports besides 2049 whose traffic is NFS."""
    # No table of the READDIRs or attribute replies: the passes keep what a listing needs as
    # the capture is read, and each listing goes to disk as its pass ends (model/spool), so
    # memory follows the passes under way, not the capture's length.
    cap = capture_mod.read(path, tshark=tshark, ports=ports, passes=Passes, tables=False)
    found = []
    if not cap.messages and not cap.port_frames:
        # No NFS where the ports say: a server on another port. Its calls say where.
        found = [p for p in capture_mod.rpc_server_ports(path, tshark) if p not in cap.ports]
        if found:
            ports = [*ports, *found]
            cap = capture_mod.read(path, tshark=tshark, ports=ports, passes=Passes, tables=False)
    _refuse_unusable(cap, path)
    phase, facts = _phase_facts(path)
    damage, placed, dropped = _capture_damage(cap, path, phase, facts)
    damage, at_end = _cut_at_end(damage, cap.calls, cap.cut)
    by_client: dict[str, list] = {}
    for d in placed:
        by_client.setdefault(d["client"], []).append(d)
    out = listings(cap)
    # The phase's listing: the reproducer's lister made one pass, the longest listing. A server's
    # capture of many clients (readdir-fleet) has one lister per client, none of them it.
    main = out.largest() if phase and out.clients == 1 else None
    fileids = cap.passes.fileids  # (the passes themselves, and their cookies, are not kept)
    xids, orphans = _call_numbers(cap, placed)
    # Every client's calls, for where each listing ends (windows.wire_end).
    calls = cap.calls.by_client() if cap.calls is not None else {}

    def finish(lst, number):
        """What a listing read back from the spool gets once the whole capture is read."""
        if lst.fileid is None:  # the directory's inode number, where a reply gave it
            lst.fileid = fileids.get(lst.fh)
        if lst.client in calls and len(lst.rpcs):
            ts, reply_ts, op, frame = calls[lst.client]
            own = set(lst.rpcs.a["frame"].tolist())
            lst.end = windows.wire_end(lst.end, ts, reply_ts, op, frame, own)
        mine = [*by_client.get(lst.client, ()), *at_end]
        seen = (xids[0].get(lst.client, _NO_XIDS), xids[1]) if xids is not None else None
        lst.damage = damage + _hiding_calls(lst, mine, seen, orphans.get(lst.client, ()))
        if lst.damage and lst.restart_rows:
            # Frames lost (dropped, cut by the snaplen): the eof reply that ended a pass, or
            # the READDIRs that did, may be among them, and a "restart" the first READDIR of
            # a new pass. Those next to a loss are possible, none certain.
            ts = lst.rpcs.a["ts"]
            wire_passes.count(lst, lost=reader.near_loss(ts, lst.restart_rows, lst.damage))
        if number == main:
            lst.phase = phase
            lst.status = int_or_none(facts.get(f"{phase}.status"))
            lst.entries = int_or_none(facts.get(f"{phase}.entries"))
            if lst.fileid is None:
                lst.fileid = int_or_none(facts.get(f"{phase}.dir_fileid"))
        return lst

    out.finish = finish
    run = {"kernel": facts.get("run.kernel")} if facts.get("run.kernel") else {}
    # The version the calls carry: the run's NFS, as a trace's run marker gives it.
    nfs = "/".join(sorted(cap.versions)) or None
    if nfs:
        run["nfs"] = nfs
    info = _info(cap, path, dropped, nfs)
    v4 = any(v.startswith("4") for v in cap.versions)
    version = (
        "the change attribute in GETATTR replies" if v4 else "mtime/ctime in post-op attributes"
    )
    # On the wire an invalidation is not seen, only its cause: the directory's version moved.
    evidence = {
        "rpc": ["the capture's READDIR calls and replies"],
        "invalidations": [],
        "version": [version],
    }
    info["notes"] = _notes(cap, dropped) + [
        f"NFS found on server port {p} by its calls' ONC RPC header (--port {p} names it)"
        for p in found
    ]
    tables = LazyTables(rpc=lambda: _rpc_table(out))
    if cap.calls is not None:
        # Every NFS and NFSACL call, for where a listing's time went (model/roundtrips): made
        # into a table only when asked, and the capture not decoded again for it.
        tables.update(capture_calls=cap.calls.table)
    # A server's capture: its clients ranked by what their restarts cost.
    triage = fleet.triage(out)
    if triage is not None:
        tables.update(clients=triage.clients, client_dirs=triage.dirs)
    a = Analysis(
        out,
        run,
        None,
        evidence,
        True,
        info,
        recorded={"invalidations": []},
        tables=tables,
    )
    return a


# Two READDIR calls of one pass further apart than this in XIDs are not from a client that
# numbers its calls one by one (another client's XIDs are random): what lies between is not
# known.
MAX_XID_STEP = 1 << 16


_NO_XIDS = np.zeros(0, dtype=np.int64)

# NFSv4's READDIR operation (RFC 8881): a reply that answers it may be the reply to a restart.
OP_READDIR4 = 26


def _call_numbers(cap, placed):
    """What a hole needs (_hiding_calls): the XIDs of every client's calls (CallLog.xids), with
    those of the calls the capture lost whose reply says they asked no READDIR (an NFSv4
    COMPOUND reply lists its operations: such a call is known, and no restart), or None where
    nothing was lost; and the replies whose call was lost, by client: [(ts, the operation each
    answered)]."""
    xids = None
    if placed and cap.calls is not None:
        known = [(c, x) for c, x, op, _ in cap.orphan_replies if op >= 0 and op != OP_READDIR4]
        xids = cap.calls.xids(known)
    orphans: dict[str, list] = {}
    for client, _, op, t in cap.orphan_replies:
        orphans.setdefault(client, []).append((t, op))
    return xids, orphans


def _hiding_calls(lst, holes, xids=None, orphans=()):
    """The holes of the listing's client (placed: {"from", "to", "to_server", ...}) that may
    hide a restart of its pass. A restart is a call (a READDIR back at cookie 0), so only
    bytes lost on the way to the server between the pass's first call and its last (or after
    that, where the pass did not end with eof or an error) can hide one; however few, they
    may hold that one call, with the calls that walk back after it visible and looking like
    the pass going on. A reply lost on the way back is no hole in the pass: it is a READDIR
    without its reply, which the reader model places on that call (reader.Pass.lost: a
    cookie-0 call after it is a restart or a new pass), or a reply of another call, which
    hides nothing of the pass but a change of its directory (fewer changes met: never a
    restart, never a survived change). Where a hole's direction is not known it may be
    either.

    Between two READDIRs of the pass (or before its first, where the lost bytes end at it), a
    hole hides none of the pass's calls where either (_all_seen) the capture has a call of
    every XID between the two READDIRs' (xids: (the XIDs of the client's calls seen, sorted,
    with those whose reply said they asked no READDIR; {READDIR call frame: its XID}), or
    None), or (_replies_seen) the lost calls' replies say they were no READDIR: the reader
    sends its next READDIR once the one before is answered, so a READDIR of the pass sent
    between two has its reply before the second; where no reply of the client was lost
    there (the second's reply came, no hole on the way back) and every reply whose call is
    lost (orphans: (ts, the NFSv4 operation it answers, -1: not said)) answered another
    operation, none was a READDIR."""
    if not holes or not len(lst.rpcs):
        return []
    a = lst.rpcs.a
    ts = a["ts"]
    n = len(ts)
    ended = lst.ending in (reader.EOF, reader.ERROR)
    first, last = int(ts[0]), int(ts[-1]) if ended else 1 << 62
    back = [d for d in holes if d.get("to_server") is not True]
    out = []
    for d in holes:
        if d.get("to_server", True) is False or d["from"] > last or d["to"] < first:
            continue
        # The stretches between the pass's calls that the lost bytes may fall in: k is the
        # stretch before call k (n: after the last, where the pass did not end).
        ks = range(
            int(np.searchsorted(ts, d["from"], side="left")),
            min(int(np.searchsorted(ts, d["to"], side="left")), n - 1 if ended else n) + 1,
        )
        if not all(_hides_none(a, k, d, xids, back, orphans) for k in ks):
            out.append(d)
    return out


def _hides_none(a, k, hole, xids, back, orphans):
    """Whether the hole's lost calls in the stretch before the pass's READDIR k (_hiding_calls)
    were none of the pass's."""
    if k >= len(a):
        return False
    if k > 0 and xids is not None and _all_seen(a["frame"][k - 1 : k + 1], *xids):
        return True
    since = max(int(hole["from"]), int(a["ts"][k - 1]) if k else 0)
    return bool(a["has_status"][k]) and _replies_seen(since, int(a["ts"][k]), back, orphans)


def _replies_seen(since, until, back, orphans):
    """Whether every reply to the client between since and until is in the capture (no hole
    on the way back overlaps), and each whose call is lost answered another operation than
    READDIR (orphans: (ts, op))."""
    if any(d["from"] <= until and d["to"] >= since for d in back):
        return False
    return all(op >= 0 and op != OP_READDIR4 for t, op in orphans if since <= t <= until)


def _all_seen(frames, seen, xid_of):
    """Whether the capture has a call of every XID between those of the two READDIR calls in
    frames (their XIDs known, and close enough to be one client's count)."""
    lo, hi = xid_of.get(int(frames[0])), xid_of.get(int(frames[1]))
    if lo is None or hi is None:
        return False
    step = (hi - lo) % (1 << 32)
    if not 0 < step <= MAX_XID_STEP:
        return False
    if lo < hi:
        inside = np.searchsorted(seen, hi) - np.searchsorted(seen, lo + 1)
    else:  # the count wrapped around
        inside = len(seen) - np.searchsorted(seen, lo + 1) + np.searchsorted(seen, hi)
    return int(inside) == step - 1


def _refuse_unusable(cap, path):
    """An AnalysisError naming what the capture lacks and how to capture again, where it has
    no READDIR to analyze."""
    on = ", ".join(map(str, cap.ports))
    if not cap.messages and not cap.port_frames:
        raise AnalysisError(
            f"{path}: no NFS traffic in this capture: no frame to or from port {on} and no ONC "
            "RPC message; capture the NFS traffic with `tcpdump -s 0 -w FILE port 2049` on the "
            "client (name the server's port if it is not 2049)"
        )
    if cap.truncated_frames and not cap.readdir_calls:
        raise AnalysisError(
            f"{path}: {cap.truncated_frames} frames were cut to {cap.snaplen} bytes by the "
            "capture's snaplen, too short to decode NFS; capture again with `tcpdump -s 0`"
        )
    if not cap.messages:
        raise AnalysisError(
            f"{path}: no ONC RPC (NFS) message in this capture; capture the NFS traffic with "
            "`tcpdump -s 0 -w FILE port 2049` on the client"
        )
    if not cap.readdir_calls and "2" in cap.versions:
        raise AnalysisError(
            f"{path}: NFSv2 is not supported (this capture's NFS is "
            f"v{'/'.join(sorted(cap.versions))}): only NFSv3 and NFSv4 READDIRs are analyzed"
        )
    if not cap.readdir_calls:
        raise AnalysisError(
            f"{path}: no READDIR or READDIRPLUS call in this capture ({cap.messages} RPC "
            "messages); capture while the directory is listed"
        )


def _cut_at_end(damage, calls, cut):
    """(the damage over the whole capture, less a cut last record; that cut placed at the
    capture's end, on every client). A file cut short in the middle of its last packet (or
    its gzip stream cut or damaged: the decoders read up to there, and say so: cut, the
    Capture's) lost what came after and nothing before: only a listing still under way where
    the capture ends can miss a call there."""
    cut = [d for d in damage if d["what"] == cut] if cut else []
    if not cut:
        return damage, []
    last = 0
    if calls is not None and len(calls):
        last = max(max(calls.ts), max(calls.reply_ts))
    placed = [dict(d, **{"from": int(last), "to": 1 << 62}) for d in cut]
    return [d for d in damage if d not in cut], placed


def _capture_damage(cap, path, phase, facts):
    """(damage over the whole capture, damage placed on one client's connection and in time,
    packets the kernel dropped while capturing or None)."""
    damage = []
    # A plain pcap does not keep the drop count: the reproducer's facts have tcpdump's.
    dropped = int_or_none(facts.get(f"{phase}.capture_dropped")) if phase else None
    if dropped is None and "pcapng" in cap.kind:
        dropped = pcapng.pcapng_drops(path)
    placed = []
    # Bytes of a TCP stream that were not captured show where they were lost: only the
    # READDIRs next to them are in doubt. The compiled decoder found them as it read
    # (cap.holes); after tshark, trace/tcpholes walks the capture for them.
    found = cap.holes if cap.holes is not None else tcpholes.walk(path, set(cap.ports))
    for client, since, until, cut, lost, to_server in found.holes:
        what = (
            f"{cap.truncated_frames} frames cut to {cap.snaplen} bytes by the snaplen"
            if cut
            else f"{dropped} packets dropped by the kernel while capturing"
            if dropped
            else "TCP segments missing from the capture"
        )
        way = "to the server" if to_server else "to the client"
        placed.append(
            {
                "from": since,
                "to": until,
                "client": client,
                "to_server": to_server,
                "what": f"{what} ({lost:,} bytes {way})",
                # (what rules/words folds a thousand such places into: one clause, the bytes)
                "kind": what,
                "bytes": lost,
            }
        )
    if found.udp and (dropped or cap.truncated_frames):
        # NFS over UDP numbers nothing: its losses cannot be placed.
        damage.append(_whole(f"{dropped or cap.truncated_frames} frames lost, over UDP"))
    for w in cap.warnings:
        damage.append(_whole(w))
    if cap.unsplit_frames:
        damage.append(
            _whole(
                f"{cap.unsplit_frames} frames carried several RPC messages that could not be "
                "told apart"
            )
        )
    return damage, placed, dropped


def _info(cap, path, dropped, nfs):
    """The capture's header of the analysis: its format and decoder, and its counts."""
    compiled = cap.decoder == "compiled"
    info = {
        "path": path,
        "format": f"{cap.kind} capture (NFSv{'/'.join(sorted(cap.versions))}, "
        f"{'compiled decoder' if compiled else 'tshark'})",
        "cpus": "-",
        "frames": cap.frames,
        "rpc_messages": cap.messages,
        "readdirs": cap.readdir_calls,
        "missing_replies": cap.missing_replies,
        "retransmitted_calls": cap.retransmitted_calls,
        "truncated_frames": cap.truncated_frames,
        "snaplen": cap.snaplen,
        "unsplit_frames": cap.unsplit_frames,
        "split_frames": cap.split_frames,
        # The compiled decoder's TCP reassembly; null where tshark decoded (it does not count).
        "retransmitted_segments": cap.retransmitted_segments if compiled else None,
        "reordered_segments": cap.reordered_segments if compiled else None,
        "decoder_fallback": cap.fallback,
        "dropped": dropped,
        "nfs": nfs,
        "ports": list(cap.ports),
        "warnings": cap.warnings,
    }
    return info


def _rpc_table(out):
    """The capture's READDIRs in the columns of a trace's canonical rpc table (export writes
    those), in the capture's order, each listing's rows (rpc_rows) by their number: the
    client stands where a trace has the process name."""
    rows = [lst.rpcs.a for lst in out]
    a = np.concatenate(rows) if rows else np.zeros(0, dtype=ROW)
    n = [len(r) for r in rows]
    client = np.repeat(np.array([lst.client for lst in out], dtype=object), n)
    fileid = np.repeat(np.array([lst.fileid or 0 for lst in out], dtype=np.int64), n)
    unknown = np.repeat(np.array([lst.fileid is None for lst in out], dtype=bool), n)
    order = np.argsort(a["row"], kind="stable")
    a, client, fileid, unknown = a[order], client[order], fileid[order], unknown[order]
    error = a["has_status"] & (a["status"] != 0)  # the READDIRs that failed
    return pd.DataFrame(
        {
            "ts": pd.arrays.IntegerArray(a["ts"], np.zeros(len(a), dtype=bool)),
            "pid": pd.NA,
            "cpu": pd.NA,
            "comm": client,
            "source": "capture",
            "fileid": pd.arrays.IntegerArray(fileid, unknown),
            "cookie": pd.arrays.IntegerArray(a["cookie"], ~a["has_cookie"]),
            "dtsize": pd.arrays.IntegerArray(a["maxcount"], ~a["has_maxcount"]),
            "plus": a["plus"].astype(int),
            "error": pd.arrays.IntegerArray(a["status"], ~error),
        },
        index=a["row"],
    )


def _notes(cap, dropped):
    """What the capture says about its own completeness, for the report's header."""
    out = [
        f"{cap.frames:,} NFS frames, {cap.messages:,} RPC messages, "
        f"{cap.readdir_calls:,} READDIR calls ({cap.missing_replies} without a reply, "
        f"{cap.retransmitted_calls} retransmitted), {cap.attr_replies:,} directory "
        "attribute replies; no process is on the wire: listings are per client and "
        "directory"
    ]
    if cap.decoder == "compiled":
        holes = cap.holes.holes if cap.holes is not None else []
        lost = sum(h[4] for h in holes)
        out.append(
            f"TCP: {cap.retransmitted_segments:,} retransmitted segments (their data read "
            f"once), {cap.reordered_segments:,} out of order (came late into a hole), "
            + (
                f"{len(holes):,} holes ({lost:,} bytes never captured; read on from the next "
                "record mark)"
                if holes
                else "none lost"
            )
        )
    elif cap.fallback:
        out.append(f"decoded by tshark: the compiled decoder met {cap.fallback}")
    if dropped is not None:
        out.append(
            f"{'WARNING: ' if dropped else ''}{dropped} packets dropped by the kernel "
            "while capturing (tcpdump's count, or the pcapng interface statistics)"
        )
    if cap.truncated_frames:
        out.append(
            f"WARNING: {cap.truncated_frames} frames cut to {cap.snaplen} bytes by the "
            "snaplen: capture with `tcpdump -s 0`"
        )
    if cap.unsplit_frames:
        out.append(
            f"WARNING: {cap.unsplit_frames} frames carried several RPC messages that "
            "could not be told apart"
        )
    if "2" in cap.versions:
        out.append(
            "WARNING: NFSv2 calls are in this capture: NFSv2 is not supported, its "
            "READDIRs are not counted"
        )
    out += [f"WARNING: {w}" for w in cap.warnings]
    return out
