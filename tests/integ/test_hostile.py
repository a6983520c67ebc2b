#!/usr/bin/python3
"""Hostile input against the manager: every request gets a 4xx (never a
crash, a hang or a stored change), and the server stays healthy for the
honest client next to it."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
API = None
LIMIT = 64
BODY_MEMORY = 3000000  # bytes of request bodies held at once


def setup():
    global C, API
    C = h.Cluster(workers=0, name="hostile",
                  conf={"http.timeout_s": 2,
                        "http.max_connections": LIMIT,
                        "http.max_body_memory_bytes": BODY_MEMORY}).open()
    C.start_manager()
    API = C.api()


def raw(data, read=True, timeout=10):
    host, port = C.manager_addr.split(":")
    s = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before we were done
        if not read:
            return b""
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out and b"Content-Length" not in out:
                break
        return out
    finally:
        s.close()


def status_of(resp):
    line = resp.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 else 0


def post(path, body, ctype="application/json"):
    return API.request("POST", path, body, headers={"Content-Type": ctype})


def test_json_attacks():
    cases = [
        (b"[" * 100000, 400),
        (b'{"a":' * 50000 + b"1" + b"}" * 50000, 400),
        (b'{"topic":"t","body":"b","delay_ms":1e300}', 400),
        (b'{"topic":"t","body":"b","delay_ms":99999999999999999999999}',
         400),
        (b'{"topic":"t","body":"b","due_at":-1}', 400),
        (b'{"topic":"t\x00x","body":"b","delay_ms":1}', 400),
        (b'{"topic":"t","body":"b\x00","delay_ms":1}', 400),
        (b'{"topic":"t","body":"\\ud800","delay_ms":1}', 400),
        (b"\xef\xbb\xbf{}", 400),
        (b'{"topic":"t","body":"' + b"x" * 70000 + b'","delay_ms":1}', 413),
        (b'{"topic":"t","body":"b","delay_ms":1,"headers":{' +
         b",".join(b'"h%d":"v"' % i for i in range(100)) + b"}}", 400),
    ]
    for body, want in cases:
        r = post("/v1/tasks", body)
        h.check_eq(r.status, want, "POST %r..." % body[:50])
        h.check("error" in (r.json or {}), "JSON error for %r" % body[:50])


def test_wrong_content_type_and_method():
    r = post("/v1/tasks", "topic=t&body=b", "application/x-www-form-urlencoded")
    h.check_eq(r.status, 415, "form body")
    r = post("/v1/tasks", json.dumps({"topic": "t", "body": "b",
                                      "delay_ms": 1}), "text/xml")
    h.check_eq(r.status, 415, "xml content type")
    h.check_eq(API.request("PUT", "/v1/tasks").status, 405, "PUT")
    h.check_eq(API.get("/v1/../../etc/passwd").status, 404, "path games")
    h.check_eq(API.get("/%00").status, 404, "NUL in the path")


def test_ten_megabyte_body():
    body = b'{"topic":"t","body":"' + b"x" * (10 << 20) + b'"}'
    resp = raw(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: "
               b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
               + body)
    h.check_eq(status_of(resp), 413, "10 MB body: %r" % resp[:80])


def test_header_flood():
    hdrs = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(400))
    resp = raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + hdrs + b"\r\n")
    h.check(400 <= status_of(resp) < 500 or resp == b"",
            "40 KB of headers: %r" % resp[:80])


def test_slowloris_does_not_starve_others():
    stop = threading.Event()
    socks = []

    def slow():
        host, port = C.manager_addr.split(":")
        s = socket.create_connection((host, int(port)), timeout=10)
        socks.append(s)
        s.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n")
        while not stop.is_set():
            try:
                s.sendall(b"X-A: b\r\n")
            except OSError:
                return
            time.sleep(0.5)
    ths = [threading.Thread(target=slow, daemon=True) for _ in range(40)]
    for t in ths:
        t.start()
    time.sleep(1)
    t0 = time.monotonic()
    for i in range(20):
        r = API.post("/v1/tasks", {"topic": "t", "body": "honest %d" % i,
                                   "delay_ms": 3600000})
        h.check_eq(r.status, 201, "honest client among slowloris")
    took = time.monotonic() - t0
    h.check(took < 5, "20 honest submissions took %.1fs" % took)
    stop.set()
    for s in socks:
        s.close()
    # An idle half-request is cut by http.timeout_s (2 s).
    host, port = C.manager_addr.split(":")
    s = socket.create_connection((host, int(port)), timeout=6)
    s.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n")
    t0 = time.monotonic()
    try:
        while s.recv(1024):
            pass
    except socket.timeout:
        h.check(False, "an idle half-request was not cut within 6 s")
    finally:
        s.close()
    h.check(time.monotonic() - t0 < 5, "idle connection cut late")


def hold(n, stop, socks):
    """n connections each sending a header line every 0.5 s (never done,
    never idle long enough for the request timeout)."""
    host, port = C.manager_addr.split(":")

    def one():
        s = socket.create_connection((host, int(port)), timeout=10)
        socks.append(s)
        try:
            s.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n")
            while not stop.is_set():
                s.sendall(b"X-A: b\r\n")
                time.sleep(0.5)
        except OSError:
            pass
    ths = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in ths:
        t.start()
    return ths


def metric(name):
    return h.metrics(C.manager_addr).get(name)


def test_connection_limit():
    """More slow clients than the connection limit: a normal client is
    still served, because the connections slowest to send their request
    make room (each told 408 first)."""
    paused0 = metric("prophet_http_accept_paused_total")
    evicted0 = metric("prophet_http_evicted_total")
    h.check(paused0 is not None, "prophet_http_accept_paused_total exported")
    stop = threading.Event()
    socks = []
    hold(LIMIT + 16, stop, socks)  # more than the limit
    time.sleep(1.0)
    t0 = time.monotonic()
    for i in range(5):
        host, port = C.manager_addr.split(":")
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            resp = s.recv(1024)
        except socket.timeout:
            resp = b""
        s.close()
        h.check_eq(status_of(resp), 200,
                   "client %d beside %d slow ones: %r" % (i, LIMIT + 16,
                                                          resp[:60]))
    took = time.monotonic() - t0
    h.check(took < 4, "5 normal clients at the limit took %.1fs" % took)
    stop.set()
    for held in socks:
        held.close()
    time.sleep(1)
    h.check(metric("prophet_http_accept_paused_total") > paused0,
            "the limit was counted in prophet_http_accept_paused_total")
    h.check(metric("prophet_http_evicted_total") > evicted0,
            "slow connections evicted (prophet_http_evicted_total)")
    h.check_eq(API.get("/healthz").status, 200, "healthy after the limit")
    # Closed connections are swept within a second; the refused ones
    # linger up to 2 s for their client to read the answer.
    h.wait_until(lambda: (metric("prophet_http_connections") or 99) <= 3, 5,
                 what="open connections back down after release")


def body_of(resp):
    return resp.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in resp else b""


def json_error(resp, status, code=None, what=""):
    """A raw answer: the status, application/json, the contract's error."""
    h.check_eq(status_of(resp), status, "%s: %r" % (what, resp[:120]))
    head = resp.split(b"\r\n\r\n", 1)[0].lower()
    h.check(b"content-type: application/json" in head,
            "%s: not JSON: %r" % (what, resp[:200]))
    try:
        j = json.loads(body_of(resp))
    except ValueError:
        raise h.TestFailure("%s: body is not JSON: %r" % (what, resp[:300]))
    h.check(isinstance(j.get("error"), dict), "%s: %r" % (what, j))
    if code is not None:
        h.check_eq(j["error"].get("code"), code, what + " code")
    return j


