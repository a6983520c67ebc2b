#!/usr/bin/python3
"""Durability under faults (CONTRACT guarantees 1, 2, 4, 5).

Every test has its own isolated cluster. Faults that stop a server use a
PRIVATE server (tests/integ/servers.py) - the shared dev-cluster servers are
never stopped; ZooKeeper and whatever is not faulted stay shared.

  far_future        horizon 15 s: far tasks (2 h, 1 d, 1 y) only in the DB
  cluster_stopped   manager + workers SIGTERMed for 20 s: overdue tasks fire
                    at once after the restart, tasks past their ttl expire
  redis_killed      private Redis SIGKILLed, restarted EMPTY mid-stream:
                    slot indexes rebuilt from the DB, nothing lost
  horizon_loader    tasks submitted beyond the manager's indexing window
                    (horizon + 60 s) reach Redis only through the worker's
                    loader, and fire on time (their cluster was started by
                    far_future and kept running meanwhile)
  redis_blip        private Redis SIGSTOPped 1.4 s (just past redis.timeout_ms
                    = 1000: every client drops and re-opens its connection,
                    too short for DB mode): nothing lost
  redis_stopped     private Redis stopped (SIGTERM) for 30 s: DB mode
  redis_hung        private Redis SIGSTOPped (a hung server, redis.timeout_ms
                    = 1000) for 30 s: DB mode
  redis_full        private Redis at maxmemory (noeviction) for 10 s, a worker
                    killed meanwhile: index writes and the survivor's fences
                    refused, API accepts, all fire once Redis has room
  kafka_stopped     private Kafka broker stopped for 30 s: tasks wait
  kafka_outage_ttl  tasks with ttl_ms 5 s due during that outage: expired,
                    not published late
  kafka_hung        private Kafka broker SIGSTOPped for 12 s: the worker's
                    /readyz 503 kafka:false and 'kafka not acknowledging'
                    within seconds, back after it, nothing lost
  mariadb_stopped   private MariaDB stopped for 20 s: API 503, nothing lost
  mariadb_hung      private MariaDB SIGSTOPped for 12 s (a hung server, its
                    connections stay up): /readyz 503 db:false and 'database
                    not answering' within seconds, back after it, nothing lost
  restore           FLUSHDB + POST /v1/admin/restore; an expired task revived
                    with `prophetctl restore --id`; 409 for a delivered one

Each test keeps a ledger of the ids answered 2xx against what Kafka holds and
prints
  # <fault>: accepted=A delivered=D lost=L duplicates=X lateness_p99_ms=P
    recovery_ms=R
accepted: ids answered 2xx; delivered: of those, ids seen in Kafka (tasks
that must not fire - expired, or due later - are excluded; lost = accepted
ids that should have fired and never reached Kafka); duplicates: Kafka
messages beyond the first per id; lateness: first arrival at the test's
Kafka consumer minus due_at (so it includes ~20-50 ms of consumer polling),
p99 over the delivered ids; recovery_ms: from the end of the fault (the
server answering again / the cluster started again) until the last task
that was due by then reached Kafka ("-" when nothing was overdue or there
is no fault end). Extra figures (failover, rebuild, switch-back times) are
logged on the lines after it.

Outage lengths: PROPHET_DURABILITY_OUTAGE_S (default 30: Redis stop, Kafka
stop), PROPHET_DURABILITY_SHORT_OUTAGE_S (default 20: cluster stop, MariaDB
stop), PROPHET_DURABILITY_HUNG_S (default 30: Redis SIGSTOP).
"""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import servers as s  # noqa: E402

OUTAGE_S = float(os.environ.get("PROPHET_DURABILITY_OUTAGE_S") or 30)
SHORT_OUTAGE_S = float(os.environ.get("PROPHET_DURABILITY_SHORT_OUTAGE_S")
                       or 20)
HUNG_S = float(os.environ.get("PROPHET_DURABILITY_HUNG_S") or 30)
# test_durability_eos.py runs some of these with kafka.exactly_once on and
# a read_committed reader: there, every fault must have 0 duplicates.
EOS = os.environ.get("PROPHET_DURABILITY_EOS") == "1"
READER_ARGS = ["-X", "isolation.level=read_committed"] if EOS else []
BLIP_S = 1.4  # Redis hang just longer than redis.timeout_ms (1 s)
BLIP_LEASE_MS = 5000
TOPIC = "dur"
RNG = random.Random(int(os.environ.get("PROPHET_INTEG_SEED") or time.time()))
PROPHETCTL = os.path.join(h.BUILDDIR, "prophetctl")

CLUSTERS = []   # open clusters (logs dumped when a test fails)
PRIVATE = {}    # kind -> private server shared by the tests of this file
FAR = {}        # state handed from far_future to horizon_loader
KAFKA_TTL = {}  # handed from kafka_stopped to kafka_outage_ttl


# ------------------------------------------------------------- helpers ---

def fmt(v):
    return "-" if v is None else "%d" % v


def open_cluster(name, workers=1, conf=None, **private):
    if EOS:
        conf = dict(conf or {}, **{"kafka.exactly_once": "true"})
        name += "-eos"
    c = s.Cluster(workers=workers, conf=conf, name=name, **private).open()
    CLUSTERS.append(c)
    return c


def close_cluster(c, failed):
    if c in CLUSTERS:
        CLUSTERS.remove(c)
    c.close(failed=failed)


class cluster_for:
    """with cluster_for("name", ...) as c: a started cluster and a reader
    of its topic, closed (logs kept on failure) at the end."""

    def __init__(self, name, workers=1, conf=None, **private):
        self.args = (name, workers, conf, private)
        self.c = None

    def __enter__(self):
        name, workers, conf, private = self.args
        self.c = open_cluster(name, workers, conf, **private)
        self.c.start()
        h.create_topics(self.c.brokers, [self.c.topic(TOPIC)])
        self.c.rd = self.c.reader([TOPIC], kcat_args=READER_ARGS)
        warm_reader(self.c)
        return self.c

    def __exit__(self, etype, evalue, tb):
        if etype is None:
            try:
                sanitizer_check(self.c)
            except h.TestFailure:
                close_cluster(self.c, True)
                raise
        else:
            self.c.dump_logs(25)
        close_cluster(self.c, etype is not None)
        return False


SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                   "runtime error:", "WARNING: ThreadSanitizer")


def sanitizer_check(c):
    """Fails on sanitizer reports in the daemons' logs (sanitizer builds)."""
    found = []
    for pr in [c.manager] + c.workers:
        for mark in SANITIZER_MARKS:
            found += ["%s: %s" % (pr.name, line) for line in pr.grep(mark)]
    if found:
        raise h.TestFailure("sanitizer reports in the daemon logs:\n  "
                            + "\n  ".join(found[:10]))


def warm_reader(c, timeout=20):
    """Publishes a probe (no prophet-id) and waits until the test's reader
    receives it, so that consumer start-up does not count as lateness."""
    t0 = time.monotonic()
    n0 = c.rd.count()
    while True:
        subprocess.run(["kcat", "-P", "-b", c.brokers, "-t", c.topic(TOPIC),
                        "-k", "probe"], input=b"probe",
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=20)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if c.rd.count() > n0:
                return time.monotonic() - t0
            time.sleep(0.05)
        if time.monotonic() - t0 > timeout:
            raise h.TestFailure("the Kafka reader did not receive a probe "
                                "within %ds" % timeout)


def private(kind):
    """The private server of a kind, started (asynchronously started ones
    are waited for)."""
    srv = PRIVATE.get(kind)
    if srv is None:
        srv = {"kafka": s.PrivateKafka, "mariadb": s.PrivateMariaDB,
               "redis": s.PrivateRedis}[kind]()
        PRIVATE[kind] = srv
        srv.start_async()
    return srv.wait_ready()


def worker_sum(c, name):
    total = 0.0
    for w in c.workers:
        if w.running():
            total += h.metrics(w.addr).get(name, 0.0)
    return total


log_ts_ms = h.log_ts_ms


def log_lines(c, needle, since_ms=0, procs=None):
    """(ts_ms, line) of log lines containing needle, at or after since_ms."""
    out = []
    for p in procs or c.workers:
        for line in p.grep(needle):
            t = log_ts_ms(line)
            if t is not None and t >= since_ms:
                out.append((t, line))
    out.sort()
    return out


def kv(line, key):
    """Value of key=value in a log line."""
    part = line.split(" %s=" % key, 1)
    if len(part) < 2:
        return None
    v = part[1]
    if v.startswith('"'):
        return v[1:].split('"', 1)[0]
    return v.split(" ", 1)[0]


def task(tid, due_at, ttl_ms=None, body=None):
    t = {"id": tid, "topic": TOPIC, "due_at": int(due_at),
         "body": body if body is not None else "body of %s" % tid}
    if ttl_ms:
        t["ttl_ms"] = int(ttl_ms)
    return t


# -------------------------------------------------------------- ledger ---

