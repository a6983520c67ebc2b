#!/usr/bin/python3
"""The secure deployment on real servers (scripts/devcluster up --secure):
MariaDB over TLS (VERIFY_IDENTITY) with a user per program, Kafka over
SASL_SSL with a principal per program and ACLs, Redis with an ACL user,
ZooKeeper with digest authentication and ACLs, API tokens; every secret in
a file of mode 600.

  1. the servers refuse strangers (no TLS, no or wrong password, another
     principal's topic, an unauthenticated zkCli writing ws_N or /master);
  2. the 2,000-task check of test_e2e.py over those links;
  3. the notifier's principal, database user and API token (a callback
     retried through the manager), the manager's ingest principal;
  4. the manager repairs the ZooKeeper ACLs of an existing tree;
  5. a wrong password or an untrusted certificate of each link stops the
     daemon at start with a message naming the link;
  6. no secret in any daemon log.

The API is served over HTTPS (http.tls_cert, http.tls_key: HTTPS below),
so the e2e check, the notifier's retries and the clients use it, and a
plain-HTTP client gets no answer (test_plain_http_to_https).
"""

import base64
import hashlib
import http.server
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import test_e2e as e2e  # noqa: E402

# HTTPS for the manager's API (harness.https_conf has the keys it sets);
# it was off until the manager had http.tls_cert, and nothing had turned
# it on since.
HTTPS = True

NOTIFIER_BIN = os.path.join(h.BUILDDIR, "prophet-notifier")
ZKCLI = "/usr/share/zookeeper/bin/zkCli.sh"
CB_TOPIC = "cb"
C = None
NOTIFIER = None
ENDPOINT = None
INGEST = "ingest-" + h.rand_tag()
OTHER = {}  # another CA, and a certificate it signed, for untrusted links
BAD = {}    # secret files holding wrong secrets
LOGS = []   # logs of the daemons started here that must exit at start


class Endpoint:
    """A callback receiver on loopback: /ok answers 200, /flaky 500 on
    the first call of an id and 200 after."""

    def __init__(self):
        self.calls = {}
        self.cond = threading.Condition()
        ep = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                tid = self.headers.get("X-Prophet-Id")
                with ep.cond:
                    ep.calls.setdefault(tid, []).append(self.path)
                    k = len(ep.calls[tid])
                    ep.cond.notify_all()
                code = 500 if self.path == "/flaky" and k == 1 else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever,
                         daemon=True).start()

    def url(self, path):
        return "http://127.0.0.1:%d/%s" % (self.port, path)

    def wait(self, tid, n, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.calls.get(tid, [])) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True


def openssl(*args):
    p = subprocess.run(["openssl"] + list(args), capture_output=True,
                       text=True)
    h.check(p.returncode == 0, "openssl %s: %s" % (args[0], p.stderr))


def make_other_ca(d):
    """A CA that signed nothing of the dev cluster's, and a server
    certificate for 127.0.0.1 it signed."""
    ca, cakey = os.path.join(d, "other-ca.pem"), os.path.join(d, "other.key")
    crt, key = os.path.join(d, "other-srv.pem"), os.path.join(d, "other-srv.key")
    ext = os.path.join(d, "other.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=not the devcluster CA", "-keyout", cakey,
            "-out", ca)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
            "-keyout", key, "-out", crt + ".csr")
    openssl("x509", "-req", "-in", crt + ".csr", "-CA", ca, "-CAkey", cakey,
            "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", crt)
    OTHER.update(ca=ca, cert=crt, key=key)


def bad_secret(name, text):
    path = os.path.join(C.dir, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, (text + "\n").encode())
    os.close(fd)
    BAD[name] = path
    return path


