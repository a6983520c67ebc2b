"""Shared helpers of the Prophet integration tests (Debian's Python 3 with
python3-pytest as the runner, python3-redis and python3-kazoo as the Redis
and ZooKeeper clients).

Every test gets an isolated namespace on the shared dev cluster
(scripts/devcluster): its own ZooKeeper root, MariaDB database, Redis db
number, Kafka topic prefix and TCP ports, so that several test runs (and
other people) can use the same servers at once.

    import harness as h
    with h.Cluster(workers=2, conf={"worker.lease_ms": 3000}) as c:
        c.start()                        # manager, then the workers, ready
        r = c.api().post("/v1/tasks", {...})   # r.status, r.json
        rd = c.reader(["orders"])        # Kafka topic <prefix>orders
        rd.wait_for(ids, timeout=10)
        c.workers[1].kill(); c.start_worker(1)
        c.mysql("SELECT status FROM tasks WHERE id = 'x'")

With secure=True the cluster runs on the secure dev cluster instead
(scripts/devcluster up --secure, run dir PROPHET_SECURE_RUN_DIR, default
<repo>/run-secure): TLS to MariaDB and Kafka, passwords from files, a
database user and a Kafka principal per program, ZooKeeper ACLs, API
tokens (c.api() sends the admin token); https=True also serves the API
over HTTPS (c.api() verifies it with the dev CA).

    with h.Cluster(workers=2, secure=True) as c: ...

A test file is a script: define test_* functions and end with
`h.main(globals())` (or call run_tests() with a shared cluster): pytest
runs the test_* functions in their order, and the harness prints
`ok N - name` / `not ok N - name` lines and a summary, and exits 0 only if
every test passed. Environment: PROPHET_BUILDDIR (binaries; default
<repo>/build), PROPHET_INTEG_ONLY (run tests whose name contains it),
PROPHET_INTEG_KEEP=1 (keep the logs' temp dir), PROPHET_INTEG_SEED (e2e).
"""

import atexit
import calendar
import fcntl
import http.client
import http.server
import json
import logging
import os
import random
import shlex
import shutil
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types

# Debian's python3-pytest, python3-redis and python3-kazoo (scripts/deps);
# the tests run on Debian's interpreter (/usr/bin/python3, Makefile.am).
import pytest
import redis as _redis
from kazoo import exceptions as _kze
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL, Id

# kazoo's own warnings (a dropped connection while a test restarts
# ZooKeeper, on purpose) are not the test's output.
logging.getLogger("kazoo").setLevel(logging.ERROR)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILDDIR = os.environ.get("PROPHET_BUILDDIR") or os.path.join(REPO, "build")
MANAGER_BIN = os.path.join(BUILDDIR, "prophet-manager")
WORKER_BIN = os.path.join(BUILDDIR, "prophet-worker")
NOTIFIER_BIN = os.path.join(BUILDDIR, "prophet-notifier")
LOCK_DIR = os.environ.get("PROPHET_INTEG_LOCKDIR",
                          os.path.join(tempfile.gettempdir(),
                                       "prophet-integ-locks"))
KEEP = os.environ.get("PROPHET_INTEG_KEEP") == "1"
# setpriv --pdeathsig: children die with the test runner, even on SIGKILL.
_SETPRIV = shutil.which("setpriv")


class TestFailure(AssertionError):
    pass


def log(msg):
    """A diagnostic line (TAP comment)."""
    for line in str(msg).splitlines() or [""]:
        print("# " + line, flush=True)


def now_ms():
    return int(time.time() * 1000)


def check(cond, msg="check failed"):
    if not cond:
        raise TestFailure(msg)


def check_eq(got, want, what="value"):
    if got != want:
        raise TestFailure("%s: got %r, want %r" % (what, got, want))


