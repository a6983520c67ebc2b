#!/usr/bin/python3
"""Crash points (common/crashpoint.h): a daemon killed exactly between two
steps of a protocol loses nothing.

Runs the crash-point binaries tests/crash/prophet-{worker,manager}-cp
(built by `make check` in every build, with -DPROPHET_CRASHPOINTS; in a
debug build the normal binaries have the same points). One cluster
(manager + 2 workers, session 4 s, lease 1.5 s); for each point, the
process under test is restarted with PROPHET_CRASH_AT=<point>, tasks
stream until it dies (it must die by SIGKILL after logging "crash point
reached" with that point), it is restarted without the variable, and then:
every accepted task reached Kafka (nothing lost), never before its due
time, and every one ends `delivered` in the DB. Duplicates are counted
and printed (`# <point>: ...`), not asserted: at-least-once allows them.

  worker: after_claim_before_publish, after_publish_before_mark,
          after_mark_before_forget, gain_before_fence,
          handover_drained_before_release, master_before_assign_write
  fault point (PROPHET_FAULT_AT, the same mechanism without a death):
          kafka_producer_fatal (librdkafka's fatal producer error: the
          worker makes its producer again and goes on firing)
  stop point (PROPHET_STOP_AT: SIGSTOP there, as a frozen host):
          mark_slot_locked (a worker frozen inside a delivery record's
          transaction: its slots' next owner is not held up by its locks)
  manager: ingest_after_commit_before_index (the client gets no answer;
          the committed task must still fire: the workers' sweeper
          indexes overdue DB tasks missing from Redis)
"""

import os
import json
import random
import signal
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

SESSION_MS = 4000
LEASE_MS = 1500
LONG_LEASE_MS = 60000
TOPIC = "crash"
CP_WORKER = os.path.join(h.BUILDDIR, "tests", "crash", "prophet-worker-cp")
CP_MANAGER = os.path.join(h.BUILDDIR, "tests", "crash", "prophet-manager-cp")

C = None
READER = None
SEQ = [0]


def start_env(start, proc, point, var="PROPHET_CRASH_AT"):
    """Starts proc (through the cluster's start function) with
    var=point in its environment (None: without)."""
    old = os.environ.pop(var, None)
    if point:
        os.environ[var] = point
    try:
        return start(proc, wait=False) if proc is not None else start(
            wait=False)
    finally:
        os.environ.pop(var, None)
        if old is not None:
            os.environ[var] = old


class Feed:
    """Submits tasks due 0.3-1.5 s ahead (a few per 100 ms) until stopped;
    records accepted ids and the ids whose answer never came."""

    def __init__(self, name):
        self.name = name
        self.accepted = {}   # id -> due_at
        self.unknown = []    # no answer (the manager died)
        self.refused = []
        self.stopping = False
        self.th = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.th.start()
        return self

    def _run(self):
        api = C.api()
        rng = random.Random()
        while not self.stopping:
            SEQ[0] += 1
            tid = "%s-%05d" % (self.name, SEQ[0])
            t = {"id": tid, "topic": TOPIC, "body": "b",
                 "delay_ms": rng.randint(300, 1500)}
            try:
                r = api.post("/v1/tasks", t)
            except Exception:
                self.unknown.append(tid)
                api.close()
                time.sleep(0.2)
                continue
            if r.status == 201:
                self.accepted[tid] = int(r.json["due_at"])
            elif r.status != 503:
                self.refused.append((tid, r.status))
            time.sleep(0.03)
        api.close()

    def stop(self):
        self.stopping = True
        self.th.join(30)


def wait_died(proc, point, timeout=40):
    def dead():
        return not proc.running()
    h.wait_until(dead, timeout, 0.05, "%s to die at %s" % (proc.name, point))
    rc = proc.popen.returncode
    h.check(rc == -signal.SIGKILL, "%s exited with %r, want SIGKILL"
            % (proc.name, rc))
    lines = [l for l in proc.grep("crash point reached")
             if "point=%s " % point in l]
    h.check(lines, "%s: no 'crash point reached' line for %s"
            % (proc.name, point))
    return h.now_ms()


