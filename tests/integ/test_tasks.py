#!/usr/bin/python3
"""Batch submission, cancel, reschedule and list against a running cluster
(manager + 2 workers), with a Kafka ledger: a cancel answered 200 is never
published, a rescheduled task fires at its new time, never before."""

import contextlib
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
API = None
READER = None
TOPIC = "jobs"


def setup():
    global C, API, READER
    C = h.Cluster(workers=2, name="tasks").open()
    C.start()
    API = C.api()
    h.create_topics(C.brokers, [C.topic(TOPIC)])
    READER = C.reader([TOPIC])


def submit(**kw):
    task = {"topic": TOPIC, "body": "b"}
    task.update(kw)
    r = API.post("/v1/tasks", task)
    h.check(r.status in (200, 201), "submit %r -> %r" % (task, r))
    return r.json


@contextlib.contextmanager
def workers_with(args):
    """The workers restarted with extra arguments until the block ends
    (then restarted as they were), every slot owned again first."""
    saved = [list(w.argv) for w in C.workers]
    for w in C.workers:
        w.stop()
        w.argv = w.argv + args
    try:
        C.start_workers()

        def settled():
            return sum(h.metrics(w.addr).get("prophet_slots_owned", 0)
                       for w in C.workers) == 16
        h.wait_until(settled, 40, 0.1, "every slot owned by a new worker")
        yield
    finally:
        for w, argv in zip(C.workers, saved):
            w.stop()
            w.argv = argv
        C.start_workers()


def published(tid):
    with READER.cond:
        return list(READER.by_id.get(tid, []))


def test_batch_results_in_order():
    tasks = [{"topic": TOPIC, "body": "batch %d" % i, "delay_ms": 300}
             for i in range(50)]
    tasks[7] = {"topic": TOPIC}  # no body
    tasks[8] = {"id": "bat-dup", "topic": TOPIC, "body": "a", "delay_ms": 300}
    tasks[9] = {"id": "bat-dup", "topic": TOPIC, "body": "b", "delay_ms": 300}
    tasks[10] = {"id": "bat-dup", "topic": TOPIC, "body": "a",
                 "delay_ms": 300}
    r = API.post("/v1/tasks/batch", {"tasks": tasks})
    h.check_eq(r.status, 200, "batch status")
    res = r.json["results"]
    h.check_eq(len(res), 50, "one result per task")
    h.check_eq(res[7]["code"], 400, "invalid task in a batch")
    h.check_eq(res[7]["error"]["field"], "body", "its field")
    h.check_eq(res[8]["code"], 201, "first of a duplicated id")
    h.check_eq(res[9]["code"], 409, "same id, other content")
    h.check_eq(res[10]["code"], 200, "same id, same content")
    ok = [x["id"] for i, x in enumerate(res) if x["code"] == 201]
    h.check_eq(len(ok), 47, "accepted (50 - invalid - conflict - replay)")
    missing = READER.wait_for(ok, 30)
    h.check(not missing, "batch tasks not published: %s" % missing[:5])
    # An id stored before, then a conflict and a replay of it in one
    # batch: each item gets what a single submission would (the replay
    # after the conflict was 503 "database unavailable ... submit again").
    stored = {"id": "bat-old", "topic": TOPIC, "body": "a",
              "delay_ms": 3600000}
    h.check_eq(API.post("/v1/tasks", stored).status, 201, "bat-old")
    r = API.post("/v1/tasks/batch", {"tasks": [
        dict(stored, body="b"), stored, dict(stored, body="c"),
        dict(stored, body="b")]})
    h.check_eq([x["code"] for x in r.json["results"]], [409, 200, 409, 409],
               "conflict, replay, conflicts of a stored id in one batch")
    h.check_eq(r.json["results"][1].get("status"), "scheduled",
               "the replay shows the stored status")
    # Batch limits are reported, not applied partially.
    r = API.post("/v1/tasks/batch", {"tasks": []})
    h.check_eq(r.status, 400, "empty batch")
    r = API.post("/v1/tasks/batch", {"task": []})
    h.check_eq(r.status, 400, "no tasks member")
    r = API.post("/v1/tasks/batch",
                 {"tasks": [{"topic": TOPIC, "body": "x", "delay_ms": 1}]
                  * 1001})
    h.check_eq(r.status, 413, "over http.max_batch")