def wait_until(fn, timeout, interval=0.05, what="condition"):
    """Polls fn() until it returns a true value; returns that value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TestFailure("timed out after %.1fs waiting for %s"
                              % (timeout, what))
        time.sleep(interval)


def rand_tag(n=8):
    return "%0*x" % (n, random.SystemRandom().getrandbits(4 * n))


_GIVEN_PORTS = set()


def free_port():
    """A port free now and not handed out before by this process: the
    kernel may offer a port again while the first taker has not bound it
    yet (test_tls once gave its notifier the manager's port)."""
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        finally:
            s.close()
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


# --------------------------------------------------------------- cluster ---

_ENV = None
_SECURE_ENV = None
_HA_ENV = None
SECURE_RUN_DIR = os.environ.get("PROPHET_SECURE_RUN_DIR") or \
    os.path.join(REPO, "run-secure")
HA_RUN_DIR = os.environ.get("PROPHET_HA_RUN_DIR") or \
    os.path.join(REPO, "run-ha")


def read_secret(path):
    """The one line a secret file holds."""
    with open(path) as f:
        return f.read().rstrip("\r\n")


def _read_env(run):
    env = {}
    with open(os.path.join(run, "devcluster.env")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            k, v = line.split("=", 1)
            parts = shlex.split(v)
            env[k] = parts[0] if parts else ""
    return env


class machine_lock:
    """with machine_lock("name"): one holder at a time on this machine
    (test programs of both builds run at once: a test that changes a
    shared server's settings for a moment holds it)."""

    def __init__(self, name):
        self.name = name
        self.fd = None

    def __enter__(self):
        os.makedirs(LOCK_DIR, exist_ok=True)
        self.fd = os.open(os.path.join(LOCK_DIR, self.name + ".lock"),
                          os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)
        return False


def _devcluster(args, env=None):
    """scripts/devcluster with args, one call at a time on this machine
    (test programs run three at a time: their calls would race on the run
    dir's files)."""
    os.makedirs(LOCK_DIR, exist_ok=True)
    fd = os.open(os.path.join(LOCK_DIR, "devcluster.lock"),
                 os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return subprocess.run(
            [os.path.join(REPO, "scripts", "devcluster")] + args,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=env)
    finally:
        os.close(fd)


def ensure_secure_cluster():
    """Starts (or adopts) the secure dev cluster (its own run dir and
    ports, beside the plain one) and returns its env as a dict."""
    global _SECURE_ENV
    if _SECURE_ENV is not None:
        return _SECURE_ENV
    for b in (MANAGER_BIN, WORKER_BIN):
        if not os.access(b, os.X_OK):
            raise TestFailure("%s is missing: build first (make), or set "
                              "PROPHET_BUILDDIR" % b)
    p = _devcluster(["up", "--secure"],
                    env=dict(os.environ, PROPHET_RUN_DIR=SECURE_RUN_DIR))
    if p.returncode != 0:
        log(p.stdout)
        raise TestFailure("scripts/devcluster up --secure failed (exit %d)"
                          % p.returncode)
    env = _read_env(SECURE_RUN_DIR)
    for k in ("PROPHET_ZK", "PROPHET_REDIS_URL", "PROPHET_DB_URL",
              "PROPHET_KAFKA_BROKERS", "PROPHET_TLS_CA",
              "PROPHET_KAFKA_ADMIN_CONF", "PROPHET_ZK_SUPER_AUTH_FILE",
              "PROPHET_API_ADMIN_TOKEN_FILE"):
        if not env.get(k):
            raise TestFailure("secure devcluster.env lacks %s" % k)
    _SECURE_ENV = env
    return env


def ha_devcluster(args=("up", "--ha")):
    """scripts/devcluster on the replicated dev cluster's run dir (up
    starts whatever of it is not running and waits until it is ready)."""
    return _devcluster(list(args),
                       env=dict(os.environ, PROPHET_RUN_DIR=HA_RUN_DIR))


def ensure_ha_cluster():
    """Starts (or adopts) the replicated dev cluster (scripts/devcluster
    up --ha: 3 ZooKeeper servers, 3 Kafka brokers, Redis primary, replica
    and 3 Sentinels, MariaDB) and returns its env as a dict."""
    global _HA_ENV
    p = ha_devcluster()
    if p.returncode != 0:
        log(p.stdout)
        raise TestFailure("scripts/devcluster up --ha failed (exit %d)"
                          % p.returncode)
    if _HA_ENV is None:
        env = _read_env(HA_RUN_DIR)
        for k in ("PROPHET_ZK", "PROPHET_REDIS_SENTINELS",
                  "PROPHET_REDIS_MASTER_NAME", "PROPHET_DB_URL",
                  "PROPHET_KAFKA_BROKERS"):
            if not env.get(k):
                raise TestFailure("--ha devcluster.env lacks %s" % k)
        _HA_ENV = env
    return _HA_ENV


def sentinel_primary(sentinels, name, timeout=30):
    """(host, port) of the primary the first answering Sentinel names."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        for hp in sentinels.split(","):
            host, port = hp.rsplit(":", 1)
            try:
                r = Redis(host, int(port), timeout=2)
                try:
                    a = r.cmd("SENTINEL", "get-master-addr-by-name", name)
                finally:
                    r.close()
                if a:
                    return a[0].decode(), int(a[1])
            except (OSError, TestFailure) as e:
                last = e
        if time.monotonic() > deadline:
            raise TestFailure("no Sentinel of %s names a primary for %s "
                              "(last: %r)" % (sentinels, name, last))
        time.sleep(0.5)


def kafka_admin_topics(brokers, topics, partitions=4, replication=3,
                       min_insync=2):
    """Creates topics with Kafka's own TopicCommand (servers.
    kafka_topics_cli; for brokers without auto-creation), replication and
    min.insync.replicas given, one JVM per topic side by side; existing
    ones are left as they are."""
    import servers  # noqa: E402 (servers imports this module)
    errors = []

    def one(t):
        try:
            servers.kafka_topics_cli(
                brokers, "--create", "--if-not-exists", "--topic", t,
                "--partitions", str(partitions), "--replication-factor",
                str(replication), "--config",
                "min.insync.replicas=%d" % min_insync)
        except TestFailure as e:
            errors.append(str(e))
    ths = [threading.Thread(target=one, args=(t,)) for t in topics]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    if errors:
        raise TestFailure("creating topics: %s" % errors[0])


def kafka_secure_acls(prefix, ingest_topic=None):
    """The Kafka ACLs of a secure cluster with that topic prefix
    (scripts/devcluster kafka-acls)."""
    script = os.path.join(REPO, "scripts", "devcluster")
    argv = [script, "kafka-acls", prefix] + ([ingest_topic] if ingest_topic
                                             else [])
    p = subprocess.run(argv, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, PROPHET_RUN_DIR=SECURE_RUN_DIR))
    if p.returncode != 0:
        log(p.stdout[-3000:])
        raise TestFailure("scripts/devcluster kafka-acls %s failed" % prefix)


def https_conf(c):
    """The keys that serve a Cluster(https=True)'s API over HTTPS with
    the dev CA's certificate, and point the notifier at it."""
    return {
        "http.tls_cert": c.env["PROPHET_TLS_CERT"],
        "http.tls_key": c.env["PROPHET_TLS_KEY"],
        "notifier.manager_url": "https://" + c.manager_addr,
        "http.tls_ca": c.ca,
    }


def ensure_cluster(secure=False):
    """Starts (or adopts) the dev cluster and returns its env as a dict;
    secure=True the secure one (ensure_secure_cluster).

    A server that cannot be started is a test failure, never a skip."""
    global _ENV
    if secure:
        return ensure_secure_cluster()
    if _ENV is not None:
        return _ENV
    for b in (MANAGER_BIN, WORKER_BIN):
        if not os.access(b, os.X_OK):
            raise TestFailure("%s is missing: build first (make), or set "
                              "PROPHET_BUILDDIR" % b)
    p = _devcluster(["up"])
    if p.returncode != 0:
        log(p.stdout)
        raise TestFailure("scripts/devcluster up failed (exit %d)"
                          % p.returncode)
    run = os.environ.get("PROPHET_RUN_DIR") or os.path.join(REPO, "run")
    env = _read_env(run)
    for k in ("PROPHET_ZK", "PROPHET_REDIS_URL", "PROPHET_DB_URL",
              "PROPHET_KAFKA_BROKERS"):
        if not env.get(k):
            raise TestFailure("devcluster.env lacks %s" % k)
    _ENV = env
    return env


def _parse_db_url(url):
    # mysql://user:password@host:port/db
    rest = url.split("://", 1)[1]
    cred, rest = rest.rsplit("@", 1)
    user, password = cred.split(":", 1)
    hostport, db = rest.split("/", 1)
    host, port = hostport.rsplit(":", 1)
    return user, password, host, int(port), db


def _parse_db_url_user(url):
    """mysql://user[:password]@host:port/db -> (user, password or None,
    host, port, db)."""
    rest = url.split("://", 1)[1]
    cred, rest = rest.rsplit("@", 1)
    user, _, password = cred.partition(":")
    hostport, db = rest.split("/", 1)
    host, port = hostport.rsplit(":", 1)
    return user, password or None, host, int(port), db


def _parse_redis_url(url):
    rest = url.split("://", 1)[1]
    if "@" in rest:
        rest = rest.rsplit("@", 1)[1]
    hostport = rest.split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


# ----------------------------------------------------------------- redis ---

class _RespErrors(_redis.connection.PythonParser):
    """redis-py's RESP parser, keeping an error reply whole ("NOPERM this
    user has no permissions ..."): redis-py cuts the code off the known
    ones and turns some into connection errors."""

    def parse_error(self, response):
        return _redis.exceptions.ResponseError(response)


class Redis:
    """A blocking Redis connection on python3-redis (its Connection: RESP
    parser, AUTH, SELECT), without redis-py's per-command reply parsing:
    cmd() answers with the reply's own types (bytes for bulk and status
    replies, int, list, None). An error reply raises RuntimeError("redis:
    ..."); a refused or lost connection ConnectionError and a timeout
    TimeoutError (OSErrors, as a socket's), so callers catch what they
    would catch around a socket."""

    def __init__(self, host, port, db=0, timeout=5, password=None,
                 user=None):
        self.conn = _redis.connection.Connection(
            host=host, port=int(port), db=db or 0, username=user,
            password=password, socket_timeout=timeout,
            socket_connect_timeout=timeout, parser_class=_RespErrors)
        self._call(self.conn.connect)

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except _redis.exceptions.ResponseError as e:
            raise RuntimeError("redis: %s" % e) from None
        except _redis.exceptions.TimeoutError as e:
            self.conn.disconnect()
            raise TimeoutError("redis: %s" % e) from None
        except _redis.exceptions.ConnectionError as e:
            self.conn.disconnect()
            raise ConnectionError("redis: %s" % e) from None

    def cmd(self, *args):
        self._call(self.conn.send_command, *args)
        return self._call(self.conn.read_response)

    def close(self):
        self.conn.disconnect()


# ------------------------------------------------------------- zookeeper ---

class ZK:
    """A ZooKeeper session on python3-kazoo, to the first of hosts only
    (a test that kills ensemble members picks the one it talks to).
    get/get_stat/children answer None for a missing node; set_data,
    delete and set_acl answer 0 or ZooKeeper's error code (-101 ZNONODE,
    -102 ZNOAUTH, -103 ZBADVERSION, -111 ZNOTEMPTY), as a zkCli user
    sees them. A lost or unreachable server raises ConnectionError, any
    other ZooKeeper error RuntimeError."""

    STAT_FIELDS = ("czxid", "mzxid", "ctime", "mtime", "version",
                   "cversion", "aversion", "ephemeralOwner", "dataLength",
                   "numChildren", "pzxid")

    def __init__(self, hosts, timeout_ms=10000, auth=None):
        """timeout_ms: the session timeout, and the longest wait for the
        first connection. auth: "user:password", a digest identity added
        to the session (as zkCli's addauth digest)."""
        self.kz = KazooClient(
            hosts=hosts.split(",")[0], timeout=timeout_ms / 1000.0,
            auth_data=[("digest", auth)] if auth is not None else None,
            connection_retry={"max_tries": -1, "delay": 0.05,
                              "max_delay": 0.5})
        try:
            self.kz.start(timeout=max(1.0, timeout_ms / 1000.0))
        except (KazooTimeoutError, _kze.KazooException) as e:
            self._stop()
            raise ConnectionError("zookeeper %s: %r" % (hosts, e)) from None
        except Exception:
            self._stop()
            raise

    def _stop(self):
        try:
            self.kz.stop()
        except Exception:
            pass
        try:
            self.kz.close()
        except Exception:
            pass

    @staticmethod
    def _lost(e):
        return isinstance(e, (_kze.ConnectionLoss, _kze.SessionExpiredError,
                              _kze.ConnectionClosedError,
                              _kze.OperationTimeoutError,
                              KazooTimeoutError))

    def _read(self, what, path, fn):
        try:
            return fn()
        except _kze.NoNodeError:
            return None
        except Exception as e:
            if self._lost(e):
                raise ConnectionError("zookeeper %s %s: %r"
                                      % (what, path, e)) from None
            if isinstance(e, _kze.KazooException):
                raise RuntimeError("zookeeper %s %s: %r"
                                   % (what, path, e)) from None
            raise

    def _write(self, what, path, fn):
        try:
            fn()
            return 0
        except Exception as e:
            if self._lost(e):
                raise ConnectionError("zookeeper %s %s: %r"
                                      % (what, path, e)) from None
            code = getattr(e, "code", None)
            if isinstance(e, _kze.ZookeeperError) and isinstance(code, int):
                return code
            if isinstance(e, _kze.KazooException):
                raise RuntimeError("zookeeper %s %s: %r"
                                   % (what, path, e)) from None
            raise

    def get(self, path):
        r = self._read("get", path, lambda: self.kz.get(path))
        return None if r is None else r[0]

    def get_stat(self, path):
        """(data, stat dict) of a node, or (None, None) if it does not
        exist. stat carries ctime/mtime (ms, the server's clock), version
        and ephemeralOwner (the owning session id, 0 if persistent)."""
        r = self._read("get", path, lambda: self.kz.get(path))
        if r is None:
            return None, None
        return r[0], {f: getattr(r[1], f) for f in self.STAT_FIELDS}

    def children(self, path):
        return self._read("ls", path, lambda: self.kz.get_children(path))

    def delete_all(self, path):
        err = self._write("deleteall", path,
                          lambda: self.kz.delete(path, recursive=True))
        if err not in (0, -101):
            raise RuntimeError("zookeeper delete %s: error %d" % (path, err))

    def create(self, path, data=b""):
        """A persistent node with the open ACL; 0 or ZooKeeper's error."""
        return self._write("create", path,
                           lambda: self.kz.create(path, data))

    def set_data(self, path, data, version=-1):
        """0, or ZooKeeper's error (-102 ZNOAUTH, -101 ZNONODE, ...)."""
        return self._write("set", path,
                           lambda: self.kz.set(path, data, version))

    def delete(self, path, version=-1):
        """0, or ZooKeeper's error (-102 ZNOAUTH, -111 ZNOTEMPTY, ...)."""
        return self._write("delete", path,
                           lambda: self.kz.delete(path, version))

    def get_acl(self, path):
        """[(perms, scheme, id)] of a node, None if it does not exist."""
        r = self._read("getAcl", path, lambda: self.kz.get_acls(path))
        if r is None:
            return None
        return [(a.perms, a.id.scheme, a.id.id) for a in r[0]]

    def set_acl(self, path, acl, version=-1):
        """acl: [(perms, scheme, id)]; 0 or ZooKeeper's error."""
        acls = [ACL(perms, Id(scheme, ident)) for perms, scheme, ident in acl]
        return self._write("setAcl", path,
                           lambda: self.kz.set_acls(path, acls, version))

    def close(self):
        self._stop()


# ------------------------------------------------------------------ http ---

class Response:
    def __init__(self, status, headers, data):
        self.status = status
        self.headers = headers
        self.data = data
        try:
            self.json = json.loads(data) if data else None
        except ValueError:
            self.json = None

    @property
    def text(self):
        return self.data.decode("utf-8", "replace")

    def __repr__(self):
        return "<HTTP %d %s>" % (self.status, self.text[:300].strip())


class Api:
    """HTTP/1.1 client on one kept-alive connection (not thread-safe:
    one Api per thread). token: sent as a bearer token with every
    request; cafile: HTTPS, the server's certificate verified against
    that CA (and its name against the address)."""

    def __init__(self, addr, timeout=30, cafile=None, cert=None, token=None):
        """cafile: HTTPS, the server verified against it; cert: a
        (certificate, key) pair to present (mutual TLS); token: sent as
        a bearer token."""
        host, port = addr.rsplit(":", 1)
        self.host, self.port, self.timeout = host, int(port), timeout
        self.conn = None
        self.token = token
        self.ssl = None
        if cafile is not None:
            self.ssl = ssl.create_default_context(cafile=cafile)
            if cert is not None:
                self.ssl.load_cert_chain(*cert)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, headers=None):
        hdrs = {"Connection": "keep-alive"}
        if isinstance(body, (dict, list)):
            body = json.dumps(body, ensure_ascii=False).encode()
            hdrs["Content-Type"] = "application/json"
        elif isinstance(body, str):
            body = body.encode()
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        hdrs.update(headers or {})
        for attempt in (0, 1):
            fresh = self.conn is None
            if fresh:
                if self.ssl is not None:
                    self.conn = http.client.HTTPSConnection(
                        self.host, self.port, timeout=self.timeout,
                        context=self.ssl)
                else:
                    self.conn = http.client.HTTPConnection(
                        self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                r = self.conn.getresponse()
                data = r.read()
                resp = Response(r.status, dict(r.getheaders()), data)
                if r.will_close:
                    self.close()
                return resp
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError, http.client.BadStatusLine):
                # A kept-alive connection the server closed: retry once
                # on a new one (submissions in tests carry ids, so a
                # replay is harmless).
                self.close()
                if fresh or attempt == 1:
                    raise
            except Exception:
                self.close()
                raise

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body):
        return self.request("POST", path, body)


