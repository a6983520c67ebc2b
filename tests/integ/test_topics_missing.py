#!/usr/bin/python3
"""Task topics that do not exist in Kafka (issue 20), on the real broker
with auto-creation off for Prophet's clients (the dev broker itself has
auto.create.topics.enable=true, so a client that allowed it would make the
topic and hide the problem):

- a submission to a missing topic is refused 422 topic_unknown (field
  topic), alone, through mykit's /push, as one item of a batch whose other
  items are accepted, and from the ingest topic (to its errors topic); asking
  about it did not create it;
- once the topic is made, a submission is accepted within seconds (the
  missing answer is cached 2 s) and fires;
- with kafka.create_task_topics the manager creates it with
  kafka.topic_partitions and the task fires;
- a topic deleted after its tasks were accepted holds up no other topic's
  tasks, its task is counted (prophet_publish_unknown_topic_total), stays
  unpublished but not lost, and fires once the topic is back; meanwhile a
  task of that topic can be cancelled (it waits for its retry as
  scheduled, not in flight) and then never fires.
"""

import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import servers as s  # noqa: E402

C = None
API = None
INGEST = None
LEASE_MS = 3000


def setup():
    global C, API, INGEST
    tag = h.rand_tag()
    INGEST = "ingest-topics-" + tag
    C = h.Cluster(workers=1, name="topics",
                  conf={"kafka.check_task_topics": "true",
                        "kafka.create_task_topics": "false",
                        "kafka.ingest_topic": INGEST,
                        "kafka.ingest_group": "grp-" + tag,
                        "worker.lease_ms": LEASE_MS})
    C.open()
    # The worker's producer would otherwise make a missing topic on the
    # dev broker at its first publish.
    with open(C.conf_path, "a") as f:
        f.write("[kafka.producer]\nallow.auto.create.topics = false\n")
    C.start()
    API = C.api()


def broker_topics():
    """Every topic the broker has (a metadata request for all topics,
    which creates nothing)."""
    p = subprocess.run(["kcat"] + C.kcat_args + ["-L", "-b", C.brokers],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=30)
    h.check(p.returncode == 0, "kcat -L: %s" % p.stdout[-500:])
    out = {}
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith('topic "'):
            name = line.split('"')[1]
            parts = line.split(" with ")[1].split()[0]
            out[name] = int(parts)
    return out


def kafka_topics(*args):
    return s.kafka_topics_cli(C.brokers, *args)


def submit(api, topic, **kw):
    task = {"topic": topic, "body": "b-" + topic}
    task.update(kw)
    return api.post("/v1/tasks", task)


def metric(addr, name):
    return h.metrics(addr).get(name, 0.0)


def check_unknown(r, what):
    h.check_eq(r.status, 422, "%s: status (%r)" % (what, r))
    e = r.json["error"]
    h.check_eq(e["code"], "topic_unknown", "%s: error code" % what)
    h.check_eq(e["field"], "topic", "%s: error field" % what)
    return e


def test_missing_topic_refused_and_not_created():
    topic = "nx-" + h.rand_tag()
    before = metric(C.manager_addr, "prophet_tasks_topic_unknown_total")
    r = submit(API, topic, delay_ms=0)
    e = check_unknown(r, "submit to a missing topic")
    h.check(C.topic(topic) in e["message"], "message names the Kafka "
            "topic: %r" % e["message"])
    # Not "the brokers do not create topics": the check refuses whatever
    # the brokers' auto.create.topics.enable, and the key changes it.
    h.check("kafka.create_task_topics" in e["message"], "message names "
            "kafka.create_task_topics: %r" % e["message"])
    # Asked again within the cache time: refused from the cache.
    t0 = time.monotonic()
    check_unknown(submit(API, topic, delay_ms=0), "second submission")
    h.log("cached refusal answered in %.1f ms"
          % ((time.monotonic() - t0) * 1000))
    h.check(C.topic(topic) not in broker_topics(),
            "the check created %s on the broker" % C.topic(topic))
    got = metric(C.manager_addr, "prophet_tasks_topic_unknown_total")
    h.check_eq(got - before, 2, "prophet_tasks_topic_unknown_total")
    # mykit's /push goes through the same check.
    r = API.post("/push", {"topic": topic, "body": "m", "delay": 0})
    h.check(r.status == 200 and r.json["success"] is False and
            "does not exist" in r.json["message"],
            "mykit push to a missing topic: %r" % r)
    h.check(C.topic(topic) not in broker_topics(), "created by /push")


