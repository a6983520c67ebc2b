#!/usr/bin/python3
"""Coordination acceptance (issue 3): slot ownership in ZooKeeper, master
election, handover and failover, fencing, on real servers.

One isolated cluster (manager + 3 workers, a 4th joins; session timeout
4 s, lease 1.5 s) for most tests, run in order and sharing state; a ZooKeeper
sampler reads every slot node every ~100 ms for the whole run and keeps
(slot, epoch, owner) with the node's mtime, the moment ZooKeeper wrote it.
Tasks are streamed (~150/s, due 0.2-2 s ahead) and accounted for with a
ledger: every accepted id must reach Kafka; duplicates are counted.

  1. assignment: 3 workers own 5/5/6 slots, once each; /master, GET
     /v1/cluster and prophetctl agree with ZooKeeper; a 4th worker takes
     exactly the fair share (epoch +1 on each moved slot); a SIGTERMed
     worker's slots move with no duplicate.
  2. kill -9 of a non-master, 5 times, each with a burst of tasks due at
     the kill (claims in flight): reassignment and first fire times
     (`# failover: ...`), nothing lost, duplicates per failover.
  3. SIGSTOP past the session timeout, then SIGCONT, of a non-master and
     of the master: nothing published under an epoch after a higher one
     was written; never two owners of one slot at one epoch; the worker
     comes back with a new session (the master as a non-master).
  4. kill -9 of the master: another live worker is elected, the
     assignment stays balanced, nothing lost.
  5. a private ZooKeeper restarted under load (session 10 s): workers
     keep their sessions and slots and keep firing, nothing lost.
  6. a duplicate worker.id is refused, naming the id; a restart with the
     same id right after kill -9 succeeds.
  7. a manager, and a worker, with cluster.slots=8 against a cluster of
     16 refuse to start, saying "slots".
Figures are printed as TAP comments (`# failover: ...`, `# join: ...`).
"""

import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

SLOTS = 16
SESSION_MS = 4000
LEASE_MS = 1500
TOPIC = "coord"
RATE = 150            # tasks/s of a stream
DELAY = (200, 2000)   # due this far ahead (ms)
KILLS = 5             # kill -9 cycles of the failover test
BURST = 60            # extra tasks due at the moment of each kill
# "Slots move within session timeout + ~1 s": ZooKeeper expires sessions
# in tickTime (1 s) buckets, so allow 1.5 s over the timeout.
REASSIGN_LIMIT_MS = SESSION_MS + 1500
CTL = os.path.join(h.BUILDDIR, "prophetctl")
# test_coord_eos.py runs these tests with kafka.exactly_once on and a
# read_committed reader: there, every failover must have 0 duplicates.
EOS = os.environ.get("PROPHET_COORD_EOS") == "1"
READ_COMMITTED = ["-X", "isolation.level=read_committed"]
RNG = random.Random()

C = None        # the shared cluster
READER = None   # Kafka reader of its topic
SAMPLER = None  # ZooKeeper sampler of its slots


# ------------------------------------------------------------- zookeeper ---

class ZKConn:
    """A harness ZK client that reconnects after a failure."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.z = None

    def call(self, fn):
        for attempt in (0, 1):
            try:
                if self.z is None:
                    self.z = h.ZK(self.hosts)
                return fn(self.z)
            except (OSError, RuntimeError, struct.error):
                if self.z is not None:
                    try:
                        self.z.close()
                    except OSError:
                        pass
                self.z = None
                if attempt:
                    raise

    def close(self):
        if self.z is not None:
            self.z.close()
            self.z = None


def read_state(z, root, nslots):
    """ZooKeeper's view: slots (owner, requested, epoch, mtime, version),
    master, registered workers with their sessions."""
    slots = []
    for i in range(nslots):
        data, st = z.get_stat("%s/work_slot/ws_%d" % (root, i))
        if data is None:
            raise RuntimeError("slot node ws_%d missing" % i)
        j = json.loads(data)
        slots.append({"slot": j.get("slot"), "owner": j.get("owner"),
                      "requested": j.get("requested"),
                      "epoch": j.get("epoch"), "mtime": st["mtime"],
                      "version": st["version"]})
    mdata, mst = z.get_stat(root + "/master")
    workers = {}
    for wid in z.children(root + "/workers") or []:
        data, st = z.get_stat("%s/workers/%s" % (root, wid))
        if data is not None:
            workers[wid] = {"data": json.loads(data),
                            "session": st["ephemeralOwner"]}
    return {"slots": slots,
            "master": json.loads(mdata) if mdata else None,
            "master_ctime": mst["ctime"] if mst else None,
            "master_session": mst["ephemeralOwner"] if mst else None,
            "workers": workers,
            "election": sorted(z.children(root + "/election") or [])}


class Sampler:
    """Reads every slot node every `interval` s in a thread. Keeps, per
    (slot, epoch), the first sample (local time, node mtime, owner) and
    every owner seen."""

    def __init__(self, c, interval=0.1):
        self.c = c
        self.interval = interval
        self.zk = ZKConn(c.env["PROPHET_ZK"])
        self.lock = threading.Lock()
        self.first = {}    # (slot, epoch) -> (sample ms, mtime, owner)
        self.owners = {}   # (slot, epoch) -> {owner: first sample ms}
        self.samples = 0
        self.errors = 0
        self.stopping = False
        self.th = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.th.start()
        return self

    def stop(self):
        self.stopping = True
        self.th.join(5)
        self.zk.close()

    def _run(self):
        root, n = self.c.zk_root, self.c.slots
        while not self.stopping:
            t0 = time.monotonic()
            try:
                slots = self.zk.call(lambda z: [
                    z.get_stat("%s/work_slot/ws_%d" % (root, i))
                    for i in range(n)])
            except Exception:
                self.errors += 1
                time.sleep(self.interval)
                continue
            t = h.now_ms()
            with self.lock:
                self.samples += 1
                for i, (data, st) in enumerate(slots):
                    if data is None:
                        continue
                    j = json.loads(data)
                    key = (i, j.get("epoch"))
                    if key not in self.first:
                        self.first[key] = (t, st["mtime"], j.get("owner"))
                    if j.get("owner"):
                        self.owners.setdefault(key, {}).setdefault(
                            j["owner"], t)
            time.sleep(max(0.0, self.interval - (time.monotonic() - t0)))

    def higher_epoch_written(self, slot, epoch):
        """The earliest mtime seen of a node of `slot` at an epoch above
        `epoch` (when ZooKeeper wrote it), or None."""
        with self.lock:
            ts = [v[1] for (s, e), v in self.first.items()
                  if s == slot and e is not None and e > epoch]
        return min(ts) if ts else None

    def two_owners(self, since_ms=0):
        with self.lock:
            return {k: v for k, v in self.owners.items()
                    if len(v) > 1 and max(v.values()) >= since_ms}


def zk_state(c=None):
    c = c or C
    z = h.ZK(c.env["PROPHET_ZK"])
    try:
        return read_state(z, c.zk_root, c.slots)
    finally:
        z.close()


def counts(st, ids=()):
    n = {i: 0 for i in ids}
    for s in st["slots"]:
        if s["owner"]:
            n[s["owner"]] = n.get(s["owner"], 0) + 1
    return n


def owned_by(st, wid):
    return {s["slot"]: s["epoch"] for s in st["slots"] if s["owner"] == wid}


# --------------------------------------------------------------- workers ---

def live(c=None):
    c = c or C
    return [w for w in c.workers if w.running()]


def settle_problem(c, st, workers):
    """Why the cluster is not settled on `workers`, or None: every slot
    owned by one of them, no handover pending, counts balanced, /master
    and /workers right, and each worker's own metrics agree (it owns
    exactly its slots at ZooKeeper's epochs, nothing else)."""
    ids = sorted(w.wid for w in workers)
    for s in st["slots"]:
        if s["owner"] not in ids:
            return "slot %d owned by %r" % (s["slot"], s["owner"])
        if s["requested"]:
            return "slot %d handover to %s pending" % (s["slot"],
                                                       s["requested"])
    n = counts(st, ids)
    if max(n.values()) - min(n.values()) > 1:
        return "unbalanced: %s" % n
    if sorted(st["workers"]) != ids:
        return "/workers is %s" % sorted(st["workers"])
    if not st["master"] or st["master"].get("id") not in ids:
        return "/master is %r" % st["master"]
    master = st["master"]["id"]
    for w in workers:
        try:
            m = h.metrics(w.addr, labelled=True)
        except OSError as e:
            return "%s /metrics: %s" % (w.wid, e)
        mine = owned_by(st, w.wid)
        if m.get("prophet_slots_owned") != len(mine):
            return "%s: prophet_slots_owned %s, ZooKeeper %d" % (
                w.wid, m.get("prophet_slots_owned"), len(mine))
        for i in range(c.slots):
            got = m.get('prophet_slot_epoch{slot="%d"}' % i)
            if got != mine.get(i, 0):
                return "%s: prophet_slot_epoch{slot=%d} %s, want %s" % (
                    w.wid, i, got, mine.get(i, 0))
        if m.get("prophet_master") != (1 if w.wid == master else 0):
            return "%s: prophet_master %s (master is %s)" % (
                w.wid, m.get("prophet_master"), master)
        if m.get("prophet_self_fenced"):
            return "%s: self-fenced" % w.wid
    return None


