"""Where a listing's time went when no restart explains it (issue 46): findings on a listing's
round trips (model/roundtrips), each with its evidence and what to change. They stand beside
the restart verdict (rules/verdict), which they never change: `check`'s exit status stays the
restart answer.

The thresholds are ratios of the listing's own evidence, not times tuned to one machine:

- a call is made per name when the listing sent at least one for every other name
  (PER_NAME), at most MAX_PER_NAME a name (more is one object asked again and again, such as
  the directory's own revalidation), more of them than READDIR_FACTOR times its READDIRs (the
  names, not the directory, cost the round trips) and, where server time is known, they took
  at least MATTERS of the listing's time;
- the READDIRs themselves matter when the listing needed READDIR_FACTOR of them or more and
  they took at least MATTERS of the listing's time in server time (a capture, or a trace with
  sunrpc:rpc_stats_latency);
- a READDIR waits on the server when its mean server time is at least SLOW_FACTOR times the
  median of the listing's other calls to the same server, and the READDIRs matter;
- READDIRs are small (few entries each) when the listing needed READDIR_FACTOR of them or
  more, did not restart nor meet a change of its directory (the restart verdict explains
  those READDIRs) and either the client threw part of each reply away and asked again from
  inside it, in a directory larger than one reply (the wire: entries carried again, and
  whole replies would have saved MATTERS of the READDIRs; a trace: a kernel known to keep
  one page, ONE_PAGE_ENTRIES, of each reply, asking at most REASK_FACTOR times that a
  READDIR), or the replies were short of
  what was asked: their entries, each as large as the protocol allows (MAX_ENTRY_BYTES:
  255-byte names), fill less than SHORT of the bytes asked. Their share of the listing's
  time is not asked: a trace and a capture of one run say the same;
- a listing read in the kernel's uncached mode is said whenever its trace shows one such
  READDIR: it is a mode, not a cost, and the trace tells it apart from a cache fill.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import events

if TYPE_CHECKING:
    from ..model.listing import Listing
    from ..model.roundtrips import OpCount, RoundTrips

PER_NAME = 0.5
MAX_PER_NAME = 2
READDIR_FACTOR = 10
MATTERS = 0.10
SLOW_FACTOR = 10
# Under a second is nobody's slow listing: check says nothing of where such a listing's time
# went (analyze still accounts it).
NOTICED_S = 1.0
REASK_FACTOR = 2
SHORT = 0.5
# The largest directory entry each reply can carry, in XDR bytes, with a name of NAME_MAX (255,
# padded to 256): NFSv3 entry3 (RFC 1813: value_follows 4, fileid 8, name 4 + 256, cookie 8);
# entryplus3 adds post_op_attr (4 + fattr3 84) and post_op_fh3 (4 + 4 + NFS3_FHSIZE 64); NFSv4
# entry4 (RFC 8881: value_follows 4, cookie 8, name 4 + 256, bitmap 4 + 12, attrlist 4) with
# the attributes Linux asks for (type 4, change 8, size 8, fsid 16, filehandle 4 + 128,
# fileid 8, mode 4, numlinks 4, rawdev 8, space_used 8, three times 36, mounted_on_fileid 8)
# and owner and group of at most IDMAP_NAMESZ (4 + 128 each).
MAX_ENTRY_BYTES = {
    "READDIR3": 4 + 8 + 4 + 256 + 8,
    "READDIRPLUS3": 4 + 8 + 4 + 256 + 8 + 4 + 84 + 4 + 4 + 64,
    "READDIR4": 4 + 8 + 4 + 256 + 4 + 12 + 4 + 244 + 2 * (4 + 128),
}
# The entries one cache page holds on a client that keeps one page of each reply (5.10:
# (4096 - 24) / 40 bytes a struct nfs_cache_array_entry).
ONE_PAGE_ENTRIES = 101
# What each kind of per-name call says and what to change.
ATTRIBUTE_OPS = {"GETATTR", "ACCESS"}
LOOKUP_OPS = {"LOOKUP", "LOOKUPP"}


class Finding(NamedTuple):  # (not a dataclass: see events.py)
    kind: str  # per_name_lookup, per_name_getattr, per_name_acl, per_name_other,
    # readdir_share, slow_readdir, small_readdirs, uncached_readdir
    ops: list  # the "NFS3.LOOKUP" keys it is about
    calls: int
    evidence: str
    change: str
    # What to change, in the few words of check's line ("" where it says none): a mount
    # option only where the input shows the mount can take it.
    short: str = ""

    def text(self) -> str:
        return f"{self.evidence}: {self.change}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ops": self.ops,
            "calls": self.calls,
            "evidence": self.evidence,
            "change": self.change,
        }


def _n(v: float) -> str:
    return f"{v:,}"


def _time(o: OpCount, rt: RoundTrips) -> str:
    if o.server_seconds is None:
        return ""
    share = f", {o.share:.0%} of the listing's {rt.seconds:.1f} s" if o.share is not None else ""
    return f" ({o.server_seconds:.2f} s of server time{share})"


def _per_name(o: OpCount, rt: RoundTrips, plus: str | bool | None) -> Finding | None:
    """The Finding of an operation sent once per name, or None."""
    if not rt.names or o.readdir or not PER_NAME <= o.calls / rt.names <= MAX_PER_NAME:
        return None
    if o.calls <= READDIR_FACTOR * max(rt.readdirs, 1):
        return None
    if o.share is not None and o.share < MATTERS:
        return None
    what = f"{_n(o.calls)} {o.op}s for {_n(rt.names)} names{_time(o, rt)}"
    if o.program.startswith("NFSACL"):  # (NFSv3's side protocol: `noacl` is a v3 option)
        return Finding(
            "per_name_acl",
            [o.key],
            o.calls,
            what + ": the tool asks each name's POSIX ACL (ls -l does, for its '+' mark)",
            "mount with `noacl` where the export's ACLs do not matter to this reader, or use a "
            "tool that does not ask for ACLs",
            "mount with noacl or list without ACLs",
        )
    if o.op in LOOKUP_OPS and plus is False:
        # NFSv3 READDIRs without READDIRPLUS: the v3 mount's `nordirplus`, or the client's
        # choice; READDIRPLUS brings each name's handle, so no LOOKUP is needed.
        return Finding(
            "per_name_lookup",
            [o.key],
            o.calls,
            f"{what}: the client looked each name up: the listing's READDIRs were plain NFSv3 "
            "READDIRs, which bring no file handle or attributes: readdirplus is off "
            "(`nordirplus`)",
            "mount without `nordirplus` (READDIRPLUS brings each name's handle and attributes)",
            "mount without nordirplus",
        )
    if o.op in LOOKUP_OPS:
        # READDIRPLUS, or NFSv4 READDIRs (they bring handles in the client's readdirplus mode,
        # which the calls do not show): the input shows no `nordirplus` to take off.
        brought = "READDIRPLUS" if plus == "READDIRPLUS" else "NFSv4 READDIRs"
        return Finding(
            "per_name_lookup",
            [o.key],
            o.calls,
            f"{what}: the client looked each name up, though its {brought} can bring each "
            "name's handle: they were not asked with handles past the first pages, or the "
            "names' dentries were dropped or revalidated before the tool reached them",
            "find what the tool asks of each name (strace -f: a stat or unlink of each makes "
            "a LOOKUP where the dentry is not cached); `lookupcache=none` mounts look every "
            "name up again",
            "find what the tool asks of each name",
        )
    if o.op in ATTRIBUTE_OPS:
        expired = (
            "expired (acregmin, 3 s by default) before the tool reached those names: each "
            "other per-name call made the listing outlive them"
        )
        why = (
            f"READDIRPLUS brought the attributes, but they {expired}"
            if plus == "READDIRPLUS"
            # (an NFSv4 READDIR asks each name's attributes in the client's readdirplus mode
            # alone, which the calls do not show)
            else f"the NFSv4 READDIRs brought no attributes of these names, or they {expired}"
            if plus
            else "the listing's READDIRs brought no attributes"
        )
        return Finding(
            "per_name_getattr",
            [o.key],
            o.calls,
            f"{what}: {why}",
            "remove the other per-name calls so the listing ends within the attribute cache's "
            "life, or mount with a longer `acregmin`/`actimeo` where older attributes are "
            "acceptable; `ls` without -l needs no attributes",
            "the attributes expired before use" if plus == "READDIRPLUS" else "",
        )
    return Finding(
        "per_name_other",
        [o.key],
        o.calls,
        f"{what}: one round trip per name",
        "find what the tool asks each name for (strace -f) and whether it needs it",
    )


def _readdir_findings(
    rt: RoundTrips, readdirs: list[OpCount], others: list[OpCount]
) -> list[Finding]:
    """Findings on the READDIRs themselves: only where the listing needed READDIR_FACTOR of
    them or more (a few round trips for the directory are no cost a client can save) and
    they took at least MATTERS of its time."""
    calls = sum(o.calls for o in readdirs)
    known = [o for o in readdirs if o.server_seconds is not None]
    if calls < READDIR_FACTOR or not known or rt.seconds <= 0:
        return []
    server = sum(o.server_seconds or 0.0 for o in known)  # (known: none is None)
    if server / rt.seconds < MATTERS:
        return []
    out = []
    per = f"{rt.names / calls:,.0f} names a READDIR, " if rt.names else ""
    size = f"at most {rt.max_dtsize:,} bytes asked" if rt.max_dtsize else "sizes not known"
    again = ""
    if rt.readdir_entries and rt.names and rt.readdir_entries > rt.names:
        again = (
            f"; the replies carried {rt.readdir_entries:,} entries for {rt.names:,} names, "
            "some fetched again (by restarts, or by a client that asks again from inside its "
            "previous reply, as 5.10 does)"
        )
    out.append(
        Finding(
            "readdir_share",
            [o.key for o in known],
            calls,
            f"{_n(calls)} READDIRs took {server:.2f} s of server time, {server / rt.seconds:.0%} "
            f"of the listing ({per}{size}){again}",
            "larger READDIRs (5.18+ clients size them up to the mount's rsize; 5.10 asks "
            "32 KiB), or a faster server for this directory",
        )
    )
    mean = server / calls
    rest = sorted(
        o.server_seconds / o.replied for o in others if o.server_seconds is not None and o.replied
    )
    if rest and mean >= SLOW_FACTOR * rest[len(rest) // 2] > 0:
        out.append(
            Finding(
                "slow_readdir",
                [o.key for o in known],
                calls,
                f"READDIRs waited {mean * 1000:.1f} ms each on the server, "
                f"{mean / rest[len(rest) // 2]:.0f} times the listing's other calls",
                "look at the server: the directory's size and its file system's readdir cost",
            )
        )
    return out


def findings(rt: RoundTrips | None) -> list[Finding]:
    """The Findings of one listing's RoundTrips (None: nothing), per-name calls first."""
    if rt is None:
        return []
    readdirs = [o for o in rt.ops if o.readdir]
    others = [o for o in rt.ops if not o.readdir]
    # Whether the READDIRs brought attributes: "READDIRPLUS", "READDIR" (NFSv4's asks for them
    # with the names), False (NFSv3 READDIR: names alone), None (no READDIR seen)
    plus: str | bool | None = None
    if any(o.op == "READDIRPLUS" for o in readdirs):
        plus = "READDIRPLUS"
    elif any(o.program.startswith("NFS4") for o in readdirs):
        plus = "READDIR"
    elif readdirs:
        plus = False
    out = [f for f in (_per_name(o, rt, plus) for o in others) if f is not None]
    out += _readdir_findings(rt, readdirs, others)
    return out + [f for f in (_small_readdirs(rt, readdirs), _uncached(rt)) if f is not None]


