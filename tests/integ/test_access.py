#!/usr/bin/python3
"""Bearer tokens with roles, the topic allow-list, and the mykit-delay
compatible endpoints (requests as its documentation writes them), on a
running cluster with one worker."""

import hashlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
READER = None
TOKENS = {
    "submit": "sub-0123456789abcdef",
    "read": "read-0123456789abcdef",
    "admin": "adm-0123456789abcdef0",
}
# Stored as "sha256:<hex>" of the token, which clients send as it is.
HASHED = "hashed-0123456789abcdef"
# '#' inside a token is part of it (a comment starts after whitespace).
WITH_HASH_SIGN = "pound#0123456789abcdef"


def write_private(path, text, mode=0o600):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode),
              "w") as f:
        f.write(text)
    os.chmod(path, mode)


def token_hash(token):
    p = subprocess.run([os.path.join(h.BUILDDIR, "prophetctl"),
                        "token-hash"], input=token + "\n",
                       capture_output=True, text=True, timeout=30)
    h.check_eq(p.returncode, 0, "prophetctl token-hash: %s" % p.stderr)
    return p.stdout.strip()


def setup():
    global C, READER
    tokens_path = os.path.join(tempfile.gettempdir(),
                               "prophet-tokens-%s" % h.rand_tag())
    lines = ["# role per token"]
    for role, tok in TOKENS.items():
        lines.append("%s %s" % (tok, role))
    lines.append("both-0123456789abcdef submit,read  # two roles")
    lines.append("%s read" % token_hash(HASHED))
    lines.append("%s read\t# a comment after a tab" % WITH_HASH_SIGN)
    write_private(tokens_path, "\n".join(lines) + "\n")
    C = h.Cluster(workers=1, name="access",
                  conf={"http.tokens_file": tokens_path,
                        "http.topics_allowed": "ces, orders"}).open()
    C.tokens_path = tokens_path
    C.start()
    h.create_topics(C.brokers, [C.topic("ces"), C.topic("orders")])
    READER = C.reader(["ces", "orders"])


def call(method, path, body=None, token=None):
    api = C.api()
    try:
        hdrs = {"Authorization": "Bearer " + token} if token else {}
        return api.request(method, path, body, headers=hdrs)
    finally:
        api.close()


def test_roles():
    task = {"topic": "orders", "body": "x", "delay_ms": 3600000}
    h.check_eq(call("POST", "/v1/tasks", task).status, 401, "no token")
    r = call("POST", "/v1/tasks", task, "wrong-0123456789abcdef")
    h.check_eq(r.status, 401, "unknown token")
    h.check_eq(r.json["error"]["code"], "unauthorized", "401 error code")
    # A 403 names the role the call needs (refused before the body is
    # read, or after).
    r = call("POST", "/v1/tasks", task, TOKENS["read"])
    h.check(r.status == 403 and "needs the submit role" in
            r.json["error"]["message"], "read token cannot submit: %r" % r)
    r = call("POST", "/v1/tasks", dict(task, id="acc-1"), TOKENS["submit"])
    h.check_eq(r.status, 201, "submit token submits")
    r = call("GET", "/v1/tasks/acc-1", None, TOKENS["submit"])
    h.check(r.status == 403 and "needs the read role" in
            r.json["error"]["message"], "submit token cannot read: %r" % r)
    h.check_eq(call("GET", "/v1/tasks/acc-1", None, TOKENS["read"]).status,
               200, "read token reads")
    h.check_eq(call("GET", "/v1/tasks/acc-1", None,
                    "both-0123456789abcdef").status, 200, "two roles")
    h.check_eq(call("POST", "/v1/admin/restore", {}, TOKENS["submit"])
               .status, 403, "restore needs admin")
    h.check_eq(call("GET", "/clearAll", None, TOKENS["read"]).status, 403,
               "clearAll needs admin")
    h.check_eq(call("POST", "/v1/admin/restore", {}, TOKENS["admin"]).status,
               202, "admin restores")
    h.check_eq(call("DELETE", "/v1/tasks/acc-1", None, TOKENS["admin"])
               .status, 200, "admin may do everything")
    for path in ("/healthz", "/readyz", "/metrics"):
        h.check_eq(call("GET", path).status, 200, "%s needs no token" % path)


