#!/usr/bin/python3
"""Pausing and resuming a topic (issue 22) on real servers, with a Kafka
ledger: no task of a paused topic is published once the pause reached the
workers (within a second of its answer), cancel and reschedule work on
held tasks, a resume with fire publishes the backlog oldest first at its
rate (a fire_all series' missed occurrences too), a resume with skip
expires it with a log row (not a task rescheduled meanwhile), and the
pause holds
across a worker SIGKILL, a Redis FLUSHALL, DB mode and a manager restart.
"""

import json
import os
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import servers as s  # noqa: E402

C = None
API = None
READER = None
TOPICS = ["pz-a", "pz-b", "pz-c", "pz-d", "pz-e", "pz-f", "pz-g", "pz-h",
          "pz-free"]


def setup():
    global C, API, READER
    # One worker: it owns every slot, so a rate-limited drain is oldest
    # first across the whole topic (with several, within each worker).
    C = h.Cluster(workers=1, name="pause").open()
    C.start()
    API = C.api()
    h.create_topics(C.brokers, [C.topic(t) for t in TOPICS])
    READER = C.reader(TOPICS)


def submit(topic, **kw):
    task = {"topic": topic, "body": "b"}
    task.update(kw)
    r = API.post("/v1/tasks", task)
    h.check(r.status == 201, "submit %r -> %r" % (task, r))
    return r.json


def published(reader, tid):
    with reader.cond:
        return list(reader.by_id.get(tid, []))


def pause(api, topic, cluster=None):
    """Pauses and waits until every running worker logged that it holds
    the topic (a task claimed before that may still fire: the window)."""
    needle = 'holding its tasks" topic=%s from' % topic
    ws = [w for w in (cluster or C).workers if w.running()]
    before = [len(w.grep(needle)) for w in ws]
    r = api.post("/v1/topics/%s/pause" % topic, None)
    h.check_eq(r.status, 200, "pause %s: %r" % (topic, r))
    h.check(r.json["paused"] is True and r.json["notified"] is True,
            "pause answer %r" % r.json)
    t0 = time.monotonic()
    h.wait_until(lambda: all(len(w.grep(needle)) > n
                             for w, n in zip(ws, before)), 2.0,
                 what="the pause of %s on every worker" % topic)
    h.log("pause of %s reached %d worker(s) within %.0f ms of the answer"
          % (topic, len(ws), (time.monotonic() - t0) * 1000))
    return r.json


def resume(api, topic, body):
    r = api.post("/v1/topics/%s/resume" % topic, body)
    h.check_eq(r.status, 200, "resume %s: %r" % (topic, r))
    h.check(r.json["paused"] is False, "resume answer %r" % r.json)
    return r.json


def topics(api):
    r = api.get("/v1/topics")
    h.check_eq(r.status, 200, "GET /v1/topics %r" % r)
    return {t["topic"]: t for t in r.json["topics"]}


def held_count(c, topic):
    rd = c.redis()
    try:
        return sum(int(rd.cmd("ZCARD", "{prophet:%d}:held:%s" % (i, topic)))
                   for i in range(c.slots))
    finally:
        rd.close()


def metric(addr, name):
    """A metric's value (a name with labels: that series), or the sum of
    its series; None if absent."""
    m = h.metrics(addr, labelled=True)
    if name in m:
        return m[name]
    vals = [v for k, v in m.items() if k.startswith(name + "{")]
    return sum(vals) if vals else None


