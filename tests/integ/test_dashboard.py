#!/usr/bin/python3
"""deploy/grafana/prophet.json queries only metrics that exist.

The dashboard is valid JSON with a Prometheus query in every panel, and
every metric name those queries use (histograms by their _bucket series)
is on the /metrics of a running manager (with Kafka ingest on), worker or
notifier of one isolated cluster on the dev servers.
"""

import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

DASHBOARD = os.path.join(os.environ.get("PROPHET_SRCDIR") or h.REPO, "deploy",
                         "grafana", "prophet.json")

C = None
NOTIFIER = None


def exported(addr):
    """Every metric name on addr's /metrics: # TYPE lines (a family
    without samples yet) and sample names."""
    api = h.Api(addr, timeout=5)
    try:
        text = api.get("/metrics").text
    finally:
        api.close()
    names = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            names.add(m.group(1))
            if m.group(2) == "histogram":
                names.update(m.group(1) + s for s in
                             ("_bucket", "_sum", "_count"))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, 1)[0])
    return names


def queried(dash):
    """(panel title, expr) of every target, rows' panels included."""
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                out.append((p.get("title"), t.get("expr", "")))
    walk(dash["panels"])
    return out


def setup():
    global C, NOTIFIER
    C = h.Cluster(workers=1, name="dashboard")
    C.open()
    port = h.free_port()
    C.extra_conf["notifier.http_listen"] = "127.0.0.1:%d" % port
    # the ingest metrics exist only with an ingest topic
    C.extra_conf["kafka.ingest_topic"] = C.topic("ingest")
    C.write_conf()
    C.start_manager()
    C.start_worker(0)
    NOTIFIER = C.notifier(port)
    C.workers.append(NOTIFIER)  # so that cleanup and log dumps include it
    NOTIFIER.start()
    C._wait_http(NOTIFIER, NOTIFIER.addr, "/readyz", 60)


def test_every_queried_metric_is_exported():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    h.check_eq(dash.get("uid"), "prophet", "dashboard uid")
    targets = queried(dash)
    h.check(len(targets) >= 20, "queries in the dashboard: %d" % len(targets))
    names = {}
    for title, expr in targets:
        h.check(expr.strip(), "panel %r has an empty query" % title)
        for n in re.findall(r"\bprophet_[a-z0-9_]+", expr):
            names.setdefault(n, title)
    for v in dash["templating"]["list"]:
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        for n in re.findall(r"\bprophet_[a-z0-9_]+", q):
            names.setdefault(n, "variable " + v["name"])
    have = set()
    for addr in (C.manager_addr, C.workers[0].addr, NOTIFIER.addr):
        have |= exported(addr)
    missing = sorted(n for n in names if n not in have)
    h.check(not missing, "queried but exported by no daemon: %s" %
            ", ".join("%s (%s)" % (n, names[n]) for n in missing))
    h.log("FIGURES %d queries over %d metrics, all exported"
          % (len(targets), len(names)))


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
