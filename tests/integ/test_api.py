#!/usr/bin/python3
"""The manager's HTTP API under bad input, idempotent submission, health,
readiness, metrics and --check-config. No workers are needed."""

import json
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

MAX_BODY = 1024
C = None
API = None
REJECTED = 0  # submissions answered 4xx by validation


def error_of(r, status, code=None, field=None, what=""):
    """Checks an error answer: status, the {"error":{...}} shape, and the
    code and field when given."""
    ctx = "%s -> %r" % (what, r)
    h.check_eq(r.status, status, "status of " + ctx)
    j = r.json
    h.check(isinstance(j, dict) and set(j) == {"error"},
            "error body must be {\"error\":{...}}: " + ctx)
    e = j["error"]
    h.check(isinstance(e, dict), "error must be an object: " + ctx)
    h.check(set(e) <= {"code", "message", "field"},
            "unexpected keys in error: %s: %s" % (sorted(e), ctx))
    h.check(isinstance(e.get("code"), str) and e["code"],
            "error.code missing: " + ctx)
    h.check(isinstance(e.get("message"), str) and e["message"],
            "error.message missing: " + ctx)
    if "field" in e:
        h.check(isinstance(e["field"], str) and e["field"],
                "error.field must be a non-empty string: " + ctx)
    if code is not None:
        h.check_eq(e["code"], code, "error.code of " + ctx)
    if field is not None:
        h.check_eq(e.get("field"), field, "error.field of " + ctx)
    return e


def post_raw(data, ctype="application/json"):
    return API.request("POST", "/v1/tasks", data,
                       headers={"Content-Type": ctype})


def bad_submit(task, status, code=None, field=None):
    global REJECTED
    r = post_raw(json.dumps(task, ensure_ascii=False).encode())
    if 400 <= r.status < 500:
        REJECTED += 1
    return error_of(r, status, code, field, "POST %r" % (task,))


def ok_task(**kw):
    t = {"topic": "api", "body": "hello", "delay_ms": 60000}
    t.update(kw)
    return t


def metric(text, name):
    m = re.search(r"^%s(?:\{\})? ([0-9.eE+-]+)$" % re.escape(name), text,
                  re.M)
    return float(m.group(1)) if m else None


GC_WAIT_US = 500000
GC_ROWS = 8


def setup():
    global C, API
    # A group-commit wait far longer than any answer here: only the
    # policy's other triggers may start a commit (test_group_commit).
    C = h.Cluster(workers=0, name="api",
                  conf={"task.max_body_bytes": MAX_BODY,
                        "db.group_commit_us": GC_WAIT_US,
                        "db.group_commit_rows": GC_ROWS}).open()
    C.start_manager()
    API = C.api()


# ----------------------------------------------------------------- tests ---

def test_malformed_json():
    global REJECTED
    for data in (b"{", b"", b"not json", b'{"topic": "a",}', b"\xff\xfe{}",
                 b'{"topic":"a","topic":"b","body":"x","delay_ms":1}',
                 b"[" * 5000 + b"]" * 5000):
        r = post_raw(data)
        REJECTED += 1
        error_of(r, 400, "invalid_json", what="POST %r" % data[:40])


def test_not_an_object():
    for data in ([], [ok_task()]):
        bad_submit(data, 400, "invalid_type")
    # A bare scalar is refused by the parser already (either code is fine).
    for data in ("a string", 42, None, True):
        e = bad_submit(data, 400)
        h.check(e["code"] in ("invalid_json", "invalid_type"),
                "POST %r: code %r" % (data, e["code"]))


def test_missing_fields():
    bad_submit({"body": "x", "delay_ms": 1}, 400, "missing_field", "topic")
    bad_submit({"topic": None, "body": "x", "delay_ms": 1}, 400,
               "missing_field", "topic")
    bad_submit({"topic": "a", "delay_ms": 1}, 400, "missing_field", "body")
    e = bad_submit({"topic": "a", "body": "x"}, 400, "missing_field")
    h.check(e.get("field") in ("due_at", "delay_ms"), "field %r" % e)


def test_due_at_and_delay_ms_together():
    e = bad_submit(ok_task(due_at=h.now_ms() + 1000), 400)
    h.check(e.get("field") in ("due_at", "delay_ms"),
            "both due_at and delay_ms: field %r" % e)


