#!/usr/bin/python3
"""End-to-end acceptance: HTTP submit -> DB -> Redis -> workers -> Kafka.

One isolated cluster (manager + 2 workers; for now every worker scans every
slot and the atomic Redis claim must prevent double publishing), three
phases:
  1. 2,000 tasks, delays 0-5 s, 3 topics: every id exactly once, never
     early, body/key/headers exact, DB delivered, GET delivered.
  2. 1,000 tasks, delays 1-6 s, one worker SIGKILLed and restarted: nothing
     lost, nothing early; duplicates counted (at-least-once).
  3. 500 tasks streamed, due 0.5-3 s, one worker SIGTERMed and restarted:
     every id exactly once (a graceful stop must not duplicate).
"""

import json
import os
import random
import signal
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

TOPICS = ["orders", "mail.out", "billing_v2"]
LEASE_MS = 3000
SESSION_MS = 4000  # ZooKeeper session timeout (the server's minimum)
RESTART_FAILURES = []  # failed restarts of the SIGKILLed worker
SEED = int(os.environ.get("PROPHET_INTEG_SEED") or time.time())
RNG = random.Random(SEED)
C = None      # the cluster
READER = None  # Kafka reader over the three topics

PROPHET_HEADERS = ("prophet-id", "prophet-due-at", "prophet-fired-at",
                   "prophet-attempt", "prophet-slot", "prophet-epoch")

BODIES = [
    lambda i: "plain body %d" % i,
    lambda i: 'quotes "double" \'single\' and \\backslash\\ #%d' % i,
    lambda i: "multi\nline\r\nbody\twith tabs %d\n" % i,
    lambda i: "unicode: héllo wörld — 日本語テキスト — emoji 🚀🎉 — %d" % i,
    lambda i: json.dumps({"order": i, "items": [1, 2, 3],
                          "note": "ünïcödé \"q\" \\ /"}, ensure_ascii=False),
    lambda i: "",
    lambda i: ("long-%d-" % i) * 1500,
    lambda i: "nul\u0000inside %d" % i,
    lambda i: "<xml a='1'>&amp; %d</xml>" % i,
    lambda i: "\u00a0\u2028\u2029 separators and \u0001 control %d" % i,
    lambda i: "{not json %d" % i,
]


def make_task(phase, i, delay_lo, delay_hi):
    """A task dict plus what the test expects of it."""
    tid = "%s-%05d" % (phase, i)
    delay = RNG.randint(delay_lo, delay_hi)
    t = {"id": tid, "topic": TOPICS[i % len(TOPICS)],
         "body": BODIES[i % len(BODIES)](i)}
    if i % 5 == 4:
        t["due_at"] = h.now_ms() + delay  # recomputed at send time
        t["_delay"] = delay
    else:
        t["delay_ms"] = delay
    if i % 3 == 0:
        t["headers"] = {"x-trace-id": "tr-%d" % i,
                        "content-type": "application/json",
                        "x-note": "välue \"q\" ✓ %d" % i}
    elif i % 7 == 0:
        t["headers"] = {"x-single": "one"}
    if i % 4 == 1:
        t["key"] = "cust-%d" % (i % 50)
    elif i % 20 == 2:
        t["key"] = "клиент-%d" % i
    return t


def wire(t):
    """The JSON sent (without the test's private fields); due_at tasks get
    their due time fixed now, relative to the send time."""
    w = {k: v for k, v in t.items() if not k.startswith("_")}
    if "_burst_at" in t:
        w.pop("delay_ms", None)
        w["due_at"] = t["due_at"] = t["_burst_at"]
    elif "_delay" in t:
        w["due_at"] = t["due_at"] = h.now_ms() + t["_delay"]
    return w


class Submitted:
    """Tasks submitted in one phase, with what the server answered."""

    def __init__(self, tasks):
        self.tasks = {t["id"]: t for t in tasks}
        self.due = {}
        self.slot = {}
        self.elapsed = 0.0