def test_cancel_and_reschedule():
    a = submit(id="can-1", delay_ms=2000)
    r = API.request("DELETE", "/v1/tasks/can-1")
    h.check_eq(r.status, 200, "cancel %r" % r)
    h.check_eq(r.json["status"], "cancelled", "status after cancel")
    r = API.request("DELETE", "/v1/tasks/can-1")
    h.check_eq(r.status, 200, "cancel is idempotent")
    r = API.request("DELETE", "/v1/tasks/no-such")
    h.check_eq(r.status, 404, "cancel unknown")
    # Far future (DB only), cancelled: never indexed again.
    submit(id="can-far", delay_ms=7200000)
    h.check_eq(API.request("DELETE", "/v1/tasks/can-far").status, 200,
               "cancel a DB-only task")
    # A tombstone where an indexer may hold a read of the task (can-1,
    # due in 2 s) and none beyond every index's reach (can-far, 2 h: it
    # would take Redis memory until an hour after its due time).
    h.check_eq(C.tombstoned(["can-1"]), 1, "tombstone of can-1")
    h.check_eq(C.tombstoned(["can-far"]), 0, "tombstone of can-far")
    # Rescheduled earlier and later.
    submit(id="res-early", delay_ms=3600000)
    submit(id="res-late", delay_ms=500)
    t0 = h.now_ms()
    r = API.request("PATCH", "/v1/tasks/res-early", {"delay_ms": 800})
    h.check_eq(r.status, 200, "reschedule earlier %r" % r)
    early_due = r.json["due_at"]
    r = API.request("PATCH", "/v1/tasks/res-late", {"delay_ms": 3000})
    h.check_eq(r.status, 200, "reschedule later %r" % r)
    late_due = r.json["due_at"]
    h.check(late_due >= t0 + 3000, "new due time")
    for bad, field in (({}, "due_at"), ({"due_at": 1, "delay_ms": 1},
                                        "due_at"),
                       ({"delay_ms": "soon"}, "delay_ms"),
                       ({"delay_ms": -5}, "delay_ms")):
        r = API.request("PATCH", "/v1/tasks/res-late", bad)
        h.check_eq(r.status, 400, "bad reschedule %r" % bad)
        h.check_eq(r.json["error"]["field"], field, "field of %r" % bad)
    # A misspelt member is named, as in a submission (it was "give exactly
    # one of due_at and delay_ms", field due_at).
    for bad, field in (({"delay_ms": 5, "dealy_ms": 1}, "dealy_ms"),
                       ({"due": 5}, "due")):
        r = API.request("PATCH", "/v1/tasks/res-late", bad)
        h.check(r.status == 400 and
                r.json["error"]["code"] == "unknown_field" and
                r.json["error"]["field"] == field,
                "reschedule %r: %r" % (bad, r))
    missing = READER.wait_for(["res-early", "res-late"], 20)
    h.check(not missing, "rescheduled tasks not published: %s" % missing)
    for tid, due in (("res-early", early_due), ("res-late", late_due)):
        m = published(tid)[0]
        h.check_eq(int(m.hdr["prophet-due-at"]), due,
                   "%s prophet-due-at is the new time" % tid)
        h.check(int(m.hdr["prophet-fired-at"]) >= due,
                "%s fired before its new due time" % tid)
    r = API.request("PATCH", "/v1/tasks/res-early", {"delay_ms": 1000})
    h.check_eq(r.status, 409, "reschedule a delivered task")
    r = API.request("DELETE", "/v1/tasks/res-early")
    h.check_eq(r.status, 409, "cancel a delivered task")
    time.sleep(2.5)
    for tid in ("can-1", "can-far"):
        h.check(not published(tid), "cancelled %s was published" % tid)
    row = C.mysql("SELECT status FROM tasks WHERE id = 'can-1'")
    h.check_eq(row, [["cancelled"]], "DB status of a cancelled task")
    r = API.get("/v1/tasks/can-1?log=1")
    h.check_eq([e["to"] for e in r.json["log"]], ["cancelled"],
               "state log of a cancelled task")