def test_batch_reports_the_missing_item_only():
    good, bad = "ok-" + h.rand_tag(), "nx-" + h.rand_tag()
    h.create_topics(C.brokers, [C.topic(good)], kcat_args=C.kcat_args)
    reader = C.reader([good])
    r = API.post("/v1/tasks/batch", {"tasks": [
        {"topic": good, "body": "1", "delay_ms": 200},
        {"topic": bad, "body": "2", "delay_ms": 200},
        {"topic": good, "body": "3", "delay_ms": 200}]})
    h.check_eq(r.status, 200, "batch status (%r)" % r)
    res = r.json["results"]
    h.check_eq([x["code"] for x in res], [201, 422, 201], "batch codes")
    h.check_eq(res[1]["error"]["code"], "topic_unknown", "item 1 code")
    h.check_eq(res[1]["error"]["field"], "topic", "item 1 field")
    ids = [res[0]["id"], res[2]["id"]]
    missing = reader.wait_for(ids, 30)
    h.check(not missing, "accepted batch items not published: %s" % missing)
    h.check(C.topic(bad) not in broker_topics(), "batch created %s" % bad)


def test_ingest_refuses_to_errors_topic():
    good, bad = "ing-" + h.rand_tag(), "nx-" + h.rand_tag()
    h.create_topics(C.brokers, [C.topic(good)], kcat_args=C.kcat_args)
    reader = C.reader([good])
    lines = [json.dumps({"id": "ing-bad-" + bad, "topic": bad, "body": "x",
                         "delay_ms": 0}),
             json.dumps({"id": "ing-ok-" + good, "topic": good, "body": "y",
                         "delay_ms": 0})]
    p = subprocess.run(["kcat"] + C.kcat_args + ["-P", "-b", C.brokers, "-t",
                                                 INGEST],
                       input="\n".join(lines) + "\n", text=True,
                       capture_output=True, timeout=60)
    h.check_eq(p.returncode, 0, "kcat produce: %s" % p.stderr)
    h.check(not reader.wait_for(["ing-ok-" + good], 30),
            "the ingested task of an existing topic not published")
    deadline = time.monotonic() + 30
    errs = []
    while not errs and time.monotonic() < deadline:
        p = subprocess.run(["kcat"] + C.kcat_args +
                           ["-C", "-b", C.brokers, "-t", INGEST + ".errors",
                            "-o", "beginning", "-e", "-q", "-J"],
                           capture_output=True, text=True, timeout=60)
        errs = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
        if not errs:
            time.sleep(0.3)
    h.check_eq(len(errs), 1, "messages in the errors topic")
    hdr = dict(zip(errs[0]["headers"][::2], errs[0]["headers"][1::2]))
    h.check_eq(hdr.get("prophet-error-code"), "topic_unknown", "reason")
    h.check_eq(hdr.get("prophet-error-field"), "topic", "field")
    h.check_eq(int(C.mysql("SELECT COUNT(*) FROM tasks WHERE id = '%s'"
                           % ("ing-bad-" + bad))[0][0]), 0, "not stored")
    h.check(C.topic(bad) not in broker_topics(), "ingest created %s" % bad)


def test_topic_created_later_is_usable_within_seconds():
    topic = "late-" + h.rand_tag()
    check_unknown(submit(API, topic, delay_ms=0), "before creation")
    h.create_topics(C.brokers, [C.topic(topic)], kcat_args=C.kcat_args)
    made = time.monotonic()
    while True:
        r = submit(API, topic, delay_ms=0)
        if r.status == 201:
            break
        check_unknown(r, "while the cache says missing")
        h.check(time.monotonic() - made < 5, "still refused 5 s after the "
                "topic was created")
        time.sleep(0.1)
    usable = time.monotonic() - made
    h.log("topic usable %.2f s after it was created" % usable)
    reader = C.reader([topic])
    missing = reader.wait_for([r.json["id"]], 30)
    h.check(not missing, "task of the new topic not published")