def submit(tasks, threads=8, pace_per_s=None):
    """Submits tasks over HTTP (kept-alive connections, a few threads);
    pace_per_s spreads them over time (a stream)."""
    sub = Submitted(tasks)
    results = [None] * len(tasks)
    errors = []
    t0 = time.monotonic()

    def run(k):
        api = C.api()
        try:
            for n in range(k, len(tasks), threads):
                if pace_per_s:
                    wait = t0 + n / pace_per_s - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                results[n] = api.post("/v1/tasks", wire(tasks[n]))
        except Exception as e:
            errors.append(e)
        finally:
            api.close()

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    sub.elapsed = time.monotonic() - t0
    if errors:
        raise h.TestFailure("submission failed: %r" % errors[0])
    p = h.Problems()
    for t, r in zip(tasks, results):
        if not p.check(r.status == 201 and r.json and
                       r.json.get("id") == t["id"],
                       "submit %s: %r" % (t["id"], r)):
            continue
        sub.due[t["id"]] = r.json["due_at"]
        sub.slot[t["id"]] = r.json["slot"]
        if "due_at" in t:
            p.check(r.json["due_at"] == t["due_at"],
                    "%s: due_at answered %s, sent %s"
                    % (t["id"], r.json["due_at"], t["due_at"]))
    p.raise_if_any("submissions")
    return sub


def check_message(p, sub, m, first_attempt):
    """Checks one Kafka message against its task; returns lateness (ms)
    of prophet-fired-at over the due time."""
    tid = m.id
    t = sub.tasks[tid]
    due = sub.due[tid]
    hdr = m.hdr
    for k in PROPHET_HEADERS:
        if not p.check(k in hdr, "%s: header %s missing (got %s)"
                       % (tid, k, [x for x, _ in m.headers])):
            return None
    p.check(m.topic == C.topic(t["topic"]), "%s: on topic %s, want %s"
            % (tid, m.topic, C.topic(t["topic"])))
    p.check(m.payload == t["body"], "%s: payload %r != body %r"
            % (tid, (m.payload or "")[:80], t["body"][:80]))
    p.check(m.key == t.get("key", tid), "%s: key %r, want %r"
            % (tid, m.key, t.get("key", tid)))
    p.check(hdr["prophet-due-at"] == str(due), "%s: prophet-due-at %s, "
            "want %s" % (tid, hdr["prophet-due-at"], due))
    p.check(hdr["prophet-slot"] == str(sub.slot[tid]),
            "%s: prophet-slot %s, want %s" % (tid, hdr["prophet-slot"],
                                              sub.slot[tid]))
    p.check(hdr["prophet-epoch"].isdigit(), "%s: prophet-epoch %r"
            % (tid, hdr["prophet-epoch"]))
    if first_attempt:
        p.check(hdr["prophet-attempt"] == "1", "%s: prophet-attempt %s, "
                "want 1" % (tid, hdr["prophet-attempt"]))
    else:
        p.check(hdr["prophet-attempt"].isdigit() and
                int(hdr["prophet-attempt"]) >= 1,
                "%s: prophet-attempt %r" % (tid, hdr["prophet-attempt"]))
    custom = [(k, v) for k, v in m.headers if not k.startswith("prophet-")]
    want = sorted((t.get("headers") or {}).items())
    p.check(sorted(custom) == want, "%s: custom headers %r, want %r"
            % (tid, custom, want))
    p.check(len(m.headers) == len(PROPHET_HEADERS) + len(want),
            "%s: headers %r" % (tid, m.headers))
    try:
        fired = int(hdr["prophet-fired-at"])
    except ValueError:
        p.add("%s: prophet-fired-at %r" % (tid, hdr["prophet-fired-at"]))
        return None
    p.check(fired >= due, "%s: fired EARLY: prophet-fired-at %d < due %d "
            "(by %d ms)" % (tid, fired, due, due - fired))
    p.check(m.ts is not None and m.ts >= due, "%s: Kafka timestamp %s < due "
            "%d: published early" % (tid, m.ts, due))
    return fired - due


