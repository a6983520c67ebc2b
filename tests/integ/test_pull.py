#!/usr/bin/python3
"""Pull consumption over HTTP (GET /v1/topics/{topic}/next, POST
/v1/topics/{topic}/ack, mykit-delay's GET /get/{topic}) on a manager and one
worker: the tasks the worker publishes to Kafka, handed to HTTP clients by
the manager's pull groups.

Each test uses topics of its own (new pull groups read a topic from its
start). Pull clients are threads with a kept-alive connection each; a task
counts as handed out when its answer is read, so "never early" compares
that time with the task's due time on the same clock.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
MAX_CONNECTIONS = 64
MAX_WAITING = 24
MAX_GROUPS = 12
# Small, so that back-pressure works in every test.
MAX_IN_HAND = 200
MAX_WAIT_MS = 6000
IDLE_S = 4


def setup():
    global C
    C = h.Cluster(workers=1, name="pull", conf={
        "http.max_connections": MAX_CONNECTIONS,
        "pull.max_waiting": MAX_WAITING,
        "pull.max_groups": MAX_GROUPS,
        "pull.max_wait_ms": MAX_WAIT_MS,
        "pull.idle_group_s": IDLE_S,
        "pull.max_in_hand": MAX_IN_HAND,
    }).open()
    C.start()


def dump():
    if C is not None:
        C.dump_logs()


def cleanup(failed):
    if C is not None:
        C.close(failed)


def new_topic(name):
    t = "%s-%s" % (name, h.rand_tag(4))
    h.create_topics(C.brokers, [C.topic(t)])
    return t


def submit(topic, n, start_ms, spread_ms, prefix, body=None):
    """n tasks due from start_ms over spread_ms, in batches; returns
    {id: due_at}."""
    due = {}
    tasks = []
    for i in range(n):
        tid = "%s-%d" % (prefix, i)
        d = start_ms + (i * spread_ms) // max(n, 1)
        due[tid] = d
        tasks.append({"id": tid, "topic": topic, "due_at": d,
                      "body": body if body is not None else "b%d" % i})
    api = C.api()
    try:
        for k in range(0, n, 500):
            r = api.post("/v1/tasks/batch", {"tasks": tasks[k:k + 500]})
            h.check_eq(r.status, 200, "batch submit: %r" % r)
            codes = [x["code"] for x in r.json["results"]]
            h.check(all(c == 201 for c in codes), "batch codes %r" % codes)
    finally:
        api.close()
    return due


class Puller(threading.Thread):
    """A pull client of one group: next (up to max, long poll), then ack
    what it got (unless ack=False). Records (id, received ms, due_at,
    receipt, deliveries) per task handed to it."""

    def __init__(self, topic, group, stop, max_tasks=50, wait_ms=2000,
                 ack=True, visibility_ms=None, addrs=None):
        super().__init__(daemon=True)
        self.topic, self.group, self.stop = topic, group, stop
        # Managers to use, the next one after a connection error.
        self.addrs = addrs
        self.path = "/v1/topics/%s/next?group=%s&max=%d&wait_ms=%d" % (
            topic, group, max_tasks, wait_ms)
        if visibility_ms:
            self.path += "&visibility_ms=%d" % visibility_ms
        self.ack = ack
        self.got = []
        self.acked = 0
        self.unknown = []
        self.errors = []
        self.statuses = []
        self.lock = threading.Lock()

    def run(self):
        addrs = self.addrs or [C.manager_addr]
        api = h.Api(addrs[0], timeout=MAX_WAIT_MS / 1000 + 10)
        while not self.stop.is_set():
            try:
                r = api.get(self.path)
            except (OSError, http.client.HTTPException) as e:
                self.errors.append(repr(e))
                api.close()
                addrs = addrs[1:] + addrs[:1]
                api = h.Api(addrs[0], timeout=MAX_WAIT_MS / 1000 + 10)
                time.sleep(0.1)
                continue
            now = h.now_ms()
            self.statuses.append(r.status)
            if r.status != 200:
                time.sleep(0.1)
                continue
            tasks = r.json["tasks"]
            with self.lock:
                for t in tasks:
                    self.got.append((t["id"], now, t["due_at"],
                                     t["receipt"], t["deliveries"]))
            if not self.ack or not tasks:
                continue
            try:
                a = api.post("/v1/topics/%s/ack" % self.topic, {
                    "group": self.group,
                    "receipts": [t["receipt"] for t in tasks]})
            except (OSError, http.client.HTTPException) as e:
                self.errors.append("ack: %r" % e)
                api.close()
                continue
            if a.status == 200:
                self.acked += a.json["acked"]
                self.unknown += a.json["unknown"]
            else:
                self.errors.append("ack: %r" % a)
        api.close()


def run_pullers(pullers, want_ids, timeout, settle=1.5):
    """Starts the pullers, waits until they hold every id of want_ids (or
    the timeout), lets them run `settle` seconds more (late duplicates
    would show), stops them."""
    for p in pullers:
        p.start()
    deadline = time.monotonic() + timeout
    want = set(want_ids)
    while time.monotonic() < deadline:
        seen = set()
        for p in pullers:
            with p.lock:
                seen.update(g[0] for g in p.got)
        if want <= seen:
            break
        time.sleep(0.1)
    time.sleep(settle)
    for p in pullers:
        p.stop.set()
    for p in pullers:
        p.join(MAX_WAIT_MS / 1000 + 15)


def check_not_early(problems, got, due):
    for tid, recv, due_at, _, _ in got:
        problems.check(due_at == due.get(tid), "%s: due_at %r, submitted %r"
                       % (tid, due_at, due.get(tid)))
        problems.check(recv >= due[tid], "%s handed out %d ms before its "
                       "due time" % (tid, due[tid] - recv))


def metric(name):
    return h.metrics(C.manager_addr, labelled=True).get(name, 0)


# ------------------------------------------------------------------ tests ---

TOPIC_1K = None
DUE_1K = None


def test_one_group_two_clients():
    """1,000 tasks, two pull clients of one group: each task handed out
    exactly once between them, none before its due time, both clients
    served."""
    global TOPIC_1K, DUE_1K
    TOPIC_1K = new_topic("thousand")
    DUE_1K = submit(TOPIC_1K, 1000, h.now_ms() + 1500, 3000, "k")
    stop = threading.Event()
    ps = [Puller(TOPIC_1K, "workers", stop) for _ in range(2)]
    run_pullers(ps, DUE_1K, 30)
    problems = h.Problems()
    got = ps[0].got + ps[1].got
    ids = [g[0] for g in got]
    problems.check(set(ids) == set(DUE_1K), "%d of 1000 ids handed out, "
                   "missing e.g. %s" % (len(set(ids)),
                                        sorted(set(DUE_1K) - set(ids))[:5]))
    problems.check(len(ids) == len(set(ids)), "%d duplicates"
                   % (len(ids) - len(set(ids))))
    check_not_early(problems, got, DUE_1K)
    for k, p in enumerate(ps):
        problems.check(len(p.got) > 0, "client %d got nothing" % k)
        problems.check(not p.unknown, "client %d: acks unknown %r"
                       % (k, p.unknown[:5]))
        problems.check(all(s == 200 for s in p.statuses), "client %d: "
                       "statuses %r" % (k, sorted(set(p.statuses))))
    problems.check(ps[0].acked + ps[1].acked == 1000, "acked %d"
                   % (ps[0].acked + ps[1].acked))
    problems.raise_if_any("one group, two clients")
    late = sorted(g[1] - DUE_1K[g[0]] for g in got)
    worst = sorted(got, key=lambda g: DUE_1K[g[0]] - g[1])[:12]
    h.log("latest: %s" % ", ".join("%s +%d" % (g[0], g[1] - DUE_1K[g[0]])
                                   for g in worst))
    h.log("1000 tasks: %d and %d to the two clients, due -> handed out "
          "p50 %d ms, p99 %d ms" % (len(ps[0].got), len(ps[1].got),
                                    h.percentile(late, 50),
                                    h.percentile(late, 99)))


def test_two_groups_each_see_all():
    """Two more groups on the same topic (new groups start at the topic's
    beginning): each hands out all 1,000 tasks once, whatever the other
    takes."""
    stop = threading.Event()
    a = [Puller(TOPIC_1K, "audit", stop, max_tasks=100) for _ in range(2)]
    b = [Puller(TOPIC_1K, "billing", stop, max_tasks=100)]
    ps = a + b
    for p in ps:
        p.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ga = {g[0] for p in a for g in p.got}
        gb = {g[0] for p in b for g in p.got}
        if len(ga) == 1000 and len(gb) == 1000:
            break
        time.sleep(0.1)
    time.sleep(1.5)
    stop.set()
    for p in ps:
        p.join(15)
    problems = h.Problems()
    for name, grp in (("audit", a), ("billing", b)):
        ids = [g[0] for p in grp for g in p.got]
        problems.check(set(ids) == set(DUE_1K), "%s: %d of 1000 ids"
                       % (name, len(set(ids))))
        problems.check(len(ids) == len(set(ids)), "%s: %d duplicates"
                       % (name, len(ids) - len(set(ids))))
        check_not_early(problems, [g for p in grp for g in p.got], DUE_1K)
    problems.raise_if_any("two groups")
    h.log("groups audit (2 clients) and billing (1 client) each got the "
          "1000 tasks once")


def test_unacknowledged_redelivered():
    """A batch taken and not acknowledged stays invisible for its
    visibility timeout, then is handed out again (same receipts, deliveries
    2); once acknowledged it does not come back, also after its group was
    closed idle and opened again (the offsets are in Kafka)."""
    topic = new_topic("lease")
    due = submit(topic, 40, h.now_ms(), 1, "v")
    api = C.api()
    path = "/v1/topics/%s/next?group=g&max=20&wait_ms=5000" \
        "&visibility_ms=2000" % topic
    first = []
    while len(first) < 20:
        r = api.get(path.replace("max=20", "max=%d" % (20 - len(first))))
        h.check_eq(r.status, 200, "next: %r" % r)
        first += r.json["tasks"]
    t_first = time.monotonic()
    before = metric("prophet_pull_redelivered_total")
    second = []
    while len(second) < 20:
        r = api.get(path.replace("max=20", "max=%d" % (20 - len(second))))
        second += r.json["tasks"]
    h.check(not {t["id"] for t in first} & {t["id"] for t in second},
            "the other 20 tasks come before any redelivery")
    r = api.post("/v1/topics/%s/ack" % topic,
                 {"group": "g", "receipts": [t["receipt"] for t in second]})
    h.check_eq(r.json, {"acked": 20, "unknown": []}, "ack of the second 20")
    again = []
    while len(again) < 20 and time.monotonic() - t_first < 10:
        r = api.get(path)
        again += r.json["tasks"]
    waited = time.monotonic() - t_first
    h.check_eq(sorted(t["id"] for t in again), sorted(t["id"] for t in first),
               "redelivered ids")
    h.check(waited >= 1.9, "redelivered after %.2f s, before the 2 s "
            "visibility timeout" % waited)
    h.check(all(t["deliveries"] == 2 for t in again),
            "deliveries %r" % [t["deliveries"] for t in again])
    h.check_eq(sorted(t["receipt"] for t in again),
               sorted(t["receipt"] for t in first), "receipts")
    h.check(metric("prophet_pull_redelivered_total") - before >= 20,
            "prophet_pull_redelivered_total")
    r = api.post("/v1/topics/%s/ack" % topic,
                 {"group": "g", "receipts": [t["receipt"] for t in again] +
                  ["9:999999", "junk"]})
    h.check_eq(r.json, {"acked": 20, "unknown": ["9:999999", "junk"]},
               "ack of the redelivered 20 and two receipts not held")
    r = api.get(path.replace("wait_ms=5000", "wait_ms=2500"))
    h.check_eq(r.json, {"tasks": []}, "nothing left after the acks")
    h.log("20 unacknowledged tasks came back after %.2f s (visibility "
          "2 s), deliveries 2" % waited)
    # Idle: the group closes (its consumer leaves the Kafka group) and a
    # later request opens it again at the committed offsets.
    api.close()
    series = 'group="g",topic="%s"' % topic
    h.wait_until(lambda: not any(series in k for k in h.metrics(
        C.manager_addr, labelled=True)), IDLE_S + 5, 0.2,
        "the idle group to close")
    h.check(C.manager.grep('msg="pull group idle: closing" group=g '
                           'topic=%s' % topic),
            "no log line of the idle close")
    api = C.api()
    r = api.get(path.replace("wait_ms=5000", "wait_ms=3000"))
    h.check_eq(r.json, {"tasks": []}, "reopened group: nothing again")
    api.close()
    h.check_eq(len(due), 40, "tasks")


def test_back_pressure():
    """A group holds at most pull.max_in_hand messages: with that many
    handed out and not acknowledged nothing more comes; after 5 s its
    consumer pauses fetching (polling goes on); acknowledging lets the rest
    come, each task once."""
    topic = new_topic("full")
    due = submit(topic, 500, h.now_ms(), 1, "f")
    api = C.api()
    path = "/v1/topics/%s/next?group=g&max=100&wait_ms=3000" \
        "&visibility_ms=60000" % topic
    taken = []
    while len(taken) < MAX_IN_HAND:
        r = api.get(path)
        h.check_eq(r.status, 200, "next: %r" % r)
        h.check(r.json["tasks"], "nothing below pull.max_in_hand")
        taken += r.json["tasks"]
    h.check_eq(len(taken), MAX_IN_HAND, "taken")
    t0 = time.monotonic()
    paused = 'msg="pull group full: fetching paused until its clients ' \
        'acknowledge" group=g topic=%s' % topic
    while not C.manager.grep(paused):
        # Polls keep the group from closing as idle meanwhile.
        r = api.get(path.replace("wait_ms=3000", "wait_ms=500"))
        h.check_eq(r.json, {"tasks": []}, "more than pull.max_in_hand")
        h.check(time.monotonic() - t0 < 10, "the hold never became a "
                "pause")
    paused_after = time.monotonic() - t0
    r = api.get(path.replace("wait_ms=3000", "wait_ms=1000"))
    h.check_eq(r.json, {"tasks": []}, "nothing while paused")
    r = api.post("/v1/topics/%s/ack" % topic,
                 {"group": "g", "receipts": [t["receipt"] for t in taken]})
    h.check_eq(r.json["acked"], MAX_IN_HAND, "ack")
    while len(taken) < 500:
        r = api.get(path)
        got = r.json["tasks"]
        h.check(got, "the rest after the acknowledgement (%d of 500)"
                % len(taken))
        taken += got
        api.post("/v1/topics/%s/ack" % topic,
                 {"group": "g", "receipts": [t["receipt"] for t in got]})
    api.close()
    ids = [t["id"] for t in taken]
    h.check_eq(sorted(set(ids)), sorted(due), "every task")
    h.check_eq(len(ids), 500, "each once")
    h.log("%d held, nothing more; paused %.1f s later; all 500 once the "
          "first were acknowledged" % (MAX_IN_HAND, paused_after))


def test_never_before_due():
    """A message whose prophet-due-at is ahead of the manager's clock (a
    worker's clock ahead; produced here with kcat) is held until then."""
    topic = new_topic("early")
    api = h.Api(C.manager_addr, timeout=20)
    # Open the group first: the message must reach the manager before its
    # due time for it to be held (a group still joining under the
    # sanitizers took 2 s, and the message arrived already due).
    r = api.get("/v1/topics/%s/next?group=g&wait_ms=0" % topic)
    h.check_eq(r.status, 200, "open the group: %r" % r)
    h.wait_until(lambda: C.manager.grep("pull group assigned partitions"
                                        "\" group=g topic=%s " % topic),
                 20, what="the group's partitions assigned")
    # Read before producing: the message is counted when the manager reads
    # it, which can be before kcat has even returned.
    before = metric("prophet_pull_held_until_due_total")
    # 6 s ahead: kcat's start and the manager's fetch took more than 3 s
    # on a loaded CI machine once, and the message arrived already due
    # (handed out on time, but not held, so not counted).
    due = h.now_ms() + 6000
    p = subprocess.run(["kcat", "-P", "-b", C.brokers, "-t", C.topic(topic),
                        "-H", "prophet-id=early-1",
                        "-H", "prophet-due-at=%d" % due, "-k", "early-1"],
                       input=b"soon", capture_output=True, timeout=30)
    h.check_eq(p.returncode, 0, "kcat: %r" % p.stderr)
    got = []
    t0 = h.now_ms()
    while not got and h.now_ms() - t0 < 14000:
        r = api.get("/v1/topics/%s/next?group=g&wait_ms=5000" % topic)
        h.check_eq(r.status, 200, "next: %r" % r)
        got = r.json["tasks"]
        recv = h.now_ms()
    api.close()
    h.check(got and got[0]["id"] == "early-1", "got %r" % got)
    h.check(recv >= due, "handed out %d ms before prophet-due-at"
            % (due - recv))
    # Once, though the hand-out may find it 1 ms early by the wall clock
    # when the monotonic hold ends, and hold it again.
    held = metric("prophet_pull_held_until_due_total") - before
    h.check(held == 1, "prophet_pull_held_until_due_total rose by %d" % held)
    h.check_eq((got[0]["body"], got[0]["key"], got[0]["due_at"]),
               ("soon", "early-1", due), "body, key, due_at")
    h.log("a message due 6 s ahead was handed out %d ms after its due time"
          % (recv - due))