def test_protocol_errors_are_json():
    """What libevent would refuse with its HTML page gets the contract's
    JSON error, from the gate, before any body is read."""
    cases = [
        (b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n", 400,
         "bad_request", "non-ASCII bytes in the path (the old crash)"),
        (b"GET /v1/tasks?topic=\xc3 HTTP/1.1\r\nHost: x\r\n\r\n", 400,
         "bad_request", "non-ASCII bytes in the query"),
        (b"GARBAGE\r\n\r\n", 400, "bad_request", "no request line"),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505,
         "http_version_not_supported", "HTTP/2.0"),
        (b"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n", 501,
         "not_implemented", "unknown method"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
         400, "bad_request", "space in a header name"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
         400, "bad_request", "folded header"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
         400, "bad_request", "NUL in a header value"),
        (b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n", 400,
         "bad_request", "two Content-Lengths"),
        (b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
         411, "length_required", "chunked body"),
        (b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nExpect: tea\r\n"
         b"Content-Length: 2\r\n\r\n{}", 417, "expectation_failed",
         "odd Expect"),
        (b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
         b"\r\nabc", 400, "bad_request", "HEAD with a body"),
        (b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: "
         b"application/json\r\nContent-Length: 99999999999\r\n\r\n",
         413, "too_large", "a huge Content-Length, no body sent"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" +
         b"X-Big: " + b"v" * 20000 + b"\r\n\r\n", 431,
         "headers_too_large", "a 20 KB header"),
    ]
    for req, status, code, what in cases:
        json_error(raw(req), status, code, what)
    h.check_eq(API.get("/healthz").status, 200, "healthy after them")


