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
                  [--set K=V]...
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


def windows(lat, lo, hi, width_ms=10000):
    """p99 of each whole width_ms window of due times in [lo, hi): the
    spread of the baseline's windows is the noise the job's are judged
    against."""
    out = []
    t = lo
    while t + width_ms <= hi:
        v = [x for d, x in lat if t <= d < t + width_ms]
        if v:
            out.append(h.percentile(v, 99))
        t += width_ms
    return out


class Sched(threading.Thread):
    """Once a second: run-queue wait (all threads, from schedstat) and CPU
    of the workers, and MariaDB's CPU: what the job takes from the firing
    on shared cores."""

    def __init__(self, worker_pids, db_pid):
        super().__init__(daemon=True)
        self.wpids, self.db = worker_pids, db_pid
        self.samples = []  # (ms, worker wait ns, worker cpu ns, db ticks)
        self.done = False

    @staticmethod
    def wait_cpu(pid):
        wait = cpu = 0
        try:
            for t in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                    v = f.read().split()
                cpu += int(v[0])
                wait += int(v[1])
        except OSError:
            pass
        return wait, cpu

    @staticmethod
    def ticks(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                v = f.read().rsplit(")", 1)[1].split()
            return int(v[11]) + int(v[12])
        except (OSError, ValueError, IndexError):
            return 0

    def run(self):
        while not self.done:
            w = c = 0
            for p in self.wpids:
                a, b = self.wait_cpu(p)
                w += a
                c += b
            self.samples.append((h.now_ms(), w, c, self.ticks(self.db)))
            time.sleep(1)

    def rates(self, lo, hi):
        """Per second over [lo, hi]: worker run-queue wait ms, worker CPU
        ms, MariaDB CPU ms."""
        s = [x for x in self.samples if lo <= x[0] <= hi]
        if len(s) < 2:
            return None
        dt = (s[-1][0] - s[0][0]) / 1000.0
        hz = os.sysconf("SC_CLK_TCK")
        return {"worker_wait_ms_s": round((s[-1][1] - s[0][1]) / 1e6 / dt, 1),
                "worker_cpu_ms_s": round((s[-1][2] - s[0][2]) / 1e6 / dt, 1),
                "db_cpu_ms_s": round((s[-1][3] - s[0][3]) * 1000.0 / hz / dt,
                                     1)}


def db_pid():
    try:
        with open(os.path.join(os.environ.get("PROPHET_RUN_DIR", ""),
                               "mariadb", "mariadbd.pid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=100000)
    ap.add_argument("--action", choices=["cancel", "shift"], default="cancel")
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=2000)
    ap.add_argument("--pause-ms", type=int, default=0)
    ap.add_argument("--baseline-s", type=float, default=40)
    ap.add_argument("--set", action="append", default=[], metavar="K=V",
                    help="more Prophet config for the cluster (repeatable), "
                    "e.g. worker.rt_priority=10")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    res = {"count": a.count, "action": a.action, "rate": a.rate,
           "workers": a.workers, "chunk": a.chunk, "pause_ms": a.pause_ms,
           "set": a.set}
    conf = {"task.bulk_chunk": a.chunk, "task.bulk_pause_ms": a.pause_ms}
    for kv in a.set:
        k, sep, v = kv.partition("=")
        if not sep:
            ap.error("--set %s: not K=V" % kv)
        conf[k] = v
    with h.Cluster(workers=a.workers, name="benchbulk", conf=conf) as c:
        c.start()
        h.create_topics(c.brokers, [c.topic("far"), c.topic("steady")])
        far_due = h.now_ms() + 3 * 3600 * 1000
        res["submit_far_s"] = round(submit_far(c.manager_addr, a.count,
                                               far_due), 1)
        h.log("submitted %d far tasks in %.1f s" % (a.count,
                                                     res["submit_far_s"]))
        st = Steady(c.manager_addr, a.rate)
        st.start()
        sch = Sched([wk.popen.pid for wk in c.workers], db_pid())
        sch.start()
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
        first = min((d for d, _ in lat), default=t_start)
        res["p99_10s_before"] = windows(lat, first, t_start)
        res["p99_10s_during"] = windows(lat, t_start, t_end)
        sch.done = True
        res["sched_before"] = sch.rates(t_start - 30000, t_start)
        res["sched_during"] = sch.rates(t_start, t_end)
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