class Ledger:
    """Ids answered 2xx (with their due time) against Kafka output."""

    def __init__(self, fault, c):
        self.fault = fault
        self.c = c
        self.lock = threading.Lock()
        self.accepted = {}     # id -> due_at (answered)
        self.sent_at = {}      # id -> ms the answer came
        self.refused = {}      # id -> (status, error code)
        self.unknown = {}      # id -> exception text (no answer)
        self.must_not_fire = set()   # expired by design, or due far later
        # either fires (delivered) or expires, not both: due about when
        # the fault began (tests on a loaded machine)
        self.may_fire = set()
        self.answers = []      # (ms, status, code, latency ms)
        if not hasattr(c, "ledgers"):
            c.ledgers = []     # every ledger of the cluster (stray check)
        c.ledgers.append(self)

    def post(self, api, t):
        """Submits one task, records the outcome; returns the response
        (None when there was no answer)."""
        t0 = h.now_ms()
        try:
            r = api.post("/v1/tasks", t)
        except Exception as e:  # no answer: outcome unknown
            with self.lock:
                self.unknown[t["id"]] = repr(e)
                self.answers.append((t0, None, None, h.now_ms() - t0))
            api.close()
            return None
        t1 = h.now_ms()
        code = None
        if r.json and isinstance(r.json.get("error"), dict):
            code = r.json["error"].get("code")
        with self.lock:
            self.answers.append((t0, r.status, code, t1 - t0))
            if r.status in (200, 201) and r.json:
                self.accepted[t["id"]] = int(r.json["due_at"])
                self.sent_at[t["id"]] = t1
            else:
                self.refused[t["id"]] = (r.status, code)
        return r

    def post_all(self, tasks, threads=4):
        """Submits a list of tasks now (a few threads); all must be 201."""
        res = [None] * len(tasks)

        def run(k):
            api = self.c.api()
            try:
                for i in range(k, len(tasks), threads):
                    res[i] = self.post(api, tasks[i])
            finally:
                api.close()
        ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        bad = [(t["id"], r) for t, r in zip(tasks, res)
               if r is None or r.status != 201]
        h.check(not bad, "%d of %d submissions not 201, e.g. %r"
                % (len(bad), len(tasks), bad[:3]))

    def expected(self):
        return [i for i in self.accepted if i not in self.must_not_fire
                and i not in self.may_fire]

    def messages(self):
        rd = self.c.rd
        with rd.cond:
            return {i: list(rd.by_id.get(i, [])) for i in self.accepted}

    def wait_delivered(self, timeout, settle=1.0, ids=None):
        ids = list(ids if ids is not None else self.expected())
        return self.c.rd.wait_for(ids, timeout, settle=settle)

    def check_all_fired(self, p, grace_s, settle=2.0, what="task(s)",
                        suffix=""):
        """Waits until the last accepted task is grace_s past due (or all
        arrived), then checks that every expected task was published."""
        missing = self.wait_delivered(
            timeout=(max(self.accepted.values()) - h.now_ms()) / 1000.0
            + grace_s, settle=settle)
        p.check(not missing, "%d %s never fired%s: %s"
                % (len(missing), what, suffix, sorted(missing)[:8]))
        return missing

    def check_no_refusals(self, p, what="submissions not accepted"):
        p.check(not self.refused and not self.unknown,
                "%s: refused %s, unanswered %s"
                % (what, list(self.refused.items())[:3],
                   list(self.unknown.items())[:3]))

    def check_output(self, p):
        """Never early, intact, not published if it must not fire."""
        for tid, ms in self.messages().items():
            due = self.accepted[tid]
            if ms and tid in self.must_not_fire:
                p.add("%s published (%d times) although it must not fire "
                      "(expired or due later)" % (tid, len(ms)))
            for m in ms:
                fired = m.hdr.get("prophet-fired-at")
                p.check(fired is not None and fired.isdigit() and
                        int(fired) >= due,
                        "%s: fired EARLY or no prophet-fired-at: %r < due %d"
                        % (tid, fired, due))
                p.check(m.ts is not None and m.ts >= due,
                        "%s: Kafka timestamp %s < due %d" % (tid, m.ts, due))
                p.check(m.payload == "body of %s" % tid,
                        "%s: payload %r" % (tid, (m.payload or "")[:60]))
        known = set()
        for led in self.c.ledgers:
            known.update(led.accepted)
        stray = [m.id for m in self.c.rd.messages
                 if m.id is not None and m.id not in known]
        if stray:
            h.log("%s: %d Kafka message(s) of ids not answered 2xx (refused "
                  "or unanswered submissions that were stored anyway): %s"
                  % (self.fault, len(stray), sorted(set(stray))[:5]))

    def figures(self, recovery_ms=None):
        msgs = self.messages()
        exp = self.expected()
        delivered = [i for i in exp if msgs[i]]
        lost = [i for i in exp if not msgs[i]]
        dups = sum(max(0, len(msgs[i]) - 1) for i in self.accepted)
        late = [min(m.recv_ms for m in msgs[i]) - self.accepted[i]
                for i in delivered]
        fired = [min(int(m.hdr.get("prophet-fired-at", 0)) for m in msgs[i])
                 - self.accepted[i] for i in delivered]
        p99 = h.percentile(late, 99) if late else None
        print("# %s: accepted=%d delivered=%d lost=%d duplicates=%d "
              "lateness_p99_ms=%s recovery_ms=%s"
              % (self.fault, len(self.accepted), len(delivered), len(lost),
                 dups, fmt(p99), fmt(recovery_ms)), flush=True)
        if late:
            h.log("%s detail: consumer lateness p50=%d p99=%d max=%d; "
                  "prophet-fired-at - due p50=%d p99=%d max=%d; not to fire "
                  "%d, refused %d, unanswered %d"
                  % (self.fault, h.percentile(late, 50), p99, max(late),
                     h.percentile(fired, 50), h.percentile(fired, 99),
                     max(fired), len(self.must_not_fire), len(self.refused),
                     len(self.unknown)))
        return {"lost": lost, "dups": dups, "late": late, "p99": p99}

    def recovery_ms(self, back_ms):
        """From back_ms until the last task due before it reached Kafka."""
        msgs = self.messages()
        arr = [min(m.recv_ms for m in msgs[i]) for i in self.expected()
               if self.accepted[i] <= back_ms and msgs[i]]
        if not arr:
            return None
        return max(0, max(arr) - back_ms)

    def lateness_between(self, t0, t1):
        """Consumer lateness of delivered tasks due in [t0, t1)."""
        msgs = self.messages()
        return [min(m.recv_ms for m in msgs[i]) - d
                for i, d in self.accepted.items()
                if t0 <= d < t1 and msgs[i] and i not in self.must_not_fire]

    def db_statuses(self):
        rows = self.c.mysql("SELECT id, status FROM tasks")
        return {r[0]: r[1] for r in rows}

    def wait_db_converged(self, timeout, expired=()):
        """Every accepted task delivered in the DB (expired ones expired,
        far ones scheduled); returns the seconds it took."""
        t0 = time.monotonic()
        expired = set(expired)
        last = None
        while True:
            try:
                st = self.db_statuses()
                bad = {}
                for i in self.accepted:
                    want = ("expired" if i in expired else
                            "scheduled" if i in self.must_not_fire
                            else "delivered")
                    if i in self.may_fire and st.get(i) in ("delivered",
                                                            "expired"):
                        continue
                    if st.get(i) != want:
                        bad[i] = (st.get(i), want)
                if not bad:
                    return time.monotonic() - t0
                last = bad
            except h.TestFailure as e:
                last = str(e)
            if time.monotonic() - t0 > timeout:
                summary = last
                if isinstance(last, dict):
                    agg = {}
                    for got, want in last.values():
                        agg["%s (want %s)" % (got, want)] = agg.get(
                            "%s (want %s)" % (got, want), 0) + 1
                    summary = "%s, e.g. %s" % (agg, sorted(last)[:5])
                raise h.TestFailure("%s: DB statuses did not converge in "
                                    "%.0fs: %s" % (self.fault, timeout,
                                                   summary))
            time.sleep(0.5)


def fired_lateness(led):
    """prophet-fired-at - due of the first message of each delivered id."""
    out = []
    for i, ms in led.messages().items():
        if ms:
            out.append(min(int(m.hdr.get("prophet-fired-at", 0)) for m in ms)
                       - led.accepted[i])
    return out


class Stream:
    """Submits tasks at a steady pace from a background thread, each due
    delay_lo..delay_hi ms after its submission."""

    def __init__(self, ledger, prefix, rate, delay_lo, delay_hi,
                 timeout=10, ttl_ms=None):
        self.ledger = ledger
        self.prefix = prefix
        self.rate = rate
        self.delay = (delay_lo, delay_hi)
        self.timeout = timeout
        self.ttl_ms = ttl_ms
        self.n = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error = None

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        api = h.Api(self.ledger.c.manager_addr, timeout=self.timeout)
        t0 = time.monotonic()
        try:
            while not self.stopping.is_set():
                wait = t0 + self.n / self.rate - time.monotonic()
                if wait > 0 and self.stopping.wait(wait):
                    break
                tid = "%s-%05d" % (self.prefix, self.n)
                self.n += 1
                self.ledger.post(api, task(
                    tid, h.now_ms() + RNG.randint(*self.delay),
                    ttl_ms=self.ttl_ms))
        except Exception as e:
            self.error = e
        finally:
            api.close()

    def stop(self):
        self.stopping.set()
        self.thread.join(60)
        if self.error is not None:
            raise h.TestFailure("stream %s failed: %r"
                                % (self.prefix, self.error))


def in_redis(c, ledger, ids):
    """The ids present in their slot's due ZSET."""
    ids = list(ids)
    if not ids:
        return []
    slot = {r[0]: int(r[1]) for r in c.mysql(
        "SELECT id, slot FROM tasks WHERE id IN (%s)"
        % ",".join("'%s'" % i for i in ids))}
    r = c.redis()
    try:
        return [i for i in ids if i in slot and r.cmd(
            "ZSCORE", "{prophet:%d}:due" % slot[i], i) is not None]
    finally:
        r.close()


