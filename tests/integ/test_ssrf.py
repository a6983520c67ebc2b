#!/usr/bin/python3
"""The notifier as an SSRF tool, and the other outside input it meets.

One isolated cluster (manager, worker, notifier) and HTTP sinks on
loopback: 127.0.0.1, 127.0.0.2 and [::1]. The notifier is restarted with
three configurations:
  A. the default: callbacks to loopback are refused, whatever the URL
     says (127.0.0.1, localhost, [::1], 127.1, 2130706433, 0.0.0.0,
     [::ffff:127.0.0.1], 169.254.169.254, the manager's own API): no
     request reaches a sink, the outcome is final (no retry), class
     "blocked", dead-lettered, counted;
  B. notifier.callback_networks_allowed = 127.0.0.2/32 and redirects on:
     127.0.0.2 is called, a redirect from it to 127.0.0.1, to localhost
     or to another scheme is refused; the manager's API stays refused
     even right after the notifier submitted a retry task to it (a pooled
     connection is checked again);
  C. 127.0.0.0/8 and ::1/128 allowed, notifier.max_timeout_ms 1500: the
     same URLs are called and the redirect followed; an endless answer is
     cut at notifier.max_response_bytes and its status decides; a task's
     longer timeout_ms is capped; notes are coarse classes, not the HTTP
     client's texts; framing headers are refused at submit (400,
     callback.headers) and dropped from messages produced straight to
     Kafka; bytes that are not UTF-8 in Kafka messages neither crash nor
     stall the notifier.
"""

import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

NOTIFIER_BIN = os.path.join(h.BUILDDIR, "prophet-notifier")
TOPIC = "ssrf"
RETRY_TOPIC = "prophet.callback-retry"
DEAD_TOPIC = "prophet.callback-dead"

C = None
NOTIFIER = None
DEAD = None      # KafkaReader of the dead-letter topic
SINK = None      # 127.0.0.1
SINK2 = None     # 127.0.0.2
SINK6 = None     # [::1]
SLOW_S = 4.0