def metrics(addr, labelled=False, cafile=None):
    """A daemon's metrics as a dict, read on a connection of its own: the
    unlabelled ones (histogram _sum/_count included) by name, and with
    labelled=True also the others as name{labels}."""
    api = Api(addr, timeout=5, cafile=cafile)
    try:
        text = api.get("/metrics").text
    finally:
        api.close()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        k, _, v = line.rpartition(" ")
        k = k.strip()
        if not k or ("{" in k and not labelled):
            continue
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def submit_many(addr, tasks, threads=8, path="/v1/tasks"):
    """POSTs every task (dicts) with a few threads, each on its own
    kept-alive connection. Returns (responses in task order, seconds)."""
    results = [None] * len(tasks)
    errors = []

    def run(k):
        api = Api(addr)
        try:
            for i in range(k, len(tasks), threads):
                results[i] = api.post(path, tasks[i])
        except Exception as e:  # reported by the caller
            errors.append(e)
        finally:
            api.close()

    t0 = time.monotonic()
    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    if errors:
        raise TestFailure("submission failed: %r" % errors[0])
    return results, elapsed


# ----------------------------------------------------------------- kafka ---

class CallbackSink:
    """An HTTP endpoint for callbacks on a free loopback port, one thread a
    connection. Every call is recorded under the last part of its path (the
    tests put the task id there) as {"path", "headers" (lower-case names),
    "body"}; /flaky/<id> answers 500 to the first `flaky` calls of that id,
    every other call 200."""

    def __init__(self, flaky=1):
        self.calls = {}
        self.cond = threading.Condition()
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                parts = self.path.split("/")
                with sink.cond:
                    calls = sink.calls.setdefault(parts[-1], [])
                    calls.append({"path": self.path, "body": body,
                                  "headers": {k.lower(): v for k, v
                                              in self.headers.items()}})
                    nth = len(calls)
                    sink.cond.notify_all()
                fail = len(parts) > 2 and parts[1] == "flaky" and nth <= flaky
                self.send_response(500 if fail else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET = do_PUT = handle_any

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever,
                         daemon=True).start()

    def url(self, path):
        return "http://127.0.0.1:%d/%s" % (self.port, path)

    def count(self, tid):
        with self.cond:
            return len(self.calls.get(tid, []))

    def wait(self, tid, n=1, timeout=60):
        """The calls of tid once there are n, None after timeout s."""
        with self.cond:
            if not self.cond.wait_for(
                    lambda: len(self.calls.get(tid, [])) >= n, timeout):
                return None
            return list(self.calls[tid])

    def paths(self):
        with self.cond:
            return sorted(c["path"] for v in self.calls.values() for c in v)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class KafkaMessage:
    __slots__ = ("topic", "partition", "offset", "ts", "key", "payload",
                 "headers", "hdr", "recv_ms")

    def __init__(self, j, recv_ms):
        self.topic = j.get("topic")
        self.partition = j.get("partition")
        self.offset = j.get("offset")
        self.ts = j.get("ts")
        self.key = j.get("key")
        self.payload = j.get("payload")
        h = j.get("headers") or []
        self.headers = [(h[i], h[i + 1]) for i in range(0, len(h) - 1, 2)]
        self.hdr = dict(self.headers)
        self.recv_ms = recv_ms

    @property
    def id(self):
        return self.hdr.get("prophet-id")


