#!/usr/bin/python3
"""One rule for U+0000 on every field and every path.

`body` may hold NUL (and any other character) and is carried byte for
byte: API or Kafka ingest or /push -> DB -> Redis payload (due set and
buckets) -> Kafka value, the horizon loader, a rebuild of the Redis index
from the DB, restore of one task, the next occurrences of a recurring
task, DB mode while Redis is down, GET /v1/tasks/{id}, replays.

Every other string refuses it with 400 invalid_value and its field: id,
topic, key, header values, callback url/method/headers, cron, timezone,
misfire, the mykit-delay fields; names (header names, fields) cannot hold
it at all (400 invalid_json from the parser); ids and query parameters in
URLs (GET/DELETE /v1/tasks/a%00b, list ?topic=a%00b) are refused too.
"""

import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import servers as s  # noqa: E402

C = None
RD = None
INGEST = None
TOPIC = "nul"
# NUL first, last and doubled, other control characters, what JSON
# escapes, multi-byte characters.
BODY = "\u0000nul\u0000\u0000inside \u0001\u001f\u007f \"q\" \\ /\n\u00e9 " \
       "\u65e5 \U0001F680 end\u0000"
FAR = {}    # the loader's task, submitted first, checked last


def body(tid):
    return BODY + tid + "\u0000"


def setup():
    global C, RD, INGEST
    tag = h.rand_tag()
    INGEST = "ingest-" + tag
    # Small windows: buckets (due after 3 s) and the loader (after 10 s +
    # the manager's 10 s overlap, the least task.index_margin_ms takes) are
    # reached within a test run.
    C = h.Cluster(workers=1, name="nul",
                  conf={"task.bucket_ms": 1000, "task.bucket_near_ms": 3000,
                        "task.horizon_ms": 10000,
                        "task.index_margin_ms": 10000,
                        "kafka.ingest_topic": INGEST,
                        "kafka.ingest_group": "grp-" + tag}).open()
    h.create_topics(C.brokers, [INGEST, INGEST + ".errors",
                                C.topic(TOPIC)])
    C.start()
    C.rd = C.reader([TOPIC])
    RD = s.PrivateRedis()
    RD.start_async()


def call(method, path, body=None):
    api = C.api()
    hdrs = {"Content-Type": "application/json"} \
        if isinstance(body, bytes) else None
    try:
        return api.request(method, path, body, headers=hdrs)
    finally:
        api.close()


def task(tid, delay_ms, **kw):
    t = {"id": tid, "topic": TOPIC, "body": body(tid), "delay_ms": delay_ms}
    t.update(kw)
    return t


def db_body(tid):
    rows = C.mysql("SELECT HEX(body) FROM tasks WHERE id = '%s'" % tid)
    return bytes.fromhex(rows[0][0]) if rows else None


def check_fired(p, reader, ids, timeout, what):
    missing = reader.wait_for(ids, timeout)
    p.check(not missing, "%s: not published: %s" % (what, missing))
    for tid in ids:
        for m in reader.by_id.get(tid, []):
            p.check(m.payload == body(tid), "%s: %s published %r, want %r"
                    % (what, tid, m.payload, body(tid)))


def check_stored(p, ids, what):
    for tid in ids:
        got = db_body(tid)
        p.check(got == body(tid).encode(), "%s: %s stored %r" % (what, tid,
                                                                  got))
        r = call("GET", "/v1/tasks/" + tid)
        p.check(r.status == 200 and r.json and r.json["body"] == body(tid),
                "%s: GET %s: %r" % (what, tid, r))


# ------------------------------------------------------------- body ---

def test_body_every_submit_path():
    FAR["id"] = "nul-loader"
    r = call("POST", "/v1/tasks", task(FAR["id"], 25000))
    h.check_eq(r.status, 201, "the loader's task (%r)" % r)
    red = C.redis()
    try:
        h.check(red.cmd("HEXISTS", "{prophet:%d}:task" % r.json["slot"],
                        FAR["id"]) == 0, "beyond the horizon: DB only")
    finally:
        red.close()
    p = h.Problems()
    r = call("POST", "/v1/tasks", task("nul-single", 1500))
    p.check(r.status == 201, "single: %r" % r)
    r = call("POST", "/v1/tasks/batch", {"tasks": [
        task("nul-batch-1", 1500), task("nul-batch-2", 1500)]})
    p.check([x["code"] for x in r.json["results"]] == [201, 201],
            "batch: %r" % r)
    # Due after bucket_near_ms: through a bucket (LIST element) first.
    r = call("POST", "/v1/tasks", task("nul-bucket", 6000))
    p.check(r.status == 201, "bucket: %r" % r)
    r = call("POST", "/push", {"id": "nul-mykit", "topic": TOPIC,
                               "body": body("nul-mykit"), "delay": 1500})
    p.check(r.status == 200 and r.json.get("success"), "push: %r" % r)
    prod = subprocess.run(
        ["kcat", "-P", "-b", C.brokers, "-t", INGEST],
        input=json.dumps(task("nul-kafka", 1500)).encode() + b"\n",
        capture_output=True, timeout=60)
    p.check(prod.returncode == 0, "kcat: %s" % prod.stderr)
    ids = ["nul-single", "nul-batch-1", "nul-batch-2", "nul-bucket",
           "nul-mykit", "nul-kafka"]
    check_fired(p, C.rd, ids, 30, "submit paths")
    check_stored(p, ids, "submit paths")
    p.raise_if_any("body through every submit path")