def test_bad_input():
    for path in ("/v1/topics/bad!name/pause", "/v1/topics/%s/pause" % ("x"
                 * 201), "/v1/topics/a%2Fb/resume", "/v1/topics/../pause"):
        r = API.post(path, {"policy": "fire"} if "resume" in path else None)
        h.check(r.status in (400, 404), "%s -> %r" % (path, r))
        if r.status == 400:
            h.check_eq(r.json["error"]["field"], "topic", path)
    r = API.post("/v1/topics/bad!name/pause", None)
    h.check_eq(r.status, 400, "bad topic name")
    h.check_eq(r.json["error"]["field"], "topic", "its field")
    r = API.post("/v1/topics/pz-a/pause", {"why": "x"})
    h.check_eq(r.status, 400, "unknown field on pause")
    h.check_eq(r.json["error"]["field"], "why", "its field")
    pause(API, "pz-a")
    cases = [
        (None, "policy"),
        ({}, "policy"),
        ({"policy": "later"}, "policy"),
        ({"policy": 1}, "policy"),
        ({"policy": "fire", "rate": 0}, "rate"),
        ({"policy": "fire", "rate": -5}, "rate"),
        ({"policy": "fire", "rate": "5"}, "rate"),
        ({"policy": "fire", "rate": 1.5}, "rate"),
        ({"policy": "fire", "rate": 10 ** 7}, "rate"),
        ({"policy": "skip", "rate": 5}, "rate"),
        ({"policy": "fire", "speed": 5}, "speed"),
    ]
    for body, field in cases:
        r = API.post("/v1/topics/pz-a/resume", body)
        h.check_eq(r.status, 400, "resume %r: %r" % (body, r))
        h.check_eq(r.json["error"]["field"], field, "field of %r" % body)
    # Still paused after all those refusals.
    h.check(topics(API)["pz-a"]["paused"], "pz-a paused")
    resume(API, "pz-a", {"policy": "fire"})
    r = API.post("/v1/topics/pz-a/resume", {"policy": "fire"})
    h.check_eq(r.status, 409, "resume of a topic not paused")
    r = API.post("/v1/topics/never-paused/resume", {"policy": "skip"})
    h.check_eq(r.status, 409, "resume of a topic never paused")


def test_pause_reaches_running_worker_within_a_second():
    """Tasks due every 50 ms for 5 s; the pause is sent after 1.5 s:
    nothing due later than a second after its answer is published; the
    rest are held; a resume publishes each exactly once."""
    t0 = h.now_ms() + 1000
    ids = [submit("pz-b", due_at=t0 + 50 * i)["id"] for i in range(100)]
    due = {tid: t0 + 50 * i for i, tid in enumerate(ids)}
    wait = (t0 + 1500 - h.now_ms()) / 1000.0
    time.sleep(max(0, wait))
    h.check(published(READER, ids[0]), "the first tasks fire before the "
            "pause")
    pause(API, "pz-b")
    t_ans = h.now_ms()
    time.sleep((t0 + 5000 - h.now_ms()) / 1000.0 + 2.0)
    fired = [tid for tid in ids if published(READER, tid)]
    late = [tid for tid in fired if due[tid] > t_ans + 1000]
    h.check(not late, "%d tasks due more than 1 s after the pause's answer "
            "were published (first due %+d ms after it)" % (
                len(late), due[late[0]] - t_ans if late else 0))
    last = max(due[tid] for tid in fired)
    h.log("pause answered at +%d ms; last published task due at +%d ms "
          "(%+d ms after the answer); %d of %d published before the pause"
          % (t_ans - t0, last - t0, last - t_ans, len(fired), len(ids)))
    held = len(ids) - len(fired)
    h.wait_until(lambda: held_count(C, "pz-b") == held, 5,
                 what="%d held in Redis (have %d)" % (held,
                                                      held_count(C, "pz-b")))
    w = C.workers[0]
    h.check(metric(w.addr, "prophet_pause_held_total") >= held,
            "prophet_pause_held_total")
    h.check_eq(metric(w.addr, "prophet_paused_topics"), 1.0,
               "prophet_paused_topics")
    tp = topics(API)["pz-b"]
    h.check(tp["paused"] and tp["paused_since"] >= t_ans - 2000,
            "GET /v1/topics while paused: %r" % tp)
    h.check_eq(tp["pending"], held, "pending of the paused topic")
    h.check_eq(tp["overdue"], held, "overdue of the paused topic")
    h.check(tp["fired_last_minute"] == len(fired),
            "fired in the last minute %r, want %d" % (
                tp["fired_last_minute"], len(fired)))
    h.wait_until(lambda: metric(C.manager_addr,
                                'prophet_topic_paused{topic="pz-b"}') == 1,
                 8, what="prophet_topic_paused{topic=pz-b} 1")
    out = resume(API, "pz-b", {"policy": "fire"})
    h.check_eq(out["backlog"], held, "backlog answered by the resume")
    missing = READER.wait_for(ids, 15, settle=1.0)
    h.check(not missing, "not published after the resume: %s" % missing[:5])
    dups = [tid for tid in ids if len(published(READER, tid)) > 1]
    h.check(not dups, "published twice: %s" % dups[:5])
    h.check_eq(held_count(C, "pz-b"), 0, "held after the drain")
    h.wait_until(lambda: metric(C.manager_addr,
                                'prophet_topic_paused{topic="pz-b"}') == 0,
                 8, what="prophet_topic_paused{topic=pz-b} 0")