class Sink:
    """A threaded HTTP server recording every request by id:
    /ok/<id>               200
    /fail/<id>             500
    /status/<code>/<id>    that status
    /redirect/<id>?to=URL  302 to URL
    /slow/<id>             200 after SLOW_S seconds
    /endless/<code>/<id>   that status, then a chunked body that never ends
                           (until the client goes away)
    """

    def __init__(self, host, family=socket.AF_INET):
        self.host = host
        self.calls = {}
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def answer(self, code, body=b"{}", extra=()):
                self.send_response(code)
                for k, v in extra:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.split("/")
                kind, tid = parts[1], parts[-1]
                call = {"ms": h.now_ms(), "method": self.command,
                        "headers": {k.lower(): v
                                    for k, v in self.headers.items()},
                        "body": body, "sent": 0}
                with sink.lock:
                    sink.calls.setdefault(tid, []).append(call)
                    sink.cond.notify_all()
                if kind == "ok":
                    self.answer(200)
                elif kind == "fail":
                    self.answer(500)
                elif kind == "status":
                    self.answer(int(parts[2]))
                elif kind == "redirect":
                    to = urllib.parse.parse_qs(url.query)["to"][0]
                    self.answer(302, extra=[("Location", to)])
                elif kind == "slow":
                    time.sleep(SLOW_S)
                    self.answer(200)
                elif kind == "endless":
                    self.endless(int(parts[2]), call)
                else:
                    self.answer(404)

            def endless(self, code, call):
                self.send_response(code)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b"x" * 16384
                frame = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                deadline = time.monotonic() + 60
                try:
                    while time.monotonic() < deadline:
                        self.wfile.write(frame)
                        call["sent"] += len(chunk)
                except OSError:
                    pass
                call["closed_ms"] = h.now_ms()
                self.close_connection = True

            do_POST = do_PUT = do_GET = do_DELETE = do_PATCH = handle_any

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            address_family = family

        self.server = Server((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       daemon=True)
        self.thread.start()

    def url(self, path, host=None):
        hp = host or (("[%s]" % self.host) if ":" in self.host
                      else self.host)
        return "http://%s:%d/%s" % (hp, self.port, path)

    def calls_of(self, tid):
        with self.lock:
            return list(self.calls.get(tid, []))

    def wait(self, tid, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not self.calls.get(tid) and time.monotonic() < deadline:
                self.cond.wait(0.2)
            return list(self.calls.get(tid, []))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------- helpers ---

def start_notifier(*sets):
    """(Re)starts the notifier with these --set overrides and waits until
    it consumes (a first callback, to a refused address, is recorded)."""
    global NOTIFIER
    if NOTIFIER is not None and NOTIFIER.running():
        h.check_eq(NOTIFIER.stop(), 0, "notifier exit code")
    argv = [NOTIFIER_BIN, "-c", C.conf_path,
            "--set", "kafka.consumer.session.timeout.ms=6000",
            "--set", "kafka.consumer.heartbeat.interval.ms=1000"]
    for s in sets:
        argv += ["--set", s]
    if NOTIFIER is None:
        NOTIFIER = h.Proc("notifier", argv,
                          os.path.join(C.dir, "notifier.log"))
        NOTIFIER.addr = C.notifier_addr
        C.workers.append(NOTIFIER)  # cleanup and log dumps include it
    NOTIFIER.argv = argv
    NOTIFIER.start()
    C._wait_http(NOTIFIER, NOTIFIER.addr, "/readyz", 60)
    warm = "warm-%d" % h.now_ms()
    submit([task(warm, "http://0.0.0.0:9/")])
    wait_status([warm], "failed", 60)


def task(tid, url, **cb):
    cb["url"] = url
    t = {"id": tid, "topic": TOPIC, "delay_ms": 0, "body": "b " + tid,
         "callback": cb}
    if "max_attempts" in cb:
        t["max_attempts"] = cb.pop("max_attempts")
    return t


def submit(tasks, want=201):
    api = C.api()
    try:
        r = api.post("/v1/tasks/batch", {"tasks": tasks})
        h.check(r.status == 200, "batch answered %s: %s"
                % (r.status, r.text[:300]))
        for t, res in zip(tasks, r.json["results"]):
            h.check(res.get("code") == want, "%s answered %r (want %d)"
                    % (t.get("id"), res, want))
        return r.json["results"]
    finally:
        api.close()


def wait_status(ids, status, timeout=30):
    q = ",".join("'%s'" % i for i in ids)

    def done():
        rows = C.mysql("SELECT COUNT(*) FROM tasks WHERE id IN (%s) AND "
                       "callback_status = '%s'" % (q, status))
        return int(rows[0][0]) == len(ids)
    h.wait_until(done, timeout, 0.2, "callback_status %s for %s"
                 % (status, ids))


def cb_log(tid):
    api = C.api()
    try:
        r = api.get("/v1/tasks/%s?log=1" % tid)
        h.check(r.status == 200, "GET %s: %s" % (tid, r.status))
        return [(e.get("to"), e.get("attempt"), e.get("note"))
                for e in r.json.get("log", []) if e.get("from") == "callback"]
    finally:
        api.close()


def task_exists(tid):
    api = C.api()
    try:
        return api.get("/v1/tasks/" + tid).status == 200
    finally:
        api.close()


def retries_of(tid):
    return int(C.mysql("SELECT COUNT(*) FROM tasks WHERE id LIKE 'cbr:%s:%%'"
                       % tid)[0][0])


def metrics():
    return h.metrics(NOTIFIER.addr, labelled=True)


def produce(topic, value, headers, key=b"k"):
    """One message straight into a Kafka topic (bytes allowed)."""
    argv = [b"kcat", b"-P", b"-b", C.brokers.encode(), b"-t",
            topic.encode(), b"-k", key]
    for k, v in headers:
        argv += [b"-H", k.encode() + b"=" + (v if isinstance(v, bytes)
                                             else v.encode())]
    p = subprocess.run(argv, input=value + b"\n", capture_output=True,
                       timeout=60)
    h.check_eq(p.returncode, 0, "kcat produce: %r" % p.stderr)


def check_blocked(p, tid, sinks):
    """tid was refused before any request: final, class blocked."""
    for s in sinks:
        p.check(not s.calls_of(tid), "%s reached %s:%d" % (tid, s.host,
                                                           s.port))
    log = cb_log(tid)
    p.check(len(log) == 1 and log[0][0] == "failed" and
            (log[0][2] or "").startswith("blocked"),
            "%s callback log %r" % (tid, log))
    p.check(retries_of(tid) == 0, "%s got a retry task" % tid)
    dl = DEAD.by_id.get(tid, [])
    p.check(len(dl) == 1 and dl[0].hdr.get("prophet-callback-class") ==
            "blocked", "%s dead letter %r" % (tid, [m.hdr for m in dl]))


# ----------------------------------------------------------------- setup ---

def setup():
    global C, DEAD, SINK, SINK2, SINK6
    SINK = Sink("127.0.0.1")
    SINK2 = Sink("127.0.0.2")
    SINK6 = Sink("::1", socket.AF_INET6)
    port = h.free_port()
    C = h.Cluster(workers=1, name="ssrf", conf={
        "notifier.topics": TOPIC,
        "notifier.http_listen": "127.0.0.1:%d" % port,
        "notifier.backoff_base_ms": 200,
        "notifier.max_attempts": 3,
        "log.level": "info",
    })
    C.open()
    C.notifier_addr = "127.0.0.1:%d" % port
    C.notifier_conf()
    h.create_topics(C.brokers, [C.topic(t) for t in
                                (TOPIC, RETRY_TOPIC, DEAD_TOPIC)])
    DEAD = C.reader([DEAD_TOPIC])
    C.start_manager()
    C.start_worker(0)
    start_notifier()


def manager_task(tid):
    """A callback that, if made, submits task tid to the manager."""
    return {"url": "http://%s/v1/tasks" % C.manager_addr, "method": "POST",
            "headers": {"Content-Type": "application/json"}}, json.dumps(
        {"id": tid, "topic": TOPIC, "body": "made by a callback",
         "delay_ms": 3600000})


# ---------------------------------------------------- A: default config ---

def test_loopback_refused_by_default():
    P, P6 = SINK.port, SINK6.port
    urls = {
        "a-addr": "http://127.0.0.1:%d/ok/a-addr" % P,
        "a-name": "http://localhost:%d/ok/a-name" % P,
        "a-v6": "http://[::1]:%d/ok/a-v6" % P6,
        "a-short": "http://127.1:%d/ok/a-short" % P,
        "a-decimal": "http://2130706433:%d/ok/a-decimal" % P,
        "a-zero": "http://0.0.0.0:%d/ok/a-zero" % P,
        "a-mapped": "http://[::ffff:127.0.0.1]:%d/ok/a-mapped" % P,
        "a-userinfo": "http://user@127.0.0.1:%d/ok/a-userinfo" % P,
        "a-meta": "http://169.254.169.254/latest/meta-data/",
    }
    tasks = [task(tid, u, max_attempts=3) for tid, u in urls.items()]
    cb, body = manager_task("made-by-callback-a")
    tasks.append({"id": "a-api", "topic": TOPIC, "delay_ms": 0,
                  "body": body, "callback": cb})
    before = metrics()
    t0 = time.monotonic()
    submit(tasks)
    ids = [t["id"] for t in tasks]
    wait_status(ids, "failed", 30)
    took = time.monotonic() - t0
    missing = DEAD.wait_for(ids, 20)
    h.check(not missing, "not dead-lettered: %s" % missing)
    p = h.Problems()
    for tid in ids:
        check_blocked(p, tid, (SINK, SINK2, SINK6))
    p.check(not task_exists("made-by-callback-a"),
            "the callback submitted a task to the manager's API")
    after = metrics()
    blocked = after.get("prophet_callbacks_blocked_total", 0) - \
        before.get("prophet_callbacks_blocked_total", 0)
    p.check(blocked == len(ids), "prophet_callbacks_blocked_total grew by "
            "%d, want %d" % (blocked, len(ids)))
    p.check(after.get('prophet_callback_outcomes_total{class="blocked"}', 0)
            >= len(ids), "outcomes{class=blocked} %r"
            % after.get('prophet_callback_outcomes_total{class="blocked"}'))
    p.check(NOTIFIER.grep("callback blocked"),
            "no 'callback blocked' log line")
    p.raise_if_any("refused by default")
    h.log("%d callbacks to loopback and link-local refused, none reached a "
          "sink, recorded failed in %.1f s (no connect timeouts)"
          % (len(ids), took))


# ---------------------------------------- B: 127.0.0.2 only, redirects ---

def test_redirect_out_of_the_allowed_network_refused():
    start_notifier("notifier.callback_networks_allowed=127.0.0.2/32",
                   "notifier.max_redirects=3")
    to = {
        "b-addr": "http://127.0.0.1:%d/ok/b-addr" % SINK.port,
        "b-name": "http://localhost:%d/ok/b-name" % SINK.port,
        "b-v6": "http://[::1]:%d/ok/b-v6" % SINK6.port,
        "b-scheme": "ftp://127.0.0.2:%d/b-scheme" % SINK2.port,
    }
    tasks = [task("b-ok", SINK2.url("ok/b-ok"))]
    tasks += [task(tid, SINK2.url("redirect/%s?to=%s"
                                  % (tid, urllib.parse.quote(u, safe=""))))
              for tid, u in to.items()]
    submit(tasks)
    wait_status(["b-ok"], "ok")
    wait_status(list(to), "failed")
    h.check(not DEAD.wait_for(list(to), 20), "not all dead-lettered")
    p = h.Problems()
    p.check(len(SINK2.calls_of("b-ok")) == 1, "127.0.0.2 not called once")
    for tid in to:
        p.check(len(SINK2.calls_of(tid)) == 1,
                "%s: the redirecting sink saw %d calls"
                % (tid, len(SINK2.calls_of(tid))))
        check_blocked(p, tid, (SINK, SINK6))
    p.raise_if_any("redirects")


def test_pooled_connection_to_the_manager_not_reused():
    """The notifier's own requests to the manager (retry tasks) are not
    guarded and their connection is pooled: a callback to the manager's
    address right after must still be refused."""
    submit([task("b-retry", SINK2.url("fail/b-retry"), max_attempts=2)])
    h.wait_until(lambda: retries_of("b-retry") == 1, 20, 0.05,
                 "the retry task of b-retry")
    cb, body = manager_task("made-by-callback-b")
    submit([{"id": "b-api", "topic": TOPIC, "delay_ms": 0, "body": body,
             "callback": cb}])
    wait_status(["b-api"], "failed")
    h.check(not DEAD.wait_for(["b-api"], 20), "b-api not dead-lettered")
    p = h.Problems()
    check_blocked(p, "b-api", ())
    p.check(not task_exists("made-by-callback-b"),
            "the callback submitted a task to the manager's API")
    p.raise_if_any("pooled manager connection")
    wait_status(["b-retry"], "failed")  # the retry still works
    h.check_eq(len(SINK2.calls_of("b-retry")), 2, "b-retry attempts")


# --------------------------------------------- C: loopback allowed, caps ---

def test_allowed_networks_open_loopback():
    start_notifier("notifier.callback_networks_allowed=127.0.0.0/8, ::1/128",
                   "notifier.max_redirects=3", "notifier.timeout_ms=1000",
                   "notifier.max_timeout_ms=1500")
    P = SINK.port
    urls = {
        "c-addr": "http://127.0.0.1:%d/ok/c-addr" % P,
        "c-name": "http://localhost:%d/ok/c-name" % P,
        "c-v6": "http://[::1]:%d/ok/c-v6" % SINK6.port,
        "c-short": "http://127.1:%d/ok/c-short" % P,
        "c-decimal": "http://2130706433:%d/ok/c-decimal" % P,
        "c-mapped": "http://[::ffff:127.0.0.1]:%d/ok/c-mapped" % P,
        "c-redirect": SINK2.url("redirect/c-redirect?to=%s" % urllib.parse
                                .quote("http://127.0.0.1:%d/ok/c-redirect"
                                       % P, safe="")),
    }
    tasks = [task(tid, u) for tid, u in urls.items()]
    tasks.append(task("c-zero", "http://0.0.0.0:%d/ok/c-zero" % P))
    cb, body = manager_task("made-by-callback-c")
    tasks.append({"id": "c-api", "topic": TOPIC, "delay_ms": 0,
                  "body": body, "callback": cb})
    submit(tasks)
    wait_status(list(urls) + ["c-api"], "ok")
    wait_status(["c-zero"], "failed")
    p = h.Problems()
    for tid in urls:
        sink = SINK6 if tid == "c-v6" else SINK
        p.check(len(sink.calls_of(tid)) == 1, "%s called %d times"
                % (tid, len(sink.calls_of(tid))))
        log = cb_log(tid)
        p.check(log == [("ok", 1, "ok: HTTP 200")], "%s log %r" % (tid, log))
    p.check(task_exists("made-by-callback-c"),
            "allowed: the manager's API was not called")
    # 0.0.0.0/8 is not in the list
    check_blocked(p, "c-zero", (SINK,))
    p.raise_if_any("allowed networks")


def test_answer_capped_at_max_response_bytes():
    before = metrics()
    submit([task("c-big", SINK.url("endless/200/c-big"), timeout_ms=1500,
                 max_attempts=1),
            task("c-big5", SINK.url("endless/503/c-big5"), timeout_ms=1500,
                 max_attempts=1)])
    wait_status(["c-big"], "ok", 20)
    wait_status(["c-big5"], "failed", 20)
    time.sleep(0.5)
    p = h.Problems()
    p.check(cb_log("c-big") == [("ok", 1, "ok: HTTP 200")],
            "c-big log %r" % cb_log("c-big"))
    p.check(cb_log("c-big5") == [("failed", 1, "http_5xx: HTTP 503")],
            "c-big5 log %r" % cb_log("c-big5"))
    for tid in ("c-big", "c-big5"):
        c = SINK.calls_of(tid)
        p.check(len(c) == 1 and "closed_ms" in c[0],
                "%s: the notifier kept reading (%r)" % (tid, c))
        if c and "closed_ms" in c[0]:
            h.log("%s: connection closed by the notifier %d ms after the "
                  "call, %d KiB sent (socket buffers included)"
                  % (tid, c[0]["closed_ms"] - c[0]["ms"],
                     c[0]["sent"] // 1024))
            p.check(c[0]["closed_ms"] - c[0]["ms"] < 1400,
                    "%s: cut after %d ms, not at the cap"
                    % (tid, c[0]["closed_ms"] - c[0]["ms"]))
    grew = metrics().get("prophet_callback_answers_capped_total", 0) - \
        before.get("prophet_callback_answers_capped_total", 0)
    p.check(grew == 2, "prophet_callback_answers_capped_total grew by %d"
            % grew)
    p.raise_if_any("capped answers")


def test_timeout_capped_at_max_timeout_ms():
    # SLOW_S (4 s) answers: a task asking for 20 s gets 1.5 s
    # (notifier.max_timeout_ms); one asking for less keeps its own.
    submit([task("c-slow", SINK.url("slow/c-slow"), timeout_ms=20000,
                 max_attempts=1),
            task("c-own", SINK2.url("slow/c-own"), timeout_ms=1200,
                 max_attempts=1)])
    wait_status(["c-slow", "c-own"], "failed", 20)
    h.check(not DEAD.wait_for(["c-slow", "c-own"], 10), "not dead-lettered")
    p = h.Problems()
    for tid, sink, limit in (("c-slow", SINK, 1500), ("c-own", SINK2, 1200)):
        log = cb_log(tid)
        p.check(log == [("failed", 1, "timeout")], "%s log %r" % (tid, log))
        calls = sink.calls_of(tid)
        dl = DEAD.by_id[tid][0]
        gave_up = int(dl.hdr["prophet-dead-at"]) - calls[0]["ms"]
        h.log("%s: timeout_ms %s, given up %d ms after the call reached "
              "the sink" % (tid, limit, gave_up))
        p.check(limit - 300 <= gave_up < limit + 1000,
                "%s given up after %d ms (limit %d)" % (tid, gave_up, limit))
    p.raise_if_any("capped timeout")


def test_notes_are_classes_not_client_texts():
    closed = h.free_port()
    submit([task("c-refused", "http://127.0.0.1:%d/x" % closed,
                 max_attempts=1),
            task("c-404", SINK.url("status/404/c-404"), max_attempts=1),
            task("c-302", SINK.url("redirect/c-302?to=ftp%3A%2F%2Fx%2F"),
                 max_attempts=1)])
    wait_status(["c-refused", "c-404", "c-302"], "failed")
    h.check(not DEAD.wait_for(["c-refused", "c-404", "c-302"], 10),
            "not dead-lettered")
    p = h.Problems()
    for tid, note in (("c-refused", "refused"), ("c-404", "http_4xx: HTTP 404"),
                      ("c-302", "blocked")):
        log = cb_log(tid)
        p.check(log == [("failed", 1, note)], "%s log %r" % (tid, log))
        dl = DEAD.by_id[tid][0].hdr
        p.check(dl.get("prophet-callback-error") == note and
                dl.get("prophet-callback-class") == note.split(":")[0],
                "%s dead letter %r" % (tid, dl))
    # the operator's log keeps the details
    p.check([line for line in NOTIFIER.grep("c-refused")
             if "detail=" in line and str(closed) in line],
            "no detail for the operator in the log")
    p.raise_if_any("outcome classes")


def test_unusable_url_refused_at_submit():
    """A callback URL the notifier's libcurl cannot use (a port out of
    range or 0, no host) is refused at submit, not accepted and failed on
    every attempt once due."""
    api = C.api()
    try:
        p = h.Problems()
        for url in ("http://127.0.0.1:99999/x", "http://127.0.0.1:0/x",
                    "http://:8080/x", "https://[::1/x",
                    "http://example.com:-1/"):
            r = api.post("/v1/tasks", task("url-x", url))
            err = (r.json or {}).get("error", {})
            p.check(r.status == 400 and err.get("field") == "callback.url",
                    "%r: %s %s" % (url, r.status, r.text[:200]))
        p.check(not task_exists("url-x"), "url-x stored")
        p.raise_if_any("unusable callback URLs at submit")
    finally:
        api.close()


def test_framing_headers_refused_at_submit():
    api = C.api()
    try:
        p = h.Problems()
        for hdrs in ({"Host": "internal.example"}, {"Content-Length": "0"},
                     {"Transfer-Encoding": "chunked"},
                     {"Connection": "close"}, {"Expect": "100-continue"},
                     {"Proxy-Authorization": "Basic eA=="},
                     {"X-Ok": "a\r\nInjected: 1"}, {"Bad Name": "v"},
                     {"X-Nul": "a\u0000b"}):
            t = task("hdr-x", SINK.url("ok/hdr-x"), headers=hdrs)
            r = api.post("/v1/tasks", t)
            err = (r.json or {}).get("error", {})
            p.check(r.status == 400 and err.get("field") ==
                    "callback.headers", "%r: %s %s" % (hdrs, r.status,
                                                      r.text[:200]))
            r = api.post("/v1/tasks/batch", {"tasks": [t]})
            res = (r.json or {}).get("results", [{}])[0]
            p.check(res.get("code") == 400 and res.get("error", {})
                    .get("field") == "callback.headers",
                    "batch %r: %r" % (hdrs, res))
        p.check(not task_exists("hdr-x"), "hdr-x stored")
        r = api.post("/v1/tasks", task("hdr-ok", SINK.url("ok/hdr-ok"),
                                       headers={"Authorization": "Bearer t",
                                                "X-Tab": "a\tb"}))
        p.check(r.status == 201, "fine headers: %s %s" % (r.status,
                                                          r.text[:200]))
        p.raise_if_any("framing headers at submit")
    finally:
        api.close()
    wait_status(["hdr-ok"], "ok")
    hd = SINK.calls_of("hdr-ok")[0]["headers"]
    h.check(hd.get("authorization") == "Bearer t" and
            hd.get("x-tab") == "a\tb", "headers sent: %r" % hd)


def test_framing_headers_dropped_from_kafka_messages():
    """A message produced straight to Kafka (or a task stored before the
    API refused them) still carries them: the notifier leaves them out."""
    before = metrics().get("prophet_callback_headers_dropped_total", 0)
    spec = {"url": SINK.url("ok/k-hdr"), "headers": {
        "Host": "internal.example", "X-Keep": "1",
        "Transfer-Encoding": "chunked", "Connection": "Upgrade"}}
    produce(C.topic(TOPIC), b"kafka body", [
        ("prophet-id", "k-hdr"), ("prophet-due-at", str(h.now_ms())),
        ("prophet-callback", json.dumps(spec))])
    calls = SINK.wait("k-hdr", 20)
    h.check(calls, "k-hdr not called")
    hd = calls[0]["headers"]
    p = h.Problems()
    p.check(hd.get("host") == "127.0.0.1:%d" % SINK.port, "Host %r"
            % hd.get("host"))
    p.check(hd.get("x-keep") == "1", "X-Keep %r" % hd.get("x-keep"))
    p.check("transfer-encoding" not in hd, "Transfer-Encoding sent")
    p.check(hd.get("connection", "").lower() != "upgrade",
            "Connection %r" % hd.get("connection"))
    p.check(calls[0]["body"] == b"kafka body", "body %r" % calls[0]["body"])
    grew = metrics().get("prophet_callback_headers_dropped_total", 0) - \
        before
    p.check(grew == 3, "prophet_callback_headers_dropped_total grew by %d"
            % grew)
    p.check(NOTIFIER.grep("callback headers not allowed are left out"),
            "no log line for the dropped headers")
    p.raise_if_any("headers dropped by the notifier")


def test_bytes_not_utf8_in_kafka_messages():
    """Headers, bodies and retry headers that are not UTF-8: skipped or
    given up with a note, and the notifier goes on."""
    before = metrics()
    now = str(h.now_ms()).encode()
    good = json.dumps({"url": SINK.url("fail/u-body"),
                       "max_attempts": 2}).encode()
    # a callback header that is not JSON text
    produce(C.topic(TOPIC), b"x", [("prophet-id", b"u-spec"),
                                   ("prophet-due-at", now),
                                   ("prophet-callback",
                                    b'{"url":"http://127.0.0.1/\xff\xfe"}')])
    # a body that cannot travel in a retry task (JSON text)
    produce(C.topic(TOPIC), b"\xff\xfe\x80 not text", [
        ("prophet-id", b"u-body"), ("prophet-due-at", now),
        ("prophet-callback", good)])
    # a key and a header value that are not UTF-8 on an unsigned retry
    produce(C.topic(RETRY_TOPIC), b"x", [
        ("prophet-id", b"cbr:u-retry:2"), ("callback-of", b"u-retry"),
        ("callback-attempt", b"2"), ("callback-topic", b"\xc3\x28"),
        ("prophet-callback", good)], key=b"\xff")
    # (its dead letter's body is not text either: kcat -J cannot show it;
    # the outcome is in the task log)
    rows = h.wait_until(lambda: C.mysql(
        "SELECT to_status, attempt, note FROM task_log WHERE task_id = "
        "'u-body' AND from_status = 'callback'"), 30, 0.2,
        "the outcome of u-body")
    p = h.Problems()
    p.check(rows == [["failed", "1", "http_5xx: HTTP 500; body is not "
                      "UTF-8 text, cannot retry"]], "u-body log %r" % rows)
    p.check(len(SINK.calls_of("u-body")) == 1, "u-body calls %d"
            % len(SINK.calls_of("u-body")))
    p.check(NOTIFIER.running(), "the notifier exited")
    p.check(not SINK.calls_of("u-retry"), "the unsigned retry was called")
    after = metrics()
    for name, want in (("prophet_notifier_skipped_total", 1),
                       ("prophet_notifier_forged_retries_total", 1)):
        p.check(after.get(name, 0) - before.get(name, 0) == want,
                "%s grew by %d, want %d"
                % (name, after.get(name, 0) - before.get(name, 0), want))
    p.raise_if_any("bytes that are not UTF-8")
    submit([task("u-after", SINK.url("ok/u-after"))])
    wait_status(["u-after"], "ok")


def test_route_url_must_be_text():
    p = subprocess.run([NOTIFIER_BIN.encode(), b"-c", C.conf_path.encode(),
                        b"--set", b"notifier.routes.x=http://h/\xff"],
                       capture_output=True, timeout=30)
    h.check(p.returncode != 0, "started with a route URL that is not text")
    h.check(b"notifier.routes.x" in p.stderr, "error does not name the "
            "key: %r" % p.stderr[-300:])


def test_bad_config_refused_with_key():
    for sets, key in (
            (["notifier.callback_networks_allowed=localhost"],
             "notifier.callback_networks_allowed"),
            (["notifier.timeout_ms=5000", "notifier.max_timeout_ms=4000"],
             "notifier.max_timeout_ms")):
        argv = [NOTIFIER_BIN, "-c", C.conf_path, "--check-config"]
        for s in sets:
            argv += ["--set", s]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        h.check(p.returncode != 0, "%s accepted" % sets)
        h.check(key in p.stderr, "error %r does not name %s"
                % (p.stderr.strip(), key))


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)
    for s in (SINK, SINK2, SINK6):
        if s is not None:
            s.close()


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