def db_status(ids):
    out = {}
    ids = list(ids)
    for i in range(0, len(ids), 200):
        q = ",".join("'%s'" % x for x in ids[i:i + 200])
        for tid, st in C.mysql("SELECT id, status FROM tasks WHERE id IN "
                               "(%s)" % q):
            out[tid] = st
    return out


def settle_and_check(point, feed, died_ms):
    """Nothing lost, none early, all delivered in the DB."""
    h.check(feed.accepted, "%s: nothing accepted" % point)
    h.check(not feed.refused, "%s: refused %r" % (point, feed.refused[:3]))
    ids = set(feed.accepted)
    # A submission without an answer may have been committed: it must
    # fire too.
    committed = db_status(feed.unknown)
    ids |= set(committed)
    last_due = max(feed.accepted.values())
    timeout = max(0.0, (last_due - h.now_ms()) / 1000.0) + \
        SESSION_MS / 1000.0 + LEASE_MS / 1000.0 + 40
    missing = READER.wait_for(ids, timeout, settle=LEASE_MS / 1000.0 + 1)
    h.check(not missing, "%s: %d of %d tasks never reached Kafka (LOST), "
            "e.g. %s" % (point, len(missing), len(ids), sorted(missing)[:5]))
    p = h.Problems()
    dups = 0
    with READER.cond:
        msgs = {i: list(READER.by_id.get(i, [])) for i in ids}
    for tid, ms in msgs.items():
        dups += len(ms) - 1
        for m in ms:
            due = int(m.hdr.get("prophet-due-at", "0"))
            fired = int(m.hdr.get("prophet-fired-at", "0"))
            p.check(fired >= due and m.recv_ms >= due,
                    "%s published before due (fired %d, due %d)"
                    % (tid, fired, due))
    p.raise_if_any(point)

    def converged():
        st = db_status(ids)
        return all(st.get(i) == "delivered" for i in ids)
    h.wait_until(converged, 30, 0.5, "%s: DB statuses delivered" % point)
    h.log("%s: %d tasks (%d without an answer but committed), all "
          "delivered; %d duplicate message(s); died at +%.1fs"
          % (point, len(ids), len(committed), dups,
             (died_ms - feed.t0) / 1000.0))
    return dups


def crash_worker(point, worker, restart_first=True, before=None, label=None,
                 check=None):
    """Restarts worker with the crash point, feeds tasks until it dies,
    restarts it clean, runs check(feed, died) if given, accounts for
    everything (under label, default the point)."""
    w = C.workers[worker]
    if restart_first and w.running():
        w.stop()
    feed = Feed(label or point)
    feed.t0 = h.now_ms()
    feed.start()
    try:
        if before is not None:
            before()
        start_env(C.start_worker, w, point)
        died = wait_died(w, point)
    finally:
        time.sleep(1.0)
        feed.stop()
    C.start_worker(w)
    if check is not None:
        check(feed, died)
    return settle_and_check(label or point, feed, died)


# ----------------------------------------------------------------- tests ---

def test_after_claim_before_publish():
    crash_worker("after_claim_before_publish", 1)


def test_takeover_refires_claimed_at_once():
    """With leases far longer than the session timeout, the tasks a worker
    had claimed when it died fire as soon as its slots are taken over, not
    when their leases run out."""
    long_lease = ["--set", "worker.lease_ms=%d" % LONG_LEASE_MS]
    saved = [list(w.argv) for w in C.workers]
    for w in C.workers:
        w.stop()
        w.argv = w.argv + long_lease

    def refired_soon(feed, died):
        # Everything, including what the dead worker had claimed, well
        # before half a lease: a takeover is a session timeout and a
        # reassignment.
        limit = died + LONG_LEASE_MS // 2
        missing = READER.wait_for(feed.accepted,
                                  max(0.0, (limit - h.now_ms()) / 1000.0))
        h.check(not missing, "%d task(s) claimed by the dead worker were "
                "not fired again within %d s of its death (they waited "
                "for their %d s lease), e.g. %s"
                % (len(missing), LONG_LEASE_MS // 2000, LONG_LEASE_MS // 1000,
                   sorted(missing)[:3]))

    try:
        C.start_worker(C.workers[0])
        crash_worker("after_claim_before_publish", 1, label="takeover",
                     check=refired_soon)
    finally:
        for w, argv in zip(C.workers, saved):
            w.stop()
            w.argv = argv
        C.start_workers()