def test_create_on_first_use():
    topic = "auto-" + h.rand_tag()
    m2 = C.add_manager("manager-create", args=[
        "--set", "kafka.create_task_topics=true",
        "--set", "kafka.topic_partitions=3"])
    api = h.Api(m2.addr)
    try:
        t0 = time.monotonic()
        r = submit(api, topic, delay_ms=0)
        took = time.monotonic() - t0
        h.check_eq(r.status, 201, "submit with create_task_topics (%r)" % r)
        h.log("first submission, topic created on the way: %.0f ms"
              % (took * 1000))
        parts = broker_topics().get(C.topic(topic))
        h.check_eq(parts, 3, "partitions of the created topic")
        h.check_eq(metric(m2.addr, "prophet_task_topics_created_total"), 1,
                   "prophet_task_topics_created_total")
        h.check(m2.grep("task topic created at first use"),
                "creation not logged")
        reader = C.reader([topic])
        missing = reader.wait_for([r.json["id"]], 30)
        h.check(not missing, "task of the created topic not published")
        # The next one is answered from the cache: nothing created again.
        h.check_eq(submit(api, topic, delay_ms=0).status, 201, "second")
        h.check_eq(metric(m2.addr, "prophet_task_topics_created_total"), 1,
                   "created once")
    finally:
        api.close()
        m2.stop()


def test_brokers_unreachable_refuse_nothing():
    """A manager whose brokers do not answer accepts (the tasks are
    durable and wait for Kafka), counts the unverified checks, and does
    not make every submission wait for the brokers."""
    known = "up-" + h.rand_tag()
    h.create_topics(C.brokers, [C.topic(known)], kcat_args=C.kcat_args)
    m3 = C.add_manager("manager-nokafka", args=[
        "--set", "kafka.brokers=127.0.0.1:%d" % h.free_port()])
    api = h.Api(m3.addr)
    try:
        t0 = time.monotonic()
        r = submit(api, known, delay_ms=0)
        first = time.monotonic() - t0
        h.check_eq(r.status, 201, "submit, brokers unreachable (%r)" % r)
        t0 = time.monotonic()
        r2 = submit(api, "other-" + h.rand_tag(), delay_ms=3600000)
        second = time.monotonic() - t0
        h.check_eq(r2.status, 201, "another topic (%r)" % r2)
        h.log("brokers unreachable: first submission %.2f s (one check "
              "timing out), the next %.0f ms" % (first, second * 1000))
        h.check(first < 5, "first submission took %.1f s" % first)
        h.check(second < 0.5, "the next waited %.2f s for the brokers"
                % second)
        h.check(metric(m3.addr, "prophet_task_topic_unverified_total") >= 1,
                "unverified checks not counted")
        h.check(m3.grep("task topic not verified"), "not warned about")
        # Durable: the worker (which reaches Kafka) publishes it.
        reader = C.reader([known])
        h.check(not reader.wait_for([r.json["id"]], 30),
                "task accepted while the brokers were unreachable not "
                "published")
    finally:
        api.close()
        m3.stop()