def wait_settled(c, workers, timeout=20, what="settled"):
    deadline = time.monotonic() + timeout
    why = None
    while True:
        try:
            st = zk_state(c)
            why = settle_problem(c, st, workers)
        except (OSError, RuntimeError) as e:
            why = "zookeeper: %s" % e
        if why is None:
            return st
        if time.monotonic() > deadline:
            raise h.TestFailure("%s: not settled on %s within %ds: %s"
                                % (what, [w.wid for w in workers], timeout,
                                   why))
        time.sleep(0.1)


def non_master(st, exclude=()):
    m = st["master"]["id"]
    ws = [w for w in live() if w.wid != m and w.wid not in exclude]
    h.check(ws, "no live non-master worker")
    return ws


def find_worker(wid):
    for w in C.workers:
        if w.wid == wid:
            return w
    raise h.TestFailure("no worker %s" % wid)


# ---------------------------------------------------------------- stream ---

class Stream:
    """Submits tasks at `rate`/s (due DELAY ahead) from a few threads until
    stopped; keeps the ledger of accepted ids."""

    def __init__(self, c, prefix, rate=RATE, delay=DELAY, threads=3):
        self.c, self.prefix, self.rate = c, prefix, rate
        self.delay, self.threads = delay, threads
        self.accepted = {}   # id -> (due_at, slot)
        self.refused = []    # (id, status, text)
        self.errors = []
        self.lock = threading.Lock()
        self.stopping = False
        self.ths = []

    def start(self):
        self.t0 = time.monotonic()
        self.ths = [threading.Thread(target=self._run, args=(k,),
                                     daemon=True)
                    for k in range(self.threads)]
        for t in self.ths:
            t.start()
        return self

    def _run(self, k):
        api = self.c.api()
        rng = random.Random()
        n = k
        while not self.stopping:
            wait = self.t0 + n / float(self.rate) - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            tid = "%s-%06d" % (self.prefix, n)
            task = {"id": tid, "topic": TOPIC, "body": "b" + tid,
                    "delay_ms": rng.randint(*self.delay)}
            try:
                r = api.post("/v1/tasks", task)
            except Exception as e:
                with self.lock:
                    self.errors.append("%s: %r" % (tid, e))
                time.sleep(0.1)
                n += self.threads
                continue
            with self.lock:
                if r.status == 201 and r.json:
                    self.accepted[tid] = (r.json["due_at"], r.json["slot"])
                else:
                    self.refused.append((tid, r.status, r.text[:200]))
            n += self.threads
        api.close()

    def stop(self):
        self.stopping = True
        for t in self.ths:
            t.join(30)
        self.elapsed = time.monotonic() - self.t0
        return self


def submit_burst(stream, tag, n, at_ms, spread=25, threads=4):
    """Submits n tasks due within +-spread ms of at_ms (so that a worker
    killed just after at_ms dies with claims in flight); they join the
    stream's ledger."""
    tasks = [{"id": "%s-%s-%03d" % (stream.prefix, tag, i), "topic": TOPIC,
              "body": "burst", "due_at": at_ms - spread +
              RNG.randint(0, 2 * spread)} for i in range(n)]
    res, _ = h.submit_many(stream.c.manager_addr, tasks, threads=threads)
    with stream.lock:
        for t, r in zip(tasks, res):
            if r.status == 201 and r.json:
                stream.accepted[t["id"]] = (r.json["due_at"],
                                            r.json["slot"])
            else:
                stream.refused.append((t["id"], r.status, r.text[:200]))