def test_non_utf8_and_multibyte_names():
    """Error messages that quote client bytes stay valid JSON: names cut by
    a fixed-size buffer at every boundary, undecodable percent escapes."""
    for n in range(1, 140, 7):
        name = "\u00e9" * n + "\U0001f680"
        body = json.dumps({"topic": "t", "body": "b", "delay_ms": 1,
                           name: 1}, ensure_ascii=False).encode()
        r = post("/v1/tasks", body)
        h.check_eq(r.status, 400, "unknown field of %d chars" % n)
        h.check(r.json is not None and r.json["error"]["code"] ==
                "unknown_field", "unknown_field: %r" % (r.json,))
    r = post("/v1/tasks", json.dumps(
        {"topic": "t", "body": "b", "delay_ms": 1,
         "headers": {"\u00fc" * 200: "v"}}, ensure_ascii=False).encode())
    h.check_eq(r.status, 400, "a 400-byte header name")
    r = post("/v1/tasks", json.dumps(
        {"topic": "t", "body": "b", "cron": "* * * * *",
         "timezone": "\u00e9" * 300}, ensure_ascii=False).encode())
    h.check_eq(r.status, 400, "a multi-byte time zone name")
    h.check(r.json and r.json["error"].get("field") == "timezone",
            "timezone error: %r" % (r.json,))
    r = post("/v1/tasks", json.dumps(
        {"topic": "t", "body": "honest cb", "delay_ms": 3600000,
         "callback": {"url": "http://" + "\u00e9" * 300 + "/x"}},
        ensure_ascii=False).encode())
    h.check(r.status in (201, 400) and r.json is not None,
            "a multi-byte callback host: %r" % (r,))
    for path in ("/v1/tasks/%ff%fe", "/v1/tasks/%c3", "/v1/tasks?topic=%ff",
                 "/v1/tasks?status=%e6%97", "/v1/admin/restore/%ff",
                 "/delete?jobId=%ff%fe", "/reStoreJob?jobId=%c3%a9",
                 "/console/%ff", "/nowhere/%ff%fe%c3"):
        r = API.get(path)
        h.check(400 <= r.status < 500 or (r.status == 200 and path[1] in
                                          "dr"),
                "%s -> %r" % (path, r))
        h.check(r.json is not None, "%s: JSON answer: %r" % (path, r))
    h.check(C.manager.running(), "manager still running")


def trickle(start, piece, every):
    """Sends start, then piece every `every` s until the server answers
    or closes; returns (what it answered, seconds until then)."""
    host, port = C.manager_addr.split(":")
    s = socket.create_connection((host, int(port)), timeout=8)
    t0 = time.monotonic()
    s.sendall(start)
    got = b""
    try:
        while time.monotonic() - t0 < 7:
            try:
                s.sendall(piece)
            except OSError:
                break
            s.settimeout(every)
            try:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            except socket.timeout:
                pass
    finally:
        s.close()
    return got, time.monotonic() - t0