def test_manager_restart_mid_stream():
    """Two clients consume 1,000 tasks due over 8 s; the manager is
    restarted (SIGTERM) in the middle: it answers the waiting polls at once
    and exits 0, the clients carry on with the new one, no task is lost,
    none is early."""
    topic = new_topic("restart")
    due = submit(topic, 1000, h.now_ms() + 1000, 8000, "r")
    stop = threading.Event()
    ps = [Puller(topic, "workers", stop, max_tasks=20) for _ in range(2)]
    for p in ps:
        p.start()
    h.wait_until(lambda: sum(len(p.got) for p in ps) >= 300, 20, 0.05,
                 "300 tasks handed out")
    # A long poll of an empty group, waiting when SIGTERM comes.
    empty = new_topic("restart-empty")
    waiter = {}

    def wait_empty():
        a = h.Api(C.manager_addr, timeout=20)
        try:
            t = time.monotonic()
            r = a.get("/v1/topics/%s/next?group=w&wait_ms=%d"
                      % (empty, MAX_WAIT_MS))
            waiter["status"], waiter["json"] = r.status, r.json
        except Exception as e:
            waiter["error"] = repr(e)
        waiter["took"] = time.monotonic() - t
        a.close()
    wt = threading.Thread(target=wait_empty)
    wt.start()
    time.sleep(0.5)
    at = sum(len(p.got) for p in ps)
    t_stop = time.monotonic()
    rc = C.manager.stop()
    stop_s = time.monotonic() - t_stop
    wt.join(10)
    h.check_eq(rc, 0, "the manager's exit code after SIGTERM")
    h.check_eq((waiter.get("status"), waiter.get("json")),
               (200, {"tasks": []}), "the poll waiting at SIGTERM: %r"
               % waiter)
    h.check(waiter["took"] < 0.5 + stop_s + 1,
            "the waiting poll took %.1f s" % waiter["took"])
    C.start_manager()
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        if {g[0] for p in ps for g in p.got} >= set(due):
            break
        time.sleep(0.1)
    time.sleep(1.5)
    stop.set()
    for p in ps:
        p.join(MAX_WAIT_MS / 1000 + 15)
    got = [g for p in ps for g in p.got]
    ids = [g[0] for g in got]
    problems = h.Problems()
    problems.check(set(ids) >= set(due), "lost: %d of 1000, e.g. %s"
                   % (len(set(due) - set(ids)),
                      sorted(set(due) - set(ids))[:5]))
    check_not_early(problems, got, due)
    dups = len(ids) - len(set(ids))
    # At-least-once: only what was handed out and not yet acknowledged
    # at the stop may come again.
    problems.check(dups <= 100, "%d duplicates" % dups)
    problems.raise_if_any("restart")
    h.log("restart after %d of 1000 tasks (stop took %.2f s, the waiting "
          "poll answered after %.2f s): none lost, %d duplicates"
          % (at, stop_s, waiter["took"], dups))