def _entry_bytes(readdirs: list[OpCount]) -> int | None:
    """The protocol's largest entry of the listing's READDIRs (MAX_ENTRY_BYTES), or None."""
    sizes = []
    for o in readdirs:
        v4 = o.program.startswith("NFS4")
        sizes.append(MAX_ENTRY_BYTES.get(f"{o.op}{4 if v4 else 3}"))
    known = [b for b in sizes if b]
    return max(known) if known else None


def _small_readdirs(rt: RoundTrips, readdirs: list[OpCount]) -> Finding | None:
    """The Finding of a listing that needed many READDIRs of few entries each, where the
    evidence names why (replies thrown away and asked again, or short of the ask), or None."""
    calls = sum(o.calls for o in readdirs)
    if calls < READDIR_FACTOR or not rt.names or rt.restarted:
        return None
    used = rt.names / calls
    asked = sorted(rt.dtsizes)[len(rt.dtsizes) // 2] if rt.dtsizes else None
    carried = (
        rt.readdir_entries / rt.counted_replies
        if rt.readdir_entries and rt.counted_replies
        else None
    )
    whole = events.keeps_whole_readdir_reply(rt.kernel)
    each = f"{_n(calls)} READDIRs for {_n(rt.names)} names, {used:,.0f} names a READDIR"
    ask = f", {asked:,} bytes asked (median)" if asked else ""
    keys = [o.key for o in readdirs]
    # The wire shows the client asking again from inside replies it had (entries carried
    # twice, no restart): it threw the rest of each away. That matters once keeping whole
    # replies would have saved MATTERS of the READDIRs.
    needed = math.ceil(rt.names / carried) if carried and rt.names > carried else None
    if needed is not None and rt.refetched_entries and needed <= (1 - MATTERS) * calls:
        return Finding(
            "small_readdirs",
            keys,
            calls,
            f"{each}{ask}: each reply carried {carried:,.0f} entries (the wire), the client "
            f"took {used:,.0f} and asked again from there; {_n(needed)} READDIRs would have "
            "brought every name",
            "a client that keeps whole replies (5.18 and later fill as many cache pages as a "
            "reply carries); on this one a larger rsize makes each reply longer, not the "
            "READDIRs fewer",
        )
    if carried is None and whole is False and used <= REASK_FACTOR * ONE_PAGE_ENTRIES:
        return Finding(
            "small_readdirs",
            keys,
            calls,
            f"{each}{ask}: this kernel ({rt.kernel}) keeps one page of each reply, about "
            f"{ONE_PAGE_ENTRIES} entries, and asks again from the last of them",
            "a 5.18 or later client (it keeps whole replies); a larger rsize does not help "
            "this one",
        )
    per_reply = carried if carried is not None else used if whole else None
    biggest = _entry_bytes(readdirs)
    if per_reply is None or not asked or not biggest or rt.names <= per_reply:
        return None  # (a directory one reply holds: its size is not the replies')
    if per_reply * biggest >= SHORT * asked:
        return None
    return Finding(
        "small_readdirs",
        keys,
        calls,
        f"{each}{ask}: the replies carried {per_reply:,.0f} entries each"
        + (" (the wire)" if carried is not None else "")
        + f", at most {per_reply * biggest:,.0f} bytes even with 255-byte names: the server "
        "sent less than half of what was asked",
        "look at the server's largest READDIR reply (its readdir or transfer size; knfsd: "
        "its max block size); the client's rsize only caps the ask",
    )


def _uncached(rt: RoundTrips) -> Finding | None:
    """The Finding of a listing some of whose READDIRs the kernel sent in its uncached mode,
    or None (none, or a trace that cannot tell)."""
    if not rt.uncached_readdirs:
        return None
    return Finding(
        "uncached_readdir",
        [o.key for o in rt.ops if o.readdir],
        rt.uncached_readdirs,
        f"{_n(rt.uncached_readdirs)} of the listing's {_n(rt.readdirs)} READDIRs were read in "
        "the uncached mode (the kernel's uncached-mode READDIR events): the reader's cookie "
        "was not in the directory's page cache (dropped under the listing, or a seek to a "
        "cookie the cache does not hold), so the client read on from it into a buffer of its "
        "own and threw the entries away once returned",
        "find what dropped the cache during the listing (the invalidations above: writers "
        "in the directory, or its attributes timing out); another reader of the directory "
        "gets no help from these READDIRs",
    )


def line(lst: Listing, rt: RoundTrips, found: list[Finding]) -> str | None:
    """One line on a listing's time, where no restart explains it: its per-name calls (or
    READDIRs that took most of its time) and what to change; None where there is none, where
    the listing took under NOTICED_S, or where it restarted, may have, or lost events (the
    restart verdict speaks)."""
    if lst.restarts or lst.possible_restarts or lst.ambiguous_rows or lst.damage:
        return None
    if rt.seconds is not None and rt.seconds < NOTICED_S:
        return None
    named = [f for f in found if f.kind.startswith("per_name")]
    readdir = [
        f for f in found if f.kind == "readdir_share" and rt.seconds and _readdir_share(rt) >= 0.5
    ]
    if not named and not readdir:
        return None
    calls = " + ".join(f"{_n(f.calls)} {f.ops[0].split('.', 1)[1]}" for f in named + readdir)
    server = rt.server_seconds()
    spent = (
        f", {server:.1f} s of server time in {rt.seconds:.1f} s"
        if server is not None
        else f" in {rt.seconds:.1f} s"
    )
    names = f" for {_n(rt.names)} names" if rt.names else ""
    # What to change, once each: the ACLs' fix also removes the calls that made the
    # attributes expire.
    acl = any(f.kind == "per_name_acl" for f in named)
    fix = [f.short for f in named if f.short and not (acl and f.kind == "per_name_getattr")]
    if readdir:
        fix.append("READDIRs took most of it")
    fix = list(dict.fromkeys(fix))
    went = "round trips per name" if named else "READDIRs"
    return f"time went to {went}, not restarts: {rt.who}: {calls}{names}{spent}" + (
        f" ({'; '.join(fix)})" if fix else ""
    )


def _readdir_share(rt: RoundTrips) -> float:
    return sum(o.server_seconds or 0 for o in rt.ops if o.readdir) / rt.seconds