def messages_of(sub):
    with READER.cond:
        return {tid: list(READER.by_id.get(tid, [])) for tid in sub.tasks}


def db_rows(prefix):
    rows = C.mysql("SELECT id, status, attempt, slot, epoch, fired_at, "
                   "delivered_at FROM tasks WHERE id LIKE '%s-%%'" % prefix)
    return {r[0]: r for r in rows}


def wait_db_delivered(sub, prefix, timeout=20):
    """Waits until the DB shows every task of the phase delivered; returns
    the rows."""
    deadline = time.monotonic() + timeout
    while True:
        rows = db_rows(prefix)
        st = {}
        for r in rows.values():
            st[r[1]] = st.get(r[1], 0) + 1
        if len(rows) == len(sub.tasks) and st == {"delivered": len(rows)}:
            return rows
        if time.monotonic() > deadline:
            raise h.TestFailure("DB after %ds: %d rows of %d, statuses %s"
                                % (timeout, len(rows), len(sub.tasks), st))
        time.sleep(0.25)


def wait_all(sub, extra_s, settle):
    last_due = max(sub.due.values())
    timeout = max(0, (last_due - h.now_ms()) / 1000.0) + extra_s
    missing = READER.wait_for(sub.tasks.keys(), timeout, settle=settle)
    if missing:
        raise h.TestFailure("%d of %d tasks never reached Kafka within %.0fs "
                            "after the last due time, e.g. %s"
                            % (len(missing), len(sub.tasks), extra_s,
                               sorted(missing)[:10]))


def setup():
    global C, READER
    C = h.Cluster(workers=2, name="e2e",
                  conf={"worker.lease_ms": LEASE_MS,
                        "zookeeper.session_timeout_ms": SESSION_MS}).open()
    C.start()
    h.create_topics(C.brokers, [C.topic(t) for t in TOPICS])
    READER = C.reader(TOPICS)
    h.log("seed %d" % SEED)


# ----------------------------------------------------------------- tests ---

