#!/usr/bin/python3
"""W3C trace context end to end, on the real dev cluster (manager, one
worker, a notifier, a local HTTP receiver):
  1. POST /v1/tasks with traceparent/tracestate HTTP headers: the Kafka
     message carries both headers, the callback request carries both, the
     task view shows them, and the manager, worker and notifier log lines
     about the task carry trace=<trace-id> (cancel and reschedule too).
  2. A replay with a new parent-id (a client's retry) is a replay (200).
  3. Batch: per-task fields, and the request's headers for tasks without
     their own; mykit-delay's /push: the request's headers; Kafka ingest:
     task fields.
  4. A failing callback: the retry call carries the same trace context.
  5. A recurring task: every occurrence carries the same trace context.
  6. Redis down (DB mode): the publish still carries it.
  7. Invalid values: 400 naming traceparent / tracestate (HTTP headers,
     fields, batch items, headers map).
"""

import json
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import servers as s  # noqa: E402

TOPIC = "traced"
RETRY_TOPIC = "prophet.callback-retry"
DEAD_TOPIC = "prophet.callback-dead"
TID = "4bf92f3577b34da6a3ce929d0e0e4736"
TP = "00-%s-00f067aa0ba902b7-01" % TID
TS = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"

C = None
EP = None
READER = None
NOTIFIER = None
INGEST = None


def tp(n):
    """A traceparent of trace-id n (32 hex)."""
    return "00-%032x-00f067aa0ba902b7-01" % n


def called(tid, n=1, timeout=60):
    """The headers of tid's first n callback calls (fails after timeout)."""
    calls = EP.wait(tid, n, timeout)
    h.check(calls is not None, "callback of %s called %d times, want %d"
            % (tid, EP.count(tid), n))
    return [c["headers"] for c in calls]


def setup():
    global C, EP, READER, NOTIFIER, INGEST
    EP = h.CallbackSink()
    port = h.free_port()
    tag = h.rand_tag()
    INGEST = "ingest-" + tag
    C = h.Cluster(workers=1, name="trace", conf={
        "notifier.topics": TOPIC,
        "notifier.http_listen": "127.0.0.1:%d" % port,
        "notifier.backoff_base_ms": 200,
        "notifier.callback_networks_allowed": "127.0.0.0/8",
        "kafka.ingest_topic": INGEST,
        "kafka.ingest_group": "grp-" + tag,
        "log.level": "debug",
    })
    C.open()
    NOTIFIER = C.notifier(port)
    C.workers.append(NOTIFIER)  # cleanup and log dumps include it
    h.create_topics(C.brokers, [C.topic(t) for t in
                                (TOPIC, RETRY_TOPIC, DEAD_TOPIC)] +
                    [INGEST, INGEST + ".errors"])
    C.start_manager()
    C.start_worker(0)
    NOTIFIER.start()
    C._wait_http(NOTIFIER, NOTIFIER.addr, "/readyz", 60)
    READER = C.reader([TOPIC])
    # the consumer group's first assignment takes a few seconds
    submit({"id": "warmup", "topic": TOPIC, "delay_ms": 0, "body": "w",
            "callback": {"url": EP.url("ok/warmup")}})
    called("warmup")


def submit(task, headers=None, path="/v1/tasks", want=201):
    api = C.api()
    try:
        r = api.request("POST", path, task, headers=headers)
    finally:
        api.close()
    h.check_eq(r.status, want, "POST %s: %s" % (path, r.text[:300]))
    return r


def message(tid, timeout=30, reader=None):
    reader = reader or READER
    h.check(not reader.wait_for([tid], timeout), "%s not published" % tid)
    with reader.cond:
        return reader.by_id[tid][0]


