#!/usr/bin/python3
"""HTTPS on every HTTP listener: the manager's API and console, the
workers' and the notifier's metrics, with certificates made here by the
openssl CLI. One cluster (manager, worker, notifier) serving HTTPS only:

  1. a task submitted over HTTPS fires on Kafka; prophetctl speaks HTTPS
     (the config's http.tls_ca, --cacert, --insecure);
  2. a plain-HTTP client to the HTTPS port gets no HTTP answer;
  3. TLS 1.1, and TLS 1.2 without forward secrecy or with CBC, are refused;
     a client trusting another CA refuses the server;
  4. the HTTP layer's own refusals (bad request line, too large) are JSON
     through TLS;
  5. the manager reads the worker's metrics over HTTPS (its lateness view);
  6. the notifier submits its retry tasks to the HTTPS API;
  7. SIGHUP makes new connections get a replaced certificate (a broken
     or expired one is refused, the running one kept);
  8. with http.tls_client_ca, clients without a certificate of that CA are
     refused (mutual TLS); Prophet's own clients (prophetctl, the manager
     reading worker metrics) present http.tls_client_cert;
  9. a client offering its last session resumes it, over TLS 1.2 and 1.3,
     with a client certificate too.
"""

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

NOTIFIER_BIN = os.path.join(h.BUILDDIR, "prophet-notifier")
PROPHETCTL = os.path.join(h.BUILDDIR, "prophetctl")
TOPIC = "tls"

C = None
NOTIFIER = None
SINK = None
READER = None
PKI = None


