#!/usr/bin/python3
"""Retry tasks only the notifier can make, and topics Kafka cannot hold.

One isolated cluster (manager with Kafka ingest, worker, notifier) whose
topic prefix is 61 characters long, and an HTTP sink on loopback:
  1. the dead-letter topic and the exactly-once marker topic are refused
     at submit (400 reserved_topic);
  2. the retry topic takes a task only with a valid notifier signature
     (403 invalid_signature on headers), over the API (single and batch)
     and over Kafka ingest (the errors topic gets the reason);
  3. the notifier's own retries still work, and their signature binds
     their content: the same retry with another id or URL is refused;
  4. messages produced straight into the retry topic without a valid
     signature (none, a copied one over changed content) are not called
     back, counted and logged once per task; an exact copy of a genuine
     one is a duplicate and called like one;
  5. <prefix><topic> longer than Kafka's 249 characters is refused at
     submit (API and ingest), 249 is published; a config whose retry or
     dead-letter topic would be too long is refused at start;
  6. <prefix><topic> naming one of Kafka's internal topics is refused at
     submit (400 reserved_topic).
"""

import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

NOTIFIER_BIN = os.path.join(h.BUILDDIR, "prophet-notifier")
TOPIC = "rs"
RETRY_TOPIC = "prophet.callback-retry"
DEAD_TOPIC = "prophet.callback-dead"

C = None
NOTIFIER = None
SINK = None
RETRIES = None  # KafkaReader of the retry topic
INGEST = None


def setup():
    global C, NOTIFIER, SINK, RETRIES, INGEST
    SINK = h.CallbackSink(flaky=2)
    tag = h.rand_tag()
    INGEST = "ingest-rs-" + tag
    port = h.free_port()
    C = h.Cluster(workers=1, name="retrysig", conf={
        "notifier.topics": TOPIC,
        "notifier.http_listen": "127.0.0.1:%d" % port,
        "notifier.backoff_base_ms": 200,
        "notifier.callback_networks_allowed": "127.0.0.0/8",
        "kafka.ingest_topic": INGEST,
        "kafka.ingest_group": "grp-" + tag,
    })
    # 61 characters: a 188-character topic is the longest Kafka takes
    C.topic_prefix = "t%s.%s." % (C.tag, "p" * 50)
    C.open()
    NOTIFIER = C.notifier(port)
    h.create_topics(C.brokers, [C.topic(t) for t in
                                (TOPIC, RETRY_TOPIC, DEAD_TOPIC)] +
                    [INGEST, INGEST + ".errors"])
    C.workers.append(NOTIFIER)
    RETRIES = C.reader([RETRY_TOPIC])
    C.start_manager()
    C.start_worker(0)
    NOTIFIER.start()
    C._wait_http(NOTIFIER, NOTIFIER.addr, "/readyz", 60)
    post("/v1/tasks", {"id": "warmup", "topic": TOPIC, "delay_ms": 0,
                       "body": "w", "callback": {"url": SINK.url("ok/warmup")}})
    h.wait_until(lambda: SINK.count("warmup"), 60, 0.1, "warm-up callback")


def post(path, body):
    api = C.api()
    try:
        return api.post(path, body)
    finally:
        api.close()


def retry_like(tid, sig=None, **over):
    """A submission posing as the notifier's retry of task tid."""
    t = {"id": "cbr:%s:2" % tid, "topic": RETRY_TOPIC, "body": "b",
         "delay_ms": 0, "max_attempts": 5,
         "callback": {"url": SINK.url("ok/" + tid), "method": "POST"},
         "headers": {"callback-of": tid, "callback-attempt": "2",
                     "callback-due-at": "1", "callback-topic": TOPIC}}
    if sig is not None:
        t["headers"]["callback-sig"] = sig
    t.update(over)
    return t


def check_refused(p, r, status, code, field, what):
    err = (r.json or {}).get("error", {})
    p.check(r.status == status and err.get("code") == code and
            err.get("field") == field, "%s: %s %s" % (what, r.status,
                                                     r.text[:300]))


def check_batch(p, r, status, code, field, what):
    res = ((r.json or {}).get("results") or [{}])[0]
    err = res.get("error", {})
    p.check(r.status == 200 and res.get("code") == status and
            err.get("code") == code and err.get("field") == field,
            "%s (batch): %s %s" % (what, r.status, r.text[:300]))


def stored(tid):
    return int(C.mysql("SELECT COUNT(*) FROM tasks WHERE id = '%s'"
                       % tid)[0][0])