def redis_where(c, ids):
    """Where ids are in the test's Redis: 'due', 'inflight', 'payload
    only' or 'absent'."""
    ids = list(ids)
    slot = {r[0]: int(r[1]) for r in c.mysql(
        "SELECT id, slot FROM tasks WHERE id IN (%s)"
        % ",".join("'%s'" % i for i in ids))} if ids else {}
    r = c.redis()
    out = {}
    try:
        for i in ids:
            n = slot.get(i)
            if n is None:
                k = "not in the DB"
            elif r.cmd("ZSCORE", "{prophet:%d}:due" % n, i) is not None:
                k = "due"
            elif r.cmd("ZSCORE", "{prophet:%d}:inflight" % n, i) is not None:
                k = "inflight"
            elif r.cmd("HEXISTS", "{prophet:%d}:task" % n, i):
                k = "payload only"
            else:
                k = "absent"
            out.setdefault(k, []).append(i)
    finally:
        r.close()
    return out


def redis_due_members(c):
    """Every id in any slot's due ZSET (test's Redis db)."""
    r = c.redis()
    try:
        out = set()
        for n in range(c.slots):
            for m in r.cmd("ZRANGE", "{prophet:%d}:due" % n, 0, -1) or []:
                out.add(m.decode())
        return out
    finally:
        r.close()


def finish(p, ledger, figs, what):
    p.check(not figs["lost"], "%d task(s) LOST, e.g. %s"
            % (len(figs["lost"]), sorted(figs["lost"])[:10]))
    if EOS:
        p.check(figs["dups"] == 0, "exactly-once: %d duplicate(s) (want 0)"
                % figs["dups"])
    p.raise_if_any(what)


# ------------------------------------------------------------------ tests ---

HORIZON_MS = 15000
INDEX_WINDOW_MS = HORIZON_MS + 60000  # the manager indexes due < now + this


def test_far_future_horizon():
    """task.horizon_ms=15000: far tasks stay in the DB only; near ones fire
    on time; tasks just beyond the manager's indexing window are left for
    the loader (checked by test_horizon_loader)."""
    c = open_cluster("dur-far", workers=1,
                     conf={"task.horizon_ms": HORIZON_MS})
    FAR["c"] = c
    c.start()
    h.create_topics(c.brokers, [c.topic(TOPIC)])
    c.rd = c.reader([TOPIC], kcat_args=READER_ARGS)
    warm_reader(c)
    led = Ledger("far_future", c)
    FAR["ledger"] = led
    now = h.now_ms()
    near = [task("near-%03d" % i, now + 25000 + i * 50) for i in range(100)]
    # Beyond horizon + 60 s overlap: only the loader brings them to Redis.
    loader = [task("load-%03d" % i, now + INDEX_WINDOW_MS + 5000 + i * 30)
              for i in range(100)]
    far = []
    for label, ms in (("2h", 2 * 3600 * 1000), ("1d", 86400 * 1000),
                      ("1y", 365 * 86400 * 1000)):
        far += [task("far%s-%02d" % (label, i), now + ms + i)
                for i in range(10)]
    led.post_all(near + loader + far)
    far_ids = [t["id"] for t in far]
    load_ids = [t["id"] for t in loader]
    led.must_not_fire.update(far_ids)
    FAR["loader_ids"] = load_ids
    FAR["far_ids"] = far_ids

    p = h.Problems()
    got = in_redis(c, led, far_ids + load_ids)
    p.check(not got, "%d task(s) due beyond horizon + 60 s are in Redis "
            "right after submission: %s" % (len(got), got[:5]))
    near_in = len(in_redis(c, led, [t["id"] for t in near[:10]]))
    h.log("near tasks (due in 25 s, within horizon + 60 s overlap) in Redis "
          "right away: %d of 10 sampled" % near_in)
    st = led.db_statuses()
    bad = [i for i in far_ids + load_ids if st.get(i) != "scheduled"]
    p.check(not bad, "far tasks not scheduled in the DB: %s"
            % [(i, st.get(i)) for i in bad[:5]])
    p.raise_if_any("right after submission")

    missing = led.wait_delivered(
        timeout=(max(t["due_at"] for t in near) - h.now_ms()) / 1000.0 + 20,
        settle=1.0, ids=[t["id"] for t in near])
    p.check(not missing, "%d near task(s) never fired: %s"
            % (len(missing), missing[:5]))
    # The far ones: still only in the DB, scheduled, not published.
    members = redis_due_members(c)
    p.check(not (set(far_ids) & members), "far tasks reached Redis: %s"
            % sorted(set(far_ids) & members)[:5])
    st = led.db_statuses()
    bad = [i for i in far_ids if st.get(i) != "scheduled"]
    p.check(not bad, "far tasks not scheduled: %s"
            % [(i, st.get(i)) for i in bad[:5]])
    ptr = c.mysql("SELECT MIN(loaded_until), MAX(loaded_until), COUNT(*) "
                  "FROM slot_state")
    h.log("slot_state.loaded_until over %s slot(s): min %s max %s (now %d, "
          "now + horizon %d)" % (ptr[0][2], ptr[0][0], ptr[0][1], h.now_ms(),
                                 h.now_ms() + HORIZON_MS))
    if ptr and ptr[0][1] is not None:
        p.check(int(ptr[0][1]) < min(t["due_at"] for t in far),
                "loaded_until %s passed the far tasks' due times"
                % ptr[0][1])
        p.check(int(ptr[0][0]) > now,
                "loaded_until %s not advanced past the submission time %d"
                % (ptr[0][0], now))
    else:
        p.add("no slot_state rows (the loader never recorded a pointer)")
    near_led = Ledger("far_future", c)
    near_led.accepted = {i: d for i, d in led.accepted.items()
                         if not i.startswith("load-")}
    near_led.must_not_fire = set(far_ids)
    near_led.check_output(p)
    late = fired_lateness(near_led)
    if late:
        p.check(h.percentile(late, 99) < 1500, "near tasks fired late: "
                "prophet-fired-at - due p99 %d ms" % h.percentile(late, 99))
    figs = near_led.figures()
    finish(p, near_led, figs, "far-future tasks")


def test_cluster_stopped_ttl():
    """Manager and all workers SIGTERMed for SHORT_OUTAGE_S while tasks come
    due: after the restart every task without ttl (or with a ttl not yet
    passed) fires at once; those whose ttl passed become expired."""
    stop_s = SHORT_OUTAGE_S
    h.check(stop_s >= 10, "the cluster stop must last >= 10 s (ttl 5 s)")
    with cluster_for("dur-stop", workers=2) as c:
        led = Ledger("cluster_stopped", c)
        now = h.now_ms()
        # fire before the stop; submitted first, and timed: the other 400
        # must all be in before the stop (3 s ahead on a quiet machine, as
        # long as 8 times these 50 took, and 2 s, on a loaded one)
        led.post_all([task("pre-%03d" % i, now + 800 + i * 30)
                      for i in range(50)])
        t_pre = h.now_ms() - now
        stop_at = h.now_ms() + max(3000, 8 * t_pre + 2000)
        back_at = stop_at + int(stop_s * 1000)
        tasks, ttl5 = [], []
        for i in range(200):       # due while stopped, no ttl
            tasks.append(task("down-%03d" % i, stop_at + 1000 +
                              i * int((stop_s - 3) * 1000 / 200)))
        for i in range(50):        # due while stopped, ttl passes: expire
            t = task("ttl5-%03d" % i, stop_at + 1000 +
                     i * int((stop_s - 8) * 1000 / 50), ttl_ms=5000)
            tasks.append(t)
            ttl5.append(t)
        for i in range(50):        # due while stopped, ttl long enough
            tasks.append(task("ttl60-%03d" % i, stop_at + 1000 + i * 100,
                              ttl_ms=60000 + int(stop_s * 1000)))
        for i in range(50):        # due after the restart
            tasks.append(task("post-%03d" % i, back_at + 4000 + i * 20))
        led.post_all(tasks)
        time.sleep(max(0, (stop_at - h.now_ms()) / 1000.0))
        t_stop = h.now_ms()
        # On a loaded machine the submissions can run past stop_at: a ttl
        # task due before the stop (with a margin for the SIGTERMs) was not
        # due while stopped: it fires or expires, and is checked as such.
        expire = [t["id"] for t in ttl5 if t["due_at"] > t_stop + 500]
        led.may_fire.update(t["id"] for t in ttl5
                            if t["due_at"] <= t_stop + 500)
        if led.may_fire:
            h.log("the submissions ran %d ms past the planned stop: %d ttl "
                  "task(s) came due before it or within 0.5 s of it (fire "
                  "or expire)" % (t_stop - stop_at, len(led.may_fire)))
        h.check(len(expire) >= 25, "only %d of %d ttl tasks due while "
                "stopped: the submissions took too long" % (len(expire),
                                                             len(ttl5)))
        led.must_not_fire.update(expire)
        procs = [c.manager] + c.workers
        for pr in procs:
            pr.signal(signal.SIGTERM)
        rcs = [pr.wait(30) for pr in procs]
        h.log("cluster stopped in %d ms (exit codes %s)"
              % (h.now_ms() - t_stop, rcs))
        p = h.Problems()
        p.check(all(rc == 0 for rc in rcs), "exit codes after SIGTERM: %s"
                % rcs)
        time.sleep(max(0, (t_stop + stop_s * 1000 - h.now_ms()) / 1000.0))
        t_back = h.now_ms()
        c.start()
        h.log("cluster restarted: ready %d ms after the start (stopped %.1f "
              "s)" % (h.now_ms() - t_back, (t_back - t_stop) / 1000.0))
        led.check_all_fired(p, 30, suffix=" after the restart")
        led.check_output(p)
        rec = led.recovery_ms(t_back)
        figs = led.figures(rec)
        conv = led.wait_db_converged(30, expired=expire)
        h.log("cluster_stopped: DB statuses converged %.1f s after the "
              "last delivery; %d task(s) expired as designed"
              % (conv, len(expire)))
        api = c.api()
        for tid in expire[:3]:
            r = api.get("/v1/tasks/" + tid)
            p.check(r.status == 200 and r.json and
                    r.json.get("status") == "expired",
                    "GET %s: %r (want status expired)" % (tid, r))
        api.close()
        exp_total = worker_sum(c, "prophet_tasks_expired_total")
        p.check(exp_total >= len(expire), "prophet_tasks_expired_total %s "
                "< %d" % (exp_total, len(expire)))
        finish(p, led, figs, "cluster stop")