def test_cancel_races_the_worker():
    """500 tasks due in 0.3-1.3 s, each cancelled at a moment between 60 ms
    before and 30 ms after its due time (a task is claimed
    worker.claim_ahead_ms, 10 ms, before it is due): every task is either
    published or cancelled, never both, and the API's answer always says
    which."""
    n = 500
    now = h.now_ms()
    ids = ["race-%d" % i for i in range(n)]
    dues = {}
    tasks = []
    for i, tid in enumerate(ids):
        due = now + 300 + (i * 1000) // n
        dues[tid] = due
        tasks.append({"id": tid, "topic": TOPIC, "body": "r", "due_at": due})
    r = API.post("/v1/tasks/batch", {"tasks": tasks})
    h.check(all(x["code"] == 201 for x in r.json["results"]), "race submit")
    answers = {}
    lock = threading.Lock()

    def canceller(part):
        api = C.api()
        try:
            for tid in part:
                offset = (hash(tid) % 91) - 60
                delay = (dues[tid] + offset - h.now_ms()) / 1000.0
                if delay > 0:
                    time.sleep(delay)
                r = api.request("DELETE", "/v1/tasks/" + tid)
                with lock:
                    answers[tid] = r.status
        finally:
            api.close()
    parts = [ids[k::4] for k in range(4)]
    ths = [threading.Thread(target=canceller, args=(p,)) for p in parts]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    time.sleep(3)
    cancelled = [t for t in ids if answers.get(t) == 200]
    refused = [t for t in ids if answers.get(t) == 409]
    other = [(t, answers.get(t)) for t in ids
             if answers.get(t) not in (200, 409)]
    h.check(not other, "unexpected answers: %s" % other[:5])
    bad = [t for t in cancelled if published(t)]
    h.check(not bad, "cancelled (200) but published: %s" % bad[:5])
    lost = [t for t in refused if not published(t)]
    missing = READER.wait_for(lost, 10)
    h.check(not missing, "refused (409) but never published: %s"
            % missing[:5])
    rows = C.mysql("SELECT status, COUNT(*) FROM tasks WHERE id LIKE "
                   "'race-%' GROUP BY status")
    got = {s: int(c) for s, c in rows}
    h.check_eq(got.get("cancelled", 0), len(cancelled),
               "DB cancelled count")
    h.log("cancel race: %d cancelled, %d already firing/delivered"
          % (len(cancelled), len(refused)))
    h.check(cancelled and refused, "the race was not exercised: %d "
            "cancelled, %d refused" % (len(cancelled), len(refused)))


def test_claimed_ahead_published_on_time():
    """worker.claim_ahead_ms: a task is claimed that long before it is due
    (in flight in Redis, a cancel or reschedule then answers 409) and
    published at its due millisecond, never before."""
    with workers_with(["--set", "worker.claim_ahead_ms=1000"]):
        due = h.now_ms() + 2500
        for tid in ("ahead-1", "ahead-2"):
            submit(id=tid, due_at=due)
        # 0.6 s before due: claimed (the claim window is 1 s), not sent.
        time.sleep(max(0.0, (due - 600 - h.now_ms()) / 1000.0))
        slot = int(C.mysql("SELECT slot FROM tasks WHERE id = 'ahead-1'")
                   [0][0])
        r = C.redis()
        try:
            held = r.cmd("ZSCORE", "{prophet:%d}:inflight" % slot, "ahead-1")
        finally:
            r.close()
        h.check(h.now_ms() < due, "the check came too late to mean anything")
        h.check(held is not None, "ahead-1 not claimed 0.6 s before due")
        h.check(not published("ahead-1"), "ahead-1 published before due")
        # The DB still has it scheduled; the claim is Redis's: shown as
        # firing, as the cancel's 409 below says (it showed 'scheduled').
        r = API.get("/v1/tasks/ahead-1")
        h.check_eq(r.json["status"], "firing", "GET of a claimed task")
        r = API.request("DELETE", "/v1/tasks/ahead-1")
        h.check_eq(r.status, 409, "cancel of a task claimed ahead (%r)" % r)
        r = API.request("PATCH", "/v1/tasks/ahead-2", {"delay_ms": 60000})
        h.check_eq(r.status, 409, "reschedule of a task claimed ahead (%r)"
                   % r)
        missing = READER.wait_for(["ahead-1", "ahead-2"], 20)
        h.check(not missing, "claimed ahead, never published: %s" % missing)
        for tid in ("ahead-1", "ahead-2"):
            ms = published(tid)
            h.check_eq(len(ms), 1, "%s copies" % tid)
            fired = int(ms[0].hdr["prophet-fired-at"])
            h.check(fired >= due and ms[0].recv_ms >= due,
                    "%s published before due (fired %d, due %d)"
                    % (tid, fired, due))


