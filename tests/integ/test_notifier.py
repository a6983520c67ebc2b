#!/usr/bin/python3
"""prophet-notifier against the real dev cluster and local HTTP endpoints.

One isolated cluster (manager + 1 worker + notifier), two HTTP servers run
by the test (a "fast" one and a "slow" one, so they are two host:port
origins for the notifier's flow control):
  1. 1,000 tasks with callbacks, all due at once: each called exactly once,
     method, body and headers right, callback_status ok; prints callbacks/s
     and due-to-callback latency p50/p99.
  2. An endpoint failing the first 2 attempts: 3 calls, the backoff
     spacing respected, callback_status ok, the retries in the task log.
  3. An endpoint always failing: exactly max_attempts calls, then the
     dead-letter topic holds the message with the error, status failed.
     A recurring task's callback_status follows its latest occurrence:
     ok after earlier occurrences failed, failed after an earlier ok.
  4. A slow endpoint (2 s an answer) does not delay callbacks to a fast
     one, and gets at most notifier.host_max_inflight requests at once.
  5. A topic route calls tasks that have no callback of their own; the
     callback survives a Redis index rebuild (it travels in the DB copy).
  6. kill -9 of the notifier mid-stream: after its restart every callback
     was made at least once (duplicates counted) and recorded ok.
  7. Callbacks are signed (Standard Webhooks, checked here with Python's
     hmac): every call of 1, the retries of 2 (one webhook-id, a fresh
     timestamp and signature each); keys rotated by SIGHUP (two
     signatures, new key first), a bad key file kept out at reload and
     refused at start, naming the key and showing no key.
  8. A backlog of 20,000 messages read through without the group session
     running out, and committed; a topic created while a static member was
     away is read when it comes back (see the tests' own docstrings).
"""

import base64
import hashlib
import hmac
import http.server
import json
import os
import shutil
import signal
import tempfile
import re
import socket
import socketserver
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

TOPIC = "cb"
ROUTED_TOPIC = "cb.routed"  # no callback in the tasks: a config route
RETRY_TOPIC = "prophet.callback-retry"
DEAD_TOPIC = "prophet.callback-dead"
BACKOFF_BASE_MS = 200
JITTER_PCT = 20
HOST_MAX_INFLIGHT = 8
SLOW_S = 2.0

# callback signing keys (whsec_ + base64 of 32 random bytes)
KEY1 = "whsec_" + base64.b64encode(os.urandom(32)).decode()
KEY2 = "whsec_" + base64.b64encode(os.urandom(32)).decode()
KEY_DIR = tempfile.mkdtemp(prefix="prophet-notifier-keys-")
KEY_FILE = os.path.join(KEY_DIR, "callback-signing.key")
SIGNED_BY = [KEY1]  # the keys the notifier signs with now, in order

C = None         # the cluster
NOTIFIER = None  # its Proc
FAST = None      # Endpoint
SLOW = None      # Endpoint