def test_exactly_once_in_time_and_intact():
    tasks = [make_task("p1", i, 0, 5000) for i in range(2000)]
    sub = submit(tasks)
    # Speed is the benchmark's business (scripts/bench); here only logged.
    rate = len(tasks) / sub.elapsed
    wait_all(sub, extra_s=20, settle=1.5)

    p = h.Problems()
    late = []
    by_delay = {"<250": [], "250-1499": [], ">=1500": []}
    msgs = messages_of(sub)
    for tid, ms in msgs.items():
        p.check(len(ms) == 1, "%s arrived %d times (attempts %s)"
                % (tid, len(ms), [m.hdr.get("prophet-attempt") for m in ms]))
        for m in ms:
            lat = check_message(p, sub, m, first_attempt=True)
            if lat is not None:
                late.append(lat)
                t = sub.tasks[tid]
                d = t.get("delay_ms", t.get("_delay", 0))
                by_delay["<250" if d < 250 else
                         "250-1499" if d < 1500 else ">=1500"].append(lat)
    stray = [m for m in READER.messages if m.id is None]
    p.check(not stray, "%d messages without prophet-id" % len(stray))
    p.raise_if_any("Kafka output")

    rows = wait_db_delivered(sub, "p1")
    for tid, m in ((t, ms[0]) for t, ms in msgs.items()):
        r = rows[tid]
        p.check(r[2] == "1", "%s: DB attempt %s" % (tid, r[2]))
        p.check(r[3] == m.hdr["prophet-slot"], "%s: DB slot %s, header %s"
                % (tid, r[3], m.hdr["prophet-slot"]))
        p.check(r[4] == m.hdr["prophet-epoch"], "%s: DB epoch %s, header %s"
                % (tid, r[4], m.hdr["prophet-epoch"]))
        p.check(r[5] == m.hdr["prophet-fired-at"],
                "%s: DB fired_at %s, header %s"
                % (tid, r[5], m.hdr["prophet-fired-at"]))
    p.raise_if_any("DB rows")

    api = C.api()
    for tid in RNG.sample(sorted(sub.tasks), 25):
        r = api.get("/v1/tasks/" + tid)
        t = sub.tasks[tid]
        if not p.check(r.status == 200 and r.json, "GET %s: %r" % (tid, r)):
            continue
        j = r.json
        p.check(j.get("status") == "delivered", "GET %s: status %s"
                % (tid, j.get("status")))
        p.check(j.get("body") == t["body"], "GET %s: body differs" % tid)
        p.check(j.get("topic") == t["topic"], "GET %s: topic" % tid)
        p.check(j.get("due_at") == sub.due[tid], "GET %s: due_at" % tid)
        p.check(j.get("key") == t.get("key"), "GET %s: key %r"
                % (tid, j.get("key")))
        p.check(j.get("headers") == t.get("headers"), "GET %s: headers %r"
                % (tid, j.get("headers")))
        p.check(j.get("attempt") == 1 and j.get("fired_at") and
                j.get("delivered_at"), "GET %s: %r" % (tid, j))
    api.close()
    p.raise_if_any("GET /v1/tasks/{id}")

    kafka_ts = [m.ts - sub.due[tid] for tid, ms in msgs.items() for m in ms]
    recv = [m.recv_ms - sub.due[tid] for tid, ms in msgs.items() for m in ms]
    print("# e2e: submitted %d tasks in %.2f s (%.0f/s); lateness ms "
          "p50=%d p99=%d max=%d" % (len(tasks), sub.elapsed, rate,
                                    h.percentile(late, 50),
                                    h.percentile(late, 99), max(late)),
          flush=True)
    h.log("e2e detail: Kafka timestamp - due p50=%d p99=%d max=%d; "
          "consumer receive - due p50=%d p99=%d max=%d"
          % (h.percentile(kafka_ts, 50), h.percentile(kafka_ts, 99),
             max(kafka_ts), h.percentile(recv, 50), h.percentile(recv, 99),
             max(recv)))
    h.log("e2e lateness by delay: " + "; ".join(
        "delay %s ms (%d tasks) p50=%d p99=%d max=%d"
        % (k, len(v), h.percentile(v, 50), h.percentile(v, 99), max(v))
        for k, v in by_delay.items() if v))


def test_worker_sigkill_loses_nothing():
    tasks = [make_task("p2", i, 1000, 6000) for i in range(1000)]
    # A third of them due within 60 ms around the kill, so that the victim
    # dies with tasks claimed (leased) or published but not yet recorded.
    kill_at = h.now_ms() + 2000
    for i, t in enumerate(tasks):
        if i % 3 == 0:
            t["_burst_at"] = kill_at - 30 + RNG.randint(0, 60)
    victim = C.workers[1]
    box = {}

    def run():
        box["sub"] = submit(tasks)

    th = threading.Thread(target=run)
    t0 = time.monotonic()
    th.start()
    time.sleep(max(0, (kill_at - h.now_ms()) / 1000.0))
    victim.kill()
    h.log("SIGKILLed %s at +%.1fs" % (victim.name, time.monotonic() - t0))
    time.sleep(1.0)
    # Restarted like systemd would: again while it refuses to start.
    RESTART_FAILURES[:] = C.start_like_supervisor(victim, every=1.0,
                                                  within=SESSION_MS / 1000.0
                                                  + 15)
    h.log("restarted %s, ready at +%.1fs after %d failed start(s)"
          % (victim.name, time.monotonic() - t0, len(RESTART_FAILURES)))
    th.join()
    sub = box.get("sub")
    h.check(sub is not None, "submission thread failed")
    # Leased tasks of the killed worker come back after the lease and a
    # reaper round; then wait a little for late duplicates.
    wait_all(sub, extra_s=LEASE_MS / 1000.0 + 20, settle=LEASE_MS / 1000.0 + 2)

    p = h.Problems()
    msgs = messages_of(sub)
    dups = 0
    for tid, ms in msgs.items():
        dups += len(ms) - 1
        for m in ms:
            check_message(p, sub, m, first_attempt=False)
    p.raise_if_any("Kafka output after SIGKILL")
    wait_db_delivered(sub, "p2")
    attempts = {}
    for ms in msgs.values():
        if len(ms) > 1:
            for m in ms:
                a = m.hdr["prophet-attempt"]
                attempts[a] = attempts.get(a, 0) + 1
    print("# e2e-kill: duplicates=%d" % dups, flush=True)
    requeued = sum(int(l.rsplit("count=", 1)[1]) for w in C.workers
                   for l in w.grep("leases expired: tasks requeued"))
    first_not_1 = sum(1 for ms in msgs.values()
                      if min(int(m.hdr["prophet-attempt"]) for m in ms) > 1)
    h.log("after the kill: %d leased task(s) requeued by the lease reaper; "
          "%d task(s) whose first Kafka message carries prophet-attempt > 1"
          % (requeued, first_not_1))
    if dups:
        h.log("prophet-attempt of the messages of duplicated ids: %s"
              % ", ".join("%s x%d" % kv for kv in sorted(attempts.items())))


