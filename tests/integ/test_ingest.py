#!/usr/bin/python3
"""Kafka ingest: 1,000 submissions through kafka.ingest_topic fire like
HTTP ones; malformed ones land in the errors topic with the reason; a
manager restart in the middle neither loses nor doubles a submission."""

import json
import os
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
READER = None
INGEST = None
PENDING_BYTES = 1 << 20  # ingest messages in hand at once


def setup():
    global C, READER, INGEST
    tag = h.rand_tag()
    INGEST = "ingest-" + tag
    C = h.Cluster(workers=1, name="ingest",
                  conf={"kafka.ingest_topic": INGEST,
                        "kafka.ingest_group": "grp-" + tag,
                        "kafka.ingest_max_pending_bytes": PENDING_BYTES}
                  ).open()
    h.create_topics(C.brokers, [INGEST, INGEST + ".errors",
                                C.topic("viak")])
    C.start()
    READER = C.reader(["viak"])


def produce(lines):
    p = subprocess.run(["kcat", "-P", "-b", C.brokers, "-t", INGEST],
                       input="\n".join(lines) + "\n", text=True,
                       capture_output=True, timeout=60)
    h.check_eq(p.returncode, 0, "kcat produce: %s" % p.stderr)


def read_errors(n, timeout=30):
    deadline = time.monotonic() + timeout
    got = []
    while time.monotonic() < deadline:
        p = subprocess.run(["kcat", "-C", "-b", C.brokers, "-t",
                            INGEST + ".errors", "-o", "beginning", "-e",
                            "-q", "-J"], capture_output=True, text=True,
                           timeout=60)
        got = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
        if len(got) >= n:
            break
        time.sleep(0.5)
    return got


def test_thousand_through_kafka():
    ids = ["ki-%d" % i for i in range(1000)]
    lines = [json.dumps({"id": t, "topic": "viak", "body": "via kafka %d" % i,
                         "delay_ms": 1000 + (i % 7) * 100})
             for i, t in enumerate(ids)]
    # Half, restart the manager, the other half.
    produce(lines[:500])
    time.sleep(1.0)
    C.manager.signal(15)
    h.check_eq(C.manager.wait(20), 0, "manager exit code")
    produce(lines[500:])
    C.start_manager()
    missing = READER.wait_for(ids, 60, settle=2)
    h.check(not missing, "%d ingested tasks not published, e.g. %s"
            % (len(missing), missing[:5]))
    dups = [t for t in ids if len(READER.by_id.get(t, [])) > 1]
    h.check(not dups, "published twice: %s" % dups[:5])
    rows = C.mysql("SELECT COUNT(*) FROM tasks WHERE id LIKE 'ki-%'")
    h.check_eq(rows, [["1000"]], "tasks stored once each")


