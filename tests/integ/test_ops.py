#!/usr/bin/python3
"""Operations: the daemons speak systemd's notify protocol (READY=1 when
serving, WATCHDOG=1 while WATCHDOG_USEC is set, STOPPING=1 on SIGTERM) to
a NOTIFY_SOCKET of ours; they log one key=value line per event and no
password; the manager's per-slot backlog gauges see due
tasks nobody fires; every /metrics follows the Prometheus naming
conventions and has the metrics the issue lists; the alert rules pass
promtool (syntax and unit tests) and use only metrics the daemons
expose."""

import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
WATCHDOG_USEC = 400000
NOTIFY = {}  # "manager"/"worker" -> Notify


class Notify:
    """A NOTIFY_SOCKET: an AF_UNIX datagram socket whose messages
    (sd_notify's "KEY=VALUE" lines) are collected with their arrival
    time."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.lines = []  # (monotonic time, "KEY=VALUE")
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            t = time.monotonic()
            with self.lock:
                for line in data.decode("utf-8", "replace").splitlines():
                    self.lines.append((t, line))

    def seen(self, line):
        with self.lock:
            return [t for t, l in self.lines if l == line]

    def wait(self, line, timeout):
        return h.wait_until(lambda: self.seen(line), timeout, 0.05,
                            "%s on %s" % (line, self.path))[0]

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


def metrics(addr):
    api = h.Api(addr)
    try:
        r = api.get("/metrics")
        h.check_eq(r.status, 200, "GET /metrics on %s" % addr)
        h.check(r.headers.get("Content-Type", "").startswith("text/plain"),
                "metrics content type")
        return r.text
    finally:
        api.close()


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def parse_metrics(text):
    """{family: {"type", "help", "samples": [(name, labels, value)]}};
    raises on a line that is not Prometheus text format."""
    fams = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, name, rest = line[2:6], *line[7:].split(" ", 1)
            f = fams.setdefault(name, {"samples": []})
            f["help" if kind == "HELP" else "type"] = rest
            continue
        m = SAMPLE.match(line)
        h.check(m is not None, "not a sample line: %r" % line)
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        v = float(value)  # accepts NaN, +Inf
        fam = name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[:-len(suffix)]
            if name.endswith(suffix) and \
                    fams.get(base, {}).get("type") == "histogram":
                fam = base
        h.check(fam in fams, "sample %s before its HELP/TYPE" % name)
        fams[fam]["samples"].append((name, labels, v))
    return fams


def slot_values(fams, name):
    out = {}
    for n, labels, v in fams[name]["samples"]:
        m = re.match(r'\{slot="(\d+)"\}', labels)
        h.check(m is not None, "%s labels %r" % (name, labels))
        out[int(m.group(1))] = v
    return out


NOTIFIER = None


def setup():
    global C, NOTIFIER
    port = h.free_port()
    C = h.Cluster(workers=1, name="ops", conf={
        "notifier.topics": "ops",
        "notifier.http_listen": "127.0.0.1:%d" % port}).open()
    NOTIFIER = C.notifier(port, fast_rebalance=False)
    for name, proc in (("manager", C.manager), ("worker", C.workers[0]),
                       ("notifier", NOTIFIER)):
        NOTIFY[name] = Notify(os.path.join(C.dir, "notify-%s.sock" % name))
        proc.env = {"NOTIFY_SOCKET": NOTIFY[name].path,
                    "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    C.start_manager()
    h.create_topics(C.brokers, [C.topic(t) for t in (
        "ops", "prophet.callback-retry", "prophet.callback-dead")])


def cleanup(failed):
    if NOTIFIER is not None and NOTIFIER.running():
        NOTIFIER.signal(signal.SIGKILL)
        NOTIFIER.wait(10)
    for n in NOTIFY.values():
        n.close()
    if C is not None:
        C.close(failed)


def dump():
    if C is not None:
        C.dump_logs(20)
    if NOTIFIER is not None:
        for line in NOTIFIER.tail(20):
            h.log("notifier: " + line)


def check_ready_and_watchdog(name):
    n = NOTIFY[name]
    ready = n.wait("READY=1", 30)
    # Pinged every WATCHDOG_USEC/2: a few within 2 s (generous).
    h.wait_until(lambda: len(n.seen("WATCHDOG=1")) >= 3, 10, 0.1,
                 "%s watchdog pings" % name)
    h.check_eq(len(n.seen("READY=1")), 1, "%s READY=1 once" % name)
    h.check(not n.seen("STOPPING=1"), "%s not stopping yet" % name)
    return ready


def test_manager_ready_and_watchdog():
    check_ready_and_watchdog("manager")


def test_backlog_gauges_see_unfired_tasks():
    # No worker yet: tasks come due and nobody claims them. The manager's
    # gauges (sampled every 5 s) show them and their growing lag.
    due = h.now_ms() + 200
    ids = ["ops-%d" % i for i in range(7)]
    api = C.api()
    try:
        for tid in ids:
            r = api.post("/v1/tasks", {"id": tid, "topic": "ops",
                                       "body": tid, "due_at": due})
            h.check_eq(r.status, 201, "submit")
    finally:
        api.close()

    def backlog():
        f = parse_metrics(metrics(C.manager_addr))
        pend = slot_values(f, "prophet_slot_pending_tasks")
        lag = slot_values(f, "prophet_slot_lag_seconds")
        mem = slot_values(f, "prophet_slot_redis_bytes")
        return pend, lag, mem
    pend, lag, mem = h.wait_until(
        lambda: (lambda p, l, m: (p, l, m) if sum(p.values()) == len(ids)
                 and max(l.values()) >= 1 else None)(*backlog()),
        20, 0.5, "7 pending tasks with lag in the gauges")
    h.check_eq(sorted(pend), list(range(C.slots)), "a gauge per slot")
    h.check(all(not math.isnan(v) for v in pend.values()), "no NaN")
    # Redis memory: the slots holding tasks, and only those, use some
    # (each task is at least a ZSET entry and a payload HASH entry).
    h.check_eq(sorted(mem), list(range(C.slots)), "a memory gauge per slot")
    for slot, n in pend.items():
        if n:
            h.check(mem[slot] >= 150 * n, "slot %d: %d task(s) in %s bytes"
                    % (slot, n, mem[slot]))
        else:
            h.check_eq(mem[slot], 0, "slot %d without tasks: bytes" % slot)
    # A worker takes the slots and fires them: the backlog drains.
    C.start_worker(0)
    rd = C.reader(["ops"])
    h.check_eq(rd.wait_for(ids, 30), [], "fired once a worker is up")
    h.wait_until(lambda: sum(backlog()[0].values()) == 0 and
                 sum(backlog()[2].values()) == 0, 20, 0.5,
                 "the gauges back to 0 (tasks and bytes)")


def test_worker_ready_and_watchdog():
    check_ready_and_watchdog("worker")


def test_notifier_ready_and_watchdog():
    NOTIFIER.start()
    check_ready_and_watchdog("notifier")


# Families the issue asks for (accepted, fired, delivered, lateness,
# pending per slot, slots owned, epoch, Redis/DB mode, Kafka queue depth,
# rebalances, fenced writes), and the gauges the alert rules need.
REQUIRED = {
    "manager": ["prophet_tasks_accepted_total", "prophet_slot_pending_tasks",
                "prophet_slot_lag_seconds", "prophet_slot_redis_bytes",
                "prophet_cluster_slots", "prophet_topic_paused",
                "prophet_pause_skipped_total"],
    "worker": ["prophet_tasks_fired_total", "prophet_tasks_delivered_total",
               "prophet_fire_lateness_seconds", "prophet_slots_owned",
               "prophet_slot_epoch", "prophet_db_mode_slots",
               "prophet_kafka_queue_messages", "prophet_rebalances_total",
               "prophet_fenced_writes_total", "prophet_master",
               "prophet_pause_held_total", "prophet_paused_topics"],
    # callbacks by outcome, latency, in flight, retries, dead letters
    "notifier": ["prophet_callbacks_ok_total",
                 "prophet_callbacks_http_error_total",
                 "prophet_callbacks_transport_error_total",
                 "prophet_callback_duration_seconds",
                 "prophet_callbacks_inflight",
                 "prophet_callback_retries_scheduled_total",
                 "prophet_callbacks_dead_lettered_total"],
}
UNITS = ("_seconds", "_bytes", "_rows")
NOT_BASE = re.compile(r"_(ms|us|milliseconds|microseconds|minutes|hours|"
                      r"kilobytes|megabytes)(_|$)")


def exposed():
    return {"manager": parse_metrics(metrics(C.manager_addr)),
            "worker": parse_metrics(metrics(C.workers[0].addr)),
            "notifier": parse_metrics(metrics(NOTIFIER.addr))}


def test_metric_names():
    # A pull group exists, so the per-group family has its sample (a
    # labelled family with no group has only HELP and TYPE).
    api = C.api()
    try:
        r = api.get("/v1/topics/ops/next?group=ops-metrics&wait_ms=0")
        h.check_eq(r.status, 200, "pull next: %r" % r)
        # A topic paused once: prophet_topic_paused{topic} has a sample.
        r = api.post("/v1/topics/ops-paused/pause", None)
        h.check_eq(r.status, 200, "pause: %r" % r)
        h.wait_until(lambda: 'prophet_topic_paused{topic="ops-paused"}' in
                     metrics(C.manager_addr), 10, what="the paused gauge")
    finally:
        api.close()
    p = h.Problems()
    for daemon, fams in exposed().items():
        for name, f in fams.items():
            p.check(re.match(r"^prophet_[a-z0-9_]+$", name),
                    "%s: %s is not prophet_snake_case" % (daemon, name))
            p.check(f.get("help"), "%s: %s has no HELP" % (daemon, name))
            t = f.get("type")
            p.check(t in ("counter", "gauge", "histogram"),
                    "%s: %s type %r" % (daemon, name, t))
            p.check((t == "counter") == name.endswith("_total"),
                    "%s: %s (%s): only counters end in _total"
                    % (daemon, name, t))
            p.check(t != "histogram" or name.endswith(UNITS),
                    "%s: histogram %s has no unit suffix %s"
                    % (daemon, name, UNITS))
            p.check(not NOT_BASE.search(name),
                    "%s: %s: use base units (seconds, bytes)"
                    % (daemon, name))
            p.check(f["samples"], "%s: %s has no sample" % (daemon, name))
        for name in REQUIRED[daemon]:
            p.check(name in fams, "%s: %s missing" % (daemon, name))
    p.raise_if_any("metric names")
    fams = exposed()
    lag = fams["manager"]["prophet_pull_group_lag_messages"]["samples"]
    h.check_eq([s[1] for s in lag], ['{group="ops-metrics",topic="ops"}'],
               "a lag sample per pull group, labelled with its name and topic")
    h.check_eq(sorted(slot_values(fams["worker"], "prophet_slot_epoch")),
               list(range(C.slots)), "an epoch gauge per slot")
    h.check_eq(fams["worker"]["prophet_slots_owned"]["samples"][0][2],
               float(C.slots), "the only worker owns every slot")


def alert_rules(path):
    """The rules of a Prometheus rules file, read without a YAML library
    (the file keeps to one shape: '- alert:', expr, for, labels,
    annotations)."""
    rules = []
    cur = None
    lines = open(path).read().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        i += 1
        if not s or s.startswith("#"):
            continue
        m = re.match(r"- alert: (\S+)$", s)
        if m:
            cur = {"alert": m.group(1), "indent": line.index("-")}
            rules.append(cur)
            continue
        if cur is None:
            continue
        m = re.match(r"(expr|for|labels|summary): ?(.*)$", s)
        if not m:
            continue
        key, val = m.group(1), m.group(2)
        if key == "expr" and val in (">", "|"):
            block = []
            while i < len(lines) and (not lines[i].strip() or
                                      len(lines[i]) - len(lines[i].lstrip())
                                      > cur["indent"] + 2):
                block.append(lines[i].strip())
                i += 1
            val = " ".join(block)
        cur[key] = val
    return rules


def test_alert_rules_promtool():
    # promtool (Debian package prometheus, installed by scripts/deps):
    # the rules parse as PromQL, and tests/integ/alerts_test.yml's series
    # make the four alerts of the issue fire when they should, not before.
    promtool = shutil.which("promtool")
    h.check(promtool is not None, "promtool missing (Debian package "
            "prometheus; scripts/deps installs it)")
    path = os.path.join(h.REPO, "deploy", "prometheus-alerts.yml")
    for argv, cwd in (([promtool, "check", "rules", path], None),
                      ([promtool, "test", "rules", "alerts_test.yml"],
                       h.HERE)):
        p = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        h.log(p.stdout.strip())
        h.check_eq(p.returncode, 0, " ".join(argv[1:3]))


def test_alert_rules():
    path = os.path.join(h.REPO, "deploy", "prometheus-alerts.yml")
    rules = alert_rules(path)
    names = [r["alert"] for r in rules]
    for want in ("ProphetTasksDueNotFired", "ProphetNoMaster",
                 "ProphetSlotWithoutOwner", "ProphetRedisFallbackActive"):
        h.check(want in names, "alert %s missing (have %s)" % (want, names))
    h.check_eq(len(set(names)), len(names), "alert names unique")
    fams = exposed()
    known = set(fams["manager"]) | set(fams["worker"]) | \
        set(fams["notifier"])
    p = h.Problems()
    for r in rules:
        p.check(r.get("expr"), "%s: no expr" % r["alert"])
        p.check(r.get("expr", "").count("(") == r.get("expr", "").count(")"),
                "%s: unbalanced parentheses" % r["alert"])
        p.check("severity:" in r.get("labels", ""),
                "%s: no severity label" % r["alert"])
        p.check(r.get("summary"), "%s: no summary" % r["alert"])
        if "for" in r:
            p.check(re.match(r"^\d+[smh]$", r["for"]),
                    "%s: for %r" % (r["alert"], r["for"]))
        for m in re.findall(r"prophet_[a-z0-9_]+", r.get("expr", "")):
            base = re.sub(r"_(bucket|sum|count)$", "", m)
            p.check(m in known or base in known,
                    "%s uses %s, which no daemon exposes" % (r["alert"], m))
    p.raise_if_any("alert rules")


def check_stops(name, proc):
    n = NOTIFY[name]
    t0 = time.monotonic()
    proc.signal(signal.SIGTERM)
    stopping = n.wait("STOPPING=1", 20)
    rc = proc.wait(30)
    h.check_eq(rc, 0, "%s exit code after SIGTERM" % name)
    h.check(stopping >= t0, "%s STOPPING=1 after the signal" % name)
    h.check(n.seen("READY=1")[0] < stopping, "%s READY before STOPPING"
            % name)


EVICT_WARNING = "redis may evict the task index when full"


def run_extra_manager(name):
    """A second manager of the cluster (own port and log) until its Redis
    connection is up; returns its log lines."""
    conf = dict(C.conf_dict())
    conf["http.listen"] = "127.0.0.1:%d" % h.free_port()
    path = os.path.join(C.dir, "%s.conf" % name)
    C.write_conf(path, conf)
    p = h.Proc(name, [h.MANAGER_BIN, "-c", path],
               os.path.join(C.dir, "%s.log" % name)).start()
    try:
        # The policy answer follows the connect at once.
        h.wait_until(lambda: p.grep('msg="redis connected"'), 30, 0.1,
                     "%s connected to redis" % name)
        time.sleep(0.5)
    finally:
        p.stop()
    return p.tail(100000)


def test_warns_when_redis_may_evict_the_index():
    """An allkeys-* maxmemory-policy lets a full Redis drop the slot index
    (tasks would fire late, when swept from the DB): a daemon says so
    when it connects, naming the policy; with noeviction it says
    nothing. (Sets the policy of the shared Redis for a moment and puts
    the old one back.)"""
    r = C.redis()
    # (the other build's test_ops may be here at the same time)
    with h.machine_lock("redis-maxmemory-policy"):
        old = r.cmd("CONFIG", "GET", "maxmemory-policy")[1].decode()
        try:
            r.cmd("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
            lines = run_extra_manager("manager-lru")
            r.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
            quiet = run_extra_manager("manager-noeviction")
        finally:
            r.cmd("CONFIG", "SET", "maxmemory-policy", old)
            r.close()
    warned = [l for l in lines if EVICT_WARNING in l]
    h.check_eq(len(warned), 1, "one eviction warning (%r)" % warned)
    h.check("level=warn" in warned[0] and "policy=allkeys-lru" in warned[0],
            "a warning naming the policy: %r" % warned[0])
    h.check(not [l for l in quiet if EVICT_WARNING in l],
            "no warning with noeviction")
    h.check(not [l for l in C.manager.tail(100000) if EVICT_WARNING in l],
            "the cluster's own manager (noeviction) did not warn")


def thread_policies(pid):
    """{tid: (policy, rt_priority)} of a process's threads (/proc stat
    fields 41 and 40; 0 SCHED_OTHER, 2 SCHED_RR)."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                s = f.read()
        except OSError:
            continue  # a thread that just ended
        fields = s[s.rindex(")") + 2:].split()  # from field 3 (state) on
        out[int(tid)] = (int(fields[41 - 3]), int(fields[40 - 3]))
    return out


