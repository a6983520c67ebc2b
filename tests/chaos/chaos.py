#!/usr/bin/python3
"""Chaos runner: random faults from a seeded schedule under a steady stream
of tasks, then a ledger of everything (Python 3 stdlib only).

    tests/chaos/chaos.py --duration 30m --seed 42 [--json out.json]
    make chaos DURATION=30m SEED=42          (from a build directory)

It runs, on private servers it may restart (tests/integ/servers.py), a
cluster of 3 workers and 2 managers: ZooKeeper, Redis (no persistence:
restarts come back EMPTY), MariaDB and a one-node Kafka. Worker w3 reaches
ZooKeeper through a TCP proxy of the runner (the "network cut"); worker w2
runs under libfaketime (the "clock jump": its wall clock goes back or
forwards, its monotonic clock is not faked). A stream of one-shot tasks (due 0.3-4 s
ahead; ~8 % due later and cancelled through the API after a moment) is
load-balanced over the two managers (the other one takes over on a
connection error). A Kafka reader follows the output all along.

Faults, one at a time, each followed by a quiet gap (seeded: kind, victim,
length, gap; the first round covers every kind once in a seeded order, and completes
even past --duration when its faults take longer):
  worker_kill    kill -9 of a non-master worker, restarted 1-4 s later
  master_kill    kill -9 of the master, restarted 2 s later
  worker_stop    SIGSTOP of a non-master for 1-2x the session timeout
  master_stop    the same for the master
  manager_kill   kill -9 of one manager, restarted 2-5 s later
  zk_restart     ZooKeeper stopped 1-4 s and restarted (data kept)
  redis_restart  Redis killed and restarted EMPTY after 0.5-3 s
  kafka_restart  Kafka stopped and restarted (log kept)
  db_restart     MariaDB stopped 2-6 s and restarted (submissions get 503)
  zk_cut         w3's connection to ZooKeeper blackholed 2-12 s, then healed
  clock_jump     w2's wall clock set 5-30 s back or forwards for 8-15 s,
                 then restored
  notifier_kill  kill -9 of the notifier (only with --notifier, see below)

The ledger (after healing everything and waiting for the last due task):
accepted, delivered, LOST (must be 0), cancelled-but-published (0),
published before due (0: by the worker's prophet-fired-at header and by the
runner's receive time), duplicates with their cause (the fault that started
nearest the first copy, among those whose window reaches the copies),
lateness percentiles of tasks due outside fault windows (and after the
first 5 s of warm-up), ownership samples
(ZooKeeper slot nodes and every worker's prophet_slot_epoch gauge) with two
owners of one slot at one epoch (0), messages published under an epoch
after ZooKeeper held a higher one for the slot (0; prophet-fired-at against
the node's mtime), and the DB status of every accepted
task (all delivered or cancelled). Printed as a table; --json writes it all.
Exit status 0 iff every must-be-0 figure is 0.

Notifier: --notifier BIN (prophet-notifier; test_chaos.py passes the
build's) starts BIN -c <conf> as one more supervised daemon and adds notifier_kill
to the faults; --callback-fraction F gives that fraction of the tasks a
callback to an HTTP sink of the runner, and the ledger then counts the
callbacks received per task (missing ones count as lost callbacks). See
NOTIFIER HOOK below.
"""

import argparse
import http.server
import json
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integ"))
import harness as h  # noqa: E402
import servers as s  # noqa: E402

SESSION_MS = 5000
LEASE_MS = 2000
TOPIC = "chaos"
ARCHIVE = "chaos.archive"  # task.archive_topic with --retention
READ_COMMITTED = ["-X", "isolation.level=read_committed"]
FINAL = ("delivered", "cancelled", "expired")
# After a fault ends, the system may still be recovering for this long
# (session expiry + lease + a margin); lateness inside is not counted.
RECOVERY_MS = SESSION_MS + LEASE_MS + 5000
WARMUP_MS = 5000
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

ALL_FAULTS = ["worker_kill", "master_kill", "worker_stop", "master_stop",
              "manager_kill", "zk_restart", "redis_restart", "kafka_restart",
              "db_restart", "zk_cut", "clock_jump"]
# --ha: on the replicated dev cluster (scripts/devcluster up --ha) the
# single-server restarts give way to the faults of replicated servers.
HA_FAULTS = ["worker_kill", "master_kill", "worker_stop", "master_stop",
             "manager_kill", "db_restart", "zk_cut", "clock_jump",
             "manager_clock_jump", "zk_leader_kill", "zk_follower_kill",
             "kafka_leader_kill", "kafka_controller_kill",
             "kafka_broker_stop", "kafka_two_down", "redis_failover",
             "redis_primary_kill"]
HA_SESSION_MS = 10000  # the --ha cluster's own prophet.conf value


def log(msg):
    sys.stdout.write("# [%7.1fs] %s\n" % (time.monotonic() - T0, msg))
    sys.stdout.flush()


T0 = time.monotonic()


def parse_duration(v):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", v.strip())
    if not m:
        raise argparse.ArgumentTypeError("duration like 150s, 30m, 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[
        m.group(2)]


# ------------------------------------------------------------ processes ---

class EnvProc(h.Proc):
    """harness.Proc with extra environment variables for the child."""

    def __init__(self, name, argv, log_path, env=None):
        super().__init__(name, argv, log_path)
        self.env = dict(env or {})

    def start(self):
        if self.running():
            raise h.TestFailure("%s is already running" % self.name)
        self.starts += 1
        f = open(self.log_path, "ab")
        f.write(("=== chaos: start #%d at %d: %s\n"
                 % (self.starts, h.now_ms(), " ".join(self.argv))).encode())
        f.flush()
        argv = self.argv
        if h._SETPRIV:
            argv = [h._SETPRIV, "--pdeathsig", "KILL", "--"] + argv
        env = dict(os.environ)
        env.pop("PROPHET_CRASH_AT", None)
        env.update(self.env)
        self.popen = subprocess.Popen(argv, stdout=f,
                                      stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env)
        f.close()
        return self


class ZKProxy:
    """A TCP proxy in front of ZooKeeper for one worker. cut() blackholes
    the traffic (connections stay open, bytes are dropped, new connections
    are held), so the session expires on the server as in a partition;
    heal() closes every connection and forwards again."""

    def __init__(self, upstream_port):
        self.upstream = ("127.0.0.1", upstream_port)
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.hosts = "127.0.0.1:%d" % self.port
        self.cut_flag = False
        self.lock = threading.Lock()
        self.conns = []
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closing:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._pair, args=(c,),
                             daemon=True).start()

    def _pair(self, c):
        while self.cut_flag and not self.closing:
            time.sleep(0.1)  # held: the client sees a silent server
        try:
            u = socket.create_connection(self.upstream, timeout=2)
        except OSError:
            c.close()
            return
        with self.lock:
            self.conns.append((c, u))
        socks = [c, u]
        try:
            while not self.closing:
                r, _, _ = select.select(socks, [], [], 0.5)
                for x in r:
                    data = x.recv(65536)
                    if not data:
                        raise OSError("closed")
                    if not self.cut_flag:
                        (u if x is c else c).sendall(data)
        except OSError:
            pass
        finally:
            for x in (c, u):
                try:
                    x.close()
                except OSError:
                    pass
            with self.lock:
                if (c, u) in self.conns:
                    self.conns.remove((c, u))

    def cut(self):
        self.cut_flag = True

    def heal(self):
        with self.lock:
            conns = list(self.conns)
        for c, u in conns:
            for x in (c, u):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self.cut_flag = False

    def close(self):
        self.closing = True
        self.heal()
        self.lsock.close()


# ---------------------------------------------------------------- stream ---

class IngestStream:
    """--ha: tasks through the managers' Kafka ingest topic as well (both
    managers in its consumer group), `rate`/s in batches every 0.5 s, each
    produced with kcat (acks=all). A batch kcat confirms (exit 0) is
    accepted; one it does not may or may not be there, as an unanswered
    POST (the ledger looks those up in the DB). Recorded in the stream's
    own tables, so the ledger treats both alike."""

    def __init__(self, run, stream, topic, rate):
        self.run, self.st, self.topic, self.rate = run, stream, topic, rate
        self.stopping = False
        self.sent = 0
        self.th = None

    def start(self):
        self.th = threading.Thread(target=self._loop, daemon=True)
        self.th.start()
        return self

    def _loop(self):
        rng = random.Random(self.run.seed * 7919)
        n, t = 0, time.monotonic()
        while not self.stopping:
            k = max(1, int(self.rate / 2))
            batch, ids = [], {}
            now = h.now_ms()
            for _ in range(k):
                tid = "i%d-%07d" % (self.run.seed, n)
                n += 1
                due = now + rng.randint(1000, 4000)
                batch.append(json.dumps({"id": tid, "topic": TOPIC,
                                         "body": "ingest " + tid,
                                         "due_at": due}))
                ids[tid] = due
            with self.st.lock:
                self.st.submitted += len(ids)
            try:
                p = subprocess.run(
                    ["kcat", "-P", "-b", self.run.c.brokers, "-t",
                     self.topic, "-X", "message.timeout.ms=30000"],
                    input="\n".join(batch) + "\n", text=True,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    timeout=60)
                ok = p.returncode == 0
            except subprocess.TimeoutExpired:
                ok = False
            with self.st.lock:
                if ok:
                    self.st.accepted.update(ids)
                else:
                    self.st.unknown.update(ids)
            self.sent += len(ids)
            t += 0.5
            d = t - time.monotonic()
            if d > 0:
                time.sleep(d)

    def stop(self):
        self.stopping = True
        if self.th is not None:
            self.th.join(timeout=90)


