"""Private server instances for fault-injection tests (Python 3 stdlib only).

The shared dev cluster (scripts/devcluster) is used by other tests at the
same time, so a test that stops, kills or pauses a server must run its own:

    import harness as h, servers as s
    rd = s.PrivateRedis().start()            # redis-server, free port
    db = s.PrivateMariaDB().start()          # mariadbd, own data dir
    kf = s.PrivateKafka().start()            # one-node KRaft broker
    with s.Cluster(redis=rd, db=db, kafka=kf, workers=1) as c:
        c.start()
        rd.kill(); rd.start()                # back EMPTY (no persistence)
        rd.pause(); rd.resume()              # SIGSTOP / SIGCONT (hung server)
        db.stop(); db.start()                # same data dir, data kept
        kf.stop(); kf.start()                # same log dir, data kept
    rd.close(); db.close(); kf.close()

Every server runs as a harness.Proc (stdout/stderr to a log in its temp
dir, killed with the test runner), on 127.0.0.1 and free ports, with its
data under a temp dir that close() removes (kept when failed or with
PROPHET_INTEG_KEEP=1). s.Cluster is harness.Cluster with any of the
shared Redis / MariaDB / Kafka replaced by a private one; ZooKeeper and the
rest stay shared (isolated by the harness as usual).

Server start-up is slow on small machines (MariaDB's install ~5 s, Kafka's
format + start ~10-20 s): start_async() starts a server in a background
thread, wait_ready() joins it.
"""

import base64
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid

import harness as h

REPO = h.REPO
HOST = "127.0.0.1"


class _Server:
    """Common parts: temp dir, one Proc, async start, pause/resume."""

    name = "server"

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="prophet-%s-" % self.name)
        self.proc = None
        self._thread = None
        self._start_error = None
        self._started = threading.Event()
        self._closed = threading.Event()
        self.starts = 0
        self.last_ready_s = None  # seconds the last start took

    # -- lifecycle -------------------------------------------------------
    def _launch(self):
        raise NotImplementedError

    def ready(self):
        raise NotImplementedError

    def start(self, timeout=90):
        """Starts the server (same data every time for MariaDB and Kafka;
        Redis comes back empty) and waits until it answers."""
        t0 = time.monotonic()
        self._launch()
        self.starts += 1

        def up():
            if not self.proc.running():
                raise h.TestFailure(
                    "private %s exited during startup (code %s); last "
                    "lines of %s:\n  %s" % (
                        self.name, self.proc.popen.returncode,
                        self.proc.log_path,
                        "\n  ".join(self.proc.tail(15))))
            return self.ready()
        h.wait_until(up, timeout, 0.1, "private %s to answer" % self.name)
        self.last_ready_s = time.monotonic() - t0
        return self

    def start_async(self, timeout=120):
        """start() in a background thread; wait_ready() waits for it.

        The thread outlives the start (until close()): the harness runs
        servers under `setpriv --pdeathsig KILL`, and the kernel sends
        that signal when the THREAD that forked the child exits."""
        def run():
            try:
                self.start(timeout)
            except BaseException as e:  # reported by wait_ready()
                self._start_error = e
            self._started.set()
            self._closed.wait()
        self._started = threading.Event()
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout=150):
        if self._thread is not None:
            if not self._started.wait(timeout):
                raise h.TestFailure("private %s: start did not finish "
                                    "within %ss" % (self.name, timeout))
            self._thread = None
            if self._start_error is not None:
                e, self._start_error = self._start_error, None
                raise e
        if not self.running():
            raise h.TestFailure("private %s is not running" % self.name)
        return self

    def running(self):
        return self.proc is not None and self.proc.running()

    def stop(self, timeout=30):
        """SIGTERM (the server's clean shutdown), wait for the exit."""
        if self.proc is not None:
            self.resume()
            return self.proc.stop(timeout)
        return None

    def kill(self):
        """SIGKILL: a crash."""
        if self.proc is not None:
            self.proc.kill()

    def pause(self):
        """SIGSTOP: a hung server (its sockets stay open, nothing answers)."""
        self.proc.signal(signal.SIGSTOP)
        self.proc._note("paused (SIGSTOP)")

    def resume(self):
        if self.proc is not None and self.proc.running():
            self.proc.signal(signal.SIGCONT)

    def close(self, failed=False):
        if self._thread is not None:
            self._started.wait(120)
        if self.proc is not None:
            self.resume()
            self.proc.kill()
        self._closed.set()
        if failed or h.KEEP:
            h.log("private %s kept in %s" % (self.name, self.dir))
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def tail(self, n=30):
        return self.proc.tail(n) if self.proc else []