def test_trickling_client_is_cut():
    """A client sending a header line every 0.5 s never goes idle, but its
    request may take http.timeout_s (2 s) in all: then 408, closed. The
    same for a body sent a byte at a time."""
    got, took = trickle(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n",
                        b"X-A: b\r\n", 0.5)
    json_error(got, 408, "timeout", "trickled headers")
    h.check(1.5 < took < 4.5, "cut after %.1fs (timeout_s 2)" % took)
    got, took = trickle(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Type: application/json\r\n"
                        b"Content-Length: 1000\r\n\r\n", b" ", 0.3)
    json_error(got, 408, "timeout", "trickled body")
    h.check(1.5 < took < 4.5, "body cut after %.1fs" % took)


def test_body_memory_bounded():
    """Bodies being received are bounded in all: clients that declare
    large bodies and send them slowly cannot make the server hold more
    than http.max_body_memory_bytes; the next one gets 503 before its
    body, and once they are gone bodies are taken again."""
    host, port = C.manager_addr.split(":")
    head = (b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b"application/json\r\nContent-Length: 1400000\r\n\r\n")
    holders = []
    for _ in range(2):  # 2.8 MB of the 3 MB reserved
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(head + b"{")
        holders.append(s)
    time.sleep(0.3)
    resp = raw(head, timeout=5)
    json_error(resp, 503, "busy", "a third 1.4 MB body beyond 3 MB")
    r = post("/v1/tasks", json.dumps({"topic": "t", "body": "honest small",
                                      "delay_ms": 3600000}))
    h.check_eq(r.status, 201, "a small body still fits")
    for s in holders:
        s.close()
    time.sleep(0.5)
    resp = raw(head + b"{" + b" " * 1399998 + b"}", timeout=10)
    h.check(status_of(resp) == 400, "the budget is free again (400 for "
            "the empty object, not 503): %r" % resp[:100])


def test_pipelined_requests():
    """Requests sent back to back on one connection are answered in order;
    a bad one behind a good one is refused after the good one's answer."""
    task = json.dumps({"topic": "t", "body": "honest pipe", "id": "pipe-1",
                       "delay_ms": 3600000}).encode()
    one = (b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: "
           b"application/json\r\nContent-Length: %d\r\n\r\n" % len(task)
           + task)
    two = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    # A HEAD answer has the length of its body but not the body (evhttp
    # 2.1 would send it, and the next answer would be misread).
    head = b"HEAD /v1/tasks/pipe-1 HTTP/1.1\r\nHost: x\r\n\r\n"
    bad = b"GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n"
    host, port = C.manager_addr.split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(one + head + two + bad)
    got = b""
    try:
        while got.count(b"HTTP/1.1 ") < 4:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except socket.timeout:
        pass
    s.close()
    codes = [int(x.split(b" ")[1]) for x in got.split(b"HTTP/1.1 ")[1:]
             for x in [b"HTTP/1.1 " + x]]
    h.check_eq(codes, [201, 200, 200, 400],
               "pipelined answers: %r" % got[:600])
    answers = [b"HTTP/1.1 " + x for x in got.split(b"HTTP/1.1 ")[1:]]
    hd, body = answers[1].split(b"\r\n\r\n", 1)
    h.check_eq(body, b"", "no body after the HEAD answer")
    h.check(b"content-length: " in hd.lower() and
            b"content-length: 0" not in hd.lower(),
            "the HEAD answer has the body's length: %r" % hd)
    # Nothing after a request that closes the connection is answered (an
    # HTTP/1.0 answer may end with the connection: another answer after it
    # would be read as part of its body).
    for last in (b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n",
                 b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                 b"Connection: close\r\n\r\n"):
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(last + bad + two)
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except socket.timeout:
            pass
        s.close()
        h.check_eq(got.count(b"HTTP/1."), 1, "one answer: %r" % got[:400])
        h.check_eq(status_of(got), 200, "the closing request's answer")


def test_closed_connections_do_not_steal_the_next():
    """A connection evhttp closes after its answer (Connection: close,
    HTTP/1.0, a refusal) leaves nothing behind that reads from the next
    connection given the same descriptor: every request after one is
    answered at once."""
    host, port = C.manager_addr.split(":")
    closing = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close"
               b"\r\n\r\n", b"GET /healthz HTTP/1.0\r\n\r\n",
               b"GARBAGE\r\n\r\n", b"TRACE / HTTP/1.1\r\nHost: x\r\n\r\n")
    lost = 0
    for i in range(200):
        a = socket.create_connection((host, int(port)), timeout=5)
        a.sendall(closing[i % len(closing)])
        try:
            a.recv(4096)
        except socket.timeout:
            pass
        a.close()
        b = socket.create_connection((host, int(port)), timeout=3)
        b.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            if status_of(b.recv(4096)) != 200:
                lost += 1
        except socket.timeout:
            lost += 1
        b.close()
    h.check_eq(lost, 0, "requests unanswered after a closed connection")