def raw_status(head):
    """The status line's code of a raw request head sent to the manager."""
    host, port = C.manager_addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    try:
        s.sendall(head)
        got = b""
        while b"\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    finally:
        s.close()
    parts = got.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def test_two_authorization_headers_refused():
    """Two Authorization headers were served with the first one's roles:
    a proxy or an audit log that reads the last (or a client library that
    appends its own) sees another caller than the one the manager served.
    Refused now, as two Hosts (RFC 9112) and two Content-Lengths are."""
    sub = "Authorization: Bearer %s\r\n" % TOKENS["submit"]
    adm = "Authorization: Bearer %s\r\n" % TOKENS["admin"]
    junk = "Authorization: Bearer not-a-token-0123456789\r\n"
    p = h.Problems()
    for what, hdrs in (("submit, then admin", sub + adm),
                       ("admin, then submit", adm + sub),
                       ("a wrong one, then admin", junk + adm),
                       ("two Hosts", adm + "Host: y\r\n")):
        head = ("GET /v1/admin/jobs HTTP/1.1\r\nHost: x\r\n%s\r\n"
                % hdrs).encode()
        got = raw_status(head)
        p.check(got == 400, "%s: status %r, want 400" % (what, got))
    # one of each is served as before
    head = ("GET /v1/admin/jobs HTTP/1.1\r\nHost: x\r\n%s\r\n"
            % adm).encode()
    got = raw_status(head)
    p.check(got == 200, "one admin token: status %r" % got)
    p.raise_if_any("duplicate headers")


def test_topic_allow_list():
    r = call("POST", "/v1/tasks", {"topic": "other", "body": "x",
                                   "delay_ms": 1}, TOKENS["submit"])
    h.check_eq(r.status, 400, "topic outside the allow-list")
    h.check_eq(r.json["error"]["field"], "topic", "its field")
    r = call("POST", "/v1/tasks/batch",
             {"tasks": [{"topic": "other", "body": "x", "delay_ms": 1},
                        {"topic": "ces", "body": "x", "delay_ms": 3600000}]},
             TOKENS["submit"])
    h.check_eq([x["code"] for x in r.json["results"]], [400, 201],
               "allow-list per task in a batch")


def test_mykit_delay_endpoints():
    tok = TOKENS["admin"]
    now = h.now_ms()
    # As in mykit-delay's documentation.
    r = call("POST", "/push", {"body": "{hello world}", "delay": 800,
                               "id": "20", "status": 0, "topic": "ces",
                               "subtopic": "sub", "ttl": 0,
                               "createTime": now}, tok)
    h.check_eq(r.status, 200, "push status")
    h.check_eq(r.json, {"success": True, "data": "20", "code": 200},
               "push answer")
    r = call("POST", "/push", {"body": "b", "delay": 5000, "id": 21,
                               "topic": "ces", "bizKey": "order-7"}, tok)
    h.check_eq(r.json["data"], "21", "numeric id taken as text")
    # A client's retry of the same push (no createTime: due delay from
    # now) is a replay, not a conflict: it used to be refused, its due
    # time, now + delay, being a few ms later than the first one's.
    time.sleep(0.01)
    r = call("POST", "/push", {"body": "b", "delay": 5000, "id": 21,
                               "topic": "ces", "bizKey": "order-7"}, tok)
    h.check_eq(r.json, {"success": True, "data": "21", "code": 200},
               "the same push again")
    r = call("POST", "/push", {"body": "c", "delay": 5000, "id": 21,
                               "topic": "ces", "bizKey": "order-7"}, tok)
    h.check_eq((r.json["success"], r.json["code"]), (False, 500),
               "the same id with another body")
    r = call("GET", "/delete?JobId=21", None, tok)
    h.check_eq(r.json, {"success": True, "data": "21", "code": 200},
               "delete (JobId spelling)")
    r = call("POST", "/push", {"delay": 5, "topic": "ces"}, tok)
    h.check_eq((r.status, r.json["success"], r.json["code"]),
               (200, False, 500), "push without body")
    h.check("body" in r.json["message"], "message names the field")
    r = call("GET", "/delete?jobId=nope", None, tok)
    h.check_eq(r.json["success"], False, "delete of an unknown id")
    r = call("GET", "/reStore?expire=false", None, tok)
    h.check_eq(r.json["success"], True, "reStore")
    r = call("GET", "/reStoreJob?jobId=20", None, tok)
    h.check_eq(r.json["success"], True, "reStoreJob of a scheduled task")
    missing = READER.wait_for(["20"], 20)
    h.check(not missing, "pushed job 20 never published")
    m = READER.by_id["20"][0]
    h.check_eq(m.payload, "{hello world}", "body byte for byte")
    h.check_eq(m.hdr.get("mykit-subtopic"), "sub", "subtopic header")
    h.check(int(m.hdr["prophet-due-at"]) == now + 800,
            "due at createTime + delay")
    time.sleep(5.5)
    h.check("21" not in READER.by_id, "deleted job 21 was published")
    r = call("GET", "/clearAll", None, tok)
    h.check_eq(r.json["success"], True, "clearAll")
    # The index comes back from the DB: a task pushed before still fires.
    call("POST", "/push", {"body": "later", "delay": 1500, "id": "22",
                           "topic": "ces"}, tok)
    call("GET", "/clearAll", None, tok)
    missing = READER.wait_for(["22"], 20)
    h.check(not missing, "task pushed before clearAll never published")


