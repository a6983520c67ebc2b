#!/usr/bin/python3
"""docs/openapi.yaml against a live manager (with one worker).

The description is validated (openapi-spec-validator), must be what the
manager serves at GET /v1/openapi.json, must name every route the manager
answers (and nothing it does not), and drives a property-based fuzz of the
manager (schemathesis) over every operation: three runs, without tokens, with
http.tokens_file and an admin token, and with tokens but no token (401s).
Each run must find no server error, every answer must have a documented
status, content type, headers and body schema, the manager must still be up
and its log must show no crash. The number of generated test cases and of
HTTP requests lands in the log (TAP comments).

The tools come from the venv of scripts/deps (tests/requirements.txt); a
missing tool is a failure, never a skip. PROPHET_OPENAPI_EXAMPLES (default
300) sets the fuzzing examples per operation of the first run, a third of it
for the token runs; PROPHET_OPENAPI_SEED (default 20261201) the seed.

The fuzz submits tasks on hundreds of random topics, which must not become
topics of the shared Kafka broker: the manager runs with
kafka.create_task_topics off (the default), so such a task is refused 422
topic_unknown (a documented answer), and the worker publishes with
allow.auto.create.topics=false, so the task whose topic is deleted under it
stays firing. Pull requests wait at
most pull.max_wait_ms, set to 200 ms here so that the long polls of the
fuzz (and mykit's /get, which always waits that long) end within
schemathesis' request timeout; the random group names it sends open at
most pull.max_groups (16 here) Kafka consumers.
"""

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import servers as s  # noqa: E402

SPEC = os.path.join(h.REPO, "docs", "openapi.yaml")
EXAMPLES = int(os.environ.get("PROPHET_OPENAPI_EXAMPLES") or 300)
SEED = int(os.environ.get("PROPHET_OPENAPI_SEED") or 20261201)
TOKENS = {"admin": "adm-openapi-0123456789abcdef",
          "read": "read-openapi-0123456789abcdef"}
CHECKS = ("not_a_server_error,status_code_conformance,"
          "content_type_conformance,response_schema_conformance,"
          "response_headers_conformance")
METHODS = ("get", "put", "post", "delete", "patch")
# Schemathesis' probes of undeclared methods, all but QUERY: the HTTP
# layer answers a method it does not know 501 (documented on every
# operation, but a 5xx to not_a_server_error); test_http_layer checks it.
PROBED_METHODS = ["get", "put", "post", "delete", "patch", "options",
                  "trace"]
# Lines of a crashed or sanitizer-stopped daemon.
CRASH = re.compile(r"AddressSanitizer|LeakSanitizer|runtime error:|"
                   r"Segmentation fault|Assertion .* failed|level=fatal|"
                   r"core dumped|Aborted")

C = None
OUT = None  # schemathesis' output and HAR files, kept when a test failed
VENV = None
SPEC_JSON = None
OPS = []  # (method, path template, operation)


def tool(name):
    path = os.path.join(VENV, "bin", name)
    if not os.access(path, os.X_OK):
        raise h.TestFailure("%s is missing: run scripts/deps (or scripts/deps "
                            "--python) to install tests/requirements.txt "
                            "into %s" % (path, VENV))
    return path


def run(argv, timeout=600, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, **kw)


def write_conf():
    C.write_conf()
    with open(C.conf_path, "a") as f:
        f.write("[kafka.producer]\nallow.auto.create.topics = false\n")


def setup():
    global C, OUT, VENV, SPEC_JSON
    OUT = tempfile.mkdtemp(prefix="openapi-fuzz-")
    p = run([os.path.join(h.REPO, "scripts", "deps"), "--print-venv"])
    VENV = p.stdout.strip()
    py = tool("python")
    for t in ("st", "openapi-spec-validator"):
        tool(t)
    versions = run([py, "-c", "import importlib.metadata as m; print(' '.join("
                    "'%s %s' % (n, m.version(n)) for n in ('schemathesis', "
                    "'openapi-spec-validator', 'hypothesis')))"]).stdout
    h.log("tools: " + versions.strip())
    # The description as the YAML says, read by the venv's PyYAML.
    p = run([py, "-c", "import json, sys, yaml; json.dump(yaml.safe_load("
             "open(sys.argv[1], encoding='utf-8')), sys.stdout)", SPEC])
    h.check(p.returncode == 0, "cannot read %s: %s" % (SPEC, p.stdout))
    SPEC_JSON = json.loads(p.stdout)
    for path, item in SPEC_JSON["paths"].items():
        for m in METHODS:
            if m in item:
                OPS.append((m, path, item[m]))
    # kafka.create_task_topics off: the fuzz's topics are refused 422
    # topic_unknown, not created.
    C = h.Cluster(workers=1, name="openapi",
                  conf={"pull.max_wait_ms": 200, "pull.max_groups": 16,
                        "kafka.create_task_topics": "false"})
    C.open()
    write_conf()
    C.start()
    # The topics of the answers made on purpose (the fuzz uses the spec's
    # example, orders, too): they exist, others are refused 422.
    h.create_topics(C.brokers, [C.topic(t) for t in ("orders", "reports",
                                                     "ces")])