class Pki:
    """A private CA and certificates signed by it, by the openssl CLI."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="prophet-tls-")
        self.ca = self.make_ca("ca")
        self.other_ca = self.make_ca("other-ca")

    def path(self, name):
        return os.path.join(self.dir, name)

    def run(self, *argv):
        p = subprocess.run(["openssl"] + list(argv), cwd=self.dir,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        h.check(p.returncode == 0, "openssl %s: %s" % (argv[0], p.stdout))

    def make_ca(self, name):
        self.run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                 "2", "-subj", "/CN=prophet test %s" % name, "-keyout",
                 name + ".key", "-out", name + ".pem")
        return self.path(name + ".pem")

    def issue(self, name, ca="ca", server=True, days=2):
        """A certificate for 127.0.0.1/localhost (server) or a client,
        valid for days from now (-1: expired yesterday)."""
        ext = self.path(name + ".ext")
        with open(ext, "w") as f:
            if server:
                f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                        "extendedKeyUsage=serverAuth\n")
            else:
                f.write("extendedKeyUsage=clientAuth\n")
        self.run("req", "-newkey", "rsa:2048", "-nodes", "-subj",
                 "/CN=%s" % name, "-keyout", name + ".key", "-out",
                 name + ".csr")
        self.run("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem",
                 "-CAkey", ca + ".key", "-CAcreateserial", "-days", str(days),
                 "-extfile", name + ".ext", "-out", name + ".pem")
        os.chmod(self.path(name + ".key"), 0o600)
        return self.path(name + ".pem"), self.path(name + ".key")


def setup():
    global C, NOTIFIER, SINK, READER, PKI
    PKI = Pki()
    cert, key = PKI.issue("manager")
    wcert, wkey = PKI.issue("worker")
    ncert, nkey = PKI.issue("notifier")
    SINK = h.CallbackSink()
    C = h.Cluster(workers=1, name="tls", conf={
        "http.tls_cert": cert, "http.tls_key": key,
        "http.tls_ca": PKI.ca,
        "worker.http_tls_cert": wcert, "worker.http_tls_key": wkey,
        "notifier.http_tls_cert": ncert, "notifier.http_tls_key": nkey,
        "notifier.topics": TOPIC,
        "notifier.backoff_base_ms": 200,
        "notifier.callback_networks_allowed": "127.0.0.0/8",
    })
    C.open()
    C.tls_ca = PKI.ca
    C.cert_files = (cert, key)
    nport = h.free_port()
    C.extra_conf["notifier.http_listen"] = "127.0.0.1:%d" % nport
    C.notifier_conf("https")
    C.start_manager()
    for w in C.workers:
        w.start()
        wait_https(w, w.addr, "/readyz")
    # The notifier subscribes to these: they must exist.
    h.create_topics(C.brokers, [C.topic(TOPIC),
                                C.topic("prophet.callback-retry"),
                                C.topic("prophet.callback-dead")])
    NOTIFIER = h.Proc("notifier", [NOTIFIER_BIN, "-c", C.conf_path],
                      os.path.join(C.dir, "notifier.log"))
    NOTIFIER.addr = "127.0.0.1:%d" % nport
    NOTIFIER.start()
    wait_https(NOTIFIER, NOTIFIER.addr, "/readyz")
    READER = C.reader([TOPIC])


def wait_https(proc, addr, path):
    api = h.Api(addr, timeout=2, cafile=PKI.ca)

    def ok():
        h.check(proc.running(), "%s exited during startup" % proc.name)
        try:
            return api.get(path).status == 200
        except (OSError, ssl.SSLError):
            api.close()
            return False
    try:
        h.wait_until(ok, 60, 0.1, "%s %s over HTTPS" % (proc.name, path))
    finally:
        api.close()


def read_all(s):
    """What the server sends until it closes (or goes quiet), then close."""
    got = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except (socket.timeout, ssl.SSLError, ConnectionResetError):
        pass
    s.close()
    return got


def tls_connect(addr, ctx):
    host, port = addr.split(":")
    raw = socket.create_connection((host, int(port)), timeout=5)
    return ctx.wrap_socket(raw, server_hostname=host)


def client_ctx(ca=None, **kw):
    ctx = ssl.create_default_context(cafile=ca or PKI.ca)
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


def test_submit_over_https_fires():
    api = C.api()
    tid = "tls-%s-1" % C.tag
    r = api.post("/v1/tasks", {"id": tid, "topic": TOPIC, "body": "over tls",
                               "delay_ms": 500})
    h.check_eq(r.status, 201, "submit over HTTPS: %r" % (r,))
    missing = READER.wait_for([tid], timeout=30)
    h.check(not missing, "the task fired on Kafka")
    h.wait_until(lambda: api.get("/v1/tasks/" + tid).json["status"] ==
                 "delivered", 20, what="delivered, read over HTTPS")
    api.close()


def test_pull_over_https():
    """Pull consumption through TLS: 300 tasks of 500 bytes taken 100 at a
    time (answers larger than a TLS record) and acknowledged, each once; a
    long poll whose client closes (close_notify, FIN) is found gone."""
    topic = "pull-" + h.rand_tag(4)
    h.create_topics(C.brokers, [C.topic(topic)])
    api = C.api()
    r = api.post("/v1/tasks/batch", {"tasks": [
        {"id": "tlsp-%s-%d" % (C.tag, i), "topic": topic, "body": "x" * 500,
         "delay_ms": 0} for i in range(300)]})
    h.check_eq(r.status, 200, "batch: %r" % (r,))
    got, deadline = [], time.monotonic() + 30
    while len(got) < 300 and time.monotonic() < deadline:
        r = api.get("/v1/topics/%s/next?group=g&max=100&wait_ms=3000"
                    % topic)
        h.check_eq(r.status, 200, "next over HTTPS: %r" % (r,))
        got += r.json["tasks"]
        a = api.post("/v1/topics/%s/ack" % topic, {
            "group": "g", "receipts": [t["receipt"] for t in
                                       r.json["tasks"]]})
        h.check_eq(a.json["unknown"], [], "ack over HTTPS")
    h.check_eq(sorted(t["id"] for t in got),
               sorted("tlsp-%s-%d" % (C.tag, i) for i in range(300)),
               "each task once")

    def pull_metric(name):
        for line in api.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None
    gone = pull_metric("prophet_pull_clients_gone_total")
    # On a topic of its own: a new group reads a topic from its start, so
    # on the first one the 300 tasks would answer the poll (it waited only
    # until they were fetched, which a slow run did before the check).
    empty = "pull-" + h.rand_tag(4)
    h.create_topics(C.brokers, [C.topic(empty)])
    s = tls_connect(C.manager_addr, client_ctx())
    s.sendall(("GET /v1/topics/%s/next?group=lp&wait_ms=20000 HTTP/1.1\r\n"
               "Host: x\r\n\r\n" % empty).encode())
    h.wait_until(lambda: pull_metric("prophet_pull_waiting_requests") == 1,
                 5, 0.1, "the poll waiting")
    s.close()
    h.wait_until(lambda: pull_metric("prophet_pull_waiting_requests") == 0,
                 5, 0.1, "the poll of the gone client freed")
    h.check_eq(pull_metric("prophet_pull_clients_gone_total") - gone, 1,
               "prophet_pull_clients_gone_total")
    api.close()


def prophetctl(*args):
    return subprocess.run([PROPHETCTL, "-c", C.conf_path] + list(args),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=60)


def test_prophetctl_https():
    p = prophetctl("push", "--topic", TOPIC, "--body", "ctl", "--delay",
                   "1h")
    h.check_eq(p.returncode, 0, "prophetctl push over HTTPS: %s" % p.stdout)
    p = prophetctl("--cacert", PKI.other_ca, "cluster")
    h.check_eq(p.returncode, 1, "an untrusted certificate refused")
    h.check("certificate" in p.stdout.lower() or "ssl" in p.stdout.lower(),
            "the message says why: %r" % p.stdout)
    h.check("--cacert or http.tls_ca" in p.stdout,
            "the message names what to check: %r" % p.stdout)
    p = prophetctl("--cacert", PKI.other_ca, "--insecure", "cluster")
    h.check_eq(p.returncode, 0, "--insecure: %s" % p.stdout)
    # http:// to the HTTPS port: curl's "Empty reply from server" alone
    # did not say why.
    p = prophetctl("--url", "http://" + C.manager_addr, "cluster")
    h.check(p.returncode == 1 and "HTTPS port?" in p.stdout,
            "plain http:// to the HTTPS port: %r" % p.stdout)


def test_prophetctl_errors_hide_url_password():
    """--url with a password (a manager behind a proxy with basic auth):
    prophetctl's error messages quoted the URL whole, password included,
    and told the operator of a port nobody listens on, or of a host that
    does not resolve, to give a client certificate."""
    secret = "pw-" + os.urandom(6).hex() + "-secret"
    port = h.free_port()  # nothing listens there
    cases = [
        ("a closed port", "https://op:%s@127.0.0.1:%d" % (secret, port),
         [], "Failed to connect", False),
        ("an unknown host", "https://op:%s@no-such-host.invalid:%d"
         % (secret, port), [], "resolve", False),
        ("an untrusted certificate", "https://op:%s@%s"
         % (secret, C.manager_addr), ["--cacert", PKI.other_ca],
         "--cacert or http.tls_ca", True),
        ("plain http:// to HTTPS", "http://op:%s@%s"
         % (secret, C.manager_addr), [], "HTTPS port?", False),
    ]
    p = h.Problems()
    for what, url, extra, want, hint in cases:
        r = prophetctl(*(["--url", url] + extra + ["cluster"]))
        out = r.stdout
        p.check(r.returncode == 1, "%s: exit %d: %r"
                % (what, r.returncode, out))
        p.check(secret not in out, "%s: the password printed: %r"
                % (what, out))
        p.check("op:***@" in out and want in out,
                "%s: the masked URL and %r: %r" % (what, want, out))
        p.check(("--client-cert" in out) == hint,
                "%s: the client certificate hint %s: %r"
                % (what, "missing" if hint else "given", out))
    p.raise_if_any("prophetctl's error messages")


def test_plain_http_gets_nothing():
    host, port = C.manager_addr.split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    got = read_all(s)
    h.check(b"HTTP/1." not in got and b"ok" not in got,
            "plain HTTP to the HTTPS listener got an answer: %r" % got[:200])


def test_old_protocols_and_weak_ciphers_refused():
    for what, kw in (
            ("TLS 1.1", {"maximum_version": ssl.TLSVersion.TLSv1_1,
                         "minimum_version": ssl.TLSVersion.TLSv1}),
            ("TLS 1.2 RSA key exchange",
             {"maximum_version": ssl.TLSVersion.TLSv1_2}),
            ("TLS 1.2 CBC", {"maximum_version": ssl.TLSVersion.TLSv1_2})):
        ctx = client_ctx(**kw)
        if what == "TLS 1.1":
            ctx.set_ciphers("ALL:@SECLEVEL=0")
        elif what == "TLS 1.2 RSA key exchange":
            ctx.set_ciphers("AES128-GCM-SHA256")
        else:
            ctx.set_ciphers("ECDHE-RSA-AES128-SHA")
        try:
            tls_connect(C.manager_addr, ctx).close()
            ok = True
        except (ssl.SSLError, ConnectionResetError, OSError):
            ok = False
        h.check(not ok, "%s was accepted" % what)
    for what, kw, ciphers in (
            ("TLS 1.2 ECDHE-GCM", {"maximum_version": ssl.TLSVersion.TLSv1_2},
             "ECDHE-RSA-AES128-GCM-SHA256"),
            ("TLS 1.3", {"minimum_version": ssl.TLSVersion.TLSv1_3}, None)):
        ctx = client_ctx(**kw)
        if ciphers:
            ctx.set_ciphers(ciphers)
        s = tls_connect(C.manager_addr, ctx)
        h.check(s.version() in ("TLSv1.2", "TLSv1.3"), what)
        s.close()
    try:
        tls_connect(C.manager_addr, client_ctx(PKI.other_ca)).close()
        trusted = True
    except ssl.SSLCertVerificationError:
        trusted = False
    h.check(not trusted, "a client trusting another CA accepted the server")


def test_refusals_are_json_through_tls():
    for req, status in ((b"GARBAGE\r\n\r\n", 400),
                        (b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type:"
                         b" application/json\r\nContent-Length: 99999999\r\n"
                         b"\r\n", 413)):
        s = tls_connect(C.manager_addr, client_ctx())
        s.sendall(req)
        got = read_all(s)
        h.check(got.startswith(b"HTTP/1.1 %d " % status),
                "%d over TLS: %r" % (status, got[:120]))
        body = json.loads(got.split(b"\r\n\r\n", 1)[1])
        h.check("error" in body, "JSON error: %r" % body)


def test_worker_metrics_read_over_https():
    api = C.api()
    r = h.wait_until(
        lambda: (lambda j: j if j and j["workers"] and
                 all(w["ok"] for w in j["workers"]) else None)(
            api.get("/v1/cluster/lateness").json), 20,
        what="the manager reads the worker's metrics over HTTPS")
    h.check(all(w["metrics"] == C.workers[0].addr for w in r["workers"]),
            "worker entries: %r" % r["workers"])
    api.close()
    w = h.Api(C.workers[0].addr, cafile=PKI.ca)
    h.check_eq(w.get("/metrics").status, 200, "worker /metrics over HTTPS")
    w.close()
    n = h.Api(NOTIFIER.addr, cafile=PKI.ca)
    h.check_eq(n.get("/healthz").status, 200, "notifier over HTTPS")
    n.close()


def test_notifier_retries_through_https():
    api = C.api()
    tid = "tls-%s-cb" % C.tag
    url = SINK.url("flaky/" + tid)
    r = api.post("/v1/tasks", {"id": tid, "topic": TOPIC, "body": "cb",
                               "delay_ms": 200, "callback": {"url": url}})
    h.check_eq(r.status, 201, "task with a callback")
    h.wait_until(lambda: api.get("/v1/tasks/" + tid).json[
        "callback_status"] == "ok", 60,
        what="the callback retried (its retry task submitted over HTTPS) "
             "and ok")
    h.check(SINK.count(tid) == 2, "called twice: %r" % SINK.paths())
    api.close()


def serial_of(addr):
    s = tls_connect(addr, client_ctx())
    der = s.getpeercert(binary_form=True)
    s.close()
    return der


def test_certificate_reloaded_on_sighup():
    before = serial_of(C.manager_addr)
    cert, key = C.cert_files
    ncert, nkey = PKI.issue("manager2")
    os.replace(ncert, cert)
    os.replace(nkey, key)
    C.manager.signal(signal.SIGHUP)
    h.wait_until(lambda: serial_of(C.manager_addr) != before, 10,
                 what="a new connection gets the new certificate")
    h.check(C.manager.grep("TLS certificate reloaded"), "reload logged")
    # A broken file is refused and the running certificate kept.
    with open(cert, "w") as f:
        f.write("not a certificate\n")
    now = serial_of(C.manager_addr)
    C.manager.signal(signal.SIGHUP)
    h.wait_until(lambda: C.manager.grep("TLS reload failed"), 10,
                 what="the broken reload logged")
    h.check_eq(serial_of(C.manager_addr), now, "the running one kept")
    # So is an expired one (it loaded and was served, every client then
    # refusing it).
    ecert, ekey = PKI.issue("expired", days=-1)
    os.replace(ecert, cert)
    os.replace(ekey, key)
    C.manager.signal(signal.SIGHUP)
    h.wait_until(lambda: C.manager.grep("expired on"), 10,
                 what="the expired certificate refused")
    h.check_eq(serial_of(C.manager_addr), now, "the running one kept")
    h.check_eq(C.api().get("/healthz").status, 200, "still serving")


def resumed(addr, ctx):
    """A request on a new connection, then one more on a connection that
    offers the first one's session: was it resumed?"""
    session = None
    for _ in range(2):
        s = ctx.wrap_socket(socket.create_connection(
            tuple(addr.split(":")), timeout=5), server_hostname="127.0.0.1",
            session=session)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        got = s.recv(4096)  # TLS 1.3: the session tickets came before it
        h.check(got.startswith(b"HTTP/1.1 200"), "answer: %r" % got[:80])
        reused, session = s.session_reused, s.session
        s.close()
    return reused


