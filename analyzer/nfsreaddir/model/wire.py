"""Listings from the wire: what a packet capture says about READDIR restarts.

A capture sees READDIR calls and replies, not processes and not open directories, so a listing
here is one client's (address:port) pass over one directory (filehandle): from a READDIR at
cookie 0 to a reply with eof. A restart is a READDIR at cookie 0 while such a pass is under way
and has not reached eof: the client went back to the start of the directory. Evidence that the
directory changed under the listing is its version moving between READDIRs (the NFSv4 change
attribute in GETATTR replies; NFSv3 mtime/ctime in post-op attributes).

What a capture cannot tell, and says:
- two readers of one directory on one client are one stream of READDIRs. A client continues a
  pass from the last cookie of its previous reply; a READDIR that continues from an older reply
  means two passes interleave, and the listing is marked so (ambiguous rows: cannot decide);
- a dropped packet or a frame cut by the snaplen hides READDIRs: missing replies, frames cut
  short and the drop count tcpdump reported (a reproducer's facts) are damage.

The listings are listing.Listing objects, so the one verdict module judges them as it judges
a trace's.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd

from ..trace import capture as capture_mod
from ..trace import pcapng
from ..units import int_or_none
from . import analysis, fleet
from .listing import Analysis
from .wire_passes import Passes, by_dir, listings


def _versions(lst, attrs):
    """The changes of the directory's version that the listing met: (how many, the frame of
    each reply that showed one). A change counts when a reply after the listing's first
    READDIR call and before its last showed it: only a READDIR after the change can go back
    to cookie 0, and a change shown at or before the first call is the state the listing
    began from. Frame numbers order the capture (coarse clocks give ties); a listing of one
    READDIR meets no change. attrs: the attribute replies' frames (in order) and versions,
    per (client, filehandle)."""
    frames = lst.rpcs["frame"].to_numpy()
    first, last = int(frames.min()), int(frames.max())
    a = attrs.get((lst.client, lst.fh))
    if a is None:
        return 0, []
    at, vals = a
    end = int(np.searchsorted(at, last, "left"))  # the replies before the last call
    # From the last version seen before the listing began: a change since then counts.
    begin = max(int(np.searchsorted(at, first, "left")) - 1, 0)
    at, vals = at[begin:end], vals[begin:end]
    changes = [int(at[k]) for k in range(1, len(vals)) if vals[k] != vals[k - 1]]
    return sum(1 for f in changes if f > first), changes


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
    cap = capture_mod.read(path, tshark=tshark, ports=ports, passes=Passes)
    _refuse_unusable(cap, path)
    phase, facts = _phase_facts(path)
    damage, dropped = _capture_damage(cap, path, phase, facts)
    out = listings(cap)
    # Each directory's attribute replies per client, split once: a server's capture has
    # thousands of listings, and filtering the whole table for each grew with their square.
    at, version = cap.attrs["frame"].to_numpy("int64"), cap.attrs["version"].tolist()
    attrs = {k: (at[rows], [version[i] for i in rows]) for k, rows in by_dir(cap.attrs).items()}
    # The directory's inode number, where an attribute reply gave it for its filehandle.
    fileids = cap.attrs.dropna(subset=["fileid"]).groupby("fh")["fileid"].first()
    for lst in out:
        if lst.fileid is None and lst.fh in fileids.index:
            lst.fileid = int(fileids[lst.fh])
        lst.version_changes, changes = _versions(lst, attrs)
        # The restarts, and the other bound: every ambiguous cookie-0 READDIR a restart too
        # (without it the most restarts the capture allows would read 0 beside restarts=4).
        possible = sorted(set(lst._restart_idx) | set(lst.ambiguous_rows))
        if possible:
            inv_ts = np.array([], dtype=np.int64)
            lst.restarts = analysis.restart_costs(lst.rpcs, lst._restart_idx, inv_ts)
            lst.possible_restarts = analysis.restart_costs(lst.rpcs, possible, inv_ts)
            # after_invalidation: on the wire, the directory's version moved since the
            # READDIR before the restart.
            ch = np.array(changes, dtype=np.int64)
            frames = lst.rpcs["frame"].to_numpy()
            for r in lst.restarts + lst.possible_restarts:
                prev = frames[r.rpc_index - 1] if r.rpc_index else frames[r.rpc_index]
                r.after_invalidation = bool(((ch > prev) & (ch < frames[r.rpc_index])).any())
        lst.damage = list(damage)
        if lst.missing_replies:
            lst.damage.append(
                {
                    "from": lst.start,
                    "to": lst.end,
                    "what": f"{lst.missing_replies} READDIR replies missing from the capture",
                }
            )
    if phase and len({x.client for x in out}) == 1:
        # The reproducer's lister made one pass: the longest listing is its phase. A server's
        # capture of many clients (readdir-fleet) has one lister per client, none of them it.
        main = max(out, key=lambda x: len(x.rpcs), default=None)
        if main is not None:
            main.phase = phase
            main.status = int_or_none(facts.get(f"{phase}.status"))
            main.entries = int_or_none(facts.get(f"{phase}.entries"))
            if main.fileid is None:
                main.fileid = int_or_none(facts.get(f"{phase}.dir_fileid"))
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
    info["notes"] = _notes(cap, dropped)
    tables = {"rpc": _rpc_table(cap.readdirs, out), "readdirs": cap.readdirs, "attrs": cap.attrs}
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


def _refuse_unusable(cap, path):
    """An AnalysisError naming what the capture lacks and how to capture again, where it has
    no READDIR to analyze."""
    on = ", ".join(map(str, cap.ports))
    if not cap.messages and not cap.port_frames:
        raise analysis.AnalysisError(
            f"{path}: no NFS traffic in this capture: no frame to or from port {on} and no ONC "
            "RPC message; capture the NFS traffic with `tcpdump -s 0 -w FILE port 2049` on the "
            "client (name the server's port if it is not 2049)"
        )
    if cap.truncated_frames and not len(cap.readdirs):
        raise analysis.AnalysisError(
            f"{path}: {cap.truncated_frames} frames were cut to {cap.snaplen} bytes by the "
            "capture's snaplen, too short to decode NFS; capture again with `tcpdump -s 0`"
        )
    if not cap.messages:
        raise analysis.AnalysisError(
            f"{path}: no ONC RPC (NFS) message in this capture; capture the NFS traffic with "
            "`tcpdump -s 0 -w FILE port 2049` on the client"
        )
    if not len(cap.readdirs) and "2" in cap.versions:
        raise analysis.AnalysisError(
            f"{path}: NFSv2 is not supported (this capture's NFS is "
            f"v{'/'.join(sorted(cap.versions))}): only NFSv3 and NFSv4 READDIRs are analyzed"
        )
    if not len(cap.readdirs):
        raise analysis.AnalysisError(
            f"{path}: no READDIR or READDIRPLUS call in this capture ({cap.messages} RPC "
            "messages); capture while the directory is listed"
        )


def _capture_damage(cap, path, phase, facts):
    """(damage over the whole capture, packets the kernel dropped while capturing or None)."""
    damage = []
    if cap.truncated_frames:
        damage.append(
            _whole(f"{cap.truncated_frames} frames cut to {cap.snaplen} bytes by the snaplen")
        )
    # A plain pcap does not keep the drop count: the reproducer's facts have tcpdump's.
    dropped = int_or_none(facts.get(f"{phase}.capture_dropped")) if phase else None
    if dropped is None and "pcapng" in cap.kind:
        dropped = pcapng.pcapng_drops(path)
    if dropped:
        damage.append(_whole(f"{dropped} packets dropped by the kernel while capturing"))
    for w in cap.warnings:
        damage.append(_whole(w))
    if cap.unsplit_frames:
        damage.append(
            _whole(
                f"{cap.unsplit_frames} frames carried several RPC messages that could not be "
                "told apart"
            )
        )
    return damage, dropped


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
        "readdirs": int(len(cap.readdirs)),
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


def _rpc_table(rd, out):
    """The capture's READDIRs in the columns of a trace's canonical rpc table (export writes
    those): the client stands where a trace has the process name."""
    ids = np.zeros(len(rd), dtype=np.int64)
    unknown = np.ones(len(rd), dtype=bool)
    for lst in out:
        if lst.fileid is not None:
            ids[lst.rpc_rows] = lst.fileid
            unknown[lst.rpc_rows] = False
    fileid = pd.Series(pd.arrays.IntegerArray(ids, unknown))
    return pd.DataFrame(
        {
            "ts": rd["ts"],
            "pid": pd.NA,
            "cpu": pd.NA,
            "comm": rd["client"],
            "source": "capture",
            "fileid": fileid,
            "cookie": rd["cookie"],
            "dtsize": rd["maxcount"],
            "plus": rd["plus"].astype(int),
            "error": rd["status"].where(rd["status"] != 0),
        }
    )


def _notes(cap, dropped):
    """What the capture says about its own completeness, for the report's header."""
    out = [
        f"{cap.frames:,} NFS frames, {cap.messages:,} RPC messages, "
        f"{len(cap.readdirs):,} READDIR calls ({cap.missing_replies} without a reply, "
        f"{cap.retransmitted_calls} retransmitted), {len(cap.attrs):,} directory "
        "attribute replies; no process is on the wire: listings are per client and "
        "directory"
    ]
    if cap.decoder == "compiled":
        # A lost segment is never in this count: the compiled decoder gives such a capture
        # to tshark (the note below).
        out.append(
            f"TCP: {cap.retransmitted_segments:,} retransmitted segments (their data read "
            f"once), {cap.reordered_segments:,} out of order (held until the hole before them "
            "filled), none lost"
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