def test_worker_restarts_right_after_sigkill():
    """A worker restarted (same worker.id) right after a crash must start:
    its old ZooKeeper session is dead, only not expired yet. (A supervisor
    restarting it, or a container whose id is hostname-1, hits this.)"""
    if RESTART_FAILURES:
        raise h.TestFailure(
            "the SIGKILLed worker, restarted 1 s later with the same "
            "worker.id, refused to start %d time(s) until its old session "
            "expired; first: +%.1fs %s"
            % (len(RESTART_FAILURES), RESTART_FAILURES[0][0],
               RESTART_FAILURES[0][1]))


FIRED_BEFORE = {}


def test_worker_sigterm_no_duplicates():
    for w in C.workers:
        FIRED_BEFORE[w.name] = h.metrics(w.addr).get(
            "prophet_tasks_fired_total", 0)
    tasks = [make_task("p3", i, 500, 3000) for i in range(500)]
    victim = C.workers[0]
    box = {}

    def run():
        # A stream over ~2.5 s: firing has started when the stop comes.
        box["sub"] = submit(tasks, threads=4, pace_per_s=200)

    th = threading.Thread(target=run)
    t0 = time.monotonic()
    th.start()
    time.sleep(1.3)
    before = h.metrics(victim.addr)
    victim.signal(signal.SIGTERM)
    rc = victim.wait(25)
    h.log("SIGTERM %s at +1.3s (it had fired %s tasks of this phase and "
          "held %s): exit %s at +%.1fs"
          % (victim.name, before.get("prophet_tasks_fired_total", 0) -
             FIRED_BEFORE.get(victim.name, 0),
             before.get("prophet_tasks_held"), rc, time.monotonic() - t0))
    h.check(rc == 0, "%s exited %s after SIGTERM, want 0" % (victim.name, rc))
    C.start_worker(victim)
    th.join()
    sub = box.get("sub")
    h.check(sub is not None, "submission thread failed")
    wait_all(sub, extra_s=20, settle=LEASE_MS / 1000.0 + 2)

    p = h.Problems()
    for tid, ms in messages_of(sub).items():
        p.check(len(ms) == 1, "%s arrived %d times (attempts %s, fired %s)"
                % (tid, len(ms), [m.hdr.get("prophet-attempt") for m in ms],
                   [m.hdr.get("prophet-fired-at") for m in ms]))
        for m in ms:
            check_message(p, sub, m, first_attempt=len(ms) == 1)
    p.raise_if_any("Kafka output around a graceful stop")
    wait_db_delivered(sub, "p3")
    stops = victim.grep('msg="stopping"')
    h.log("graceful stop: %s" % (stops[-1] if stops else "?"))


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