def test_sessions_resume():
    for v in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = client_ctx(minimum_version=v, maximum_version=v)
        h.check(resumed(C.manager_addr, ctx), "%s session resumed" % v.name)


def test_mutual_tls():
    cert, key = PKI.issue("mtls-server")
    client = PKI.issue("client-1", server=False)
    other = PKI.issue("client-2", ca="other-ca", server=False)
    wcert, wkey = PKI.issue("mtls-worker")
    with h.Cluster(workers=1, name="mtls", conf={
            "http.tls_cert": cert, "http.tls_key": key,
            "http.tls_client_ca": PKI.ca, "http.tls_ca": PKI.ca,
            "http.tls_client_cert": client[0],
            "http.tls_client_key": client[1],
            "worker.http_tls_cert": wcert, "worker.http_tls_key": wkey,
            "worker.http_tls_client_ca": PKI.ca}) as m:
        m.tls_ca = PKI.ca
        m.tls_client = client
        m.start_manager()
        h.check_eq(m.api().get("/healthz").status, 200, "with a client cert")
        # Prophet's own clients present http.tls_client_cert: the
        # manager reading a worker's metrics, prophetctl (they had no
        # such key: a server asking for client certificates shut them
        # out).
        w = m.workers[0]
        w.start()
        wapi = h.Api(w.addr, timeout=2, cafile=PKI.ca, cert=client)

        def ready():
            h.check(w.running(), "the worker exited during startup")
            try:
                return wapi.get("/readyz").status == 200
            except (OSError, ssl.SSLError):
                wapi.close()
                return False
        h.wait_until(ready, 60, 0.1, "the worker over mutual TLS")
        wapi.close()
        h.wait_until(
            lambda: (lambda j: j and j["workers"] and
                     all(x["ok"] for x in j["workers"]))(
                m.api().get("/v1/cluster/lateness").json), 20,
            what="the manager reads the worker's metrics with its client "
                 "certificate")
        ctl = [PROPHETCTL, "-c", m.conf_path]
        p = subprocess.run(ctl + ["cluster"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        h.check_eq(p.returncode, 0, "prophetctl with http.tls_client_cert: "
                   "%s" % p.stdout)
        bare = ctl + ["--set", "http.tls_client_cert=", "--set",
                      "http.tls_client_key="]
        p = subprocess.run(bare + ["cluster"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        h.check(p.returncode == 1 and "--client-cert" in p.stdout,
                "prophetctl without a client certificate: %r" % p.stdout)
        p = subprocess.run(bare + ["--client-cert", client[0],
                                   "--client-key", client[1], "cluster"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60)
        h.check_eq(p.returncode, 0, "prophetctl --client-cert: %s"
                   % p.stdout)
        # A server that verifies client certificates needs a session id
        # context, or every handshake offering a session fails.
        for v in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            ctx = client_ctx(minimum_version=v, maximum_version=v)
            ctx.load_cert_chain(*client)
            h.check(resumed(m.manager_addr, ctx),
                    "%s session resumed with a client certificate" % v.name)
        for what, c in (("no client certificate", None),
                        ("a certificate of another CA", other)):
            ctx = client_ctx()
            if c:
                ctx.load_cert_chain(*c)
            try:
                s = tls_connect(m.manager_addr, ctx)
                # TLS 1.3: the refusal comes with the first read.
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                got = s.recv(4096)
                s.close()
            except (ssl.SSLError, ConnectionResetError, OSError):
                got = b""
            h.check(not got.startswith(b"HTTP/"), "%s: %r" % (what, got))


def test_config_errors_name_the_key():
    for conf, key in (({"http.tls_cert": "/nonexistent.pem",
                        "http.tls_key": "/nonexistent.key"},
                       "/nonexistent.pem"),
                      ({"http.tls_cert": C.cert_files[0]}, "http.tls_key"),
                      ({"http.tls_client_ca": PKI.ca}, "http.tls_cert")):
        args = [h.MANAGER_BIN, "-c", C.conf_path]
        for k in ("http.tls_cert", "http.tls_key", "http.tls_client_ca"):
            args += ["--set", "%s=%s" % (k, conf.get(k, ""))]
        args += ["--set", "http.listen=127.0.0.1:%d" % h.free_port()]
        p = subprocess.run(args, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        h.check(p.returncode != 0, "%r started" % conf)
        h.check(key in p.stdout, "%r: the error names %s: %r"
                % (conf, key, p.stdout[-300:]))
    # a private key others may read: refused, at start and by
    # --check-config, naming the file and what to do
    lcert, lkey = PKI.issue("loose-key")
    os.chmod(lkey, 0o644)
    for extra in ([], ["--check-config"]):
        p = subprocess.run([h.MANAGER_BIN, "-c", C.conf_path, "--set",
                            "http.tls_cert=" + lcert, "--set",
                            "http.tls_key=" + lkey, "--set",
                            "http.listen=127.0.0.1:%d" % h.free_port()] +
                           extra, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        h.check(p.returncode != 0 and lkey in p.stdout and
                "mode 0644" in p.stdout and "chmod 600" in p.stdout,
                "a key of mode 0644 %s: exit %d, %r"
                % (extra, p.returncode, p.stdout[-300:]))
    os.chmod(lkey, 0o640)  # a group may read it
    p = subprocess.run([h.MANAGER_BIN, "-c", C.conf_path, "--set",
                        "http.tls_cert=" + lcert, "--set",
                        "http.tls_key=" + lkey, "--check-config"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=30)
    h.check(p.returncode == 0, "a key of mode 0640: exit %d, %r"
            % (p.returncode, p.stdout[-300:]))
    # --check-config loads them as the start does: an expired
    # certificate passed it, then stopped the manager at start.
    ecert, ekey = PKI.issue("expired-check", days=-1)
    p = subprocess.run([h.MANAGER_BIN, "-c", C.conf_path, "--set",
                        "http.tls_cert=" + ecert, "--set",
                        "http.tls_key=" + ekey, "--check-config"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=30)
    h.check(p.returncode != 0 and "http.tls_cert" in p.stdout and
            "expired" in p.stdout, "--check-config with an expired "
            "certificate: exit %d, %r" % (p.returncode, p.stdout))


def cleanup(failed):
    if NOTIFIER is not None:
        NOTIFIER.stop()
    if READER is not None:
        READER.stop()
    if C is not None:
        C.close(failed=failed)
    if SINK is not None:
        SINK.close()
    # The CAs' and servers' private keys: kept only to look at a failure.
    if PKI is not None and not failed:
        shutil.rmtree(PKI.dir, ignore_errors=True)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