def test_without_id_idempotent():
    produce([json.dumps({"topic": "viak", "body": "anon %d" % i,
                         "delay_ms": 200}) for i in range(20)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = C.mysql("SELECT COUNT(*) FROM tasks WHERE id LIKE "
                       "'kafka:%'")
        if rows == [["20"]]:
            break
        time.sleep(0.3)
    h.check_eq(rows, [["20"]], "20 anonymous submissions, ids from "
               "their position")


def test_refused_go_to_errors_topic():
    produce(['{"topic":"viak"}', "not json at all",
             json.dumps({"id": "ki-0", "topic": "viak", "body": "other",
                         "delay_ms": 5}),
             json.dumps({"topic": "viak", "body": "x", "delay_ms": 1,
                         "bogus": 1}),
             json.dumps({"id": "ki-prio", "topic": "viak", "body": "x",
                         "delay_ms": 1, "priority": 5})])
    errs = read_errors(5)
    h.check_eq(len(errs), 5, "error messages")
    hdrs = [dict(zip(e["headers"][::2], e["headers"][1::2])) for e in errs]
    codes = sorted(x["prophet-error-code"] for x in hdrs)
    h.check_eq(codes, ["conflict", "invalid_json", "missing_field",
                       "unknown_field", "unsupported_field"], "reasons")
    prio = [x for x in hdrs if x["prophet-error-code"] == "unsupported_field"]
    h.check_eq(prio[0].get("prophet-error-field"), "priority",
               "the refused priority names its field")
    h.check("priority is not supported" in prio[0]["prophet-error-message"],
            "the reason says why: %r" % prio[0])
    h.check_eq(int(C.mysql("SELECT COUNT(*) FROM tasks WHERE id = "
                           "'ki-prio'")[0][0]), 0,
               "a task with priority is not stored")
    payloads = [e["payload"] for e in errs]
    h.check("not json at all" in payloads, "original payload kept")


def test_pending_bytes_bounded():
    """Messages in hand (read, not yet stored) are bounded in bytes, not
    only in number: 20,000 of up to a megabyte each (the broker's default
    message size) waiting for a slow database or errors topic were 20 GB.
    Twelve submissions of 360 KB each pause reading past 1 MiB, and all
    of them are stored once it has drained."""
    held0 = h.metrics(C.manager_addr).get("prophet_ingest_held_total")
    h.check(held0 is not None, "prophet_ingest_held_total exported")
    body = "\\u0001" * 60000  # 60,000 bytes, 360 KB as JSON
    ids = ["kbig-%d" % i for i in range(12)]
    produce(['{"id":"%s","topic":"viak","body":"%s","delay_ms":600000}'
             % (t, body) for t in ids])
    h.wait_until(lambda: C.mysql("SELECT COUNT(*) FROM tasks WHERE id LIKE "
                                 "'kbig-%'") == [["12"]], 60,
                 what="the 12 large submissions stored")
    held = h.metrics(C.manager_addr).get("prophet_ingest_held_total")
    h.check(held > held0, "reading paused at %d bytes in hand (held %r)"
            % (PENDING_BYTES, held))
    h.check_eq(C.mysql("SELECT COUNT(*) FROM tasks WHERE id LIKE 'kbig-%' "
                       "AND LENGTH(body) = 60000"), [["12"]],
               "bodies stored whole")


def test_rolling_restart_two_managers():
    """Two managers read the ingest topic; one is killed (-9) and started
    again at once, later the other is stopped and started, while 40
    submissions a second come in, each due 1 s after it was produced.
    Static members take their partitions back as they rejoin: no
    submission waits for a session timeout (10 s), none is lost or
    stored twice."""
    m2 = C.add_manager()
    due = {}
    t0 = h.now_ms()

    def feed():
        for k in range(80):  # 20 s, a batch of 10 every 250 ms
            now = h.now_ms()
            lines = []
            for i in range(10):
                tid = "rm-%03d-%d" % (k, i)
                due[tid] = now + 1000
                lines.append(json.dumps({"id": tid, "topic": "viak",
                                         "body": "r", "due_at": now + 1000}))
            produce(lines)
            time.sleep(max(0, (t0 + (k + 1) * 250 - h.now_ms()) / 1000.0))

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    h.wait_until(lambda: h.now_ms() > t0 + 5000, 20, 0.05, "t+5 s")
    C.manager.kill()
    t_kill = h.now_ms()
    C.start_manager()
    # Its partitions wait for it to start again (a static member): the
    # bound below is that time, not a session timeout.
    restart_ms = h.now_ms() - t_kill
    h.log("manager 1 killed (-9) and started again at t+%.1f s (ready "
          "after %d ms)" % ((h.now_ms() - t0) / 1000.0, restart_ms))
    h.wait_until(lambda: h.now_ms() > t0 + 11000, 20, 0.05, "t+11 s")
    m2.signal(15)
    h.check_eq(m2.wait(30), 0, "manager 2 exit code after SIGTERM")
    m2.start()
    C._wait_http(m2, m2.addr, "/readyz", 60)
    h.log("manager 2 stopped and started again at t+%.1f s"
          % ((h.now_ms() - t0) / 1000.0))
    feeder.join(60)
    ids = sorted(due)
    missing = READER.wait_for(ids, 60, settle=2)
    h.check(not missing, "%d ingested tasks not published, e.g. %s"
            % (len(missing), missing[:5]))
    late = sorted(int(READER.by_id[t][0].hdr.get("prophet-fired-at", "0"))
                  - due[t] for t in ids)
    dups = [t for t in ids if len(READER.by_id.get(t, [])) > 1]
    rows = C.mysql("SELECT COUNT(*) FROM tasks WHERE id LIKE 'rm-%'")
    h.log("FIGURES rolling restart of two ingest managers: %d submissions, "
          "fired-at lateness p50 %d ms, p99 %d ms, max %d ms; %d published "
          "twice" % (len(ids), h.percentile(late, 50),
                     h.percentile(late, 99), late[-1], len(dups)))
    h.check_eq(rows, [[str(len(ids))]], "tasks stored once each")
    h.check(not dups, "published twice: %s" % dups[:5])
    # Under the session timeout (10 s; without static membership the
    # latest was 8.9 s). Not a few seconds: in about one run of three the
    # killed manager's partition is fetched again only at the next
    # rebalance (6.2-7.0 s here; librdkafka 2.0.2 against Kafka 4,
    # docs/operations.md, "Consumer groups"), an open problem.
    h.check(late[-1] < restart_ms + 8000, "a submission fired %d ms late "
            "across the restarts, the killed manager was ready after %d ms "
            "(a partition waited for a session timeout?)"
            % (late[-1], restart_ms))
    m2.stop()


def cleanup(failed):
    if READER is not None:
        READER.stop()
    if C is not None:
        C.close(failed=failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