class Stream:
    """Submits one-shot tasks at `rate`/s over the managers (round-robin;
    the other manager on a connection error), cancels some."""

    def __init__(self, run, rate, threads=4, cancel_fraction=0.08,
                 callback_fraction=0.0, callback_url=None):
        self.run, self.rate, self.threads = run, rate, threads
        self.cancel_fraction = cancel_fraction
        self.callback_fraction = callback_fraction
        self.callback_url = callback_url
        self.lock = threading.Lock()
        self.accepted = {}      # id -> due_at
        self.with_callback = set()
        self.refused = {}       # id -> status
        self.unknown = set()    # no answer from either manager
        self.cancel_ok = set()  # DELETE answered 200
        self.cancel_late = set()  # 409: already firing/delivered
        self.cancel_unknown = set()
        self.cancel_other = {}  # status (or "no answer") -> count
        self.to_cancel = []     # (at monotonic, id)
        self.submitted = 0
        self.stopping = False
        self.ths = []

    def start(self):
        self.t0 = time.monotonic()
        for k in range(self.threads):
            th = threading.Thread(target=self._submit, args=(k,),
                                  daemon=True)
            th.start()
            self.ths.append(th)
        th = threading.Thread(target=self._cancel, daemon=True)
        th.start()
        self.ths.append(th)
        return self

    def _apis(self):
        return [h.Api(a, timeout=15) for a in self.run.manager_addrs]

    def _call(self, apis, first, method, path, body=None):
        """(status, json) from the first manager that answers, or None."""
        for j in range(len(apis)):
            api = apis[(first + j) % len(apis)]
            try:
                r = api.request(method, path, body)
                if r.status in (502, 504):
                    continue
                return r
            except Exception:
                api.close()
        return None

    def _submit(self, k):
        apis = self._apis()
        rng = random.Random(self.run.seed * 1000 + k)
        n = k
        while not self.stopping:
            wait = self.t0 + n / float(self.rate) - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            tid = "c%d-%07d" % (self.run.seed, n)
            cancel = rng.random() < self.cancel_fraction
            t = {"id": tid, "topic": TOPIC, "body": "chaos " + tid,
                 "delay_ms": rng.randint(4000, 8000) if cancel
                 else rng.randint(300, 4000)}
            cb = rng.random() < self.callback_fraction
            if cb:
                t["callback"] = {"url": "%s/cb/%s" % (self.callback_url,
                                                      tid),
                                 "method": "POST", "timeout_ms": 2000}
            with self.lock:
                self.submitted += 1
            r = self._call(apis, n, "POST", "/v1/tasks", t)
            with self.lock:
                if r is None:
                    self.unknown.add(tid)
                elif r.status in (200, 201) and r.json:
                    self.accepted[tid] = int(r.json["due_at"])
                    if cb:
                        self.with_callback.add(tid)
                    if cancel:
                        self.to_cancel.append(
                            (time.monotonic() + rng.uniform(0.3, 2.0), tid))
                else:
                    self.refused[tid] = r.status
            n += self.threads
        for a in apis:
            a.close()

    def _cancel(self):
        apis = self._apis()
        n = 0
        while not self.stopping:
            with self.lock:
                now = time.monotonic()
                due = [x for x in self.to_cancel if x[0] <= now]
                self.to_cancel = [x for x in self.to_cancel if x[0] > now]
            for _, tid in due:
                n += 1
                r = self._call(apis, n, "DELETE", "/v1/tasks/" + tid)
                with self.lock:
                    if r is not None and r.status == 200:
                        self.cancel_ok.add(tid)
                    elif r is not None and r.status == 409:
                        self.cancel_late.add(tid)
                    else:
                        self.cancel_unknown.add(tid)
                        k = str(r.status) if r is not None else "no answer"
                        self.cancel_other[k] = self.cancel_other.get(k, 0) + 1
            time.sleep(0.05)
        for a in apis:
            a.close()

    def stop(self):
        self.stopping = True
        for th in self.ths:
            th.join(60)


# ------------------------------------------------------------- samplers ---

class OwnerSampler:
    """Every `interval` s: the slot nodes in ZooKeeper and every running
    worker's prophet_slot_epoch gauge. Keeps (slot, epoch) -> owners."""

    GAUGE = re.compile(r'^prophet_slot_epoch\{slot="(\d+)"\}\s+(\S+)$', re.M)

    def __init__(self, run, interval=0.5):
        self.run = run
        self.interval = interval
        self.zk_owners = {}
        self.zk_written = {}   # (slot, epoch) -> mtime of the first sample
        self.worker_owners = {}
        self.zk_samples = 0
        self.worker_samples = 0
        self.errors = 0
        self.stopping = False
        self.zk = None
        self.th = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self.th.start()
        return self

    def stop(self):
        self.stopping = True
        self.th.join(10)

    def _zk_sample(self):
        run = self.run
        if self.zk is None:
            self.zk = h.ZK(run.zk.hosts, timeout_ms=4000)
        for i in range(run.c.slots):
            data, stat = self.zk.get_stat("%s/work_slot/ws_%d"
                                          % (run.c.zk_root, i))
            if data is None:
                continue
            j = json.loads(data)
            self.zk_written.setdefault((i, j.get("epoch")), stat["mtime"])
            if j.get("owner"):
                self.zk_owners.setdefault((i, j.get("epoch")),
                                          set()).add(j["owner"])
        self.zk_samples += 1

    def _worker_sample(self, w):
        api = h.Api(w.addr, timeout=1)
        try:
            text = api.get("/metrics").text
        finally:
            api.close()
        for slot, v in self.GAUGE.findall(text):
            e = int(float(v))
            if e > 0:
                self.worker_owners.setdefault((int(slot), e),
                                              set()).add(w.wid)
        self.worker_samples += 1

    def _loop(self):
        while not self.stopping:
            t0 = time.monotonic()
            try:
                self._zk_sample()
            except (OSError, RuntimeError, struct.error, ValueError):
                self.errors += 1
                try:
                    if self.zk is not None:
                        self.zk.close()
                except OSError:
                    pass
                self.zk = None
            for w in self.run.c.workers:
                if w.running() and w not in self.run.paused:
                    try:
                        self._worker_sample(w)
                    except (OSError, ValueError, AttributeError):
                        self.errors += 1
            time.sleep(max(0.0, self.interval - (time.monotonic() - t0)))

    def superseded_at(self, slot, epoch):
        """When ZooKeeper first held a higher epoch for slot (the node's
        mtime, server clock), or None."""
        ts = [t for (sl, e), t in list(self.zk_written.items())
              if sl == slot and e is not None and e > epoch]
        return min(ts) if ts else None

    def two_owners(self):
        out = []
        for src, d in (("zookeeper", self.zk_owners),
                       ("workers", self.worker_owners)):
            for (slot, epoch), owners in sorted(d.items()):
                if len(owners) > 1:
                    out.append({"source": src, "slot": slot, "epoch": epoch,
                                "owners": sorted(owners)})
        return out


# ------------------------------------------------- NOTIFIER HOOK (sink) ---

class CallbackSink:
    """Receives the HTTP callbacks of tasks (POST /cb/<id>) and counts
    them per id. Used only with --callback-fraction; the notifier that
    performs them is started with --notifier (prophet-notifier)."""

    def __init__(self):
        sink = self
        self.lock = threading.Lock()
        self.got = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(min(n, 1 << 20))
                tid = self.path.rsplit("/", 1)[-1]
                with sink.lock:
                    sink.got[tid] = sink.got.get(tid, 0) + 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_PUT = do_POST
            do_GET = do_POST

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()


class ZKHosts:
    """The ensemble's connect string, where the runner wants .hosts."""

    def __init__(self, hosts):
        self.hosts = hosts


class ZKProxies:
    """One ZKProxy per server of an ensemble, cut and healed together:
    the worker behind them is cut from the whole quorum."""

    def __init__(self, ports):
        self.proxies = [ZKProxy(p) for p in ports]
        self.hosts = ",".join(x.hosts for x in self.proxies)

    def cut(self):
        for x in self.proxies:
            x.cut()

    def heal(self):
        for x in self.proxies:
            x.heal()

    def close(self):
        for x in self.proxies:
            x.close()