def test_pull_roles_and_topics():
    """Pull consumption: taking tasks needs the read role, acknowledging
    the submit role; http.topics_allowed applies as to submissions."""
    r = call("POST", "/v1/tasks", {"id": "acc-pull", "topic": "orders",
                                   "body": "p", "delay_ms": 0},
             TOKENS["submit"])
    h.check_eq(r.status, 201, "submit: %r" % r)
    nxt = "/v1/topics/orders/next?group=acc&max=10&wait_ms=3000"
    h.check_eq(call("GET", nxt).status, 401, "next without a token")
    h.check_eq(call("GET", nxt, None, TOKENS["submit"]).status, 403,
               "a submit token cannot take tasks")
    got, deadline = [], time.monotonic() + 20
    while not any(t["id"] == "acc-pull" for t in got) and \
            time.monotonic() < deadline:
        r = call("GET", nxt, None, TOKENS["read"])
        h.check_eq(r.status, 200, "a read token takes tasks: %r" % r)
        got += r.json["tasks"]
    mine = [t for t in got if t["id"] == "acc-pull"]
    h.check(mine, "acc-pull never handed out: %r" % got)
    ack = {"group": "acc", "receipts": [mine[0]["receipt"]]}
    h.check_eq(call("POST", "/v1/topics/orders/ack", ack,
                    TOKENS["read"]).status, 403,
               "a read token cannot acknowledge")
    r = call("POST", "/v1/topics/orders/ack", ack, TOKENS["submit"])
    h.check_eq(r.json, {"acked": 1, "unknown": []}, "a submit token acks")
    r = call("GET", "/v1/topics/other/next?group=acc", None, TOKENS["read"])
    h.check_eq((r.status, r.json["error"]["field"]), (400, "topic"),
               "next on a topic outside the allow-list: %r" % r)
    r = call("POST", "/v1/topics/other/ack", ack, TOKENS["submit"])
    h.check_eq((r.status, r.json["error"]["field"]), (400, "topic"),
               "ack on a topic outside the allow-list: %r" % r)
    r = call("GET", "/get/other", None, TOKENS["read"])
    h.check_eq((r.status, r.json["success"], r.json["code"]),
               (200, False, 500), "mykit /get outside the allow-list")
    h.check("http.topics_allowed" in r.json["message"], r.json["message"])
    r = call("GET", "/get/orders", None, TOKENS["submit"])
    h.check_eq((r.status, r.json["code"]), (403, 403),
               "mykit /get with a submit token")


def test_prophetctl_token():
    ctl = os.path.join(h.BUILDDIR, "prophetctl")
    base = [ctl, "--url", "http://" + C.manager_addr]
    p = subprocess.run(base + ["get", "20"], capture_output=True, text=True,
                       timeout=30)
    h.check(p.returncode == 1 and "401" in p.stderr and
            "no token was sent: give --token" in p.stderr,
            "without a token: %r" % (p,))
    p = subprocess.run(base + ["--token", "x" * 20, "get", "20"],
                       capture_output=True, text=True, timeout=30)
    h.check(p.returncode == 1 and "401" in p.stderr and
            "no token was sent" not in p.stderr,
            "with an unknown token: %r" % (p,))
    p = subprocess.run(base + ["--token", TOKENS["read"], "get", "20"],
                       capture_output=True, text=True, timeout=30)
    h.check_eq(p.returncode, 0, "with --token: %s" % p.stderr)
    env = dict(os.environ, PROPHET_TOKEN=TOKENS["read"])
    p = subprocess.run(base + ["get", "20"], capture_output=True, text=True,
                       timeout=30, env=env)
    h.check_eq(p.returncode, 0, "with PROPHET_TOKEN: %s" % p.stderr)
    # http.token_file, in prophetctl's own section of the cluster's file
    # (as scripts/devcluster up --secure writes it): it was ignored once.
    tag = h.rand_tag()
    tok = os.path.join(tempfile.gettempdir(), "prophet-ctl-token-" + tag)
    conf = os.path.join(tempfile.gettempdir(), "prophet-ctl-%s.conf" % tag)
    try:
        write_private(tok, TOKENS["read"] + "\n")
        with open(C.conf_path) as f:
            text = f.read()
        write_private(conf, text + "\n[http@prophetctl]\ntoken_file = %s\n"
                      % tok)
        p = subprocess.run([ctl, "-c", conf, "get", "20"],
                           capture_output=True, text=True, timeout=30)
        h.check_eq(p.returncode, 0, "with [http@prophetctl] token_file: %s"
                   % p.stderr)
        os.chmod(tok, 0o644)
        p = subprocess.run([ctl, "-c", conf, "get", "20"],
                           capture_output=True, text=True, timeout=30)
        h.check(p.returncode == 2 and "http.token_file" in p.stderr,
                "a token file others may read is refused, naming the key: "
                "%r" % (p,))
    finally:
        for f in (tok, conf):
            if os.path.exists(f):
                os.unlink(f)


