"""Prometheus' own graph of a guest's TSDB, as a PNG: the host's prometheus serves the TSDB the
guest left in its results (a copy: Prometheus replays and rewrites its WAL), and headless
chromium takes the graph page at the time the guest's queries were answered."""

import datetime
import json
import math
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graph(tsdb, expr, end, png, minutes=10):
    """Write png: Prometheus' graph of expr over the minutes before end (UNIX seconds), from
    the TSDB directory tsdb; returns how many samples the page's query read (from
    Prometheus' query log: a page that says "No datapoints found" read none). The graph page
    takes its end to the minute and drops the seconds, so end is taken up to the next minute:
    the samples just before it stay in."""
    end = math.ceil(end / 60) * 60
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tsdb")
        shutil.copytree(tsdb, data)
        conf = os.path.join(tmp, "prometheus.yml")
        log = os.path.join(tmp, "queries.log")
        with open(conf, "w") as f:
            f.write(f"global: {{query_log_file: {log}}}\n")
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        prom = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={conf}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(240):
                try:
                    urllib.request.urlopen(base + "/-/ready", timeout=2)
                    break
                except OSError:
                    time.sleep(0.5)
            stamp = datetime.datetime.fromtimestamp(end, datetime.UTC)
            q = urllib.parse.urlencode(
                {
                    "g0.expr": expr,
                    "g0.tab": "0",
                    "g0.range_input": f"{minutes}m",
                    "g0.end_input": stamp.strftime("%Y-%m-%d %H:%M:%S"),
                    "g0.moment_input": stamp.strftime("%Y-%m-%d %H:%M:%S"),
                }
            )
            subprocess.run(
                [
                    "chromium",
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    f"--user-data-dir={os.path.join(tmp, 'chromium')}",
                    "--window-size=1200,800",
                    "--virtual-time-budget=10000",
                    f"--screenshot={png}",
                    f"{base}/graph?{q}",
                ],
                capture_output=True,
                timeout=180,
                check=True,
            )
        finally:
            prom.terminate()
            prom.wait(timeout=60)
        with open(log) as f:
            asked = [json.loads(line) for line in f]
        return sum(
            q["stats"]["samples"]["totalQueryableSamples"]
            for q in asked
            if q["httpRequest"]["path"] == "/api/v1/query_range" and q["params"]["query"] == expr
        )