def test_after_publish_before_mark():
    crash_worker("after_publish_before_mark", 1)


def test_after_mark_before_forget():
    crash_worker("after_mark_before_forget", 1)


def test_gain_before_fence():
    # Worker 1 is down, worker 0 owns everything; worker 1 joins, a
    # handover gives it slots and it dies gaining the first.
    crash_worker("gain_before_fence", 1)


def test_handover_drained_before_release():
    # Worker 1 (with the point) alone owns all slots; worker 0 joins and
    # the master asks worker 1 to hand half over: it dies after draining.
    w0, w1 = C.workers
    w0.stop()
    w1.stop()
    feed = Feed("handover")
    feed.t0 = h.now_ms()
    feed.start()
    try:
        # A new "slot gained" line: the log holds earlier runs' too, and
        # this start may first wait for the ZooKeeper session of the
        # previous run (killed at its crash point) to expire; worker 0
        # started before that would own the slots instead.
        gained = len(w1.grep("slot gained"))
        start_env(C.start_worker, w1, "handover_drained_before_release")
        h.wait_until(lambda: len(w1.grep("slot gained")) >= gained + 16, 30,
                     0.1, "worker 1 owning every slot")
        time.sleep(1.0)
        C.start_worker(w0, wait=False)
        died = wait_died(w1, "handover_drained_before_release")
    finally:
        time.sleep(1.0)
        feed.stop()
    C._wait_http(w0, w0.addr, "/readyz", 60)
    C.start_worker(w1)
    settle_and_check("handover_drained_before_release", feed, died)


def test_master_before_assign_write():
    # Worker 0 starts alone with the point: it is elected and dies before
    # writing its first assignment; worker 1 then takes over as master.
    w0, w1 = C.workers
    w0.stop()
    w1.stop()
    feed = Feed("master")
    feed.t0 = h.now_ms()
    feed.start()
    try:
        start_env(C.start_worker, w0, "master_before_assign_write")
        died = wait_died(w0, "master_before_assign_write")
        C.start_worker(w1)
        time.sleep(1.0)
    finally:
        feed.stop()
    C.start_worker(w0)
    settle_and_check("master_before_assign_write", feed, died)


def slot_nodes():
    """ZooKeeper's slot nodes: {slot: (owner, epoch)}."""
    z = C.zk()
    try:
        out = {}
        for i in range(16):
            data, _ = z.get_stat("%s/work_slot/ws_%d" % (C.zk_root, i))
            j = json.loads(data) if data else {}
            out[i] = (j.get("owner"), int(j.get("epoch") or 0))
        return out
    finally:
        z.close()


