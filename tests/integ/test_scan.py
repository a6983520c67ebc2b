#!/usr/bin/python3
"""Incremental look-ahead scans (issue 23), on the real servers:

- a stream of tasks due beyond the look-ahead (so nothing wakes the
  worker) is read about twice per task by the scans, not once per scan
  interval as long as it waits (7.5 times at the defaults), and every task
  fires on time, none early;
- a task put straight into a slot's due set below the score the scans have
  read up to, with no wake (as when a wake is lost or an index write lands
  just after a scan), is found by the next full scan and fires on time.
"""

import json
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
API = None
LOOKAHEAD_MS = 1500
INTERVAL_MS = 200


def setup():
    global C, API
    C = h.Cluster(workers=1, name="scan",
                  conf={"worker.lookahead_ms": LOOKAHEAD_MS,
                        "worker.scan_interval_ms": INTERVAL_MS})
    C.open()
    C.start()
    API = C.api()


def worker_metric(name):
    return h.metrics(C.workers[0].addr).get(name, 0.0)


def fired_lateness(m):
    return int(m.hdr["prophet-fired-at"]) - int(m.hdr["prophet-due-at"])


def test_stream_read_about_twice_per_task():
    topic = "scan-" + h.rand_tag()
    h.create_topics(C.brokers, [C.topic(topic)], kcat_args=C.kcat_args)
    reader = C.reader([topic])
    n, rate, lead_ms = 1200, 200, 4000
    read0 = worker_metric("prophet_scan_read_total")
    full0 = worker_metric("prophet_scans_full_total")
    t0 = h.now_ms() + lead_ms
    ids = []
    # Each task submitted 4 s before it is due: beyond the look-ahead, so
    # the manager wakes nobody and only the scans find them.
    for k in range(0, n, 20):
        due0 = t0 + k * 1000 // rate
        wait = (due0 - lead_ms - h.now_ms()) / 1000.0
        if wait > 0:
            time.sleep(wait)
        r = API.post("/v1/tasks/batch", {"tasks": [
            {"topic": topic, "body": "s", "due_at": t0 + i * 1000 // rate}
            for i in range(k, k + 20)]})
        h.check_eq(r.status, 200, "batch (%r)" % r)
        ids += [x["id"] for x in r.json["results"] if x["code"] == 201]
    h.check_eq(len(ids), n, "accepted")
    missing = reader.wait_for(ids, 60)
    h.check(not missing, "%d tasks not published" % len(missing))
    late = sorted(fired_lateness(reader.by_id[i][0]) for i in ids)
    h.check(late[0] >= 0, "published %d ms early" % -late[0])
    p99 = late[len(late) * 99 // 100]
    reads = worker_metric("prophet_scan_read_total") - read0
    fulls = worker_metric("prophet_scans_full_total") - full0
    h.log("%d tasks: %d entries read by scans (%.2f a task), %d full "
          "scans, fired-at lateness p50 %d, p99 %d, max %d ms"
          % (n, reads, reads / n, fulls, late[len(late) // 2], p99,
             late[-1]))
    # Full scans alone (every 200 ms over a 1.5 s look-ahead) read each
    # task 7.5 times; incremental ones once, plus the full scan every
    # 1.1 s about 1.4 times.
    h.check(reads / n < 4.0, "scans read %.2f entries a task" % (reads / n))
    h.check(reads >= n, "scans read fewer entries (%d) than tasks" % reads)
    h.check(p99 < 1000, "fired-at p99 %d ms" % p99)


def test_write_below_scanned_score_found_by_full_scan():
    topic = "below-" + h.rand_tag()
    h.create_topics(C.brokers, [C.topic(topic)], kcat_args=C.kcat_args)
    reader = C.reader([topic])
    # Due in a minute: in the due set (inside the 2-minute near window),
    # far beyond the look-ahead.
    r = API.post("/v1/tasks", {"topic": topic, "body": "b",
                               "delay_ms": 60000})
    h.check_eq(r.status, 201, "submit (%r)" % r)
    tid = r.json["id"]
    red = C.redis()
    slot = None
    for n in range(16):
        if red.cmd("ZSCORE", "{prophet:%d}:due" % n, tid) is not None:
            slot = n
    h.check(slot is not None, "task not in any due set")
    kdue, ktask = "{prophet:%d}:due" % slot, "{prophet:%d}:task" % slot
    payload = json.loads(red.cmd("HGET", ktask, tid))
    # Let the worker scan past the new due time: its scans have read the
    # slot up to now + 1.5 s, and a task moved to now + 1.2 s is below
    # that. No wake is published: only a full scan can find it.
    time.sleep(1.0)
    due = h.now_ms() + 1200
    payload["d"] = due
    red.cmd("HSET", ktask, tid, json.dumps(payload, separators=(",", ":")))
    red.cmd("ZADD", kdue, "XX", due, tid)
    missing = reader.wait_for([tid], 10)
    h.check(not missing, "the task moved below the scanned score never "
            "fired")
    m = reader.by_id[tid][0]
    late = fired_lateness(m)
    h.log("moved 1.2 s ahead without a wake: fired %d ms after its due "
          "time" % late)
    h.check_eq(int(m.hdr["prophet-due-at"]), due, "due time published")
    h.check(late >= 0, "published %d ms early" % -late)
    h.check(late < 400, "fired %d ms late: the full scan comes every "
            "look-ahead minus two intervals (1.1 s)" % late)


def cleanup(failed):
    if API is not None:
        API.close()
    if C is not None:
        C.close(failed=failed)


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)