def check_refused_both(p, t, status, code, field, what):
    """t refused alone and in a batch, and not stored."""
    check_refused(p, post("/v1/tasks", t), status, code, field, what)
    check_batch(p, post("/v1/tasks/batch", {"tasks": [t]}), status, code,
                field, what)
    p.check(stored(t["id"]) == 0, "%s stored" % t["id"])


def produce(topic, value, headers, key=b"k"):
    argv = [b"kcat", b"-P", b"-b", C.brokers.encode(), b"-t",
            topic.encode(), b"-k", key]
    for k, v in headers:
        argv += [b"-H", k.encode() + b"=" + (v if isinstance(v, bytes)
                                             else v.encode())]
    p = subprocess.run(argv, input=value + b"\n", capture_output=True,
                       timeout=60)
    h.check_eq(p.returncode, 0, "kcat produce: %r" % p.stderr)


def read_errors(n, timeout=30):
    deadline = time.monotonic() + timeout
    got = []
    while time.monotonic() < deadline:
        p = subprocess.run(["kcat", "-C", "-b", C.brokers, "-t",
                            INGEST + ".errors", "-o", "beginning", "-e",
                            "-q", "-J"], capture_output=True, text=True,
                           timeout=60)
        got = [json.loads(line) for line in p.stdout.splitlines()
               if line.strip()]
        if len(got) >= n:
            break
        time.sleep(0.5)
    return got


def test_dead_letter_topic_reserved():
    t = {"id": "rs-dead", "topic": DEAD_TOPIC, "body": "b", "delay_ms": 0}
    p = h.Problems()
    check_refused_both(p, t, 400, "reserved_topic", "topic",
                       "dead-letter topic")
    # the exactly-once marker topic (<prefix><root>.fired): a task there
    # would be read as a marker, a forged "published" for any task id
    m = {"id": "rs-marker", "topic": C.zk_root.lstrip("/") + ".fired",
         "key": "victim", "body": "1 1 1 1 1 0", "delay_ms": 0}
    check_refused_both(p, m, 400, "reserved_topic", "topic",
                       "marker topic")
    p.raise_if_any("reserved topics")


def test_retry_topic_needs_signature():
    p = h.Problems()
    for what, t in (("no signature", retry_like("victim")),
                    ("a made-up signature",
                     retry_like("victim", "v1:" + "0" * 64)),
                    ("not a signature", retry_like("victim", "yes"))):
        check_refused(p, post("/v1/tasks", t), 403, "invalid_signature",
                      "headers", what)
        check_batch(p, post("/v1/tasks/batch", {"tasks": [t]}), 403,
                    "invalid_signature", "headers", what)
    p.check(stored("cbr:victim:2") == 0, "cbr:victim:2 stored")
    p.raise_if_any("unsigned retry tasks")


def test_genuine_retries_work_and_bind_their_content():
    post("/v1/tasks", {"id": "rs-flaky", "topic": TOPIC, "delay_ms": 0,
                       "body": "flaky body", "max_attempts": 4,
                       "callback": {"url": SINK.url("flaky/rs-flaky"),
                                    "headers": {"X-A": "1"}}})
    h.wait_until(lambda: SINK.count("rs-flaky") >= 3, 30, 0.1,
                 "3 calls of rs-flaky")
    h.wait_until(lambda: C.mysql("SELECT callback_status FROM tasks WHERE "
                                 "id = 'rs-flaky'") == [["ok"]], 20, 0.2,
                 "rs-flaky ok")
    api = C.api()
    try:
        r = api.get("/v1/tasks/cbr:rs-flaky:2")
    finally:
        api.close()
    h.check(r.status == 200, "retry task: %s" % r.status)
    stored_t = r.json
    sig = stored_t["headers"].get("callback-sig", "")
    h.check(sig.startswith("v1:") and len(sig) == 67, "signature %r" % sig)
    # the genuine content verifies (a new delay is just a 409 conflict);
    # another id or URL does not
    resub = {"id": stored_t["id"], "topic": RETRY_TOPIC,
             "body": stored_t["body"], "delay_ms": 1,
             "max_attempts": stored_t["max_attempts"],
             "callback": stored_t["callback"],
             "headers": stored_t["headers"]}
    p = h.Problems()
    r = post("/v1/tasks", resub)
    p.check(r.status == 409, "genuine content, other delay: %s %s"
            % (r.status, r.text[:200]))
    other = dict(resub, id="cbr:rs-flaky:9")
    check_refused(p, post("/v1/tasks", other), 403, "invalid_signature",
                  "headers", "another id")
    moved = dict(resub, callback=dict(stored_t["callback"],
                                      url=SINK.url("ok/moved")))
    check_refused(p, post("/v1/tasks", moved), 403, "invalid_signature",
                  "headers", "another URL")
    longer = dict(resub, max_attempts=50)
    check_refused(p, post("/v1/tasks", longer), 403, "invalid_signature",
                  "headers", "more attempts")
    p.raise_if_any("genuine retries")


