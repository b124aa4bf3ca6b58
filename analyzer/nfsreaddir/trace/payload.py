"""The payload of one event line of `trace-cmd report` as field=value pairs, with the compound
forms the NFS and SUNRPC events print (fileid=MAJ:MIN:INO, cookie:verifier=, nrpages=3->0,
task:ID@CLIENT, error=-5 (EIO), a kprobe's (ip), ...) normalised to the names and values
`report -R` gives (see :mod:`.text`)."""

from __future__ import annotations

import re

_KV_RE = re.compile(r"(?:^|(?<=[\s,]))([A-Za-z_][\w.]*(?::[A-Za-z_][\w.]*)*)=")
_TASK_RE = re.compile(r"(?:^|\s)task:(?P<id>[0-9a-fA-Fx]+)@(?P<cl>-?[0-9a-fA-Fx]+)")
# A number and its name, "-5 (EIO)" or "0xa (INVALID_DATA|INVALID_ATIME)"; in a line cut short
# the name may lack its ")", and the number before it is still whole.
_ERRNAME_RE = re.compile(r"^(-?\d+|0x[0-9a-fA-F]+)\s+\([^()]*\)?$")
_FILEID_RE = re.compile(r"^([0-9a-fA-F]+):([0-9a-fA-F]+):(\d+)$")
_DIR_NAME_RE = re.compile(r"^([0-9a-fA-F]{2,}):([0-9a-fA-F]{2,}):(\d+)/(.*)$", re.S)
_DEV_RE = re.compile(r"^([0-9a-fA-F]+):([0-9a-fA-F]+)$")
_VERF_COOKIE_RE = re.compile(r"^([0-9a-fA-F]*):(0x[0-9a-fA-F]+|\d+)$")
_ALIASES = {"cache_index": "index", "nfs_flags": "nfsi_flags"}
_RPC_RE = re.compile(
    r"task:\S+\s+(?P<prog>[A-Za-z_]\w*?)v(?P<ver>\d+)\s+(?P<proc>\S+)\s+"
    r"\((?P<a>a?)sync\)"
)
# rpc_stats_latency's 'task:135@4 xid=0x2225ae4e nfsv4 OPEN backlog=...': the program and
# its version printed as one word, as rpc_request prints them
_LATENCY_RE = re.compile(
    r"task:\S+\s+xid=(?P<xid>\S+)\s+(?P<prog>[A-Za-z_]\w*?)v(?P<ver>\d+)\s+(?P<proc>\S+)\s+backlog="
)
# The events that print the program and its version as one word, and where
_PROGRAM_RES = {"rpc_request": _RPC_RE, "rpc_stats_latency": _LATENCY_RE}
_INT_RE = re.compile(r"^-?\d+$")
_HEX_RE = re.compile(r"^-?0[xX][0-9a-fA-F]+$")
_PROBE_IP_RE = re.compile(r"^\((?:0x)?(?P<ip>[0-9a-fA-F]{6,16})\)(?:\s|$)")


def int_of(v):
    """The integer a report value stands for, or None."""
    if v == "(nil)":  # printk's %p of a NULL pointer (kfree's ptr=(nil)), a 0 in the record
        return 0
    if _INT_RE.match(v):
        return int(v)
    if _HEX_RE.match(v):
        return int(v, 0)
    return None


def _split_kv(payload):
    """'a=1 b=two words c=3' -> [('a', '1'), ('b', 'two words'), ('c', '3')]."""
    ms = list(_KV_RE.finditer(payload))
    out = []
    for i, m in enumerate(ms):
        end = ms[i + 1].start() if i + 1 < len(ms) else len(payload)
        val = payload[m.end() : end]
        if i + 1 < len(ms):
            val = val.rstrip()
            if val.endswith(","):
                val = val[:-1]
        out.append((m.group(1), val))
    return out


def _dev(major, minor):
    """The kernel's dev_t (MAJ << 20 | MIN) from the hex MAJ:MIN trace-cmd prints."""
    return str((int(major, 16) << 20) | int(minor, 16))