def test_hashed_token():
    want = hashlib.sha256(HASHED.encode()).hexdigest()
    h.check_eq(token_hash(HASHED), "sha256:" + want, "prophetctl token-hash")
    with open(C.tokens_path) as f:
        h.check(HASHED not in f.read(), "the file holds the hash only")
    h.check_eq(call("GET", "/v1/tasks/acc-1", None, HASHED).status, 200,
               "the token of a stored hash reads")
    h.check_eq(call("GET", "/v1/tasks/acc-1", None, "sha256:" + want)
               .status, 401, "the hash itself is no token")
    h.check_eq(call("POST", "/v1/tasks", {"topic": "orders", "body": "x",
                                          "delay_ms": 3600000}, HASHED)
               .status, 403, "the hashed token has its role only")


def test_token_with_hash_sign():
    h.check_eq(call("GET", "/v1/tasks/acc-1", None, WITH_HASH_SIGN).status,
               200, "token with '#' reads")
    h.check_eq(call("GET", "/v1/tasks/acc-1", None,
                    WITH_HASH_SIGN.split("#")[0]).status, 401,
               "its part before '#' is no token")


def test_tokens_file_readable_by_others_refused():
    for mode in (0o644, 0o640, 0o606):
        path = C.tokens_path + ".open"
        write_private(path, "%s admin\n" % TOKENS["admin"], mode)
        p = subprocess.run([h.MANAGER_BIN, "-c", C.conf_path, "--set",
                            "http.tokens_file=" + path, "--set",
                            "http.listen=127.0.0.1:%d" % h.free_port()],
                           capture_output=True, text=True, timeout=30)
        os.unlink(path)
        h.check(p.returncode != 0 and path in p.stderr and
                "%04o" % mode in p.stderr and "chmod 600" in p.stderr,
                "a tokens file of mode %o must stop the manager with its "
                "name and mode: %r" % (mode, p.stderr[-300:]))


def test_tokens_file_opened_up_kept_on_reload():
    """SIGHUP re-reads the tokens: a file made readable by others is
    refused and the tokens loaded before stay."""
    os.chmod(C.tokens_path, 0o644)
    try:
        C.manager.signal(signal.SIGHUP)
        h.wait_until(lambda: C.manager.grep("chmod 600"), 10, 0.1,
                     "the refused reload in the log")
        h.check_eq(call("GET", "/v1/tasks/acc-1", None, TOKENS["read"])
                   .status, 200, "the tokens loaded before still work")
    finally:
        os.chmod(C.tokens_path, 0o600)


