#!/usr/bin/env python3
"""Hostile input against the manager: every request gets a 4xx (never a
crash, a hang or a stored change), and the server stays healthy for the
honest client next to it."""

import json
import os
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
API = None
LIMIT = 64


def setup():
    global C, API
    C = h.Cluster(workers=0, name="hostile",
                  conf={"http.timeout_s": 2,
                        "http.max_connections": LIMIT}).open()
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
    paused0 = metric("prophet_http_accept_paused_total")
    h.check(paused0 is not None, "prophet_http_accept_paused_total exported")
    stop = threading.Event()
    socks = []
    hold(LIMIT, stop, socks)  # with the API's own connection: over the limit
    time.sleep(1.5)
    host, port = C.manager_addr.split(":")
    s = socket.create_connection((host, int(port)), timeout=1.5)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        early = s.recv(1024)
    except socket.timeout:
        early = None
    h.check(early is None, "a connection over the limit was served: %r" %
            (early[:40] if early else early))
    # Free some: the waiting connection is accepted and answered.
    for held in socks[:8]:
        held.close()
    s.settimeout(5)
    try:
        resp = s.recv(1024)
    except socket.timeout:
        resp = b""
    s.close()
    h.check_eq(status_of(resp), 200, "the waiting client after slots freed")
    stop.set()
    for held in socks:
        held.close()
    time.sleep(1)
    h.check(metric("prophet_http_accept_paused_total") > paused0,
            "the limit was counted in prophet_http_accept_paused_total")
    h.check_eq(API.get("/healthz").status, 200, "healthy after the limit")
    conns = metric("prophet_http_connections")
    h.check(conns is not None and conns <= 3,
            "open connections back down after release: %s" % conns)


def test_nothing_stored_and_healthy():
    rows = C.mysql("SELECT COUNT(*) FROM tasks WHERE body NOT LIKE "
                   "'honest%'")
    h.check_eq(rows, [["0"]], "rows stored by hostile requests")
    h.check_eq(API.get("/healthz").status, 200, "healthy after all")
    h.check(C.manager.running(), "manager still running")


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