class Requeues:
    """Counts the lease reaper's requeues logged since creation."""
    NEEDLE = "leases expired: tasks requeued"

    def __init__(self, workers):
        self.workers = list(workers)
        self.base = {w.wid: len(w.grep(self.NEEDLE)) for w in self.workers}

    def since(self):
        n = 0
        for w in self.workers:
            for line in w.grep(self.NEEDLE)[self.base.get(w.wid, 0):]:
                mm = re.search(r"count=(\d+)", line)
                n += int(mm.group(1)) if mm else 0
        return n


def account(stream, reader, what, settle=LEASE_MS / 1000.0 + 1.5):
    """Waits until every accepted id of the stream reached Kafka (a lost
    task fails the test), then a little more for late duplicates. Returns
    ({id: [messages]}, duplicates)."""
    h.check(not stream.errors, "%s: %d submission errors, e.g. %s"
            % (what, len(stream.errors), stream.errors[:3]))
    h.check(not stream.refused, "%s: %d submissions refused, e.g. %s"
            % (what, len(stream.refused), stream.refused[:3]))
    h.check(len(stream.accepted) > 0, "%s: nothing accepted" % what)
    last_due = max(d for d, _ in stream.accepted.values())
    timeout = max(0.0, (last_due - h.now_ms()) / 1000.0) + \
        LEASE_MS / 1000.0 + 15
    missing = reader.wait_for(stream.accepted.keys(), timeout, settle=settle)
    if missing:
        raise h.TestFailure("%s: %d of %d accepted tasks never reached "
                            "Kafka (LOST), e.g. %s"
                            % (what, len(missing), len(stream.accepted),
                               sorted(missing)[:10]))
    p = h.Problems()
    with reader.cond:
        msgs = {tid: list(reader.by_id.get(tid, []))
                for tid in stream.accepted}
    dups = 0
    for tid, ms in msgs.items():
        due, slot = stream.accepted[tid]
        dups += len(ms) - 1
        for m in ms:
            p.check(m.hdr.get("prophet-slot") == str(slot),
                    "%s: prophet-slot %s, want %s"
                    % (tid, m.hdr.get("prophet-slot"), slot))
            fired = int(m.hdr.get("prophet-fired-at", "0"))
            p.check(fired >= due, "%s fired early: %d < due %d"
                    % (tid, fired, due))
            p.check((m.hdr.get("prophet-epoch") or "").isdigit(),
                    "%s: prophet-epoch %r" % (tid, m.hdr.get("prophet-epoch")))
    p.raise_if_any(what + ": Kafka output")
    return msgs, dups


def describe(ms):
    return ["slot=%s epoch=%s attempt=%s fired=%s" % (
        m.hdr.get("prophet-slot"), m.hdr.get("prophet-epoch"),
        m.hdr.get("prophet-attempt"), m.hdr.get("prophet-fired-at"))
        for m in ms]


def check_fencing(sampler, msgs, since_ms, what):
    """No message of (slot S, epoch E) fired after ZooKeeper held a higher
    epoch for S; never two owners of one slot at one epoch."""
    p = h.Problems()
    for tid, ms in msgs.items():
        for m in ms:
            s = int(m.hdr["prophet-slot"])
            e = int(m.hdr["prophet-epoch"])
            fired = int(m.hdr["prophet-fired-at"])
            t = sampler.higher_epoch_written(s, e)
            p.check(t is None or fired <= t,
                    "%s: published under slot %d epoch %d at %d, %d ms "
                    "AFTER ZooKeeper held a higher epoch (written at %s)"
                    % (tid, s, e, fired, fired - (t or 0), t))
    for (s, e), owners in sorted(sampler.two_owners(since_ms).items()):
        p.add("slot %d epoch %d had two owners: %s" % (s, e, owners))
    with sampler.lock:
        changes = sum(1 for v in sampler.first.values() if v[0] >= since_ms)
        samples = sampler.samples
    h.log("%s: %d messages checked against %d (slot, epoch) changes seen "
          "in ZooKeeper (%d samples so far, %d errors)"
          % (what, sum(len(ms) for ms in msgs.values()), changes, samples,
             sampler.errors))
    p.raise_if_any(what + ": fencing")


def now_s(t_ms):
    return "+%.2fs" % ((t_ms - T0_MS) / 1000.0)


T0_MS = h.now_ms()


# ----------------------------------------------------------------- setup ---

def setup():
    global C, READER, SAMPLER
    conf = {"zookeeper.session_timeout_ms": SESSION_MS,
            "worker.lease_ms": LEASE_MS}
    if EOS:
        conf["kafka.exactly_once"] = "true"
    C = h.Cluster(workers=3, name="coord-eos" if EOS else "coord",
                  slots=SLOTS, conf=conf).open()
    C.start()
    h.create_topics(C.brokers, [C.topic(TOPIC)])
    READER = C.reader([TOPIC], kcat_args=READ_COMMITTED if EOS else ())
    SAMPLER = Sampler(C).start()