def test_claims_grouped():
    """worker.claim_group_ms: a slot's tasks due within one group of
    milliseconds go in one claim call, and each is still published at its
    own millisecond, never before. 48 tasks a millisecond apart, in one
    100 ms group: a claim call per slot they fall in (with groups of 1 ms,
    about one a task)."""
    with workers_with(["--set", "worker.claim_group_ms=100"]):
        # A group starts where due - claim_ahead_ms (10) is a multiple of
        # 100: the 48 due times [base, base + 48) lie in one group.
        base = h.now_ms() + 3000
        base += (10 - base) % 100
        ids = ["grp-%02d" % i for i in range(48)]
        r = API.post("/v1/tasks/batch", {"tasks": [
            {"id": tid, "topic": TOPIC, "body": "g", "due_at": base + i}
            for i, tid in enumerate(ids)]})
        h.check_eq(r.status, 200, "batch of the group")

        def claims():
            return sum(h.metrics(w.addr).get("prophet_claim_calls_total", 0)
                       for w in C.workers)
        before = claims()
        missing = READER.wait_for(ids, 20)
        h.check(not missing, "grouped tasks not published: %s" % missing)
        calls = claims() - before
        slots = int(C.mysql("SELECT COUNT(DISTINCT slot) FROM tasks WHERE "
                            "id LIKE 'grp-%'")[0][0])
        h.log("48 tasks in %d slots: %d claim calls" % (slots, calls))
        h.check(calls <= slots, "%d claim calls for 48 tasks in %d slots "
                "(one a slot expected)" % (calls, slots))
        for i, tid in enumerate(ids):
            ms = published(tid)
            h.check_eq(len(ms), 1, "%s copies" % tid)
            fired = int(ms[0].hdr["prophet-fired-at"])
            h.check(fired >= base + i and ms[0].recv_ms >= base + i,
                    "%s published before due (fired %d, due %d)"
                    % (tid, fired, base + i))


def test_list_filters_and_pages():
    for i in range(7):
        submit(id="lst-%d" % i, topic="listing", delay_ms=3600000 + i)
    seen = []
    cursor = None
    while True:
        q = "/v1/tasks?topic=listing&status=scheduled&limit=3"
        if cursor:
            q += "&cursor=" + cursor
        r = API.get(q)
        h.check_eq(r.status, 200, "list %r" % r)
        seen += [t["id"] for t in r.json["tasks"]]
        cursor = r.json["next_cursor"]
        if not cursor:
            break
    h.check_eq(seen, ["lst-%d" % i for i in range(7)], "pages in due order")
    # due_from is included, due_to excluded (the description said "at or
    # before").
    due = API.get("/v1/tasks/lst-3").json["due_at"]
    for q, want in (("due_from=%d&due_to=%d" % (due, due), []),
                    ("due_from=%d&due_to=%d" % (due, due + 1), ["lst-3"])):
        r = API.get("/v1/tasks?topic=listing&" + q)
        h.check_eq([t["id"] for t in r.json["tasks"]], want, "list ?" + q)
    for bad in ("status=nope", "limit=0", "limit=5000", "cursor=xyz",
                "topic=a/b", "due_from=x"):
        r = API.get("/v1/tasks?" + bad)
        h.check_eq(r.status, 400, "list ?%s" % bad)
    # A misspelt filter is refused, not dropped (which listed every topic).
    r = API.get("/v1/tasks?topc=listing&limit=3")
    h.check(r.status == 400 and r.json["error"]["code"] == "unknown_field"
            and r.json["error"].get("field") == "topc",
            "list with a misspelt filter: %r" % r)