def tls_server(certfile, keyfile):
    """An HTTPS server answering 200 to anything, with that certificate:
    the notifier must not believe it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certfile, keyfile)

    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def setup():
    global C, NOTIFIER, ENDPOINT
    ENDPOINT = Endpoint()
    nport = h.free_port()
    C = h.Cluster(workers=2, name="secure", secure=True, https=HTTPS, conf={
        "worker.lease_ms": e2e.LEASE_MS,
        "zookeeper.session_timeout_ms": e2e.SESSION_MS,
        "kafka.ingest_topic": INGEST,
        "notifier.topics": CB_TOPIC,
        "notifier.http_listen": "127.0.0.1:%d" % nport,
        "notifier.backoff_base_ms": 200,
        "notifier.callback_networks_allowed": "127.0.0.0/8",
    }).open()
    make_other_ca(C.dir)
    h.create_topics(C.brokers, [C.topic(t) for t in e2e.TOPICS + [CB_TOPIC]]
                    + [INGEST, INGEST + ".errors",
                       C.topic("prophet.callback-retry")],
                    kcat_args=C.kcat_args)
    C.start()
    NOTIFIER = h.Proc("notifier", [
        NOTIFIER_BIN, "-c", C.conf_path,
        "--set", "kafka.consumer.topic.metadata.refresh.interval.ms=1000"],
        os.path.join(C.dir, "notifier.log"))
    NOTIFIER.addr = "127.0.0.1:%d" % nport
    C.workers.append(NOTIFIER)  # cleanup and log dumps include it
    NOTIFIER.start()
    C._wait_http(NOTIFIER, NOTIFIER.addr, "/readyz", 60)
    e2e.C = C
    e2e.READER = C.reader(e2e.TOPICS)


# ----------------------------------------------------------------- tests ---

def run(argv, timeout=30, env=None):
    return subprocess.run(argv, capture_output=True, text=True,
                          timeout=timeout, env=env)


def kcat_conf(user, password, mechanism="PLAIN"):
    path = os.path.join(C.dir, "kcat-%s.conf" % user)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, ("security.protocol=SASL_SSL\nsasl.mechanism=%s\n"
                  "sasl.username=%s\nsasl.password=%s\nssl.ca.location=%s\n"
                  % (mechanism, user, password, C.ca)).encode())
    os.close(fd)
    return path


def test_servers_refuse_strangers():
    p = h.Problems()
    # MariaDB: TCP only with TLS; the daemons' users need it too
    r = run(["mariadb", "--no-defaults", "--skip-ssl", "-h", C.db_host,
             "-P", str(C.db_port), "-u", C.db_user, "-e", "SELECT 1"],
            env=dict(os.environ, MYSQL_PWD=C.db_password))
    p.check(r.returncode != 0, "mariadb without TLS was let in")
    p.check(C.mysql("SELECT @@require_secure_transport") == [["1"]],
            "require_secure_transport is off")
    p.check(C.mysql("SELECT variable_value FROM information_schema."
                    "session_status WHERE variable_name = 'Ssl_cipher'")
            [0][0] not in (None, ""), "the harness' own session is not TLS")

    # Kafka: no plaintext listener, no login without the password, and a
    # principal reads only what its ACLs give it
    r = run(["kcat", "-b", C.brokers, "-L", "-m", "3"], timeout=20)
    p.check(r.returncode != 0 or "broker 1 at" not in r.stdout,
            "kcat over PLAINTEXT got metadata: %s" % r.stdout[:200])
    r = run(["kcat", "-F", kcat_conf("prophet-worker", "wrong-" + C.tag),
             "-b", C.brokers, "-L", "-m", "3"], timeout=20)
    p.check(r.returncode != 0 and "uthentication" in r.stderr,
            "a wrong Kafka password: %r" % r.stderr[-300:])
    worker_pw = h.read_secret(C.env["PROPHET_KAFKA_WORKER_PASSWORD_FILE"])
    r = run(["kcat", "-F", kcat_conf("prophet-worker", worker_pw), "-b",
             C.brokers, "-C", "-t", C.topic("orders"), "-o", "beginning",
             "-e", "-q"], timeout=20)
    p.check(r.returncode != 0 and "uthoriz" in r.stderr,
            "the worker's principal could read a task topic: rc %d %r"
            % (r.returncode, r.stderr[-300:]))

    # Redis: nothing without AUTH; Prophet's user neither flushes nor
    # touches keys that are not Prophet's
    s = socket.create_connection((C.redis_host, C.redis_port), timeout=5)
    s.sendall(b"*1\r\n$4\r\nPING\r\n")
    p.check(s.recv(200).startswith(b"-NOAUTH"), "PING without AUTH answered")
    s.close()
    pw = h.read_secret(C.env["PROPHET_REDIS_PASSWORD_FILE"])
    r = h.Redis(C.redis_host, C.redis_port, C.redis_db, password=pw,
                user="prophet")
    # nor other users' functions and scripts (harmless forms: they would
    # answer "no such library" and NOTBUSY if allowed)
    for cmd in (["FLUSHDB"], ["GET", "not-prophet"], ["CONFIG", "GET", "*"],
                ["FUNCTION", "DELETE", "not-prophet"], ["SCRIPT", "KILL"],
                ["FCALL", "not-prophet", "0"]):
        try:
            r.cmd(*cmd)
            p.add("redis user prophet may %s" % " ".join(cmd))
        except RuntimeError as e:
            p.check("NOPERM" in str(e), "%s: %s" % (cmd, e))
    r.close()

    # ZooKeeper: an unauthenticated zkCli reads, but cannot set or delete
    # a slot node or /master
    slot = C.zk_root + "/work_slot/ws_3"
    master = C.zk_root + "/master"
    z = h.ZK(C.env["PROPHET_ZK"])
    before = {n: z.get(n) for n in (slot, master)}
    z.close()
    p.check(before[master] is not None, "no %s" % master)
    for args, want in (
            (["get", slot], '"slot":3'),
            (["set", slot, '{"slot":3,"owner":"mallory","epoch":99}'],
             "Insufficient permission"),
            (["delete", slot], "Insufficient permission"),
            (["set", master, '{"id":"mallory"}'], "Insufficient permission"),
            (["delete", master], "Insufficient permission"),
            (["create", C.zk_root + "/workers/mallory", "{}"],
             "Insufficient permission")):
        r = run([ZKCLI, "-server", C.env["PROPHET_ZK"]] + args, timeout=60)
        p.check(want in r.stdout + r.stderr, "zkCli %s: want %r, got %r"
                % (" ".join(args[:2]), want, (r.stdout + r.stderr)[-300:]))
    z = h.ZK(C.env["PROPHET_ZK"])
    for n, data in before.items():
        p.check(z.get(n) == data, "%s changed by a stranger" % n)
    acl = sorted(z.get_acl(slot))
    z.close()
    p.check(len(acl) == 2 and acl[0][0] == 1 and acl[0][1:] ==
            ("world", "anyone") and acl[1][0] == 31 and
            acl[1][1] == "digest" and acl[1][2].startswith("prophet:"),
            "ACL of %s: %r" % (slot, acl))
    p.raise_if_any("strangers")


def doc_grants():
    """{user: set of privileges} of the GRANT lines in docs/security.md."""
    grants = {}
    with open(os.path.join(h.REPO, "docs", "security.md")) as f:
        for line in f:
            m = re.match(r"GRANT (.*) ON prophet\.\* TO '(prophet_\w+)'@",
                         line)
            if m:
                grants[m.group(2)] = {x.strip() for x in
                                      m.group(1).split(",")}
    return grants


def as_user(program, sql):
    """sql run as the database user of program (worker, notifier,
    manager), over TLS: (exit code, stdout, stderr)."""
    user = C.env["PROPHET_DB_%s_USER" % program.upper()]
    pw = h.read_secret(C.env["PROPHET_DB_%s_PASSWORD_FILE"
                             % program.upper()])
    return run(["mariadb", "--no-defaults", "-N", "-B", "-u", user,
                "-h", C.db_host, "-P", str(C.db_port),
                "--ssl-ca=" + C.ca, "--ssl-verify-server-cert",
                C.db_name, "-e", sql],
               env=dict(os.environ, MYSQL_PWD=pw))


def test_database_users_least_privilege():
    """Each program's database user has the GRANTs docs/security.md
    gives, and they are the least it needs: the workers and notifiers
    read, insert and update rows (the e2e and callback tests run on
    them) but delete none, so a stolen worker or notifier password
    cannot delete tasks (only the manager's pruner deletes); only the
    manager changes the schema, and it drops nothing."""
    want = doc_grants()
    p = h.Problems()
    p.check(set(want) == {"prophet_manager", "prophet_worker",
                          "prophet_notifier"},
            "GRANT lines in docs/security.md: %r" % want)
    for program in ("manager", "worker", "notifier"):
        user = C.env["PROPHET_DB_%s_USER" % program.upper()]
        r = as_user(program, "SHOW GRANTS FOR CURRENT_USER")
        got = set()
        for line in r.stdout.splitlines():
            m = re.match(r"GRANT (.*) ON `prophet%`\.\* TO", line)
            if m:
                got |= {x.strip() for x in m.group(1).split(",")}
        p.check(r.returncode == 0 and got == want.get(user),
                "%s: grants %r, docs/security.md %r (%s)"
                % (user, sorted(got), sorted(want.get(user, ())),
                   r.stderr.strip()))
        r = as_user(program, "SELECT COUNT(*) FROM tasks")
        p.check(r.returncode == 0, "%s cannot read tasks: %s"
                % (user, r.stderr.strip()))
        r = as_user(program, "DELETE FROM tasks WHERE id = 'lp-none'")
        if program == "manager":
            p.check(r.returncode == 0, "the manager's user cannot delete "
                    "(the pruner does): %s" % r.stderr.strip())
        else:
            p.check(r.returncode != 0 and "DELETE command denied"
                    in r.stderr, "%s may delete tasks: rc %d %s"
                    % (user, r.returncode, r.stderr.strip()))
        if program != "manager":
            r = as_user(program, "CREATE TABLE lp_probe (a INT)")
            p.check(r.returncode != 0 and "CREATE command denied"
                    in r.stderr, "%s may create tables: %s"
                    % (user, r.stderr.strip()))
    r = as_user("manager", "CREATE TABLE IF NOT EXISTS lp_probe (a INT)")
    p.check(r.returncode == 0, "the manager's user cannot create tables: "
            "%s" % r.stderr.strip())
    r = as_user("manager", "DROP TABLE lp_probe")
    p.check(r.returncode != 0 and "DROP command denied" in r.stderr,
            "the manager's user may drop tables: %s" % r.stderr.strip())
    C.mysql("DROP TABLE IF EXISTS lp_probe")
    p.raise_if_any("database users")


def test_e2e_over_secure_links():
    """test_e2e.py's 2,000 tasks: submitted with a token (over HTTPS with
    HTTPS on), stored over TLS, published through SASL_SSL by the
    workers' principal, slots coordinated under ACLs."""
    e2e.test_exactly_once_in_time_and_intact()