def test_body_too_large():
    bad_submit(ok_task(body="x" * (MAX_BODY + 1)), 413, field="body")
    # Multi-byte characters: the limit counts bytes.
    bad_submit(ok_task(body="é" * (MAX_BODY // 2 + 1)), 413, field="body")


def test_bad_ids():
    for bad in ("has space", "slash/id", "semi;colon", "ünï", "", "a" * 129,
                "nul\u0000id", "quote\"", "new\nline", "per%cent"):
        bad_submit(ok_task(id=bad), 400, "invalid_value", "id")


def test_unknown_field():
    bad_submit(ok_task(colour="blue"), 400, "unknown_field")
    bad_submit(ok_task(Topic="a"), 400, "unknown_field")


def test_unknown_query_parameter():
    """A query parameter a call does not take is refused, naming it: the
    calls without parameters ignored them (?state=running listed every
    job), GET /v1/tasks/{id} took anything beside log. So is one given
    twice."""
    tid = "no-such"  # the query is checked first (nothing stored here)
    for path, name in (("/v1/topics?state=paused", "state"),
                       ("/v1/admin/jobs?state=running", "state"),
                       ("/v1/admin/jobs/1?x=1", "x"),
                       ("/v1/admin/prune?dry_run=1", "dry_run"),
                       ("/v1/admin/restore/r1?x=1", "x"),
                       ("/v1/cluster?slot=3", "slot"),
                       ("/v1/cluster/lateness?window=60", "window"),
                       ("/v1/openapi.json?v=2", "v"),
                       ("/v1/tasks/%s?lgo=1" % tid, "lgo")):
        r = API.get(path)
        h.check_eq(r.status, 400, "%s: status (%r)" % (path, r))
        e = r.json["error"]
        h.check_eq((e["code"], e["field"]), ("unknown_field", name), path)
    h.check("takes none" in API.get("/v1/topics?x=1").json["error"][
        "message"], "the message says the call takes no parameter")
    # A parameter given twice: which one a call would read is not for the
    # client to guess (?from=X&from=5 served the first).
    for path, name in (("/v1/tasks?limit=5&topic=t&limit=6", "limit"),
                       ("/v1/tasks/%s?log=1&log=0" % tid, "log"),
                       ("/v1/schedule?from=0&to=60000&step=1000&from=5",
                        "from")):
        r = API.get(path)
        h.check_eq(r.status, 400, "%s: status (%r)" % (path, r))
        e = r.json["error"]
        h.check_eq((e["code"], e["field"]), ("invalid_value", name), path)
        h.check("twice" in e["message"], "%s: %s" % (path, e["message"]))
    # What they take still works.
    h.check_eq(API.get("/v1/topics").status, 200, "GET /v1/topics")
    h.check_eq(API.get("/v1/tasks/%s?log=1" % tid).status, 404,
               "GET of an unknown id with log=1")


def test_wrong_types():
    cases = [
        ({"id": 5}, "id"),
        ({"topic": 5}, "topic"),
        ({"topic": ["a"]}, "topic"),
        ({"body": 123}, "body"),
        ({"body": {"a": 1}}, "body"),
        ({"delay_ms": "100"}, "delay_ms"),
        ({"delay_ms": 1.5}, "delay_ms"),
        ({"delay_ms": True}, "delay_ms"),
        ({"key": 7}, "key"),
        ({"headers": ["a", "b"]}, "headers"),
        ({"headers": {"a": 1}}, "headers"),
        ({"headers": "a=b"}, "headers"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"ttl_ms": [1]}, "ttl_ms"),
        ({"callback": "http://x"}, "callback"),
    ]
    for over, field in cases:
        bad_submit(ok_task(**over), 400, "invalid_type", field)


def test_bad_values():
    cases = [
        ({"delay_ms": -1}, "delay_ms"),
        ({"topic": "bad topic"}, "topic"),
        ({"topic": ""}, "topic"),
        ({"topic": "../etc"}, "topic"),
        ({"key": ""}, "key"),
        ({"headers": {"prophet-id": "spoof"}}, "headers"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"callback": {"url": "ftp://x"}}, "callback.url"),
    ]
    for over, field in cases:
        bad_submit(ok_task(**over), 400, None, field)
    bad_submit({"topic": "a", "body": "x", "due_at": -5}, 400, None,
               "due_at")


def test_get_unknown_and_invalid_ids():
    error_of(API.get("/v1/tasks/no-such-task"), 404, "not_found",
             what="GET unknown id")
    for bad in ("bad%20id", "a%24b", "%C3%BC", "x" * 129, "a%2Fb"):
        error_of(API.get("/v1/tasks/" + bad), 400, "invalid_value", "id",
                 "GET /v1/tasks/" + bad[:40])


def test_wrong_method_and_unknown_route():
    # GET /v1/tasks lists and POST submits; other methods are refused.
    error_of(API.request("DELETE", "/v1/tasks"), 405,
             what="DELETE /v1/tasks")
    error_of(API.get("/v1/nothing-here"), 404, what="GET /v1/nothing-here")
    error_of(API.request("POST", "/nope", {"a": 1}), 404, what="POST /nope")


def test_nothing_stored_by_bad_input():
    rows = C.mysql("SELECT COUNT(*) FROM tasks")
    h.check_eq(rows, [["0"]], "rows in tasks after bad input only")
    r = API.get("/healthz")
    h.check_eq(r.status, 200, "manager alive after bad input")


def test_idempotent_submit():
    t = {"id": "dup-1", "topic": "api", "body": "same body",
         "delay_ms": 60000, "headers": {"a": "b"}, "key": "k1"}
    r1 = API.post("/v1/tasks", t)
    h.check_eq(r1.status, 201, "first submit of dup-1 (%r)" % r1)
    h.check_eq(r1.json.get("id"), "dup-1", "id in the answer")
    h.check_eq(r1.json.get("status"), "scheduled", "status in the answer")
    r2 = API.post("/v1/tasks", t)
    h.check_eq(r2.status, 200, "identical replay of dup-1 (%r)" % r2)
    h.check_eq(r2.json.get("id"), "dup-1", "id in the replay answer")
    h.check_eq(r2.json.get("due_at"), r1.json.get("due_at"),
               "a replay answers the stored due time")
    r3 = API.post("/v1/tasks", dict(t, body="another body"))
    error_of(r3, 409, "conflict", what="dup-1 with another body")
    rows = C.mysql("SELECT id, body, status FROM tasks WHERE id = 'dup-1'")
    h.check_eq(rows, [["dup-1", "same body", "scheduled"]], "dup-1 rows")
    g = API.get("/v1/tasks/dup-1")
    h.check_eq(g.status, 200, "GET dup-1")
    h.check_eq((g.json["body"], g.json["status"], g.json["key"],
                g.json["headers"]), ("same body", "scheduled", "k1",
                                     {"a": "b"}), "GET dup-1 fields")


def test_get_id_with_encoded_nul_is_not_truncated():
    # An id is never cut at an encoded NUL: "dup-1%00junk" is not "dup-1"
    # (the same path decoding will serve DELETE and PATCH).
    h.check_eq(API.get("/v1/tasks/dup-1").status, 200, "GET dup-1")
    error_of(API.get("/v1/tasks/dup-1%00junk"), 400, "invalid_value", "id",
             "GET /v1/tasks/dup-1%00junk")


def test_oversized_request_and_odd_methods():
    """A request body over http.max_body_bytes and an unsupported method
    are refused without harm to the server."""
    import socket
    s = socket.create_connection(("127.0.0.1", C.http_port), timeout=10)
    s.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: t\r\nContent-Type: "
              b"application/json\r\nContent-Length: 50000000\r\n\r\n{")
    head = s.recv(65536).split(b"\r\n", 1)[0]
    s.close()
    h.check(head.startswith(b"HTTP/1.1 413"), "oversized request: %r" % head)
    r = API.request("PUT", "/v1/tasks", {"a": 1})
    h.check(r.status in (405, 501), "PUT /v1/tasks -> %r" % r)
    h.check_eq(API.get("/healthz").status, 200, "alive after that")