def proc_state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_stopped_in_transaction():
    """A worker frozen (SIGSTOP at the stop point mark_slot_locked) inside
    a delivery record's transaction, holding its slots' slot_state rows
    share-locked: the slots' next owner raises their DB fences within the
    session timeout plus db.idle_transaction_timeout_s (MariaDB ends the
    frozen connection and rolls it back), not when the frozen worker
    wakes. Before, the fence waited for it (the exactly-once open behind
    it: test_coord_eos's zombie case timed out that way). Then it is
    woken: its record is refused or retried and fenced, nothing lost."""
    point = "mark_slot_locked"
    idle_s = 5  # db.idle_transaction_timeout_s, the default
    w0, w1 = C.workers
    w1.stop()
    feed = Feed("frozen")
    feed.t0 = h.now_ms()
    feed.start()
    stopped = False
    try:
        start_env(C.start_worker, w1, point, var="PROPHET_STOP_AT")
        h.wait_until(lambda: any("point=%s " % point in l for l in
                                 w1.grep("stop point reached")) and
                     proc_state(w1.popen.pid) == "T", 60, 0.05,
                     "worker 1 stopped at %s" % point)
        stopped = True
        stop_ms = h.now_ms()
        before = slot_nodes()
        held = sorted(s for s, (o, _) in before.items() if o == w1.wid)
        h.check(held, "worker 1 owned no slot when it stopped: %r" % before)
        limit_s = SESSION_MS / 1000.0 + idle_s + 10

        def fenced():
            now = slot_nodes()
            if any(now[s][0] != w0.wid for s in held):
                return False
            rows = dict(C.mysql("SELECT slot, epoch FROM slot_state"))
            return all(int(rows.get(str(s), 0)) >= now[s][1] for s in held)
        h.wait_until(fenced, limit_s, 0.2,
                     "worker 0 owning worker 1's slots %s with their DB "
                     "fences raised (the frozen worker still stopped)"
                     % held)
        took = h.now_ms() - stop_ms
        h.check(proc_state(w1.popen.pid) == "T",
                "worker 1 woke before the check")
    finally:
        if stopped:
            w1.signal(signal.SIGCONT)
        time.sleep(2.0)
        feed.stop()
    # Its connection was ended: the record it was making fails on waking
    # and is retried (then refused: the fence moved on).
    h.wait_until(lambda: w1.grep("state update failed, will retry"), 20,
                 0.1, "worker 1's record failing after it woke")
    h.log("%s: slots %s fenced by the next owner %.1f s after the stop "
          "(session %d ms, idle_transaction_timeout %d s)"
          % (point, held, took / 1000.0, SESSION_MS, idle_s))
    w1.stop()
    C.start_worker(w1)
    settle_and_check(point, feed, stop_ms)


def test_ingest_after_commit_before_index():
    # The 20th group commit: earlier submissions are answered, the
    # batch in flight gets no answer but is in the DB.
    point = "ingest_after_commit_before_index"
    C.manager.stop()
    start_env(lambda wait=False: C.start_manager(wait=wait), None,
              point + ":20")
    C._wait_http(C.manager, C.manager_addr, "/readyz", 60)
    feed = Feed("ingest")
    feed.t0 = h.now_ms()
    feed.start()
    try:
        died = wait_died(C.manager, point)
        C.start_manager()
        time.sleep(1.0)
    finally:
        feed.stop()
    committed = db_status(feed.unknown)
    h.check(committed, "%s: no unanswered submission was committed (the "
            "point is after the commit)" % point)
    settle_and_check(point, feed, died)


def test_kafka_producer_fatal():
    """librdkafka's fatal producer error (the idempotent producer's state
    lost after broker faults; raised here by the fault point
    kafka_producer_fatal at the 30th publish, librdkafka's test API): the
    worker makes its producer again and fires on, alive. Before, it only
    logged the error and, keeping its slots, published nothing again."""
    point = "kafka_producer_fatal"
    w0, w1 = C.workers
    w0.stop()
    w1.stop()
    made = len(w0.grep("kafka producer made again"))
    start_env(C.start_worker, w0, point + ":30", var="PROPHET_FAULT_AT")
    C._wait_http(w0, w0.addr, "/readyz", 60)
    feed = Feed("kfatal")
    feed.t0 = h.now_ms()
    feed.start()
    try:
        h.wait_until(lambda: len(w0.grep("kafka producer made again")) >
                     made, 40, 0.1, "the producer made again")
        fatal_ms = h.now_ms()
        # tasks due after the new producer exists go through it
        time.sleep(4.0)
    finally:
        feed.stop()
    h.check(w0.running(), "the worker died after the fatal error")
    h.check(w0.grep("kafka producer failed for good"),
            "no 'kafka producer failed for good' line")
    after = [i for i, d in feed.accepted.items() if d > fatal_ms + 500]
    h.check(after, "no task due after the producer was made again")
    settle_and_check(point, feed, fatal_ms)
    C.start_worker(w1)