def test_exactly_once_with_the_documented_acls():
    """kafka.exactly_once on the secure links, with the ACLs of
    docs/security.md (devcluster kafka-acls): the worker's principal had
    no TransactionalId ACL (\"Transactional Id authorization failed\":
    nothing fired) nor Read on the marker topic and the read-back group
    (a restarted worker's slots stayed \"not opened\": nothing fired).
    Tasks fire before and after the worker restarts."""
    with h.Cluster(workers=1, name="seceos", secure=True, https=HTTPS,
                   conf={"kafka.exactly_once": "true"}) as c:
        h.create_topics(c.brokers, [c.topic("eos")], kcat_args=c.kcat_args)
        c.start()
        api = c.api()
        w = c.workers[0]

        def fired(tag, n=5):
            ids = ["%s-%s-%d" % (tag, c.tag, i) for i in range(n)]
            for tid in ids:
                r = api.post("/v1/tasks", {"id": tid, "topic": "eos",
                                           "body": "b", "delay_ms": 200})
                h.check_eq(r.status, 201, "task %s: %r" % (tid, r.json))

            def done():
                return all(api.get("/v1/tasks/" + tid).json["status"] ==
                           "delivered" for tid in ids)
            try:
                h.wait_until(done, 45, 0.5, "%s delivered" % tag)
            except h.TestFailure as e:
                raise h.TestFailure("%s; the worker: %s" % (e, [
                    l[-200:] for l in w.grep("authorization failed")][-2:]))

        fired("first")
        w.stop()
        c.start_worker(0)
        fired("after-restart")
        # Refused by an ACL, a slot stays closed; a retry after a
        # transient answer (the marker topic's leader not elected yet:
        # "Not leader for partition") is how opening works.
        refused = [l for l in w.grep("slot not opened")
                   if "authorization" in l.lower()]
        h.check(not refused, "slots not opened: %r" % refused[-1:])
        api.close()