def call(method, path, body=None, headers=None):
    api = C.api()
    try:
        return api.request(method, path, body, headers=headers)
    finally:
        api.close()


def is_error_shape(j, code=None):
    if not isinstance(j, dict) or set(j) != {"error"}:
        return False
    e = j["error"]
    return (isinstance(e, dict) and {"code", "message"} <= set(e) <=
            {"code", "message", "field"} and
            all(isinstance(v, str) for v in e.values()) and
            (code is None or e["code"] == code))


def test_spec_valid():
    p = run([tool("openapi-spec-validator"), SPEC])
    h.check(p.returncode == 0 and "OK" in p.stdout,
            "openapi-spec-validator: %s" % p.stdout.strip()[-3000:])
    h.check(SPEC_JSON["openapi"].startswith("3.1."),
            "not OpenAPI 3.1: %r" % SPEC_JSON["openapi"])
    h.log("%s: valid OpenAPI %s, %d paths, %d operations"
          % (os.path.relpath(SPEC, h.REPO), SPEC_JSON["openapi"],
             len(SPEC_JSON["paths"]), len(OPS)))


def test_served_json_equals_yaml():
    r = call("GET", "/v1/openapi.json")
    h.check_eq(r.status, 200, "GET /v1/openapi.json")
    h.check(r.headers.get("Content-Type", "").startswith("application/json"),
            "content type %r" % r.headers.get("Content-Type"))
    h.check(r.json == SPEC_JSON, "GET /v1/openapi.json differs from %s "
            "(rebuild: make regenerates manager/openapi_json.c)" % SPEC)
    # scripts/openapi-json, the build's converter, gives the same JSON.
    p = run(["/usr/bin/python3", os.path.join(h.REPO, "scripts",
                                              "openapi-json"), SPEC])
    h.check(p.returncode == 0, "scripts/openapi-json: %s" % p.stdout[-2000:])
    h.check(json.loads(p.stdout) == SPEC_JSON,
            "scripts/openapi-json differs from PyYAML's reading")
    h.log("served %d bytes of JSON, equal to the YAML" % len(r.data))


def test_route_table_matches_spec():
    """The manager's route table and the description list the same
    operations, and agree on which are public and which take JSON."""
    p = run([h.MANAGER_BIN, "--print-routes"])
    h.check_eq(p.returncode, 0, "prophet-manager --print-routes")
    table = {}
    for line in p.stdout.splitlines():
        method, path, role, shape, *flags = line.split()
        table[(method, re.sub(r"\{\}", "{}", path))] = (role, shape,
                                                        set(flags))
    h.check(len(table) > 10, "route table: %r" % p.stdout[:300])
    spec = {}
    for path, item in SPEC_JSON["paths"].items():
        for method, op in item.items():
            if method.upper() not in ("GET", "POST", "PUT", "PATCH",
                                      "DELETE"):
                continue
            spec[(method.upper(), re.sub(r"\{[^}]*\}", "{}", path))] = op
    h.check_eq(sorted(set(table) - set(spec)), [],
               "routes the description lacks")
    h.check_eq(sorted(set(spec) - set(table)), [],
               "operations the route table lacks")
    for key, (role, shape, flags) in sorted(table.items()):
        op = spec[key]
        public = op.get("security", SPEC_JSON.get("security")) == []
        h.check_eq(public, role == "public",
                   "%s %s: public in the description vs role %s"
                   % (key[0], key[1], role))
        takes_json = "application/json" in (op.get("requestBody") or {}) \
            .get("content", {})
        if takes_json:
            h.check("json" in flags, "%s %s takes JSON in the description "
                    "but its row has no JSON flag" % key)
    h.log("route table: %d rows, the same operations as the description"
          % len(table))


def sample_path(path, tag):
    return (path.replace("{id}", "openapi-probe-" + tag)
            .replace("{job}", "1").replace("{file}", "index.html")
            .replace("{topic}", "openapi-probe-" + tag))