def test_worker_rt_priority():
    """worker.rt_priority: the loop thread, and only it, runs at SCHED_RR
    (librdkafka's, ZooKeeper's and the DB pool's threads stay normal), and
    the worker fires; a service that may not use real-time priorities is
    refused at start, before it registers, naming the key and the fix."""
    port = h.free_port()
    w = h.Proc("w-rt", [h.WORKER_BIN, "-c", C.conf_path,
                        "--set", "worker.id=w-rt-" + C.tag,
                        "--set", "worker.http_listen=127.0.0.1:%d" % port,
                        "--set", "worker.rt_priority=7"],
               os.path.join(C.dir, "worker-rt.log"))
    w.addr = "127.0.0.1:%d" % port
    C.workers.append(w)
    C.start_worker(w)
    pol = thread_policies(w.popen.pid)
    h.check_eq(pol.get(w.popen.pid), (2, 7), "the loop thread: SCHED_RR 7")
    others = {t: p for t, p in pol.items() if t != w.popen.pid}
    h.check(len(others) >= 5, "the worker's other threads: %d" % len(others))
    h.check_eq({t: p for t, p in others.items() if p != (0, 0)}, {},
               "threads other than the loop at real-time priority")
    h.check(w.grep('msg="firing loop at real-time priority"'),
            "the worker says so at start")
    # It takes slots and fires their tasks.
    h.wait_until(lambda: sum(v for _, _, v in parse_metrics(
        metrics(w.addr))["prophet_slots_owned"]["samples"]) > 0, 30, 0.2,
        "the real-time worker owns slots")
    ids = ["rt-%d" % i for i in range(40)]
    api = C.api()
    try:
        due = h.now_ms() + 500
        for tid in ids:
            h.check_eq(api.post("/v1/tasks", {"id": tid, "topic": "ops",
                                              "body": "x", "due_at": due}
                                ).status, 201, "submit")
    finally:
        api.close()
    rd = C.reader(["ops"])
    h.check_eq(rd.wait_for(ids, 30), [], "fired")
    h.check_eq(w.stop(), 0, "exit code after SIGTERM")
    C.workers.remove(w)
    # Without CAP_SYS_NICE and with RLIMIT_RTPRIO 0 (a systemd service
    # without LimitRTPRIO=): exits at once, not registered.
    denied = h.Proc("w-rt-denied", [
        "prlimit", "--rtprio=0", "setpriv", "--bounding-set=-sys_nice",
        h.WORKER_BIN, "-c", C.conf_path,
        "--set", "worker.id=w-rt-denied-" + C.tag,
        "--set", "worker.http_listen=127.0.0.1:%d" % h.free_port(),
        "--set", "worker.rt_priority=7"],
        os.path.join(C.dir, "worker-rt-denied.log")).start()
    rc = denied.wait(30)
    h.check(rc not in (0, None), "refused worker exit code %r" % rc)
    line = "\n".join(denied.tail(5))
    for want in ("worker.rt_priority", "LimitRTPRIO=7",
                 "Operation not permitted"):
        h.check(want in line, "refusal names %r: %s" % (want, line))
    zk = C.zk()
    try:
        nodes = zk.children(C.zk_root + "/workers")
        h.check(nodes is not None, "the workers' node is there")
        h.check(not [n for n in nodes if "w-rt-denied" in n],
                "the refused worker never registered: %s" % nodes)
    finally:
        zk.close()


