#!/usr/bin/python3
"""Bulk job benchmark (issue 22), run by `scripts/bench --bulk N`.

On an isolated cluster of the dev servers (tests/integ/harness.py: its own
ZooKeeper root, database, Redis db and topics): submits N far tasks (due in
3 h: in the DB only) and, all along, 5,000 tasks a second due 3 s after
their submission (another topic); after a baseline, one bulk job cancels
(or shifts) the N. Reports the job's time and rate and the other tasks'
fire lateness (the worker's prophet-fired-at minus prophet-due-at, from
the Kafka headers) p50/p99/max before, during and after the job.

    bench/bulk.py [--count N] [--action cancel|shift] [--rate R]
                  [--workers W] [--chunk C] [--pause-ms P] [--baseline-s S]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integ"))
sys.dont_write_bytecode = True
import harness as h  # noqa: E402


def submit_far(addr, n, due, threads=4):
    def run(k):
        api = h.Api(addr, timeout=120)
        try:
            for start in range(k * 1000, n, threads * 1000):
                batch = [{"id": "far-%08d" % i, "topic": "far", "body": "x",
                          "due_at": due} for i in range(start,
                                                        min(n, start + 1000))]
                r = api.post("/v1/tasks/batch", {"tasks": batch})
                if r.status != 200:
                    raise h.TestFailure("far batch: %r" % r)
        finally:
            api.close()
    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.monotonic() - t0


class Steady(threading.Thread):
    """rate tasks a second, due lead_ms after submission, in batches every
    50 ms."""

    def __init__(self, addr, rate, lead_ms=3000):
        super().__init__(daemon=True)
        self.addr, self.rate, self.lead = addr, rate, lead_ms
        self.stop_at = None
        self.sent = 0
        self.errors = 0

    def run(self):
        api = h.Api(self.addr, timeout=30)
        per = max(1, self.rate // 20)
        t = time.monotonic()
        i = 0
        while self.stop_at is None or time.monotonic() < self.stop_at:
            due = h.now_ms() + self.lead
            batch = [{"id": "st-%09d" % (i + k), "topic": "steady",
                      "body": "s", "due_at": due} for k in range(per)]
            i += per
            try:
                r = api.post("/v1/tasks/batch", {"tasks": batch})
                if r.status != 200:
                    self.errors += 1
                else:
                    self.sent += per
            except Exception:  # counted, the run goes on
                self.errors += 1
                api.close()
                api = h.Api(self.addr, timeout=30)
            t += 0.05
            d = t - time.monotonic()
            if d > 0:
                time.sleep(d)
        api.close()


def lateness(c, topic):
    """(due_at, fired_at - due_at) of every message of topic."""
    p = subprocess.run(["kcat", "-C", "-b", c.brokers, "-t", c.topic(topic),
                        "-o", "beginning", "-e", "-q", "-J"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       timeout=600)
    out = []
    for line in p.stdout.splitlines():
        try:
            j = json.loads(line)
        except ValueError:
            continue
        hd = j.get("headers") or []
        d = dict(zip(hd[0::2], hd[1::2]))
        if "prophet-due-at" in d and "prophet-fired-at" in d:
            due = int(d["prophet-due-at"])
            out.append((due, int(d["prophet-fired-at"]) - due))
    return out


def summary(vals):
    if not vals:
        return {"n": 0}
    return {"n": len(vals), "p50_ms": h.percentile(vals, 50),
            "p99_ms": h.percentile(vals, 99), "max_ms": max(vals)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=100000)
    ap.add_argument("--action", choices=["cancel", "shift"], default="cancel")
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=2000)
    ap.add_argument("--pause-ms", type=int, default=0)
    ap.add_argument("--baseline-s", type=float, default=20)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    res = {"count": a.count, "action": a.action, "rate": a.rate,
           "workers": a.workers, "chunk": a.chunk, "pause_ms": a.pause_ms}
    with h.Cluster(workers=a.workers, name="benchbulk",
                   conf={"task.bulk_chunk": a.chunk,
                         "task.bulk_pause_ms": a.pause_ms}) as c:
        c.start()
        h.create_topics(c.brokers, [c.topic("far"), c.topic("steady")])
        far_due = h.now_ms() + 3 * 3600 * 1000
        res["submit_far_s"] = round(submit_far(c.manager_addr, a.count,
                                               far_due), 1)
        h.log("submitted %d far tasks in %.1f s" % (a.count,
                                                     res["submit_far_s"]))
        st = Steady(c.manager_addr, a.rate)
        st.start()
        time.sleep(a.baseline_s)
        api = h.Api(c.manager_addr, timeout=60)
        body = {"filter": {"topic": "far"}, "action": a.action}
        if a.action == "shift":
            body["by_ms"] = 3600000
        t_start = h.now_ms()
        r = api.post("/v1/tasks/bulk", body)
        if r.status != 202:
            raise h.TestFailure("bulk: %r" % r)
        job = r.json["job"]
        while True:
            j = api.get("/v1/admin/jobs/%d" % job).json
            if j["done"]:
                break
            time.sleep(0.2)
        t_end = h.now_ms()
        res["job"] = {k: j[k] for k in ("total", "scanned", "changed",
                                        "firing", "skipped", "chunks")}
        res["job_s"] = round((j["finished_at"] - j["started_at"]) / 1000.0,
                             2)
        res["job_wall_s"] = round((t_end - t_start) / 1000.0, 2)
        res["tasks_per_s"] = int(j["changed"] / max(res["job_s"], 0.001))
        h.log("job %d: %r in %.2f s" % (job, res["job"], res["job_s"]))
        # Where the job's time went: the manager's "bulk job done" line
        # (read, Redis and write overlap: a chunk is read and decided while
        # the one before it is written).
        done = c.manager.grep('msg="bulk job done"')
        if done:
            res["steps_ms"] = {k: int(v) for k, v in re.findall(
                r"\b(\w+_ms)=(\d+)", done[-1])}
        time.sleep(10)
        st.stop_at = time.monotonic()
        st.join()
        time.sleep(6)  # the last ones fire
        res["steady_sent"] = st.sent
        res["steady_errors"] = st.errors
        lat = lateness(c, "steady")
        res["steady_fired"] = len(lat)
        res["before"] = summary([x for d, x in lat if d < t_start])
        res["during"] = summary([x for d, x in lat if t_start <= d <= t_end])
        res["after"] = summary([x for d, x in lat if d > t_end])
        left = c.mysql("SELECT COUNT(*) FROM tasks WHERE topic = 'far' AND "
                       "status = 'scheduled'" if a.action == "cancel" else
                       "SELECT COUNT(*) FROM tasks WHERE topic = 'far' AND "
                       "due_at <> %d" % (far_due + 3600000))[0][0]
        res["far_left_unchanged"] = int(left)
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
