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
from dataclasses import dataclass

import pandas as pd

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


@dataclass
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


def _columns(listings):
    """The DIR_COLUMNS of each listing, a list a column: the listing's own fields, not its
    summary() (the text builds that once more), and no dict a listing: a server's capture has
    thousands of listings."""
    return {
        "client": [x.client for x in listings],
        "dir_fileid": [x.fileid for x in listings],
        "fh": [x.fh for x in listings],
        "listings": [1] * len(listings),
        "complete": [int(bool(x.complete)) for x in listings],
        "readdirs": [len(x.rpcs) for x in listings],
        "ambiguous": [int(bool(x.ambiguous_rows)) for x in listings],
        "restarts": [len(x.restarts) for x in listings],
        "refetched_readdirs": [sum(r.refetched for r in x.restarts) for x in listings],
        "refetched_entries": [x.refetched_entries for x in listings],
        "version_changes": [x.version_changes or 0 for x in listings],
    }


SUMMED = [c for c in DIR_COLUMNS if c not in ("client", "dir_fileid", "fh")]


def triage(listings):
    """The Triage of a capture's listings (wire_passes.WireListing, their restarts found), or None
    when they come from fewer than two client connections."""
    if len({x.client for x in listings}) < 2:
        return None
    per = pd.DataFrame(_columns(listings), columns=DIR_COLUMNS)
    # A directory is its filehandle; its inode number where the capture gave one.
    dirs = per.groupby(["client", "fh"], sort=False).agg(
        {"dir_fileid": "first", **dict.fromkeys(SUMMED, "sum")}
    )
    dirs = dirs.reset_index()[DIR_COLUMNS]
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