def test_http_headers_end_to_end():
    tid = "tr-http"
    submit({"id": tid, "topic": TOPIC, "body": "b", "delay_ms": 300,
            "callback": {"url": EP.url("ok/" + tid)}},
           headers={"traceparent": TP, "tracestate": TS})
    m = message(tid)
    h.check_eq(m.hdr.get("traceparent"), TP, "Kafka header traceparent")
    h.check_eq(m.hdr.get("tracestate"), TS, "Kafka header tracestate")
    call = called(tid)[0]
    h.check_eq(call.get("traceparent"), TP, "callback traceparent")
    h.check_eq(call.get("tracestate"), TS, "callback tracestate")
    api = C.api()
    try:
        t = api.get("/v1/tasks/" + tid).json
    finally:
        api.close()
    h.check_eq(t["headers"].get("traceparent"), TP, "stored traceparent")
    want = "id=%s trace=%s" % (tid, TID)
    h.wait_until(lambda: NOTIFIER.grep(want), 10, 0.2,
                 "notifier log line with %s" % want)
    # The worker logs "task published" at the delivery report, which can
    # come after the notifier read the message and made the callback
    # (failed a sanitizer CI run: the line came 8 ms after the callback).
    for proc, msg in ((C.manager, "task submitted"),
                      (C.workers[0], "task published"),
                      (NOTIFIER, "callback done")):
        h.wait_until(lambda: [l for l in proc.grep(want) if msg in l], 10,
                     0.1, "%s: '%s' line with %s" % (proc.name, msg, want))


def test_cancel_and_reschedule_lines_carry_trace():
    tid = "tr-change"
    submit({"id": tid, "topic": TOPIC, "body": "b", "delay_ms": 600000,
            "traceparent": tp(9)})
    api = C.api()
    try:
        r = api.request("PATCH", "/v1/tasks/" + tid, {"delay_ms": 700000})
        h.check_eq(r.status, 200, "reschedule")
        r = api.request("DELETE", "/v1/tasks/" + tid)
        h.check_eq(r.status, 200, "cancel")
    finally:
        api.close()
    want = "id=%s trace=%032x" % (tid, 9)
    for msg in ("task rescheduled", "task cancelled"):
        h.wait_until(lambda: [l for l in C.manager.grep(want) if msg in l],
                     10, 0.2, "'%s' line with %s" % (msg, want))


def test_replay_with_new_parent_is_replay():
    tid = "tr-replay"
    task = {"id": tid, "topic": TOPIC, "body": "b", "delay_ms": 600000}
    submit(task, headers={"traceparent": tp(7)})
    r = submit(task, headers={"traceparent":
                              tp(7).replace("00f067aa0ba902b7",
                                            "1111111111111111")}, want=200)
    h.check_eq(r.json["status"], "scheduled", "replay answer")
    rows = C.mysql("SELECT headers FROM tasks WHERE id = '%s'" % tid)
    h.check_eq(json.loads(rows[0][0]).get("traceparent"), tp(7),
               "the first submission's traceparent stays")


def test_batch_fields_and_request_default():
    tasks = [{"id": "tr-b1", "topic": TOPIC, "body": "1", "delay_ms": 100,
              "traceparent": tp(1), "tracestate": "a=1"},
             {"id": "tr-b2", "topic": TOPIC, "body": "2", "delay_ms": 100,
              "headers": {"traceparent": tp(2)}},
             {"id": "tr-b3", "topic": TOPIC, "body": "3", "delay_ms": 100}]
    r = submit({"tasks": tasks}, headers={"traceparent": tp(3)},
               path="/v1/tasks/batch", want=200)
    h.check_eq([x["code"] for x in r.json["results"]], [201, 201, 201],
               "batch results")
    got = {}
    for tid in ("tr-b1", "tr-b2", "tr-b3"):
        m = message(tid)
        got[tid] = (m.hdr.get("traceparent"), m.hdr.get("tracestate"))
    h.check_eq(got, {"tr-b1": (tp(1), "a=1"), "tr-b2": (tp(2), None),
                     "tr-b3": (tp(3), None)}, "trace headers per task")