def test_stopping_on_sigterm():
    check_stops("notifier", NOTIFIER)
    check_stops("worker", C.workers[0])
    check_stops("manager", C.manager)


LOG_LINE = re.compile(r'^ts=\d{4}-\d\d-\d\dT[\d:.]+Z level=(debug|info|warn|'
                      r'error|fatal) prog=(manager|worker|notifier) msg="[^"]+"'
                      r'( [a-z_]+=("[^"]*"|\S*))*$')
# user:password@ in a URL, unless masked as user:***@
URL_PASSWORD = re.compile(r'://[^/\s:@]+:(?!\*\*\*@)[^@\s/]+@')


def test_logs_one_line_per_event_without_secrets():
    p = h.Problems()
    lines = 0
    for proc in [C.manager] + C.workers + [NOTIFIER]:
        for line in proc.tail(100000):
            if line.startswith("=== harness:"):
                continue
            lines += 1
            p.check(LOG_LINE.match(line), "%s: not one key=value event: %r"
                    % (proc.name, line[:200]))
            p.check(not URL_PASSWORD.search(line),
                    "%s logs a password in a URL: %r"
                    % (proc.name, line[:200]))
    h.check(lines > 20, "the daemons logged (%d lines)" % lines)
    p.raise_if_any("log lines")


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup, dump)