def test_notifier_and_ingest_principals():
    api = C.api()
    tasks = [{"id": "cb-ok-" + C.tag, "topic": CB_TOPIC, "body": "b",
              "delay_ms": 0, "callback": {"url": ENDPOINT.url("ok")}},
             {"id": "cb-flaky-" + C.tag, "topic": CB_TOPIC, "body": "b",
              "delay_ms": 0, "callback": {"url": ENDPOINT.url("flaky")}}]
    for t in tasks:
        r = api.post("/v1/tasks", t)
        h.check(r.status == 201, "submit %s: %r" % (t["id"], r))
    h.check(ENDPOINT.wait(tasks[0]["id"], 1, 60), "callback not made")
    # the second call needs a retry task, submitted by the notifier with
    # its token, fired by a worker, consumed by the notifier
    h.check(ENDPOINT.wait(tasks[1]["id"], 2, 60), "callback not retried")

    def done():
        st = [api.get("/v1/tasks/" + t["id"]).json.get("callback_status")
              for t in tasks]
        return st == ["ok", "ok"] and st
    h.wait_until(done, 30, 0.3, "callback_status ok (the notifier's DB "
                 "user records it)")

    # a submission through Kafka, read by the manager's ingest principal
    tid = "via-kafka-" + C.tag
    p = subprocess.run(["kcat"] + C.kcat_args + ["-P", "-b", C.brokers,
                                                 "-t", INGEST],
                       input=json.dumps({"id": tid, "topic": "orders",
                                         "body": "k", "delay_ms": 0}) + "\n",
                       capture_output=True, text=True, timeout=60)
    h.check(p.returncode == 0, "kcat -P: %s" % p.stderr)
    h.wait_until(lambda: api.get("/v1/tasks/" + tid).status == 200, 60, 0.3,
                 "the ingested task")
    h.check(not e2e.READER.wait_for([tid], 30), "ingested task not fired")
    api.close()