def test_content_type_required():
    body = json.dumps({"topic": "t", "body": "b", "delay_ms": 1})
    r = API.request("POST", "/v1/tasks", body)  # no Content-Type
    h.check_eq(r.status, 415, "a body without Content-Type")
    h.check_eq(r.json["error"]["code"], "unsupported_media_type", "415 code")
    r = API.request("POST", "/v1/tasks", body,
                    headers={"Content-Type": "text/plain"})
    h.check_eq(r.status, 415, "text/plain")


def test_cross_site_requests_refused():
    task = {"topic": "t", "body": "honest cross", "delay_ms": 3600000}
    for hdrs, what in (({"Origin": "http://evil.example"}, "foreign Origin"),
                       ({"Origin": "null"}, "null Origin"),
                       ({"Sec-Fetch-Site": "cross-site"}, "cross-site"),
                       ({"Sec-Fetch-Site": "same-site"}, "same-site")):
        r = API.request("POST", "/v1/tasks",
                        json.dumps(dict(task, id="xs-%d" % len(what))),
                        headers=dict(hdrs, **{"Content-Type":
                                              "application/json"}))
        h.check_eq(r.status, 403, what)
        h.check_eq(r.json["error"]["code"], "cross_site", what + " code")
    # The mykit GETs that change state: the same check, in mykit's shape.
    r = API.request("GET", "/clearAll",
                    headers={"Origin": "http://evil.example"})
    h.check_eq(r.status, 403, "GET /clearAll cross-site")
    h.check_eq(r.json.get("success"), False, "mykit shape: %r" % (r.json,))
    # The manager's own pages (the console) are same-origin.
    r = API.request("POST", "/v1/tasks", json.dumps(dict(task, id="xs-ok")),
                    headers={"Origin": "http://" + C.manager_addr,
                             "Sec-Fetch-Site": "same-origin",
                             "Content-Type": "application/json"})
    h.check_eq(r.status, 201, "same origin")
    # Reads are not state changes.
    r = API.request("GET", "/v1/tasks/xs-ok",
                    headers={"Origin": "http://evil.example"})
    h.check_eq(r.status, 200, "a cross-site read (no CORS: unreadable)")
    r = API.request("DELETE", "/v1/tasks/xs-ok",
                    headers={"Sec-Fetch-Site": "cross-site"})
    h.check_eq(r.status, 403, "cross-site cancel")
    h.check_eq(API.get("/v1/tasks/xs-ok").json["status"], "scheduled",
               "not cancelled")


def test_dns_rebinding_refused():
    """A web page on a name the attacker rebinds to 127.0.0.1 is, for the
    browser, same-origin with a manager on loopback: its requests carry
    Host and Origin of that name and Sec-Fetch-Site same-origin, passed
    the cross-site check, and could read the answers. Without tokens (the
    default) it could submit, cancel, clear and read everything. A manager
    on loopback refuses a Host that is a DNS name other than localhost."""
    port = C.manager_addr.split(":")[1]
    site = "rebind.example:" + port
    page = {"Host": site, "Origin": "http://" + site,
            "Sec-Fetch-Site": "same-origin",
            "Content-Type": "application/json"}
    r = API.request("POST", "/v1/tasks", json.dumps(
        {"id": "rebound", "topic": "t", "body": "honest rebound",
         "delay_ms": 3600000}), headers=page)
    h.check_eq(r.status, 403, "a submission from the rebound page")
    h.check_eq(r.json["error"]["code"], "host_not_allowed", "code")
    for path in ("/v1/tasks", "/v1/cluster", "/clearAll"):
        r = API.request("GET", path, headers=page)
        h.check_eq(r.status, 403, "GET %s from the rebound page" % path)
    h.check_eq(C.mysql("SELECT COUNT(*) FROM tasks WHERE id = 'rebound'"),
               [["0"]], "nothing stored")
    for host in ("localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port,
                 "x"):
        r = API.request("GET", "/v1/cluster", headers={"Host": host})
        h.check_eq(r.status, 200, "Host: %s" % host)