def test_ingest_refuses_reserved_and_long_topics():
    long_topic = "L" * 189  # 61 + 189 = 250
    subs = [{"id": "ing-dead", "topic": DEAD_TOPIC, "body": "b",
             "delay_ms": 0},
            retry_like("ing-victim", id="ing-retry"),
            {"id": "ing-long", "topic": long_topic, "body": "b",
             "delay_ms": 0}]
    p = subprocess.run(["kcat", "-P", "-b", C.brokers, "-t", INGEST],
                       input="\n".join(json.dumps(s) for s in subs) + "\n",
                       text=True, capture_output=True, timeout=60)
    h.check_eq(p.returncode, 0, "kcat produce: %s" % p.stderr)
    got = read_errors(3)
    by_id = {}
    for m in got:
        hd = m.get("headers") or []
        hd = dict(zip(hd[::2], hd[1::2]))
        by_id[json.loads(m["payload"])["id"]] = hd
    pr = h.Problems()
    for tid, code, field in (("ing-dead", "reserved_topic", "topic"),
                             ("ing-retry", "invalid_signature", "headers"),
                             ("ing-long", "invalid_value", "topic")):
        hd = by_id.get(tid, {})
        pr.check(hd.get("prophet-error-code") == code and
                 hd.get("prophet-error-field") == field,
                 "%s: errors topic headers %r" % (tid, hd))
        pr.check(stored(tid) == 0, "%s stored" % tid)
    pr.raise_if_any("Kafka ingest")


def test_forged_retry_messages_not_called():
    missing = RETRIES.wait_for(["cbr:rs-flaky:2"], 20)
    h.check(not missing, "the genuine retry message was not read")
    genuine = RETRIES.by_id["cbr:rs-flaky:2"][0]
    gh = list(genuine.headers)
    post("/v1/tasks", {"id": "victim", "topic": TOPIC, "delay_ms": 0,
                       "body": "v", "callback": {"url": SINK.url("ok/victim")}})
    h.wait_until(lambda: SINK.count("victim") == 1, 20, 0.1, "victim called")
    h.wait_until(lambda: C.mysql("SELECT callback_status FROM tasks WHERE "
                                 "id = 'victim'") == [["ok"]], 20, 0.2,
                 "victim ok")
    before = h.metrics(NOTIFIER.addr).get(
        "prophet_notifier_forged_retries_total", 0)
    victim_spec = json.dumps({"url": SINK.url("ok/forged-1"),
                              "max_attempts": 5})

    def with_headers(over, drop=()):
        out = [(k, v) for k, v in gh if k not in over and k not in drop]
        return out + list(over.items())

    forged = [
        # unsigned, aimed at someone else's task
        ("forged-1", b"v", with_headers({
            "prophet-id": "cbr:victim:2", "callback-of": "victim",
            "prophet-callback": victim_spec}, drop=("callback-sig",))),
        # a genuine signature over another URL
        ("forged-2", genuine.payload.encode(), with_headers({
            "prophet-callback": json.dumps({"url": SINK.url("ok/forged-2"),
                                            "max_attempts": 4}),
            "callback-of": "victim"})),
        # genuine headers over another body
        ("rs-flaky", b"another body", with_headers({})),
        # genuine except the attempt
        ("rs-flaky", genuine.payload.encode(),
         with_headers({"callback-attempt": "4"})),
    ]
    flaky_calls = SINK.count("rs-flaky")
    for _, value, hdrs in forged:
        produce(C.topic(RETRY_TOPIC), value, hdrs)
    # an exact copy of the genuine one: a duplicate, called as such
    produce(C.topic(RETRY_TOPIC), genuine.payload.encode(), gh)
    h.wait_until(lambda: SINK.count("rs-flaky") > flaky_calls, 20, 0.1,
                 "the copied genuine retry")
    h.wait_until(lambda: h.metrics(NOTIFIER.addr).get(
        "prophet_notifier_forged_retries_total", 0) - before >= 4, 20, 0.2,
        "4 forged retries counted")
    time.sleep(1.0)
    p = h.Problems()
    for tid in ("forged-1", "forged-2", "victim"):
        want = 1 if tid == "victim" else 0
        p.check(SINK.count(tid) == want, "%s called %d times"
                % (tid, SINK.count(tid)))
    p.check(SINK.count("rs-flaky") == flaky_calls + 1,
            "rs-flaky called %d times after the forgeries (want %d)"
            % (SINK.count("rs-flaky"), flaky_calls + 1))
    rows = C.mysql("SELECT COUNT(*) FROM task_log WHERE task_id = 'victim' "
                   "AND from_status = 'callback'")
    p.check(rows == [["1"]], "victim's callback log rows: %r" % rows)
    got = h.metrics(NOTIFIER.addr).get(
        "prophet_notifier_forged_retries_total", 0) - before
    p.check(got == 4, "prophet_notifier_forged_retries_total grew by %d"
            % got)
    lines = NOTIFIER.grep("without a valid signature")
    p.check(len([x for x in lines if "id=victim " in x]) == 1,
            "victim logged %d times" % len([x for x in lines
                                            if "id=victim " in x]))
    p.check(len([x for x in lines if "id=rs-flaky " in x]) == 1,
            "rs-flaky logged %d times" % len([x for x in lines
                                              if "id=rs-flaky " in x]))
    p.raise_if_any("forged retry messages")