def test_mykit_push_takes_request_headers():
    """mykit-delay's /push is a submission like POST /v1/tasks: a client
    whose HTTP library sends the trace context (as instrumented ones do)
    gets it on the publish and the callback's request. It was dropped."""
    r = submit({"id": "tr-mk", "topic": TOPIC, "body": "m", "delay": 100},
               headers={"traceparent": tp(5), "tracestate": "mk=1"},
               path="/push", want=200)
    h.check_eq(r.json, {"success": True, "data": "tr-mk", "code": 200},
               "/push answer")
    m = message("tr-mk")
    h.check_eq((m.hdr.get("traceparent"), m.hdr.get("tracestate")),
               (tp(5), "mk=1"), "trace headers of a mykit push")
    r = submit({"id": "tr-mk2", "topic": TOPIC, "body": "m", "delay": 100},
               headers={"traceparent": "00-xyz"}, path="/push", want=200)
    h.check(not r.json["success"] and "traceparent" in r.json["message"],
            "a bad traceparent refused in mykit's shape: %r" % r.json)


def test_prophetctl_push_carries_trace():
    """prophetctl push --traceparent/--tracestate: the task fields, so the
    publish carries them; a bad value is the manager's 400, shown."""
    ctl = os.path.join(h.BUILDDIR, "prophetctl")
    url = "http://" + C.manager_addr
    p = subprocess.run([ctl, "--url", url, "push", "--topic", TOPIC,
                        "--body", "c", "--id", "tr-cli", "--delay", "100",
                        "--traceparent", tp(7), "--tracestate", "cli=1"],
                       capture_output=True, text=True, timeout=60)
    h.check_eq(p.returncode, 0, "prophetctl push: %s" % p.stderr)
    m = message("tr-cli")
    h.check_eq((m.hdr.get("traceparent"), m.hdr.get("tracestate")),
               (tp(7), "cli=1"), "trace headers of the CLI's task")
    p = subprocess.run([ctl, "--url", url, "push", "--topic", TOPIC,
                        "--body", "c", "--delay", "100", "--traceparent",
                        "00-xyz"], capture_output=True, text=True,
                       timeout=60)
    h.check(p.returncode != 0 and "traceparent" in p.stderr,
            "a bad traceparent refused, naming it: rc %d, %r"
            % (p.returncode, p.stderr))


def test_kafka_ingest_fields():
    line = json.dumps({"id": "tr-k1", "topic": TOPIC, "body": "k",
                       "delay_ms": 100, "traceparent": tp(4),
                       "tracestate": "k=v"})
    p = subprocess.run(["kcat", "-P", "-b", C.brokers, "-t", INGEST],
                       input=line + "\n", text=True, capture_output=True,
                       timeout=30)
    h.check_eq(p.returncode, 0, "kcat produce: %s" % p.stderr)
    m = message("tr-k1", 60)
    h.check_eq((m.hdr.get("traceparent"), m.hdr.get("tracestate")),
               (tp(4), "k=v"), "Kafka-ingested trace context")


def test_callback_retry_keeps_trace():
    tid = "tr-flaky"
    submit({"id": tid, "topic": TOPIC, "body": "b", "delay_ms": 0,
            "traceparent": tp(5),
            "callback": {"url": EP.url("flaky/" + tid)}})
    calls = called(tid, 2)
    h.check_eq([c.get("traceparent") for c in calls], [tp(5), tp(5)],
               "traceparent of the first call and of the retry")
    want = "id=%s trace=%032x" % (tid, 5)
    h.wait_until(lambda: [l for l in NOTIFIER.grep(want)
                          if "retry scheduled" in l], 10, 0.2,
                 "retry log line with the trace id")


def test_recurring_occurrences_share_trace():
    tid = "tr-cron"
    submit({"id": tid, "topic": TOPIC, "body": "c", "cron": "* * * * * *",
            "traceparent": tp(6)})
    try:
        h.wait_until(lambda: len([m for m in READER_msgs() if m.id == tid])
                     >= 2, 20, 0.2, "two occurrences")
    finally:
        api = C.api()
        try:
            api.request("DELETE", "/v1/tasks/" + tid)
        finally:
            api.close()
    occ = [m for m in READER_msgs() if m.id == tid]
    h.check(len({m.hdr.get("prophet-occurrence") for m in occ}) >= 2,
            "distinct occurrences")
    h.check_eq({m.hdr.get("traceparent") for m in occ}, {tp(6)},
               "traceparent of every occurrence")