def test_manager_repairs_zk_acls():
    z = C.zk()
    slot = C.zk_root + "/work_slot/ws_5"
    cfg = C.zk_root + "/config"
    open_acl = [(31, "world", "anyone")]
    for n in (slot, cfg):
        h.check_eq(z.set_acl(n, open_acl), 0, "setAcl %s" % n)
    C.manager.stop()
    C.start_manager()
    p = h.Problems()
    for n in (slot, cfg):
        acl = sorted(z.get_acl(n))
        p.check([a[0] for a in acl] == [1, 31] and acl[1][1] == "digest",
                "%s not repaired: %r" % (n, acl))
    z.close()
    p.check(C.manager.grep("zookeeper ACLs repaired"),
            "no 'zookeeper ACLs repaired' in the manager's log")
    p.raise_if_any("ACL repair")


def test_master_refused_by_rotated_acl_says_so():
    """operations.md's ZooKeeper password rotation gives the tree another
    identity while workers still run with the old one: the master's
    assignment writes are refused. It logged 'assignment write refused,
    retrying' about 45 times a second; now one error naming the
    credentials, retried each second, and through once the ACL is back."""
    def acl(auth):
        d = hashlib.sha1(auth.encode()).digest()
        return [(31, "digest", "prophet:" + base64.b64encode(d).decode()),
                (1, "world", "anyone")]

    z = C.zk()
    root = C.zk_root + "/work_slot"
    slots = [root + "/" + n for n in z.children(root)]
    for n in slots:
        h.check_eq(z.set_acl(n, acl("prophet:rotated-" + C.tag)), 0,
                   "setAcl " + n)
    w = C.add_worker()
    C.start_worker(w, wait=False)  # a member more: the master rebalances
    try:
        h.wait_until(lambda: any(p.grep("assignment write refused by the "
                                        "tree's ACL") for p in C.workers),
                     30, what="the master naming the refusal")
        h.check(any(p.grep("zookeeper.auth_file") for p in C.workers),
                "the refusal names zookeeper.auth_file")
    finally:
        ours = acl(h.read_secret(C.conf_dict()["zookeeper.auth_file"]))
        for n in slots:
            h.check_eq(z.set_acl(n, ours), 0, "setAcl back " + n)
        z.close()
    # The next try (within a second) writes the assignment.
    C._wait_http(w, w.addr, "/readyz", 60)
    h.wait_until(lambda: w.grep("slot gained"), 30,
                 what="the new worker given slots")
    w.stop()