def test_body_replay_and_conflict():
    r = call("POST", "/v1/tasks", task("nul-replay", 3600000))
    h.check_eq(r.status, 201, "first")
    r = call("POST", "/v1/tasks", task("nul-replay", 3600000))
    h.check_eq(r.status, 200, "the same bytes: a replay")
    other = task("nul-replay", 3600000, body=body("nul-replay") + "x")
    r = call("POST", "/v1/tasks", other)
    h.check_eq(r.status, 409, "bytes after a NUL differ: a conflict")


def test_body_rebuild_from_db():
    """The Redis index is lost (FLUSHDB): each slot is rebuilt from the
    DB, the payload made again from the row."""
    ids = ["nul-rebuild-%d" % i for i in range(4)]
    for tid in ids:
        h.check_eq(call("POST", "/v1/tasks", task(tid, 5000)).status, 201,
                   "submit")
    r = C.redis()
    try:
        r.cmd("FLUSHDB")
        r.cmd("SET", C.REDIS_MARK, C.tag)
    finally:
        r.close()
    h.wait_until(lambda: C.workers[0].grep("slot index rebuilt") and
                 len(C.workers[0].grep("slot index rebuilt")) >= 2 * C.slots,
                 20, 0.2, "every slot rebuilt")
    p = h.Problems()
    check_fired(p, C.rd, ids, 30, "rebuild")
    p.raise_if_any("body after a rebuild")


def test_body_restore_one():
    tid = "nul-restore"
    # Due before bucket_near_ms: in the due set at once.
    r = call("POST", "/v1/tasks", task(tid, 2500))
    h.check_eq(r.status, 201, "submit")
    slot = r.json["slot"]
    red = C.redis()
    try:
        h.wait_until(lambda: red.cmd("ZSCORE", "{prophet:%d}:due" % slot,
                                     tid), 2, 0.01, "indexed")
        h.check_eq(red.cmd("ZREM", "{prophet:%d}:due" % slot, tid), 1,
                   "taken out of the due set")
        red.cmd("HDEL", "{prophet:%d}:task" % slot, tid)
    finally:
        red.close()
    r = call("POST", "/v1/tasks/%s/restore" % tid, {})
    h.check(r.status in (200, 202), "restore: %r" % r)
    p = h.Problems()
    check_fired(p, C.rd, [tid], 30, "restore")
    p.raise_if_any("body after restore")


def test_body_recurring_occurrences():
    tid = "nul-cron"
    t = {"id": tid, "topic": TOPIC, "body": body(tid),
         "cron": "* * * * * *", "max_occurrences": 3}
    h.check_eq(call("POST", "/v1/tasks", t).status, 201, "submit")
    h.wait_until(lambda: len(C.rd.by_id.get(tid, [])) >= 3, 30, 0.2,
                 "three occurrences")
    p = h.Problems()
    msgs = C.rd.by_id[tid]
    p.check(len({m.hdr.get("prophet-occurrence") for m in msgs}) >= 3,
            "three occurrences: %s" % [m.hdr for m in msgs])
    for m in msgs:
        p.check(m.payload == body(tid), "occurrence %s: %r"
                % (m.hdr.get("prophet-occurrence"), m.payload))
    p.raise_if_any("body of every occurrence")