def test_cancel_and_reschedule_paused_tasks():
    pause(API, "pz-c")
    now = h.now_ms()
    a = submit("pz-c", id="pz-can", delay_ms=100)["id"]
    b = submit("pz-c", id="pz-res-soon", delay_ms=100)["id"]
    c = submit("pz-c", id="pz-res-late", delay_ms=100)["id"]
    h.wait_until(lambda: held_count(C, "pz-c") == 3, 5, what="3 held")
    r = API.request("DELETE", "/v1/tasks/" + a)
    h.check_eq(r.status, 200, "cancel a held task %r" % r)
    r = API.request("PATCH", "/v1/tasks/" + b, {"delay_ms": 200})
    h.check_eq(r.status, 200, "reschedule a held task %r" % r)
    late_due = h.now_ms() + 6000
    r = API.request("PATCH", "/v1/tasks/" + c, {"due_at": late_due})
    h.check_eq(r.status, 200, "reschedule a held task later %r" % r)
    # b falls due again while paused: held again, not published.
    h.wait_until(lambda: held_count(C, "pz-c") == 1, 5,
                 what="the rescheduled task held again")
    time.sleep(0.5)
    h.check(not any(published(READER, x) for x in (a, b, c)),
            "a paused task was published")
    t_res = h.now_ms()
    resume(API, "pz-c", {"policy": "fire"})
    h.check(not READER.wait_for([b], 10), "rescheduled task after resume")
    h.check(published(READER, b)[0].recv_ms >= t_res, "b after the resume")
    h.check(not READER.wait_for([c], (late_due - h.now_ms()) / 1000.0 + 10),
            "task rescheduled past the resume fires")
    fired = int(published(READER, c)[0].hdr["prophet-fired-at"])
    h.check(fired >= late_due, "fired %d ms before its new due time"
            % (late_due - fired))
    time.sleep(0.5)
    h.check(not published(READER, a), "the cancelled held task published")
    h.check_eq(API.get("/v1/tasks/" + a).json["status"], "cancelled",
               "status of the cancelled held task")
    h.log("cancel/reschedule of held tasks ok (%d ms)" % (h.now_ms() - now))


def test_resume_fire_at_rate_oldest_first():
    pause(API, "pz-d")
    n, rate = 16, 5
    now = h.now_ms()
    order = [7, 3, 12, 0, 15, 9, 1, 14, 5, 10, 2, 13, 8, 4, 11, 6]
    due = {}
    for k in order:  # submitted out of order, due 1 s apart in the past
        tid = "pz-rate-%02d" % k
        submit("pz-d", id=tid, due_at=now - (n - k) * 1000)
        due[tid] = now - (n - k) * 1000
    h.wait_until(lambda: held_count(C, "pz-d") == n, 10,
                 what="%d held" % n)
    out = resume(API, "pz-d", {"policy": "fire", "rate": rate})
    h.check_eq(out["backlog"], n, "backlog")
    h.check_eq(out["rate"], rate, "rate")
    t_res = h.now_ms()
    missing = READER.wait_for(list(due), 30)
    h.check(not missing, "not published: %s" % missing)
    # The worker's publish time: the reader's receive order across
    # partitions need not be the publish order.
    def fired(t):
        return int(published(READER, t)[0].hdr["prophet-fired-at"])
    got = sorted(due, key=fired)
    want = sorted(due, key=lambda t: due[t])
    h.check_eq(got, want, "publish order (oldest first)")
    times = sorted(fired(t) for t in due)
    span = times[-1] - times[0]
    h.log("%d tasks at rate %d/s: first %d ms after the resume, span %d ms"
          % (n, rate, times[0] - t_res, span))
    # (n - 1) / rate = 3 s at exactly the rate; a tick's rounding aside.
    h.check(span >= (n - 1) * 1000 / rate - 400,
            "span %d ms: faster than %d/s" % (span, rate))
    h.check(span <= (n - 1) * 1000 / rate + 3000,
            "span %d ms: far slower than %d/s" % (span, rate))
    # No more than rate+1 in any one second.
    for t in times:
        inwin = sum(1 for u in times if t <= u < t + 1000)
        h.check(inwin <= rate + 1, "%d published within 1 s" % inwin)