class HAServers:
    """The replicated dev cluster's processes (scripts/devcluster up --ha,
    by their pid files): killed or stopped here, brought back by `up`,
    which starts whatever is not running and waits until it serves."""

    def __init__(self, env):
        self.run = h.HA_RUN_DIR
        self.env = env
        self.zk_ports = [int(x.rsplit(":", 1)[1])
                         for x in env["PROPHET_ZK"].split(",")]
        self.brokers = env["PROPHET_KAFKA_BROKERS"]

    def pid(self, name):
        try:
            with open(os.path.join(self.run, name + ".pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def alive(self, name):
        pid = self.pid(name)
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False

    def kill(self, name, sig=signal.SIGKILL, wait_s=30):
        pid = self.pid(name)
        if pid is None:
            raise h.TestFailure("%s: no pid file in %s" % (name, self.run))
        os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while self.alive(name) and time.monotonic() < deadline:
            time.sleep(0.1)

    def signal(self, name, sig):
        pid = self.pid(name)
        if pid is not None:
            os.kill(pid, sig)

    def up(self):
        p = h.ha_devcluster()
        if p.returncode != 0:
            log("devcluster up --ha failed:\n" + p.stdout[-2000:])
            raise h.TestFailure("scripts/devcluster up --ha failed")

    def zk_mode(self, i):
        for _ in range(3):
            try:
                with socket.create_connection(("127.0.0.1",
                                               self.zk_ports[i - 1]), 2) as c:
                    c.sendall(b"srvr")
                    data = b""
                    while True:
                        b = c.recv(4096)
                        if not b:
                            break
                        data += b
                m = re.search(rb"Mode: (\w+)", data)
                if m:
                    return m.group(1).decode()
            except OSError:
                pass
        return None

    def zk_pick(self, leader):
        modes = {i: self.zk_mode(i) for i in (1, 2, 3)}
        want = "leader" if leader else "follower"
        cands = [i for i, m in modes.items() if m == want]
        return ("zookeeper%d" % cands[0]) if cands else None, modes

    def kafka_leader(self, topic, partition):
        p = subprocess.run(["kcat", "-L", "-b", self.brokers, "-t", topic,
                            "-J"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=30)
        try:
            md = json.loads(p.stdout)
            for t in md.get("topics", []):
                for pa in t.get("partitions", []):
                    if pa.get("partition") == partition:
                        return pa.get("leader")
        except ValueError:
            pass
        return None

    def kafka_controller(self):
        """The node id of the active KRaft controller (the quorum's
        leader, by Kafka's MetadataQuorumCommand), or None."""
        p = subprocess.run(
            ["java", "-Xmx128m", "-XX:+UseSerialGC",
             "-XX:TieredStopAtLevel=1", "-cp",
             s.kafka_classpath(s.kafka_dir()),
             "org.apache.kafka.tools.MetadataQuorumCommand",
             "--bootstrap-server", self.brokers, "describe", "--status"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            timeout=60)
        m = re.search(r"^LeaderId:\s+(\d+)", p.stdout, re.M)
        return int(m.group(1)) if m else None

    def redis_primary_port(self):
        return h.sentinel_primary(self.env["PROPHET_REDIS_SENTINELS"],
                                  self.env["PROPHET_REDIS_MASTER_NAME"])[1]

    def redis_name(self, port):
        # devcluster: redis starts as the primary (its port), the
        # replica on the next port
        base = int(self.env["PROPHET_REDIS_URL"].rsplit(":", 1)[1]
                   .split("/")[0])
        return "redis" if port == base else "redis-replica"

    def sentinel_cmd(self, *args):
        last = None
        for hp in self.env["PROPHET_REDIS_SENTINELS"].split(","):
            host, port = hp.rsplit(":", 1)
            try:
                r = h.Redis(host, int(port), timeout=5)
                try:
                    return r.cmd(*args)
                finally:
                    r.close()
            except (OSError, h.TestFailure) as e:
                last = e
        raise h.TestFailure("no Sentinel answered %s: %r" % (args, last))

    def wait_primary_change(self, old, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.redis_primary_port() != old:
                    return True
            except h.TestFailure:
                pass
            time.sleep(0.2)
        return False


# ------------------------------------------------------------------ run ---

class Run:
    def __init__(self, args):
        self.args = args
        self.seed = args.seed
        self.rng = random.Random(args.seed)
        self.faults = []      # dicts: kind, victim, start, end (ms), note
        self.paused = set()
        self.servers = {}
        self.c = None
        self.zk = None
        self.proxy = None
        self.clock_file = None
        self.notifier = None
        self.sink = None
        self.failed = True
        self.ha = args.ha
        self.hasrv = None
        self.manager_clock_file = None
        if self.ha:
            global SESSION_MS, RECOVERY_MS
            SESSION_MS = HA_SESSION_MS
            RECOVERY_MS = SESSION_MS + LEASE_MS + 5000

    # -- setup -------------------------------------------------------------
    def setup(self):
        if self.ha:
            return self.setup_ha()
        log("starting private ZooKeeper, Redis, MariaDB, Kafka")
        self.zk = h.PrivateZooKeeper(name="chaos-zookeeper")
        rd, db, kf = s.PrivateRedis(), s.PrivateMariaDB(), s.PrivateKafka()
        self.servers = {"redis": rd, "db": db, "kafka": kf}
        for x in (rd, db, kf):
            x.start_async()
        self.zk.start()
        for x in (rd, db, kf):
            x.wait_ready()
        conf = {"zookeeper.session_timeout_ms": SESSION_MS,
                "worker.lease_ms": LEASE_MS}
        if self.args.exactly_once:
            conf["kafka.exactly_once"] = "true"
        if self.args.retention:
            # Both managers prune (one at a time, the lock) and archive
            # each task first: the archive shows what went, and when.
            conf.update({"task.retention": self.args.retention,
                         "task.prune_interval": "1s",
                         "task.prune_chunk": 50,
                         "task.archive_topic": ARCHIVE})
        self.c = s.Cluster(workers=0, name="chaos", redis=rd, db=db,
                           kafka=kf, zk_hosts=self.zk.hosts,
                           conf=conf).open()
        self.proxy = ZKProxy(self.zk.port)
        self.daemons()

    def setup_ha(self):
        """--ha: the replicated dev cluster's servers (started or adopted
        by scripts/devcluster up --ha); its session timeout (10 s) lets a
        ZooKeeper election pass without fencing."""
        log("replicated servers: scripts/devcluster up --ha")
        env = h.ensure_ha_cluster()
        self.hasrv = HAServers(env)
        conf = {"zookeeper.session_timeout_ms": HA_SESSION_MS,
                "worker.lease_ms": LEASE_MS,
                # both managers consume it (IngestStream); made by them
                "kafka.ingest_topic": "chaos-ha-ingest.%d.%d" % (
                    self.seed, os.getpid())}
        if self.args.exactly_once:
            conf["kafka.exactly_once"] = "true"
        if self.args.retention:
            conf.update({"task.retention": self.args.retention,
                         "task.prune_interval": "1s",
                         "task.prune_chunk": 50,
                         "task.archive_topic": ARCHIVE})
        self.c = h.Cluster(workers=0, name="chaos-ha", ha=True,
                           conf=conf).open()
        self.zk = ZKHosts(env["PROPHET_ZK"])
        self.proxy = ZKProxies(self.hasrv.zk_ports)
        self.daemons()

    def daemons(self):
        """3 workers (w2 under libfaketime, w3 behind the ZooKeeper
        proxy), 2 managers (the second under libfaketime too), the
        notifier if asked for, the task topics and the reader."""
        c = self.c
        self.clock_file = os.path.join(c.dir, "faketime")
        self.manager_clock_file = os.path.join(c.dir, "faketime-manager2")
        with open(self.manager_clock_file, "w") as f:
            f.write("+0\n")
        with open(self.clock_file, "w") as f:
            f.write("+0\n")
        for i in range(1, 4):
            port = h.free_port()
            wid = "w%d-%s" % (i, c.tag)
            argv = [h.WORKER_BIN, "-c", c.conf_path,
                    "--set", "worker.id=" + wid,
                    "--set", "worker.http_listen=127.0.0.1:%d" % port]
            env = {}
            if i == 3:
                argv += ["--set", "zookeeper.hosts=" + self.proxy.hosts]
            if i == 2:
                env = {"LD_PRELOAD": FAKETIME_LIB,
                       "FAKETIME_TIMESTAMP_FILE": self.clock_file,
                       "FAKETIME_CACHE_DURATION": "1",
                       "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
            p = EnvProc(wid, argv, os.path.join(c.dir, "worker%d.log" % i),
                        env)
            p.wid, p.addr = wid, "127.0.0.1:%d" % port
            c.workers.append(p)
        port2 = h.free_port()
        self.manager2 = EnvProc("manager2", [
            h.MANAGER_BIN, "-c", c.conf_path,
            "--set", "http.listen=127.0.0.1:%d" % port2],
            os.path.join(c.dir, "manager2.log"),
            {"LD_PRELOAD": FAKETIME_LIB,
             "FAKETIME_TIMESTAMP_FILE": self.manager_clock_file,
             "FAKETIME_CACHE_DURATION": "1",
             "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
            if self.ha else None)
        self.manager2.addr = "127.0.0.1:%d" % port2
        c.manager.addr = c.manager_addr
        self.managers = [c.manager, self.manager2]
        self.manager_addrs = [m.addr for m in self.managers]
        c.start_manager()
        self.start_manager(self.manager2)
        c.start_workers()
        # NOTIFIER HOOK: prophet-notifier (--notifier or
        # PROPHET_NOTIFIER_BIN), started like the other daemons; its kill
        # joins the faults.
        topics = [TOPIC]
        if self.args.notifier:
            # Its topics exist before it subscribes; a killed member's
            # partitions move after 6 s (librdkafka's default is 45 s).
            topics += ["prophet.callback-retry", "prophet.callback-dead"]
            self.make_topics([c.topic(t) for t in topics])
            nport = h.free_port()
            self.notifier = EnvProc("notifier", [
                self.args.notifier, "-c", c.conf_path,
                "--set", "notifier.topics=" + TOPIC,
                "--set", "notifier.group=prophet-notifier-" + c.tag,
                "--set", "notifier.http_listen=127.0.0.1:%d" % nport,
                "--set", "notifier.manager_url=http://" + c.manager_addr,
                # the callback sink is on loopback, refused by default
                "--set", "notifier.callback_networks_allowed=127.0.0.0/8",
                "--set", "kafka.consumer.session.timeout.ms=6000",
                "--set", "kafka.consumer.heartbeat.interval.ms=1000"],
                os.path.join(c.dir, "notifier.log"))
            self.notifier.addr = "127.0.0.1:%d" % nport
            self.notifier.start()
        if self.args.callback_fraction > 0:
            self.sink = CallbackSink()
        if self.args.retention:
            topics.append(ARCHIVE)
        self.make_topics([c.topic(t) for t in topics])
        # read_committed always: with kafka.exactly_once, the records of
        # an aborted (fenced) transaction are not deliveries; without it
        # the same as read_uncommitted.
        self.reader = c.reader([TOPIC], kcat_args=READ_COMMITTED)
        log("cluster up: 3 workers, 2 managers (%s), logs in %s"
            % (", ".join(self.manager_addrs), c.dir))

    def make_topics(self, topics):
        if self.ha:
            # no auto-creation there: replication 3, min.insync 2
            h.kafka_admin_topics(self.c.brokers, topics)
        else:
            h.create_topics(self.c.brokers, topics)

    def start_manager(self, m, wait=True):
        m.start()
        if wait:
            self.c._wait_http(m, m.addr, "/readyz", 60)

    # -- helpers -----------------------------------------------------------
    def master_id(self):
        try:
            z = h.ZK(self.zk.hosts, timeout_ms=3000)
            try:
                data = z.get(self.c.zk_root + "/master")
            finally:
                z.close()
            return json.loads(data)["id"] if data else None
        except Exception:
            return None

    def worker(self, wid):
        for w in self.c.workers:
            if w.wid == wid:
                return w
        return None

    def pick_worker(self, master):
        mid = self.master_id()
        ws = self.c.workers
        if master:
            w = self.worker(mid) if mid else None
            return w or self.rng.choice(ws)
        cands = [w for w in ws if w.wid != mid] or ws
        return self.rng.choice(cands)

    def heal(self):
        """Everything back up (after a fault, and before the ledger)."""
        for w in list(self.paused):
            w.signal(signal.SIGCONT)
            self.paused.discard(w)
        self.proxy.heal()
        for path in (self.clock_file, self.manager_clock_file):
            if path:
                with open(path, "w") as f:
                    f.write("+0\n")
        if self.ha:
            self.hasrv.up()
        else:
            if not self.zk.proc.running():
                self.zk.start()
            for name, srv in self.servers.items():
                if not srv.running():
                    srv.start()
        for m in self.managers:
            if not m.running():
                self.start_manager(m, wait=False)
        for w in self.c.workers:
            if not w.running():
                w.start()
        if self.notifier is not None and not self.notifier.running():
            self.notifier.start()

    def sleep_until(self, t):
        while time.monotonic() < t:
            time.sleep(min(0.2, max(0.0, t - time.monotonic())))

    # -- faults ------------------------------------------------------------
    def inject(self, kind):
        r = self.rng
        f = {"kind": kind, "start": h.now_ms(), "victim": None, "note": ""}
        if kind in ("worker_kill", "master_kill"):
            w = self.pick_worker(kind == "master_kill")
            f["victim"] = w.wid
            w.kill()
            time.sleep(r.uniform(1, 4) if kind == "worker_kill" else 2)
            w.start()
        elif kind in ("worker_stop", "master_stop"):
            w = self.pick_worker(kind == "master_stop")
            f["victim"] = w.wid
            secs = r.uniform(1.0, 2.0) * SESSION_MS / 1000.0
            f["note"] = "stopped %.1fs" % secs
            w.signal(signal.SIGSTOP)
            self.paused.add(w)
            time.sleep(secs)
            w.signal(signal.SIGCONT)
            self.paused.discard(w)
        elif kind == "manager_kill":
            m = r.choice(self.managers)
            f["victim"] = m.name
            m.kill()
            time.sleep(r.uniform(2, 5))
            self.start_manager(m, wait=False)
        elif kind == "zk_restart":
            secs = r.uniform(1, 4)
            f["note"] = "down %.1fs" % secs
            self.zk.stop()
            time.sleep(secs)
            self.zk.start()
        elif kind == "redis_restart":
            secs = r.uniform(0.5, 3)
            f["note"] = "down %.1fs, back empty" % secs
            self.servers["redis"].kill()
            time.sleep(secs)
            self.servers["redis"].start()
        elif kind == "kafka_restart":
            self.servers["kafka"].stop()
            time.sleep(r.uniform(0.5, 2))
            self.servers["kafka"].start()
        elif kind == "db_restart":
            secs = r.uniform(2, 6)
            f["note"] = "down %.1fs" % secs
            if self.ha:
                self.hasrv.kill("mariadb", signal.SIGTERM, wait_s=60)
                time.sleep(secs)
                self.hasrv.up()
            else:
                self.servers["db"].stop()
                time.sleep(secs)
                self.servers["db"].start()
        elif kind == "zk_cut":
            secs = r.uniform(2, 12)
            f["victim"] = self.c.workers[2].wid
            f["note"] = "cut %.1fs" % secs
            self.proxy.cut()
            time.sleep(secs)
            self.proxy.heal()
        elif kind == "clock_jump":
            # Either way: a jump forwards must not fire anything early
            # (the reference clock, common/refclock.h), one back only
            # delays that worker's tasks.
            by = r.randint(5, 30) * r.choice((-1, 1))
            secs = r.uniform(8, 15)
            f["victim"] = self.c.workers[1].wid
            f["note"] = "wall clock %+ds for %.1fs" % (by, secs)
            with open(self.clock_file, "w") as fh:
                fh.write("%+d\n" % by)
            time.sleep(secs)
            with open(self.clock_file, "w") as fh:
                fh.write("+0\n")
        elif kind == "manager_clock_jump":
            by = r.randint(5, 30) * r.choice((-1, 1))
            secs = r.uniform(8, 15)
            f["victim"] = "manager2"
            f["note"] = "wall clock %+ds for %.1fs" % (by, secs)
            with open(self.manager_clock_file, "w") as fh:
                fh.write("%+d\n" % by)
            time.sleep(secs)
            with open(self.manager_clock_file, "w") as fh:
                fh.write("+0\n")
        elif kind in ("zk_leader_kill", "zk_follower_kill"):
            name, modes = self.hasrv.zk_pick(kind == "zk_leader_kill")
            if name is None:
                f["note"] = "no %s found (modes %s)" % (
                    kind.split("_")[1], modes)
            else:
                f["victim"] = name
                self.hasrv.kill(name)
                down = r.uniform(2, 5)
                time.sleep(down)
                t = time.monotonic()
                self.hasrv.up()
                f["note"] = "down %.1fs, back in %.1fs" % (
                    down, time.monotonic() - t)
        elif kind == "kafka_leader_kill":
            part = r.randrange(4)
            leader = self.hasrv.kafka_leader(self.c.topic(TOPIC), part)
            if leader is None:
                f["note"] = "no leader found for partition %d" % part
            else:
                name = "kafka%d" % leader
                f["victim"] = name
                self.hasrv.kill(name)
                down = r.uniform(2, 5)
                time.sleep(down)
                t = time.monotonic()
                self.hasrv.up()
                f["note"] = "leader of partition %d, down %.1fs, back in " \
                    "%.1fs" % (part, down, time.monotonic() - t)
        elif kind == "kafka_controller_kill":
            # The active controller of the KRaft quorum (each node is
            # broker and controller): kill -9, back after 2-5 s.
            cid = self.hasrv.kafka_controller()
            if cid is None:
                f["note"] = "no active controller found"
            else:
                name = "kafka%d" % cid
                f["victim"] = name
                self.hasrv.kill(name)
                down = r.uniform(2, 5)
                time.sleep(down)
                t = time.monotonic()
                self.hasrv.up()
                f["note"] = "active controller, down %.1fs, back in " \
                    "%.1fs" % (down, time.monotonic() - t)
        elif kind == "kafka_broker_stop":
            name = "kafka%d" % r.randint(1, 3)
            f["victim"] = name
            self.hasrv.kill(name, signal.SIGTERM, wait_s=60)
            time.sleep(60)
            t = time.monotonic()
            self.hasrv.up()
            f["note"] = "stopped 60s, back in %.1fs" % (time.monotonic() - t)
        elif kind == "kafka_two_down":
            # Two of the three brokers (each also a controller) killed:
            # fewer in-sync replicas than min.insync.replicas and no
            # controller quorum. Publishing must wait (the idempotent
            # producer retries), nothing is dropped.
            names = ["kafka%d" % i for i in sorted(r.sample((1, 2, 3), 2))]
            f["victim"] = ",".join(names)
            for n in names:
                self.hasrv.kill(n)
            down = r.uniform(10, 20)
            time.sleep(down)
            t = time.monotonic()
            self.hasrv.up()
            f["note"] = "down %.1fs, back in %.1fs" % (
                down, time.monotonic() - t)
        elif kind == "redis_failover":
            old = self.hasrv.redis_primary_port()
            f["victim"] = self.hasrv.redis_name(old)
            t = time.monotonic()
            self.hasrv.sentinel_cmd("SENTINEL", "FAILOVER",
                                    self.c.env["PROPHET_REDIS_MASTER_NAME"])
            ok = self.hasrv.wait_primary_change(old)
            f["note"] = "SENTINEL FAILOVER: %s in %.1fs" % (
                "new primary" if ok else "NO new primary",
                time.monotonic() - t)
        elif kind == "redis_primary_kill":
            # The replica stops for 1-3 s (it misses the writes of that
            # time), then the primary is killed: the Sentinels promote the
            # lagging replica, the daemons must reconcile their index.
            old = self.hasrv.redis_primary_port()
            prim = self.hasrv.redis_name(old)
            repl = "redis-replica" if prim == "redis" else "redis"
            f["victim"] = prim
            lag = r.uniform(1, 3)
            self.hasrv.signal(repl, signal.SIGSTOP)
            time.sleep(lag)
            self.hasrv.kill(prim)
            self.hasrv.signal(repl, signal.SIGCONT)
            t = time.monotonic()
            ok = self.hasrv.wait_primary_change(old)
            f["note"] = "replica %.1fs behind; %s in %.1fs" % (
                lag, "promoted" if ok else "NOT promoted",
                time.monotonic() - t)
            self.hasrv.up()
        elif kind == "notifier_kill":
            f["victim"] = "notifier"
            self.notifier.kill()
            time.sleep(r.uniform(1, 4))
            self.notifier.start()
        f["end"] = h.now_ms()
        self.heal()
        self.faults.append(f)
        log("fault %-13s %-22s %s (%.1fs)" % (
            kind, f["victim"] or "", f["note"],
            (f["end"] - f["start"]) / 1000.0))

    def schedule(self, duration):
        kinds = [k for k in self.args.faults]
        if self.notifier is not None and "notifier_kill" not in kinds:
            kinds.append("notifier_kill")
        order = list(kinds)
        self.rng.shuffle(order)
        end = time.monotonic() + duration
        # A quiet start, so lateness has a baseline.
        self.sleep_until(time.monotonic() + min(10.0, duration / 10.0))
        # The first round always completes, however long its faults take
        # on a loaded machine (the run is then longer than asked).
        while time.monotonic() < end - 5 or order:
            kind = order.pop(0) if order else self.rng.choice(kinds)
            self.inject(kind)
            if order or time.monotonic() < end - 5:
                self.sleep_until(min(max(end, time.monotonic() + 1),
                                     time.monotonic() +
                                     self.rng.uniform(*self.args.gap)))
        self.sleep_until(end)

    # -- the run -----------------------------------------------------------
    def main(self):
        args = self.args
        self.setup()
        self.sampler = OwnerSampler(self).start()
        self.stream_t0_ms = h.now_ms()
        self.stream = Stream(self, args.rate, callback_fraction=(
            args.callback_fraction), callback_url=(
            self.sink.url if self.sink else None)).start()
        self.ingest = None
        if self.ha:
            self.ingest = IngestStream(
                self, self.stream, self.c.extra_conf["kafka.ingest_topic"],
                max(1, args.rate // 10)).start()
        log("stream: %d tasks/s%s for %.0fs, seed %d, faults %s"
            % (args.rate, " (+%d/s by Kafka ingest)" % self.ingest.rate
               if self.ingest else "", args.duration, self.seed,
               ",".join(args.faults)))
        try:
            self.schedule(args.duration)
        finally:
            self.stream.stop()
            if self.ingest is not None:
                self.ingest.stop()
            self.heal()
        log("stream stopped: %d submitted, %d accepted; settling"
            % (self.stream.submitted, len(self.stream.accepted)))
        report = Ledger(self).build()
        self.sampler.stop()
        return report

    def close(self, failed):
        if self.proxy is not None:
            self.proxy.close()
        if self.sink is not None:
            self.sink.close()
        if self.notifier is not None:
            self.notifier.kill()
        if getattr(self, "manager2", None) is not None:
            self.manager2.kill()
        if self.c is not None:
            self.c.close(failed=failed)
        for srv in self.servers.values():
            srv.close(failed=failed)
        if self.zk is not None and not self.ha:
            self.zk.close(failed=failed)
        if self.ha and self.hasrv is not None:
            # the shared servers stay up, healed, for the next user
            for name in ("redis", "redis-replica"):
                self.hasrv.signal(name, signal.SIGCONT)
            self.hasrv.up()


# --------------------------------------------------------------- ledger ---

def reordered_within_owner(msgs, skip=None, slack_ms=5):
    """Messages of one slot owner (slot, epoch: one worker, one producer)
    in one partition whose prophet-fired-at is earlier than that of a
    message before it in the partition (by more than slack_ms: a new
    reference-clock sample may step back by its error). The idempotent
    producer keeps a producer's messages in order per partition through
    leader changes and retries; a failed publish fired again later is a
    new message, later in both orders. skip(slot, epoch): owners whose
    clock is faked (their fired-at follows the jumps)."""
    last, out = {}, []
    for m in sorted(msgs, key=lambda m: (m.partition, m.offset)):
        try:
            sl = int(m.hdr.get("prophet-slot"))
            ep = int(m.hdr.get("prophet-epoch"))
            fired = int(m.hdr.get("prophet-fired-at"))
        except (TypeError, ValueError):
            continue
        if skip is not None and skip(sl, ep):
            continue
        k = (m.partition, sl, ep)
        prev = last.get(k)
        if prev is not None and fired < prev[0] - slack_ms:
            out.append({"partition": m.partition, "slot": sl, "epoch": ep,
                        "offset": m.offset, "fired_at": fired,
                        "after_offset": prev[1], "after_fired_at": prev[0]})
        if prev is None or fired >= prev[0]:
            last[k] = (fired, m.offset)
    return out


def read_all(brokers, topic, kcat_args=()):
    """The whole topic, from the beginning to its end (kcat -e)."""
    p = subprocess.run(["kcat"] + list(kcat_args) +
                       ["-C", "-b", brokers, "-t", topic, "-o",
                        "beginning", "-e", "-J", "-q", "-u"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=300)
    out = []
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        try:
            out.append(h.KafkaMessage(json.loads(line), 0))
        except ValueError:
            pass
    return out


def pct(v, p):
    return h.percentile(v, p) if v else None


class Ledger:
    def __init__(self, run):
        self.run = run

    def in_fault(self, t, margin_before=1000):
        # The first seconds of the stream warm up (topic metadata, the
        # producers' first batches): not a steady state either.
        if t < self.run.stream_t0_ms + WARMUP_MS:
            return True
        for f in self.run.faults:
            if f["start"] - margin_before <= t <= f["end"] + RECOVERY_MS:
                return True
        return False

    def cause(self, t1, t2):
        """The fault behind a duplicate first received at t1 and again at
        t2: among the faults whose window (the fault + RECOVERY_MS) reaches
        into [t1, t2], the one that started nearest to t1 (the first copy
        went out just before the fault cut its bookkeeping short).
        Returns (fault or None, |start - t1| ms)."""
        best, bd = None, None
        for f in self.run.faults:
            if f["start"] - 1000 > t2 or f["end"] + RECOVERY_MS < t1:
                continue
            d = abs(f["start"] - t1)
            if bd is None or d < bd:
                best, bd = f, d
        return best, bd

    def archived(self):
        """id -> the statuses of its committed archive records (the
        pruner's Kafka transactions; aborted ones are not read)."""
        out = {}
        if not self.run.args.retention:
            return out
        for m in read_all(self.run.c.brokers, self.run.c.topic(ARCHIVE),
                          ["-X", "isolation.level=read_committed"]):
            st = m.hdr.get("prophet-status")
            try:
                j = json.loads(m.payload)
                self.archived_due[m.id] = int(j["due_at"])
            except (TypeError, ValueError, KeyError):
                pass
            out.setdefault(m.id, []).append(st)
        return out

    def final_status(self, ids):
        """db_status, and for a row gone its archived status: the DB is
        read first, so a row it misses was archived before (the pruner
        commits the record, then deletes the row). A row gone without a
        record shows as "vanished"."""
        dbst = self.db_status(ids)
        arch = self.archived()
        out = dict(dbst)
        for i in ids:
            if i in dbst:
                continue
            sts = arch.get(i)
            out[i] = sts[0] if sts else "vanished"
        pruned = [i for i in ids if i not in dbst]
        return out, {
            "pruned": len(pruned),
            "not_final": sorted(i for i in pruned
                                if out[i] not in FINAL),
            "archive_records": sum(len(v) for v in arch.values()),
            "archived_twice": sorted(i for i, v in arch.items()
                                     if len(v) > 1)}

    def db_status(self, ids):
        out = {}
        ids = sorted(ids)
        for i in range(0, len(ids), 500):
            q = ",".join("'%s'" % x for x in ids[i:i + 500])
            for tid, st in self.run.c.mysql(
                    "SELECT id, status FROM tasks WHERE id IN (%s)" % q):
                out[tid] = st
        return out

    def build(self):
        run, st = self.run, self.run.stream
        c, rd = run.c, run.reader
        cancelled = set(st.cancel_ok)
        # Unanswered submissions that were committed are accepted too.
        self.archived_due = {}
        arch = self.archived()
        committed_unknown = set(self.db_status(st.unknown)) if st.unknown \
            else set()
        committed_unknown |= set(i for i in st.unknown if i in arch)
        accepted = dict(st.accepted)
        for tid in committed_unknown:
            accepted.setdefault(tid, None)
        dues = self.db_due(committed_unknown)
        for tid in committed_unknown:
            if tid not in dues and tid in self.archived_due:
                dues[tid] = self.archived_due[tid]
        for tid, due in dues.items():
            accepted[tid] = due
        expected = [i for i in accepted if i not in cancelled
                    and i not in st.cancel_unknown]
        last_due = max([d for d in accepted.values() if d] or [h.now_ms()])
        timeout = max(0.0, (last_due - h.now_ms()) / 1000.0) + 120
        missing = rd.wait_for(expected, timeout, settle=LEASE_MS / 1000.0 + 5)
        if missing:
            log("%d expected ids not seen yet; waiting 60 s more"
                % len(missing))
            missing = rd.wait_for(missing, 60, settle=2)
        msgs_all = read_all(c.brokers, c.topic(TOPIC),
                            kcat_args=READ_COMMITTED)
        by_id = {}
        for m in msgs_all:
            by_id.setdefault(m.id, []).append(m)
        with rd.cond:
            recv = {i: [m.recv_ms for m in ms] for i, ms in rd.by_id.items()}
        lost = sorted(i for i in expected if i not in by_id)
        cancelled_published = sorted(i for i in cancelled if i in by_id)
        if lost:
            try:
                for line in self.diagnose_lost(lost):
                    log(line)
            except Exception as e:  # a diagnosis, never the verdict
                log("lost-task diagnosis failed: %r" % e)
        early = []
        for tid, ms in by_id.items():
            for m in ms:
                due = int(m.hdr.get("prophet-due-at") or 0)
                fired = int(m.hdr.get("prophet-fired-at") or 0)
                if fired < due:
                    early.append({"id": tid, "due": due, "fired_at": fired,
                                  "by": "header"})
            r = recv.get(tid)
            if r and accepted.get(tid) and min(r) < accepted[tid]:
                early.append({"id": tid, "due": accepted[tid],
                              "received": min(r), "by": "receive time"})
        # Published under an epoch after ZooKeeper held a higher one for
        # the slot (by prophet-fired-at; not for the faked-clock worker).
        stale = []
        faked = run.c.workers[1].wid
        for tid, ms in by_id.items():
            for m in ms:
                try:
                    sl = int(m.hdr.get("prophet-slot"))
                    ep = int(m.hdr.get("prophet-epoch"))
                    fired = int(m.hdr.get("prophet-fired-at"))
                except (TypeError, ValueError):
                    continue
                if faked in run.sampler.zk_owners.get((sl, ep), ()):
                    continue
                t = run.sampler.superseded_at(sl, ep)
                if t is not None and fired > t:
                    stale.append({"id": tid, "slot": sl, "epoch": ep,
                                  "fired_at": fired, "superseded_at": t})
        reordered = reordered_within_owner(
            [m for ms in by_id.values() for m in ms],
            skip=lambda sl, ep: faked in run.sampler.zk_owners.get(
                (sl, ep), ()))
        # Duplicates and their cause.
        dup_total, by_cause, dup_examples = 0, {}, []
        for tid, ms in by_id.items():
            if len(ms) < 2:
                continue
            epochs = sorted({m.hdr.get("prophet-epoch") for m in ms})
            times = sorted(recv.get(tid) or [int(m.hdr.get(
                "prophet-fired-at") or 0) for m in ms])
            for k in range(1, len(ms)):
                dup_total += 1
                t = times[k] if k < len(times) else times[-1]
                f, d = self.cause(times[0], t)
                cause = f["kind"] if f is not None else "unattributed"
                by_cause[cause] = by_cause.get(cause, 0) + 1
                if len(dup_examples) < 10:
                    dup_examples.append({
                        "id": tid, "copies": len(ms), "epochs": epochs,
                        "cause": cause, "fault_victim": f and f["victim"],
                        "fault_start_distance_ms": d,
                        "received": times})
        # Lateness of tasks due outside fault windows (runner's clock).
        lat, late, lat_all = [], [], []
        for tid in expected:
            due = accepted.get(tid)
            r = recv.get(tid)
            if due and r:
                lat_all.append(min(r) - due)
            if due and r and not self.in_fault(due):
                lat.append(min(r) - due)
                late.append((min(r) - due, tid, due))
        # Per fault kind: lateness of the tasks due inside its windows
        # (the fault and its recovery time), and the time to recover: from
        # the fault's start to the last receive more than 1 s late among
        # the tasks due in its window (0 when none was).
        # A task due in the windows of two faults counts for neither kind
        # (only for the lateness inside faults); a fault whose whole window
        # is shared has no recovery figure. Quiet gaps longer than the
        # recovery time (--gap) keep the windows apart.
        by_kind, lat_in = {}, []
        due_list = sorted((accepted[i], i) for i in expected
                          if accepted.get(i) and recv.get(i))
        wins = [(f["start"], f["end"] + RECOVERY_MS) for f in run.faults]
        for fi, f in enumerate(run.faults):
            lo, hi = wins[fi]
            k = by_kind.setdefault(f["kind"], {"faults": 0, "lat": [],
                                               "recovery": [], "shared": 0})
            k["faults"] += 1
            rec, own = 0, 0
            for due, tid in due_list:
                if due < lo:
                    continue
                if due > hi:
                    break
                lt = min(recv[tid]) - due
                lat_in.append(lt)
                if any(a <= due <= b for j, (a, b) in enumerate(wins)
                       if j != fi):
                    k["shared"] += 1
                    continue
                own += 1
                k["lat"].append(lt)
                if lt > 1000:
                    rec = max(rec, min(recv[tid]) - f["start"])
            if own:
                k["recovery"].append(rec)
        lat_in = [min(recv[t]) - d for d, t in due_list
                  if any(a <= d <= b for a, b in wins)]
        by_fault_kind = {}
        for kind, k in sorted(by_kind.items()):
            by_fault_kind[kind] = {
                "faults": k["faults"], "tasks_due_inside": len(k["lat"]),
                "tasks_shared_with_another_fault": k["shared"],
                "late_p50_ms": pct(k["lat"], 50),
                "late_p99_ms": pct(k["lat"], 99),
                "late_max_ms": max(k["lat"]) if k["lat"] else None,
                "recovery_ms_median": pct(k["recovery"], 50),
                "recovery_ms_max": max(k["recovery"]) if k["recovery"]
                else None}
        # DB: every expected task delivered, cancelled ones cancelled
        # (a pruned one by its archive record).
        deadline = time.monotonic() + 60
        while True:
            dbst, pruned = self.final_status(list(accepted))
            bad = sorted(i for i in expected if dbst.get(i) != "delivered")
            bad_cancel = sorted(i for i in cancelled
                                if dbst.get(i) != "cancelled")
            if (not bad and not bad_cancel) or time.monotonic() > deadline:
                break
            time.sleep(1)
        statuses = {}
        for v in dbst.values():
            statuses[v] = statuses.get(v, 0) + 1
        kinds = {}
        for f in run.faults:
            kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
        two = run.sampler.two_owners()
        sanitizer = []
        procs = run.managers + run.c.workers
        if run.notifier is not None:
            procs = procs + [run.notifier]
        for p in procs:
            for mark in ("ERROR: AddressSanitizer", "runtime error:",
                         "ERROR: LeakSanitizer"):
                if p.grep(mark):
                    sanitizer.append(p.name)
        rep = {
            "seed": run.seed,
            "duration_s": run.args.duration,
            "rate_per_s": run.args.rate,
            "faults_by_kind": kinds,
            "faults": run.faults,
            "submitted": st.submitted,
            "accepted": len(accepted),
            "accepted_without_answer": len(committed_unknown),
            "refused": self.count_values(st.refused),
            "no_answer_not_committed": len(st.unknown - committed_unknown),
            "cancel": {"ok": len(cancelled), "too_late_409":
                       len(st.cancel_late), "unknown":
                       len(st.cancel_unknown), "unknown_by_status":
                       st.cancel_other},
            "expected": len(expected),
            "delivered": sum(1 for i in expected if i in by_id),
            "lost": len(lost),
            "lost_ids": lost[:50],
            "cancelled_but_published": len(cancelled_published),
            "cancelled_but_published_ids": cancelled_published[:50],
            "published_before_due": len(early),
            "published_before_due_examples": early[:20],
            "kafka_messages": len(msgs_all),
            "duplicates": {"total": dup_total, "by_cause": by_cause,
                           "examples": dup_examples},
            "lateness_all_ms": {
                "n": len(lat_all), "p50": pct(lat_all, 50),
                "p99": pct(lat_all, 99),
                "max": max(lat_all) if lat_all else None},
            "lateness_inside_faults_ms": {
                "n": len(lat_in), "p50": pct(lat_in, 50),
                "p99": pct(lat_in, 99),
                "max": max(lat_in) if lat_in else None},
            "by_fault_kind": by_fault_kind,
            "lateness_outside_faults_ms": {
                "n": len(lat), "p50": pct(lat, 50), "p90": pct(lat, 90),
                "p99": pct(lat, 99), "max": max(lat) if lat else None,
                "latest": [{"id": i, "due": d, "late_ms": l}
                           for l, i, d in sorted(late)[-5:]]},
            "ownership": {
                "zookeeper_samples": run.sampler.zk_samples,
                "worker_samples": run.sampler.worker_samples,
                "slot_epochs_seen": len(run.sampler.zk_owners),
                "sample_errors": run.sampler.errors,
                "two_owners_one_epoch": len(two),
                "published_after_superseded": len(stale),
                "reordered_within_owner": len(reordered),
                "reordered_examples": reordered[:10],
                "published_after_superseded_examples": stale[:10],
                "two_owners_examples": two[:20]},
            "db": {"statuses": statuses, "not_delivered": len(bad),
                   "not_delivered_ids": bad[:50],
                   "cancelled_not_cancelled": len(bad_cancel)},
            "prune": {"retention": run.args.retention,
                      "pruned": pruned["pruned"],
                      "archive_records": pruned["archive_records"],
                      "not_final": len(pruned["not_final"]),
                      "not_final_ids": pruned["not_final"][:50],
                      "archived_twice": len(pruned["archived_twice"]),
                      "archived_twice_ids":
                      pruned["archived_twice"][:50]},
            "sanitizer_reports": sanitizer,
        }
        if run.sink is not None:
            exp = set(expected)
            want = [i for i in st.with_callback if i in exp]
            # Callbacks trail the publishes (a killed notifier's partitions
            # move after its session timeout, then it replays).
            deadline = time.monotonic() + (90 if run.notifier else 0)
            while True:
                with run.sink.lock:
                    got = dict(run.sink.got)
                if all(i in got for i in want) or \
                        time.monotonic() > deadline:
                    break
                time.sleep(1)
            rep["callbacks"] = {
                "expected": len(want),
                "received": sum(1 for i in want if i in got),
                "missing": sum(1 for i in want if i not in got),
                "duplicates": sum(max(0, got[i] - 1) for i in got),
                "checked": run.notifier is not None}
        must_zero = ["lost", "cancelled_but_published",
                     "published_before_due"]
        problems = [k for k in must_zero if rep[k]]
        rep["exactly_once"] = bool(run.args.exactly_once)
        if run.args.exactly_once and rep["duplicates"]["total"]:
            problems.append("duplicates")
        if rep["ownership"]["two_owners_one_epoch"]:
            problems.append("two_owners_one_epoch")
        if rep["ownership"]["published_after_superseded"]:
            problems.append("published_after_superseded")
        if rep["ownership"]["reordered_within_owner"]:
            problems.append("reordered_within_owner")
        if rep["db"]["not_delivered"] or rep["db"]["cancelled_not_cancelled"]:
            problems.append("db_not_final")
        if rep["prune"]["not_final"]:
            problems.append("pruned_not_final")
        if rep["prune"]["archived_twice"]:
            problems.append("archived_twice")
        if run.args.retention and not rep["prune"]["pruned"]:
            problems.append("nothing_pruned")
        if sanitizer:
            problems.append("sanitizer")
        if "callbacks" in rep and rep["callbacks"]["checked"] and \
                rep["callbacks"]["missing"]:
            problems.append("callbacks_missing")
        if not rep["accepted"] or not rep["faults"]:
            problems.append("nothing_exercised")
        rep["problems"] = problems
        rep["verdict"] = "PASS" if not problems else "FAIL"
        return rep

    def diagnose_lost(self, ids, limit_slots=6):
        """Where the lost ones stand, printed into the log (CI keeps only
        the test's log): per slot, the DB rows (status, attempt, due
        range), the slot's node in ZooKeeper, Redis's fence and marker and
        where the first ids are in the index, each running worker's epoch
        gauge for the slot, and the owner's last log lines about it."""
        run, out = self.run, []
        if not ids:
            return out
        rows = []
        ids = sorted(ids)
        for i in range(0, len(ids), 500):
            q = ",".join("'%s'" % x for x in ids[i:i + 500])
            rows += run.c.mysql(
                "SELECT id, slot, status, attempt, due_at, epoch, "
                "IFNULL(owner,''), updated_at FROM tasks "
                "WHERE id IN (%s)" % q)
        by_slot = {}
        for r in rows:
            by_slot.setdefault(int(r[1]), []).append(r)
        out.append("lost by slot: %s (%d not in the DB)"
                   % ({k: len(v) for k, v in sorted(by_slot.items())},
                      len(ids) - len(rows)))
        try:
            r = run.c.redis()
        except (OSError, RuntimeError) as e:
            r = None
            out.append("redis: %r" % e)
        try:
            zk = h.ZK(run.zk.hosts, timeout_ms=4000)
        except (OSError, RuntimeError) as e:
            zk = None
            out.append("zookeeper: %r" % e)
        gauges = {}
        for w in run.c.workers:
            if not w.running():
                continue
            try:
                api = h.Api(w.addr, timeout=2)
                text = api.get("/metrics").text
                api.close()
            except (OSError, ValueError):
                continue
            gauges[w.wid] = {int(s): int(float(v)) for s, v in
                             OwnerSampler.GAUGE.findall(text)}
        for slot in sorted(by_slot, key=lambda k: -len(by_slot[k]))[
                :limit_slots]:
            rs = by_slot[slot]
            st = {}
            for x in rs:
                k = "%s/attempt %s/epoch %s/owner %s" % (x[2], x[3], x[5],
                                                         x[6] or "-")
                st[k] = st.get(k, 0) + 1
            dues = sorted(int(x[4]) for x in rs)
            out.append("slot %d: %d lost, due %s .. %s (%.0f s and %.0f s "
                       "ago), rows %s" % (
                           slot, len(rs), dues[0], dues[-1],
                           (h.now_ms() - dues[0]) / 1000.0,
                           (h.now_ms() - dues[-1]) / 1000.0, st))
            if zk is not None:
                try:
                    data, _ = zk.get_stat("%s/work_slot/ws_%d"
                                          % (run.c.zk_root, slot))
                    out.append("  zookeeper node: %s" % (
                        data.decode() if data else None))
                except (OSError, RuntimeError, ValueError) as e:
                    out.append("  zookeeper node: %r" % e)
            out.append("  worker epoch gauges: %s"
                       % {w: g.get(slot) for w, g in gauges.items()})
            if r is not None:
                try:
                    pre = "{prophet:%d}:" % slot
                    out.append("  redis: fence %s, marker %s, due %s, "
                               "task %s, inflight %s, buckets %s" % (
                                   r.cmd("GET", pre + "epoch"),
                                   r.cmd("GET", pre + "built"),
                                   r.cmd("ZCARD", pre + "due"),
                                   r.cmd("HLEN", pre + "task"),
                                   r.cmd("ZCARD", pre + "inflight"),
                                   r.cmd("ZCARD", pre + "bk")))
                    for x in rs[:3]:
                        out.append("  %s: due score %s, payload %s, "
                                   "inflight %s, cancelled %s" % (
                                       x[0], r.cmd("ZSCORE", pre + "due",
                                                   x[0]),
                                       r.cmd("HEXISTS", pre + "task", x[0]),
                                       r.cmd("ZSCORE", pre + "inflight",
                                             x[0]),
                                       r.cmd("ZSCORE", pre + "cancelled",
                                             x[0])))
                except (OSError, RuntimeError) as e:
                    out.append("  redis: %r" % e)
            for w in run.c.workers:
                pat = re.compile(r"\bslot=%d\b" % slot)
                lines = [l for l in w.grep("slot=%d" % slot)
                         if pat.search(l)]
                if lines:
                    out.append("  %s, last lines about the slot:" % w.wid)
                    out += ["    " + l[:300] for l in lines[-8:]]
        for w in run.c.workers:
            errs = w.grep("level=error")
            if errs:
                out.append("%s: %d error line(s), the last:" % (w.wid,
                                                              len(errs)))
                out += ["    " + l[:300] for l in errs[-5:]]
        if r is not None:
            r.close()
        if zk is not None:
            zk.close()
        return out

    def db_due(self, ids):
        out = {}
        ids = sorted(ids)
        for i in range(0, len(ids), 500):
            q = ",".join("'%s'" % x for x in ids[i:i + 500])
            for tid, due in self.run.c.mysql(
                    "SELECT id, due_at FROM tasks WHERE id IN (%s)" % q):
                out[tid] = int(due)
        return out

    @staticmethod
    def count_values(d):
        out = {}
        for v in d.values():
            out[str(v)] = out.get(str(v), 0) + 1
        return out


def print_table(rep):
    def row(k, v, must=None):
        flag = ""
        if must is not None:
            flag = "  ok" if v == must else "  <-- MUST BE %s" % must
        print("  %-34s %s%s" % (k, v, flag))
    print("=" * 64)
    print("chaos ledger: seed %d, %.0fs at %d tasks/s%s: %s"
          % (rep["seed"], rep["duration_s"], rep["rate_per_s"],
             ", exactly-once" if rep.get("exactly_once") else "",
             rep["verdict"]))
    print("-" * 64)
    print("  faults injected:")
    for k, v in sorted(rep["faults_by_kind"].items()):
        print("    %-32s %d" % (k, v))
    row("submitted", rep["submitted"])
    row("accepted (2xx)", rep["accepted"])
    row("  of which committed, no answer", rep["accepted_without_answer"])
    row("refused (status: count)", rep["refused"])
    row("no answer, not committed", rep["no_answer_not_committed"])
    row("cancelled (200 / 409 / unknown)", "%d / %d / %d" % (
        rep["cancel"]["ok"], rep["cancel"]["too_late_409"],
        rep["cancel"]["unknown"]))
    row("expected to fire", rep["expected"])
    row("delivered", rep["delivered"])
    row("LOST", rep["lost"], 0)
    row("cancelled but published", rep["cancelled_but_published"], 0)
    row("published before due", rep["published_before_due"], 0)
    row("Kafka messages", rep["kafka_messages"])
    row("duplicates", rep["duplicates"]["total"],
        0 if rep.get("exactly_once") else None)
    for k, v in sorted(rep["duplicates"]["by_cause"].items()):
        print("    %-32s %d" % ("caused by " + k, v))
    lt = rep["lateness_outside_faults_ms"]
    row("lateness outside faults (ms)", "n=%d p50=%s p90=%s p99=%s max=%s"
        % (lt["n"], lt["p50"], lt["p90"], lt["p99"], lt["max"]))
    li = rep["lateness_inside_faults_ms"]
    row("lateness inside faults (ms)", "n=%d p50=%s p99=%s max=%s"
        % (li["n"], li["p50"], li["p99"], li["max"]))
    la = rep["lateness_all_ms"]
    row("lateness, all tasks (ms)", "n=%d p50=%s p99=%s max=%s"
        % (la["n"], la["p50"], la["p99"], la["max"]))
    print("  per fault kind: faults, tasks due inside (its own window "
          "only / shared), late p50/p99/max ms, recovery median/max ms")
    for k, v in sorted(rep["by_fault_kind"].items()):
        print("    %-20s %3d %6d/%-6d %6s %6s %6s   %6s %6s" % (
            k, v["faults"], v["tasks_due_inside"],
            v["tasks_shared_with_another_fault"], v["late_p50_ms"],
            v["late_p99_ms"], v["late_max_ms"], v["recovery_ms_median"],
            v["recovery_ms_max"]))
    o = rep["ownership"]
    row("ownership samples (zk / workers)", "%d / %d (%d slot-epochs)"
        % (o["zookeeper_samples"], o["worker_samples"],
           o["slot_epochs_seen"]))
    row("two owners of a slot at one epoch", o["two_owners_one_epoch"], 0)
    row("published after a higher epoch", o["published_after_superseded"],
        0)
    row("out of order within one owner", o["reordered_within_owner"], 0)
    row("DB statuses", rep["db"]["statuses"])
    row("DB not delivered (expected ones)", rep["db"]["not_delivered"], 0)
    pr = rep["prune"]
    if pr["retention"]:
        row("pruned (retention %s)" % pr["retention"], "%d (%d archive "
            "records)" % (pr["pruned"], pr["archive_records"]))
        row("pruned before final, or unarchived", pr["not_final"], 0)
        row("archived more than once", pr["archived_twice"], 0)
    if "callbacks" in rep:
        cb = rep["callbacks"]
        row("callbacks (expected/received)", "%d / %d%s" % (
            cb["expected"], cb["received"],
            "" if cb["checked"] else " (no --notifier: not checked)"))
    if rep["problems"]:
        row("PROBLEMS", ", ".join(rep["problems"]))
    print("=" * 64)
    sys.stdout.flush()


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=parse_duration, default=150.0,
                    help="fault phase length: 150s, 30m, 1h (default 150s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=int, default=40, help="tasks per second")
    ap.add_argument("--faults", default=",".join(ALL_FAULTS),
                    help="comma-separated fault kinds (default: all)")
    ap.add_argument("--gap", default="3,8",
                    help="quiet seconds between faults: min,max")
    ap.add_argument("--json", help="write the ledger here as JSON")
    ap.add_argument("--ha", action="store_true",
                    help="on the replicated dev cluster (scripts/devcluster "
                    "up --ha) with its faults: " + ",".join(HA_FAULTS))
    ap.add_argument("--notifier",
                    default=os.environ.get("PROPHET_NOTIFIER_BIN"),
                    help="prophet-notifier binary (NOTIFIER HOOK)")
    ap.add_argument("--callback-fraction", type=float, default=0.0,
                    help="share of tasks with an HTTP callback to the sink")
    ap.add_argument("--exactly-once", action="store_true",
                    help="workers with kafka.exactly_once = true; the "
                    "ledger (read_committed, as always) then wants 0 "
                    "duplicates")
    ap.add_argument("--retention", default=None,
                    help="task.retention of the managers (e.g. 5s), the "
                    "pruner archiving every task it deletes; the ledger "
                    "takes a row gone from its archive record")
    a = ap.parse_args(argv)
    if a.ha and a.faults == ",".join(ALL_FAULTS):
        a.faults = ",".join(HA_FAULTS)
    a.faults = [f for f in a.faults.split(",") if f]
    bad = [f for f in a.faults if f not in
           (HA_FAULTS if a.ha else ALL_FAULTS) + ["notifier_kill"]]
    if bad:
        ap.error("unknown fault kind(s): %s" % ", ".join(bad))
    if "notifier_kill" in a.faults and not a.notifier:
        ap.error("notifier_kill needs --notifier")
    a.gap = tuple(float(x) for x in a.gap.split(","))
    if a.retention in ("", "0"):
        a.retention = None
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    for b in (h.MANAGER_BIN, h.WORKER_BIN):
        if not os.access(b, os.X_OK):
            print("chaos: %s is missing (build first, or set "
                  "PROPHET_BUILDDIR)" % b)
            return None
    if "clock_jump" in args.faults and not os.path.exists(FAKETIME_LIB):
        print("chaos: %s is missing (apt-get install faketime; "
              "scripts/deps)" % FAKETIME_LIB)
        return None
    run = Run(args)
    failed = True
    try:
        rep = run.main()
        print_table(rep)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rep, f, indent=1, sort_keys=True)
            log("ledger written to %s" % args.json)
        failed = rep["verdict"] != "PASS"
        return rep
    finally:
        run.close(failed)


if __name__ == "__main__":
    r = main()
    sys.exit(0 if r is not None and r["verdict"] == "PASS" else 1)