def test_no_header_changes_reply_shape():
    r = API.request("POST", "/v1/tasks", json.dumps({"topic": "t"}),
                    headers={"Content-Type": "application/json",
                             "X-Prophet-Internal-Mykit": "1"})
    h.check_eq(r.status, 400, "native route with the old internal header")
    h.check("error" in r.json and "success" not in r.json,
            "native shape kept: %r" % (r.json,))


def test_duplicate_members_refused():
    """A member given twice is refused on every JSON body, not read as the
    last one: {"dry_run":true,"dry_run":false} started a real bulk cancel
    of every scheduled task; and a misspelt member is not ignored (a
    restore of every slot, a prune pass instead of its dry run)."""
    cases = [
        ("POST", "/v1/tasks/bulk", b'{"filter":{"all":true},"action":'
         b'"cancel","dry_run":true,"dry_run":false}'),
        ("POST", "/v1/tasks/bulk", b'{"filter":{"topic":"a","topic":"b"},'
         b'"action":"cancel","dry_run":true}'),
        ("POST", "/v1/topics/hostile/resume", b'{"policy":"skip",'
         b'"policy":"fire"}'),
        ("POST", "/v1/topics/hostile/pause", b'{"a":1,"a":2}'),
        ("POST", "/v1/admin/restore", b'{"slot":1,"slot":2}'),
        ("POST", "/v1/admin/prune", b'{"dry_run":true,"dry_run":false}'),
        ("PATCH", "/v1/tasks/hostile-dup", b'{"delay_ms":1000,'
         b'"delay_ms":2000}'),
    ]
    for method, path, body in cases:
        r = API.request(method, path, body,
                        headers={"Content-Type": "application/json"})
        h.check_eq(r.status, 400, "%s %s %r" % (method, path, body))
        err = (r.json or {}).get("error", {})
        h.check_eq(err.get("code"), "invalid_json", "code for %r" % body)
        h.check("duplicate" in err.get("message", ""),
                "message names the duplicate: %r" % err)
    for path, body, field in [("/v1/admin/restore", b'{"slots":3}', "slots"),
                              ("/v1/admin/prune", b'{"dryrun":true}',
                               "dryrun")]:
        r = post(path, body)
        h.check_eq(r.status, 400, "%s with a misspelt member" % path)
        h.check_eq(((r.json or {}).get("error") or {}).get("field"), field,
                   "field of the misspelt member")
    jobs = API.get("/v1/admin/jobs").json
    h.check_eq(jobs.get("jobs"), [], "no bulk job started")
    h.check_eq(C.mysql("SELECT COUNT(*) FROM topic_pause WHERE "
                       "paused = 1"), [["0"]], "no topic paused")


def test_mykit_ids_and_times():
    ok = API.post("/v1/tasks", {"id": "mk-a", "topic": "t",
                                "body": "honest mk",
                                "delay_ms": 3600000})
    h.check_eq(ok.status, 201, "task mk-a")
    r = API.get("/delete?jobId=mk-a%00junk")
    h.check_eq(r.json.get("success"), False, "an id with %%00: %r" % r.json)
    h.check_eq(API.get("/v1/tasks/mk-a").json["status"], "scheduled",
               "mk-a not cancelled through mk-a%00junk")
    for body in ({"topic": "t", "body": "b", "createTime": 2 ** 62,
                  "delay": 2 ** 62},
                 {"topic": "t", "body": "b", "createTime": 9007199254740992,
                  "delay": 9007199254740992},
                 {"topic": "t", "body": "b", "delay": 2 ** 63 - 1}):
        r = API.request("POST", "/push", json.dumps(body),
                        headers={"Content-Type": "application/json"})
        h.check_eq(r.status, 200, "mykit answers 200: %r" % body)
        h.check_eq(r.json.get("success"), False, "refused: %r" % body)
        h.check_eq(r.json.get("code"), 500, "mykit error code")
    r = API.request("POST", "/push", json.dumps({"topic": "t", "body": "b"}),
                    headers={"Content-Type": "text/plain"})
    h.check_eq(r.status, 415, "mykit 415 keeps its status")
    h.check_eq(r.json, {"success": False, "code": 415,
                        "message": r.json.get("message")}, "mykit shape")