def sample_body(op):
    content = op.get("requestBody", {}).get("content", {})
    media = content.get("application/json")
    if media is None:
        return None
    if "example" in media:
        return media["example"]
    if "examples" in media:
        return next(iter(media["examples"].values()))["value"]
    return {}


MYKIT_PATHS = ("/push", "/delete", "/reStore", "/reStoreJob", "/clearAll",
               "/get/{topic}")


def test_routes():
    """Every operation of the description is answered by a route with a
    status it documents (never 404 "no route"), GET and HEAD alike; paths
    it lacks get 404 in the error shape; methods it does not list get 405
    (in mykit's shape on the mykit paths)."""
    problems = h.Problems()
    tag = h.rand_tag()
    for m, path, op in OPS:
        url = sample_path(path, tag)
        if op["operationId"] == "mykitDelete" or \
                op["operationId"] == "mykitReStoreJob":
            url += "?jobId=openapi-probe-" + tag
        if op["operationId"] == "pullNext":
            url += "?group=probe"
        r = call(m.upper(), url, sample_body(op))
        if m == "get":
            hr = call("HEAD", url)
            problems.check(hr.status == r.status and hr.data == b"",
                           "HEAD %s: %d with %d bytes, GET %d"
                           % (url, hr.status, len(hr.data), r.status))
        documented = set(op["responses"])
        problems.check(str(r.status) in documented,
                       "%s %s: %d is not documented (%s): %r"
                       % (m.upper(), url, r.status, sorted(documented), r))
        problems.check(not (r.status == 404 and isinstance(r.json, dict) and
                            r.json.get("error", {}).get("message", "")
                            .startswith("no route")),
                       "%s %s: no route" % (m.upper(), url))
    for m, url in (("GET", "/v1/nope"), ("GET", "/v1/tasksx"),
                   ("POST", "/nope"), ("GET", "/consolex/index.html"),
                   ("DELETE", "/v1"), ("GET", "/v1/cluster/x"),
                   ("GET", "/index.html"), ("GET", "/v1/openapi.yaml")):
        r = call(m, url)
        problems.check(r.status == 404 and
                       is_error_shape(r.json, "not_found") and
                       r.json["error"]["message"] == "no route " + url,
                       "%s %s (not in the description): want 404 "
                       "'no route', got %r" % (m, url, r))
    n = 0
    for path, item in SPEC_JSON["paths"].items():
        url = sample_path(path, tag)
        for m in METHODS + ("options", "trace"):
            if m in item:
                continue
            r = call(m.upper(), url, {} if m in ("post", "patch", "put")
                     else None)
            n += 1
            if path in MYKIT_PATHS:
                ok = r.status == 405 and r.json == {
                    "success": False, "code": 405,
                    "message": r.json.get("message") if isinstance(
                        r.json, dict) else None}
            else:
                ok = r.status == 405 and is_error_shape(r.json,
                                                        "method_not_allowed")
            problems.check(ok, "%s %s (not in the description): want 405, "
                           "got %r" % (m.upper(), url, r))
    h.log("%d operations answered (GET ones also as HEAD), %d undeclared "
          "methods answered 405" % (len(OPS), n))
    problems.raise_if_any("routes")


