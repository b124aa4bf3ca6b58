"""A server's capture, client by client: the clients ranked by the READDIRs their restarts
spent fetching again, and their listings summed per client and directory (model/fleet.py),
as text for `analyze` and as records for `analyze --json`. A capture of one client has no
such section."""

import os

from ..rules.words import counted


def records(df):
    """The rows of a triage table as JSON-ready dicts, null where a value is not known."""
    import pandas as pd  # here: the slab section of a kmem trace is written without pandas

    return [
        {k: (None if pd.isna(v) else v) for k, v in row.items()}
        for row in df.astype(object).to_dict("records")
    ]


def to_dict(analysis):
    """{clients, client_dirs} of a server's capture, or None for any other analysis."""
    t = analysis.tables
    if "clients" not in t:
        return None
    return {"clients": records(t["clients"]), "client_dirs": records(t["client_dirs"])}


def _busy(clients):
    """The clients worth a line: those that restarted, or whose restarts cannot be counted."""
    return (clients["restarts"] > 0) | (clients["ambiguous"] > 0)


def text(analyses):
    """The triage section of every server's capture among analyses ('' when there is none)."""
    import pandas as pd  # here: the slab section of a kmem trace is written without pandas

    out = []
    for a in analyses:
        t = a.tables
        if "clients" not in t:
            continue
        clients, dirs = t["clients"], t["client_dirs"]
        busy = _busy(clients)
        shown = clients[busy]
        out.append(
            f"\n{os.path.basename(a.info.get('path', ''))}: "
            f"{counted(len(clients), 'client connection')} over "
            f"{counted(dirs['fh'].nunique(), 'directory', 'directories')}, "
            f"{int(clients['readdirs'].sum()):,} "
            f"READDIRs, {int(clients['refetched_readdirs'].sum()):,} of them refetching after "
            f"a restart; clients by READDIRs spent refetching:\n"
        )
        if len(shown):
            table = pd.DataFrame(
                {
                    "rank": shown["rank"],
                    "client": shown["client"],
                    "dirs": shown["dirs"],
                    "listings": shown["listings"],
                    "complete": shown["complete"],
                    "READDIRs": shown["readdirs"],
                    "restarts": shown["restarts"],
                    "refetched": shown["refetched_readdirs"],
                    "share": [f"{x:.0%}" if pd.notna(x) else "-" for x in shown["refetched_share"]],
                    "entries again": shown["refetched_entries"],
                    "unclear": shown["ambiguous"],
                }
            )
            out.append(table.to_string(index=False) + "\n")
        quiet = clients[~busy]
        if len(quiet):
            out.append(
                f"  {len(quiet)} more {'client' if len(quiet) == 1 else 'clients'} restarted no "
                f"listing ({counted(int(quiet['listings'].sum()), 'listing')}, "
                f"{int(quiet['readdirs'].sum()):,} READDIRs)\n"
            )
        d = dirs[dirs["client"].isin(set(shown["client"]))]
        if len(d):
            out.append("\nthose clients' listings by directory:\n")
            table = pd.DataFrame(
                {
                    "client": d["client"],
                    "dir": [str(x) if pd.notna(x) else "?" for x in d["dir_fileid"]],
                    "fh": d["fh"],
                    "listings": d["listings"],
                    "complete": d["complete"],
                    "READDIRs": d["readdirs"],
                    "restarts": d["restarts"],
                    "refetched": d["refetched_readdirs"],
                    "dir changes": d["version_changes"],
                }
            )
            out.append(table.to_string(index=False) + "\n")
    return "".join(out)