class Endpoint:
    """A threaded HTTP server recording every call:
    /ok/<id>      200
    /flaky/<id>   500 for the first 2 calls of that id, then 200
    /fail/<id>    always 500
    /once/<id>    200 for the first call of that id, then 500
    /slow/<id>    200 after SLOW_S seconds
    """

    def __init__(self):
        self.calls = []  # (received ms, path, method, headers dict, body)
        self.by_id = {}
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.running = 0
        self.max_running = 0
        ep = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go in two writes: without this, Nagle
            # and delayed ACKs add 40 ms to every answer
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def handle_any(self):
                recv = h.now_ms()
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                parts = self.path.split("/")
                kind, tid = (parts[1], parts[2]) if len(parts) > 2 \
                    else ("?", "?")
                with ep.lock:
                    ep.running += 1
                    ep.max_running = max(ep.max_running, ep.running)
                    calls = ep.by_id.setdefault(tid, [])
                    nth = len(calls) + 1
                    call = {"ms": recv, "kind": kind, "method": self.command,
                            "headers": {k.lower(): v for k, v in
                                        self.headers.items()},
                            "raw_headers": list(self.headers.items()),
                            "body": body, "nth": nth}
                    calls.append(call)
                    ep.calls.append(call)
                    ep.cond.notify_all()
                try:
                    if kind == "slow":
                        time.sleep(SLOW_S)
                    fail = kind == "fail" or (kind == "flaky" and
                                              nth <= 2) or \
                        (kind == "once" and nth > 1)
                    code = 500 if fail else 200
                    out = b'{"ok":false}' if fail else b'{"ok":true}'
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                finally:
                    with ep.lock:
                        ep.running -= 1
                        call["done_ms"] = h.now_ms()

            do_POST = do_PUT = do_GET = do_DELETE = do_PATCH = handle_any

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       daemon=True)
        self.thread.start()

    def url(self, kind, tid):
        return "http://127.0.0.1:%d/%s/%s" % (self.port, kind, tid)

    def calls_of(self, tid):
        with self.lock:
            return list(self.by_id.get(tid, []))

    def wait_ids(self, ids, timeout, min_calls=1):
        """Waits until every id was called at least min_calls times;
        returns the ids still short."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                short = [i for i in ids
                         if len(self.by_id.get(i, [])) < min_calls]
                left = deadline - time.monotonic()
                if not short or left <= 0:
                    return short
                self.cond.wait(min(left, 0.5))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def write_private(path, text, mode=0o600):
    fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path + ".new", mode)
    os.replace(path + ".new", path)


def sign_check(p, call, keys, msg_id):
    """Checks a call's Standard Webhooks headers the way a receiver does
    (an implementation of the spec independent of the notifier's): one
    header each, webhook-id msg_id, a timestamp of the call's second,
    one v1 signature per key, in order, over id.timestamp.body."""
    what = "%s (attempt %s)" % (msg_id, call["headers"].get(
        "x-prophet-attempt"))
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        n = sum(1 for k, _ in call["raw_headers"] if k.lower() == name)
        if not p.check(n == 1, "%s: %d %s headers" % (what, n, name)):
            return
    hd = call["headers"]
    p.check(hd["webhook-id"] == msg_id, "%s: webhook-id %r"
            % (what, hd["webhook-id"]))
    ts = hd["webhook-timestamp"]
    p.check(ts.isdigit() and
            call["ms"] // 1000 - 5 <= int(ts) <= call["ms"] // 1000 + 1,
            "%s: webhook-timestamp %r, called at %d ms"
            % (what, ts, call["ms"]))
    body = call["body"] if call["method"] in ("POST", "PUT", "PATCH") \
        else b""
    signed = ("%s.%s." % (hd["webhook-id"], ts)).encode() + body
    want = " ".join(
        "v1," + base64.b64encode(hmac.new(
            base64.b64decode(k[len("whsec_"):]), signed,
            hashlib.sha256).digest()).decode() for k in keys)
    p.check(hmac.compare_digest(hd["webhook-signature"], want),
            "%s: webhook-signature %r, want %r"
            % (what, hd["webhook-signature"], want))


def start_notifier():
    NOTIFIER.start()
    C._wait_http(NOTIFIER, NOTIFIER.addr, "/readyz", 60)


def setup():
    global C, NOTIFIER, FAST, SLOW
    FAST = Endpoint()
    SLOW = Endpoint()
    port = h.free_port()
    write_private(KEY_FILE, KEY1 + "\n")
    C = h.Cluster(workers=1, name="notifier", conf={
        "notifier.callback_signing_key_file": KEY_FILE,
        "notifier.topics": "%s,%s" % (TOPIC, ROUTED_TOPIC),
        "notifier.http_listen": "127.0.0.1:%d" % port,
        "notifier.backoff_base_ms": BACKOFF_BASE_MS,
        "notifier.backoff_jitter_pct": JITTER_PCT,
        "notifier.host_max_inflight": HOST_MAX_INFLIGHT,
        "notifier.max_attempts": 5,
        # the endpoints run here, on loopback, which callbacks may not
        # reach by default (test_ssrf.py)
        "notifier.callback_networks_allowed": "127.0.0.0/8",
        "log.level": "info",
    })
    C.open()
    NOTIFIER = C.notifier(port, args=[
        "--set", "notifier.routes.%s=%s" % (ROUTED_TOPIC,
                                            FAST.url("ok", "routed"))])
    C.workers.append(NOTIFIER)  # so that cleanup and log dumps include it
    h.create_topics(C.brokers, [C.topic(t) for t in
                                (TOPIC, ROUTED_TOPIC, RETRY_TOPIC,
                                 DEAD_TOPIC)])
    C.start_manager()
    C.start_worker(0)
    start_notifier()
    # The consumer group's first assignment takes a few seconds (the
    # broker's initial rebalance delay): wait for one callback.
    submit([{"id": "warmup", "topic": TOPIC, "delay_ms": 0, "body": "w",
             "callback": {"url": FAST.url("ok", "warmup")}}])
    h.check(not FAST.wait_ids(["warmup"], 60), "warm-up callback not made")


def submit(tasks):
    api = C.api()
    try:
        for k in range(0, len(tasks), 500):
            r = api.post("/v1/tasks/batch", {"tasks": tasks[k:k + 500]})
            h.check(r.status == 200, "batch answered %s: %s"
                    % (r.status, r.text[:300]))
            for res in r.json["results"]:
                h.check("error" not in res, "task refused: %r" % res)
    finally:
        api.close()


def get_task(tid, log=False):
    api = C.api()
    try:
        r = api.get("/v1/tasks/%s%s" % (tid, "?log=1" if log else ""))
        h.check(r.status == 200, "GET %s: %s" % (tid, r.status))
        return r.json
    finally:
        api.close()


def wait_status(ids, status, timeout=30):
    q = ",".join("'%s'" % i for i in ids)

    def done():
        rows = C.mysql("SELECT COUNT(*) FROM tasks WHERE id IN (%s) AND "
                       "callback_status = '%s'" % (q, status))
        return int(rows[0][0]) == len(ids)
    h.wait_until(done, timeout, 0.3, "callback_status %s for %d tasks"
                 % (status, len(ids)))


def test_thousand_callbacks_once_with_right_headers():
    n = 1000
    due = h.now_ms() + 3000
    tasks = []
    for i in range(n):
        tid = "k1-%04d" % i
        tasks.append({"id": tid, "topic": TOPIC, "due_at": due,
                      "body": json.dumps({"n": i, "s": "héllo ✓"},
                                         ensure_ascii=False),
                      "callback": {"url": FAST.url("ok", tid),
                                   "headers": {"X-Test": "v%d" % i,
                                               "Content-Type":
                                               "application/json"}}})
    submit(tasks)
    ids = [t["id"] for t in tasks]
    short = FAST.wait_ids(ids, 60)
    h.check(not short, "%d callbacks never made, e.g. %s"
            % (len(short), short[:5]))
    time.sleep(1.5)  # late duplicates would show now
    p = h.Problems()
    lat = []
    for t in tasks:
        calls = FAST.calls_of(t["id"])
        p.check(len(calls) == 1, "%s called %d times" % (t["id"], len(calls)))
        c = calls[0]
        hd = c["headers"]
        p.check(c["method"] == "POST", "%s method %s" % (t["id"], c["method"]))
        p.check(c["body"] == t["body"].encode(), "%s body differs" % t["id"])
        p.check(hd.get("x-prophet-id") == t["id"], "%s X-Prophet-Id %r"
                % (t["id"], hd.get("x-prophet-id")))
        p.check(hd.get("x-prophet-attempt") == "1", "%s X-Prophet-Attempt %r"
                % (t["id"], hd.get("x-prophet-attempt")))
        p.check(hd.get("x-prophet-due-at") == str(due),
                "%s X-Prophet-Due-At %r" % (t["id"],
                                            hd.get("x-prophet-due-at")))
        p.check(hd.get("x-test") == t["callback"]["headers"]["X-Test"],
                "%s X-Test %r" % (t["id"], hd.get("x-test")))
        p.check(hd.get("content-type") == "application/json",
                "%s content-type %r" % (t["id"], hd.get("content-type")))
        p.check(c["ms"] >= due, "%s called %d ms before due"
                % (t["id"], due - c["ms"]))
        sign_check(p, c, SIGNED_BY, "%s:%d" % (t["id"], due))
        lat.append(c["ms"] - due)
    p.raise_if_any("1,000 callbacks")
    wait_status(ids, "ok")
    h.check(get_task(ids[0])["callback_status"] == "ok", "GET shows ok")
    first = min(FAST.calls_of(i)[0]["ms"] for i in ids)
    last = max(FAST.calls_of(i)[0]["ms"] for i in ids)
    m = h.metrics(NOTIFIER.addr)
    h.log("FIGURES 1000 callbacks all due at once: first %d ms after due, "
          "last %d ms after due; %.0f callbacks/s (first to last call); "
          "due-to-callback latency p50 %d ms, p99 %d ms, max %d ms; "
          "notifier request time mean %.1f ms"
          % (first - due, last - due,
             (n - 1) * 1000.0 / max(1, last - first),
             h.percentile(lat, 50), h.percentile(lat, 99), max(lat),
             1000.0 * m.get("prophet_callback_duration_seconds_sum", 0) /
             max(1, m.get("prophet_callback_duration_seconds_count", 1))))


def test_flaky_endpoint_retried_with_backoff():
    ids = ["k2-%d" % i for i in range(3)]
    due = h.now_ms() + 500
    submit([{"id": tid, "topic": TOPIC, "due_at": due,
             "body": "flaky %s" % tid,
             "callback": {"url": FAST.url("flaky", tid), "method": "PUT",
                          # replaced by the notifier's own
                          "headers": {"Webhook-Signature": "v1,forged",
                                      "webhook-id": "forged"}}}
            for tid in ids])
    short = FAST.wait_ids(ids, 40, min_calls=3)
    h.check(not short, "not called 3 times: %s" % short)
    wait_status(ids, "ok")
    time.sleep(1.5)
    p = h.Problems()
    gaps = []
    for tid in ids:
        calls = FAST.calls_of(tid)
        p.check(len(calls) == 3, "%s called %d times" % (tid, len(calls)))
        p.check([c["headers"].get("x-prophet-attempt") for c in calls] ==
                ["1", "2", "3"], "%s attempts %r" % (tid, [
                    c["headers"].get("x-prophet-attempt") for c in calls]))
        p.check(all(c["headers"].get("x-prophet-id") == tid
                    for c in calls), "%s: X-Prophet-Id changed" % tid)
        p.check(all(c["method"] == "PUT" and c["body"] ==
                    ("flaky %s" % tid).encode() for c in calls),
                "%s: method or body changed on retry" % tid)
        for c in calls:  # one webhook-id, each attempt signed anew
            sign_check(p, c, SIGNED_BY, "%s:%d" % (tid, due))
        g2 = calls[1]["ms"] - calls[0]["done_ms"]
        g3 = calls[2]["ms"] - calls[1]["done_ms"]
        gaps.append((g2, g3))
        # base * (1 - jitter) and 2 * base * (1 - jitter), from the
        # failed answer to the next call
        lo2 = BACKOFF_BASE_MS * (100 - JITTER_PCT) // 100
        p.check(g2 >= lo2, "%s: attempt 2 came %d ms after attempt 1 "
                "failed (backoff at least %d)" % (tid, g2, lo2))
        p.check(g3 >= 2 * lo2, "%s: attempt 3 came %d ms after attempt 2 "
                "failed (backoff at least %d)" % (tid, g3, 2 * lo2))
        t = get_task(tid, log=True)
        p.check(t["callback_status"] == "ok", "%s status %s"
                % (tid, t["callback_status"]))
        cb_log = [(e.get("to"), e.get("attempt"), e.get("note"))
                  for e in t.get("log", []) if e.get("from") == "callback"]
        p.check([x[:2] for x in cb_log] ==
                [("retrying", 1), ("retrying", 2), ("ok", 3)],
                "%s callback log %r" % (tid, cb_log))
    p.raise_if_any("flaky endpoint")
    h.log("FIGURES retry spacing (failed answer -> next attempt, ms; "
          "backoff base %d, jitter %d%%): %s"
          % (BACKOFF_BASE_MS, JITTER_PCT, gaps))


def test_failing_endpoint_dead_lettered():
    ids = ["k3-%d" % i for i in range(2)]
    reader = C.reader([DEAD_TOPIC])
    submit([{"id": tid, "topic": TOPIC, "delay_ms": 300, "max_attempts": 4,
             "key": "key-" + tid, "body": "doomed %s" % tid,
             "callback": {"url": FAST.url("fail", tid)}} for tid in ids])
    missing = reader.wait_for(ids, 60)
    h.check(not missing, "not dead-lettered: %s" % missing)
    wait_status(ids, "failed")
    time.sleep(2.0)  # no 5th attempt
    p = h.Problems()
    for tid in ids:
        calls = FAST.calls_of(tid)
        p.check(len(calls) == 4, "%s called %d times (max_attempts 4)"
                % (tid, len(calls)))
        ms = reader.by_id.get(tid, [])
        p.check(len(ms) == 1, "%s dead-lettered %d times" % (tid, len(ms)))
        m = ms[0]
        p.check(m.payload == "doomed %s" % tid, "%s dead letter body %r"
                % (tid, m.payload))
        p.check(m.key == "key-" + tid, "%s dead letter key %r"
                % (tid, m.key))
        p.check(m.hdr.get("prophet-callback-attempts") == "4",
                "%s attempts header %r"
                % (tid, m.hdr.get("prophet-callback-attempts")))
        p.check("500" in (m.hdr.get("prophet-callback-error") or ""),
                "%s error header %r"
                % (tid, m.hdr.get("prophet-callback-error")))
        p.check(m.hdr.get("prophet-topic") == TOPIC, "%s topic header %r"
                % (tid, m.hdr.get("prophet-topic")))
        cb = json.loads(m.hdr.get("prophet-callback") or "{}")
        p.check(cb.get("url") == FAST.url("fail", tid),
                "%s callback header %r" % (tid, cb))
        t = get_task(tid)
        p.check(t["callback_status"] == "failed", "%s status %s"
                % (tid, t["callback_status"]))
    p.raise_if_any("failing endpoint")
    h.log("dead letter headers: %s" % reader.by_id[ids[0]][0].hdr)


def test_recurring_callback_status_follows_latest_occurrence():
    """Every occurrence of a recurring task is a callback of its own. Its
    callback_status once stayed at the first occurrence's final outcome
    for good: a series whose first callbacks failed showed failed after
    later ones succeeded, and one whose first succeeded showed ok while
    every later one was dead-lettered."""
    series = {"k3r-up": "flaky", "k3r-down": "once"}
    submit([{"id": tid, "topic": TOPIC, "body": "tick %s" % tid,
             "cron": "*/2 * * * * *", "max_occurrences": 3,
             "max_attempts": 1, "callback": {"url": FAST.url(kind, tid)}}
            for tid, kind in series.items()])
    short = FAST.wait_ids(list(series), 40, min_calls=3)
    h.check(not short, "not called 3 times: %s" % short)
    wait_status(["k3r-up"], "ok")
    wait_status(["k3r-down"], "failed")
    time.sleep(1.0)  # a late outcome would show now
    p = h.Problems()
    for tid, want in (("k3r-up", ["failed", "failed", "ok"]),
                      ("k3r-down", ["ok", "failed", "failed"])):
        calls = FAST.calls_of(tid)
        p.check(len(calls) == 3, "%s called %d times" % (tid, len(calls)))
        dues = [c["headers"].get("x-prophet-due-at") for c in calls]
        keys = [c["headers"].get("idempotency-key") for c in calls]
        p.check(len(set(dues)) == len(dues), "%s: occurrences called %r"
                % (tid, dues))
        p.check(keys == ["%s:%s" % (tid, d) for d in dues],
                "%s: Idempotency-Key %r for occurrences %r"
                % (tid, keys, dues))
        t = get_task(tid, log=True)
        cb_log = [e.get("to") for e in t.get("log", [])
                  if e.get("from") == "callback"]
        p.check(cb_log == want, "%s callback log %r, want %r"
                % (tid, cb_log, want))
        p.check(t["callback_status"] == want[-1],
                "%s callback_status %s after its last occurrence's %s"
                % (tid, t["callback_status"], want[-1]))
    p.raise_if_any("recurring callbacks")


def test_slow_endpoint_does_not_delay_fast_one():
    nslow, nfast = 3 * HOST_MAX_INFLIGHT, 50
    due = h.now_ms() + 2500
    slow = ["k4s-%d" % i for i in range(nslow)]
    fast = ["k4f-%d" % i for i in range(nfast)]
    SLOW.max_running = 0
    tasks = [{"id": tid, "topic": TOPIC, "due_at": due, "body": "s",
              "callback": {"url": SLOW.url("slow", tid)}} for tid in slow]
    tasks += [{"id": tid, "topic": TOPIC, "due_at": due + 200, "body": "f",
               "callback": {"url": FAST.url("ok", tid)}} for tid in fast]
    submit(tasks)
    short = FAST.wait_ids(fast, 30)
    h.check(not short, "fast callbacks missing: %s" % short[:5])
    short = SLOW.wait_ids(slow, 60)
    h.check(not short, "slow callbacks missing: %s" % short[:5])
    wait_status(slow + fast, "ok", timeout=60)
    first_slow_done = min(SLOW.calls_of(t)[0]["done_ms"] for t in slow)
    fast_last = max(FAST.calls_of(t)[0]["ms"] for t in fast)
    slow_starts = sorted(SLOW.calls_of(t)[0]["ms"] for t in slow)
    h.log("slow endpoint: first answer at due+%d ms, last call started at "
          "due+%d ms, at most %d at once; fast endpoint: last call at "
          "due+%d ms" % (first_slow_done - due, slow_starts[-1] - due,
                         SLOW.max_running, fast_last - due))
    # The fast calls were made while the first slow ones were still
    # running: they did not queue behind the slow host.
    h.check(fast_last < first_slow_done,
            "a fast callback came %d ms after the first slow answer"
            % (fast_last - first_slow_done))
    h.check(SLOW.max_running <= HOST_MAX_INFLIGHT,
            "slow host got %d requests at once (limit %d)"
            % (SLOW.max_running, HOST_MAX_INFLIGHT))
    # the rest waited for a free place: nothing was dropped
    h.check(slow_starts[-1] - slow_starts[0] >= 1000 * SLOW_S * 0.9,
            "slow calls were not spread over waves: %d ms"
            % (slow_starts[-1] - slow_starts[0]))


def test_topic_route_calls_tasks_without_callback():
    ids = ["k6-%d" % i for i in range(20)]
    submit([{"id": tid, "topic": ROUTED_TOPIC, "delay_ms": 200,
             "body": "routed %s" % tid} for tid in ids])

    def all_called():
        with FAST.lock:
            got = [c["headers"].get("x-prophet-id")
                   for c in FAST.by_id.get("routed", [])]
        return set(ids) <= set(got)
    h.wait_until(all_called, 30, 0.1, "routed callbacks")
    wait_status(ids, "ok")
    p = h.Problems()
    for c in FAST.calls_of("routed"):
        tid = c["headers"].get("x-prophet-id")
        p.check(c["method"] == "POST" and
                c["body"] == ("routed %s" % tid).encode(),
                "routed %s: %s %r" % (tid, c["method"], c["body"]))
    p.check(len(FAST.calls_of("routed")) == len(ids), "routed calls: %d"
            % len(FAST.calls_of("routed")))
    p.raise_if_any("topic route")


def test_callback_survives_redis_index_rebuild():
    """The callback also travels through the DB copy: tasks whose Redis
    index is lost are rebuilt from the DB and still called back."""
    ids = ["k7-%d" % i for i in range(30)]
    submit([{"id": tid, "topic": TOPIC, "delay_ms": 4000, "max_attempts": 2,
             "body": "rebuilt %s" % tid,
             "callback": {"url": FAST.url("ok", tid), "method": "PATCH",
                          "headers": {"X-Rebuilt": "yes"}}} for tid in ids])
    rebuilt = len(C.workers[0].grep("slot index rebuilt"))
    r = C.redis()
    try:
        r.cmd("FLUSHDB")
        r.cmd("SET", C.REDIS_MARK, C.tag)
    finally:
        r.close()
    short = FAST.wait_ids(ids, 40)
    h.check(not short, "not called back after the rebuild: %s" % short)
    wait_status(ids, "ok")
    p = h.Problems()
    for tid in ids:
        c = FAST.calls_of(tid)[0]
        p.check(c["method"] == "PATCH" and
                c["headers"].get("x-rebuilt") == "yes" and
                c["body"] == ("rebuilt %s" % tid).encode(),
                "%s: %s %r %r" % (tid, c["method"], c["headers"], c["body"]))
    p.raise_if_any("callbacks after a Redis index rebuild")
    h.check(len(C.workers[0].grep("slot index rebuilt")) > rebuilt,
            "the worker did not rebuild any slot index")


def test_kill9_notifier_every_callback_made():
    n = 600
    now = h.now_ms()
    tasks = [{"id": "k5-%04d" % i, "topic": TOPIC,
              "due_at": now + 2000 + (i * 4000) // n, "body": "k %d" % i,
              "callback": {"url": FAST.url("ok", "k5-%04d" % i)}}
             for i in range(n)]
    ids = [t["id"] for t in tasks]
    submit(tasks)

    def some_called():
        with FAST.lock:
            return sum(1 for i in ids if i in FAST.by_id) >= n // 4
    h.wait_until(some_called, 30, 0.02, "a quarter of the callbacks")
    NOTIFIER.kill()
    with FAST.lock:
        before = sum(1 for i in ids if i in FAST.by_id)
    h.log("notifier killed (SIGKILL) after %d of %d callbacks" % (before, n))
    time.sleep(1.0)
    start_notifier()
    short = FAST.wait_ids(ids, 60)
    h.check(not short, "%d callbacks never made after the restart, e.g. %s"
            % (len(short), short[:5]))
    wait_status(ids, "ok", timeout=60)
    dups = sum(len(FAST.calls_of(i)) - 1 for i in ids)
    h.log("FIGURES kill -9 mid-stream: %d callbacks made before the kill, "
          "all %d made at least once after the restart, %d duplicates "
          "(at-least-once: replayed in-progress messages)"
          % (before, n, dups))


def notifier_instance_id():
    """The notifier's group.instance.id as common/kafka.c makes it:
    "notifier.<host>.<notifier.http_listen>", other characters '_'."""
    raw = "notifier.%s.%s" % (socket.gethostname()[:100], NOTIFIER.addr)
    return re.sub(r"[^A-Za-z0-9._-]", "_", raw)


def test_fenced_static_member_made_again():
    """A static member fenced by the group coordinator gets a fatal
    error from librdkafka (FENCED_INSTANCE_ID: as after a coordinator
    outage longer than its session, seen in the --ha chaos run, where the
    notifier then made no callback again). Here a kcat consumer joins the
    notifier's group with its instance id, which fences the notifier: it
    must make its consumer again (and fence kcat in turn) and make every
    callback."""
    n = 200
    now = h.now_ms()
    tasks = [{"id": "fz-%04d" % i, "topic": TOPIC,
              "due_at": now + 4000 + (i * 4000) // n, "body": "f %d" % i,
              "callback": {"url": FAST.url("ok", "fz-%04d" % i)}}
             for i in range(n)]
    ids = [t["id"] for t in tasks]
    remade_before = len(NOTIFIER.grep("consumer failed for good"))
    kc = subprocess.Popen(
        ["kcat", "-C", "-q", "-b", C.brokers, "-G",
         C.extra_conf["notifier.group"], "-X",
         "group.instance.id=" + notifier_instance_id(), "-X",
         "session.timeout.ms=6000", C.topic(TOPIC)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        h.wait_until(lambda: len(NOTIFIER.grep("consumer failed for good"))
                     > remade_before, 30, 0.2,
                     "the notifier fenced (FENCED_INSTANCE_ID)")
        h.check(NOTIFIER.grep("kafka consumer made again"),
                "the consumer was not made again")
        t_fenced = h.now_ms()
        submit(tasks)
        short = FAST.wait_ids(ids, 60)
        h.check(not short, "%d callbacks never made after the fence, e.g. "
                "%s" % (len(short), short[:5]))
        lat = sorted(FAST.calls_of(i)[0]["ms"] - t["due_at"]
                     for i, t in zip(ids, tasks))
        h.log("FIGURES fenced static member: made again, %d callbacks "
              "made after it (p50 %d ms, max %d ms after due), fenced "
              "at +%d ms" % (n, h.percentile(lat, 50), lat[-1],
                             t_fenced - now))
    finally:
        kc.kill()
        kc.wait()


def extra_notifier(name, log, settings):
    """A notifier of its own beside NOTIFIER, on a free port, with settings
    ((key, value) pairs), its log in C.dir/log; started, ready, stopped
    with the cluster."""
    port = h.free_port()
    args = ["--set", "notifier.http_listen=127.0.0.1:%d" % port]
    for k, v in settings:
        args += ["--set", "%s=%s" % (k, v)]
    n = C.notifier(port, args=args)
    n.name = name
    n.log_path = os.path.join(C.dir, log)
    C.workers.append(n)
    n.start()
    C._wait_http(n, n.addr, "/readyz", 60)
    return n


def test_own_topics_created_at_start():
    """A notifier whose retry and dead-letter topics do not exist makes them
    at start (Admin API, kafka.topic_partitions 3 where the broker's
    auto-creation would give 4), before it subscribes: its first retry is
    consumed at once, not at a metadata refresh."""
    tag = h.rand_tag()
    retry, dead = "retry-" + tag, "dead-" + tag
    other = extra_notifier("notifier-own-topics", "notifier3.log", [
        ("notifier.group", "own-topics-" + tag),
        ("notifier.topics", "own-" + tag),
        ("notifier.retry_topic", retry),
        ("notifier.dead_letter_topic", dead),
        ("kafka.topic_partitions", "3")])
    try:
        for t in (retry, dead):
            kt = C.topic(t)
            h.check(other.grep('msg="kafka topic created" topic=%s '
                               'partitions=3 replication=default' % kt),
                    "no 'kafka topic created' line for %s with partitions=3 "
                    "replication=default (0 is the brokers' default, and "
                    "was logged as 0)" % kt)
            p = subprocess.run(["kcat", "-L", "-b", C.brokers, "-t", kt],
                               capture_output=True, text=True, timeout=30)
            h.check(" 3 partitions:" in p.stdout,
                    "%s not made with 3 partitions: %s" % (kt, p.stdout))
        # Started again: the topics exist, nothing is created, no warning.
        other.stop()
        other.start()
        C._wait_http(other, other.addr, "/readyz", 60)
        h.check_eq(len(other.grep('msg="kafka topic created"')), 2,
                   "topics created (two, at the first start only)")
        h.check(not other.grep("cannot create the notifier's topics"),
                "a warning about existing topics")
        # The retry of a flaky callback, on the new retry topic.
        tid = "own-" + tag
        submit([{"id": tid, "topic": "own-" + tag, "delay_ms": 0,
                 "body": "o", "callback": {"url": FAST.url("flaky", tid)}}])
        short = FAST.wait_ids([tid], 30, min_calls=3)
        h.check(not short, "the flaky callback was not retried twice")
        calls = FAST.calls_of(tid)
        h.log("FIGURES own topics: retries %d and %d ms after the first "
              "call" % (calls[1]["ms"] - calls[0]["ms"],
                        calls[2]["ms"] - calls[0]["ms"]))
    finally:
        other.stop()


def test_topic_made_while_static_member_away():
    """A topic created while a notifier (a static member, default
    subscription: a pattern) was stopped is read once it is started again
    under its name: Kafka hands the member its old assignment without a
    rebalance, so the notifier checks its first assignment against the
    brokers' topics and asks for one (on the old code the callback waited
    for the group's next rebalance: none within a minute)."""
    tag = h.rand_tag()
    other = extra_notifier("notifier-pattern", "notifier4.log", [
        ("notifier.group", "pattern-" + tag), ("notifier.topics", "")])
    try:
        # Its group formed (the broker's initial delay is 3 s): a callback
        # of a topic that only it reads.
        first = "pat1-" + tag
        submit([{"id": first, "topic": first, "delay_ms": 0, "body": "p",
                 "callback": {"url": FAST.url("ok", first)}}])
        h.check(not FAST.wait_ids([first], 60), "first callback not made")
        other.signal(15)
        h.check(other.wait(30) == 0, "notifier did not stop on SIGTERM")
        tid = "pat2-" + tag
        submit([{"id": tid, "topic": tid, "delay_ms": 0, "body": "p",
                 "callback": {"url": FAST.url("ok", tid)}}])

        def delivered():
            return get_task(tid)["status"] == "delivered"
        h.wait_until(delivered, 30, 0.2, "the new topic's task published")
        t0 = time.time()
        other.start()
        C._wait_http(other, other.addr, "/readyz", 60)
        h.check(not FAST.wait_ids([tid], 30),
                "the callback of a topic made while the notifier was away "
                "was not made within 30 s")
        h.check(other.grep("asking for a rebalance"),
                "no 'asking for a rebalance' line")
        h.log("FIGURES topic made while a static notifier was away: "
              "called %.1f s after its start" % (time.time() - t0))
    finally:
        other.stop()


def test_rolling_restart_two_notifiers():
    """Two notifiers share the group; one is killed (-9) and started again
    at once, later the other is stopped (SIGTERM) and started again, under
    a steady stream of callbacks. Static members (kafka.static_membership)
    take their partitions back as they rejoin: no callback waits for a
    session timeout (6 s and 10 s here), none is lost."""
    port2 = h.free_port()
    second = C.notifier(port2, fast_rebalance=False, args=[
        "--set", "notifier.http_listen=127.0.0.1:%d" % port2])
    second.name = "notifier2"
    second.log_path = os.path.join(C.dir, "notifier2.log")
    C.workers.append(second)
    second.start()
    C._wait_http(second, second.addr, "/readyz", 60)
    n, span = 900, 18000
    now = h.now_ms()
    tasks = [{"id": "rr-%04d" % i, "topic": TOPIC,
              "due_at": now + 3000 + (i * span) // n, "body": "r %d" % i,
              "callback": {"url": FAST.url("ok", "rr-%04d" % i)}}
             for i in range(n)]
    ids = [t["id"] for t in tasks]
    submit(tasks)
    h.wait_until(lambda: h.now_ms() > now + 7000, 20, 0.05, "t+7 s")
    NOTIFIER.kill()
    start_notifier()
    h.log("notifier 1 killed (-9) and started again at t+%.1f s"
          % ((h.now_ms() - now) / 1000.0))
    h.wait_until(lambda: h.now_ms() > now + 13000, 20, 0.05, "t+13 s")
    second.signal(15)
    h.check(second.wait(30) == 0, "notifier 2 did not stop on SIGTERM")
    second.start()
    C._wait_http(second, second.addr, "/readyz", 60)
    h.log("notifier 2 stopped and started again at t+%.1f s"
          % ((h.now_ms() - now) / 1000.0))
    short = FAST.wait_ids(ids, 60)
    h.check(not short, "%d callbacks never made, e.g. %s"
            % (len(short), short[:5]))
    late = sorted(FAST.calls_of(t["id"])[0]["ms"] - t["due_at"]
                  for t in tasks)
    dups = sum(len(FAST.calls_of(i)) - 1 for i in ids)
    h.log("FIGURES rolling restart of two notifiers: callback lateness "
          "p50 %d ms, p99 %d ms, max %d ms; %d duplicates"
          % (h.percentile(late, 50), h.percentile(late, 99), late[-1], dups))
    # A member that had to wait out a session timeout shows it here.
    h.check(late[-1] < 5000, "a callback was %d ms late across the "
            "restarts (a partition waited for a session timeout?)" % late[-1])
    second.signal(15)
    second.wait(30)


def test_backlog_read_without_losing_the_group():
    """A notifier started on a backlog (20,000 messages without a callback,
    published while it was stopped) reads it through without its group
    session running out: no "session timed out", no fenced member made
    again (offsets committed one request a message queued ahead of its
    heartbeats on the coordinator's connection, and it read the backlog
    again and again); what it read stays committed (started once more, it
    does not read it again), and a callback after it is made at once."""
    n = 20000
    NOTIFIER.signal(15)
    h.check(NOTIFIER.wait(30) == 0, "notifier did not stop on SIGTERM")
    now = h.now_ms()
    submit([{"id": "bl-%05d" % i, "topic": TOPIC, "due_at": now + 1000,
             "body": "b"} for i in range(n)])

    def all_delivered():
        rows = C.mysql("SELECT COUNT(*) FROM tasks WHERE id LIKE 'bl-%' "
                       "AND status = 'delivered'")
        return int(rows[0][0]) == n
    h.wait_until(all_delivered, 60, 0.3, "the backlog published")
    mark = len(NOTIFIER.tail(100000))
    t0 = time.time()
    start_notifier()

    def read_all():
        m = h.metrics(NOTIFIER.addr)
        return m.get("prophet_notifier_consumed_total", 0) >= n and \
            m.get("prophet_notifier_pending_messages", 1) == 0
    h.wait_until(read_all, 120, 0.2, "the backlog read")
    took = time.time() - t0
    time.sleep(3)  # past a session timeout after the read
    new = NOTIFIER.tail(100000)[mark:]
    bad = [l for l in new if "session timed out" in l or "fenced" in l
           or "failed for good" in l]
    h.check(not bad, "the group was lost reading the backlog: %s"
            % bad[:3])
    NOTIFIER.signal(15)
    h.check(NOTIFIER.wait(30) == 0, "notifier did not stop on SIGTERM")
    start_notifier()
    submit([{"id": "bl-after", "topic": TOPIC, "delay_ms": 0, "body": "a",
             "callback": {"url": FAST.url("ok", "bl-after")}}])
    h.check(not FAST.wait_ids(["bl-after"], 30),
            "no callback after the backlog")
    again = h.metrics(NOTIFIER.addr).get("prophet_notifier_consumed_total",
                                         0)
    h.check(again < 100, "started again, it read %d messages: the backlog's "
            "offsets were not committed" % again)
    h.log("FIGURES backlog of %d messages read in %.1f s (%.0f/s); "
          "started again it read %d" % (n, took, n / took, again))


def signed_call(tid):
    submit([{"id": tid, "topic": TOPIC, "delay_ms": 0, "body": "s " + tid,
             "callback": {"url": FAST.url("ok", tid)}}])
    h.check(not FAST.wait_ids([tid], 30), "%s not called" % tid)
    return FAST.calls_of(tid)[0]


def test_signing_keys_rotated_on_reload():
    """The rotation of operations.md: the new key put first (both sign),
    receivers moved, the old key dropped; a bad file at a reload keeps
    the running keys."""
    global SIGNED_BY
    reloaded = len(NOTIFIER.grep("callback signing keys reloaded"))
    write_private(KEY_FILE, "%s %s\n" % (KEY2, KEY1))
    NOTIFIER.signal(signal.SIGHUP)
    h.wait_until(lambda: len(NOTIFIER.grep(
        "callback signing keys reloaded")) > reloaded, 10, 0.1,
        "the notifier's reload of the keys")
    SIGNED_BY = [KEY2, KEY1]
    p = h.Problems()
    c = signed_call("sig-both")
    sign_check(p, c, SIGNED_BY, "sig-both:%s" % c["headers"].get(
        "x-prophet-due-at"))
    p.raise_if_any("signed with both keys")

    # not a key: refused, the running keys kept
    failed = len(NOTIFIER.grep("callback signing keys not reloaded"))
    write_private(KEY_FILE, "whsec_not-a-key %s\n" % KEY2)
    NOTIFIER.signal(signal.SIGHUP)
    h.wait_until(lambda: len(NOTIFIER.grep(
        "callback signing keys not reloaded")) > failed, 10, 0.1,
        "the refused reload")
    line = NOTIFIER.grep("callback signing keys not reloaded")[-1]
    h.check("notifier.callback_signing_key_file" in line and
            "not base64" in line, "the refusal: %s" % line)
    c = signed_call("sig-kept")
    sign_check(p, c, SIGNED_BY, "sig-kept:%s" % c["headers"].get(
        "x-prophet-due-at"))
    p.raise_if_any("keys kept after a bad reload")

    # the old key dropped
    write_private(KEY_FILE, KEY2 + "\n")
    reloaded = len(NOTIFIER.grep("callback signing keys reloaded"))
    NOTIFIER.signal(signal.SIGHUP)
    h.wait_until(lambda: len(NOTIFIER.grep(
        "callback signing keys reloaded")) > reloaded, 10, 0.1,
        "the notifier's reload of the keys")
    SIGNED_BY = [KEY2]
    c = signed_call("sig-new")
    sign_check(p, c, SIGNED_BY, "sig-new:%s" % c["headers"].get(
        "x-prophet-due-at"))
    p.raise_if_any("signed with the new key only")
    for k in (KEY1, KEY2):
        h.check(not NOTIFIER.grep(k[len("whsec_"):][:16]),
                "a signing key is in the notifier's log")


def test_bad_signing_key_refused_at_start():
    """A key file others may read, a malformed key, a missing file: the
    notifier does not start, its message names the key and shows no key;
    --check-config finds the same."""
    p = h.Problems()
    loose = os.path.join(KEY_DIR, "loose.key")
    write_private(loose, KEY1 + "\n", mode=0o644)
    short = os.path.join(KEY_DIR, "short.key")
    write_private(short, "whsec_" + base64.b64encode(b"x" * 16).decode()
                  + "\n")
    cases = [(loose, "group or others"), (short, "16 bytes"),
             (os.path.join(KEY_DIR, "missing.key"), "missing.key")]
    for path, why in cases:
        for extra in ([], ["--check-config"]):
            try:
                r = subprocess.run(
                    [h.NOTIFIER_BIN, "-c", C.conf_path, "--set",
                     "notifier.callback_signing_key_file=" + path] + extra,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    timeout=30)
            except subprocess.TimeoutExpired:
                p.check(False, "%s %s: still running after 30 s"
                        % (path, extra))
                continue
            out = r.stdout.decode("utf-8", "replace")
            p.check(r.returncode != 0, "%s %s: exit %d" % (
                os.path.basename(path), extra, r.returncode))
            p.check("notifier.callback_signing_key_file" in out and
                    why in out, "%s %s: the message names the key and "
                    "%r: %s" % (os.path.basename(path), extra, why,
                                out[-400:]))
            p.check(KEY1[6:][:16] not in out, "%s %s: the key is shown"
                    % (os.path.basename(path), extra))
    p.raise_if_any("bad key files")


def test_graceful_stop():
    NOTIFIER.signal(15)
    rc = NOTIFIER.wait(30)
    h.check(rc == 0, "notifier exit code %r after SIGTERM" % rc)
    h.check(NOTIFIER.grep('msg="stopped"'), "no 'stopped' log line")


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)
    for e in (FAST, SLOW):
        if e is not None:
            e.close()
    shutil.rmtree(KEY_DIR, ignore_errors=True)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