def test_answers_match_schemas():
    """The answers the fuzz rarely reaches, made on purpose and checked
    against their schemas (tests/integ/openapi_check.py with the venv's
    jsonschema): a full one-shot task and a recurring one (GET, with its
    log), reschedules, cancels (one-shot, recurring, again), conflicts, a
    firing task, a mixed batch, paging, restores, the cluster views, and
    the mykit answers, successes and failures."""
    tag = h.rand_tag()
    answers = []
    now = h.now_ms()

    def rec(op, method, path, body=None, want=None):
        r = call(method, path, body)
        answers.append({"op": op, "status": r.status,
                        "content_type": r.headers.get("Content-Type"),
                        "body": r.json})
        if want is not None:
            h.check_eq(r.status, want, "%s %s: %r" % (method, path, r))
        return r

    one = "one-" + tag
    rec("submitTask", "POST", "/v1/tasks", {
        "id": one, "topic": "orders", "body": "b\u0000ody", "delay_ms": 3600000,
        "key": "k", "headers": {"a": "b"}, "max_attempts": 3,
        "ttl_ms": 5000,
        "callback": {"url": "http://127.0.0.1:9/x", "method": "PUT",
                     "headers": {"h": "v"}, "timeout_ms": 100}}, 201)
    rec("submitTask", "POST", "/v1/tasks", {
        "id": one, "topic": "orders", "body": "other", "delay_ms": 1}, 409)
    cron = "cron-" + tag
    rec("submitTask", "POST", "/v1/tasks", {
        "id": cron, "topic": "reports", "body": "r", "cron": "0 0 9 * * *",
        "timezone": "Europe/Berlin", "misfire": "skip", "start_at": now,
        "end_at": now + 86400000 * 30, "max_occurrences": 3}, 201)
    rec("getTask", "GET", "/v1/tasks/%s?log=1" % one, None, 200)
    rec("getTask", "GET", "/v1/tasks/" + cron, None, 200)
    rec("rescheduleTask", "PATCH", "/v1/tasks/" + one,
        {"due_at": now + 7200000}, 200)
    rec("rescheduleTask", "PATCH", "/v1/tasks/" + cron,
        {"cron": "0 30 9 * * MON-FRI", "timezone": "UTC"}, 200)
    rec("rescheduleTask", "PATCH", "/v1/tasks/" + cron, {"delay_ms": 5}, 400)
    r = rec("rescheduleTask", "PATCH", "/v1/tasks/" + one,
            {"delay_ms": 5, "dealy_ms": 5}, 400)
    h.check(is_error_shape(r.json, "unknown_field") and
            r.json["error"].get("field") == "dealy_ms",
            "PATCH with an unknown member: %r" % r)
    rec("restoreTask", "POST", "/v1/tasks/%s/restore" % one, None, 200)
    rec("cancelTask", "DELETE", "/v1/tasks/" + one, None, 200)
    rec("cancelTask", "DELETE", "/v1/tasks/" + one, None, 200)
    rec("cancelTask", "DELETE", "/v1/tasks/" + cron, None, 200)
    rec("rescheduleTask", "PATCH", "/v1/tasks/" + one, {"delay_ms": 5}, 409)
    rec("restoreTask", "POST", "/v1/tasks/%s/restore" % one, None, 409)
    rec("getTask", "GET", "/v1/tasks/%s?log=1" % one, None, 200)
    rec("getTask", "GET", "/v1/tasks/%s?log=1" % cron, None, 200)
    rec("getTask", "GET", "/v1/tasks/nope-" + tag, None, 404)
    # Headers up to task.max_headers_bytes (16 KiB as JSON) are kept
    # whole; larger ones are refused (they used to be cut by the database,
    # and lost, after a 201).
    big = {"h%02d" % i: "v" * 4096 for i in range(3)}
    rec("submitTask", "POST", "/v1/tasks", {
        "id": "big-" + tag, "topic": "orders", "body": "b",
        "delay_ms": 3600000, "headers": big}, 201)
    r = rec("getTask", "GET", "/v1/tasks/big-" + tag, None, 200)
    h.check(r.json.get("headers") == big, "3 headers of 4 KiB not kept")
    big["h03"] = "v" * 4096
    r = rec("submitTask", "POST", "/v1/tasks", {
        "id": "big2-" + tag, "topic": "orders", "body": "b",
        "delay_ms": 3600000, "headers": big}, 413)
    h.check_eq(r.json["error"]["field"], "headers", "the field refused")
    rec("submitTask", "POST", "/v1/tasks", {
        "topic": "orders", "body": "b", "delay_ms": 1, "key": "a\u0000b"},
        400)
    r = rec("submitTask", "POST", "/v1/tasks", {
        "topic": "nowhere-" + tag, "body": "x", "delay_ms": 0}, 422)
    h.check_eq(r.json["error"]["code"], "topic_unknown", "missing topic")
    # Accepted, its topic deleted, then due now: claimed at once, then
    # failing to publish (the worker does not create it, see the module's
    # doc): cancel answers 409 while it is in flight, 200 between two
    # attempts.
    fire = "fire-" + tag
    gone = "gone-" + tag
    h.create_topics(C.brokers, [C.topic(gone)])
    rec("submitTask", "POST", "/v1/tasks", {
        "id": fire, "topic": gone, "body": "x", "delay_ms": 3600000}, 201)
    s.kafka_topics_cli(C.brokers, "--delete", "--topic", C.topic(gone))
    rec("rescheduleTask", "PATCH", "/v1/tasks/" + fire, {"delay_ms": 0},
        200)
    time.sleep(0.5)
    rec("getCluster", "GET", "/v1/cluster", None, 200)
    rec("cancelTask", "DELETE", "/v1/tasks/" + fire)
    rec("getTask", "GET", "/v1/tasks/%s?log=1" % fire, None, 200)
    rec("submitBatch", "POST", "/v1/tasks/batch", {"tasks": [
        {"topic": "orders", "body": "1", "delay_ms": 60000},
        {"id": one, "topic": "orders", "body": "other", "delay_ms": 1},
        {"topic": "orders", "body": "3"},
        {"topic": "orders", "body": "x" * 70000, "delay_ms": 1}]}, 200)
    rec("submitBatch", "POST", "/v1/tasks/batch", {"tasks": []}, 400)
    r = rec("listTasks", "GET", "/v1/tasks?limit=1&status=scheduled", None,
            200)
    h.check(r.json["next_cursor"], "a next page: %r" % r)
    rec("listTasks", "GET", "/v1/tasks?limit=1000&cursor=" +
        r.json["next_cursor"], None, 200)
    rec("listTasks", "GET", "/v1/tasks?status=nope", None, 400)
    r = rec("startRestore", "POST", "/v1/admin/restore",
            {"slot": 0, "expired": True}, 202)
    rec("getRestoreJob", "GET", "/v1/admin/restore/%d" % r.json["job"],
        None, 200)
    rec("startRestore", "POST", "/v1/admin/restore", None, 202)
    rec("startRestore", "POST", "/v1/admin/restore", {"slot": 99}, 400)
    rec("getRestoreJob", "GET", "/v1/admin/restore/4294967297", None, 404)
    rec("getPrune", "GET", "/v1/admin/prune", None, 200)
    rec("startPrune", "POST", "/v1/admin/prune", {"dry_run": True}, 200)
    rec("startPrune", "POST", "/v1/admin/prune", {}, 202)
    rec("startPrune", "POST", "/v1/admin/prune", None, 202)
    rec("startPrune", "POST", "/v1/admin/prune", {"dry_run": 1}, 400)
    rec("getPrune", "GET", "/v1/admin/prune", None, 200)
    rec("getCluster", "GET", "/v1/cluster", None, 200)
    rec("getLateness", "GET", "/v1/cluster/lateness", None, 200)
    rec("readyz", "GET", "/readyz", None, 200)
    rec("healthz", "GET", "/healthz", None, 200)
    rec("getOpenapi", "GET", "/v1/openapi.json", None, 200)
    rec("getMetrics", "GET", "/metrics", None, 200)
    rec("getConsole", "GET", "/", None, 200)
    for f in ("index.html", "console.css", "console.js"):
        rec("getConsoleFile", "GET", "/console/" + f, None, 200)
    rec("getConsoleFile", "GET", "/console/nope.png", None, 404)
    # Pull: tasks handed out, acknowledged, mykit's /get with a job and
    # without.
    pulled = "pulled-" + tag
    h.create_topics(C.brokers, [C.topic(pulled)])
    rec("submitTask", "POST", "/v1/tasks", {
        "id": "pull-" + tag, "topic": pulled, "body": "p", "delay_ms": 0,
        "headers": {"x": "y"}}, 201)
    rec("mykitPush", "POST", "/push", {
        "id": "pullmk-" + tag, "topic": pulled, "body": "{m}", "delay": 0,
        "subtopic": "s", "bizKey": "b"}, 200)
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 2 and time.monotonic() < deadline:
        r = rec("pullNext", "GET", "/v1/topics/%s/next?group=schema&max=5"
                "&wait_ms=200&visibility_ms=60000" % pulled, None, 200)
        got += r.json["tasks"]
    h.check_eq(sorted(t["id"] for t in got),
               sorted(["pull-" + tag, "pullmk-" + tag]), "tasks pulled")
    rec("pullAck", "POST", "/v1/topics/%s/ack" % pulled,
        {"group": "schema", "receipts": [t["receipt"] for t in got] +
         ["7:7"]}, 200)
    rec("pullAck", "POST", "/v1/topics/%s/ack" % pulled,
        {"group": "schema", "receipts": "x"}, 400)
    rec("pullNext", "GET", "/v1/topics/%s/next?group=a%%20b" % pulled, None,
        400)
    job = None
    while job is None and time.monotonic() < deadline + 10:
        r = rec("mykitGet", "GET", "/get/" + pulled, None, 200)
        job = r.json["data"]
    h.check(job is not None, "no job from /get")
    for _ in range(2):
        rec("mykitGet", "GET", "/get/" + pulled, None, 200)
    rec("mykitGet", "GET", "/get/a%20b", None, 200)
    mk = "mk-" + tag
    rec("mykitPush", "POST", "/push", {
        "id": mk, "topic": "ces", "body": "{hello}", "delay": 3600000,
        "subtopic": "s", "ttl": 12, "bizKey": "b", "status": 0}, 200)
    rec("mykitPush", "POST", "/push", {"id": 42, "topic": "ces",
                                       "body": "n", "delay": 3600000}, 200)
    rec("mykitPush", "POST", "/push", {"topic": "ces", "body": 1}, 200)
    rec("mykitPush", "POST", "/push", "not json", 200)
    rec("mykitReStoreJob", "GET", "/reStoreJob?jobId=" + mk, None, 200)
    rec("mykitDelete", "GET", "/delete?JobId=" + mk, None, 200)
    rec("mykitDelete", "GET", "/delete", None, 200)
    rec("mykitReStore", "GET", "/reStore?expire=true", None, 200)
    rec("mykitClearAll", "GET", "/clearAll", None, 200)
    p = run([tool("python"), os.path.join(h.HERE, "openapi_check.py"),
             SPEC], input="".join(json.dumps(a) + "\n" for a in answers))
    h.check(p.returncode == 0, "answers that do not match the description:"
            "\n  " + p.stdout.strip().replace("\n", "\n  "))
    h.log("%d answers of %d operations match their schemas"
          % (len(answers), len({a["op"] for a in answers})))