class KafkaReader:
    """Follows topics with kcat (-J), from the beginning, in background
    threads; records each message with its local receive time.

    kcat exits when a topic does not exist yet (topics auto-create on the
    first publish): it is restarted, and messages already seen (by
    partition and offset) are skipped."""

    def __init__(self, brokers, topics, kcat_args=()):
        """kcat_args: e.g. ["-F", conf] for a secure broker, or
        ["-X", "isolation.level=read_committed"]."""
        self.brokers = brokers
        self.kcat_args = list(kcat_args)
        self.topics = list(topics)
        self.messages = []
        self.by_id = {}
        self.cond = threading.Condition()
        self.stopping = False
        self.procs = {}
        self.threads = []
        self.errors = []

    def start(self):
        for t in self.topics:
            th = threading.Thread(target=self._follow, args=(t,), daemon=True)
            th.start()
            self.threads.append(th)
        return self

    def _follow(self, topic):
        seen = set()
        while not self.stopping:
            pre = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []
            errf = tempfile.TemporaryFile()
            p = subprocess.Popen(
                pre + ["kcat"] + self.kcat_args +
                ["-C", "-b", self.brokers, "-t", topic,
                       "-o", "beginning", "-J", "-q", "-u",
                       "-X", "fetch.wait.max.ms=20"],
                stdout=subprocess.PIPE, stderr=errf)
            self.procs[topic] = p
            for line in p.stdout:
                recv = now_ms()
                try:
                    j = json.loads(line)
                except ValueError:
                    self.errors.append("bad kcat line: %r" % line[:200])
                    continue
                k = (j.get("partition"), j.get("offset"))
                if k in seen:
                    continue
                seen.add(k)
                m = KafkaMessage(j, recv)
                with self.cond:
                    self.messages.append(m)
                    self.by_id.setdefault(m.id, []).append(m)
                    self.cond.notify_all()
            p.wait()
            p.stdout.close()
            errf.seek(0)
            err = errf.read().decode("utf-8", "replace")
            errf.close()
            if self.stopping:
                break
            if "Unknown topic" not in err and err.strip():
                self.errors.append("kcat %s: %s" % (topic, err.strip()[:300]))
            time.sleep(0.2)

    def wait_for(self, ids, timeout, settle=0.0):
        """Waits until every id was received at least once (or the
        timeout); then `settle` more seconds for late duplicates. Returns
        the ids still missing."""
        ids = set(ids)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                missing = [i for i in ids if i not in self.by_id]
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    break
                self.cond.wait(min(left, 0.5))
        if settle > 0:
            time.sleep(settle)
        with self.cond:
            missing = [i for i in ids if i not in self.by_id]
        if missing and self.errors:
            log("kcat problems: %s" % self.errors[-5:])
        return missing

    def count(self):
        with self.cond:
            return len(self.messages)

    def stop(self):
        self.stopping = True
        for p in list(self.procs.values()):
            try:
                p.terminate()
            except OSError:
                pass
        for th in self.threads:
            th.join(timeout=5)


def log_ts_ms(line):
    """The ts= of a daemon log line, as ms since the epoch (UTC), or
    None."""
    try:
        ts = line.split("ts=", 1)[1].split(" ", 1)[0]   # 2026-..T..:..:..123Z
        base, frac = ts.rstrip("Z").split(".")
        t = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
        return t * 1000 + int(frac)
    except (IndexError, ValueError):
        return None


def create_topics(brokers, topics, timeout=20, kcat_args=()):
    """Asks the broker to auto-create topics (a metadata request with
    auto-creation, as a producer sends) and waits until they have
    partitions."""
    deadline = time.monotonic() + timeout
    pending = set(topics)
    while pending:
        for t in list(pending):
            p = subprocess.run(["kcat"] + list(kcat_args) +
                               ["-L", "-b", brokers, "-t", t],
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            if p.returncode == 0 and "partitions:" in p.stdout and \
                    "0 partitions" not in p.stdout:
                pending.discard(t)
        if pending and time.monotonic() > deadline:
            raise TestFailure("topics not created: %s" % sorted(pending))
        if pending:
            time.sleep(0.2)


# ------------------------------------------------------------- processes ---

_ALL_PROCS = []


def _kill_leftovers():
    for p in _ALL_PROCS:
        if p.popen is not None and p.popen.poll() is None:
            try:
                p.popen.kill()
            except OSError:
                pass


atexit.register(_kill_leftovers)

# What the sanitizer runtimes print (the ASan/UBSan build): any of these in
# a daemon's log fails the test program. LeakSanitizer reports only at a
# clean exit, hence daemons are stopped with SIGTERM, never SIGKILL, at the
# end of a test.
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                   "runtime error:", "WARNING: ThreadSanitizer",
                   "ERROR: ThreadSanitizer")


def stop_all(timeout=20):
    """SIGTERM (after SIGCONT) to every daemon still running, waits."""
    running = [p for p in _ALL_PROCS if p.running()]
    for p in running:
        p.signal(signal.SIGCONT)
        p.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in running:
        if p.wait(max(0.1, deadline - time.monotonic())) is None:
            log("%s did not stop within %ss after SIGTERM; killing"
                % (p.name, timeout))
            p.kill()
        else:
            p._note("stopped (SIGTERM), exit %s" % p.popen.returncode)


