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
  median of the listing's other calls to the same server, and the READDIRs matter.
"""

from __future__ import annotations

from dataclasses import dataclass

PER_NAME = 0.5
MAX_PER_NAME = 2
READDIR_FACTOR = 10
MATTERS = 0.10
SLOW_FACTOR = 10
# Under a second is nobody's slow listing: check says nothing of where such a listing's time
# went (analyze still accounts it).
NOTICED_S = 1.0
# What each kind of per-name call says and what to change.
ATTRIBUTE_OPS = {"GETATTR", "ACCESS"}
LOOKUP_OPS = {"LOOKUP", "LOOKUPP"}


@dataclass
class Finding:
    kind: str  # per_name_lookup, per_name_getattr, per_name_acl, per_name_other,
    # readdir_share, slow_readdir
    ops: list  # the "NFS3.LOOKUP" keys it is about
    calls: int
    evidence: str
    change: str

    def text(self):
        return f"{self.evidence}: {self.change}"

    def to_dict(self):
        return {
            "kind": self.kind,
            "ops": self.ops,
            "calls": self.calls,
            "evidence": self.evidence,
            "change": self.change,
        }


def _n(v):
    return f"{v:,}"


def _time(o, rt):
    if o.server_seconds is None:
        return ""
    share = f", {o.share:.0%} of the listing's {rt.seconds:.1f} s" if o.share is not None else ""
    return f" ({o.server_seconds:.2f} s of server time{share})"


def _per_name(o, rt, plus):
    """The Finding of an operation sent once per name, or None."""
    if not rt.names or o.readdir or not PER_NAME <= o.calls / rt.names <= MAX_PER_NAME:
        return None
    if o.calls <= READDIR_FACTOR * max(rt.readdirs, 1):
        return None
    if o.share is not None and o.share < MATTERS:
        return None
    what = f"{_n(o.calls)} {o.op}s for {_n(rt.names)} names{_time(o, rt)}"
    if o.program.startswith("NFSACL"):
        return Finding(
            "per_name_acl",
            [o.key],
            o.calls,
            what + ": the tool asks each name's POSIX ACL (ls -l does, for its '+' mark)",
            "mount with `noacl` where the export's ACLs do not matter to this reader, or use a "
            "tool that does not ask for ACLs",
        )
    if o.op in LOOKUP_OPS:
        why = (
            "the listing's READDIRs were plain READDIRs, which bring no file handle or "
            "attributes: readdirplus is off (`nordirplus`)"
            if plus is False
            else "readdirplus was not used past the first pages, or its results were dropped"
        )
        return Finding(
            "per_name_lookup",
            [o.key],
            o.calls,
            f"{what}: the client looked each name up: {why}",
            "mount without `nordirplus` (READDIRPLUS brings each name's handle and attributes)",
        )
    if o.op in ATTRIBUTE_OPS:
        why = (
            f"{'READDIRPLUS' if plus == 'READDIRPLUS' else 'READDIR'} brought the attributes, "
            "but they expired (acregmin, 3 s by default) "
            "before the tool reached those names: each other per-name call made the listing "
            "outlive them"
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
        )
    return Finding(
        "per_name_other",
        [o.key],
        o.calls,
        f"{what}: one round trip per name",
        "find what the tool asks each name for (strace -f) and whether it needs it",
    )


def _readdir_findings(rt, readdirs, others):
    """Findings on the READDIRs themselves: only where the listing needed READDIR_FACTOR of
    them or more (a few round trips for the directory are no cost a client can save) and
    they took at least MATTERS of its time."""
    calls = sum(o.calls for o in readdirs)
    known = [o for o in readdirs if o.server_seconds is not None]
    if calls < READDIR_FACTOR or not known or rt.seconds <= 0:
        return []
    server = sum(o.server_seconds for o in known)
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


def findings(rt):
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
    return out + _readdir_findings(rt, readdirs, others)


def line(lst, rt, found):
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
    kinds = {f.kind for f in named + readdir}
    fix = []
    if "per_name_acl" in kinds:
        fix.append("mount with noacl or list without ACLs")
    if "per_name_lookup" in kinds:
        fix.append("mount without nordirplus")
    if "per_name_getattr" in kinds and "per_name_acl" not in kinds:
        fix.append("the attributes expired before use")
    if readdir:
        fix.append("READDIRs took most of it")
    return f"time went to round trips per name, not restarts: {rt.who}: {calls}{names}{spent}" + (
        f" ({'; '.join(fix)})" if fix else ""
    )


def _readdir_share(rt):
    return sum(o.server_seconds or 0 for o in rt.ops if o.readdir) / rt.seconds