def test_topic_length_checked_at_submit():
    ok_topic, long_topic = "L" * 188, "L" * 189
    h.check_eq(len(C.topic(ok_topic)), 249, "Kafka topic length")
    reader = C.reader([ok_topic])
    p = h.Problems()
    r = post("/v1/tasks", {"id": "len-249", "topic": ok_topic, "body": "b",
                           "delay_ms": 0})
    p.check(r.status == 201, "249 characters: %s %s" % (r.status,
                                                        r.text[:200]))
    t = {"id": "len-250", "topic": long_topic, "body": "b", "delay_ms": 0}
    check_refused_both(p, t, 400, "invalid_value", "topic",
                       "250 characters")
    p.raise_if_any("topic length at submit")
    missing = reader.wait_for(["len-249"], 30)
    h.check(not missing, "the 249-character topic was not published")


def test_config_topic_length_checked_at_start():
    long_topic = "R" * 189  # with the 61-character prefix: 250
    p = h.Problems()
    for binary in (NOTIFIER_BIN, h.MANAGER_BIN, h.WORKER_BIN):
        for key in ("notifier.retry_topic", "notifier.dead_letter_topic"):
            r = subprocess.run([binary, "-c", C.conf_path, "--set",
                                "%s=%s" % (key, long_topic),
                                "--check-config"], capture_output=True,
                               text=True, timeout=30)
            p.check(r.returncode != 0 and key in r.stderr and
                    "249" in r.stderr, "%s with a long %s: %d %r"
                    % (os.path.basename(binary), key, r.returncode,
                       r.stderr.strip()))
    r = subprocess.run([NOTIFIER_BIN, "-c", C.conf_path, "--set",
                        "notifier.dead_letter_topic=" + RETRY_TOPIC,
                        "--check-config"], capture_output=True, text=True,
                       timeout=30)
    p.check(r.returncode != 0 and "notifier.dead_letter_topic" in r.stderr,
            "the same retry and dead-letter topic: %r" % r.stderr.strip())
    p.raise_if_any("topic length at start")


def test_kafka_internal_topics_reserved():
    """Kafka takes no record from a producer on its own topics: a task on
    __consumer_offsets was accepted (201), then every publish failed
    ("Broker: Invalid topic") after each lease, forever. A manager whose
    prefix is "_" refuses "_consumer_offsets" and the other internal
    names (its ingest off: it must not join the cluster's group)."""
    m = C.add_manager("manager-internal", args=[
        "--set", "kafka.topic_prefix=_", "--set", "kafka.ingest_topic="])
    api = h.Api(m.addr)
    p = h.Problems()
    try:
        for name in ("_consumer_offsets", "_transaction_state",
                     "_share_group_state", "_cluster_metadata"):
            t = {"id": "int" + name, "topic": name, "body": "b",
                 "delay_ms": 0}
            check_refused(p, api.post("/v1/tasks", t), 400,
                          "reserved_topic", "topic", "_" + name)
            check_batch(p, api.post("/v1/tasks/batch", {"tasks": [t]}),
                        400, "reserved_topic", "topic", "_" + name)
            p.check(stored(t["id"]) == 0, "%s stored" % t["id"])
    finally:
        api.close()
        m.stop()
        C.workers.remove(m)
    p.raise_if_any("Kafka's internal topics")


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)
    if SINK is not None:
        SINK.close()


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