def test_slow_election_answer_one_candidate():
    """A worker whose candidate create is answered after 1.2 s (fault point
    election_answer_late; ZooKeeper under load took 630 ms in a CI run),
    longer than the 500 ms coordination tick, stands once: before, the tick
    stood it again meanwhile, and when the master died its second candidate
    waited for its first for good, with no master at all. Then the other
    worker, the master, is killed: this one becomes master."""
    w0, w1 = C.workers
    w0.stop()
    w1.stop()
    C.start_worker(w1)
    late = len(w0.grep("fault point reached"))
    start_env(C.start_worker, w0, "election_answer_late",
              var="PROPHET_FAULT_AT")
    C._wait_http(w0, w0.addr, "/readyz", 60)
    h.wait_until(lambda: len(w0.grep("fault point reached")) > late, 20,
                 0.1, "the late election answer")
    time.sleep(3.0)
    z = C.zk()
    try:
        mine = [c for c in z.children(C.zk_root + "/election") or []
                if c.startswith("c_%s_" % w0.wid)]
    finally:
        z.close()
    h.log("candidates of %s after a 1.2 s answer: %s" % (w0.wid, mine))
    h.check_eq(len(mine), 1, "election candidates of the late worker")
    w1.kill()
    h.wait_until(lambda: metric_master(w0) == 1, 30, 0.2,
                 "the late worker elected once the master died")
    C.start_worker(w1)


def test_second_stop_during_a_hung_teardown():
    """A teardown that hangs (fault point teardown_hang, as librdkafka's
    destroy once waited on a dead broker for good): the loop no longer
    hears signals, so a second SIGTERM did nothing and only SIGKILL ended
    the daemon. Now it exits at once, status 1, saying so."""
    w0, w1 = C.workers
    w0.stop()
    start_env(C.start_worker, w0, "teardown_hang", var="PROPHET_FAULT_AT")
    C._wait_http(w0, w0.addr, "/readyz", 60)
    w0.signal(signal.SIGTERM)
    h.wait_until(lambda: w0.grep("point=teardown_hang"), 30, 0.1,
                 "the teardown hanging")
    time.sleep(1.0)
    h.check(w0.running(), "the hung teardown ended by itself")
    w0.signal(signal.SIGTERM)
    h.wait_until(lambda: not w0.running(), 5, 0.05,
                 "the second SIGTERM ending it")
    h.check_eq(w0.popen.returncode, 1, "exit status")
    h.check(w0.grep("stop requested again during teardown"),
            "the line saying why")
    C.start_worker(w0)


def metric_master(w):
    return h.metrics(w.addr).get("prophet_master", 0.0)


def test_no_sanitizer_reports():
    # Sanitizer builds: no report in any daemon's log over all the above.
    found = []
    for p in [C.manager] + C.workers:
        for mark in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "runtime error:"):
            found += ["%s: %s" % (p.name, l) for l in p.grep(mark)]
    h.check(not found, "sanitizer reports:\n  " + "\n  ".join(found[:10]))


# ----------------------------------------------------------------- setup ---

def setup():
    global C, READER
    for b in (CP_WORKER, CP_MANAGER):
        if not os.access(b, os.X_OK):
            raise h.TestFailure("%s is missing: it is built by `make check` "
                                "(make tests/crash/prophet-worker-cp "
                                "tests/crash/prophet-manager-cp)" % b)
    h.WORKER_BIN = CP_WORKER
    h.MANAGER_BIN = CP_MANAGER
    C = h.Cluster(workers=2, name="crash",
                  conf={"zookeeper.session_timeout_ms": SESSION_MS,
                        "worker.lease_ms": LEASE_MS}).open()
    C.start()
    h.create_topics(C.brokers, [C.topic(TOPIC)])
    READER = C.reader([TOPIC])


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)


def dump():
    if C is not None:
        C.dump_logs(30)


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup, dump)
