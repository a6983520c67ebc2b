#!/usr/bin/python3
"""Exactly-once publishing (issue 21, kafka.exactly_once) end to end, on
real servers, in both builds (the sanitizer build checks the producer
threads, the marker reads and the shutdown).

One cluster (manager, 2 workers with kafka.exactly_once, a notifier, a
local HTTP receiver), read with read_committed (kcat):

  1. A stream of one-shot tasks (some with callbacks, one of them failing
     once) and a recurring task firing every second, while worker 1 is
     stopped with SIGTERM and started again and worker 2 is then killed
     with SIGKILL and started again: every task in Kafka exactly once,
     every occurrence of the series exactly once and in order, never
     early; every callback made once (the failing one twice) with
     Idempotency-Key "<id>:<occurrence>" (a one-shot task's due time),
     the same on the retry.
  2. What the workers did, from their metrics: transactions committed,
     tasks in them, records per transaction; a checkpoint saved in the DB
     for every slot (slot_state.eos_offset), in the one marker partition
     both workers share here (kafka.eos_partition: a takeover reads
     through the other live worker's markers and transactions).
  3. A marker topic without a partition per slot: the worker refuses to
     start, naming the topic and the counts.
  4. A transaction committed whose outcome the worker does not learn (a
     fault point of the crash-point build): the producer is made again,
     every slot opened again, the committed tasks found by their markers
     and recorded: every task once.
  5. The upgrade from markers in the slot's own partition (before
     migration 11): a slot record without a partition and a marker in
     partition N of a task published but not recorded, as a worker of the
     version before leaves them when it dies: the task is recorded, never
     fired again, and the slot's checkpoint moves to the worker's
     partition.
"""

import os
import re
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import servers  # noqa: E402

TOPIC = "eos"
RETRY_TOPIC = "prophet.callback-retry"
DEAD_TOPIC = "prophet.callback-dead"
READ_COMMITTED = ["-X", "isolation.level=read_committed"]
SHARED_PART = 5  # both workers' markers in one partition

C = None
EP = None
READER = None
NOTIFIER = None


def setup():
    global C, EP, READER, NOTIFIER
    EP = h.CallbackSink(flaky=1)
    port = h.free_port()
    C = h.Cluster(workers=2, name="eos", conf={
        "kafka.exactly_once": "true",
        "kafka.eos_partition": SHARED_PART,
        "worker.lease_ms": 2000,
        "notifier.topics": TOPIC,
        "notifier.http_listen": "127.0.0.1:%d" % port,
        "notifier.backoff_base_ms": 200,
        "notifier.callback_networks_allowed": "127.0.0.0/8",
    })
    C.open()
    NOTIFIER = C.notifier(port)
    C.workers.append(NOTIFIER)  # cleanup and log dumps include it
    h.create_topics(C.brokers, [C.topic(t) for t in
                                (TOPIC, RETRY_TOPIC, DEAD_TOPIC)])
    C.start_manager()
    C.start_worker(0)
    C.start_worker(1)
    NOTIFIER.start()
    C._wait_http(NOTIFIER, NOTIFIER.addr, "/readyz", 60)
    READER = C.reader([TOPIC], kcat_args=READ_COMMITTED)
    submit({"id": "warmup", "topic": TOPIC, "delay_ms": 0, "body": "w",
            "callback": {"url": EP.url("ok/warmup")}})
    h.check(EP.wait("warmup", 1, 60) is not None, "warmup callback")


def submit(task):
    api = C.api()
    try:
        r = api.post("/v1/tasks", task)
    finally:
        api.close()
    h.check_eq(r.status, 201, "POST %s: %s" % (task.get("id"), r.text[:300]))
    return r.json


def submit_all(tasks):
    """Submits tasks (4 connections); {id: due_at} as answered."""
    res, _ = h.submit_many(C.manager_addr, tasks, threads=4)
    due = {}
    for t, r in zip(tasks, res):
        h.check(r.status == 201 and r.json, "submit %s: %s %s"
                % (t["id"], r.status, r.text[:200]))
        due[t["id"]] = r.json["due_at"]
    return due