def test_two_managers_one_group():
    """Two managers serve one group (Kafka's rebalance splits the
    partitions), a client on each; one manager stops in the middle: its
    partitions move to the other, its client follows, and every task is
    handed out, none early, duplicates at most what was in flight."""
    topic = new_topic("duo")
    port = h.free_port()
    m2 = h.Proc("manager2", [h.MANAGER_BIN, "-c", C.conf_path, "--set",
                             "http.listen=127.0.0.1:%d" % port],
                os.path.join(C.dir, "manager2.log"))
    addr2 = "127.0.0.1:%d" % port
    m2.start()
    try:
        C._wait_http(m2, addr2, "/readyz", 60)
        line = 'msg="pull group assigned partitions" group=duo topic=%s' % topic

        def split():
            # Both members (kept open meanwhile), two partitions each.
            for addr in (C.manager_addr, addr2):
                a = h.Api(addr)
                r = a.get("/v1/topics/%s/next?group=duo" % topic)
                a.close()
                h.check_eq(r.status, 200, "open the group on %s: %r"
                           % (addr, r))
            return all(p.grep(line) and p.grep(line)[-1].endswith(
                "partitions=2") for p in (C.manager, m2))
        h.wait_until(split, 20, 0.3, "the group split over both")
        due = submit(topic, 600, h.now_ms() + 1000, 4000, "d")
        stop = threading.Event()
        pa = Puller(topic, "duo", stop, max_tasks=20)
        pb = Puller(topic, "duo", stop, max_tasks=20,
                    addrs=[addr2, C.manager_addr])
        pa.start()
        pb.start()
        h.wait_until(lambda: len(pb.got) >= 100 and len(pa.got) >= 100, 20,
                     0.05, "both managers handing out")
        rc = m2.stop()
        h.check_eq(rc, 0, "the second manager's exit code")
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            if {g[0] for p in (pa, pb) for g in p.got} >= set(due):
                break
            time.sleep(0.1)
        time.sleep(1.5)
        stop.set()
        pa.join(15)
        pb.join(15)
    finally:
        m2.stop()
    got = pa.got + pb.got
    ids = [g[0] for g in got]
    problems = h.Problems()
    problems.check(set(ids) >= set(due), "lost: %d of 600, e.g. %s"
                   % (len(set(due) - set(ids)),
                      sorted(set(due) - set(ids))[:5]))
    check_not_early(problems, got, due)
    dups = len(ids) - len(set(ids))
    problems.check(dups <= 60, "%d duplicates" % dups)
    last = C.manager.grep(line)[-1]
    problems.check(last.endswith("partitions=4"), "the first manager after "
                   "the second stopped: %s" % last)
    problems.raise_if_any("two managers")
    h.log("two managers: %d tasks to the client of the first, %d to the "
          "client of the second (then of the first), none lost, %d "
          "duplicates" % (len(pa.got), len(pb.got), dups))