# ------------------------------------------------------------------ fuzz ---

def op_of(method, url):
    """The operation (method, path template) of a request URL."""
    path = url.split("://", 1)[1]
    path = path[path.index("/"):].split("?", 1)[0]
    for m, tmpl, _ in OPS:
        if m.upper() != method:
            continue
        rx = "^" + re.sub(r"\\\{[a-z]+\\\}", "[^/]+",
                          re.escape(tmpl)) + "$"
        if re.match(rx, path) and not (tmpl == "/v1/tasks/{id}" and
                                       path == "/v1/tasks/batch"):
            return (m.upper(), tmpl)
    return (method, "(undeclared) " + path)


def fuzz(name, examples, headers=()):
    """Runs schemathesis against the manager; returns (test cases, HAR
    entries, statuses by operation). One worker: with two, schemathesis
    4.32.5 sometimes fails a test case on a race in Hypothesis' caches
    ("Inconsistent results ... KeyError" in lambda_sources), and its
    generator, not the manager, is the bottleneck anyway."""
    out = os.path.join(OUT, name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "schemathesis.toml"), "w") as f:
        f.write("[phases.coverage]\nunexpected-methods = %s\n"
                % json.dumps(PROBED_METHODS))
    har = os.path.join(out, "requests.har")
    argv = [tool("st"), "--config-file", os.path.join(out,
                                                     "schemathesis.toml"),
            "run", SPEC, "--url", "http://" + C.manager_addr,
            "--checks", CHECKS, "--seed", str(SEED),
            "--max-examples", str(examples), "--workers", "1",
            "--request-timeout", "10", "--generation-database", "none",
            "--no-color", "--report", "har", "--report-har-path", har]
    for hd in headers:
        argv += ["--header", hd]
    def served():
        m = h.metrics(C.manager_addr)
        return (m.get("prophet_http_requests_total", 0),
                m.get("prophet_http_refused_total", 0))
    before = served()
    t0 = time.monotonic()
    p = run(argv, timeout=900, cwd=out)
    took = time.monotonic() - t0
    with open(os.path.join(out, "st.out"), "w") as f:
        f.write(p.stdout)
    after = served()
    m = re.search(r"^\s*(\d+) generated", p.stdout, re.M)
    cases = int(m.group(1)) if m else -1
    if p.returncode != 0 or cases < 0:
        tail = p.stdout[-6000:]
        if "FAILURES" in p.stdout or "ERRORS" in p.stdout:
            i = p.stdout.find("=== ERRORS")
            if i < 0:
                i = p.stdout.find("=== FAILURES")
            tail = p.stdout[i:i + 8000]
        raise h.TestFailure("schemathesis (%s) exit %d:\n%s"
                            % (name, p.returncode, tail))
    with open(har) as f:
        entries = json.load(f)["log"]["entries"]
    statuses = collections.defaultdict(collections.Counter)
    for e in entries:
        statuses[op_of(e["request"]["method"], e["request"]["url"])][
            e["response"]["status"]] += 1
    h.log("fuzz %s: schemathesis %d test cases, %d HTTP requests (the "
          "manager: %d routed, %d refused by the HTTP layer), %d examples "
          "per operation, seed %d, %.0fs"
          % (name, cases, len(entries), after[0] - before[0],
             after[1] - before[1], examples, SEED, took))
    for k in sorted(statuses):
        h.log("  %-7s %-28s %s" % (k[0], k[1], " ".join(
            "%d:%d" % kv for kv in sorted(statuses[k].items()))))
    return cases, entries, statuses