def test_tokens_checked_before_the_body():
    """With tokens, a request without one is refused when its head
    arrives: the body is never read (nor held in memory)."""
    tpath = os.path.join(C.dir, "tokens")
    with open(tpath, "w") as f:
        f.write("hostile-admin-0123456789 admin\n")
    os.chmod(tpath, 0o600)
    with h.Cluster(workers=0, name="hostile-tok",
                   conf={"http.tokens_file": tpath}) as t:
        t.start_manager()
        host, port = t.manager_addr.split(":")
        for path, mykit in (("/v1/tasks", False), ("/push", True)):
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: 3000000\r\n"
                      b"\r\n" % path.encode())
            try:
                resp = s.recv(4096)  # no body sent: answered anyway
            except socket.timeout:
                resp = b""
            s.close()
            h.check_eq(status_of(resp), 401, "%s without a token" % path)
            j = json.loads(body_of(resp))
            if mykit:
                h.check_eq(j, {"success": False, "code": 401,
                               "message": j.get("message")},
                           "mykit 401 shape")
            else:
                h.check_eq(j["error"]["code"], "unauthorized", "401 code")
            h.check(b"www-authenticate: bearer" in resp.lower(),
                    "WWW-Authenticate on 401")
        api = t.api()
        r = api.request("POST", "/push",
                        json.dumps({"topic": "t", "body": "b", "delay": 1}),
                        headers={"Content-Type": "application/json"})
        h.check_eq(r.status, 401, "mykit /push without a token")
        h.check_eq(r.json.get("code"), 401, "mykit code 401")
        r = api.request("GET", "/v1/tasks/x",
                        headers={"Authorization":
                                 "Bearer hostile-admin-0123456789"})
        h.check_eq(r.status, 404, "with the token")
        api.close()


def served_beside(n, what, within):
    """n honest /healthz clients, one after the other, each answered 200
    within `within` seconds."""
    host, port = C.manager_addr.split(":")
    for i in range(n):
        t0 = time.monotonic()
        s = socket.create_connection((host, int(port)), timeout=within)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            resp = s.recv(1024)
        except (socket.timeout, ConnectionResetError):
            resp = b""
        s.close()
        h.check_eq(status_of(resp), 200, "client %d %s after %.1fs: %r"
                   % (i, what, time.monotonic() - t0, resp[:60]))


def test_open_file_limit():
    """The open-file limit below http.max_connections (systemd's default
    soft limit is 1,024, the default connection limit too): the manager
    lowers its connection limit to fit, so slow clients are evicted before
    accept() runs out of descriptors; and when it does run out all the
    same, it pauses accepting and evicts instead of spinning on accept()
    (which wrote libevent's "Error from accept() call" hundreds of
    thousands of times a second, and served nobody)."""
    nofile = 128  # the connection limit fits in 64
    argv = C.manager.argv
    C.manager.stop()
    C.manager.argv = ["prlimit", "--nofile=%d:%d" % (nofile, nofile),
                      "--"] + argv + ["--set", "http.max_connections=1024"]
    try:
        C.start_manager()
        h.check(C.manager.grep("connection limit lowered"),
                "the lowered connection limit is logged")
        h.check(C.manager.grep("max_connections=64 "),
                "lowered to 64: %r" % C.manager.grep("lowered"))
        stop = threading.Event()
        socks = []
        hold(120, stop, socks)
        time.sleep(1.5)
        served_beside(3, "beside 120 slow ones, limit lowered", 8)
        stop.set()
        for held in socks:
            held.close()
        time.sleep(1)
        # Out of descriptors all the same: fewer than the lowered limit
        # needs (the limit of a running process, as prlimit sets it).
        subprocess.run(["prlimit", "--pid", str(C.manager.popen.pid),
                        "--nofile=90:90"], check=True)
        size0 = os.path.getsize(C.manager.log_path)
        stop = threading.Event()
        socks = []
        hold(110, stop, socks)
        time.sleep(3)
        served_beside(2, "beside 110 slow ones, out of descriptors", 15)
        stop.set()
        for held in socks:
            held.close()
        grown = os.path.getsize(C.manager.log_path) - size0
        h.check(grown < 20000, "the log grew %d bytes while out of "
                "descriptors" % grown)
        h.check_eq(C.manager.grep("Error from accept"), [],
                   "libevent's accept() error lines")
        h.check(C.manager.grep("cannot accept connections"),
                "running out of descriptors is logged")
    finally:
        C.manager.stop()
        C.manager.argv = argv
        C.start_manager()