def rebuild_report(c, fault, since_ms):
    """Logs what the workers' rebuilds after since_ms did; returns
    (slots rebuilt, tasks, max duration ms, last rebuilt at ms)."""
    lines = log_lines(c, "slot index rebuilt", since_ms)
    slots = set()
    tasks = 0
    durs = []
    for _, line in lines:
        slots.add(kv(line, "slot"))
        tasks += int(kv(line, "tasks") or 0)
        durs.append(float(kv(line, "duration_ms") or 0))
    loss = log_lines(c, "redis data loss detected", since_ms)
    missing = log_lines(c, "slot index missing", since_ms)
    fb_on = log_lines(c, "redis fallback on", since_ms)
    fb_off = log_lines(c, "redis fallback off", since_ms)
    m = {}
    for w in c.workers:
        for k, v in h.metrics(w.addr).items():
            if k.startswith("prophet_redis_rebuild") or k in (
                    "prophet_db_mode_slots", "prophet_db_claimed_total"):
                m[k] = m.get(k, 0) + v
    h.log("%s: %d rebuild(s) of %d slot(s), %d task(s) re-indexed, "
          "duration_ms max %d sum %d; 'redis data loss detected' x%d, "
          "'slot index missing' x%d, 'redis fallback on' x%d, 'off' x%d; "
          "metrics %s" % (fault, len(lines), len(slots), tasks,
                          max(durs) if durs else 0, sum(durs), len(loss),
                          len(missing), len(fb_on), len(fb_off),
                          json.dumps(m, sort_keys=True)))
    return (len(slots), tasks, max(durs) if durs else None,
            lines[-1][0] if lines else None)


def test_redis_killed_restarted_empty():
    """Private Redis SIGKILLed mid-stream and restarted at once without
    data: the owners notice the lost index and rebuild it from the DB."""
    rd = s.PrivateRedis().start()
    failed = True
    try:
        with cluster_for("dur-rkill", workers=2, redis=rd,
                         conf={"redis.timeout_ms": 1000}) as c:
            led = Ledger("redis_killed", c)
            st = Stream(led, "rk", rate=100, delay_lo=500,
                        delay_hi=4000).start()
            time.sleep(4.0)
            t_kill = h.now_ms()
            rd.kill()
            time.sleep(0.3)
            rd.start()
            t_back = h.now_ms()
            h.log("redis SIGKILLed, back (empty) after %d ms"
                  % (t_back - t_kill))
            time.sleep(6.0)
            st.stop()
            p = h.Problems()
            led.check_all_fired(p, 30)
            led.check_output(p)
            led.check_no_refusals(p)
            figs = led.figures(led.recovery_ms(t_back))
            slots, tasks, dmax, last = rebuild_report(c, "redis_killed",
                                                      t_kill)
            p.check(slots == c.slots, "only %d of %d slots rebuilt after "
                    "the data loss" % (slots, c.slots))
            print("# redis_killed: rebuild slots=%d tasks=%d max_ms=%s "
                  "all_rebuilt_after_ms=%s" % (
                      slots, tasks, fmt(dmax),
                      fmt(last - t_back if last else None)), flush=True)
            led.wait_db_converged(30)
            finish(p, led, figs, "Redis killed")
            failed = False
    finally:
        rd.close(failed=failed)


def test_horizon_loader():
    """The tasks far_future submitted beyond horizon + 60 s reach Redis
    only through the loader (every 5 s, [pointer, now + horizon)); they
    must be there before they are due and fire on time."""
    if "c" not in FAR:
        # Run alone (PROPHET_INTEG_ONLY): far_future's part first.
        test_far_future_horizon()
    c, led = FAR["c"], FAR["ledger"]
    ids = FAR["loader_ids"]
    p = h.Problems()
    try:
        due = {i: led.accepted[i] for i in ids}
        first = min(due.values())
        # Shortly before the first is due: all must be in Redis already.
        wait = (first - 2500 - h.now_ms()) / 1000.0
        if wait > 0:
            time.sleep(wait)
        if h.now_ms() < first - 500:
            got = set(in_redis(c, led, ids)) | set(
                i for i in ids if c.rd.by_id.get(i))
            p.check(len(got) == len(ids), "%d of %d loader tasks not in "
                    "Redis %d ms before the first is due"
                    % (len(ids) - len(got), len(ids), first - h.now_ms()))
        else:
            h.log("too late to look into Redis before the due time")
        missing = led.wait_delivered(
            timeout=(max(due.values()) - h.now_ms()) / 1000.0 + 20,
            settle=1.0, ids=ids)
        p.check(not missing, "%d loader task(s) never fired: %s"
                % (len(missing), missing[:5]))
        loaded = worker_sum(c, "prophet_horizon_loaded_total")
        p.check(loaded >= len(ids), "prophet_horizon_loaded_total %s < %d"
                % (loaded, len(ids)))
        lines = log_lines(c, "horizon loaded")
        h.log("horizon loader: %d 'horizon loaded' line(s), metric %s; "
              "first %s" % (len(lines), loaded,
                            lines[0][1] if lines else "-"))
        lled = Ledger("horizon_loader", c)
        lled.accepted = due
        lled.check_output(p)
        # Fired on time = claimed from Redis on time: they were promoted
        # ahead of their due time.
        late = fired_lateness(lled)
        if late:
            p.check(h.percentile(late, 99) < 1500, "loader tasks fired late: "
                    "prophet-fired-at - due p99 %d ms"
                    % h.percentile(late, 99))
        figs = lled.figures()
        # The far ones still untouched.
        st = led.db_statuses()
        bad = [i for i in FAR["far_ids"] if st.get(i) != "scheduled"]
        p.check(not bad, "far tasks not scheduled: %s" % bad[:5])
        p.check(not (set(FAR["far_ids"]) & redis_due_members(c)),
                "far tasks reached Redis")
        finish(p, lled, figs, "horizon loader")
        sanitizer_check(c)
    except BaseException:
        c.dump_logs(25)
        close_cluster(c, True)
        FAR.clear()
        raise
    close_cluster(c, False)
    FAR.clear()


def wait_db_mode(c, want_zero, timeout):
    """Polls prophet_db_mode_slots of all workers until it is 0 (want_zero)
    or > 0; returns the ms it took, None on timeout."""
    t0 = h.now_ms()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            n = worker_sum(c, "prophet_db_mode_slots")
            if (n == 0) == want_zero:
                return h.now_ms() - t0
        except (OSError, h.TestFailure):
            pass
        time.sleep(0.1)
    return None