def test_resume_at_rate_paces_a_fire_all_catch_up():
    """A fire_all series misses an occurrence a second while its topic is
    paused; the resume's rate applies to all of them (it used to apply to
    the held one only, the others went out at once after it), each is
    published once, in order, and the backlog counts them."""
    pause(API, "pz-g")
    tid, rate = "pz-series", 2
    submit("pz-g", id=tid, cron="* * * * * *", misfire="fire_all")
    h.wait_until(lambda: held_count(C, "pz-g") == 1, 10, what="held")
    time.sleep(6)
    held_at = API.get("/v1/tasks/" + tid).json["due_at"]
    t_res = h.now_ms()
    out = resume(API, "pz-g", {"policy": "fire", "rate": rate})
    missed = list(range(held_at, t_res, 1000))
    h.check(len(missed) <= out["backlog"] <= len(missed) + 1,
            "backlog %d for %d missed" % (out["backlog"], len(missed)))

    def occurrences():
        return [(int(m.hdr["prophet-occurrence"]),
                 int(m.hdr["prophet-fired-at"]))
                for m in published(READER, tid)]
    h.wait_until(lambda: {o for o, _ in occurrences()} >= set(missed),
                 len(missed) / rate + 10, what="the missed occurrences")
    got = sorted(occurrences(), key=lambda x: x[1])
    occ = [o for o, _ in got]
    h.check_eq(len(occ), len(set(occ)), "an occurrence published twice")
    h.check_eq(occ, sorted(occ), "publish order")
    times = [f for o, f in got if o in missed]
    span = times[-1] - times[0]
    h.log("%d missed occurrences at rate %d/s: span %d ms"
          % (len(missed), rate, span))
    h.check(span >= (len(missed) - 1) * 1000 / rate - 400,
            "span %d ms: faster than %d/s" % (span, rate))
    for t in times:
        inwin = sum(1 for u in times if t <= u < t + 1000)
        h.check(inwin <= rate + 1, "%d published within 1 s" % inwin)
    API.request("DELETE", "/v1/tasks/" + tid)


def test_resume_skip_expires_with_log_row():
    pause(API, "pz-e")
    subs = [submit("pz-e", delay_ms=50 * i) for i in range(6)]
    ids = [x["id"] for x in subs]
    h.wait_until(lambda: held_count(C, "pz-e") == 6, 10, what="6 held")
    # All due at the resume (a task is claimed, and held, a little before
    # its due time; one not due yet at the resume is not skipped).
    time.sleep(max(0, max(x["due_at"] for x in subs) + 100 - h.now_ms())
               / 1000.0)
    out = resume(API, "pz-e", {"policy": "skip"})
    h.check_eq(out["skipped"], 6, "skipped")
    for tid in ids:
        r = API.get("/v1/tasks/%s?log=1" % tid)
        h.check_eq(r.json["status"], "expired", "status of a skipped task")
        rows = [x for x in r.json["log"] if x.get("to") == "expired" or
                x.get("to_status") == "expired"]
        h.check(rows and "skip" in (rows[-1].get("note") or ""),
                "log row of the skip: %r" % r.json["log"])
    later = submit("pz-e", delay_ms=100)["id"]
    h.check(not READER.wait_for([later], 10), "a new task after the resume")
    time.sleep(1.0)
    h.check(not any(published(READER, t) for t in ids),
            "a skipped task was published")
    h.check_eq(held_count(C, "pz-e"), 0, "held after skip")
    tp = topics(API)["pz-e"]
    h.check(not tp["paused"] and tp["last_resume"]["policy"] == "skip" and
            tp["last_resume"]["skipped"] == 6, "GET /v1/topics %r" % tp)
    h.check(metric(C.manager_addr, "prophet_pause_skipped_total") >= 6,
            "prophet_pause_skipped_total")