def start_fails(prog, overrides, want, name):
    """Starts prog with the cluster's configuration and overrides (keys of
    pass-through sections, kafka.producer.x, as --set): it must exit
    non-zero within 30 s, its own output holding every string of want.
    Returns the seconds it took and its last fatal line."""
    sets = [k + "=" + v for k, v in overrides.items()
            if k.startswith("kafka.producer.")]
    overrides = {k: v for k, v in overrides.items()
                 if not k.startswith("kafka.producer.")}
    conf = C.conf_dict()
    conf.update(overrides)
    path = os.path.join(C.dir, "bad-%s.conf" % name)
    C.write_conf(path, conf)
    binary = {"manager": h.MANAGER_BIN, "worker": h.WORKER_BIN,
              "notifier": NOTIFIER_BIN}[prog]
    argv = [binary, "-c", path]
    for kv in sets:
        argv += ["--set", kv]
    if prog == "worker":
        argv += ["--set", "worker.id=bad-" + name,
                 "--set", "worker.http_listen=127.0.0.1:%d" % h.free_port()]
    if prog == "manager":
        argv += ["--set", "http.listen=127.0.0.1:%d" % h.free_port()]
    if prog == "notifier":
        argv += ["--set", "notifier.http_listen=127.0.0.1:%d"
                 % h.free_port()]
    proc = h.Proc("bad-" + name, argv, os.path.join(C.dir, "bad-%s.log"
                                                    % name))
    LOGS.append(proc.log_path)
    t0 = time.monotonic()
    proc.start()
    rc = proc.wait(30)
    took = time.monotonic() - t0
    if rc is None:
        proc.kill()
        raise h.TestFailure("%s: %s still running after 30 s" % (name, prog))
    out = "\n".join(l for l in proc.tail(200)
                    if not l.startswith("=== harness"))
    if rc == 0 or not all(w in out for w in want):
        raise h.TestFailure("%s: %s exit %s, want %r in:\n%s"
                            % (name, prog, rc, want, out[-1500:]))
    return took, [l for l in out.splitlines()
                  if "fatal" in l or "config:" in l][-1:]