def test_deleted_topic_holds_up_nothing_and_fires_when_back():
    gone, other = "gone-" + h.rand_tag(), "other-" + h.rand_tag()
    h.create_topics(C.brokers, [C.topic(gone), C.topic(other)],
                    kcat_args=C.kcat_args)
    w = C.workers[0]
    # The worker knows the topic (it published to it) before it goes.
    first = submit(API, gone, delay_ms=0)
    h.check_eq(first.status, 201, "first task of %s" % gone)
    r0 = C.reader([gone])
    h.check(not r0.wait_for([first.json["id"]], 30), "first task not "
            "published")
    r0.stop()
    # Accepted while the topic exists; then deleted (the CLI takes a few
    # seconds), then due in the middle of the other topic's tasks.
    late = submit(API, gone, delay_ms=600000)
    h.check_eq(late.status, 201, "task of %s (%r)" % (gone, late))
    tid = late.json["id"]
    # A second one, cancelled while its publishes fail (below).
    stuck = submit(API, gone, delay_ms=600000)
    h.check_eq(stuck.status, 201, "task of %s (%r)" % (gone, stuck))
    sid = stuck.json["id"]
    kafka_topics("--delete", "--topic", C.topic(gone))
    h.wait_until(lambda: C.topic(gone) not in broker_topics(), 30,
                 0.2, "topic deleted")
    reader = C.reader([other])
    now = h.now_ms()
    r = API.request("PATCH", "/v1/tasks/%s" % tid, {"due_at": now + 3000})
    h.check_eq(r.status, 200, "reschedule %r" % r)
    r = API.request("PATCH", "/v1/tasks/%s" % sid, {"due_at": now + 3000})
    h.check_eq(r.status, 200, "reschedule %r" % r)
    # The other topic's tasks, due every 200 ms across the failed fires.
    others = []
    for i in range(40):
        r = submit(API, other, due_at=now + 2000 + 200 * i)
        h.check_eq(r.status, 201, "task of %s" % other)
        others.append((r.json["id"], now + 2000 + 200 * i))
    missing = reader.wait_for([i for i, _ in others], 60)
    h.check(not missing, "other topic's tasks not published: %d"
            % len(missing))
    # Lateness by the Kafka timestamp (set when the worker produced it).
    late_ms = sorted(reader.by_id[i][0].ts - due for i, due in others)
    h.log("other topic during the failed publishes: lateness p50 %d ms, "
          "max %d ms (n=%d)" % (late_ms[len(late_ms) // 2], late_ms[-1],
                                len(late_ms)))
    h.check(late_ms[0] >= 0, "published early: %d ms" % late_ms[0])
    h.check(late_ms[-1] < 500, "other topic's tasks held up: max %d ms"
            % late_ms[-1])
    h.wait_until(lambda: metric(w.addr, "prophet_publish_unknown_topic_total")
                 >= 1, 30, 0.2, "prophet_publish_unknown_topic_total")
    h.check(w.grep("task topic does not exist in Kafka"), "no warning")
    h.check(any(C.topic(gone) in line for line in
                w.grep("task topic does not exist in Kafka")),
            "the warning names the topic")
    st = API.get("/v1/tasks/%s" % tid).json
    h.check(st["status"] in ("scheduled", "firing"),
            "task of the deleted topic: %r" % st["status"])
    # Retried every lease: still not lost a few leases later.
    time.sleep(2 * LEASE_MS / 1000.0)
    n = metric(w.addr, "prophet_publish_unknown_topic_total")
    h.check(n >= 2, "retried after its lease: counted %s times" % n)
    st = API.get("/v1/tasks/%s" % tid).json
    h.check(st["status"] in ("scheduled", "firing"),
            "task of the deleted topic later: %r" % st["status"])
    # Between its failed publishes a task waits for its retry as scheduled:
    # it can be cancelled (it stayed in flight and answered 409 for as long
    # as the topic was gone).
    r = API.request("DELETE", "/v1/tasks/%s" % sid)
    h.check_eq(r.status, 200, "cancel of a task whose publishes fail (%r)"
               % r)
    h.check_eq(API.get("/v1/tasks/%s" % sid).json["status"], "cancelled",
               "status after the cancel")
    # Back: it fires within about a lease.
    kafka_topics("--create", "--topic", C.topic(gone), "--partitions", "2")
    back = time.monotonic()
    r1 = C.reader([gone])
    missing = r1.wait_for([tid], 60)
    h.check(not missing, "task of the re-created topic not published")
    h.log("published %.1f s after the topic was re-created (lease %d ms)"
          % (time.monotonic() - back, LEASE_MS))
    h.wait_until(lambda: API.get("/v1/tasks/%s" % tid).json["status"] ==
                 "delivered", 30, 0.2, "delivered")
    # The cancelled one never fires, not even a lease later.
    time.sleep(LEASE_MS / 1000.0 + 1)
    h.check(sid not in r1.by_id, "the cancelled task was published")
    h.check_eq(API.get("/v1/tasks/%s" % sid).json["status"], "cancelled",
               "status of the cancelled task at the end")


def cleanup(failed):
    if API is not None:
        API.close()
    if C is not None:
        C.close(failed=failed)


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)