def redis_outage(fault, hung, outage_s):
    """The Redis-unavailable test: stopped (SIGTERM, restarted empty later)
    or hung (SIGSTOP/SIGCONT, data kept)."""
    rd = s.PrivateRedis().start()
    failed = True
    try:
        with cluster_for("dur-" + fault, workers=2, redis=rd,
                         conf={"redis.timeout_ms": 1000}) as c:
            led = Ledger(fault, c)
            st = Stream(led, "rs", rate=20, delay_lo=1000,
                        delay_hi=5000).start()
            api = c.api()
            for tid, delay in (("far-" + fault, 7200000),
                               ("near-" + fault, 600000)):
                h.check_eq(api.post("/v1/tasks", task(
                    tid, h.now_ms() + delay)).status, 201, tid)
            time.sleep(5.0)
            t_down = h.now_ms()
            if hung:
                rd.pause()
            else:
                rd.stop()
            h.log("redis %s at %d" % ("SIGSTOPped" if hung else "stopped",
                                       t_down))
            fb_ms = wait_db_mode(c, want_zero=False, timeout=outage_s)
            h.log("%s: workers in DB mode %s ms after the fault"
                  % (fault, fmt(fb_ms)))
            # A cancel is decided against claims in Redis (503 without
            # it), but one of a task beyond every index's reach needs
            # nothing of Redis.
            far = api.request("DELETE", "/v1/tasks/far-" + fault)
            near = api.request("DELETE", "/v1/tasks/near-" + fault)
            api.close()
            time.sleep(max(0, (t_down + outage_s * 1000 - h.now_ms())
                           / 1000.0))
            if hung:
                rd.resume()
            else:
                rd.start()
            t_back = h.now_ms()
            back_ms = wait_db_mode(c, want_zero=True, timeout=30)
            h.log("%s: redis back at %d; prophet_db_mode_slots 0 again "
                  "after %s ms" % (fault, t_back, fmt(back_ms)))
            time.sleep(5.0)
            st.stop()
            p = h.Problems()
            p.check(far.status == 200, "cancel of a task due in 2 h during "
                    "the outage: %r" % far)
            p.check(near.status == 503, "cancel of a task due in 10 min "
                    "during the outage (it needs Redis): %r" % near)
            p.check(fb_ms is not None, "workers never switched to DB mode "
                    "(prophet_db_mode_slots stayed 0)")
            p.check(back_ms is not None, "prophet_db_mode_slots not back to "
                    "0 within 30 s after Redis returned")
            led.check_all_fired(p, 30)
            led.check_output(p)
            during = [a for a in led.answers if t_down <= a[0] < t_back]
            bad = [a for a in during if a[1] != 201]
            p.check(during and not bad, "API during the Redis outage: %d "
                    "answers, %d not 201, e.g. %s"
                    % (len(during), len(bad), bad[:3]))
            if during:
                lat = [a[3] for a in during]
                h.log("%s: API during the outage: %d submissions, all 201: "
                      "%s; answer time p50=%d p99=%d max=%d ms"
                      % (fault, len(during), not bad, h.percentile(lat, 50),
                         h.percentile(lat, 99), max(lat)))
            figs = led.figures(led.recovery_ms(t_back))
            lf = led.lateness_between(t_down + 3000, t_back)
            lf_all = led.lateness_between(t_down, t_back)
            print("# %s: during the fault: tasks due=%d lateness_p99_ms=%s "
                  "(first 3 s excluded: %d tasks p99=%s max=%s); db_mode_"
                  "after_ms=%s back_to_redis_after_ms=%s" % (
                      fault, len(lf_all),
                      fmt(h.percentile(lf_all, 99) if lf_all else None),
                      len(lf), fmt(h.percentile(lf, 99) if lf else None),
                      fmt(max(lf) if lf else None), fmt(fb_ms),
                      fmt(back_ms)), flush=True)
            rebuild_report(c, fault, t_back)
            fb_lines = log_lines(c, "redis fallback on", t_down)
            p.check(fb_lines, "no 'redis fallback on' logged")
            p.check(all('reason="redis unreachable for ' in x[1]
                        for x in fb_lines),
                    "the fallback line gives no reason: %r" % fb_lines[:2])
            p.check(log_lines(c, "redis fallback off", t_back),
                    "no 'redis fallback off' logged")
            led.wait_db_converged(40)
            finish(p, led, figs, "Redis " + ("hung" if hung else "stopped"))
            failed = False
    finally:
        rd.close(failed=failed)


def test_redis_stopped():
    redis_outage("redis_stopped", hung=False, outage_s=OUTAGE_S)


def test_redis_hung():
    redis_outage("redis_hung", hung=True, outage_s=HUNG_S)


def test_redis_blip():
    """Private Redis SIGSTOPped for a little longer than redis.timeout_ms
    (1 s): every client drops its connection and reconnects as soon as
    Redis answers again - well within the workers' 1 s DB-mode grace, so
    no DB mode and no rebuild (the index markers are still there). Tasks
    accepted meanwhile must fire all the same. (worker.lease_ms = 5000 so
    that tasks whose claim reply was lost come back quickly.)"""
    rd = s.PrivateRedis().start()
    failed = True
    try:
        with cluster_for("dur-blip", workers=2, redis=rd,
                         conf={"redis.timeout_ms": 1000,
                               "worker.lease_ms": BLIP_LEASE_MS}) as c:
            led = Ledger("redis_blip", c)
            st = Stream(led, "rb", rate=100, delay_lo=2000,
                        delay_hi=5000).start()
            time.sleep(3.0)
            t_down = h.now_ms()
            rd.pause()
            time.sleep(BLIP_S)
            rd.resume()
            t_back = h.now_ms()
            time.sleep(3.0)
            st.stop()
            p = h.Problems()
            missing = led.wait_delivered(
                timeout=(max(led.accepted.values()) - h.now_ms()) / 1000.0
                + BLIP_LEASE_MS / 1000.0 + 8, settle=1.0)
            led.check_output(p)
            figs = led.figures(led.recovery_ms(t_back))
            msgs = led.messages()
            by_lease = sorted(i for i in led.expected() if msgs[i] and min(
                m.recv_ms for m in msgs[i]) - led.accepted[i] >
                BLIP_LEASE_MS - 1500)
            h.log("redis_blip: Redis hung %d ms; manager "
                  "prophet_redis_index_failures_total %s; workers: 'redis "
                  "fallback on' x%d, rebuilds after the blip x%d, "
                  "'leases expired: tasks requeued' x%d"
                  % (t_back - t_down, h.metrics(c.manager_addr).get(
                      "prophet_redis_index_failures_total", 0),
                     len(log_lines(c, "redis fallback on", t_down)),
                     len(log_lines(c, "slot index rebuilt", t_down)),
                     len(log_lines(c, "leases expired", t_down))))
            if by_lease:
                print("# redis_blip: NOTE %d task(s) fired only when their "
                      "lease (worker.lease_ms=%d) ran out, e.g. %s: their "
                      "claim ran in Redis after it resumed, but its reply "
                      "was lost with the dropped connection"
                      % (len(by_lease), BLIP_LEASE_MS, by_lease[:3]),
                      flush=True)
            if missing:
                sub = sorted((led.sent_at[i], i) for i in missing)
                where = redis_where(c, missing)
                h.log("redis_blip: never fired: %d task(s) answered 201 "
                      "+%d..+%d ms after the hang began (e.g. %s); DB "
                      "statuses %s; in Redis: %s" % (
                          len(missing), sub[0][0] - t_down,
                          sub[-1][0] - t_down, [i for _, i in sub[:4]],
                          c.mysql("SELECT status, COUNT(*) FROM tasks "
                                  "WHERE id IN (%s) GROUP BY status"
                                  % ",".join("'%s'" % i for i in missing)),
                          {k: len(v) for k, v in where.items()}))
                ptr = c.mysql("SELECT MIN(loaded_until) FROM slot_state")
                h.log("redis_blip: slot_state.loaded_until min %s is past "
                      "their due times (max %d): the loader will not load "
                      "them" % (ptr[0][0], max(led.accepted[i]
                                               for i in missing)))
                api = c.api()
                restore_job(api, {}, h.Problems(), "redis_blip workaround")
                api.close()
                left = led.wait_delivered(10, settle=0, ids=missing)
                h.log("redis_blip: after POST /v1/admin/restore %d of them "
                      "fired" % (len(missing) - len(left)))
            finish(p, led, figs, "Redis blip (manager's index writes "
                   "lost while its connection was down)")
            failed = False
    finally:
        rd.close(failed=failed)


def test_redis_script_flush():
    """Scripts go as EVALSHA (the text once per connection, by SCRIPT
    LOAD): Redis's command stats on a private server must show EVALSHA
    calls and no EVAL of a slot script. A SCRIPT FLUSH under live
    connections fails the calls in flight (NOSCRIPT, handled as any Redis
    error) and each daemon loads its scripts again: tasks accepted before,
    during and after the flush all fire, none lost."""
    rd = s.PrivateRedis().start()
    failed = True
    try:
        with cluster_for("dur-flush", workers=2, redis=rd,
                         conf={"worker.lease_ms": BLIP_LEASE_MS}) as c:
            led = Ledger("script_flush", c)
            st = Stream(led, "sf", rate=100, delay_lo=1000,
                        delay_hi=3000).start()
            time.sleep(3.0)
            red = rd.client()
            try:
                before = red.cmd("INFO", "commandstats").decode()
                t_flush = h.now_ms()
                h.check_eq(red.cmd("SCRIPT", "FLUSH"), b"OK",
                           "SCRIPT FLUSH")
            finally:
                red.close()
            time.sleep(3.0)
            st.stop()
            p = h.Problems()
            led.wait_delivered(
                timeout=(max(led.accepted.values()) - h.now_ms()) / 1000.0
                + BLIP_LEASE_MS / 1000.0 + 8, settle=1.0)
            led.check_output(p)
            stats = {}
            for line in before.splitlines():
                if line.startswith("cmdstat_"):
                    name, _, rest = line.partition(":")
                    stats[name[8:]] = int(rest.split(",")[0].split("=")[1])
            h.log("script_flush: before the flush, Redis counted evalsha "
                  "%s, eval %s, script|load %s calls"
                  % (stats.get("evalsha"), stats.get("eval"),
                     stats.get("script|load")))
            p.check(stats.get("evalsha", 0) > 100,
                    "EVALSHA not used: %r" % stats)
            p.check(not stats.get("eval"), "scripts still sent as EVAL: %r"
                    % stats)
            again = log_lines(c, "redis lost its scripts", t_flush)
            h.log("script_flush: 'redis lost its scripts' x%d" % len(again))
            p.check(again, "no daemon saw NOSCRIPT after SCRIPT FLUSH (the "
                    "stream kept Redis busy, so some call must have)")
            figs = led.figures()
            finish(p, led, figs, "SCRIPT FLUSH under live connections")
            failed = False
    finally:
        rd.close(failed=failed)


FULL_S = 10.0  # how long the private Redis stays full
FULL_SESSION_MS = 4000  # so that a failover happens while it is full