def test_wrong_credentials_fail_at_start():
    bad_pw = bad_secret("bad.pass", "wrong-" + C.tag)
    bad_zk = bad_secret("bad-zk.auth", "prophet:wrong-" + C.tag)
    bad_tok = bad_secret("bad.token", "wrong-token-" + C.tag + "-xxxxxx")
    fake = tls_server(OTHER["cert"], OTHER["key"])
    fake_url = "https://127.0.0.1:%d" % fake.server_address[1]
    if HTTPS:
        # the real manager's certificate, checked against another CA
        untrusted_manager = {"http.tls_ca": OTHER["ca"]}
    else:
        untrusted_manager = {"notifier.manager_url": fake_url,
                             "http.tls_ca": C.ca}
    cases = [
        ("zk-password", "worker", {"zookeeper.auth_file": bad_zk},
         ["zookeeper refused the credentials", "zookeeper.auth_file",
          "wrong password"]),
        ("zk-none", "manager", {"zookeeper.auth_file": ""},
         ["zookeeper", "protected by an ACL", "set zookeeper.auth_file"]),
        ("redis-password", "worker", {"redis.password_file": bad_pw},
         ["redis refused the credentials", "WRONGPASS",
          "redis.password_file"]),
        ("redis-none", "manager", {"redis.password_file": "",
                                   "redis.url": "redis://%s:%d/0" % (
                                       C.redis_host, C.redis_port)},
         ["redis refused the credentials", "NOAUTH"]),
        ("redis-tls", "manager", {"redis.url": "rediss://%s:%s/0" % (
            C.redis_host, C.env["PROPHET_REDIS_TLS_PORT"])},
         ["redis.url", "hiredis_ssl"]),
        ("db-password", "manager", {"db.password_file": bad_pw},
         ["database refused the connection", "Access denied",
          "db.password_file"]),
        ("db-untrusted", "worker", {"db.tls_ca": OTHER["ca"]},
         ["database refused the connection", "db.tls_ca"]),
        ("db-plain", "notifier", {"db.tls_mode": "DISABLED", "db.tls_ca": ""},
         ["database refused the connection", "requires TLS"]),
        ("kafka-password", "worker",
         {"kafka@worker.sasl_password_file": bad_pw},
         ["kafka refused the connection", "authentication",
          "kafka.sasl_password_file"]),
        ("kafka-untrusted", "notifier", {"kafka.tls_ca": OTHER["ca"]},
         ["kafka refused the connection: TLS", "kafka.tls_ca"]),
        ("kafka-scram", "worker", {"kafka.sasl_mechanism": "SCRAM-SHA-512"},
         ["kafka refused the connection", "before 2.6.1", "PLAIN"]),
        ("kafka-safety", "worker",
         {"kafka.producer.enable.idempotence": "false"},
         ["kafka.producer.enable.idempotence", "safety"]),
        ("api-token", "notifier", {"http@notifier.token_file": bad_tok},
         ["the manager refuses the notifier's token", "401"]),
        ("api-untrusted", "notifier", untrusted_manager,
         ["the manager's TLS certificate is not trusted",
          "http.tls_ca"]),
    ]
    p = h.Problems()
    try:
        for name, prog, over, want in cases:
            try:
                took, line = start_fails(prog, over, want, name)
                h.log("%-16s %-8s exit after %.1fs: %s"
                      % (name, prog, took, line[0][:220] if line else "?"))
            except h.TestFailure as e:
                p.add(str(e))
    finally:
        fake.shutdown()
        fake.server_close()
    p.raise_if_any("start with a wrong secret or certificate")


def test_notifier_without_zk_credentials_says_so():
    """A notifier without zookeeper.auth_file runs (ZooKeeper is not
    needed for callbacks) but cannot announce itself in the protected
    tree: it names the key, where it logged 'not authenticated' every 2 s."""
    conf = C.conf_dict()
    conf["zookeeper.auth_file"] = ""
    conf["notifier.http_listen"] = "127.0.0.1:%d" % h.free_port()
    path = os.path.join(C.dir, "notifier-nozk.conf")
    C.write_conf(path, conf)
    proc = h.Proc("notifier-nozk", [NOTIFIER_BIN, "-c", path],
                  os.path.join(C.dir, "notifier-nozk.log"))
    LOGS.append(proc.log_path)
    proc.start()
    try:
        h.wait_until(lambda: proc.grep("set zookeeper.auth_file"), 30,
                     what="the notifier naming zookeeper.auth_file")
    finally:
        proc.stop()