def test_prophetctl():
    ctl = os.path.join(h.BUILDDIR, "prophetctl")
    base = [ctl, "--url", "http://" + C.manager_addr]

    def run(*args):
        return subprocess.run(base + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=30)
    p = run("push", "--topic", TOPIC, "--body", "from ctl", "--delay", "1h",
            "--id", "ctl-1")
    h.check(p.returncode == 0 and "ctl-1" in p.stdout, "push: %r" % (p,))
    p = run("--json", "get", "ctl-1")
    h.check_eq(json.loads(p.stdout)["status"], "scheduled", "get --json")
    p = run("reschedule", "ctl-1", "--delay", "2h")
    h.check_eq(p.returncode, 0, "reschedule: %s" % p.stderr)
    # A date where ms are wanted is refused, not read as its first number
    # (--due-at 2026-12-07 was due_at 2026: the task fired at once).
    p = run("reschedule", "ctl-1", "--due-at", "2026-12-07")
    h.check(p.returncode == 2 and "not an integer" in p.stderr,
            "reschedule --due-at DATE: %r" % (p,))
    p = run("push", "--topic", TOPIC, "--body", "x", "--id", "ctl-date",
            "--due-at", "2026-12-07")
    h.check(p.returncode == 2 and "--due-at: '2026-12-07' is not an "
            "integer" in p.stderr, "push --due-at DATE: %r" % (p,))
    h.check_eq(API.get("/v1/tasks/ctl-date").status, 404,
               "nothing stored for push --due-at DATE")
    p = run("push", "--topic", TOPIC, "--body", "x", "--delay", "1h",
            "--max-attempts", "three")
    h.check(p.returncode == 2 and "--max-attempts" in p.stderr,
            "push --max-attempts three: %r" % (p,))
    # A usage error names what was wrong before the usage.
    for args, why in ((["push", "--topic", TOPIC, "--body", "x", "--delay",
                        "1h", "--hedaer", "a=b"], "unknown option '--hedaer'"),
                      (["push", "--topic", TOPIC, "--body", "x", "--delay",
                        "1h", "--header", "ab"], "'ab' is not NAME=VALUE"),
                      (["bulk", "cancel", "--topik", TOPIC],
                       "unknown option '--topik'"),
                      (["push", "--topic", TOPIC, "--body", "x"],
                       "give --delay, --due-at or --cron"),
                      (["bulk", "cancel", "--dry-run"],
                       "give a filter (--topic")):
        p = run(*args)
        h.check(p.returncode == 2 and why in p.stderr and "usage" in
                p.stderr, "%s: %r" % (" ".join(args), p))
    p = run("list", "--topic", TOPIC, "--status", "scheduled")
    h.check("ctl-1" in p.stdout, "list shows the task: %r" % p.stdout)
    p = run("cancel", "ctl-1")
    h.check_eq(p.returncode, 0, "cancel: %s" % p.stderr)
    p = run("cancel", "nope-404")
    h.check(p.returncode != 0 and "404" in p.stderr, "cancel unknown: %r"
            % (p,))
    p = run("push", "--topic", TOPIC)
    h.check(p.returncode != 0, "push without body must fail")
    # "." and ".." are valid ids; as URL path segments they are dot
    # segments, which libcurl removed: get and cancel reached "/v1/"
    # ("no route") and the task could not be cancelled from the CLI.
    for tid in (".", ".."):
        p = run("push", "--topic", TOPIC, "--body", "dots", "--delay", "1h",
                "--id", tid)
        h.check_eq(p.returncode, 0, "push --id %s: %s" % (tid, p.stderr))
        for args in (("reschedule", tid, "--delay", "2h"), ("get", tid),
                     ("cancel", tid), ("--json", "get", tid)):
            p = run(*args)
            h.check_eq(p.returncode, 0, "%s: %s" % (" ".join(args),
                                                   p.stderr))
        h.check_eq((json.loads(p.stdout)["id"], json.loads(p.stdout)[
            "status"]), (tid, "cancelled"), "get --json %s" % tid)


def cleanup(failed):
    if READER is not None:
        READER.stop()
    if API is not None:
        API.close()
    if C is not None:
        C.close(failed=failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