def test_mykit_get():
    """mykit-delay's GET /get/{topic}: the job pushed with /push comes back
    in mykit's answer shape, byte for byte; it is handed out once (an
    acknowledgement, as mykit-delay marks a fetched job consumed); an empty
    topic answers data null after pull.max_wait_ms; HEAD takes nothing;
    errors are mykit's failures."""
    topic = new_topic("ces")
    created = h.now_ms()
    api = C.api()
    r = api.post("/push", {"body": "{hello world}", "delay": 300, "id": "20",
                           "status": 0, "topic": topic, "subtopic": "sub",
                           "ttl": 12, "bizKey": "biz",
                           "createTime": created})
    h.check_eq(r.data, b'{"success":true,"data":"20","code":200}\n',
               "the push answer")
    r = api.request("HEAD", "/get/" + topic)
    h.check_eq((r.status, r.data), (200, b""), "HEAD /get")
    t0 = h.now_ms()
    r = api.get("/get/" + topic)
    recv = h.now_ms()
    want = ('{"success":true,"data":{"bizKey":"biz","body":"{hello world}",'
            '"createTime":%d,"delay":0,"id":"20","status":2,'
            '"subtopic":"sub","topic":"%s","ttl":0},"code":200}\n'
            % (created + 300, topic)).encode()
    h.check_eq(r.data, want, "the /get answer, byte for byte")
    h.check_eq(r.headers.get("Content-Type"), "application/json",
               "content type")
    h.check(recv >= created + 300, "handed out before its due time")
    t0 = time.monotonic()
    r = api.get("/get/" + topic)
    took = time.monotonic() - t0
    h.check_eq(r.data, b'{"success":true,"data":null,"code":200}\n',
               "the empty answer")
    h.check(MAX_WAIT_MS / 1000 - 0.2 <= took <= MAX_WAIT_MS / 1000 + 1.5,
            "the empty answer after %.2f s (pull.max_wait_ms %d)"
            % (took, MAX_WAIT_MS))
    r = api.get("/get/no%20topic")
    h.check_eq((r.status, r.json["success"], r.json["code"]),
               (200, False, 500), "a bad topic: %r" % r)
    h.check(set(r.json) == {"success", "message", "code"}, "failure shape")
    r = api.post("/get/" + topic, {})
    h.check_eq((r.status, r.json.get("code")), (405, 405), "POST /get")
    api.close()
    # A native group on the same topic still sees the job: groups are
    # independent.
    a = C.api()
    r = a.get("/v1/topics/%s/next?group=native&wait_ms=5000" % topic)
    a.close()
    h.check_eq([t["id"] for t in r.json["tasks"]], ["20"], "native group")
    h.check_eq(r.json["tasks"][0]["headers"].get("mykit-subtopic"), "sub",
               "the mykit-subtopic header")