def READER_msgs():
    with READER.cond:
        return list(READER.messages)


def test_db_mode_publish_carries_trace():
    """Redis down: the worker fires from the DB rows, headers included."""
    rd = s.PrivateRedis().start()
    c = s.Cluster(workers=1, name="trace-db", redis=rd,
                  conf={"redis.timeout_ms": 1000}).open()
    failed = True
    try:
        c.start()
        h.create_topics(c.brokers, [c.topic(TOPIC)])
        reader = c.reader([TOPIC])
        rd.stop()
        h.wait_until(lambda: c.workers[0].grep("redis fallback on"), 30,
                     0.2, "DB mode")
        api = c.api()
        try:
            r = api.request("POST", "/v1/tasks",
                            {"id": "tr-db", "topic": TOPIC, "body": "d",
                             "delay_ms": 500},
                            headers={"traceparent": tp(8),
                                     "tracestate": "d=b"})
            h.check_eq(r.status, 201, "submit with Redis down (%r)" % r)
        finally:
            api.close()
        m = message("tr-db", 30, reader)
        h.check_eq((m.hdr.get("traceparent"), m.hdr.get("tracestate")),
                   (tp(8), "d=b"), "DB-mode publish trace headers")
        failed = False
    finally:
        c.close(failed=failed)
        rd.close()


BAD_PARENTS = [
    "00-%s-00f067aa0ba902b7" % TID,                      # short
    TP.upper(),                                          # uppercase
    "00-%s-00f067aa0ba902b7-01" % ("0" * 32),            # zero trace-id
    "00-%s-0000000000000000-01" % TID,                   # zero parent-id
    "01-%s-00f067aa0ba902b7-01" % TID,                   # version
    TP + "-extra",
]


def test_invalid_values_400():
    api = C.api()
    base = {"topic": TOPIC, "body": "x", "delay_ms": 600000}
    try:
        for bad in BAD_PARENTS:
            r = api.request("POST", "/v1/tasks", base,
                            headers={"traceparent": bad})
            h.check_eq((r.status, r.json["error"]["field"]),
                       (400, "traceparent"), "header %r" % bad)
            r = api.post("/v1/tasks", dict(base, traceparent=bad))
            h.check_eq((r.status, r.json["error"]["field"]),
                       (400, "traceparent"), "field %r" % bad)
        for bad in ["a", "A=1", "a=1,a=2", "x" * 513, "k=" + "v" * 300]:
            r = api.request("POST", "/v1/tasks", base,
                            headers={"traceparent": TP, "tracestate": bad})
            h.check_eq((r.status, r.json["error"]["field"]),
                       (400, "tracestate"), "tracestate %r" % bad[:20])
        r = api.request("POST", "/v1/tasks", base,
                        headers={"tracestate": "a=1"})
        h.check_eq((r.status, r.json["error"]["field"]),
                   (400, "tracestate"), "tracestate without traceparent")
        r = api.post("/v1/tasks", dict(base, headers={"traceparent": "x"}))
        h.check_eq((r.status, r.json["error"]["field"]),
                   (400, "traceparent"), "headers.traceparent")
        r = api.post("/v1/tasks/batch", {"tasks": [
            dict(base, id="tr-ok", traceparent=TP),
            dict(base, id="tr-bad", traceparent="00-zz")]})
        h.check_eq(r.status, 200, "batch")
        res = r.json["results"]
        h.check_eq((res[0]["code"], res[1]["code"],
                    res[1]["error"]["field"]), (201, 400, "traceparent"),
                   "batch item results")
        rows = C.mysql("SELECT COUNT(*) FROM tasks WHERE id = 'tr-bad'")
        h.check_eq(int(rows[0][0]), 0, "refused task not stored")
    finally:
        api.close()


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)
    if EP is not None:
        EP.close()


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