def test_redis_full():
    """Private Redis at its maxmemory (policy noeviction) for FULL_S while
    tasks come in, and one of the two workers SIGKILLed as it fills: Redis
    refuses the manager's index writes with an OOM error, but the API
    still accepts every task (the DB has it); the manager logs the
    refusal once, not per write, and when Redis takes writes again (found
    by its own probe: no task is submitted after the room comes back)
    hands the slots that lost some to their owners for a rebuild. The survivor
    gains the dead worker's slots while Redis is full: their fence write is
    refused (said once per slot, retried) and they start once Redis has
    room. Every task fires, none early."""
    rd = s.PrivateRedis().start()
    failed = True
    r = rd.client()
    try:
        with cluster_for("dur-full", workers=2, redis=rd, conf={
                "zookeeper.session_timeout_ms": FULL_SESSION_MS}) as c:
            led = Ledger("redis_full", c)
            st = Stream(led, "rf", rate=100, delay_lo=2000,
                        delay_hi=5000).start()
            time.sleep(3.0)
            t_full = h.now_ms()
            r.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
            # 1 byte, not a fraction of what is used: Redis stays full
            # whatever the tasks fired meanwhile free.
            r.cmd("CONFIG", "SET", "maxmemory", 1)
            c.workers[1].kill()
            # Full for FULL_S, and at least until the survivor has gained
            # the dead worker's slots (after its ZooKeeper session ends).
            h.wait_until(lambda: log_lines(
                c, "redis refused the slot's fence", t_full,
                procs=[c.workers[0]]), timeout=30,
                what="the survivor's first refused fence")
            time.sleep(max(1.0, FULL_S - (h.now_ms() - t_full) / 1000.0))
            # No submission from here on: the manager must find out by
            # itself that Redis takes writes again (not at the next one).
            st.stop()
            r.cmd("CONFIG", "SET", "maxmemory", 0)
            t_back = h.now_ms()
            time.sleep(3.0)
            p = h.Problems()
            led.check_no_refusals(p, "submissions while Redis was full")
            led.check_all_fired(p, grace_s=25)
            led.check_output(p)
            figs = led.figures(led.recovery_ms(t_back))
            refused = log_lines(c, "redis refuses index writes", t_full,
                                procs=[c.manager])
            again = log_lines(c, "redis takes index writes again", t_full,
                              procs=[c.manager])
            fences = [kv(l, "slot") for _, l in log_lines(
                c, "redis refused the slot's fence", t_full,
                procs=[c.workers[0]])]
            late_gains = [kv(l, "slot") for t, l in log_lines(
                c, "slot gained", t_back - 1000, procs=[c.workers[0]])]
            fails = h.metrics(c.manager_addr).get(
                "prophet_redis_index_failures_total", 0)
            h.log("redis_full: %s index writes refused in %.0f s; manager "
                  "lines: %s; fences refused for slots %s, gained after "
                  "the room came back: %s; rebuilds x%d" % (
                      fails, (t_back - t_full) / 1000.0, [kv(l, "error") for _, l in refused],
                      fences, late_gains,
                      len(log_lines(c, "slot index rebuilt", t_full))))
            p.check(fails >= 10, "index writes were refused while full "
                    "(prophet_redis_index_failures_total %s)" % fails)
            p.check(len(refused) == 1 and "OOM" in refused[0][1],
                    "one 'redis refuses index writes' line with the OOM "
                    "error, not one per write: %d" % len(refused))
            p.check(len(again) >= 1 and again[0][0] >= t_back - 1000,
                    "'redis takes index writes again' after the room came "
                    "back: %s" % [t - t_back for t, _ in again])
            p.check(fences and len(fences) == len(set(fences)),
                    "the dead worker's slots: one fence refusal each while "
                    "full (retried quietly): %s" % fences)
            p.check(set(fences) <= set(late_gains),
                    "every slot whose fence was refused started once Redis "
                    "had room: refused %s, gained %s" % (fences, late_gains))
            finish(p, led, figs, "Redis full (noeviction), a worker killed")
            failed = False
    finally:
        r.close()
        rd.close(failed=failed)


def test_kafka_stopped():
    """Private Kafka broker stopped for OUTAGE_S: tasks due meanwhile wait in
    the producer and fire when it returns."""
    kf = private("kafka")
    failed = True
    try:
        with cluster_for("dur-kafka", workers=2, kafka=kf) as c:
            led = Ledger("kafka_stopped", c)
            st = Stream(led, "ks", rate=20, delay_lo=1000,
                        delay_hi=4000).start()
            time.sleep(5.0)
            t_down = h.now_ms()
            kf.stop()
            h.log("kafka broker stopped in %d ms" % (h.now_ms() - t_down))
            # ttl_ms: due while the broker is down; the short ttl passes
            # long before it returns (the contract: "give up if not
            # publishable within ttl after due" -> expired, not published),
            # the long one does not.
            now = h.now_ms()
            short = [task("ttl5-%02d" % i, now + 2000 + i * 200,
                          ttl_ms=5000) for i in range(30)]
            long_ = [task("ttl120-%02d" % i, now + 2000 + i * 200,
                          ttl_ms=120000) for i in range(30)]
            h.check(now + 2000 + 29 * 200 + 5000 < t_down + OUTAGE_S * 1000
                    - 2000, "outage too short for the ttl tasks")
            # The short-ttl ones are judged by test_kafka_outage_ttl.
            led_ttl = Ledger("kafka_outage_ttl", c)
            led_ttl.post_all(short)
            led.post_all(long_)
            expire = [x["id"] for x in short]
            led_ttl.must_not_fire.update(expire)
            time.sleep(max(0, (t_down + OUTAGE_S * 1000 - h.now_ms())
                           / 1000.0))
            t_start = h.now_ms()
            kf.start()
            t_back = h.now_ms()
            h.log("kafka broker restarted, answering after %d ms (down "
                  "%.1f s)" % (t_back - t_start, (t_back - t_down) / 1000.0))
            time.sleep(5.0)
            st.stop()
            p = h.Problems()
            led.check_all_fired(p, 60)
            led.check_output(p)
            led.check_no_refusals(
                p, what="submissions refused while Kafka was down")
            figs = led.figures(led.recovery_ms(t_back))
            lf = led.lateness_between(t_down, t_back)
            print("# kafka_stopped: due during the outage=%d lateness_p99_ms="
                  "%s; broker restart took %d ms" % (
                      len(lf), fmt(h.percentile(lf, 99) if lf else None),
                      t_back - t_start), flush=True)
            h.log("kafka_stopped: worker logs: 'kafka brokers down' x%d, "
                  "publish errors %s, backpressure %s"
                  % (len(log_lines(c, "kafka brokers down", t_down)),
                     worker_sum(c, "prophet_publish_errors_total"),
                     worker_sum(c, "prophet_kafka_backpressure_total")))
            led.wait_db_converged(40)
            # For test_kafka_outage_ttl: what became of the short-ttl ones.
            pub = sorted(i for i in expire if c.rd.by_id.get(i))
            st = led_ttl.db_statuses()
            KAFKA_TTL.update(
                ids=expire, published=pub, outage_ms=t_back - t_down,
                status={i: st.get(i) for i in expire},
                late=[min(m.recv_ms for m in c.rd.by_id[i]) -
                      led_ttl.accepted[i] for i in pub],
                expired_metric=worker_sum(c, "prophet_tasks_expired_total"))
            finish(p, led, figs, "Kafka stopped")
            failed = False
    finally:
        kf.close(failed=failed)
        PRIVATE.pop("kafka", None)


def test_kafka_outage_ttl():
    """Tasks with ttl_ms=5000 that came due while the broker was down
    (kafka_stopped) could not be published within their ttl: they must be
    expired and never published."""
    if not KAFKA_TTL:
        test_kafka_stopped()
    k = dict(KAFKA_TTL)
    KAFKA_TTL.clear()
    if not k:
        raise h.TestFailure("kafka_stopped recorded nothing")
    statuses = {}
    for v in k["status"].values():
        statuses[v] = statuses.get(v, 0) + 1
    print("# kafka_outage_ttl: accepted=%d expired=%d published=%d "
          "(%s ms after due) db_statuses=%s prophet_tasks_expired_total=%d"
          % (len(k["ids"]), statuses.get("expired", 0), len(k["published"]),
             "%d..%d" % (min(k["late"]), max(k["late"])) if k["late"]
             else "-", json.dumps(statuses, sort_keys=True),
             k["expired_metric"]), flush=True)
    p = h.Problems()
    p.check(not k["published"], "%d of %d tasks with ttl_ms=5000, due while "
            "Kafka was down (%d ms), were PUBLISHED %s ms after their due "
            "time instead of expiring, e.g. %s"
            % (len(k["published"]), len(k["ids"]), k["outage_ms"],
               "%d..%d" % (min(k["late"]), max(k["late"])) if k["late"]
               else "-", k["published"][:3]))
    bad = sorted(i for i, v in k["status"].items() if v != "expired")
    p.check(not bad, "%d task(s) not expired in the DB: %s"
            % (len(bad), [(i, k["status"][i]) for i in bad[:3]]))
    p.raise_if_any("ttl while Kafka is down")