def test_limits_and_long_polls():
    """Long polls end on time (200, no tasks) and do not hold the
    connection limit hostage: with pull.max_waiting polls waiting, one more
    gets 429 at once, connections up to http.max_connections are made room
    for, and an ordinary client is still served; a poll whose client went
    away is freed within a second or two; more groups than pull.max_groups
    get 429."""
    topic = new_topic("idle")
    api = C.api()
    r = api.get("/v1/topics/%s/next?group=lp" % topic)
    h.check_eq(r.json, {"tasks": []}, "wait_ms=0 answers at once")
    api.close()
    results = [None] * MAX_WAITING
    wait_s = 4

    def poll(i):
        a = h.Api(C.manager_addr, timeout=30)
        t = time.monotonic()
        try:
            r = a.get("/v1/topics/%s/next?group=lp&wait_ms=%d"
                      % (topic, wait_s * 1000))
            results[i] = (r.status, r.json, time.monotonic() - t)
        except Exception as e:
            results[i] = ("error", repr(e), time.monotonic() - t)
        a.close()
    ts = [threading.Thread(target=poll, args=(i,)) for i in range(MAX_WAITING)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    h.wait_until(lambda: metric("prophet_pull_waiting_requests") ==
                 MAX_WAITING, 5, 0.05, "%d polls waiting" % MAX_WAITING)
    # One more: refused at once.
    a = C.api()
    t = time.monotonic()
    r = a.get("/v1/topics/%s/next?group=lp&wait_ms=3000" % topic)
    h.check_eq((r.status, r.json["error"]["code"]), (429, "too_many_waiting"),
               "the poll beyond pull.max_waiting: %r" % r)
    h.check(time.monotonic() - t < 1, "429 took %.2f s" % (time.monotonic()
                                                         - t))
    r = a.get("/get/" + topic)
    h.check_eq((r.status, r.json), (429, {
        "success": False, "code": 429,
        "message": r.json.get("message")}), "mykit's /get beyond it")
    a.close()
    # Idle connections up to (and past) the limit: the gate closes idle
    # ones to make room; the waiting polls are in service and stay.
    host, port = C.manager_addr.rsplit(":", 1)
    idle = []
    for _ in range(MAX_CONNECTIONS):
        try:
            idle.append(socket.create_connection((host, int(port)),
                                                 timeout=5))
        except OSError:
            break
    t = time.monotonic()
    a = h.Api(C.manager_addr, timeout=10)
    r = a.post("/v1/tasks", {"topic": topic, "body": "x",
                             "delay_ms": 3600000})
    served = time.monotonic() - t
    a.close()
    h.check_eq(r.status, 201, "an ordinary submission at the limit: %r" % r)
    h.check(served < 3, "an ordinary client waited %.2f s" % served)
    for s in idle:
        s.close()
    for t in ts:
        t.join(wait_s + 10)
    problems = h.Problems()
    for i, res in enumerate(results):
        problems.check(res is not None and res[0] == 200 and
                       res[1] == {"tasks": []}, "poll %d: %r" % (i, res))
        if res is not None:
            problems.check(wait_s - 0.1 <= res[2] <= wait_s + 1.5,
                           "poll %d ended after %.2f s, wait_ms %d"
                           % (i, res[2], wait_s * 1000))
    problems.raise_if_any("long polls")
    h.log("%d polls ended after %.2f-%.2f s (wait %d s); the next got 429; "
          "a submission beside them and %d idle connections was served in "
          "%.2f s" % (MAX_WAITING, min(x[2] for x in results),
                      max(x[2] for x in results), wait_s, len(idle), served))
    # A client that goes away while waiting frees its place.
    gone = metric("prophet_pull_clients_gone_total")
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(("GET /v1/topics/%s/next?group=lp&wait_ms=%d HTTP/1.1\r\n"
               "Host: x\r\n\r\n" % (topic, MAX_WAIT_MS)).encode())
    h.wait_until(lambda: metric("prophet_pull_waiting_requests") == 1, 3,
                 0.05, "the raw poll waiting")
    s.close()
    h.wait_until(lambda: metric("prophet_pull_waiting_requests") == 0, 3,
                 0.1, "the poll of a gone client freed")
    h.check_eq(metric("prophet_pull_clients_gone_total") - gone, 1,
               "prophet_pull_clients_gone_total")
    # Groups: up to pull.max_groups at once (the earlier tests' groups
    # close after idle_group_s).
    h.wait_until(lambda: metric("prophet_pull_groups") == 0, IDLE_S + 5,
                 0.2, "earlier groups closed as idle")
    a = C.api()
    opened = metric("prophet_pull_groups")
    for i in range(int(MAX_GROUPS - opened)):
        r = a.get("/v1/topics/%s/next?group=many-%d" % (topic, i))
        h.check_eq(r.status, 200, "group %d: %r" % (i, r))
    r = a.get("/v1/topics/%s/next?group=one-too-many" % topic)
    h.check_eq((r.status, r.json["error"]["code"]), (429, "too_many_groups"),
               "a group beyond pull.max_groups: %r" % r)
    a.close()
    h.wait_until(lambda: metric("prophet_pull_groups") == MAX_GROUPS, 3,
                 0.1, "prophet_pull_groups %d" % MAX_GROUPS)
    h.log("%d groups open, the next refused 429" % MAX_GROUPS)


def test_bad_requests():
    """Parameters and acknowledgements that are not valid get 400 and
    change nothing."""
    topic = new_topic("bad")
    api = C.api()
    cases = [
        ("GET", "/v1/topics/%s/next" % topic, None, "missing_field",
         "group"),
        ("GET", "/v1/topics/%s/next?group=a%%20b" % topic, None,
         "invalid_value", "group"),
        ("GET", "/v1/topics/%s/next?group=g&max=0" % topic, None,
         "invalid_value", "max"),
        ("GET", "/v1/topics/%s/next?group=g&max=-1" % topic, None,
         "invalid_value", "max"),
        ("GET", "/v1/topics/%s/next?group=g&wait_ms=x" % topic, None,
         "invalid_value", "wait_ms"),
        ("GET", "/v1/topics/%s/next?group=g&visibility_ms=5" % topic, None,
         "invalid_value", "visibility_ms"),
        ("GET", "/v1/topics/%s/next?group=g&visibilty_ms=60000" % topic,
         None, "unknown_field", "visibilty_ms"),
        ("GET", "/v1/topics/a%%00b/next?group=g", None, "invalid_value",
         "topic"),
        ("POST", "/v1/topics/%s/ack" % topic, {"receipts": []},
         "missing_field", "group"),
        ("POST", "/v1/topics/%s/ack" % topic, {"group": "g"},
         "missing_field", "receipts"),
        ("POST", "/v1/topics/%s/ack" % topic,
         {"group": "g", "receipts": [1]}, "invalid_type", "receipts"),
        ("POST", "/v1/topics/%s/ack" % topic,
         {"group": "g", "receipts": [], "x": 1}, "unknown_field", "x"),
        ("POST", "/v1/topics/%s/ack" % topic, [], "invalid_type", None),
    ]
    problems = h.Problems()
    for m, path, body, code, field in cases:
        r = api.request(m, path, body)
        problems.check(r.status == 400 and r.json["error"]["code"] == code
                       and r.json["error"].get("field") == field,
                       "%s %s %r: %r" % (m, path, body, r))
    r = api.request("POST", "/v1/topics/%s/ack" % topic, "{}",
                    {"Content-Type": "text/plain"})
    problems.check(r.status == 415, "ack as text/plain: %r" % r)
    r = api.request("GET", "/v1/topics/%s/next?group=g" % topic, None,
                    {"Origin": "http://evil.example"})
    problems.check(r.status == 403 and r.json["error"]["code"] ==
                   "cross_site", "next from another site's page: %r" % r)
    api.close()
    problems.raise_if_any("bad requests")


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup, dump)
