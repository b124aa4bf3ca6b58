"""Per-client triage of a server's capture: which clients spend their READDIRs fetching again
what they had already fetched.

A capture taken on a server holds every client at once. Its listings (wire.py) are per client
connection (address:port) and directory (filehandle); here they are summed per client and
directory, and the clients ranked by the READDIRs their restarts spent getting back to where
they had been (refetched READDIRs), most first. A capture of one client has nothing to rank:
triage() gives None for it.

Where a client's READDIRs interleave two passes over one directory the capture cannot tell a
restart from a new pass (wire.py): such a listing counts no restart, and is counted apart as
ambiguous, so a client's restarts and refetched READDIRs are the ones the capture is sure of.
"""

from __future__ import annotations

import ipaddress

import pandas as pd

from ..recordtype import record

DIR_COLUMNS = [
    "client",
    "dir_fileid",
    "fh",
    "listings",
    "complete",
    "readdirs",
    "ambiguous",
    "restarts",
    "refetched_readdirs",
    "refetched_entries",
    "version_changes",
]
CLIENT_COLUMNS = [
    "rank",
    "client",
    "dirs",
    "listings",
    "complete",
    "readdirs",
    "ambiguous",
    "restarts",
    "refetched_readdirs",
    "refetched_share",
    "refetched_entries",
]


@record
class Triage:
    clients: pd.DataFrame  # one row per client connection, ranked (CLIENT_COLUMNS)
    dirs: pd.DataFrame  # one row per client and directory, in the clients' order (DIR_COLUMNS)


def _client_key(client):
    """Clients in address order (10.0.0.9 before 10.0.0.10), then port."""
    addr, _, port = client.rpartition(":")
    try:
        return (0, int(ipaddress.ip_address(addr.strip("[]"))), int(port), client)
    except ValueError:
        return (1, 0, 0, client)


SUMMED = [c for c in DIR_COLUMNS if c not in ("client", "dir_fileid", "fh")]


def _per_dir(listings):
    """DIR_COLUMNS, a list a column, one row per client and directory in the order they first
    come: the listings' own fields summed (not their summary(), which the text builds once
    more), the directory's inode number where one of them has it. Summed as the listings are
    gone through: a server's capture has thousands of listings and far fewer directories."""
    per: dict[tuple, list] = {}
    for x in listings:
        row = per.get((x.client, x.fh))
        if row is None:
            row = per[x.client, x.fh] = [x.fileid] + [0] * len(SUMMED)
        elif row[0] is None:
            row[0] = x.fileid
        for k, v in enumerate(
            (
                1,
                int(bool(x.complete)),
                len(x.rpcs),
                int(bool(x.ambiguous_rows)),
                len(x.restarts),
                sum(r.refetched for r in x.restarts),
                x.refetched_entries,
                x.version_changes or 0,
            ),
            1,
        ):
            row[k] += v
    out: dict[str, list] = {"client": [c for c, _ in per], "fh": [fh for _, fh in per]}
    for k, name in enumerate(["dir_fileid", *SUMMED]):
        out[name] = [row[k] for row in per.values()]
    return out


def triage(listings):
    """The Triage of a capture's listings (wire_passes.WireListing, their restarts found), or None
    when they come from fewer than two client connections."""
    per = _per_dir(listings)  # (one pass: a capture's listings are read back from disk)
    if len(set(per["client"])) < 2:
        return None
    # A directory is its filehandle; its inode number where the capture gave one.
    dirs = pd.DataFrame(per, columns=DIR_COLUMNS)
    clients = dirs.groupby("client", sort=False)[SUMMED].sum()
    clients["dirs"] = dirs.groupby("client", sort=False).size()
    clients = clients.reset_index()
    clients["refetched_share"] = (
        clients["refetched_readdirs"] / clients["readdirs"].where(clients["readdirs"] > 0)
    ).round(3)
    keys = [
        (-int(refetched), -int(restarts), -int(readdirs), _client_key(client))
        for refetched, restarts, readdirs, client in zip(
            clients["refetched_readdirs"],
            clients["restarts"],
            clients["readdirs"],
            clients["client"],
        )
    ]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    clients = clients.iloc[order].reset_index(drop=True)
    clients["rank"] = range(1, len(clients) + 1)
    rank = dict(zip(clients["client"], clients["rank"]))
    dirs = dirs.assign(_rank=dirs["client"].map(rank))
    dirs = dirs.sort_values(["_rank", "dir_fileid", "fh"], kind="stable").drop(columns="_rank")
    dirs["dir_fileid"] = dirs["dir_fileid"].astype("Int64")
    return Triage(clients[CLIENT_COLUMNS], dirs.reset_index(drop=True))