def test_nothing_stored_and_healthy():
    rows = C.mysql("SELECT COUNT(*) FROM tasks WHERE body NOT LIKE "
                   "'honest%'")
    h.check_eq(rows, [["0"]], "rows stored by hostile requests")
    h.check_eq(API.get("/healthz").status, 200, "healthy after all")
    h.check(C.manager.running(), "manager still running")


def test_task_log_bounded():
    """A recurring task writes log rows at every occurrence (one a second
    for the 7 days of task.log_retention is a million): GET ?log=1 read
    them all, 1.8 GB of manager memory for one request of a read token.
    It shows the newest 1,000, oldest first, and says it left some out."""
    r = post("/v1/tasks", json.dumps({"id": "hostile-log", "topic":
                                      "hostile", "body": "honest log",
                                      "delay_ms": 3600000}))
    h.check_eq(r.status, 201, "task submitted")
    C.mysql("INSERT INTO task_log (task_id, from_status, to_status, actor, "
            "epoch, attempt, at, note) SELECT 'hostile-log', 'firing', "
            "'scheduled', 'worker-x', 1, 1, seq, NULL FROM "
            "seq_1_to_65536")
    r = API.get("/v1/tasks/hostile-log?log=1")
    h.check_eq(r.status, 200, "GET ?log=1")
    log = r.json.get("log") or []
    h.check_eq(len(log), 1000, "log rows shown")
    h.check_eq(r.json.get("log_truncated"), True, "log_truncated")
    h.check_eq([log[0]["at"], log[-1]["at"]], [64537, 65536],
               "the newest rows, oldest first")
    r = API.get("/v1/tasks/hostile-log")
    h.check("log_truncated" not in r.json, "no log asked, no flag")


def test_lists_leave_the_database_to_submissions():
    """GET /v1/tasks by topic alone sorts every task of the topic (no index
    serves it in due order): six of them at once over a million tasks held
    every database connection, and a submission beside them waited 30 s
    (half a million here, to keep the test short).
    Lists now use at most half of the pool (503 busy beyond) and are cut
    after 5 s (503)."""
    now = h.now_ms()  # recent: not for the pruner
    for i in range(8):  # 2^19 rows, 2^16 a statement (InnoDB's locks)
        # from the SEQUENCE engine: no temporary table (a file in /tmp)
        C.mysql("INSERT INTO tasks (id, slot, topic, body, due_at, status, "
                "content_hash, batch_id, created_at, updated_at) SELECT "
                "CONCAT('seed-', seq), 0, 'seedt', 'x', FLOOR(RAND() * "
                "1000000000), 'delivered', 0, 0, %d, %d FROM seq_%d_to_%d"
                % (now, now, i << 16, ((i + 1) << 16) - 1))
    got = []

    def lister():
        api = C.api()
        try:
            r = api.get("/v1/tasks?topic=seedt&limit=10")
            got.append((r.status, ((r.json or {}).get("error") or {})
                        .get("code")))
        finally:
            api.close()
    ths = [threading.Thread(target=lister) for _ in range(6)]
    for t in ths:
        t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    r = post("/v1/tasks", json.dumps({"topic": "hostile", "body": "honest",
                                      "delay_ms": 3600000}))
    took = time.monotonic() - t0
    h.check_eq(r.status, 201, "a submission beside six lists")
    h.check(took < 3, "the submission beside six lists took %.1fs" % took)
    for t in ths:
        t.join(60)
    h.check(sum(1 for s, c in got if s == 503 and c == "busy") >= 3,
            "lists beyond half of db.pool_size refused busy: %r" % got)
    h.check(all(s in (200, 503) for s, c in got), "lists: %r" % got)


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