def test_notifier_token_rotated_with_sighup():
    """Rotating the notifier's token as the manager's tokens file is
    rotated, with SIGHUPs (systemctl reload): the new token added to the
    manager, the notifier's http.token_file changed, the old token taken
    away. The notifier read its token file at start only: it went on
    sending the old token, and every retry task was refused (401) until
    it was restarted."""
    old, new, adm = ("rot-old-0123456789abcdef", "rot-new-0123456789abcdef",
                     "rot-adm-0123456789abcdef")
    d = tempfile.mkdtemp(prefix="prophet-rot-")
    tokens, token_file = os.path.join(d, "tokens"), os.path.join(d, "tok")
    write_private(tokens, "%s submit\n%s admin\n" % (old, adm))
    write_private(token_file, old + "\n")
    sink = h.CallbackSink()
    nport = h.free_port()
    with h.Cluster(workers=1, name="rot", conf={
            "http.tokens_file": tokens,
            "http@notifier.token_file": token_file,
            "notifier.http_listen": "127.0.0.1:%d" % nport,
            "notifier.topics": "rot",
            "notifier.backoff_base_ms": 200,
            "notifier.callback_networks_allowed": "127.0.0.0/8"}) as c:
        h.create_topics(c.brokers, [c.topic("rot"),
                                    c.topic("prophet.callback-retry"),
                                    c.topic("prophet.callback-dead")])
        c.start()
        n = c.notifier(nport)
        c.workers.append(n)  # stopped with the cluster, its log dumped
        n.start()
        c._wait_http(n, n.addr, "/readyz", 60)
        api = c.api()
        auth = {"Authorization": "Bearer " + adm}

        def retried(tid):
            r = api.request("POST", "/v1/tasks", {
                "id": tid, "topic": "rot", "body": "b", "delay_ms": 100,
                "callback": {"url": sink.url("flaky/" + tid)}},
                headers=auth)
            h.check_eq(r.status, 201, "task %s" % tid)
            return sink.wait(tid, 2, 30) is not None

        h.check(retried("rot-1-" + c.tag),
                "a retry submitted with the first token")
        write_private(tokens, "%s submit\n%s submit\n%s admin\n"
                      % (old, new, adm))
        c.manager.signal(signal.SIGHUP)
        write_private(token_file, new + "\n")
        n.signal(signal.SIGHUP)
        h.wait_until(lambda: n.grep("config reloaded"), 10, 0.1,
                     "the notifier's reload")
        write_private(tokens, "%s submit\n%s admin\n" % (new, adm))
        c.manager.signal(signal.SIGHUP)
        h.wait_until(lambda: len(c.manager.grep("access reloaded")) >= 2,
                     10, 0.1, "the manager's reloads")
        ok = retried("rot-2-" + c.tag)
        h.check(ok, "a retry submitted after the rotation (the notifier's "
                "401s: %d)" % len(n.grep("status=401")))
        api.close()


def test_bad_tokens_file_refused():
    path = C.tokens_path + ".bad"
    write_private(path, "short admin\n")
    p = subprocess.run([h.MANAGER_BIN, "-c", C.conf_path, "--set",
                        "http.tokens_file=" + path, "--set",
                        "http.listen=127.0.0.1:%d" % h.free_port()],
                       capture_output=True, text=True, timeout=30)
    os.unlink(path)
    h.check(p.returncode != 0 and ".bad:1" in p.stderr,
            "a malformed tokens file must stop the manager: %r"
            % p.stderr[-300:])


def test_unusable_client_token_refused():
    """A token the managers could never accept (a space, a control
    character, too short) stops the notifier and prophetctl at start,
    naming the key and not the token, rather than failing every call with
    a 401."""
    p = h.Problems()
    bad = [("http.token", "0123456789abcdef 0123", "a space"),
           ("http.token", "0123456789abcdef\x010123", "a control"),
           ("http.token", "0123456789", "10 characters")]
    path = C.tokens_path + ".client"
    for key, tok, why in bad + [("http.token_file", "0123456789abcdef 01",
                                 "a space")]:
        if key == "http.token_file":
            write_private(path, tok + "\n")
            sets = ["--set", "http.token_file=" + path]
        else:
            sets = ["--set", "http.token=" + tok]
        for argv in ([h.NOTIFIER_BIN, "-c", C.conf_path] + sets,
                     [h.NOTIFIER_BIN, "-c", C.conf_path] + sets +
                     ["--check-config"],
                     [os.path.join(h.BUILDDIR, "prophetctl"), "-c",
                      C.conf_path] + sets + ["cluster"]):
            r = subprocess.run(argv, capture_output=True, text=True,
                               timeout=30)
            what = "%s %s %s" % (os.path.basename(argv[0]), key, why)
            out = r.stdout + r.stderr
            p.check(r.returncode != 0, "%s: exit %d" % (what, r.returncode))
            p.check(key + ":" in out and why in out,
                    "%s: the message: %r" % (what, out[-300:]))
            p.check(tok[:12] not in out, "%s: the token shown" % what)
    if os.path.exists(path):
        os.unlink(path)
    p.raise_if_any("unusable client tokens")


def cleanup(failed):
    if READER is not None:
        READER.stop()
    if C is not None:
        C.close(failed=failed)
        if os.path.exists(getattr(C, "tokens_path", "")):
            os.unlink(C.tokens_path)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
