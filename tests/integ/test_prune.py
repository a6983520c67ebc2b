#!/usr/bin/python3
"""Retention (issue 19) against the real dev cluster.

Cluster A: two managers (task.retention 3 s, passes every 500 ms), one
worker, one notifier with a callback endpoint run here.
  1. Finished tasks (delivered, cancelled, expired) older than the
     retention are gone with their state-log rows; younger ones stay
     until they are old enough; live tasks stay; a live recurring
     series stays while its old log rows go (task.log_retention); a
     pruned id is forgotten (GET 404, a replay is a new task).
  2. A delivery is shown in the log from the task's columns (no stored
     row).
  3. A callback still retrying keeps its task past the retention; once
     it succeeded the task goes. Cancelling its pending retry task fails
     the callback (also a recurring occurrence's and a long id's).
  4. Two managers: one holds /pruner; the holder stopped past its
     session (SIGSTOP) is replaced, the pass is resumed by the other, and
     the stopped one deletes nothing more once it wakes (the epoch fence);
     never two holders at once.
  5. The epoch raised behind the holder's back (as a newer holder would):
     its next transaction is refused, it deletes nothing more until it
     raised its own again.
  6. The holder killed (SIGKILL) mid-pass: the other resumes the same
     pass and finishes it.
Cluster B: one manager with task.archive_topic.
  7. The manager dies between a chunk's Kafka commit and its DB commit
     (crash point prune_after_archive_before_delete); restarted, it reads
     the archive back: every pruned task is in the archive exactly once,
     and before its row went.
  8. prophetctl prune --dry-run counts what a pass would delete;
     prophetctl prune --now runs one to its end.
  9. A schema-3 database holding old finished tasks is migrated
     (the index built online) and pruned.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from test_notifier import Endpoint  # noqa: E402

CP_MANAGER = os.path.join(h.BUILDDIR, "tests", "crash", "prophet-manager-cp")
PROPHETCTL = os.path.join(h.BUILDDIR, "prophetctl")
RETENTION_MS = 3000
TOPIC = "pr"
CB_TOPIC = "pr.cb"
ARCHIVE = "pr.archive"

A = None        # cluster A
M2 = None       # its second manager
NOTIFIER = None
SINK = None     # callback endpoint
B = None        # cluster B (archive)


def api_of(addr, timeout=30):
    return h.Api(addr, timeout=timeout)


def submit(c, tasks, addr=None):
    api = api_of(addr or c.manager_addr)
    try:
        for k in range(0, len(tasks), 500):
            r = api.post("/v1/tasks/batch", {"tasks": tasks[k:k + 500]})
            h.check(r.status == 200, "batch: %r" % r)
            for res in r.json["results"]:
                h.check(res["code"] in (200, 201), "task refused: %r" % res)
    finally:
        api.close()


def q(ids):
    return ",".join("'%s'" % i for i in ids)


def rows_of(c, ids):
    return int(c.mysql("SELECT COUNT(*) FROM tasks WHERE id IN (%s)"
                       % q(ids))[0][0])


def log_rows_of(c, ids):
    return int(c.mysql("SELECT COUNT(*) FROM task_log WHERE task_id IN (%s)"
                       % q(ids))[0][0])


def statuses(c, ids):
    return dict(c.mysql("SELECT id, status FROM tasks WHERE id IN (%s)"
                        % q(ids)))


def prune_state(addr, timeout=30):
    api = api_of(addr, timeout)
    try:
        r = api.get("/v1/admin/prune")
        h.check(r.status == 200, "GET /v1/admin/prune: %r" % r)
        return r.json
    finally:
        api.close()


def manager_proc(c, name, port, extra=(), binary=None):
    p = h.Proc(name, [binary or h.MANAGER_BIN, "-c", c.conf_path,
                      "--set", "http.listen=127.0.0.1:%d" % port]
               + [a for kv in extra for a in ("--set", kv)],
               os.path.join(c.dir, name + ".log"))
    p.addr = "127.0.0.1:%d" % port
    return p


def start_manager_proc(c, p):
    p.start()
    c._wait_http(p, p.addr, "/readyz", 60)


def wait_gone(c, ids, timeout, what):
    h.wait_until(lambda: rows_of(c, ids) == 0 and log_rows_of(c, ids) == 0,
                 timeout, 0.2, what)


def setup():
    global A, M2, NOTIFIER, SINK
    SINK = Endpoint()
    nport = h.free_port()
    A = h.Cluster(workers=1, name="prune", conf={
        "task.retention": "%dms" % RETENTION_MS,
        "task.prune_interval": "500ms",
        "task.prune_chunk": 50,
        "task.prune_pause_ms": 0,
        "zookeeper.session_timeout_ms": 4000,
        "notifier.topics": CB_TOPIC,
        "notifier.http_listen": "127.0.0.1:%d" % nport,
        "notifier.backoff_base_ms": 2500,
        "notifier.backoff_jitter_pct": 0,
        "notifier.callback_networks_allowed": "127.0.0.0/8",
    })
    A.open()
    NOTIFIER = A.notifier(nport)
    A.workers.append(NOTIFIER)
    h.create_topics(A.brokers, [A.topic(t) for t in
                                (TOPIC, CB_TOPIC, "prophet.callback-retry",
                                 "prophet.callback-dead")])
    A.start_manager()
    A.start_worker(0)
    NOTIFIER.start()
    A._wait_http(NOTIFIER, NOTIFIER.addr, "/readyz", 60)
    h.wait_until(lambda: prune_state(A.manager_addr)["this_manager"]
                 ["holds_lock"], 20, 0.2, "the manager to take the lock")
    M2 = manager_proc(A, "manager2", h.free_port())
    A.workers.append(M2)
    start_manager_proc(A, M2)


# ------------------------------------------------------------------ tests --

def test_other_retention_is_logged():
    """A manager whose retention differs from the holder's says so: the
    holder's values are the ones passes follow, not those its dry runs and
    settings show."""
    warn = "pruner lock held by a manager with another task.retention"
    h.check(not M2.grep(warn), "same values, yet: %r" % M2.grep(warn))
    m3 = manager_proc(A, "manager3", h.free_port(), ["task.retention=1h"])
    try:
        start_manager_proc(A, m3)
        h.wait_until(lambda: m3.grep(warn), 10, 0.2, "the warning")
        line = m3.grep(warn)[0]
        h.check("holder_retention_ms=%d " % RETENTION_MS in line and
                " retention_ms=3600000 " in line, "the warning: %s" % line)
    finally:
        m3.stop()


def test_finished_go_young_and_live_stay():
    now = h.now_ms()
    delivered = ["fin-d-%03d" % i for i in range(60)]
    cancelled = ["fin-c-%03d" % i for i in range(20)]
    expired = ["fin-e-%03d" % i for i in range(20)]
    live = ["live-%03d" % i for i in range(10)]
    tasks = [{"id": t, "topic": TOPIC, "body": "d", "due_at": now + 300}
             for t in delivered]
    tasks += [{"id": t, "topic": TOPIC, "body": "c", "delay_ms": 3600000}
              for t in cancelled]
    # due 5 s ago with a 1 s ttl: expired when a worker takes it
    tasks += [{"id": t, "topic": TOPIC, "body": "e", "due_at": now - 5000,
               "ttl_ms": 1000} for t in expired]
    tasks += [{"id": t, "topic": TOPIC, "body": "l", "delay_ms": 86400000}
              for t in live]
    tasks.append({"id": "live-cron", "topic": TOPIC, "body": "every s",
                  "cron": "* * * * * *"})
    before = h.metrics(A.manager_addr).get("prophet_pruned_tasks_total", 0)
    submit(A, tasks)
    api = A.api()
    try:
        for t in cancelled:
            r = api.request("DELETE", "/v1/tasks/" + t)
            h.check(r.status == 200, "cancel %s: %r" % (t, r))
    finally:
        api.close()
    fin = delivered + cancelled + expired
    want = dict([(t, "delivered") for t in delivered] +
                [(t, "cancelled") for t in cancelled] +
                [(t, "expired") for t in expired])
    # Each finished task is checked while younger than the retention:
    # it and its log rows (cancel, expiry) must still be there.
    young_seen = set()
    deadline = time.monotonic() + 20
    while len(young_seen) < len(fin) and time.monotonic() < deadline:
        rows = A.mysql("SELECT t.id, t.status, %d - t.updated_at, "
                       "(SELECT COUNT(*) FROM task_log l WHERE l.task_id = "
                       "t.id) FROM tasks t WHERE t.id IN (%s)"
                       % (h.now_ms(), q(fin)))
        for tid, st, age, nlog in rows:
            if st != want[tid] or int(age) > RETENTION_MS - 700:
                continue
            if st != "delivered":
                h.check(int(nlog) == 1, "%s (%s) has %s log rows"
                        % (tid, st, nlog))
            young_seen.add(tid)
        gone = len(fin) - len(rows)
        h.check(gone == 0 or len(young_seen) == len(fin),
                "%d finished task(s) went before they were checked young "
                "(seen %d)" % (gone, len(young_seen)))
        time.sleep(0.2)
    h.check(len(young_seen) == len(fin), "only %d of %d finished tasks "
            "seen younger than the retention" % (len(young_seen), len(fin)))
    wait_gone(A, fin, 20, "the finished tasks and their log rows to go")
    # the live ones stay: scheduled, the series too
    h.check_eq(statuses(A, live + ["live-cron"]),
               dict((t, "scheduled") for t in live + ["live-cron"]),
               "live tasks")
    time.sleep(RETENTION_MS / 1000.0 + 2)
    occ, oldest, nlog = A.mysql(
        "SELECT t.occurrences, %d - MIN(l.at), COUNT(l.seq) FROM tasks t "
        "JOIN task_log l ON l.task_id = t.id WHERE t.id = 'live-cron' "
        "GROUP BY t.id" % h.now_ms())[0]
    h.log("live-cron: %s occurrences, %s log rows, the oldest %s ms old"
          % (occ, nlog, oldest))
    h.check(int(occ) >= 6 and int(nlog) < int(occ),
            "the series' old log rows were not pruned: %s occurrences, "
            "%s rows" % (occ, nlog))
    h.check(int(oldest) < RETENTION_MS + 3000,
            "the series keeps a log row %s ms old" % oldest)
    api = A.api()
    try:
        r = api.get("/v1/tasks/fin-d-000")
        h.check(r.status == 404, "GET of a pruned task: %r" % r)
        # A pruned id is forgotten: the same submission is a new task.
        r = api.post("/v1/tasks", {"id": "fin-d-000", "topic": TOPIC,
                                   "body": "d", "delay_ms": 3600000})
        h.check(r.status == 201, "replay of a pruned id: %r" % r)
        r = api.request("DELETE", "/v1/tasks/live-cron")
        h.check(r.status == 200, "cancel the series: %r" % r)
        st = api.get("/v1/admin/prune").json
    finally:
        api.close()
    h.check(st["last"] is not None and st["holder"],
            "GET /v1/admin/prune: %r" % st)
    got = h.metrics(A.manager_addr).get("prophet_pruned_tasks_total",
                                        0) - before
    h.check(got >= len(fin), "prophet_pruned_tasks_total grew by %d" % got)


def test_delivery_shown_from_columns():
    submit(A, [{"id": "show-1", "topic": TOPIC, "body": "s",
                "delay_ms": 0}])
    h.wait_until(lambda: statuses(A, ["show-1"]).get("show-1") ==
                 "delivered", 15, 0.1, "show-1 delivered")
    api = A.api()
    try:
        j = api.get("/v1/tasks/show-1?log=1").json
    finally:
        api.close()
    h.check_eq(log_rows_of(A, ["show-1"]), 0, "stored log rows of show-1")
    h.check(len(j["log"]) == 1, "log: %r" % j["log"])
    e = j["log"][0]
    h.check_eq((e["from"], e["to"], e["actor"], e["epoch"], e["attempt"],
                e["at"]),
               ("scheduled", "delivered", j["owner"], j["epoch"], 1,
                j["fired_at"]), "the delivery's log row")


def test_retrying_callback_keeps_its_task():
    tid = "cbk-1"
    submit(A, [{"id": tid, "topic": CB_TOPIC, "body": "cb", "delay_ms": 0,
                "max_attempts": 3,
                "callback": {"url": SINK.url("flaky", tid)}}])
    # the sink fails the first two calls: retrying from the first (t=0)
    # to the third (t=2.5+5 s)
    h.wait_until(lambda: A.mysql("SELECT callback_status FROM tasks WHERE "
                                 "id = '%s'" % tid) == [["retrying"]],
                 30, 0.2, "callback_status retrying")
    t_retrying = time.monotonic()
    while time.monotonic() - t_retrying < RETENTION_MS / 1000.0 + 2:
        r = A.mysql("SELECT status, callback_status FROM tasks WHERE "
                    "id = '%s'" % tid)
        if r != [["delivered", "retrying"]]:
            break
        time.sleep(0.2)
    h.check(time.monotonic() - t_retrying >= RETENTION_MS / 1000.0 + 2,
            "a task with a retrying callback was pruned, or changed: %r"
            % A.mysql("SELECT status, callback_status FROM tasks WHERE "
                      "id = '%s'" % tid))
    h.check(not SINK.wait_ids([tid], 30, min_calls=3), "no third call")
    h.wait_until(lambda: A.mysql("SELECT callback_status FROM tasks WHERE "
                                 "id = '%s'" % tid) in ([["ok"]], []),
                 15, 0.2, "callback_status ok")
    # ok: the task goes a retention after that outcome
    wait_gone(A, [tid], 20, "%s to go once its callback succeeded" % tid)
    h.check_eq(len(SINK.calls_of(tid)), 3, "calls")


def retry_pending(tid):
    """A task whose callback fails, once its retry task cbr:<tid>:2 is
    there: an API client for A (the caller's to close)."""
    submit(A, [{"id": tid, "topic": CB_TOPIC, "body": "cb", "delay_ms": 0,
                "max_attempts": 3,
                "callback": {"url": SINK.url("fail", tid)}}])
    api = api_of(A.manager_addr)
    h.wait_until(lambda: api.get("/v1/tasks/cbr:%s:2" % tid).status == 200,
                 30, 0.2, "the retry task")
    return api


def test_cancelled_retry_fails_the_callback():
    """Cancelling a callback's pending retry task (as operations.md shows)
    stops its retries: the callback has failed, in the same transaction
    (it stayed retrying, and its task kept, for ever), with a log row
    saying why; the task then goes a retention later, and the oldest
    finished task the metric reports stays one a pass may delete."""
    tid = "cbk-2"
    api = retry_pending(tid)
    try:
        r = api.request("DELETE", "/v1/tasks/cbr:%s:2" % tid)
        h.check_eq(r.status, 200, "cancel the retry task: %r" % r)
        h.check_eq(A.mysql("SELECT callback_status FROM tasks WHERE id = "
                           "'%s'" % tid), [["failed"]],
                   "the callback failed with the cancel")
        log = api.get("/v1/tasks/%s?log=1" % tid).json["log"]
        h.check(any(e["to"] == "failed" and e["actor"] == "api" and
                    "retries cancelled (cbr:%s:2)" % tid in
                    (e.get("note") or "") for e in log),
                "the log row of the cancelled retries: %r" % log)
    finally:
        api.close()
    # The same through a bulk cancel of the retry topic's tasks.
    bid = "cbk-3"
    api = retry_pending(bid)
    try:
        r = api.post("/v1/tasks/bulk", {
            "filter": {"topic": "prophet.callback-retry",
                       "id_prefix": "cbr:%s:" % bid},
            "action": "cancel"})
        h.check_eq(r.status, 202, "bulk cancel of the retry task: %r" % r)
        job = r.json["job"]
        h.wait_until(lambda: api.get("/v1/admin/jobs/%d" % job).json[
            "done"], 30, 0.2, "the bulk job")
        h.check_eq(api.get("/v1/admin/jobs/%d" % job).json["changed"], 1,
                   "the bulk job's changed count")
        h.check_eq(A.mysql("SELECT callback_status FROM tasks WHERE id = "
                           "'%s'" % bid), [["failed"]],
                   "the callback failed with the bulk cancel")
        log = api.get("/v1/tasks/%s?log=1" % bid).json["log"]
        h.check(any(e["to"] == "failed" and e["actor"] == "bulk"
                    for e in log), "the bulk's log row: %r" % log)
    finally:
        api.close()
    wait_gone(A, [tid, bid], RETENTION_MS / 1000.0 + 20,
              "the tasks to go a retention after their retries were "
              "cancelled")
    oldest = h.metrics(A.manager_addr).get(
        "prophet_prune_oldest_finished_seconds", 0)
    h.check(oldest < RETENTION_MS / 1000.0 + 1,
            "prophet_prune_oldest_finished_seconds %.1f" % oldest)


def fnv1a64(text):
    v = 0xcbf29ce484222325
    for b in text.encode():
        v = ((v ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return "%016x" % v


def test_cancelled_retry_of_an_occurrence_or_a_long_id():
    """The retry task of a recurring task's occurrence is
    cbr:<id>:<occurrence>:<n>, and that of an id too long for cbr:<id>:<n>
    is cbr:h<FNV-1a-64 of the id>:<n> (docs/architecture.md). Cancelling
    either left the callback retrying, its task kept for ever: the
    manager took the task to fail from the retry's id."""
    rid, lid = "cbk-r", "cbk-" + "l" * 120
    submit(A, [{"id": rid, "topic": CB_TOPIC, "body": "cb",
                "cron": "* * * * * *", "max_occurrences": 1,
                "max_attempts": 3,
                "callback": {"url": SINK.url("fail", rid)}},
               {"id": lid, "topic": CB_TOPIC, "body": "cb", "delay_ms": 0,
                "max_attempts": 3,
                "callback": {"url": SINK.url("fail", "long")}}])
    api = api_of(A.manager_addr)
    try:
        h.wait_until(lambda: api.get("/v1/tasks/" + rid).json.get(
            "occurrences") == 1, 30, 0.2, "the occurrence")
        occ = api.get("/v1/tasks/" + rid).json["due_at"]
        for tid, retry in ((rid, "cbr:%s:%d:2" % (rid, occ)),
                           (lid, "cbr:h%s:2" % fnv1a64(lid))):
            h.wait_until(lambda: api.get("/v1/tasks/" + retry).status ==
                         200, 30, 0.2, "the retry task %s" % retry)
            r = api.request("DELETE", "/v1/tasks/" + retry)
            h.check_eq(r.status, 200, "cancel %s: %r" % (retry, r))
            h.check_eq(A.mysql("SELECT callback_status FROM tasks WHERE "
                               "id = '%s'" % tid), [["failed"]],
                       "%s: the callback failed with the cancel" % tid[:12])
            log = api.get("/v1/tasks/%s?log=1" % tid).json["log"]
            h.check(any(e["to"] == "failed" and e["actor"] == "api" and
                        "retries cancelled (%s)" % retry in
                        (e.get("note") or "") for e in log),
                    "%s: the log row of the cancelled retries: %r"
                    % (tid[:12], log))
    finally:
        api.close()
    wait_gone(A, [rid, lid], RETENTION_MS / 1000.0 + 20,
              "the tasks to go a retention after their retries were "
              "cancelled")


def holds(addr):
    try:
        return prune_state(addr, 1)["this_manager"]["holds_lock"]
    except (OSError, h.TestFailure):
        return None


class HolderWatch:
    """Samples which managers claim the lock, every 100 ms."""

    def __init__(self, procs):
        self.procs = procs
        self.both = []
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            claim = [p.name for p in self.procs
                     if p.running() and holds(p.addr)]
            if len(claim) > 1:
                self.both.append(claim)
            time.sleep(0.1)

    def close(self):
        self.stop = True
        self.t.join(5)


def slow_managers(extra):
    """Restarts both managers with slow passes (chunks of 10, 0.5 s apart);
    the first started holds the lock. Returns (holder, other)."""
    A.manager.stop()
    M2.stop()
    a = manager_proc(A, "manager1s", int(A.manager_addr.split(":")[1]),
                     extra)
    b = manager_proc(A, "manager2s", int(M2.addr.split(":")[1]), extra)
    A.workers += [a, b]
    start_manager_proc(A, a)
    h.wait_until(lambda: holds(a.addr), 20, 0.2, "%s to take the lock"
                 % a.name)
    start_manager_proc(A, b)
    h.check(holds(b.addr) is False, "the second manager holds the lock too")
    return a, b


def finished_batch(prefix, n):
    ids = ["%s-%03d" % (prefix, i) for i in range(n)]
    submit(A, [{"id": t, "topic": TOPIC, "body": "x", "delay_ms": 0}
               for t in ids])
    h.wait_until(lambda: int(A.mysql(
        "SELECT COUNT(*) FROM tasks WHERE id IN (%s) AND status = "
        "'delivered'" % q(ids))[0][0]) == n, 30, 0.2, "%s delivered" % prefix)
    return ids


def pruned_by(p):
    return h.metrics(p.addr).get("prophet_pruned_tasks_total", 0)


def test_two_managers_one_pruner_fenced():
    global SLOW
    a, b = slow_managers(["task.prune_chunk=10", "task.prune_pause_ms=500"])
    SLOW = (a, b)
    watch = HolderWatch([a, b])
    try:
        z = A.zk()
        node = json.loads(z.get(A.zk_root + "/pruner"))
        z.close()
        h.check(node["listen"] == a.addr, "the lock node: %r" % node)
        ids = finished_batch("fen", 120)
        # mid-pass: some deleted, most left
        h.wait_until(lambda: 20 <= 120 - rows_of(A, ids) <= 60, 40, 0.1,
                     "the holder to be mid-pass")
        before = pruned_by(a)
        epoch_a = int(A.mysql("SELECT epoch FROM prune_state")[0][0])
        pass_a = int(A.mysql("SELECT pass FROM prune_state")[0][0])
        a.signal(signal.SIGSTOP)
        left_at_stop = rows_of(A, ids)
        h.wait_until(lambda: holds(b.addr), 20, 0.2,
                     "the other manager to take the lock")
        h.wait_until(lambda: rows_of(A, ids) < left_at_stop, 20, 0.2,
                     "the other manager to prune")
        st = A.mysql("SELECT epoch, pass, resumed, holder FROM prune_state")
        h.check(int(st[0][0]) > epoch_a and int(st[0][1]) == pass_a and
                int(st[0][2]) >= 1, "prune_state after the takeover: %r "
                "(epoch was %d, pass %d)" % (st, epoch_a, pass_a))
        a.signal(signal.SIGCONT)
        h.wait_until(lambda: a.grep("pruner lock lost"), 20, 0.2,
                     "the woken manager to see it lost the lock")
        time.sleep(2)
        # it may have had one chunk in flight when stopped; nothing after
        got = pruned_by(a) - before
        h.check(got <= 10, "the stopped holder deleted %d tasks after it "
                "woke" % got)
        h.check(holds(a.addr) is False, "the woken manager claims the lock")
        wait_gone(A, ids, 60, "the pass to finish on the new holder")
    finally:
        watch.close()
    h.check(not watch.both, "two managers claimed the lock: %r"
            % watch.both[:3])


def test_db_fence_stops_a_stale_holder():
    """The epoch in prune_state is the final word: raised behind the
    holder's back (as a newer holder would), its next transaction is
    refused and deletes nothing; it then takes its lock up again with a
    new epoch (its ZooKeeper node is still its own) and goes on."""
    a, b = SLOW  # b holds the lock now, a waits
    ids = finished_batch("epo", 60)
    h.wait_until(lambda: 10 <= 60 - rows_of(A, ids) <= 40, 40, 0.1,
                 "the holder to be mid-pass")
    n_fenced = len(b.grep("fenced by a newer holder"))
    n_taken = len(b.grep("pruner lock taken"))
    A.mysql("UPDATE prune_state SET epoch = epoch + 1")
    left = rows_of(A, ids)
    h.wait_until(lambda: len(b.grep("fenced by a newer holder")) > n_fenced,
                 10, 0.1, "the holder's transaction to be fenced")
    h.check(rows_of(A, ids) >= left - 10, "more than the chunk in flight "
            "deleted after the fence moved")
    h.wait_until(lambda: len(b.grep("pruner lock taken")) > n_taken, 10,
                 0.1, "the holder to raise a new epoch")
    wait_gone(A, ids, 60, "the pass to finish")


def test_killed_mid_pass_resumes():
    a, b = SLOW  # b holds the lock now, a waits
    ids = finished_batch("kil", 100)
    h.wait_until(lambda: 10 <= 100 - rows_of(A, ids) <= 60, 40, 0.1,
                 "the holder to be mid-pass")
    pass_b = int(A.mysql("SELECT pass FROM prune_state")[0][0])
    b.kill()
    h.wait_until(lambda: holds(a.addr), 20, 0.2,
                 "the waiting manager to take the lock")
    h.wait_until(lambda: a.grep('msg="prune pass resumed" pass=%d '
                                % pass_b), 20, 0.2,
                 "pass %d resumed" % pass_b)
    wait_gone(A, ids, 60, "the resumed pass to finish")
    h.wait_until(lambda: (prune_state(a.addr).get("last") or {})
                 .get("pass", 0) >= pass_b, 20, 0.2, "the pass to end")
    last = A.mysql("SELECT JSON_EXTRACT(last_pass, '$.pass'), "
                   "JSON_EXTRACT(last_pass, '$.resumed') FROM prune_state")
    h.log("last pass after the kill: %r" % last)
    h.check(int(last[0][1]) >= 1 or int(last[0][0]) > pass_b,
            "the killed pass was not resumed: %r" % last)


# ------------------------------------------------------------ cluster B --

def setup_b():
    global B
    B = h.Cluster(workers=1, name="prunearch", conf={
        "task.retention": "2s",
        "task.prune_interval": "500ms",
        "task.prune_chunk": 20,
        "task.prune_pause_ms": 0,
        "task.archive_topic": ARCHIVE,
        "zookeeper.session_timeout_ms": 4000,
    })
    B.open()
    h.create_topics(B.brokers, [B.topic(t) for t in (TOPIC, ARCHIVE)])
    B.manager.argv[0] = CP_MANAGER
    B.manager.env = {"PROPHET_CRASH_AT":
                     "prune_after_archive_before_delete:2"}
    B.start_manager()
    B.start_worker(0)


def test_archive_exactly_once_across_a_crash():
    setup_b()
    rd = B.reader([ARCHIVE], ["-X", "isolation.level=read_committed"])
    ids = ["arc-%03d" % i for i in range(100)]
    cancelled = ["arc-c-%02d" % i for i in range(10)]
    now = h.now_ms()
    submit(B, [{"id": t, "topic": TOPIC, "body": "body of " + t,
                "due_at": now + 200, "headers": {"k": t}} for t in ids] +
           [{"id": t, "topic": TOPIC, "body": "c", "delay_ms": 3600000}
            for t in cancelled])
    api = B.api()
    try:
        for t in cancelled:
            h.check(api.request("DELETE", "/v1/tasks/" + t).status == 200,
                    "cancel " + t)
    finally:
        api.close()
    alls = ids + cancelled
    problems = h.Problems()
    stop = []

    missing_at = {}  # id -> when its row was first seen gone, unread

    def before_its_row_goes():
        # A row gone whose record the reader has not shown yet (kcat
        # lags): its record must have been produced (its Kafka
        # timestamp) before the row was seen gone.
        while not stop:
            present = set(r[0] for r in B.mysql(
                "SELECT id FROM tasks WHERE id IN (%s)" % q(alls)))
            # Taken after the query: a row the query's snapshot lacks was
            # deleted before now, so its record was produced before now.
            # (Taken before, the check also failed rows deleted while the
            # mysql client started: 15 of them once, in CI under load.)
            seen = h.now_ms()
            with rd.cond:
                archived = set(rd.by_id)
            for t in alls:
                if t not in present and t not in archived:
                    missing_at.setdefault(t, seen)
            time.sleep(0.1)
    th = threading.Thread(target=before_its_row_goes, daemon=True)
    th.start()
    try:
        h.wait_until(lambda: not B.manager.running(), 60, 0.2,
                     "the manager to die at the crash point")
        h.check(B.manager.grep("crash point reached"), "no crash point")
        left = rows_of(B, alls)
        h.log("%d of %d tasks left at the crash" % (left, len(alls)))
        B.manager.argv[0] = h.MANAGER_BIN
        B.manager.env = None
        B.start_manager()
        wait_gone(B, alls, 60, "every task pruned after the restart")
        h.check(not rd.wait_for(alls, 20, settle=2),
                "archive records missing")
    finally:
        stop.append(1)
        th.join(5)
    with rd.cond:
        recs = dict((t, list(rd.by_id.get(t, []))) for t in alls)
    for t, seen in sorted(missing_at.items()):
        problems.check(any(m.ts is not None and m.ts <= seen
                           for m in recs[t]),
                       "%s deleted before its archive record" % t)
    problems.raise_if_any("archive before delete")
    dup = [t for t, ms in recs.items() if len(ms) != 1]
    h.check(not dup, "records per task not 1: %r" % [(t, len(recs[t]))
                                                     for t in dup[:5]])
    h.check(B.manager.grep("archive read back"), "no read back logged")
    rb = B.manager.grep("archive read back")
    h.log("read back: %s" % rb[-1])
    h.check("deleted=0" not in rb[-1] or left == 0,
            "the read back deleted nothing: %s" % rb[-1])
    j = json.loads(recs["arc-007"][0].payload)
    h.check(j["status"] == "delivered" and j["body"] == "body of arc-007"
            and j["headers"] == {"k": "arc-007"} and
            [e["to"] for e in j["log"]] == ["delivered"],
            "archive record of arc-007: %r" % j)
    h.check(recs["arc-007"][0].hdr.get("prophet-status") == "delivered",
            "record headers: %r" % recs["arc-007"][0].headers)
    j = json.loads(recs["arc-c-03"][0].payload)
    h.check(j["status"] == "cancelled" and
            [e["to"] for e in j["log"]] == ["cancelled"],
            "archive record of arc-c-03: %r" % j)


def prophetctl(c, *args):
    p = subprocess.run([PROPHETCTL, "-c", c.conf_path] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_cli_dry_run_and_now():
    B.manager.stop()
    B.manager.argv = B.manager.argv[:3] + [
        "--set", "task.prune_interval=1h"]
    B.start_manager()
    # its first pass runs at start; then only on request
    h.wait_until(lambda: (prune_state(B.manager_addr).get("last") or {})
                 .get("started_at", 0) > 0 and
                 not prune_state(B.manager_addr)["running"], 20, 0.2,
                 "the first pass")
    ids = ["cli-%03d" % i for i in range(30)]
    submit(B, [{"id": t, "topic": TOPIC, "body": "x", "delay_ms": 0}
               for t in ids])
    h.wait_until(lambda: int(B.mysql(
        "SELECT COUNT(*) FROM tasks WHERE id IN (%s) AND status = "
        "'delivered'" % q(ids))[0][0]) == 30, 30, 0.2, "delivered")
    time.sleep(2.5)
    rc, out, err = prophetctl(B, "prune", "--dry-run")
    h.log(out)
    h.check(rc == 0, "prune --dry-run: %d %s" % (rc, err))
    h.check("total 30 tasks" in out, "dry run: %r" % out)
    rc, out, err = prophetctl(B, "--json", "prune", "--dry-run")
    j = json.loads(out)
    h.check_eq(j["eligible"], 30, "dry run eligible (JSON)")
    h.check_eq(rows_of(B, ids), 30, "rows after the dry run")
    rc, out, err = prophetctl(B, "prune", "--now")
    h.log(out + err)
    h.check(rc == 0, "prune --now: %d %s" % (rc, err))
    h.check("deleted 30 tasks" in out, "prune --now: %r" % out)
    h.check_eq(rows_of(B, ids), 0, "rows after prune --now")
    rc, out, err = prophetctl(B, "prune")
    h.check(rc == 0 and "last pass" in out, "prune: %r %r" % (out, err))


def test_upgrade_of_a_populated_schema3_db():
    B.manager.stop()
    B.mysql("DROP TABLE prune_state")
    B.mysql("ALTER TABLE tasks DROP INDEX by_status_updated")
    B.mysql("DELETE FROM prophet_schema WHERE version >= 4")
    B.mysql(TO_VARCHAR)
    old = h.now_ms() - 86400000
    cols = ("id, slot, topic, body, due_at, status, content_hash, batch_id, "
            "created_at, updated_at")
    B.mysql("INSERT INTO tasks (%s) SELECT CONCAT('old-', seq), seq %% 16, "
            "'%s', 'b', %d, IF(seq %% 3 = 0, 'cancelled', 'delivered'), 1, "
            "1, %d, %d FROM seq_1_to_2000" % (cols, TOPIC, old, old, old))
    B.mysql("INSERT INTO tasks (%s) SELECT CONCAT('keep-', seq), seq %% 16, "
            "'%s', 'b', %d, 'scheduled', 1, 1, %d, %d FROM seq_1_to_200"
            % (cols, TOPIC, h.now_ms() + 86400000 * 30, old, old))
    B.mysql("INSERT INTO task_log (task_id, from_status, to_status, actor, "
            "at) SELECT CONCAT('old-', seq), 'scheduled', 'cancelled', "
            "'manager', %d FROM seq_1_to_2000 WHERE seq %% 3 = 0" % old)
    B.manager.argv = B.manager.argv[:3]
    B.start_manager()
    h.check(B.manager.grep("applying migration\" version=4"),
            "migration 4 not applied")
    h.check(B.mysql("SHOW INDEX FROM tasks WHERE Key_name = "
                    "'by_status_updated'"), "the index is missing")
    h.wait_until(lambda: int(B.mysql("SELECT COUNT(*) FROM tasks WHERE id "
                                     "LIKE 'old-%'")[0][0]) == 0, 30, 0.3,
                 "the old finished tasks to be pruned")
    h.check_eq(int(B.mysql("SELECT COUNT(*) FROM task_log WHERE task_id "
                           "LIKE 'old-%'")[0][0]), 0, "their log rows")
    h.check_eq(int(B.mysql("SELECT COUNT(*) FROM tasks WHERE id LIKE "
                           "'keep-%' AND status = 'scheduled'")[0][0]), 200,
               "scheduled tasks kept")
    h.check(B.manager.grep("applying migration\" version=5"),
            "migration 5 not applied")
    h.check_eq(status_types(), ["enum", "enum"], "column types after")


# Schema 4's column types (migration 5 makes them ENUMs).
TO_VARCHAR = ("ALTER TABLE tasks MODIFY status VARCHAR(10) CHARACTER SET "
              "ascii NOT NULL, MODIFY callback_status VARCHAR(10) CHARACTER "
              "SET ascii NOT NULL DEFAULT 'none'")


def status_types():
    return [r[0] for r in B.mysql(
        "SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE "
        "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'tasks' AND COLUMN_NAME "
        "IN ('callback_status', 'status') ORDER BY COLUMN_NAME")]


def schema_version():
    return int(B.mysql("SELECT MAX(version) FROM prophet_schema")[0][0])


def test_enum_migration_deferred_on_a_large_table():
    """Migration 5 copies the task table: above db.migrate_copy_max_rows
    the manager defers it (says what to run, serves on schema 4), runs
    it once allowed, and records a conversion made by hand."""
    latest = schema_version()  # later migrations wait behind a deferred 5
    B.manager.stop()
    B.mysql(TO_VARCHAR)
    B.mysql("ANALYZE TABLE tasks")
    B.mysql("DELETE FROM prophet_schema WHERE version >= 5")
    rows = int(B.mysql("SELECT COUNT(*) FROM tasks")[0][0])
    h.check(rows > 100, "rows in tasks: %d" % rows)
    before = len(B.manager.grep("migration deferred"))
    B.manager.argv = B.manager.argv[:3] + [
        "--set", "db.migrate_copy_max_rows=10"]
    B.start_manager()
    lines = B.manager.grep("migration deferred")
    h.check_eq(len(lines), before + 1, "deferral logged once")
    h.check("version=5" in lines[-1] and "table=tasks" in lines[-1],
            "deferral line: %r" % lines[-1])
    h.check(B.manager.grep("deferred migration statement\" version=5 "
                           "sql=\"ALTER TABLE tasks"),
            "the statement to run is logged")
    h.check_eq(status_types(), ["varchar", "varchar"], "types, deferred")
    h.check_eq(schema_version(), 4, "schema version, deferred")
    # The manager serves on schema 4: a task is accepted and fires.
    tid = "on-schema-4-%d" % h.now_ms()
    submit(B, [{"id": tid, "topic": TOPIC, "body": "on schema 4",
               "delay_ms": 0}])
    h.wait_until(lambda: B.mysql("SELECT status FROM tasks WHERE id = '%s'"
                                 % tid)[0][0] == "delivered", 30, 0.2,
                 "the task to be delivered on schema 4")

    # Allowed again (the default limit): applied at the next start.
    B.manager.stop()
    B.manager.argv = B.manager.argv[:3]
    B.start_manager()
    h.check(B.manager.grep("migration copies a table\" version=5"),
            "migration 5 run at the default limit")
    h.check_eq(status_types(), ["enum", "enum"], "types, applied")
    h.check_eq(schema_version(), latest, "schema version, applied")
    h.check_eq(int(B.mysql("SELECT COUNT(*) FROM tasks")[0][0]), rows + 1,
               "rows kept by the copy")
    h.check_eq(B.mysql("SELECT status FROM tasks WHERE id = '%s'" % tid)
               [0][0], "delivered", "status kept by the copy")

    # Converted by hand in a maintenance window: recorded, not run.
    B.manager.stop()
    B.mysql(TO_VARCHAR)
    B.mysql(MIGRATION_5)
    B.mysql("DELETE FROM prophet_schema WHERE version >= 5")
    B.start_manager()
    h.check(B.manager.grep("migration already in place, recorded\" "
                           "version=5"), "a hand conversion recorded")
    h.check_eq(schema_version(), latest, "schema version, recorded")


def test_newer_schema_warned():
    """A manager older than the schema (a downgrade, or one not upgraded
    yet) says so at start, and still serves."""
    latest = schema_version()
    B.manager.stop()
    B.mysql("INSERT INTO prophet_schema (version, name, applied_at) VALUES "
            "(%d, 'from a later version', 0)" % (latest + 1))
    try:
        B.start_manager()
        lines = B.manager.grep("database schema newer than this manager")
        h.check_eq(len(lines), 1, "newer schema warned")
        h.check("version=%d known=%d" % (latest + 1, latest) in lines[0],
                "warning line: %r" % lines[0])
    finally:
        B.manager.stop()
        B.mysql("DELETE FROM prophet_schema WHERE version > %d" % latest)
        B.start_manager()
    h.check_eq(len(B.manager.grep("database schema newer than this "
                                  "manager")), 1, "not warned once upgraded")


MIGRATION_5 = ("ALTER TABLE tasks MODIFY status ENUM('scheduled', 'firing', "
               "'delivered', 'cancelled', 'expired') CHARACTER SET ascii NOT "
               "NULL, MODIFY callback_status ENUM('none', 'ok', 'retrying', "
               "'failed') CHARACTER SET ascii NOT NULL DEFAULT 'none'")


SLOW = None


def cleanup(failed):
    for c in (B, A):
        if c is not None:
            c.close(failed)
    if SINK is not None:
        SINK.close()


def dump():
    for c in (A, B):
        if c is not None:
            c.dump_logs()


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup, dump)