# Fields printed with the device as hex MAJ:MIN first: (pattern, the fields after it).
_WITH_DEVICE = {
    "fileid": (_FILEID_RE, ("fileid",)),
    # NFS lookup/create/... events: name=MAJ:MIN:DIR/NAME (-R: dev=, dir=, name=)
    "name": (_DIR_NAME_RE, ("dir", "name")),
    "dev": (_DEV_RE, ()),
}


def _normalise(pairs):
    """Normalise key=value pairs (the compound forms never occur in -R values)."""
    out = {}
    for k, v in pairs:
        v = v.strip()
        if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
            v = v[1:-1]
        if ":" in k:
            ks = k.split(":")
            vs = v.split(":")
            if len(ks) == len(vs):
                for kk, vv in zip(ks, vs):
                    out[_ALIASES.get(kk, kk)] = vv
                continue
        form = _WITH_DEVICE.get(k)
        if form and (m := form[0].match(v)):
            out["dev"] = _dev(m.group(1), m.group(2))
            out.update(zip(form[1], m.groups()[2:]))
            continue
        if "->" in v:
            # A change printed as before->after (the 5.10 series' nrpages=3->0).
            before, _, after = v.partition("->")
            out[_ALIASES.get(k, k) + "_before"] = before
            out[_ALIASES.get(k, k)] = after
            continue
        if k == "cookie":
            # 6.x readdir events: cookie=<verifier as hex>:0x<cookie>
            m = _VERF_COOKIE_RE.match(v)
            if m:
                out["verifier"] = m.group(1)
                out["cookie"] = m.group(2)
                continue
        m = _ERRNAME_RE.match(v)
        if m:
            v = m.group(1)
            # NFS events keep `unsigned long error` positive and print -error with its name.
            if k == "error" and v.startswith("-"):
                v = v[1:]
        out[_ALIASES.get(k, k)] = v
    return out


def _task(payload, out):
    m = _TASK_RE.search(payload)
    if not m:
        return
    a, b = m.group("id"), m.group("cl")

    def conv(s, hexy):
        if s.lower().startswith("0x"):
            return int(s, 16)
        return int(s, 16) if hexy else int(s)

    hexy = (len(a) == 8 and len(b.lstrip("-")) == 8) or bool(re.search(r"[a-fA-F]", a + b))
    try:
        out.setdefault("task_id", str(conv(a, hexy)))
        out.setdefault("client_id", str(conv(b, hexy)))
    except ValueError:
        pass


def _syscall_fields(name, payload):
    """trace-cmd prints a system call's arguments as 'fd: 0x00000006, count: 0x00008000' and its
    return bare, as the unsigned hex of a signed long ('0xfffffffffffffffc' is -4)."""
    if name.startswith("sys_exit_"):
        try:
            v = int(payload, 0)
        except ValueError:
            return {}
        return {"ret": str(v - (1 << 64) if v >= 1 << 63 else v)}
    return dict(kv.split(": ", 1) for kv in payload.split(", ") if ": " in kv)


def normalised(name, payload):
    """{field: value text} of the payload of event ``name`` (not ftrace print)."""
    if "=" not in payload and name.startswith(("sys_enter_", "sys_exit_")):
        return _syscall_fields(name, payload)
    out = _normalise(_split_kv(payload))
    _task(payload, out)
    program_re = _PROGRAM_RES.get(name)
    m = program_re.search(payload) if program_re else None
    if m:
        out.setdefault("version", m.group("ver"))
        if name == "rpc_request":
            out.setdefault("async", "1" if m.group("a") else "0")
        else:  # the pair splitter took the words up to backlog= for xid's value
            out["xid"] = m.group("xid")
        out.setdefault("progname", m.group("prog"))
        out.setdefault("procname", m.group("proc"))
    m = _PROBE_IP_RE.match(payload)
    if m:
        out.setdefault("__probe_ip", "0x" + m.group("ip"))
    return out