def ctl(*args):
    p = subprocess.run([CTL, "--url", "http://" + C.manager_addr] +
                       list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    h.check(p.returncode == 0, "prophetctl %s: exit %d: %s"
            % (" ".join(args), p.returncode, p.stderr.strip()))
    return p.stdout


def compare_view(p, st, view, what):
    """GET /v1/cluster-shaped JSON against ZooKeeper's state."""
    if not p.check(isinstance(view, dict), "%s: not an object" % what):
        return
    p.check((view.get("master") or {}).get("id") == st["master"]["id"],
            "%s: master %r, ZooKeeper %r" % (what, view.get("master"),
                                             st["master"]))
    ws = {w.get("id"): w for w in view.get("workers") or []}
    p.check(sorted(ws) == sorted(st["workers"]), "%s: workers %s, "
            "ZooKeeper %s" % (what, sorted(ws), sorted(st["workers"])))
    for wid, w in ws.items():
        z = st["workers"].get(wid)
        if z:
            p.check(w.get("pid") == z["data"].get("pid"),
                    "%s: worker %s pid %r, ZooKeeper %r"
                    % (what, wid, w.get("pid"), z["data"].get("pid")))
    slots = view.get("slots") or []
    p.check(len(slots) == len(st["slots"]), "%s: %d slots" % (what,
                                                              len(slots)))
    for v, z in zip(slots, st["slots"]):
        for k in ("slot", "owner", "requested", "epoch"):
            p.check(v.get(k) == z[k], "%s: slot %s %s %r, ZooKeeper %r"
                    % (what, z["slot"], k, v.get(k), z[k]))
        for k in ("pending", "inflight", "lag_ms"):
            p.check(isinstance(v.get(k), int), "%s: slot %s %s %r"
                    % (what, z["slot"], k, v.get(k)))


# ----------------------------------------------------------------- tests ---

def test_assignment_join_and_graceful_leave():
    three = C.workers[:3]
    st = wait_settled(C, three, what="3 workers")
    p = h.Problems()
    n = counts(st)
    p.check(sorted(n.values()) == [5, 5, 6], "3 workers: counts %s, want "
            "5/5/6" % n)
    p.check(sorted(s["slot"] for s in st["slots"]) == list(range(SLOTS)),
            "slot nodes: %s" % [s["slot"] for s in st["slots"]])
    master = st["master"]["id"]
    p.check(st["master_session"] == st["workers"][master]["session"],
            "/master is not held by %s's session" % master)
    p.check(all(w.popen.pid == st["workers"][w.wid]["data"].get("pid")
                for w in three), "/workers pids: %s"
            % {k: v["data"].get("pid") for k, v in st["workers"].items()})
    cands = st["election"]
    p.check(len(cands) == 3 and all(re.match(r"c_.+_\d{10}$", x)
                                    for x in cands),
            "/election: %s" % cands)
    if cands:
        first = min(cands, key=lambda x: x.rsplit("_", 1)[1])
        p.check(first.startswith("c_%s_" % master), "lowest candidate %s "
                "but /master is %s" % (first, master))
    h.log("3 workers: master %s, counts %s, epochs %s" % (
        master, n, sorted({s["epoch"] for s in st["slots"]})))

    # API and CLI against ZooKeeper (settled: nothing moves).
    r = C.api().get("/v1/cluster")
    p.check(r.status == 200, "GET /v1/cluster: %r" % r)
    compare_view(p, st, r.json, "GET /v1/cluster")
    compare_view(p, st, json.loads(ctl("--json", "cluster")),
                 "prophetctl --json cluster")
    table = ctl("cluster")
    rows = {}
    for line in table.splitlines():
        mm = re.match(r"^\s*(\d+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\d+|\?)\s+"
                      r"(\d+|\?)\s+(\d+|\?)\s*$", line)
        if mm:
            rows.setdefault(int(mm.group(1)), []).append(mm.groups())
    p.check(re.search(r"^master\s+%s\b" % re.escape(master), table, re.M),
            "prophetctl cluster: no master line for %s:\n%s" % (master,
                                                               table))
    for s in st["slots"]:
        got = rows.get(s["slot"], [])
        if p.check(len(got) == 1, "prophetctl cluster: %d rows for slot %d"
                   % (len(got), s["slot"])):
            p.check(got[0][1] == s["owner"] and int(got[0][2]) == s["epoch"]
                    and got[0][3] == "-", "prophetctl cluster: slot row %s, "
                    "ZooKeeper owner %s epoch %d" % (got[0], s["owner"],
                                                     s["epoch"]))
    p.check(len(rows) == SLOTS, "prophetctl cluster: %d slot rows"
            % len(rows))
    p.raise_if_any("3 workers")

    # A 4th worker joins: it takes the fair share, nothing else moves.
    w4 = C.add_worker()
    t_join = h.now_ms()
    C.start_worker(w4)
    st4 = wait_settled(C, C.workers[:4], what="4 workers")
    moved = [i for i in range(SLOTS)
             if st4["slots"][i]["owner"] != st["slots"][i]["owner"]]
    n4 = counts(st4)
    p.check(sorted(n4.values()) == [4, 4, 4, 4], "4 workers: counts %s" % n4)
    p.check(len(moved) <= 4, "%d slots changed owner when a 4th worker "
            "joined (fair share 4): %s" % (len(moved), moved))
    for i in range(SLOTS):
        a, b = st["slots"][i], st4["slots"][i]
        if i in moved:
            p.check(b["owner"] == w4.wid, "slot %d moved %s -> %s, not to the"
                    " new worker" % (i, a["owner"], b["owner"]))
            p.check(b["epoch"] == a["epoch"] + 1, "slot %d moved with epoch "
                    "%d -> %d (want +1)" % (i, a["epoch"], b["epoch"]))
        else:
            p.check(b["epoch"] == a["epoch"], "slot %d kept its owner but "
                    "epoch %d -> %d" % (i, a["epoch"], b["epoch"]))
    p.check(st4["master"]["id"] == master, "master changed on a join: %s"
            % st4["master"])
    m = h.metrics(find_worker(master).addr, labelled=True)
    join_ms = max(st4["slots"][i]["mtime"] for i in moved) - t_join \
        if moved else 0
    print("# join: moved=%d slots, last handover %d ms after the start of "
          "the 4th worker; master rebalance_duration sum=%.3fs count=%d"
          % (len(moved), join_ms,
             m.get("prophet_rebalance_duration_seconds_sum", -1),
             m.get("prophet_rebalance_duration_seconds_count", -1)),
          flush=True)
    p.raise_if_any("4th worker joins")

    # One worker leaves gracefully under a steady stream.
    since = h.now_ms()
    stream = Stream(C, "leave").start()
    time.sleep(2.0)
    victim = non_master(st4)[0]
    vslots = owned_by(st4, victim.wid)
    t_term = h.now_ms()
    victim.signal(signal.SIGTERM)
    rc = victim.wait(25)
    t_exit = h.now_ms()
    h.check(rc == 0, "%s exited %s after SIGTERM, want 0" % (victim.wid, rc))
    others = [w for w in C.workers[:4] if w is not victim]
    st3 = wait_settled(C, others, what="after SIGTERM")
    for i, e in vslots.items():
        p.check(st3["slots"][i]["owner"] != victim.wid and
                st3["slots"][i]["epoch"] == e + 1,
                "slot %d of the stopped worker: %s" % (i, st3["slots"][i]))
    p.check(sorted(counts(st3).values()) == [5, 5, 6], "after the leave: %s"
            % counts(st3))
    moved_ms = max(st3["slots"][i]["mtime"] for i in vslots) - t_term
    time.sleep(1.5)
    stream.stop()
    msgs, dups = account(stream, READER, "graceful leave")
    dup_ids = sorted(t for t, ms in msgs.items() if len(ms) > 1)
    print("# graceful-leave: tasks=%d duplicates=%d exit_ms=%d "
          "slots_moved_ms=%d (%d slots)" % (len(msgs), dups, t_exit - t_term,
                                            moved_ms, len(vslots)),
          flush=True)
    for tid in dup_ids[:10]:
        p.add("duplicate %s: %s" % (tid, describe(msgs[tid])))
    check_fencing(SAMPLER, msgs, since, "graceful leave")
    p.raise_if_any("graceful leave (want zero duplicates)")
    C.start_worker(victim)
    wait_settled(C, C.workers[:4], what="stopped worker back")


FAILOVERS = []  # (reassigned_ms, first_fire_ms) of every kill -9


def wait_moved(vslots, victim, kill_ms, timeout):
    """Polls ZooKeeper until every slot of vslots has an owner other than
    the victim; returns {slot: (owner, epoch, mtime)} as first seen."""
    z = ZKConn(C.env["PROPHET_ZK"])
    seen = {}
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < len(vslots):
            for i in vslots:
                if i in seen:
                    continue
                data, stt = z.call(lambda zz: zz.get_stat(
                    "%s/work_slot/ws_%d" % (C.zk_root, i)))
                j = json.loads(data)
                if j.get("owner") and j["owner"] != victim:
                    seen[i] = (j["owner"], j["epoch"], stt["mtime"])
            if time.monotonic() > deadline:
                raise h.TestFailure(
                    "slots %s of %s not reassigned %d ms after the kill"
                    % (sorted(set(vslots) - set(seen)), victim,
                       h.now_ms() - kill_ms))
            time.sleep(0.02)
    finally:
        z.close()
    return seen


def first_fire(vslots_new, after_ms, timeout=8.0):
    """fired-at of the first Kafka message of one of the slots at (at
    least) its new epoch; looks 1 s past the first one found (Kafka
    order is not fired-at order across partitions)."""
    t0 = time.monotonic()
    found_at = None
    idx = 0
    best = None
    while True:
        with READER.cond:
            new = READER.messages[idx:]
            idx = len(READER.messages)
        for m in new:
            try:
                s = int(m.hdr.get("prophet-slot"))
                e = int(m.hdr.get("prophet-epoch"))
                f = int(m.hdr.get("prophet-fired-at"))
            except (TypeError, ValueError):
                continue
            if s in vslots_new and e >= vslots_new[s] and f >= after_ms:
                best = f if best is None else min(best, f)
        now = time.monotonic()
        if best is not None and found_at is None:
            found_at = now
        if (found_at is not None and now - found_at >= 1.0) or \
                now - t0 > timeout:
            return best
        time.sleep(0.05)


def ensure_four():
    """Tests after the first expect 4 running workers (also when run
    alone with PROPHET_INTEG_ONLY)."""
    while len(C.workers) < 4:
        C.add_worker()
    for w in C.workers[:4]:
        if not w.running():
            C.start_worker(w)
    return wait_settled(C, C.workers[:4], timeout=30, what="4 workers")


def test_failover_kill9_nonmaster():
    ensure_four()
    since = h.now_ms()
    all4 = C.workers[:4]
    requeues = Requeues(all4)
    stream = Stream(C, "fo").start()
    time.sleep(1.5)
    kills = []
    p = h.Problems()
    for k in range(KILLS):
        st = wait_settled(C, all4, what="before kill %d" % (k + 1))
        cands = non_master(st)
        victim = cands[k % len(cands)]
        vslots = owned_by(st, victim.wid)
        # A burst due at the kill on top of the stream: the victim dies
        # with claims in flight (leased, maybe published, not recorded).
        kill_at = h.now_ms() + 1200
        submit_burst(stream, "b%d" % (k + 1), BURST, kill_at)
        time.sleep(max(0.0, (kill_at + 5 - h.now_ms()) / 1000.0))
        kill_ms = h.now_ms()
        victim.kill()
        seen = wait_moved(vslots, victim.wid, kill_ms,
                          SESSION_MS / 1000.0 + 10)
        reassigned = max(v[2] for v in seen.values()) - kill_ms
        new_epochs = {i: v[1] for i, v in seen.items()}
        for i, e in vslots.items():
            p.check(new_epochs[i] == e + 1, "kill %d: slot %d epoch %d -> %d"
                    " (want +1)" % (k + 1, i, e, new_epochs[i]))
        ff = first_fire(new_epochs, kill_ms)
        ff_ms = ff - kill_ms if ff is not None else None
        kills.append({"victim": victim.wid, "kill_ms": kill_ms,
                      "new": new_epochs, "reassigned_ms": reassigned,
                      "first_fire_ms": ff_ms})
        print("# failover: kill=%d victim=%s slots=%s reassigned_ms=%d "
              "first_fire_ms=%s" % (k + 1, victim.wid, sorted(vslots),
                                    reassigned, ff_ms), flush=True)
        p.check(reassigned <= REASSIGN_LIMIT_MS, "kill %d: slots reassigned "
                "%d ms after kill -9 (session %d ms, limit %d)"
                % (k + 1, reassigned, SESSION_MS, REASSIGN_LIMIT_MS))
        p.check(ff_ms is not None, "kill %d: no message from slots %s at "
                "their new epochs" % (k + 1, new_epochs))
        # Restarted at once (its session has expired by now).
        C.start_worker(victim)
    wait_settled(C, all4, what="after the last restart")
    time.sleep(1.0)
    stream.stop()
    msgs, dups = account(stream, READER, "kill -9 failovers")
    # A duplicate comes from a failover when its re-fire carries one of
    # the epochs the failover created (lease re-fire by the new owner).
    per = [0] * len(kills)
    other = []
    for tid, ms in msgs.items():
        if len(ms) < 2:
            continue
        owner = None
        for m in sorted(ms, key=lambda x: int(x.hdr["prophet-fired-at"]))[1:]:
            s, e = int(m.hdr["prophet-slot"]), int(m.hdr["prophet-epoch"])
            for k, kl in enumerate(kills):
                if kl["new"].get(s) == e:
                    owner = k
        if owner is None:
            other.append(tid)
        else:
            per[owner] += len(ms) - 1
    for k, kl in enumerate(kills):
        print("# failover: kill=%d duplicates=%d" % (k + 1, per[k]),
              flush=True)
    ra = [kl["reassigned_ms"] for kl in kills]
    ffs = [kl["first_fire_ms"] for kl in kills
           if kl["first_fire_ms"] is not None]
    FAILOVERS.extend((kl["reassigned_ms"], kl["first_fire_ms"])
                     for kl in kills)
    print("# failover: kills=%d session_timeout_ms=%d reassigned_ms "
          "median=%d max=%d; first_fire_ms median=%s max=%s; tasks=%d "
          "duplicates=%d (unattributed %d); leases requeued=%d"
          % (len(kills), SESSION_MS, h.percentile(ra, 50), max(ra),
             h.percentile(ffs, 50) if ffs else "-",
             max(ffs) if ffs else "-", len(msgs), dups,
             sum(len(msgs[t]) - 1 for t in other), requeues.since()),
          flush=True)
    for tid in other[:5]:
        h.log("duplicate outside a failover: %s %s"
              % (tid, describe(msgs[tid])))
    dup_ids = sorted(t for t, ms in msgs.items() if len(ms) > 1)
    if dup_ids:
        # Why: a duplicate is inherent when the dead owner published but
        # had not recorded the delivery; it is avoidable when the DB
        # already said delivered (at the first message's epoch) and the
        # task was re-fired anyway.
        # A one-shot delivery has no log row: the task's columns are
        # the first delivery recorded (a later one is refused).
        rows = C.mysql("SELECT id, 'scheduled', status, owner, epoch, "
                       "attempt, delivered_at FROM tasks WHERE id IN (%s) "
                       "AND status = 'delivered' UNION ALL SELECT task_id, "
                       "from_status, to_status, actor, epoch, attempt, at "
                       "FROM task_log WHERE task_id IN (%s)"
                       % ((",".join("'%s'" % t for t in dup_ids),) * 2))
        log_of = {}
        for r in rows:
            log_of.setdefault(r[0], []).append(r[1:])
        recorded = []
        for tid in dup_ids:
            first = min(msgs[tid], key=lambda x: int(x.hdr["prophet-fired-at"]))
            if any(r[1] == "delivered" and r[3] == first.hdr["prophet-epoch"]
                   for r in log_of.get(tid, [])):
                recorded.append(tid)
        print("# failover: duplicated tasks=%d: published but not recorded "
              "by the killed worker=%d, recorded delivered in the DB and "
              "re-fired anyway=%d" % (len(dup_ids),
                                      len(dup_ids) - len(recorded),
                                      len(recorded)), flush=True)
        for tid in (recorded[:3] + [t for t in dup_ids
                                    if t not in recorded][:2]):
            h.log("duplicate %s: Kafka %s" % (tid, describe(msgs[tid])))
            for r in log_of.get(tid, []):
                h.log("    task_log %s" % " ".join(str(x) for x in r))
    if EOS:
        p.check(dups == 0, "exactly-once: %d duplicates over %d kill -9 "
                "failovers (want 0), e.g. %s" % (dups, len(kills),
                                                 dup_ids[:5]))
        rec = sum(marker_recorded(w) for w in all4)
        print("# failover-eos: tasks found published (a marker) and "
              "recorded instead of fired again=%d" % rec, flush=True)
    check_fencing(SAMPLER, msgs, since, "kill -9 failovers")
    p.raise_if_any("kill -9 failovers")


def marker_recorded(w):
    """Tasks a worker's open of a slot found committed by the previous
    owner (the markers= of its log lines)."""
    n = 0
    for line in w.grep("exactly-once slot opened"):
        mm = re.search(r"recording=(\d+)", line)
        n += int(mm.group(1)) if mm else 0
    return n


def published_under_old_epoch(msgs, vslots, seen):
    """(id, message) of every message of a slot of vslots ({slot: old
    epoch}) at its old epoch fired after ZooKeeper gave the slot away
    (seen: {slot: (owner, epoch, mtime)} of wait_moved)."""
    out = []
    for tid, ms in msgs.items():
        for m in ms:
            s, e = int(m.hdr["prophet-slot"]), int(m.hdr["prophet-epoch"])
            if s in vslots and e == vslots[s] and \
                    int(m.hdr["prophet-fired-at"]) > seen[s][2]:
                out.append((tid, m))
    return out


def sigstop_case(master):
    """SIGSTOP a worker (the master or not) well past the session timeout
    while tasks stream, SIGCONT it; it must not publish under its old
    epochs, and must come back with a new session."""
    what = "SIGSTOP of the master" if master else "SIGSTOP"
    since = h.now_ms()
    all4 = C.workers[:4]
    st = wait_settled(C, all4, what="before " + what)
    victim = find_worker(st["master"]["id"]) if master else non_master(st)[0]
    vslots = owned_by(st, victim.wid)
    session = st["workers"][victim.wid]["session"]
    fenced0 = h.metrics(victim.addr, labelled=True).get(
        "prophet_fenced_writes_total", 0)
    stream = Stream(C, "mstop" if master else "stop").start()
    time.sleep(1.5)
    stop_ms = h.now_ms()
    victim.signal(signal.SIGSTOP)
    try:
        seen = wait_moved(vslots, victim.wid, stop_ms,
                          SESSION_MS / 1000.0 + 10)
        taken_ms = max(v[2] for v in seen.values()) - stop_ms
        # Stay stopped well past the timeout while the others fire.
        time.sleep(max(0.0, (stop_ms + 7000 - h.now_ms()) / 1000.0))
        st_mid = zk_state()
    finally:
        cont_ms = h.now_ms()
        victim.signal(signal.SIGCONT)
    p = h.Problems()
    for i, e in vslots.items():
        p.check(seen[i][1] == e + 1, "slot %d epoch %d -> %d (want +1)"
                % (i, e, seen[i][1]))
    if master:
        p.check(st_mid["master"] and st_mid["master"]["id"] != victim.wid,
                "while the master was stopped /master was %r"
                % st_mid["master"])
    st2 = wait_settled(C, all4, timeout=30, what="after SIGCONT")
    back_ms = h.now_ms() - cont_ms
    new_session = st2["workers"][victim.wid]["session"]
    p.check(new_session != session, "%s kept session 0x%x across a stop "
            "longer than its timeout" % (victim.wid, session))
    p.check(len(owned_by(st2, victim.wid)) >= 4, "%s owns %s after rejoining"
            % (victim.wid, owned_by(st2, victim.wid)))
    if master:
        p.check(st2["master"]["id"] != victim.wid, "the stopped master is "
                "master again after waking: %s" % st2["master"])
    time.sleep(1.0)
    stream.stop()
    msgs, dups = account(stream, READER, what)
    # Messages of its old slots at their old epochs fired after the
    # others took over are the violation this test is about.
    late_old = [(tid, describe([m])[0]) for tid, m in
                published_under_old_epoch(msgs, vslots, seen)]
    p.check(not late_old, "%d message(s) published under the stopped "
            "worker's old epoch after the takeover, e.g. %s"
            % (len(late_old), late_old[:5]))
    if EOS:
        p.check(dups == 0, "exactly-once: %s: %d duplicates (want 0), e.g. "
                "%s" % (what, dups, [t for t, ms in msgs.items()
                                     if len(ms) > 1][:5]))
    m = h.metrics(victim.addr, labelled=True)
    lines = [l for l in victim.grep("msg=") if any(
        x in l for x in ("claiming stopped", "session", "registered",
                         "slot lost", "fenced", "master", "assignment"))]
    print("# %s: victim=%s stopped_ms=%d taken_over_ms=%d back_owning_ms=%d"
          " tasks=%d duplicates=%d fenced_writes=%d"
          % ("sigstop-master" if master else "sigstop", victim.wid,
             cont_ms - stop_ms, taken_ms, back_ms, len(msgs), dups,
             m.get("prophet_fenced_writes_total", 0) - fenced0), flush=True)
    for l in lines[-8:]:
        h.log("  " + l[:220])
    p.raise_if_any(what)
    check_fencing(SAMPLER, msgs, since, what)


def test_sigstop_past_session_timeout():
    ensure_four()
    sigstop_case(master=False)


def test_sigstop_master_past_session_timeout():
    ensure_four()
    sigstop_case(master=True)


def test_master_kill9():
    ensure_four()
    all4 = C.workers[:4]
    st = wait_settled(C, all4, what="before the master kill")
    old = st["master"]["id"]
    mw = find_worker(old)
    mslots = owned_by(st, old)
    since = h.now_ms()
    stream = Stream(C, "mk").start()
    time.sleep(1.5)
    kill_ms = h.now_ms()
    mw.kill()
    others = [w for w in all4 if w is not mw]

    def elected():
        s = zk_state()
        if s["master"] and s["master"]["id"] != old:
            return s
        return None
    se = h.wait_until(elected, SESSION_MS / 1000.0 + 10, 0.05,
                      "a new master")
    p = h.Problems()
    new = se["master"]["id"]
    p.check(new in [w.wid for w in others], "new master %s is not a live "
            "worker" % new)
    p.check(se["master_session"] == se["workers"].get(new, {}).get(
        "session"), "/master not held by %s's session" % new)
    st2 = wait_settled(C, others, what="after the master kill")
    p.check(st2["master"]["id"] == new, "master moved again: %s"
            % st2["master"])
    p.check(sorted(counts(st2).values()) == [5, 5, 6], "counts %s"
            % counts(st2))
    for i, e in mslots.items():
        p.check(st2["slots"][i]["epoch"] == e + 1, "slot %d of the dead "
                "master: epoch %d -> %d" % (i, e, st2["slots"][i]["epoch"]))
    reassigned = max(st2["slots"][i]["mtime"] for i in mslots) - kill_ms
    elected_ms = se["master_ctime"] - kill_ms
    C.start_worker(mw)
    st3 = wait_settled(C, all4, what="old master back")
    p.check(st3["master"]["id"] == new, "master changed to %s when the old "
            "master rejoined" % st3["master"]["id"])
    time.sleep(1.0)
    stream.stop()
    msgs, dups = account(stream, READER, "master kill")
    print("# master-failover: old=%s new=%s elected_ms=%d reassigned_ms=%d "
          "tasks=%d duplicates=%d" % (old, new, elected_ms, reassigned,
                                      len(msgs), dups), flush=True)
    if EOS:
        p.check(dups == 0, "exactly-once: master kill -9: %d duplicates "
                "(want 0)" % dups)
    p.raise_if_any("master kill -9")
    check_fencing(SAMPLER, msgs, since, "master kill")


def test_zookeeper_restart():
    zk = h.PrivateZooKeeper(name="coord-zk").start()
    failed = True
    c = None
    try:
        c = h.Cluster(workers=2, name="coordzk", slots=SLOTS,
                      zk_hosts=zk.hosts,
                      conf={"zookeeper.session_timeout_ms": 10000,
                            "worker.lease_ms": LEASE_MS}).open()
        c.start()
        h.create_topics(c.brokers, [c.topic(TOPIC)])
        reader = c.reader([TOPIC])
        st = wait_settled(c, c.workers, what="private zookeeper")
        sampler = Sampler(c).start()
        stream = Stream(c, "zk", rate=100).start()
        time.sleep(2.0)
        t_stop = h.now_ms()
        zk.stop()
        time.sleep(2.5)
        zk.start()
        t_up = h.now_ms()
        st2 = wait_settled(c, c.workers, timeout=30, what="after the "
                           "ZooKeeper restart")
        t_settled = h.now_ms()
        p = h.Problems()
        kept = {wid: st2["workers"][wid]["session"] ==
                st["workers"][wid]["session"] for wid in st["workers"]}
        for a, b in zip(st["slots"], st2["slots"]):
            if a["owner"] == b["owner"]:
                p.check(a["epoch"] == b["epoch"], "slot %d: same owner, "
                        "epoch %d -> %d" % (a["slot"], a["epoch"],
                                            b["epoch"]))
            else:
                p.check(b["epoch"] > a["epoch"], "slot %d: owner %s -> %s "
                        "but epoch %d -> %d" % (a["slot"], a["owner"],
                                                b["owner"], a["epoch"],
                                                b["epoch"]))
        changed = sum(1 for a, b in zip(st["slots"], st2["slots"])
                      if (a["owner"], a["epoch"]) != (b["owner"], b["epoch"]))
        time.sleep(1.5)
        stream.stop()
        msgs, dups = account(stream, reader, "ZooKeeper restart")
        during = sum(1 for ms in msgs.values() for m in ms
                     if t_stop + 200 <= int(m.hdr["prophet-fired-at"])
                     <= t_up)
        p.check(during > 0, "nothing fired while ZooKeeper was down for "
                "%d ms (session 10 s: workers keep their slots)"
                % (t_up - t_stop))
        fenced = {w.wid: h.metrics(w.addr, labelled=True).get(
                      "prophet_self_fenced")
                  for w in c.workers}
        print("# zk-restart: down_ms=%d settled_ms_after_up=%d "
              "sessions_kept=%s slots_changed=%d tasks=%d "
              "fired_while_down=%d duplicates=%d"
              % (t_up - t_stop, t_settled - t_up, kept, changed, len(msgs),
                 during, dups), flush=True)
        for w in c.workers:
            for l in [l for l in w.grep("msg=") if "zookeeper" in l or
                      "claiming" in l][-4:]:
                h.log("  %s: %s" % (w.wid, l[:200]))
        check_fencing(sampler, msgs, 0, "ZooKeeper restart")
        sampler.stop()
        p.check(all(v == 0 for v in fenced.values()), "self-fenced: %s"
                % fenced)
        p.raise_if_any("ZooKeeper restart")
        failed = False
    finally:
        if c is not None:
            if failed:
                c.dump_logs(20)
            c.close(failed=failed)
        if failed:
            h.log("---- tail of private zookeeper ----")
            for l in zk.proc.tail(15):
                h.log("  " + l)
        zk.close(failed=failed)


def test_duplicate_worker_id():
    ensure_four()
    all4 = C.workers[:4]
    st = wait_settled(C, all4, what="before the duplicate")
    target = non_master(st)[0]
    session = st["workers"][target.wid]["session"]
    port = h.free_port()
    dup = h.Proc(target.wid + "-dup",
                 [h.WORKER_BIN, "-c", C.conf_path,
                  "--set", "worker.id=" + target.wid,
                  "--set", "worker.http_listen=127.0.0.1:%d" % port],
                 os.path.join(C.dir, "duplicate.log"))
    t0 = time.monotonic()
    dup.start()
    limit = SESSION_MS / 1000.0 + 5
    rc = dup.wait(limit + 10)
    took = time.monotonic() - t0
    if rc is None:
        dup.kill()
    tail = dup.tail(5)
    p = h.Problems()
    p.check(rc is not None and rc != 0, "a second worker with id %s: exit "
            "%s after %.1fs (want non-zero); log: %s" % (target.wid, rc,
                                                         took, tail))
    p.check(took <= limit + 3, "the duplicate took %.1fs to give up (want "
            "<= session timeout + 5 s = %.0fs)" % (took, limit))
    p.check(any(target.wid in l and ("already" in l or "duplicate" in l or
                                     "registered" in l) for l in tail),
            "its message does not name the id %s: %s" % (target.wid, tail))
    st2 = wait_settled(C, all4, what="after the duplicate")
    p.check(st2["workers"][target.wid]["session"] == session,
            "the live worker %s lost its registration" % target.wid)
    print("# duplicate-id: exit %s after %.1fs: %s" % (
        rc, took, (tail[-1] if tail else "")[:200]), flush=True)

    # Restart right after kill -9 with the same id: waits, then starts.
    victim = non_master(st2, exclude=[target.wid])[0]
    victim.kill()
    t0 = time.monotonic()
    try:
        C.start_worker(victim, timeout=SESSION_MS / 1000.0 + 20)
    except h.TestFailure as e:
        p.add("restart of %s right after kill -9 failed: %s; log: %s"
              % (victim.wid, e, victim.tail(3)))
    took2 = time.monotonic() - t0
    waited = victim.grep("waiting for it to expire")
    print("# restart-after-kill: %s ready after %.1fs (session timeout "
          "%.1fs), waited for the old session: %s"
          % (victim.wid, took2, SESSION_MS / 1000.0, bool(waited)),
          flush=True)
    p.raise_if_any("duplicate worker id")
    wait_settled(C, all4, what="after the restart")


def test_manager_slot_count_mismatch():
    port = h.free_port()
    m = h.Proc("manager-slots8",
               [h.MANAGER_BIN, "-c", C.conf_path, "--set", "cluster.slots=8",
                "--set", "http.listen=127.0.0.1:%d" % port],
               os.path.join(C.dir, "manager-slots8.log"))
    m.start()
    rc = m.wait(30)
    if rc is None:
        m.kill()
    tail = m.tail(5)
    h.check(rc is not None and rc != 0, "manager with cluster.slots=8 on a "
            "16-slot cluster: exit %s; log: %s" % (rc, tail))
    h.check(any("slots" in l for l in tail), "no message about slots: %s"
            % tail)
    z = C.zk()
    try:
        cfg = json.loads(z.get(C.zk_root + "/config"))
    finally:
        z.close()
    h.check(cfg.get("slots") == SLOTS, "/config changed: %s" % cfg)
    print("# slots-mismatch (manager): exit %d: %s" % (rc, tail[-1][:200]),
          flush=True)


def test_worker_slot_count_mismatch():
    """operations.md: 'a manager or worker configured with a different
    cluster.slots refuses to start'."""
    ensure_four()
    port = h.free_port()
    wid = "wslots8-" + C.tag
    w = h.Proc(wid, [h.WORKER_BIN, "-c", C.conf_path,
                     "--set", "cluster.slots=8", "--set", "worker.id=" + wid,
                     "--set", "worker.http_listen=127.0.0.1:%d" % port],
               os.path.join(C.dir, "worker-slots8.log"))
    w.start()
    rc = w.wait(SESSION_MS / 1000.0 + 8)
    given = {}
    if rc is None:
        # Still running: what did the cluster hand it?
        given = owned_by(zk_state(), wid)
        w.stop()
    tail = w.tail(5)
    try:
        h.check(rc is not None and rc != 0, "worker with cluster.slots=8 on "
                "a 16-slot cluster did not refuse to start (still running "
                "after %.0f s); it was handed slots %s (those >= 8 it does "
                "not see, so nobody scanned them); log: %s"
                % (SESSION_MS / 1000.0 + 8, sorted(given), tail))
        h.check(any("slots" in l for l in tail), "no message about slots: "
                "%s" % tail)
        print("# slots-mismatch (worker): exit %d: %s"
              % (rc, tail[-1][:200]), flush=True)
    finally:
        # Whatever it did, the cluster must be whole again.
        wait_settled(C, C.workers[:4], timeout=30, what="after the "
                     "mismatched worker")


def cleanup(failed):
    if SAMPLER is not None:
        SAMPLER.stop()
    if C is not None:
        C.close(failed=failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs(25) if C is not None else None)


if __name__ == "__main__":
    main()