def sanitizer_reports():
    """(daemon name, log path, first lines) of every report in the logs of
    the daemons this program ran."""
    out = []
    seen = set()
    for p in _ALL_PROCS:
        if p.log_path in seen:
            continue
        seen.add(p.log_path)
        try:
            with open(p.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines):
            if any(m in line for m in SANITIZER_MARKS):
                out.append((p.name, p.log_path, lines[i:i + 25]))
                break
    return out


def sanitizer_verdict():
    """Stops what still runs, then 0, or 1 with the reports printed."""
    stop_all()
    reports = sanitizer_reports()
    for name, path, lines in reports:
        log("---- sanitizer report of %s (%s) ----" % (name, path))
        for line in lines:
            log("  " + line)
    if reports:
        print("not ok - sanitizer reports in %d daemon log(s)" % len(reports),
              flush=True)
        return 1
    return 0


class Proc:
    """A daemon run as a subprocess, stdout+stderr appended to a log."""

    def __init__(self, name, argv, log_path):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.popen = None
        self.starts = 0
        self.env = None  # extra environment variables
        _ALL_PROCS.append(self)

    def start(self):
        if self.running():
            raise TestFailure("%s is already running" % self.name)
        self.starts += 1
        # The directory may have been removed under a long run (someone
        # cleaning /tmp/prophet-* on a shared machine): the log starts again.
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        f = open(self.log_path, "ab")
        f.write(("=== harness: start #%d at %d: %s\n"
                 % (self.starts, now_ms(), " ".join(self.argv))).encode())
        f.flush()
        argv = self.argv
        if _SETPRIV:
            argv = [_SETPRIV, "--pdeathsig", "KILL", "--"] + argv
        self.popen = subprocess.Popen(
            argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(os.environ, **self.env) if self.env else None)
        f.close()
        return self

    def running(self):
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig):
        if self.running():
            self.popen.send_signal(sig)

    def wait(self, timeout):
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=25):
        """SIGTERM, wait; SIGKILL if it hangs. Returns the exit code
        (None if it had to be killed)."""
        if not self.running():
            return self.popen.returncode if self.popen else None
        self.popen.send_signal(signal.SIGTERM)
        rc = self.wait(timeout)
        if rc is None:
            log("%s did not stop within %ss after SIGTERM; killing"
                % (self.name, timeout))
            self.popen.kill()
            self.popen.wait()
        self._note("stopped (SIGTERM), exit %s" % rc)
        return rc

    def kill(self):
        if self.running():
            self.popen.kill()
            self.popen.wait()
            self._note("killed (SIGKILL)")

    def _note(self, what):
        try:
            with open(self.log_path, "ab") as f:
                f.write(("=== harness: %s at %d\n" % (what, now_ms()))
                        .encode())
        except OSError:
            pass  # its directory is gone with its cluster

    def tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []
        return lines[-n:]

    def grep(self, needle):
        try:
            with open(self.log_path, "rb") as f:
                return [l for l in f.read().decode("utf-8", "replace")
                        .splitlines() if needle in l]
        except OSError:
            return []