def test_stream_restarts_recurring_callbacks_exactly_once():
    n, span_ms = 900, 8000
    t0 = h.now_ms() + 1500
    tasks = []
    for i in range(n):
        t = {"id": "e-%04d" % i, "topic": TOPIC, "body": "b%d" % i,
             "due_at": t0 + i * span_ms // n}
        if i % 9 == 0:
            t["callback"] = {"url": EP.url(("flaky/" if i == 99 else "ok/")
                                           + t["id"])}
        tasks.append(t)
    due = submit_all(tasks)
    series = submit({"id": "e-series", "topic": TOPIC, "body": "s",
                     "cron": "* * * * * *", "max_occurrences": 8,
                     "misfire": "fire_all"})["id"]

    # From this thread: a daemon dies with the thread that started it
    # (the harness's parent-death signal).
    time.sleep(3.0)
    C.workers[0].stop()        # SIGTERM: a graceful handover
    C.start_worker(C.workers[0])
    time.sleep(2.0)
    C.workers[1].kill()        # SIGKILL: its slots move after expiry
    C.start_worker(C.workers[1])
    missing = READER.wait_for(due.keys(), span_ms / 1000.0 + 40, settle=3.0)
    h.check(not missing, "%d of %d tasks never read (read_committed), e.g. "
            "%s" % (len(missing), n, sorted(missing)[:5]))
    h.wait_until(lambda: len(READER.by_id.get(series, [])) >= 8, 30,
                 what="8 occurrences of the series")
    time.sleep(2.0)  # room for a late duplicate
    p = h.Problems()
    with READER.cond:
        msgs = {tid: list(READER.by_id.get(tid, [])) for tid in due}
        occ = list(READER.by_id.get(series, []))
    dups = {tid: len(ms) for tid, ms in msgs.items() if len(ms) != 1}
    p.check(not dups, "exactly-once: %d task(s) not read exactly once, "
            "e.g. %s" % (len(dups), sorted(dups.items())[:5]))
    for tid, ms in msgs.items():
        for m in ms:
            fired = int(m.hdr.get("prophet-fired-at", "0"))
            p.check(fired >= due[tid], "%s fired early: %d < %d"
                    % (tid, fired, due[tid]))
    occs = [int(m.hdr["prophet-occurrence"]) for m in occ]
    p.check(len(occs) == 8 and len(set(occs)) == 8,
            "series: occurrences %s (want 8, each once)" % occs)
    p.check(occs == sorted(occs), "series out of order: %s" % occs)
    p.check(all(b - a == 1000 for a, b in zip(occs, occs[1:])),
            "series: an occurrence missing or extra: %s" % occs)
    # Callbacks: once each, the flaky one twice with the same key.
    cbs = [t for t in tasks if "callback" in t]
    for t in cbs:
        want = 2 if t["id"] == "e-0099" else 1
        calls = EP.wait(t["id"], want, 60)
        if not p.check(calls is not None, "callback of %s: %d call(s), "
                       "want %d" % (t["id"], EP.count(t["id"]), want)):
            continue
        keys = [c["headers"].get("idempotency-key") for c in calls]
        p.check(keys == ["%s:%d" % (t["id"], due[t["id"]])] * want,
                "%s: Idempotency-Key %s, want %s:%d on every call"
                % (t["id"], keys, t["id"], due[t["id"]]))
    time.sleep(1.5)
    extra = {t["id"]: EP.count(t["id"]) for t in cbs
             if EP.count(t["id"]) != (2 if t["id"] == "e-0099" else 1)}
    p.check(not extra, "callbacks not made exactly once: %s"
            % sorted(extra.items())[:5])
    rec = 0
    for w in C.workers[:2]:
        for line in w.grep("exactly-once slot opened"):
            mm = re.search(r"recording=(\d+)", line)
            rec += int(mm.group(1)) if mm else 0
    print("# eos-stream: tasks=%d read_once=%d duplicates=0 series=%d "
          "occurrences callbacks=%d found_committed_at_takeover=%d"
          % (n, n - len(dups), len(occs), len(cbs), rec), flush=True)
    p.raise_if_any("exactly-once stream")


def test_metrics_and_checkpoints():
    txns = recs = fails = 0
    for w in C.workers[:2]:
        m = h.metrics(w.addr)
        txns += m.get("prophet_eos_transactions_total", 0)
        recs += m.get("prophet_eos_transaction_tasks_total", 0)
        fails += m.get("prophet_eos_transaction_failures_total", 0)
    h.check(txns > 0 and recs > 0, "transactions %s, tasks in them %s"
            % (txns, recs))
    # Checkpoints move within a second of the last records.
    def saved():
        rows = C.mysql("SELECT slot, eos_offset, eos_part FROM slot_state "
                       "ORDER BY slot")
        return rows if len(rows) == C.slots and all(
            r[1] is not None and r[1] != "NULL" and int(r[1]) > 0 and
            r[2] == str(SHARED_PART) for r in rows) else None
    rows = h.wait_until(saved, 15, 0.5, "a checkpoint for every slot")
    print("# eos-metrics: transactions=%d tasks=%d tasks_per_transaction="
          "%.1f failed_transactions=%d checkpoints=%s"
          % (txns, recs, recs / txns, fails,
             ",".join("%s:%s" % (r[0], r[1]) for r in rows)), flush=True)


def test_marker_topic_too_few_partitions():
    topic = C.topic("few.fired")
    servers.kafka_topics_cli(C.brokers, "--create", "--topic", topic,
                             "--partitions", "2", "--replication-factor",
                             "1")
    p = h.Proc("worker-few", [
        os.path.join(h.BUILDDIR, "prophet-worker"), "-c", C.conf_path,
        "--set", "kafka.eos_topic=" + topic,
        "--set", "worker.id=few-" + C.tag,
        "--set", "worker.http_listen=127.0.0.1:%d" % h.free_port()],
        os.path.join(C.dir, "worker-few.log")).start()
    rc = p.wait(60)
    if rc is None:
        p.kill()
    tail = p.tail(5)
    h.check(rc is not None and rc != 0, "worker started with a 2-partition "
            "marker topic (16 slots); log %s" % tail)
    h.check(any("fewer partitions" in l and topic in l and
                "partitions=2" in l and "slots=16" in l for l in tail),
            "no message naming the topic and the counts: %s" % tail)
    print("# eos-few-partitions: exit %d: %s" % (rc, tail[-1][:200]),
          flush=True)


def test_commit_outcome_unknown():
    """A transaction that committed, but whose answer the worker did not
    get (fault point eos_commit_unknown at the 30th transaction, the
    crash-point build of the worker): the worker makes its producer again
    and opens every slot again; the tasks of that transaction are found by
    their markers and recorded, not fired again, and the rest fire: every
    task once, none early."""
    cp = os.path.join(h.BUILDDIR, "tests", "crash", "prophet-worker-cp")
    h.check(os.access(cp, os.X_OK), "%s is missing: `make check` builds "
            "it" % cp)
    w0, w1 = C.workers[0], C.workers[1]
    w1.stop()
    w0.stop()
    ready0 = len(w0.grep('msg="exactly-once producer ready"'))
    slots0 = len(w0.grep('msg="exactly-once slot ready"'))
    argv0, env0 = list(w0.argv), w0.env
    w0.argv = [cp] + argv0[1:]
    w0.env = {"PROPHET_FAULT_AT": "eos_commit_unknown:30"}
    try:
        C.start_worker(w0)
    finally:
        w0.argv, w0.env = argv0, env0
    # Every slot on w0 (w1's once its session is gone) before the stream.
    h.wait_until(lambda: len(w0.grep('msg="exactly-once slot ready"')) -
                 slots0 >= C.slots, 30, 0.2, "every slot ready on worker 1")
    n, span_ms = 400, 4000
    t0 = h.now_ms() + 1500
    tasks = [{"id": "u-%04d" % i, "topic": TOPIC, "body": "u%d" % i,
              "due_at": t0 + i * span_ms // n} for i in range(n)]
    due = submit_all(tasks)
    missing = READER.wait_for(due.keys(), span_ms / 1000.0 + 30, settle=3.0)
    p = h.Problems()
    p.check(not missing, "%d of %d tasks never read (read_committed), e.g. "
            "%s" % (len(missing), n, sorted(missing)[:5]))
    with READER.cond:
        msgs = {tid: list(READER.by_id.get(tid, [])) for tid in due}
    dups = {tid: len(ms) for tid, ms in msgs.items() if len(ms) > 1}
    p.check(not dups, "%d task(s) read more than once, e.g. %s"
            % (len(dups), sorted(dups.items())[:5]))
    for tid, ms in msgs.items():
        for m in ms:
            fired = int(m.hdr.get("prophet-fired-at", "0"))
            p.check(fired >= due[tid], "%s fired early: %d < %d"
                    % (tid, fired, due[tid]))
    p.check(w0.grep("fault point reached"), "the fault point was not "
            "reached")
    unknown = [l for l in w0.grep("exactly-once transaction failed")
               if "outcome=unknown" in l and "eos_commit_unknown" in l]
    p.check(unknown, "no 'transaction failed ... outcome=unknown' line")
    ready = w0.grep('msg="exactly-once producer ready"')[ready0:]
    p.check(len(ready) == 2, "producer ready %d time(s) since the start, "
            "want 2 (made, made again)" % len(ready))
    fault_ms = min([h.log_ts_ms(l) or 0 for l in unknown] or [0])
    opened = [l for l in w0.grep('msg="exactly-once slot opened"')
              if (h.log_ts_ms(l) or 0) >= fault_ms]
    p.check(len(opened) == C.slots, "%d slot opens after the unknown "
            "outcome, want %d (every slot again)" % (len(opened), C.slots))
    rec = sum(int(m.group(1)) for m in
              (re.search(r"recording=(\d+)", l) for l in opened) if m)
    p.check(rec >= 1, "the reopened slots recorded %d committed task(s) "
            "found by their markers, want at least 1" % rec)
    print("# eos-commit-unknown: tasks=%d read_once=%d duplicates=%d "
          "reopened_slots=%d found_committed=%d"
          % (n, n - len(missing) - len(dups), sum(dups.values()) - len(dups),
             len(opened), rec), flush=True)
    p.raise_if_any("commit outcome unknown")


def test_upgrade_from_slot_partitions():
    w0, w1 = C.workers[0], C.workers[1]
    line = w0.grep('msg="exactly-once publishing"')
    h.check(line, "no 'exactly-once publishing' line")
    topic = re.search(r"topic=(\S+)", line[-1]).group(1)
    w0.stop()
    w1.stop()
    # a task due soon in a slot whose own partition is not the shared one
    for i in range(64):
        r = submit({"id": "legacy-%02d" % i, "topic": TOPIC, "body": "l",
                    "due_at": h.now_ms() + 8000})
        if r["slot"] != SHARED_PART:
            break
    tid, slot, due = r["id"], r["slot"], r["due_at"]
    # what a worker of the version before leaves when it dies after the
    # commit, before the delivered record: its marker in partition <slot>,
    # and a record without a partition (checkpoint: none yet)
    C.mysql("UPDATE slot_state SET eos_part = NULL, eos_offset = NULL, "
            "eos_txid = NULL WHERE slot = %d" % slot)
    k = subprocess.run(["kcat", "-P", "-b", C.brokers, "-t", topic, "-p",
                        str(slot), "-K", "\t"],
                       input=("%s\t1 %d %d 1 1 0\n" % (tid, due, due))
                       .encode(), capture_output=True, timeout=60)
    h.check_eq(k.returncode, 0, "kcat produce: %s" % k.stderr)
    moved0 = len(w0.grep('msg="exactly-once checkpoint moved"'))
    C.start_worker(w0)

    def moved():
        return [l for l in w0.grep('msg="exactly-once checkpoint moved"')
                [moved0:] if " slot=%d " % slot in l + " "]
    lines = h.wait_until(moved, 30, 0.2, "slot %d's checkpoint moved"
                         % slot)
    missing = READER.wait_for([tid], (due - h.now_ms()) / 1000.0 + 5,
                              settle=0)
    p = h.Problems()
    p.check(missing == [tid], "%s (its marker found in partition %d) was "
            "published again: %d cop(ies) read" % (
                tid, slot, len(READER.by_id.get(tid, []))))
    p.check("from_partition=%d partition=%d " % (slot, SHARED_PART) in
            lines[-1] + " ", "checkpoint moved from partition %d to %d: %s"
            % (slot, SHARED_PART, lines[-1][:300]))
    row = C.mysql("SELECT eos_part FROM slot_state WHERE slot = %d" % slot)
    p.check(row and row[0][0] == str(SHARED_PART), "slot_state.eos_part of "
            "slot %d: %s, want %d" % (slot, row, SHARED_PART))
    api = C.api()
    try:
        g = api.get("/v1/tasks/%s" % tid)
    finally:
        api.close()
    p.check(g.status == 200 and g.json.get("status") == "delivered",
            "%s in the DB: %s %s" % (tid, g.status, g.text[:200]))
    opened = [l for l in w0.grep('msg="exactly-once slot opened"')
              if " slot=%d " % slot in l]
    print("# eos-upgrade: task=%s slot=%d published=%d status=%s %s"
          % (tid, slot, len(READER.by_id.get(tid, [])),
             g.json.get("status") if g.json else g.status,
             re.sub(r".*(partition=\d+ from=\S+ end=\S+ markers=\d+ "
                    r"recording=\d+).*", r"\1", opened[-1]) if opened
             else "no open line"), flush=True)
    p.raise_if_any("upgrade from slot partitions")


def cleanup(failed):
    if EP is not None:
        EP.close()
    if C is not None:
        C.close(failed=failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs(25) if C is not None else None)


if __name__ == "__main__":
    main()