def test_skip_keeps_a_task_rescheduled_meanwhile():
    """A resume with skip reads the overdue tasks, takes them out of Redis,
    then expires them in the DB. A task rescheduled in between (a PATCH, a
    bulk job's chunk) was expired all the same, its new time still ahead
    (a bulk shift racing a resume: 500 of 10,000 shifted tasks expired).
    Now it stays scheduled, indexed again, and fires at its new time."""
    pause(API, "pz-h")
    submit("pz-h", id="pz-keep", delay_ms=50)
    submit("pz-h", id="pz-gone", delay_ms=50)
    h.wait_until(lambda: held_count(C, "pz-h") == 2, 10, what="2 held")
    new_due = h.now_ms() + 8000
    # Another session moves pz-keep holding its row lock for 4 s: the
    # skip reads the old due time, and its UPDATE waits for the commit.
    sql = ("SET autocommit = 0; SELECT id FROM tasks WHERE id = 'pz-keep' "
           "FOR UPDATE; DO SLEEP(4); UPDATE tasks SET due_at = %d WHERE "
           "id = 'pz-keep'; COMMIT" % new_due)
    mover = threading.Thread(target=C.mysql, args=(sql,))
    mover.start()
    time.sleep(0.5)
    out = resume(API, "pz-h", {"policy": "skip"})
    mover.join()
    h.check_eq(out["skipped"], 1, "skipped")
    h.check_eq(API.get("/v1/tasks/pz-gone").json["status"], "expired",
               "the task not moved")
    j = API.get("/v1/tasks/pz-keep").json
    h.check(j["status"] == "scheduled" and j["due_at"] == new_due,
            "the task moved meanwhile: %r" % j)
    h.check(not READER.wait_for(["pz-keep"], 15), "pz-keep not published")
    fired = int(published(READER, "pz-keep")[0].hdr["prophet-fired-at"])
    h.check(fired >= new_due, "published %d ms early" % (new_due - fired))
    h.check(not published(READER, "pz-gone"), "a skipped task published")


def test_prophetctl():
    ctl = os.path.join(h.BUILDDIR, "prophetctl")
    base = [ctl, "--url", "http://" + C.manager_addr]

    def run(*args):
        return subprocess.run(base + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=30)
    p = run("pause", "pz-f")
    h.check(p.returncode == 0 and "pz-f paused since" in p.stdout,
            "pause: %r" % (p,))
    h.wait_until(lambda: C.workers[0].grep('holding its tasks" topic=pz-f '),
                 2.0, what="the pause on the worker")
    tasks = [submit("pz-f", delay_ms=10) for _ in range(3)]
    ids = [t["id"] for t in tasks]
    h.wait_until(lambda: held_count(C, "pz-f") == 3, 10, what="3 held")
    # A task is held from the look-ahead on, before its due time: "overdue"
    # counts only those past it.
    h.wait_until(lambda: h.now_ms() > max(t["due_at"] for t in tasks) + 20,
                 5, what="the 3 due")
    p = run("topics")
    line = [x for x in p.stdout.splitlines() if x.startswith("pz-f ")]
    h.check(p.returncode == 0 and line and "paused" in line[0],
            "topics: %r" % (p,))
    h.check_eq(line[0].split()[2:4], ["3", "3"], "pending, overdue")
    # Times are dates and times: the columns stay under their headings.
    rows = p.stdout.splitlines()
    h.check(all(len(x) == len(rows[0]) for x in rows[1:]),
            "topics: columns not aligned: %r" % p.stdout)
    p = run("--json", "topics")
    t = {x["topic"]: x for x in json.loads(p.stdout)["topics"]}
    h.check(t["pz-f"]["paused"], "topics --json")
    p = run("resume", "pz-f", "--policy", "later")
    h.check(p.returncode != 0 and "policy" in p.stderr, "bad policy: %r"
            % (p,))
    p = run("resume", "pz-f", "--policy", "fire", "--rate", "x")
    h.check(p.returncode != 0, "bad rate: %r" % (p,))
    p = run("resume", "pz-f")
    h.check(p.returncode != 0 and "usage" in p.stderr, "no policy: %r"
            % (p,))
    p = run("resume", "pz-f", "--policy", "fire", "--rate", "50")
    h.check(p.returncode == 0 and "3 overdue tasks fire" in p.stdout and
            "at 50/s, until about 20" in p.stdout,
            "resume: %r" % (p,))
    h.check(not READER.wait_for(ids, 10), "published after resume")
    p = run("resume", "pz-f", "--policy", "fire")
    h.check(p.returncode != 0 and "409" in p.stderr, "resume again: %r"
            % (p,))