def test_body_db_mode():
    """Redis down: the worker fires from the DB (payload from the row)."""
    rd = RD.wait_ready()
    c = s.Cluster(workers=1, name="nul-dbmode", redis=rd,
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
            ids = ["nul-dbmode-%d" % i for i in range(3)]
            for tid in ids:
                r = api.post("/v1/tasks", task(tid, 1000))
                h.check_eq(r.status, 201, "submit with Redis down (%r)" % r)
        finally:
            api.close()
        p = h.Problems()
        check_fired(p, reader, ids, 30, "DB mode")
        p.raise_if_any("body in DB mode")
        failed = False
    finally:
        c.close(failed=failed)


# ---------------------------------------------------- everything else ---

REFUSED = [
    ("id", {"id": "a\u0000b"}),
    ("topic", {"topic": "t\u0000x"}),
    ("key", {"key": "k\u0000"}),
    ("headers", {"headers": {"h": "v\u0000"}}),
    ("callback.url", {"callback": {"url": "http://cb.invalid/\u0000"}}),
    ("callback.method", {"callback": {"url": "http://cb.invalid/",
                                      "method": "POST\u0000"}}),
    ("callback.headers", {"callback": {"url": "http://cb.invalid/",
                                       "headers": {"h": "\u0000"}}}),
    ("cron", {"cron": "* * * * *\u0000", "delay_ms": None}),
    ("timezone", {"cron": "* * * * *", "timezone": "UTC\u0000",
                  "delay_ms": None}),
    ("misfire", {"cron": "* * * * *", "misfire": "skip\u0000",
                 "delay_ms": None}),
]


def refused_task(i, extra):
    t = {"id": "nul-ref-%d" % i, "topic": TOPIC, "body": "b",
         "delay_ms": 60000}
    for k, v in extra.items():
        if v is None:
            del t[k]
        else:
            t[k] = v
    return t


def test_nul_refused_everywhere_else():
    p = h.Problems()
    tasks = [refused_task(i, extra) for i, (_, extra) in enumerate(REFUSED)]
    for (field, _), t in zip(REFUSED, tasks):
        r = call("POST", "/v1/tasks", t)
        e = (r.json or {}).get("error") or {}
        p.check((r.status, e.get("code"), e.get("field")) ==
                (400, "invalid_value", field), "POST with NUL in %s: %r"
                % (field, r))
    r = call("POST", "/v1/tasks/batch", {"tasks": tasks})
    for (field, _), x in zip(REFUSED, r.json["results"]):
        p.check((x["code"], x["error"]["field"]) == (400, field),
                "batch with NUL in %s: %r" % (field, x))
    # Names cannot hold it: the parser refuses the document.
    for doc in (b'{"topic":"nul","body":"b","delay_ms":1,'
                b'"headers":{"a\\u0000b":"v"}}',
                b'{"topic":"nul","body":"b","delay_ms":1,"x\\u0000":1}'):
        r = call("POST", "/v1/tasks", doc)
        p.check(r.status == 400 and r.json["error"]["code"] ==
                "invalid_json", "NUL in a name: %r" % r)
    # mykit-delay fields map onto the same rule.
    for field, extra in (("topic", {"topic": "c\u0000"}),
                         ("subtopic", {"subtopic": "s\u0000"}),
                         ("bizKey", {"bizKey": "k\u0000"}),
                         ("id", {"id": "m\u0000"})):
        job = {"id": "nul-mk-" + field, "topic": TOPIC, "body": "b",
               "delay": 60000}
        job.update(extra)
        r = call("POST", "/push", job)
        p.check(r.json and r.json.get("success") is False and
                "U+0000" in r.json.get("message", ""),
                "/push with NUL in %s: %r" % (field, r))
    # In URLs: ids and query parameters.
    h.check_eq(call("POST", "/v1/tasks", task("nulurl", 60000)).status,
               201, "a task to address")
    for method in ("GET", "DELETE"):
        r = call(method, "/v1/tasks/nulurl%00x")
        p.check(r.status == 400, "%s of an id with %%00: %r" % (method, r))
    r = call("PATCH", "/v1/tasks/nulurl%00x", {"delay_ms": 5000})
    p.check(r.status == 400, "PATCH of an id with %%00: %r" % r)
    r = call("GET", "/v1/tasks?topic=%s%%00x" % TOPIC)
    p.check(r.status == 400, "list with topic=nul%%00x: %r" % r)
    r = call("GET", "/v1/tasks?topic=" + TOPIC)
    p.check(r.status == 200 and r.json["tasks"], "list without: %r" % r)
    # Kafka ingest refuses the same, to the errors topic.
    prod = subprocess.run(
        ["kcat", "-P", "-b", C.brokers, "-t", INGEST],
        input=b"\n".join(json.dumps(
            dict(t, id=t["id"].replace("nul-ref", "nul-ki"))).encode()
            for t in tasks) + b"\n",
        capture_output=True, timeout=60)
    p.check(prod.returncode == 0, "kcat: %s" % prod.stderr)
    errs = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(errs) < len(tasks):
        out = subprocess.run(["kcat", "-C", "-b", C.brokers, "-t",
                              INGEST + ".errors", "-o", "beginning", "-e",
                              "-q", "-J"], capture_output=True, timeout=60)
        errs = [json.loads(x) for x in out.stdout.splitlines() if x.strip()]
        time.sleep(0.3)
    fields = sorted(dict(zip(e["headers"][::2], e["headers"][1::2]))
                    .get("prophet-error-field", "") for e in errs)
    p.check(fields == sorted(f for f, _ in REFUSED),
            "ingest errors: %s" % fields)
    rows = C.mysql("SELECT id FROM tasks WHERE id LIKE 'nul-ref-%' OR "
                   "id LIKE 'nul-ki-%' OR id LIKE 'nul-mk-%'")
    p.check(rows == [], "nothing stored: %s" % rows)
    p.raise_if_any("NUL outside body")


def test_body_horizon_loader():
    """Submitted first, due 25 s later: beyond horizon + overlap, so only
    in the DB until the owner's loader indexes it from the row."""
    p = h.Problems()
    tid = FAR["id"]
    rows = C.mysql("SELECT due_at FROM tasks WHERE id = '%s'" % tid)
    due = int(rows[0][0])
    check_fired(p, C.rd, [tid], (due - h.now_ms()) / 1000.0 + 20, "loader")
    check_stored(p, [tid], "loader")
    p.raise_if_any("body through the horizon loader")


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)
    if RD is not None:
        RD.close(failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