def test_health_readiness_metrics():
    r = API.get("/healthz")
    h.check_eq(r.status, 200, "/healthz")
    r = API.get("/readyz")
    h.check_eq(r.status, 200, "/readyz (%r)" % r)
    h.check(isinstance(r.json, dict) and r.json.get("ready") is True,
            "/readyz JSON: %r" % r)
    for k in ("zookeeper", "db"):
        h.check(r.json.get(k) is True, "/readyz %s: %r" % (k, r.json))
    # Three more accepted tasks (generated ids).
    for i in range(3):
        r = API.post("/v1/tasks", ok_task(body="m%d" % i))
        h.check_eq(r.status, 201, "submit (%r)" % r)
    m = API.get("/metrics")
    h.check_eq(m.status, 200, "/metrics")
    h.check("text/plain" in m.headers.get("Content-Type", ""),
            "/metrics content type %r" % m.headers.get("Content-Type"))
    text = m.text
    h.check("prophet_tasks_accepted_total" in text,
            "prophet_tasks_accepted_total missing")
    accepted = metric(text, "prophet_tasks_accepted_total")
    db = int(C.mysql("SELECT COUNT(*) FROM tasks")[0][0])
    h.check_eq(db, 4, "rows in tasks (dup-1 + 3)")
    h.check_eq(accepted, 4.0, "prophet_tasks_accepted_total")
    h.check_eq(metric(text, "prophet_tasks_replayed_total"), 1.0,
               "prophet_tasks_replayed_total")
    h.check_eq(metric(text, "prophet_tasks_conflicts_total"), 1.0,
               "prophet_tasks_conflicts_total")
    rejected = metric(text, "prophet_tasks_rejected_total")
    h.check_eq(rejected, float(REJECTED), "prophet_tasks_rejected_total")