def test_pause_across_worker_kill_flushall_db_mode_and_restarts():
    """A private Redis and two workers: paused tasks fall due, a worker is
    SIGKILLed, Redis is FLUSHALLed, the manager restarted, Redis killed
    (DB mode) and brought back: none of the paused topic's tasks fires,
    another topic's do; then resume fire publishes them all, and a second
    round resumed with skip expires them all."""
    rd = s.PrivateRedis().start()
    failed = True
    try:
        with s.Cluster(workers=2, name="pause-dur", redis=rd,
                       conf={"redis.timeout_ms": 1000,
                             "worker.lease_ms": 3000}) as c:
            c.start()
            api = c.api()
            h.create_topics(c.brokers, [c.topic("held"), c.topic("free")])
            rdr = c.reader(["held", "free"])

            def sub(topic, delay):
                r = api.post("/v1/tasks", {"topic": topic, "body": "x",
                                           "delay_ms": delay})
                h.check_eq(r.status, 201, "submit")
                return r.json["id"]

            pause(api, "held", c)
            ids = [sub("held", 200 + 40 * i) for i in range(40)]
            h.wait_until(lambda: held_count(c, "held") == 40, 15,
                         what="40 held")
            c.workers[0].kill()
            rd.client().cmd("FLUSHALL")
            h.log("worker 0 SIGKILLed, Redis FLUSHALLed")
            c.start_worker(0)
            free1 = [sub("free", 300) for _ in range(5)]
            h.check(not rdr.wait_for(free1, 30),
                    "other topic after the flush")
            # The rebuild indexed the paused tasks again: held again.
            h.wait_until(lambda: held_count(c, "held") == 40, 30,
                         what="40 held again after the flush")
            c.manager.stop()
            c.start_manager()
            h.check(topics(api)["held"]["paused"], "paused after a "
                    "manager restart")
            # DB mode: Redis away, the workers fire from the DB.
            rd.kill()
            more = [sub("held", 100) for _ in range(5)]
            free2 = [sub("free", 100) for _ in range(5)]
            h.check(not rdr.wait_for(free2, 30), "other topic in DB mode")
            time.sleep(1.0)
            rd.start()
            free3 = [sub("free", 500) for _ in range(5)]
            h.check(not rdr.wait_for(free3, 60), "other topic after Redis "
                    "returned")
            h.wait_until(lambda: held_count(c, "held") == 45, 30,
                         what="45 held after the rebuild")
            fired = [t for t in ids + more if published(rdr, t)]
            h.check(not fired, "%d paused tasks published" % len(fired))
            resume(api, "held", {"policy": "fire"})
            missing = rdr.wait_for(ids + more, 30)
            h.check(not missing, "not published after resume: %d"
                    % len(missing))
            # Round two: skip.
            pause(api, "held", c)
            ids2 = [sub("held", 100 + 20 * i) for i in range(20)]
            h.wait_until(lambda: held_count(c, "held") == 20, 15,
                         what="20 held")
            c.workers[1].kill()
            rd.client().cmd("FLUSHALL")
            c.start_worker(1)
            h.wait_until(lambda: held_count(c, "held") == 20, 30,
                         what="20 held again after the flush")
            out = resume(api, "held", {"policy": "skip"})
            h.check_eq(out["skipped"], 20, "skipped")
            st = c.mysql("SELECT status, COUNT(*) FROM tasks WHERE id IN "
                         "(%s) GROUP BY status" % ",".join(
                             "'%s'" % t for t in ids2))
            h.check_eq(st, [["expired", "20"]], "statuses after skip")
            time.sleep(2.0)
            fired = [t for t in ids2 if published(rdr, t)]
            h.check(not fired, "%d skipped tasks published" % len(fired))
            failed = False
    finally:
        rd.close(failed=failed)


def cleanup(failed):
    if READER is not None:
        READER.stop()
    if API is not None:
        API.close()
    if C is not None:
        C.close(failed=failed)


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)