def loose_copy(key, mode):
    """A copy of the file conf's key names, with mode."""
    path = os.path.join(C.dir, "loose-" + key)
    with open(C.conf_dict()[key]) as src, open(path, "w") as f:
        f.write(src.read())
    os.chmod(path, mode)
    return path


def test_check_config_refuses_what_start_refuses():
    """--check-config passed configurations the daemon then refused at
    start: a tokens file others may read (the manager's), the notifier's
    ZooKeeper credentials (it announces itself in the tree), a sasl_ssl
    manager without its principal, a CA file that does not exist."""
    cases = [
        (h.MANAGER_BIN, {"http.tokens_file":
                         loose_copy("http.tokens_file", 0o640)},
         "http.tokens_file"),
        (NOTIFIER_BIN, {"zookeeper.auth_file":
                        loose_copy("zookeeper.auth_file", 0o644)},
         "zookeeper.auth_file"),
        (h.MANAGER_BIN, {"kafka@manager.sasl_username": ""},
         "kafka.sasl_username"),
        # and at start too, naming the key: a CA file that is not there
        (h.WORKER_BIN, {"kafka.tls_ca": C.dir + "/no-such-ca.pem"},
         "kafka.tls_ca: " + C.dir + "/no-such-ca.pem"),
        (NOTIFIER_BIN, {"db.tls_ca": C.dir + "/no-such-ca.pem"},
         "db.tls_ca: " + C.dir + "/no-such-ca.pem"),
    ]
    p = h.Problems()
    for i, (binary, over, key) in enumerate(cases):
        conf = C.conf_dict()
        conf.update(over)
        path = os.path.join(C.dir, "check-%d.conf" % i)
        C.write_conf(path, conf)
        r = run([binary, "-c", path, "--check-config"])
        p.check(r.returncode != 0 and key in r.stderr,
                "%s --check-config with %r: exit %d, %r"
                % (os.path.basename(binary), over, r.returncode,
                   (r.stdout + r.stderr).strip()))
    p.raise_if_any("--check-config")


if HTTPS:
    def test_plain_http_to_https():
        """A plain HTTP client on the HTTPS listener: no answer of the
        API (no status line, no JSON), the connection closed."""
        host, port = C.manager_addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\n"
                  b"Authorization: Bearer " + C.token.encode() + b"\r\n\r\n")
        got = b""
        try:
            while len(got) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        s.close()
        h.check(not got.startswith(b"HTTP/") and b"slots" not in got,
                "plain HTTP got an answer: %r" % got[:200])


def test_no_secret_in_logs():
    """Every password, token and credential of the secure cluster (and
    the wrong ones tried above) absent from every daemon log."""
    secrets_dir = os.path.dirname(C.env["PROPHET_API_TOKENS_FILE"])
    secrets = set()
    for name in os.listdir(secrets_dir):
        if name.endswith(".pass") or name.endswith(".token"):
            secrets.add(h.read_secret(os.path.join(secrets_dir, name)))
        if name.endswith(".auth"):
            secrets.add(h.read_secret(os.path.join(secrets_dir,
                                                   name)).split(":", 1)[1])
    for path in BAD.values():
        secrets.add(h.read_secret(path).split(":")[-1])
    secrets = {s for s in secrets if len(s) >= 8}
    h.check(len(secrets) >= 10, "only %d secrets found" % len(secrets))
    logs = [p.log_path for p in [C.manager] + C.workers] + LOGS
    p = h.Problems()
    lines = 0
    for path in logs:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        lines += text.count("\n")
        for s in secrets:
            p.check(s not in text, "%s holds a secret (%s...)"
                    % (path, s[:4]))
    h.log("%d secrets looked for in %d lines of %d logs"
          % (len(secrets), lines, len(logs)))
    p.raise_if_any("secrets in logs")


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)
    if ENDPOINT is not None:
        ENDPOINT.server.shutdown()


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