class PrivateZooKeeper:
    """A standalone ZooKeeper server of one test (free port, own data dir),
    for faults that must not touch the shared dev cluster's server
    (stop/restart). Started as scripts/devcluster starts its own.

        zk = h.PrivateZooKeeper().start()
        with h.Cluster(zk_hosts=zk.hosts) as c: ...; zk.stop(); zk.start()
        zk.close()
    """

    def __init__(self, name="zookeeper", tick_ms=1000):
        self.dir = tempfile.mkdtemp(prefix="prophet-%s-" % name)
        self.port = free_port()
        self.hosts = "127.0.0.1:%d" % self.port
        data = os.path.join(self.dir, "data")
        os.makedirs(data)
        self.conf_path = os.path.join(self.dir, "zoo.cfg")
        with open(self.conf_path, "w") as f:
            f.write("dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"
                    "tickTime=%d\nminSessionTimeout=%d\n"
                    "maxSessionTimeout=60000\nmaxClientCnxns=0\n"
                    "preAllocSize=4096\nadmin.enableServer=false\n"
                    "4lw.commands.whitelist=*\n"
                    % (data, self.port, tick_ms, tick_ms))
        cp = "/usr/share/java/zookeeper.jar"
        if os.path.exists("/usr/share/java/slf4j-simple.jar"):
            cp += ":/usr/share/java/slf4j-simple.jar"
        self.proc = Proc(name, [
            "java", "-Xms32m", "-Xmx128m", "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "-Dzookeeper.admin.enableServer=false", "-cp", cp,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            self.conf_path], os.path.join(self.dir, "zookeeper.log"))

    def ready(self):
        try:
            z = ZK(self.hosts)
            try:
                return z.children("/") is not None
            finally:
                z.close()
        except (OSError, RuntimeError, struct.error):
            return False

    def start(self, timeout=60):
        """Starts the server (same data dir every time) and waits until
        it answers a request."""
        self.proc.start()

        def up():
            if not self.proc.running():
                raise TestFailure("private zookeeper exited (code %s); see "
                                  "%s" % (self.proc.popen.returncode,
                                          self.proc.log_path))
            return self.ready()
        wait_until(up, timeout, 0.1, "private zookeeper on %s" % self.hosts)
        return self

    def stop(self, timeout=20):
        return self.proc.stop(timeout)

    def close(self, failed=False):
        self.proc.kill()
        if failed or KEEP:
            log("private zookeeper kept in %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """An isolated Prophet cluster on the shared dev servers.

    Creates a ZooKeeper root, a MariaDB database, a Redis db number, a
    topic prefix and ports; writes prophet.conf; starts/stops the manager
    and workers; cleans everything up on exit (keeps the temp dir, with
    the logs, when the block failed or PROPHET_INTEG_KEEP=1)."""

    def __init__(self, workers=2, conf=None, slots=16, name="t",
                 zk_hosts=None, secure=False, https=False, ha=False):
        self.secure = secure or https
        self.https = https
        # ha: on the replicated dev cluster (scripts/devcluster up --ha):
        # the ensemble, the Sentinels (the primary found through them),
        # 3 brokers without auto-creation (Prophet's own topics made with
        # replication 3, min.insync.replicas 2)
        self.ha = ha
        self.env = ensure_ha_cluster() if ha else ensure_cluster(
            secure=self.secure)
        if zk_hosts:
            # A private ZooKeeper (e.g. PrivateZooKeeper) instead of the
            # dev cluster's: conf, zk() and cleanup use it.
            self.env = dict(self.env, PROPHET_ZK=zk_hosts)
        self.tag = rand_tag()
        self.nworkers = workers
        self.extra_conf = dict(conf or {})
        self.slots = slots
        self.zk_root = "/prophet-t" + self.tag
        self.db_name = "prophet_t" + self.tag
        self.topic_prefix = "t%s." % self.tag
        self.brokers = self.env["PROPHET_KAFKA_BROKERS"]
        if self.secure:
            # the operator's accounts for the harness; the daemons get
            # their own (conf_dict)
            (self.db_user, _, self.db_host, self.db_port,
             _) = _parse_db_url_user(self.env["PROPHET_DB_URL"])
            self.db_password = read_secret(
                self.env["PROPHET_DB_PASSWORD_FILE"])
            self.redis_password = read_secret(
                self.env["PROPHET_REDIS_ADMIN_PASSWORD_FILE"])
            self.kcat_args = ["-F", self.env["PROPHET_KAFKA_ADMIN_CONF"]]
            self.token = read_secret(self.env["PROPHET_API_ADMIN_TOKEN_FILE"])
            self.ca = self.env["PROPHET_TLS_CA"]
        else:
            (self.db_user, self.db_password, self.db_host, self.db_port,
             _) = _parse_db_url(self.env["PROPHET_DB_URL"])
            self.redis_password = None
            self.kcat_args = []
            self.token = None
            self.ca = None
        self.redis_host, self.redis_port = _parse_redis_url(
            self.env["PROPHET_REDIS_URL"])
        if ha:
            self.redis_host, self.redis_port = self.redis_primary()
        self.redis_db = None
        self._lock_fd = None
        self.dir = tempfile.mkdtemp(prefix="prophet-%s-%s-" % (name, self.tag))
        self.http_port = free_port()
        self.manager_addr = "127.0.0.1:%d" % self.http_port
        self.conf_path = os.path.join(self.dir, "prophet.conf")
        self.manager = None
        self.workers = []
        self.readers = []
        self.created_db = False
        # HTTPS to the manager (a test that sets http.tls_cert sets these):
        # the CA to verify it, and a (cert, key) for mutual TLS.
        self.tls_ca = self.ca if self.https else None
        self.tls_client = None

    # -- setup / teardown ------------------------------------------------
    def __enter__(self):
        try:
            self._pick_redis_db()
            self.mysql("CREATE DATABASE `%s`" % self.db_name, db="")
            self.created_db = True
            if self.secure:
                kafka_secure_acls(self.topic_prefix,
                                  self.extra_conf.get("kafka.ingest_topic"))
            self.write_conf()
            self.manager = Proc("manager", [MANAGER_BIN, "-c", self.conf_path],
                                os.path.join(self.dir, "manager.log"))
            for i in range(self.nworkers):
                self.add_worker()
        except BaseException:
            self._cleanup(failed=True)
            raise
        log("cluster %s: zk %s, db %s, redis db %d, topics %s*, api %s, "
            "logs %s" % (self.tag, self.zk_root, self.db_name, self.redis_db,
                         self.topic_prefix, self.manager_addr, self.dir))
        return self

    def open(self):
        """Sets the namespace up (for use without `with`; close() ends
        it)."""
        return self.__enter__()

    def __exit__(self, etype, evalue, tb):
        failed = etype is not None
        if failed:
            self.dump_logs()
        self._cleanup(failed)
        return False

    REDIS_MARK = "prophet-integ:owner"

    def _pick_redis_db(self):
        """Takes a Redis db among 1..15: one nobody else holds (a lock file
        per db) that is empty, or that holds only the leftovers of a test
        run that died (our marker key, its lock free). Data of others is
        never flushed."""
        os.makedirs(LOCK_DIR, exist_ok=True)
        deadline = time.monotonic() + 120
        while self.redis_db is None:
            r = Redis(self.redis_host, self.redis_port,
                      password=self.redis_password)
            try:
                cands = list(range(1, 16))
                random.shuffle(cands)
                for n in cands:
                    path = os.path.join(LOCK_DIR, "redis-%d-db%d.lock"
                                        % (self.redis_port, n))
                    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        os.close(fd)
                        continue
                    r.cmd("SELECT", n)
                    if r.cmd("DBSIZE") == 0 or r.cmd("EXISTS",
                                                     self.REDIS_MARK):
                        self.redis_db, self._lock_fd = n, fd
                        break
                    os.close(fd)
            finally:
                r.close()
            if self.redis_db is None:
                if time.monotonic() > deadline:
                    raise TestFailure("no free Redis db among 1..15 (locks "
                                      "in %s)" % LOCK_DIR)
                time.sleep(0.5)
        r = self.redis()
        r.cmd("FLUSHDB")
        r.cmd("SET", self.REDIS_MARK, self.tag)
        r.close()

    def close(self, failed=False):
        """Stops everything and removes the namespace (what __exit__
        does); keeps the logs when failed."""
        self._cleanup(failed)

    def _cleanup(self, failed):
        for r in self.readers:
            r.stop()
        procs = ([self.manager] if self.manager else []) + self.workers
        # SIGTERM, so that the sanitizer build's LeakSanitizer reports.
        running = [p for p in procs if p.running()]
        for p in running:
            p.signal(signal.SIGCONT)
            p.signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in running:
            if p.wait(max(0.1, deadline - time.monotonic())) is None:
                log("%s did not stop within 20s after SIGTERM; killing"
                    % p.name)
                p.kill()
            else:
                p._note("stopped (SIGTERM), exit %s" % p.popen.returncode)
        try:
            if self.created_db:
                self.mysql("DROP DATABASE IF EXISTS `%s`" % self.db_name,
                           db="")
        except Exception as e:
            log("cleanup: drop database failed: %s" % e)
        try:
            z = self.zk()
            z.delete_all(self.zk_root)
            z.close()
        except Exception as e:
            log("cleanup: zookeeper %s not removed: %s" % (self.zk_root, e))
        if self.redis_db is not None:
            try:
                r = self.redis()
                r.cmd("FLUSHDB")
                r.close()
            except Exception as e:
                log("cleanup: redis flush failed: %s" % e)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if failed or KEEP:
            log("logs kept in %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def dump_logs(self, n=40):
        procs = ([self.manager] if self.manager else []) + self.workers
        for p in procs:
            if p.popen is None:
                continue
            log("---- tail of %s (%s) ----" % (p.name, p.log_path))
            for line in p.tail(n):
                log("  " + line)

    # -- configuration ---------------------------------------------------
    def conf_dict(self):
        c = {
            "cluster.root": self.zk_root,
            "cluster.slots": self.slots,
            "zookeeper.hosts": self.env["PROPHET_ZK"],
            "zookeeper.session_timeout_ms": 10000,
            "redis.url": "redis://%s:%d/%d" % (self.redis_host,
                                               self.redis_port,
                                               self.redis_db),
            "db.url": "mysql://%s:%s@%s:%d/%s" % (
                self.db_user, self.db_password, self.db_host, self.db_port,
                self.db_name),
            "kafka.brokers": self.brokers,
            "kafka.topic_prefix": self.topic_prefix,
            # The dev broker makes a topic at its first publish; the
            # manager refuses a task whose topic does not exist yet
            # (kafka.check_task_topics), so here it creates it, as the
            # broker would have. test_topics_missing and test_openapi run
            # with the default (refuse).
            "kafka.create_task_topics": "true",
            "http.listen": self.manager_addr,
        }
        if self.secure:
            c.update(self.secure_conf())
        if self.ha:
            c.update({
                "redis.sentinels": self.env["PROPHET_REDIS_SENTINELS"],
                "redis.master_name": self.env["PROPHET_REDIS_MASTER_NAME"],
                "kafka.topic_replication": 3,
                "kafka.topic_min_insync": 2})
        c.update(self.extra_conf)
        return c

    def secure_conf(self):
        """The keys of every link on the secure dev cluster: a password
        file each, a database user and a Kafka principal per program
        ([section@program]), TLS, tokens."""
        e = self.env
        db = "mysql://%%s@%s:%d/%s" % (self.db_host, self.db_port,
                                       self.db_name)
        c = {
            "zookeeper.auth_file": e["PROPHET_ZK_AUTH_FILE"],
            "redis.url": "redis://prophet@%s:%d/%d" % (
                self.redis_host, self.redis_port, self.redis_db),
            "redis.password_file": e["PROPHET_REDIS_PASSWORD_FILE"],
            "db.url": db % e["PROPHET_DB_MANAGER_USER"],
            "db.password_file": e["PROPHET_DB_MANAGER_PASSWORD_FILE"],
            "db.tls_mode": "VERIFY_IDENTITY",
            "db.tls_ca": self.ca,
            "db@worker.url": db % e["PROPHET_DB_WORKER_USER"],
            "db@worker.password_file": e["PROPHET_DB_WORKER_PASSWORD_FILE"],
            "db@notifier.url": db % e["PROPHET_DB_NOTIFIER_USER"],
            "db@notifier.password_file":
                e["PROPHET_DB_NOTIFIER_PASSWORD_FILE"],
            "kafka.security_protocol": "sasl_ssl",
            # Debian 12's librdkafka cannot do SCRAM with Kafka 4
            "kafka.sasl_mechanism": "PLAIN",
            "kafka.tls_ca": self.ca,
            "kafka.ingest_group": self.topic_prefix + "ingest",
            "kafka@manager.sasl_username": e["PROPHET_KAFKA_INGEST_USER"],
            "kafka@manager.sasl_password_file":
                e["PROPHET_KAFKA_INGEST_PASSWORD_FILE"],
            "kafka@worker.sasl_username": e["PROPHET_KAFKA_WORKER_USER"],
            "kafka@worker.sasl_password_file":
                e["PROPHET_KAFKA_WORKER_PASSWORD_FILE"],
            "kafka@notifier.sasl_username": e["PROPHET_KAFKA_NOTIFIER_USER"],
            "kafka@notifier.sasl_password_file":
                e["PROPHET_KAFKA_NOTIFIER_PASSWORD_FILE"],
            "notifier.group": self.topic_prefix + "notifier",
            "http.tokens_file": e["PROPHET_API_TOKENS_FILE"],
            "http@notifier.token_file": e["PROPHET_API_NOTIFIER_TOKEN_FILE"],
            "notifier.manager_url": "http://" + self.manager_addr,
        }
        if self.https:
            c.update(https_conf(self))
        return c

    def write_conf(self, path=None, conf=None):
        """Writes conf (default: conf_dict()) as INI to path (default:
        conf_path)."""
        sections = {}
        for k, v in (conf if conf is not None else self.conf_dict()).items():
            s, key = k.split(".", 1)
            sections.setdefault(s, []).append((key, v))
        with open(path or self.conf_path, "w") as f:
            f.write("; written by tests/integ/harness.py\n")
            for s, kvs in sections.items():
                f.write("[%s]\n" % s)
                for k, v in kvs:
                    f.write("%s = %s\n" % (k, v))

    # -- processes -------------------------------------------------------
    def notifier_conf(self, scheme="http"):
        """The notifier's group of this cluster and its manager (scheme
        https when the API serves HTTPS), written to the config file."""
        self.extra_conf["notifier.group"] = "prophet-notifier-" + self.tag
        self.extra_conf["notifier.manager_url"] = "%s://%s" % (
            scheme, self.manager_addr)
        self.write_conf()

    def notifier(self, port, args=(), fast_rebalance=True):
        """notifier_conf(), then a notifier Proc (not started) listening
        on port, with args after its -c; fast_rebalance: a SIGKILLed
        member's partitions move after 6 s (Kafka's default 45 s)."""
        self.notifier_conf()
        argv = [NOTIFIER_BIN, "-c", self.conf_path]
        if fast_rebalance:
            argv += ["--set", "kafka.consumer.session.timeout.ms=6000",
                     "--set", "kafka.consumer.heartbeat.interval.ms=1000"]
        p = Proc("notifier", argv + list(args),
                 os.path.join(self.dir, "notifier.log"))
        p.addr = "127.0.0.1:%d" % port
        return p

    def add_manager(self, name="manager2", timeout=60, args=()):
        """Another manager of this cluster on a free port, started and
        ready (stopped with the cluster); its Proc, with .addr. args: more
        arguments (e.g. --set key=value)."""
        port = free_port()
        p = Proc(name, [MANAGER_BIN, "-c", self.conf_path, "--set",
                        "http.listen=127.0.0.1:%d" % port] + list(args),
                 os.path.join(self.dir, name + ".log"))
        p.addr = "127.0.0.1:%d" % port
        self.workers.append(p)
        p.start()
        self._wait_http(p, p.addr, "/readyz", timeout)
        return p

    def add_worker(self):
        i = len(self.workers) + 1
        port = free_port()
        wid = "w%d-%s" % (i, self.tag)
        p = Proc(wid, [WORKER_BIN, "-c", self.conf_path,
                       "--set", "worker.id=" + wid,
                       "--set", "worker.http_listen=127.0.0.1:%d" % port],
                 os.path.join(self.dir, "worker%d.log" % i))
        p.wid = wid
        p.addr = "127.0.0.1:%d" % port
        self.workers.append(p)
        return p

    def _wait_http(self, proc, addr, path, timeout):
        api = Api(addr, timeout=2, cafile=self.tls_ca if addr ==
                  self.manager_addr else None, cert=self.tls_client)
        last = [None]

        def ok():
            if not proc.running():
                raise TestFailure("%s exited (code %s) during startup"
                                  % (proc.name, proc.popen.returncode))
            try:
                r = api.get(path)
                last[0] = r
                return r.status == 200
            except OSError as e:
                last[0] = e
                api.close()
                return False
        try:
            wait_until(ok, timeout, 0.05, "%s %s (last: %r)"
                       % (proc.name, path, last[0]))
        finally:
            api.close()

    def start_manager(self, wait=True, timeout=60):
        self.manager.start()
        if wait:
            self._wait_http(self.manager, self.manager_addr, "/readyz",
                            timeout)
        return self.manager

    def start_worker(self, w, wait=True, timeout=60):
        if isinstance(w, int):
            w = self.workers[w]
        w.start()
        if wait:
            self._wait_http(w, w.addr, "/healthz", timeout)
            # Fully connected (Kafka metadata, DB, Redis, ZooKeeper).
            self._wait_http(w, w.addr, "/readyz", timeout)
        return w

    def start_like_supervisor(self, w, every=1.0, within=30.0):
        """Starts a worker, and restarts it every `every` seconds while it
        exits during startup (as systemd's Restart=on-failure would), for
        at most `within` seconds. Returns the failed attempts as
        (time offset, last log line) pairs."""
        if isinstance(w, int):
            w = self.workers[w]
        t0 = time.monotonic()
        failures = []
        while True:
            try:
                self.start_worker(w)
                return failures
            except TestFailure:
                if w.running():
                    raise
                failures.append((round(time.monotonic() - t0, 1),
                                 (w.tail(1) or ["?"])[-1]))
                if time.monotonic() - t0 > within:
                    raise TestFailure(
                        "%s could not be restarted within %.0fs; last: %s"
                        % (w.name, within, failures[-1][1]))
                time.sleep(every)

    def start_workers(self, wait=True):
        for w in self.workers:
            self.start_worker(w, wait=False)
        if wait:
            for w in self.workers:
                self._wait_http(w, w.addr, "/healthz", 60)
                self._wait_http(w, w.addr, "/readyz", 60)

    def start(self):
        self.start_manager()
        self.start_workers()
        return self

    # -- clients ---------------------------------------------------------
    def api(self):
        return Api(self.manager_addr, cafile=self.tls_ca,
                   cert=self.tls_client, token=self.token)

    def redis_primary(self):
        """(host, port) of the Redis primary now (ha: as the Sentinels
        name it, which a failover changes)."""
        if not self.ha:
            return self.redis_host, self.redis_port
        return sentinel_primary(self.env["PROPHET_REDIS_SENTINELS"],
                                self.env["PROPHET_REDIS_MASTER_NAME"])

    def tombstoned(self, ids):
        """How many of ids have a cancel tombstone in their slot's
        cancelled set (any slot's: the tests do not hash ids)."""
        r = self.redis()
        try:
            return sum(any(r.cmd("ZSCORE", "{prophet:%d}:cancelled" % n,
                                 tid) is not None
                           for n in range(self.slots)) for tid in ids)
        finally:
            r.close()

    def redis(self):
        if self.ha:
            self.redis_host, self.redis_port = self.redis_primary()
        return Redis(self.redis_host, self.redis_port, self.redis_db,
                     password=self.redis_password)

    def topic(self, t):
        return self.topic_prefix + t

    def reader(self, topics, kcat_args=()):
        """A started KafkaReader over the Kafka topics of task topics."""
        r = KafkaReader(self.brokers, [self.topic(t) for t in topics],
                        kcat_args=list(self.kcat_args) + list(kcat_args))
        self.readers.append(r)
        return r.start()

    def mysql(self, sql, db=None):
        """Runs constant SQL (test-generated values only) with the mariadb
        client; returns rows as lists of strings (NULL -> None)."""
        argv = ["mariadb", "--no-defaults", "-N", "-B", "-u" + self.db_user,
                "-h" + self.db_host, "-P%d" % self.db_port,
                "--connect-timeout=10"]
        if self.secure:
            argv += ["--ssl-ca=" + self.ca, "--ssl-verify-server-cert"]
        d = self.db_name if db is None else db
        if d:
            argv.append(d)
        argv += ["-e", sql]
        # the password in the environment, not on a command line
        p = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE,
                           env=dict(os.environ, MYSQL_PWD=self.db_password))
        if p.returncode != 0:
            raise TestFailure("mariadb failed (%s): %s" % (
                sql[:200], p.stderr.decode("utf-8", "replace").strip()))
        rows = []
        for line in p.stdout.decode("utf-8", "replace").split("\n"):
            if line == "":
                continue
            rows.append([None if c == "NULL" else c
                         for c in line.split("\t")])
        return rows

    def zk(self):
        """A ZooKeeper session; on the secure cluster as digest user
        super (every right everywhere, as an operator's)."""
        auth = read_secret(self.env["PROPHET_ZK_SUPER_AUTH_FILE"]) \
            if self.secure else None
        return ZK(self.env["PROPHET_ZK"], auth=auth)


# ---------------------------------------------------------------- runner ---

class Problems:
    """Collects assertion failures so that a test reports many at once."""

    def __init__(self, limit=15):
        self.limit = limit
        self.items = []
        self.count = 0

    def add(self, msg):
        self.count += 1
        if len(self.items) < self.limit:
            self.items.append(msg)

    def check(self, cond, msg):
        if not cond:
            self.add(msg)
        return cond

    def raise_if_any(self, what):
        if self.count:
            raise TestFailure("%s: %d problem(s):\n  %s%s" % (
                what, self.count, "\n  ".join(self.items),
                "\n  ..." if self.count > len(self.items) else ""))


class _Tests(pytest.Module):
    """The module pytest collects: the given test functions (their own
    module's globals stay theirs), not a re-import of the file."""

    funcs = ()

    def _getobj(self):
        m = types.ModuleType("prophet_integ")
        for fn in self.funcs:
            setattr(m, fn.__name__, fn)
        return m


class _Plugin:
    """Runs the test functions in the given order through pytest and
    prints a TAP-like line per test (ok N - name (s)), a failure's
    traceback as TAP comments, then on_failure()'s output."""

    def __init__(self, tests, on_failure):
        self.tests = tests
        self.on_failure = on_failure
        self.n = 0
        self.failed = 0
        self.seen = set()
        self.tracebacks = {}

    def pytest_runtest_makereport(self, item, call):
        # the traceback as Python prints it (not pytest's long form):
        # scripts/test picks "TestFailure: ..." lines out of the logs
        if call.excinfo is not None:
            tb = call.excinfo.tb
            code = getattr(getattr(item, "obj", None), "__code__", None)
            t = tb
            while t is not None and t.tb_frame.f_code is not code:
                t = t.tb_next
            self.tracebacks.setdefault(item.nodeid, "".join(
                traceback.format_exception(call.excinfo.type,
                                           call.excinfo.value, t or tb)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makemodule(self, module_path, parent):
        return type("_T", (_Tests,), {"funcs": self.tests}).from_parent(
            parent, path=module_path)

    def pytest_collection_modifyitems(self, items):
        order = {fn.__name__: i for i, fn in enumerate(self.tests)}
        items.sort(key=lambda it: order.get(it.name, len(order)))
        print("1..%d" % len(items), flush=True)

    def pytest_runtest_logreport(self, report):
        name = report.nodeid.rsplit("::", 1)[-1]
        name = name[5:] if name.startswith("test_") else name
        if report.when == "call" or report.failed:
            if report.nodeid in self.seen:
                return
            self.seen.add(report.nodeid)
            self.n += 1
            if report.failed:
                self.failed += 1
                log(self.tracebacks.get(report.nodeid,
                                        report.longreprtext))
                if self.on_failure is not None:
                    try:
                        self.on_failure()
                    except Exception as e:
                        log("on_failure: %r" % e)
            print("%s %d - %s (%.1fs)" % ("not ok" if report.failed else "ok",
                                          self.n, name, report.duration),
                  flush=True)

    def pytest_collectreport(self, report):
        if report.failed:
            self.failed += 1
            log(report.longreprtext)
            print("not ok - collection failed", flush=True)


def run_tests(tests, on_failure=None):
    """Runs test functions in order under pytest, printing TAP-like lines;
    returns the number of failures. on_failure() runs after each failed
    test (e.g. to print the tails of the daemons' logs)."""
    only = os.environ.get("PROPHET_INTEG_ONLY")
    if only:
        tests = [t for t in tests if only in t.__name__]
    plugin = _Plugin(tests, on_failure)
    t_all = time.monotonic()
    # -s: the daemons' and the tests' output go to the log as they come;
    # no terminal reporter (the plugin prints), no cache (the source tree
    # is read-only under distcheck), no ini file of whatever directory.
    rc = pytest.main([os.path.abspath(sys.argv[0]), "-s",
                      "-p", "no:terminal", "-p", "no:cacheprovider",
                      "-p", "no:stepwise", "-c", os.devnull,
                      "--rootdir", HERE], plugins=[plugin])
    failed = plugin.failed
    if rc not in (0, 1) and not failed:
        failed = 1
        print("not ok - pytest exited %d" % rc, flush=True)
    if plugin.n < len(tests) and not failed:
        failed = len(tests) - plugin.n
        print("not ok - %d test(s) did not run" % failed, flush=True)
    print("# %s: %d passed, %d failed, %.1fs" % (
        os.path.basename(sys.argv[0]), plugin.n - plugin.failed, failed,
        time.monotonic() - t_all), flush=True)
    return failed


def collect_tests(namespace):
    tests = [v for k, v in namespace.items()
             if k.startswith("test_") and callable(v)]
    tests.sort(key=lambda f: f.__code__.co_firstlineno)
    return tests


def run_suite(namespace, setup, cleanup, dump, tests=None):
    """The main() of a test file: setup(), the test_* functions of
    namespace in order (or the functions of tests, in their order), with
    dump() after each failure (e.g. the daemons' log tails), then
    cleanup(failed) in any case. Exits 0 iff all passed."""
    failed = 1
    try:
        setup()
        failed = run_tests(tests or collect_tests(namespace),
                           on_failure=dump)
    except Exception:
        for line in traceback.format_exc().splitlines():
            log(line)
        try:
            dump()
        except Exception as e:
            log("dump: %r" % e)
        print("not ok - setup failed", flush=True)
    finally:
        cleanup(bool(failed))
    failed += sanitizer_verdict()
    sys.exit(1 if failed else 0)


def main(namespace, tests=None):
    """Runs the test_* functions of a module in definition order and exits
    0 iff all passed (1 otherwise, also when setup fails)."""
    try:
        failed = run_tests(tests or collect_tests(namespace))
    except Exception:
        for line in traceback.format_exc().splitlines():
            log(line)
        print("not ok - setup failed", flush=True)
        sys.exit(1)
    failed += sanitizer_verdict()
    sys.exit(1 if failed else 0)