def keep_dir():
    """The cluster's directory again if someone removed it (cleaning
    /tmp/prophet-* on a shared machine): the harness appends to its logs."""
    os.makedirs(C.dir, exist_ok=True)


def read_log(proc):
    """A daemon's log; through its open descriptor when the file was
    removed under it (someone cleaning /tmp/prophet-* on a shared box)."""
    for path in (proc.log_path, "/proc/%d/fd/1" % proc.popen.pid):
        try:
            with open(path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            continue
    raise h.TestFailure("%s's log %s is gone" % (proc.name, proc.log_path))


def check_alive(what):
    h.check(C.manager.running(), "the manager exited during %s (code %s)"
            % (what, C.manager.popen.returncode))
    r = call("GET", "/healthz")
    h.check_eq(r.status, 200, "GET /healthz after %s" % what)
    bad = [line for line in read_log(C.manager).splitlines()
           if CRASH.search(line)]
    h.check(not bad, "the manager's log shows a crash after %s:\n  %s"
            % (what, "\n  ".join(bad[:10])))
    # The worker fired what the fuzz submitted (random headers, keys,
    # bodies): it must be up and clean too.
    w = C.workers[0]
    h.check(w.running(), "the worker exited during %s (code %s)"
            % (what, w.popen.returncode))
    bad = [line for line in read_log(w).splitlines() if CRASH.search(line)]
    h.check(not bad, "the worker's log shows a crash after %s:\n  %s"
            % (what, "\n  ".join(bad[:10])))


def check_statuses(statuses, documented_only=True):
    problems = h.Problems()
    docs = {(m.upper(), p): set(op["responses"]) for m, p, op in OPS}
    for k, cnt in statuses.items():
        for st in cnt:
            problems.check(st < 500 or (st == 503 and k in docs and
                                        "503" in docs[k]),
                           "%s %s answered %d" % (k[0], k[1], st))
            if documented_only and k in docs:
                problems.check(str(st) in docs[k], "%s %s answered %d, "
                               "undocumented" % (k[0], k[1], st))
    problems.raise_if_any("statuses")


def test_fuzz():
    """Every operation, no token configured."""
    _, _, statuses = fuzz("open", EXAMPLES)
    check_statuses(statuses)
    tested = {k for k in statuses if not k[1].startswith("(undeclared)")}
    missing = {(m.upper(), p) for m, p, _ in OPS} - tested
    h.check(not missing, "operations never called: %s" % sorted(missing))
    check_alive("the fuzz")


def restart_with_tokens():
    keep_dir()
    path = os.path.join(C.dir, "tokens")
    with open(path, "w") as f:
        for role, tok in TOKENS.items():
            f.write("%s %s\n" % (tok, role))
    os.chmod(path, 0o600)
    keep_dir()
    C.manager.stop()
    C.extra_conf["http.tokens_file"] = path
    write_conf()
    C.start_manager()
    h.check_eq(call("GET", "/v1/cluster").status, 401,
               "GET /v1/cluster without a token once tokens are set")


def test_fuzz_with_admin_token():
    """Tokens configured, every call with the admin token."""
    restart_with_tokens()
    _, _, statuses = fuzz("admin-token", max(EXAMPLES // 3, 1),
                          ["Authorization: Bearer " + TOKENS["admin"]])
    check_statuses(statuses)
    refused = {k: c[401] + c[403] for k, c in statuses.items()
               if c[401] + c[403]}
    h.check(not refused, "the admin token was refused: %s" % refused)
    check_alive("the fuzz with the admin token")


def test_fuzz_without_token():
    """Tokens configured, no token sent: every operation that needs a role
    answers 401 (with WWW-Authenticate, checked by schemathesis), the public
    ones answer as usual."""
    public = {(m.upper(), p) for m, p, op in OPS
              if op.get("security", SPEC_JSON.get("security")) == []}
    h.check_eq(len(public), 6, "public operations (%s)" % sorted(public))
    _, _, statuses = fuzz("no-token", max(EXAMPLES // 3, 1))
    check_statuses(statuses)
    problems = h.Problems()
    n401 = 0
    for k, cnt in statuses.items():
        if k[1].startswith("(undeclared)"):
            continue
        if k in public:
            problems.check(401 not in cnt, "%s %s (public) answered 401"
                           % k)
        else:
            # The HTTP layer may refuse a malformed request first (400).
            other = {s: n for s, n in cnt.items() if s not in (401, 400)}
            problems.check(not other and cnt[401] > 0,
                           "%s %s without a token: %s" % (k + (dict(cnt),)))
            n401 += cnt[401]
    problems.raise_if_any("without a token")
    h.log("%d answers 401 to %d protected operations, %d public ones "
          "answered" % (n401, len(OPS) - len(public), len(public)))
    check_alive("the fuzz without a token")


def test_http_layer():
    """What the HTTP layer answers before any route, on a known path, is
    what the description lists on every operation (checked against the
    schemas): an unknown method, a malformed target, a chunked body, an
    unknown Expect, another HTTP version, headers too large, a body too
    large; mykit's shape on a mykit path once the path is known. And a
    request it refuses does not cost the next connection its request (the
    old connection tracking lost some of them)."""
    import socket
    host, port = C.manager_addr.rsplit(":", 1)

    def raw(data):
        k = socket.create_connection((host, int(port)), timeout=10)
        try:
            k.sendall(data)
            got = b""
            while True:
                try:
                    c = k.recv(65536)
                except socket.timeout:
                    break
                if not c:
                    break
                got += c
        finally:
            k.close()
        head, _, body = got.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        hdrs = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        return (int(lines[0].split()[1]), hdrs.get("Content-Type"),
                json.loads(body) if body else None)

    cases = [
        ("healthz", 501, b"QUERY /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("healthz", 400, b"GET /healthz?\x01 HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("healthz", 400, b"GARBAGE\r\n\r\n"),
        ("submitTask", 411, b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n"),
        ("listTasks", 417, b"GET /v1/tasks HTTP/1.1\r\nHost: x\r\n"
         b"Expect: later\r\n\r\n"),
        ("getCluster", 505, b"GET /v1/cluster HTTP/2.0\r\nHost: x\r\n\r\n"),
        ("getTask", 431, b"GET /v1/tasks/x HTTP/1.1\r\nHost: x\r\nX-Big: " +
         b"a" * 20000 + b"\r\n\r\n"),
        ("submitTask", 413, b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n"
         b"Content-Type: application/json\r\n"
         b"Content-Length: 99999999\r\n\r\n"),
        ("mykitPush", 413, b"POST /push HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: 99999999\r\n\r\n"),
        ("mykitClearAll", 431, b"GET /clearAll HTTP/1.1\r\nHost: x\r\n"
         b"X-Big: " + b"a" * 20000 + b"\r\n\r\n"),
    ]
    answers = []
    problems = h.Problems()
    for op, want, data in cases:
        status, ctype, body = raw(data)
        problems.check(status == want, "%s: want %d, got %d %r"
                       % (data[:40], want, status, body))
        answers.append({"op": op, "status": status, "content_type": ctype,
                        "body": body})
    p = run([tool("python"), os.path.join(h.HERE, "openapi_check.py"),
             SPEC], input="".join(json.dumps(a) + "\n" for a in answers))
    problems.check(p.returncode == 0, "answers that do not match the "
                   "description:\n  " + p.stdout.strip().replace(
                       "\n", "\n  "))
    import http.client
    lost = 0
    for i in range(100):
        raw(b"GARBAGE\r\n\r\n")
        c = http.client.HTTPConnection(host, int(port), timeout=2)
        try:
            c.request("POST", "/v1/tasks", b'{"x":1}',
                      {"Content-Type": "application/json"})
            c.getresponse().read()
        except (OSError, http.client.HTTPException):
            lost += 1
        c.close()
    problems.check(lost == 0, "%d of 100 requests on a new connection right "
                   "after a malformed one got no answer within 2 s" % lost)
    problems.raise_if_any("HTTP layer")
    h.log("%d refusals of the HTTP layer match the description; 100 "
          "requests after a malformed one all answered" % len(cases))
    check_alive("the HTTP layer's refusals")


def test_clean_stop():
    """After all that, SIGTERM stops the manager cleanly: exit 0, and in
    the sanitizer build no leak report."""
    h.check(C.manager.running(), "the manager is not running")
    text = read_log(C.manager)  # before: its descriptor closes with it
    keep_dir()
    rc = C.manager.stop()
    h.check_eq(rc, 0, "the manager's exit code after SIGTERM")
    try:
        text = read_log(C.manager)
    except h.TestFailure:
        pass
    bad = [line for line in text.splitlines() if CRASH.search(line)]
    h.check(not bad, "the manager's log at its stop:\n  %s"
            % "\n  ".join(bad[:10]))


def dump():
    if C is not None:
        C.dump_logs()


def cleanup(failed):
    if C is not None:
        keep_dir()
        C.close(failed)
    if OUT is not None:
        if failed or h.KEEP:
            h.log("schemathesis output kept in %s" % OUT)
        else:
            shutil.rmtree(OUT, ignore_errors=True)


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup, dump)
