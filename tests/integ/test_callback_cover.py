#!/usr/bin/python3
"""Callbacks out of the box, and a word when no notifier covers one
(issue 22).

One isolated cluster (manager + 1 worker + notifier) whose config is the
generated one (prophet-manager --print-example-config) with only what
isolates it on the shared servers (ZooKeeper root, database, Redis db,
topic prefix, ports) and the loopback receiver allowed: notifier.topics
is left empty, as a new user leaves it.
  1. A task with a callback on a topic nobody created is called back, and
     so is one on a second new topic: the default subscription covers
     every task topic. The manager counts nothing uncovered and shows the
     notifier's subscription in GET /v1/cluster.
  2. The notifier restarted with notifier.topics = other: a callback task
     on another topic is counted (prophet_callbacks_uncovered_total),
     warned about once in the manager's log (rate-limited), shown in
     GET /v1/cluster and prophetctl cluster; tasks on the covered topic, and tasks without a
     callback, are not counted.
  3. No notifier at all: every callback task is counted, once the last
     one has been gone 10 s (before, it may be restarting).
"""

import json
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None         # the cluster
NOTIFIER = None  # its Proc
RECV = None      # h.CallbackSink
NPORT = None     # the notifier's /metrics port

WARNING = "no running notifier consumes"


def example_config():
    """The generated config's active keys as {"section.key": value}."""
    out = subprocess.run([h.MANAGER_BIN, "--print-example-config"],
                         stdout=subprocess.PIPE, check=True).stdout.decode()
    conf, section = {}, None
    for line in out.splitlines():
        line = line.strip()
        if not line or line.startswith(";"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        k, _, v = line.partition("=")
        conf["%s.%s" % (section, k.strip())] = v.strip()
    return conf


def submit(task):
    api = C.api()
    try:
        r = api.post("/v1/tasks", task)
        h.check(r.status == 201, "submit %s: %r" % (task.get("id"), r))
    finally:
        api.close()


def cluster_view():
    api = C.api()
    try:
        r = api.get("/v1/cluster")
        h.check_eq(r.status, 200, "GET /v1/cluster (%r)" % r)
        return r.json
    finally:
        api.close()


def uncovered():
    return h.metrics(C.manager_addr).get("prophet_callbacks_uncovered_total")


def ctl(*args):
    p = subprocess.run([os.path.join(h.BUILDDIR, "prophetctl"), "--url",
                        "http://" + C.manager_addr] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=30)
    h.check(p.returncode == 0, "prophetctl %s: exit %d: %s"
            % (" ".join(args), p.returncode, p.stderr.strip()))
    return p.stdout


def wait_notifiers(pred, what):
    return h.wait_until(lambda: (lambda cb: cb if cb["known"] and pred(
        cb["notifiers"]) else None)(cluster_view()["callbacks"]), 30, 0.3,
        what)


def start_notifier(args=()):
    global NOTIFIER
    NOTIFIER = C.notifier(NPORT, args=list(args))
    C.workers.append(NOTIFIER)  # so that cleanup and log dumps include it
    NOTIFIER.start()
    C._wait_http(NOTIFIER, NOTIFIER.addr, "/readyz", 60)


def setup():
    global C, RECV, NPORT
    RECV = h.CallbackSink()
    NPORT = h.free_port()
    C = h.Cluster(workers=1, name="cbcover")
    C.open()
    own = C.conf_dict()  # what isolates this cluster
    conf = {k: v for k, v in example_config().items() if k not in own}
    h.check_eq(conf.get("notifier.topics"), "",
               "the generated config leaves notifier.topics empty")
    conf.update({
        "notifier.http_listen": "127.0.0.1:%d" % NPORT,
        # the receiver runs here, on loopback, which callbacks may not
        # reach by default (test_ssrf.py)
        "notifier.callback_networks_allowed": "127.0.0.0/8",
        "log.level": "info",
    })
    C.extra_conf.update(conf)
    C.write_conf()
    C.start_manager()
    C.start_worker(0)
    start_notifier()


def test_default_config_makes_every_callback():
    m0 = uncovered()
    h.check_eq(m0, 0.0, "nothing uncovered yet")
    cb = wait_notifiers(lambda ns: len(ns) == 1, "the notifier announced")
    pat = cb["notifiers"][0]["patterns"]
    h.check_eq(pat, ["^" + C.topic_prefix.replace(".", "\\.") + ".*"],
               "the default subscription: every task topic")
    h.check(NOTIFIER.grep("consuming") and
            not NOTIFIER.grep("notifier.topics is empty"),
            "the notifier consumes every task topic")
    # neither topic exists: the worker's publish creates it, the
    # notifier's pattern finds it at its next metadata refresh
    t0 = time.monotonic()
    for tid, topic in (("first", "orders"), ("second", "billing")):
        submit({"id": tid, "topic": topic, "body": "b", "delay_ms": 0,
                "callback": {"url": RECV.url("cb/" + tid)}})
    for tid in ("first", "second"):
        if RECV.wait(tid, 1, 90) is None:
            h.log("tasks: %r" % C.mysql("SELECT id, status, callback_status "
                                        "FROM tasks"))
            h.log("notifier: %r" % {
                k: v for k, v in h.metrics(NOTIFIER.addr).items()
                if "consumed" in k or "skipped" in k or "callbacks_" in k})
            h.log("receiver: %r" % RECV.paths())
            h.check(False, "callback of %s not made" % tid)
    h.log("FIGURES callbacks of tasks on two new topics made within "
          "%.1f s (the default pattern's metadata refresh is 10 s)"
          % (time.monotonic() - t0))
    h.wait_until(lambda: int(C.mysql(
        "SELECT COUNT(*) FROM tasks WHERE id IN ('first', 'second') AND "
        "callback_status = 'ok'")[0][0]) == 2, 30, 0.3, "callback_status ok")
    h.check_eq(uncovered(), 0.0, "covered tasks are not counted")
    h.check(not C.manager.grep(WARNING), "no warning for covered tasks")
    h.check_eq(h.metrics(C.manager_addr).get("prophet_notifiers"), 1.0,
               "prophet_notifiers")


def test_topic_no_notifier_covers():
    NOTIFIER.stop()
    start_notifier(["--set", "notifier.topics=other"])
    wait_notifiers(lambda ns: len(ns) == 1 and
                   C.topic("other") in ns[0]["topics"] and
                   not ns[0]["patterns"], "the restarted notifier")
    m0 = uncovered()
    submit({"id": "lost-1", "topic": "orders", "body": "b",
            "delay_ms": 3600000, "callback": {"url": RECV.url("cb/lost-1")}})
    h.check_eq(uncovered() - m0, 1.0, "an uncovered callback task counted")
    lines = C.manager.grep(WARNING)
    h.check_eq(len(lines), 1, "one warning: %r" % lines)
    h.check("topic=orders" in lines[0] and "id=lost-1" in lines[0],
            "the warning names topic and task: %r" % lines[0])
    submit({"id": "lost-2", "topic": "orders", "body": "b",
            "delay_ms": 3600000, "callback": {"url": RECV.url("cb/lost-2")}})
    h.check_eq(uncovered() - m0, 2.0, "the second one counted too")
    h.check_eq(len(C.manager.grep(WARNING)), 1,
               "the warning is rate-limited")
    cb = cluster_view()["callbacks"]
    h.check_eq(cb["last_uncovered"]["topic"], "orders", "GET /v1/cluster")
    h.check_eq(cb["last_uncovered"]["id"], "lost-2", "GET /v1/cluster")
    h.check(cb["uncovered_total"] >= 2, "uncovered_total: %r" % cb)
    table = ctl("cluster")
    h.check(re.search(r"^notifiers 1$", table, re.M) and
            re.search(r"^uncovered \d+ task\(s\) with a callback .* lost-2 on "
                      r"topic orders at ", table, re.M),
            "prophetctl cluster shows it:\n%s" % table)
    # covered, or without a callback: not counted
    submit({"id": "kept", "topic": "other", "body": "b", "delay_ms": 0,
            "callback": {"url": RECV.url("cb/kept")}})
    submit({"id": "plain", "topic": "orders", "body": "b",
            "delay_ms": 3600000})
    h.check_eq(uncovered() - m0, 2.0, "covered and plain tasks not counted")
    h.check(RECV.wait("kept", 1, 90) is not None,
            "callback on the covered topic not made")


def test_no_notifier_running():
    t_stop = time.monotonic()
    NOTIFIER.stop()
    wait_notifiers(lambda ns: not ns, "the stopped notifier's node gone")
    h.check_eq(h.metrics(C.manager_addr).get("prophet_notifiers"), 0.0,
               "prophet_notifiers")
    # Gone less than 10 s (COVER_GRACE_S): a restart, as in an upgrade;
    # it reads on from its group's offsets, so nothing is uncovered.
    m0 = uncovered()
    submit({"id": "restarting", "topic": "other", "body": "b",
            "delay_ms": 3600000,
            "callback": {"url": RECV.url("cb/restarting")}})
    h.check(time.monotonic() - t_stop < 9, "the check came too late")
    h.check_eq(uncovered() - m0, 0.0, "counted while the notifier restarts")
    time.sleep(max(0.0, t_stop + 12.5 - time.monotonic()))
    submit({"id": "alone", "topic": "other", "body": "b",
            "delay_ms": 3600000, "callback": {"url": RECV.url("cb/alone")}})
    h.check_eq(uncovered() - m0, 1.0, "counted without any notifier")


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)
    if RECV is not None:
        RECV.close()


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