def test_kafka_hung():
    """Private Kafka broker SIGSTOPped for HUNG_SERVER_S: its connections
    stay up, nothing is acknowledged, librdkafka reports nothing before its
    request timeout. The worker must say so: /readyz 503 "kafka":false and
    'kafka not acknowledging' a few seconds after the hang began (before:
    200 and kafka:true all along), 'kafka acknowledging again' and 200
    after SIGCONT. Nothing is lost or early."""
    kf = private("kafka")
    failed = True
    try:
        with cluster_for("dur-kafkahung", workers=1, kafka=kf) as c:
            led = Ledger("kafka_hung", c)
            st = Stream(led, "kh", rate=20, delay_lo=1000,
                        delay_hi=3000).start()
            addr = [c.workers[0].addr]
            time.sleep(4.0)
            p = h.Problems()
            p.check(wait_readyz_key(addr, "kafka", True, 10) is not None,
                    "worker /readyz not 200 kafka:true before the hang")
            t_down = h.now_ms()
            kf.pause()
            took = wait_readyz_key(addr, "kafka", False, HUNG_SERVER_S - 1)
            h.log("kafka_hung: worker /readyz 503 kafka:false %s s after "
                  "SIGSTOP" % ("%.1f" % took if took is not None
                               else "never"))
            p.check(took is not None and took <= STALL_S + 3,
                    "the worker's /readyz did not turn 503 kafka:false "
                    "within %.0f s of the hang (took %s; now %s)"
                    % (STALL_S + 3, took, readyz_key(addr[0], "kafka")))
            time.sleep(max(0, (t_down + HUNG_SERVER_S * 1000 - h.now_ms())
                           / 1000.0))
            kf.resume()
            t_back = h.now_ms()
            back = wait_readyz_key(addr, "kafka", True, 20)
            h.log("kafka_hung: /readyz 200 again %s s after SIGCONT" % (
                "%.1f" % back if back is not None else "never"))
            p.check(back is not None, "/readyz not 200 kafka:true within "
                    "20 s after the broker resumed")
            time.sleep(3.0)
            st.stop()
            for needle in ("kafka not acknowledging",
                           "kafka acknowledging again"):
                p.check(log_lines(c, needle, t_down),
                        "the worker did not log '%s'" % needle)
            led.check_all_fired(p, 40)
            led.check_output(p)
            led.check_no_refusals(p)
            figs = led.figures(led.recovery_ms(t_back))
            finish(p, led, figs, "Kafka hung")
            failed = False
    finally:
        kf.close(failed=failed)
        PRIVATE.pop("kafka", None)


def test_mariadb_stopped():
    """Private MariaDB stopped for SHORT_OUTAGE_S: the API answers 503
    {"error":{"code":"unavailable"}}, tasks accepted before and due during
    the outage fire from Redis, DB statuses converge afterwards."""
    db = private("mariadb")
    failed = True
    try:
        with cluster_for("dur-db", workers=2, db=db) as c:
            led = Ledger("mariadb_stopped", c)
            now = h.now_ms()
            stop_at = now + 4000
            tasks = [task("pre-%03d" % i, now + 1000 + i * 10)
                     for i in range(100)]
            tasks += [task("down-%03d" % i, stop_at + 1000 + i * int(
                (SHORT_OUTAGE_S - 2) * 1000 / 300)) for i in range(300)]
            led.post_all(tasks)
            st = Stream(led, "ds", rate=5, delay_lo=1000, delay_hi=4000,
                        timeout=15).start()
            time.sleep(max(0, (stop_at - h.now_ms()) / 1000.0))
            t_down = h.now_ms()
            db.stop()
            h.log("mariadb stopped in %d ms" % (h.now_ms() - t_down))
            time.sleep(max(0, (t_down + SHORT_OUTAGE_S * 1000 - h.now_ms())
                           / 1000.0))
            # What a client is told: 503 and when to try again.
            api = c.api()
            try:
                r = api.post("/v1/tasks", task("retry-after-probe",
                                               h.now_ms() + 600000))
            finally:
                api.close()
            probe = (r.status, {k.lower(): v for k, v in
                                r.headers.items()}.get("retry-after"))
            db.start()
            t_back = h.now_ms()
            h.log("mariadb back after %.1f s" % ((t_back - t_down) / 1000.0))
            # The API takes new tasks again.
            t_ok = None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and t_ok is None:
                with led.lock:
                    ok = [a[0] for a in led.answers
                          if a[0] >= t_back and a[1] == 201]
                t_ok = min(ok) if ok else None
                time.sleep(0.2)
            time.sleep(3.0)
            st.stop()
            p = h.Problems()
            during = [a for a in led.answers if t_down + 500 <= a[0] < t_back]
            n503 = [a for a in during if a[1] == 503 and
                    a[2] == "unavailable"]
            acc_during = [a for a in during if a[1] in (200, 201)]
            p.check(probe[0] == 503 and (probe[1] or "").isdigit(),
                    "a submission during the outage: want 503 with a "
                    "Retry-After of whole seconds, got %r" % (probe,))
            p.check(n503, "no 503 {\"code\":\"unavailable\"} during the DB "
                    "outage (answers: %s)" % sorted(set(
                        (a[1], a[2]) for a in during)))
            lat = [a[3] for a in during]
            h.log("mariadb_stopped: during the outage %d submission(s): %d x "
                  "503 unavailable, %d accepted, %d unanswered; answer time "
                  "p50=%s max=%s ms; first 201 %s ms after the DB returned"
                  % (len(during), len(n503), len(acc_during),
                     sum(1 for a in during if a[1] is None),
                     fmt(h.percentile(lat, 50) if lat else None),
                     fmt(max(lat) if lat else None),
                     fmt(t_ok - t_back if t_ok else None)))
            p.check(t_ok is not None, "the API did not accept a task within "
                    "30 s after the DB returned")
            # One line per failed group commit flooded the log (about 100
            # here, 11,000 a minute at 200 submissions/s): at most one per
            # 5 s, carrying the count it stands for.
            gc = log_lines(c, "group commit failed", t_down, [c.manager])
            dc = log_lines(c, "database connect failed", t_down,
                           [c.manager] + c.workers)
            h.log("mariadb_stopped: 'group commit failed' x%d (standing for "
                  "%d), 'database connect failed' x%d" % (
                      len(gc), len(gc) + sum(int(kv(x, "not_logged_since_"
                                                    "last") or 0)
                                             for _, x in gc), len(dc)))
            p.check(len(gc) <= SHORT_OUTAGE_S / 5 + 3,
                    "'group commit failed' logged %d times in a %.0f s "
                    "outage (want one per 5 s at most)"
                    % (len(gc), SHORT_OUTAGE_S))
            led.check_all_fired(p, 30, what="accepted task(s)")
            led.check_output(p)
            conv = led.wait_db_converged(60)
            # When the last row due before the DB returned got its final
            # status (updated_at is written by the worker's update).
            row = c.mysql("SELECT MAX(updated_at) FROM tasks WHERE due_at < "
                          "%d" % t_back)
            rec = int(row[0][0]) - t_back if row and row[0][0] else None
            figs = led.figures(rec)
            lf = led.lateness_between(t_down, t_back)
            print("# mariadb_stopped: due during the outage=%d lateness_p99_"
                  "ms=%s; DB statuses of tasks due before the DB returned "
                  "all final %s ms after it returned; %d x 503" % (
                      len(lf), fmt(h.percentile(lf, 99) if lf else None),
                      fmt(rec), len(n503)), flush=True)
            h.log("mariadb_stopped: worker 'state update failed, will "
                  "retry' x%d, prophet_db_mark_failures_total %s (conv "
                  "wait %.1f s)" % (
                      len(log_lines(c, "state update failed", t_down)),
                      worker_sum(c, "prophet_db_mark_failures_total"),
                      conv))
            finish(p, led, figs, "MariaDB stopped")
            failed = False
    finally:
        db.close(failed=failed)
        PRIVATE.pop("mariadb", None)


HUNG_SERVER_S = 12.0
STALL_S = 5.0  # common/db.c DB_STALL_MS, common/kafka.c KAFKA_STALL_MS


def readyz_key(addr, key):
    """(status, the answer's key) of addr's /readyz; (None, None) when it
    does not answer within 2 s."""
    api = h.Api(addr, timeout=2)
    try:
        r = api.get("/readyz")
        return r.status, (r.json or {}).get(key)
    except OSError:
        return None, None
    finally:
        api.close()