# ----------------------------------------------------------------- redis ---

class PrivateRedis(_Server):
    """redis-server without persistence (`--save "" --appendonly no`):
    every start after a stop or a kill is an EMPTY Redis."""

    name = "redis"

    def __init__(self):
        super().__init__()
        self.host = HOST
        self.port = h.free_port()

    def _launch(self):
        if self.proc is None:
            self.proc = h.Proc("redis", [
                "redis-server", "--port", str(self.port), "--bind", HOST,
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--protected-mode", "yes", "--daemonize", "no",
                "--logfile", "", "--databases", "16"],
                os.path.join(self.dir, "redis.log"))
        self.proc.start()

    def ready(self):
        try:
            r = h.Redis(self.host, self.port, timeout=1)
            try:
                return r.cmd("PING") == b"PONG"
            finally:
                r.close()
        except (OSError, RuntimeError, ConnectionError):
            return False

    def client(self, db=0):
        return h.Redis(self.host, self.port, db)


# --------------------------------------------------------------- mariadb ---

class PrivateMariaDB(_Server):
    """mariadbd --no-defaults on its own data dir, initialised with
    mariadb-install-db like scripts/devcluster does; user prophet/prophet
    with all privileges (the harness creates one database per test)."""

    name = "mariadb"
    user = "prophet"
    password = "prophet"

    def __init__(self):
        super().__init__()
        self.host = HOST
        self.port = h.free_port()
        self.datadir = os.path.join(self.dir, "data")
        self.socket = os.path.join(self.dir, "mysqld.sock")
        # its own tmpdir: installs sharing /tmp remove each other's
        # temporary tables (failed a CI run: "Unknown table
        # 'mysql.tmp_user_sys'")
        self.tmpdir = os.path.join(self.dir, "tmp")
        os.makedirs(self.tmpdir, exist_ok=True)
        self.initialised = False
        self.users_created = False
        if len(self.socket) >= 107:
            raise h.TestFailure("socket path too long: %s" % self.socket)

    def _install(self):
        logf = os.path.join(self.dir, "install.log")
        with open(logf, "ab") as f:
            p = subprocess.run(
                ["mariadb-install-db", "--no-defaults",
                 "--datadir=" + self.datadir, "--tmpdir=" + self.tmpdir,
                 "--user=root", "--auth-root-authentication-method=normal",
                 "--skip-test-db"],
                stdout=f, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            with open(logf, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            # the ERROR lines first, indented: CI keeps the first few
            # indented lines after a failure
            errs = [x for x in lines if "ERROR" in x or "Warning" in x]
            raise h.TestFailure("mariadb-install-db failed (exit %d), log %s"
                                ":\n%s" % (p.returncode, logf, "\n".join(
                                    "  " + x for x in errs + lines[-20:])))
        self.initialised = True

    def _launch(self):
        if not self.initialised:
            self._install()
        if self.proc is None:
            self.proc = h.Proc("mariadb", [
                "mariadbd", "--no-defaults", "--datadir=" + self.datadir,
                "--tmpdir=" + self.tmpdir,
                "--socket=" + self.socket,
                "--pid-file=" + os.path.join(self.dir, "mariadbd.pid"),
                "--port=%d" % self.port, "--bind-address=" + HOST,
                "--user=root", "--skip-log-bin", "--skip-name-resolve",
                "--max-connections=200", "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                "--innodb-flush-log-at-trx-commit=1",
                "--performance-schema=OFF",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_general_ci"],
                os.path.join(self.dir, "mariadb.log"))
        self.proc.start()

    def _root(self, sql):
        return subprocess.run(
            ["mariadb", "--no-defaults", "--user=root",
             "--socket=" + self.socket, "--connect-timeout=2", "--batch",
             "-e", sql], stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def _tcp_ok(self):
        p = subprocess.run(
            ["mariadb", "--no-defaults", "-h", HOST, "-P", str(self.port),
             "-u" + self.user, "-p" + self.password, "--connect-timeout=2",
             "--batch", "-e", "SELECT 1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return p.returncode == 0

    def ready(self):
        if not self.users_created:
            if self._root("SELECT 1").returncode != 0:
                return False
            sql = []
            for host in ("%", "localhost", "127.0.0.1"):
                sql.append("CREATE USER IF NOT EXISTS '%s'@'%s' IDENTIFIED "
                           "BY '%s'; GRANT ALL PRIVILEGES ON *.* TO '%s'@'%s';"
                           % (self.user, host, self.password, self.user,
                              host))
            sql.append("CREATE DATABASE IF NOT EXISTS prophet;")
            sql.append("FLUSH PRIVILEGES;")
            p = self._root(" ".join(sql))
            if p.returncode != 0:
                raise h.TestFailure("private mariadb: user setup failed: %s"
                                    % p.stderr.decode("utf-8", "replace"))
            self.users_created = True
        return self._tcp_ok()

    def stop(self, timeout=60):
        return super().stop(timeout)


# ----------------------------------------------------------------- kafka ---

def kafka_dir():
    p = subprocess.run([os.path.join(REPO, "scripts", "deps"),
                        "--print-kafka-dir"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    d = p.stdout.strip()
    if p.returncode != 0 or not d or not os.path.isdir(
            os.path.join(d, "libs")):
        raise h.TestFailure("no Kafka jars (scripts/deps --print-kafka-dir: "
                            "%r %s)" % (d, p.stderr.strip()))
    return d


def kafka_classpath(kdir):
    """The classpath scripts/devcluster uses: libs/*, except that a libs/
    with SLF4J 1.x but no SLF4J 1.x log4j binding gets the binding that
    devcluster fetched into devcluster-libs (if any) instead of
    log4j-slf4j2-impl."""
    libs = os.path.join(kdir, "libs")
    if glob.glob(os.path.join(libs, "log4j-slf4j-impl-*.jar")) or \
            not glob.glob(os.path.join(libs, "slf4j-api-1.*.jar")):
        return libs + "/*"
    bridge = glob.glob(os.path.join(kdir, "devcluster-libs",
                                    "log4j-slf4j-impl-*.jar"))
    if not bridge:
        return libs + "/*"
    jars = [j for j in sorted(glob.glob(os.path.join(libs, "*.jar")))
            if not os.path.basename(j).startswith("log4j-slf4j2-impl-")]
    return ":".join(jars + bridge[:1])


_KAFKA_CP = None


def kafka_topics_cli(brokers, *args):
    """Kafka's own topic CLI (TopicCommand, what kafka-topics.sh runs),
    as an operator would: e.g. "--delete", "--topic", name. A JVM start:
    a few seconds. Returns its output; a non-zero exit is a failure."""
    return kafka_tool_cli(brokers, "TopicCommand", *args)


def kafka_tool_cli(brokers, tool, *args):
    """One of Kafka's own tools (org.apache.kafka.tools.<tool>, e.g.
    TransactionsCommand, what kafka-transactions.sh runs) against
    brokers. Returns its output; a non-zero exit is a failure."""
    global _KAFKA_CP
    if _KAFKA_CP is None:
        _KAFKA_CP = kafka_classpath(kafka_dir())
    argv = ["java", "-Xmx128m", "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dlog4j2.configurationFile=" +
            os.path.join(REPO, "scripts", "kafka-log4j2.yaml"),
            "-cp", _KAFKA_CP, "org.apache.kafka.tools." + tool,
            "--bootstrap-server", brokers] + list(args)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    if p.returncode != 0:
        raise h.TestFailure("%s %s: %s" % (tool, " ".join(args),
                                           p.stdout[-1000:]))
    return p.stdout


class PrivateKafka(_Server):
    """A one-node KRaft broker+controller (server.properties as in
    scripts/devcluster, small heap). Data survives stop()/start()."""

    name = "kafka"

    def __init__(self, heap="256m"):
        super().__init__()
        self.port = h.free_port()
        self.controller_port = h.free_port()
        while self.controller_port == self.port:
            self.controller_port = h.free_port()
        self.brokers = "%s:%d" % (HOST, self.port)
        self.heap = heap
        self.formatted = False
        self.props = os.path.join(self.dir, "server.properties")
        self.log4j = os.path.join(REPO, "scripts", "kafka-log4j2.yaml")
        self.cp = None
        with open(self.props, "w") as f:
            f.write("""# written by tests/integ/servers.py
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{h}:{cp}
listeners=PLAINTEXT://{h}:{p},CONTROLLER://{h}:{cp}
advertised.listeners=PLAINTEXT://{h}:{p}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={d}
num.partitions=4
auto.create.topics.enable=true
group.initial.rebalance.delay.ms=0
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
num.network.threads=2
num.io.threads=2
""".format(h=HOST, p=self.port, cp=self.controller_port,
           d=os.path.join(self.dir, "data")))

    def _java(self, heap):
        return ["java", "-Xms64m", "-Xmx" + heap, "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
                "-Djava.awt.headless=true",
                "-Dlog4j2.configurationFile=" + self.log4j]

    def _format(self):
        # Not starting with "-": StorageTool would take it for an option.
        cluster_id = "-"
        while cluster_id.startswith("-"):
            cluster_id = base64.urlsafe_b64encode(
                uuid.uuid4().bytes).decode().rstrip("=")
        logf = os.path.join(self.dir, "format.log")
        with open(logf, "ab") as f:
            p = subprocess.run(
                self._java("128m") + ["-cp", self.cp,
                                      "kafka.tools.StorageTool", "format",
                                      "--cluster-id", cluster_id,
                                      "--config", self.props],
                stdout=f, stderr=subprocess.STDOUT, cwd=self.dir)
        if p.returncode != 0:
            with open(logf, "rb") as f:
                tail = f.read().decode("utf-8", "replace")[-2000:]
            raise h.TestFailure("kafka storage format failed (exit %d):\n%s"
                                % (p.returncode, tail))
        self.formatted = True

    def _launch(self):
        if self.cp is None:
            self.cp = kafka_classpath(kafka_dir())
        if not self.formatted:
            self._format()
        if self.proc is None:
            self.proc = h.Proc("kafka", self._java(self.heap) + [
                "-cp", self.cp, "kafka.Kafka", self.props],
                os.path.join(self.dir, "kafka.log"))
        self.proc.start()

    def ready(self):
        try:
            p = subprocess.run(["kcat", "-b", self.brokers, "-L", "-m", "3"],
                               stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True,
                               timeout=10)
        except subprocess.TimeoutExpired:
            return False
        return p.returncode == 0 and \
            ("broker 1 at %s" % self.brokers) in p.stdout

    def stop(self, timeout=60):
        return super().stop(timeout)


# --------------------------------------------------------------- cluster ---

class Cluster(h.Cluster):
    """harness.Cluster whose Redis, MariaDB and/or Kafka are private
    instances (the others, and ZooKeeper, stay the shared dev servers)."""

    def __init__(self, *args, redis=None, db=None, kafka=None, **kw):
        super().__init__(*args, **kw)
        self.private_redis = redis
        self.private_db = db
        self.private_kafka = kafka
        if redis is not None:
            self.redis_host, self.redis_port = redis.host, redis.port
        if db is not None:
            self.db_host, self.db_port = db.host, db.port
            self.db_user, self.db_password = db.user, db.password
        if kafka is not None:
            self.brokers = kafka.brokers