def test_check_config():
    for prog in (h.MANAGER_BIN, h.WORKER_BIN):
        name = os.path.basename(prog)
        p = subprocess.run([prog, "-c", C.conf_path, "--check-config"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=30)
        h.check_eq(p.returncode, 0, "%s --check-config on a good config "
                   "(%s)" % (name, p.stdout.strip()))
        for bad, key in (("cluster.slots=0", "cluster.slots"),
                         ("worker.lease_ms=5", "worker.lease_ms"),
                         ("redis.url=http://x", "redis.url"),
                         ("http.listen=nowhere", "http.listen"),
                         ("task.max_body_bytes=abc", "task.max_body_bytes"),
                         ("nosuch.key=1", "nosuch.key")):
            p = subprocess.run([prog, "-c", C.conf_path, "--set", bad,
                                "--check-config"],
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               timeout=30)
            h.check(p.returncode != 0, "%s --set %s --check-config exited 0"
                    % (name, bad))
            h.check(key in p.stdout, "%s --set %s: message lacks the key "
                    "name: %r" % (name, bad, p.stdout.strip()))
    # A bad value in the file names its key too.
    path = os.path.join(C.dir, "bad.conf")
    with open(path, "w") as f:
        f.write(open(C.conf_path).read() + "\n[worker]\nscan_interval_ms = "
                "0\n")
    p = subprocess.run([h.MANAGER_BIN, "-c", path, "--check-config"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=30)
    h.check(p.returncode != 0 and "scan_interval_ms" in p.stdout,
            "bad file value: exit %d, %r" % (p.returncode, p.stdout.strip()))
    # The manager's tokens file is read as at start: a file others may
    # read, or a line that is not a token and roles, fails the check.
    tokens = os.path.join(C.dir, "check.tokens")
    for text, mode, why in (("a" * 24 + " read\n", 0o640, "mode 0640"),
                            ("short read\n", 0o600, ":1: expected"),
                            (None, 0, "No such file")):
        if os.path.exists(tokens):
            os.unlink(tokens)
        if text is not None:
            with open(tokens, "w") as f:
                f.write(text)
            os.chmod(tokens, mode)
        p = subprocess.run([h.MANAGER_BIN, "-c", C.conf_path, "--set",
                            "http.tokens_file=" + tokens, "--check-config"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=30)
        h.check(p.returncode != 0 and "http.tokens_file" in p.stdout and
                why in p.stdout, "tokens file (%s): exit %d, %r"
                % (why, p.returncode, p.stdout.strip()))


def test_priority_refused():
    """priority was accepted and ignored: now it is a 400 naming it, on
    its own and in a batch, and neither the API nor the table has it.
    After the tests that count every row of tasks."""
    global REJECTED
    for v in (5, 0, None, "high"):
        e = bad_submit(ok_task(id="prio-1", priority=v), 400,
                       "unsupported_field", "priority")
        h.check("priority is not supported" in e["message"] and
                "due order" in e["message"], "message: %r" % e)
    r = API.post("/v1/tasks/batch",
                 {"tasks": [ok_task(id="prio-ok"),
                            ok_task(id="prio-2", priority=1)]})
    h.check_eq(r.status, 200, "batch (%r)" % r)
    REJECTED += 1  # the batch's refused task counts too
    res = r.json["results"]
    h.check_eq(res[0].get("code"), 201, "the task without priority (%r)" % r)
    h.check_eq(res[1].get("code"), 400, "the task with priority (%r)" % r)
    h.check_eq(res[1].get("error", {}).get("field"), "priority",
               "the batch result names the field (%r)" % r)
    g = API.get("/v1/tasks/prio-ok")
    h.check_eq(g.status, 200, "GET (%r)" % g)
    h.check("priority" not in g.json, "GET shows no priority: %r" % g.json)
    h.check_eq(int(C.mysql("SELECT COUNT(*) FROM tasks WHERE id IN "
                           "('prio-1', 'prio-2')")[0][0]), 0,
               "tasks with priority are not stored")
    cols = C.mysql("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE "
                   "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'tasks' AND "
                   "COLUMN_NAME = 'priority'")
    h.check_eq(int(cols[0][0]), 0, "migration 8 dropped tasks.priority")


def test_manager_survived():
    r = API.get("/healthz")
    h.check_eq(r.status, 200, "/healthz at the end")
    h.check(C.manager.running(), "manager exited")
    bad = [l for l in C.manager.tail(500)
           if "level=error" in l or "level=fatal" in l]
    h.check(not bad, "errors in the manager log: %s" % bad[:5])


def test_group_commit():
    """A submission that finds the DB idle commits at once instead of
    waiting db.group_commit_us; concurrent ones share commits, started
    when group_commit_rows are waiting or a running commit ends; the tasks
    of one batch request are one commit."""
    m0 = h.metrics(C.manager_addr)
    took = []
    for i in range(5):
        t0 = time.monotonic()
        r = API.post("/v1/tasks", ok_task(topic="gc", body="lone %d" % i))
        took.append(time.monotonic() - t0)
        h.check_eq(r.status, 201, "lone submit (%r)" % r)
    took.sort()
    # Waiting for the timer would take GC_WAIT_US (500 ms) every time.
    h.check(took[2] < GC_WAIT_US / 4e6,
            "a lone submission waited for the group-commit timer: "
            "median %.0f ms" % (took[2] * 1e3))
    m1 = h.metrics(C.manager_addr)
    h.check_eq(m1["prophet_db_commit_batches_total"] -
               m0["prophet_db_commit_batches_total"], 5.0,
               "commits for 5 sequential submissions")

    n = 64
    tasks = [ok_task(topic="gc", body="together %d" % i) for i in range(n)]
    t0 = time.monotonic()
    res, _ = h.submit_many(C.manager_addr, tasks, threads=16)
    elapsed = time.monotonic() - t0
    h.check_eq([r.status for r in res], [201] * n, "concurrent submits")
    m2 = h.metrics(C.manager_addr)
    commits = (m2["prophet_db_commit_batches_total"] -
               m1["prophet_db_commit_batches_total"])
    rows = (m2["prophet_db_commit_batch_rows_sum"] -
            m1["prophet_db_commit_batch_rows_sum"])
    h.check_eq(rows, float(n), "rows committed")
    h.check(commits < n, "%d concurrent submissions shared no commit "
            "(%d commits)" % (n, commits))
    # 64 submissions on 16 connections are at least 4 rounds; had each
    # waited for the timer they would take 4 x 500 ms.
    h.check(elapsed < 4 * GC_WAIT_US / 1e6,
            "concurrent submissions waited for the timer: %.2f s" % elapsed)

    r = API.post("/v1/tasks/batch",
                 {"tasks": [ok_task(topic="gc", body="b%d" % i)
                            for i in range(3 * GC_ROWS)]})
    h.check_eq(r.status, 200, "batch (%r)" % r)
    m3 = h.metrics(C.manager_addr)
    h.check_eq(m3["prophet_db_commit_batches_total"] -
               m2["prophet_db_commit_batches_total"], 1.0,
               "commits for one batch request of %d tasks" % (3 * GC_ROWS))
    h.check_eq(int(C.mysql("SELECT COUNT(*) FROM tasks WHERE topic = 'gc'")
                   [0][0]), 5 + n + 3 * GC_ROWS, "gc rows in the DB")


def cleanup(failed):
    if API is not None:
        API.close()
    if C is not None:
        C.close(failed=failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