def wait_readyz_key(addrs, key, want, timeout):
    """Seconds until every addr's /readyz says key=want (and 200 / 503 with
    it), None after timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = [readyz_key(a, key) for a in addrs]
        if all(g == ((200 if want else 503), want) for g in got):
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


def test_mariadb_hung():
    """Private MariaDB SIGSTOPped for HUNG_SERVER_S: its connections stay
    up and nothing answers. The daemons must say so: /readyz of the manager and
    the worker 503 with "db":false a few seconds after the hang began
    (before: 200 and db:true all along, while submissions hung), the log
    line 'database not answering', then 'database answering again' and
    200 after SIGCONT. Nothing accepted is lost or early."""
    db = private("mariadb")
    failed = True
    try:
        with cluster_for("dur-dbhung", workers=1, db=db) as c:
            led = Ledger("mariadb_hung", c)
            # One client at a time: its submission hangs with the server,
            # as a real client's would (timeout above the hang).
            st = Stream(led, "dh", rate=20, delay_lo=1000, delay_hi=3000,
                        timeout=HUNG_SERVER_S + 30).start()
            addrs = [c.manager_addr, c.workers[0].addr]
            time.sleep(3.0)
            p = h.Problems()
            p.check(wait_readyz_key(addrs, "db", True, 10) is not None,
                    "/readyz not 200 db:true before the hang")
            t_down = h.now_ms()
            db.pause()
            took = wait_readyz_key(addrs, "db", False, HUNG_SERVER_S - 1)
            h.log("mariadb_hung: /readyz 503 db:false on manager and "
                  "worker %s s after SIGSTOP" % (
                      "%.1f" % took if took is not None else "never"))
            p.check(took is not None and took <= STALL_S + 3,
                    "/readyz of the manager and the worker did not turn 503 "
                    "db:false within %.0f s of the hang (took %s; now %s)"
                    % (STALL_S + 3, took,
                       [readyz_key(a, "db") for a in addrs]))
            time.sleep(max(0, (t_down + HUNG_SERVER_S * 1000 - h.now_ms())
                           / 1000.0))
            db.resume()
            t_back = h.now_ms()
            back = wait_readyz_key(addrs, "db", True, 15)
            h.log("mariadb_hung: /readyz 200 again %s s after SIGCONT" % (
                "%.1f" % back if back is not None else "never"))
            p.check(back is not None, "/readyz not 200 db:true within 15 s "
                    "after the server resumed")
            time.sleep(3.0)
            st.stop()
            for pr, name in ((c.manager, "manager"), (c.workers[0],
                                                      "worker")):
                for needle in ("database not answering",
                               "database answering again"):
                    p.check(log_lines(c, needle, t_down, [pr]),
                            "%s did not log '%s'" % (name, needle))
            led.check_all_fired(p, 30)
            led.check_output(p)
            led.check_no_refusals(p, what="submissions not accepted "
                                  "across a hang shorter than the client's "
                                  "timeout")
            led.wait_db_converged(60)
            figs = led.figures(led.recovery_ms(t_back))
            finish(p, led, figs, "MariaDB hung")
            failed = False
    finally:
        db.close(failed=failed)
        PRIVATE.pop("mariadb", None)


def prophetctl(c, *args):
    p = subprocess.run([PROPHETCTL, "--url", "http://" + c.manager_addr]
                       + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    return p.returncode, p.stdout.strip(), p.stderr.strip()


def restore_job(api, body, p, what):
    """POST /v1/admin/restore, polls the job until done; returns its
    final status JSON."""
    r = api.post("/v1/admin/restore", body)
    p.check(r.status == 202 and r.json and isinstance(
        r.json.get("job"), int), "%s: POST /v1/admin/restore: %r" % (what, r))
    job = r.json.get("job") if r.json else None
    st = None
    t0 = time.monotonic()
    while job is not None and time.monotonic() - t0 < 30:
        st = api.get("/v1/admin/restore/%d" % job)
        if st.status != 200 or (st.json or {}).get("done"):
            break
        time.sleep(0.1)
    j = (st.json or {}) if st is not None else {}
    h.log("%s: restore job %s" % (what, json.dumps(j, sort_keys=True)))
    p.check(j.get("done") is True and j.get("error") is None and
            isinstance(j.get("slots_total"), int) and
            j.get("slots_done") == j.get("slots_total") and
            isinstance(j.get("tasks_indexed"), int) and
            j["tasks_indexed"] >= 0 and "tasks_revived" in j,
            "%s: restore job status: %r" % (what, j))
    return j


def test_restore():
    """FLUSHDB of the test's Redis db (workers running), then POST
    /v1/admin/restore: all tasks fire. With the workers stopped: FLUSHDB,
    restore puts the index back; an expired task is revived by `prophetctl
    restore --id` and fires; restoring a delivered task answers 409."""
    with cluster_for("dur-restore", workers=1) as c:
        led = Ledger("restore", c)
        api = c.api()
        p = h.Problems()
        # A: workers running (they may rebuild by themselves as well).
        now = h.now_ms()
        ta = [task("ra-%03d" % i, now + 3000 + i * 15) for i in range(200)]
        led.post_all(ta)
        time.sleep(1.0)
        r = c.redis()
        r.cmd("FLUSHDB")
        r.close()
        t_flush = h.now_ms()
        ja = restore_job(api, {}, p, "restore A (workers running)")
        p.check(ja.get("slots_total") == c.slots, "slots_total %r"
                % ja.get("slots_total"))
        missing = led.wait_delivered(timeout=(max(led.accepted.values())
                                              - h.now_ms()) / 1000.0 + 20,
                                     settle=1.0)
        p.check(not missing, "A: %d task(s) never fired after FLUSHDB + "
                "restore: %s" % (len(missing), sorted(missing)[:8]))
        rec_a = led.recovery_ms(t_flush)
        # B: workers stopped past exp-1's due + ttl: it expires on restart.
        now = h.now_ms()
        tb = [task("rb-%03d" % i, now + 6000 + i * 25) for i in range(200)]
        led.post_all(tb)
        # Due 1.5 s after it is posted, not after the 200 others were (that
        # took 1.46 s on a busy CI machine: it fired before the SIGTERM).
        exp = task("exp-1", h.now_ms() + 1500, ttl_ms=1000)
        led.post_all([exp])
        led.must_not_fire.add("exp-1")
        for w in c.workers:
            w.signal(signal.SIGTERM)
        for w in c.workers:
            rc = w.wait(30)
            p.check(rc == 0, "worker exit %s after SIGTERM" % rc)
        r = c.redis()
        r.cmd("FLUSHDB")
        r.close()
        time.sleep(max(0, (exp["due_at"] + 1000 + 300 - h.now_ms()) / 1000.0))
        jb = restore_job(api, {}, p, "restore B (workers stopped)")
        due_now = redis_due_members(c)
        back = [t["id"] for t in tb if t["id"] in due_now]
        h.log("restore B: %d of %d tasks back in Redis (workers down), "
              "exp-1 %s" % (len(back), len(tb), "exp-1" in due_now))
        p.check(len(back) == len(tb), "only %d of %d tasks back in Redis "
                "after the restore (workers down)" % (len(back), len(tb)))
        js = restore_job(api, {"slot": 3}, p, "restore of slot 3")
        p.check(js.get("slots_total") == 1, "restore {\"slot\":3}: "
                "slots_total %r, want 1" % js.get("slots_total"))
        r = api.post("/v1/admin/restore", {"slot": c.slots})
        p.check(r.status == 400, "restore {\"slot\":%d}: %r (want 400)"
                % (c.slots, r))
        c.start_workers()
        t_back = h.now_ms()
        exp_st = None
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            g = api.get("/v1/tasks/exp-1")
            exp_st = g.json.get("status") if g.json else None
            if exp_st == "expired":
                break
            time.sleep(0.2)
        p.check(exp_st == "expired", "exp-1 status %r, want expired" % exp_st)
        p.check(not c.rd.by_id.get("exp-1"), "exp-1 published although "
                "its ttl had passed")
        rc, out, err = prophetctl(c, "restore", "--id", "exp-1")
        h.log("prophetctl restore --id exp-1: exit %d: %s %s"
              % (rc, out, err))
        p.check(rc == 0 and "exp-1" in out, "prophetctl restore --id exp-1: "
                "exit %d %r %r" % (rc, out, err))
        t_rev = h.now_ms()
        led.must_not_fire.discard("exp-1")
        missing = led.wait_delivered(timeout=(max(led.accepted.values())
                                              - h.now_ms()) / 1000.0 + 20,
                                     settle=1.5)
        p.check(not missing, "%d task(s) never fired: %s"
                % (len(missing), sorted(missing)[:8]))
        ms = c.rd.by_id.get("exp-1") or []
        h.log("revived exp-1 reached Kafka %s ms after the restore call"
              % fmt(min(m.recv_ms for m in ms) - t_rev if ms else None))
        led.check_output(p)
        led.wait_db_converged(30)
        g = api.get("/v1/tasks/exp-1?log=1")
        h.log("exp-1 after revival: %s" % g.text[:600])
        # 409 for a delivered task, 404 for an unknown one.
        r = api.post("/v1/tasks/ra-000/restore", {})
        p.check(r.status == 409 and r.json and
                r.json.get("error", {}).get("code") == "conflict",
                "restore of a delivered task: %r (want 409 conflict)" % r)
        r = api.post("/v1/tasks/no-such-task/restore", {})
        p.check(r.status == 404, "restore of an unknown task: %r (want 404)"
                % r)
        rc, out, err = prophetctl(c, "restore", "--id", "ra-000")
        p.check(rc != 0, "prophetctl restore --id of a delivered task "
                "exited 0: %r" % out)
        rc, out, err = prophetctl(c, "restore", "--expired")
        h.log("prophetctl restore --expired: exit %d: %s %s" % (rc, out, err))
        p.check(rc == 0 and "restored %d slots" % c.slots in out,
                "prophetctl restore --expired: exit %d %r %r"
                % (rc, out, err))
        api.close()
        figs = led.figures(ja.get("elapsed_ms"))
        h.log("restore: A: FLUSHDB -> last overdue task delivered %s ms, "
              "job %s ms; B: job %s ms, workers back at +%d ms"
              % (fmt(rec_a), ja.get("elapsed_ms"), jb.get("elapsed_ms"),
                 t_back - t_flush))
        finish(p, led, figs, "restore")


# ----------------------------------------------------------------- main ---

def main(tests=None):
    tests = tests or h.collect_tests(globals())
    only = os.environ.get("PROPHET_INTEG_ONLY")
    sel = [t.__name__ for t in tests if not only or only in t.__name__]
    failed = 1
    try:
        h.ensure_cluster()
        # Slow private servers start while the first tests run.
        if "test_kafka_stopped" in sel or "test_kafka_hung" in sel:
            PRIVATE["kafka"] = s.PrivateKafka().start_async()
        if "test_mariadb_stopped" in sel:
            PRIVATE["mariadb"] = s.PrivateMariaDB().start_async()
        h.log("outages: redis/kafka stop %.0f s, cluster/mariadb stop %.0f s, "
              "redis SIGSTOP %.0f s" % (OUTAGE_S, SHORT_OUTAGE_S, HUNG_S))
        failed = h.run_tests(tests, on_failure=lambda: [
            c.dump_logs(25) for c in CLUSTERS])
    except Exception:
        import traceback
        for line in traceback.format_exc().splitlines():
            h.log(line)
        print("not ok - setup failed", flush=True)
    finally:
        for c in list(CLUSTERS):
            close_cluster(c, bool(failed))
        for srv in PRIVATE.values():
            srv.close(failed=bool(failed))
    failed += h.sanitizer_verdict()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
