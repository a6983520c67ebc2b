#!/usr/bin/python3
"""Bulk cancel and reschedule by filter (POST /v1/tasks/bulk, issue 22)
against a running cluster (manager + 2 workers) with a Kafka ledger: a
bulk cancel racing the workers leaves every task either published or
cancelled, never both, with exact counts; a bulk shift moves tasks across
the horizon and the buckets and they fire at their new time only; the dry
run counts what the job changes; a job resumes after a kill -9 of its
manager without doing a task twice; bad requests get a 400 naming the
field; the job row and the per-task log rows say who did it; a job
cancelled mid-way stops with every task either changed once (with its log
row) or untouched, and task.bulk_max_jobs bounds the jobs queued."""

import json
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
API = None
READER = None
TOPIC = "bulk"
OTHER = "bulkother"


def setup():
    global C, API, READER
    # Small chunks with a pause: a job of a few thousand tasks takes
    # seconds, long enough to race workers and to be killed mid-way.
    C = h.Cluster(workers=2, name="bulk", conf={
        "task.bulk_chunk": 100,
        "task.bulk_pause_ms": 20,
    }).open()
    C.start()
    API = C.api()
    h.create_topics(C.brokers, [C.topic(TOPIC), C.topic(OTHER)])
    READER = C.reader([TOPIC, OTHER])


def submit_batch(tasks):
    ids = []
    for i in range(0, len(tasks), 1000):
        r = API.post("/v1/tasks/batch", {"tasks": tasks[i:i + 1000]})
        h.check_eq(r.status, 200, "batch %r" % r)
        for x in r.json["results"]:
            h.check_eq(x["code"], 201, "batch item %r" % x)
            ids.append(x["id"])
    return ids


def tasks(prefix, n, due, topic=TOPIC, spread=0, **kw):
    out = []
    for i in range(n):
        t = {"id": "%s-%05d" % (prefix, i), "topic": topic,
             "body": "b%d" % i,
             "due_at": due + (i * spread // n if spread else 0)}
        t.update(kw)
        out.append(t)
    return out


def published(tid):
    with READER.cond:
        return list(READER.by_id.get(tid, []))


def bulk(body, want=202):
    r = API.post("/v1/tasks/bulk", body)
    h.check_eq(r.status, want, "bulk %r -> %r" % (body, r))
    return r.json


def wait_job(job, timeout=60):
    out = {}

    def done():
        r = API.get("/v1/admin/jobs/%d" % job)
        h.check_eq(r.status, 200, "job status")
        out.update(r.json)
        return r.json["done"]
    h.wait_until(done, timeout, interval=0.2, what="bulk job %d" % job)
    return out


def wait_under_way(job, scanned, api=None):
    """Until the job has looked at scanned tasks."""
    api = api or API
    h.wait_until(lambda: api.get("/v1/admin/jobs/%d" % job).json[
        "scanned"] >= scanned, 60, interval=0.02, what="job under way")


def statuses(prefix):
    rows = C.mysql("SELECT id, status, due_at FROM tasks WHERE id LIKE '%s-%%'"
                   % prefix)
    return {r[0]: (r[1], int(r[2])) for r in rows}


def bulk_log_rows(prefix):
    rows = C.mysql("SELECT task_id, COUNT(*) FROM task_log WHERE actor = "
                   "'bulk' AND task_id LIKE '%s-%%' GROUP BY task_id"
                   % prefix)
    return {r[0]: int(r[1]) for r in rows}


def test_bad_requests_name_the_field():
    f = {"topic": TOPIC}
    cases = [
        ({"action": "cancel"}, "filter"),
        ({"action": "cancel", "filter": {}}, "filter"),
        ({"action": "cancel", "filter": []}, "filter"),
        ({"action": "cancel", "filter": {"bogus": 1}}, "filter.bogus"),
        ({"action": "cancel", "filter": {"topic": 5}}, "filter.topic"),
        ({"action": "cancel", "filter": {"topic": "a b"}}, "filter.topic"),
        ({"action": "cancel", "filter": {"status": "delivered"}},
         "filter.status"),
        ({"action": "cancel", "filter": {"due_from": "x"}},
         "filter.due_from"),
        ({"action": "cancel", "filter": {"due_from": 10, "due_to": 5}},
         "filter.due_to"),
        ({"action": "cancel", "filter": {"id_prefix": "a b"}},
         "filter.id_prefix"),
        ({"action": "cancel", "filter": {"id_prefix": ""}},
         "filter.id_prefix"),
        ({"action": "cancel", "filter": {"key": ""}}, "filter.key"),
        ({"action": "cancel", "filter": {"key": "k" * 1025}}, "filter.key"),
        ({"action": "cancel", "filter": {"all": False}}, "filter.all"),
        ({"action": "explode", "filter": f}, "action"),
        ({"filter": f}, "action"),
        ({"action": "set_due", "filter": f, "by_ms": 5}, "by_ms"),
        ({"action": "set_due", "filter": f}, "due_at"),
        ({"action": "set_due", "filter": f, "due_at": -1}, "due_at"),
        ({"action": "shift", "filter": f}, "by_ms"),
        ({"action": "shift", "filter": f, "by_ms": 0}, "by_ms"),
        ({"action": "shift", "filter": f, "by_ms": "10"}, "by_ms"),
        ({"action": "shift", "filter": f, "by_ms": 10, "due_at": 5},
         "due_at"),
        ({"action": "cancel", "filter": f, "by_ms": 10}, "by_ms"),
        ({"action": "cancel", "filter": f, "due_at": 10}, "due_at"),
        ({"action": "cancel", "filter": f, "dry_run": "yes"}, "dry_run"),
        ({"action": "cancel", "filter": f, "extra": 1}, "extra"),
    ]
    for body, field in cases:
        r = API.post("/v1/tasks/bulk", body)
        h.check_eq(r.status, 400, "%r -> %r" % (body, r))
        h.check_eq(r.json["error"]["field"], field, "field of %r" % body)
    r = API.request("POST", "/v1/tasks/bulk", b"not json",
                    {"Content-Type": "application/json"})
    h.check_eq(r.status, 400, "not JSON")
    # An empty filter is refused; {"all": true} is the explicit form.
    r = bulk({"action": "cancel", "filter": {"all": True}, "dry_run": True},
             200)
    h.check(r["matched"] >= 0, "all: %r" % r)
    for bad in ("abc", "0", "-1", "1x", "99999999"):
        r = API.get("/v1/admin/jobs/" + bad)
        h.check_eq(r.status, 404, "job %s" % bad)
    h.check_eq(C.mysql("SELECT COUNT(*) FROM bulk_jobs")[0][0], "0",
               "no job recorded by refused or dry-run requests")


def test_dry_run_count_equals_real_cancel():
    far = h.now_ms() + 2 * 3600 * 1000
    near = h.now_ms() + 7000
    a = submit_batch(tasks("dry", 700, far, key="k1"))
    submit_batch([{"id": "dryo-%d" % i, "topic": OTHER, "body": "o",
                   "key": "k1", "due_at": far} for i in range(50)])
    # In the Redis index: the due set (7 s) and a bucket (10 min).
    n1 = submit_batch(tasks("dryn", 60, near, key="k1"))
    n2 = submit_batch(tasks("dryb", 40, h.now_ms() + 600000, key="k1"))
    submit_batch(tasks("dryk", 30, far, key="k2"))
    flt = {"topic": TOPIC, "key": "k1", "status": "scheduled"}
    r = bulk({"action": "cancel", "filter": flt, "dry_run": True}, 200)
    h.check_eq(r["matched"], 800, "dry run count")
    h.check_eq(r["filter"], flt, "dry run echoes the filter")
    j = bulk({"action": "cancel", "filter": flt})
    h.check_eq(j["total"], 800, "job total")
    h.check_eq(j["who"], "anonymous", "who without tokens")
    j = wait_job(j["job"])
    h.check_eq((j["changed"], j["firing"], j["skipped"], j["scanned"]),
               (800, 0, 0, 800), "counts = the dry run's")
    st = statuses("dry")
    h.check(all(st["dry-%05d" % i][0] == "cancelled" for i in range(700)),
            "far tasks cancelled")
    st.update(statuses("dryn"))
    st.update(statuses("dryb"))
    h.check(all(v[0] == "cancelled" for k, v in st.items()
                if k.startswith(("dryn", "dryb"))), "indexed tasks cancelled")
    # Tombstones for the indexed ones, none for those beyond the reach of
    # every index (2 h): they would take Redis memory until 3 h from now.
    h.check_eq(C.tombstoned(n1 + n2), len(n1 + n2),
               "indexed tasks' tombstones")
    h.check_eq(C.tombstoned(["dry-%05d" % i for i in range(100)]), 0,
               "tombstones of far tasks")
    h.check(all(v[0] == "scheduled" for v in statuses("dryk").values()),
            "another key untouched")
    h.check(all(v[0] == "scheduled" for v in statuses("dryo").values()),
            "another topic untouched")
    logs = bulk_log_rows("dry")
    logs.update(bulk_log_rows("dryn"))
    logs.update(bulk_log_rows("dryb"))
    h.check_eq(len(logs), 800, "a log row per task")
    h.check(all(v == 1 for v in logs.values()), "one each")
    r = API.get("/v1/tasks/%s?log=1" % a[3])
    rows = [x for x in r.json["log"] if x.get("actor") == "bulk"]
    h.check_eq(len(rows), 1, "bulk row in GET ?log=1: %r" % r.json["log"])
    h.check_eq(rows[0]["to"], "cancelled", "to cancelled: %r" % rows[0])
    h.check("bulk job %d by anonymous: cancel" % j["job"]
            in (rows[0].get("note") or ""), "note %r" % rows[0])
    # The job's audit row: who, filter, counts, in the list too.
    lst = API.get("/v1/admin/jobs").json["jobs"]
    mine = [x for x in lst if x["job"] == j["job"]]
    h.check_eq(len(mine), 1, "listed")
    h.check_eq((mine[0]["who"], mine[0]["filter"], mine[0]["changed"],
                mine[0]["state"]), ("anonymous", flt, 800, "done"),
               "audit row")
    # The indexed ones never fire.
    time.sleep(max(0, near - h.now_ms()) / 1000.0 + 3)
    h.check(not any(published(i) for i in n1 + n2), "a cancelled task fired")
    m = h.metrics(C.manager_addr, labelled=True)
    key = 'prophet_bulk_tasks_total{action="cancel",outcome="changed"}'
    h.check(m.get(key, 0) >= 800, "metric %s: %r" % (key, m.get(key)))


def test_cancel_races_workers():
    n = 2000
    start = h.now_ms() + 2500
    ids = submit_batch(tasks("race", n, start, spread=2500))
    # Start as the first ones fire: the job's chunks (100 tasks, ~20 ms
    # apart) run through the 2.5 s the tasks fire over.
    time.sleep(max(0, start - h.now_ms() + 300) / 1000.0)
    j = bulk({"action": "cancel", "filter": {"id_prefix": "race-"}})
    j = wait_job(j["job"])
    h.log("race: scanned %d, changed %d, firing %d, skipped %d"
          % (j["scanned"], j["changed"], j["firing"], j["skipped"]))
    time.sleep(4)  # in-flight publishes complete
    st = statuses("race")
    pub = {i for i in ids if published(i)}
    canc = {i for i, v in st.items() if v[0] == "cancelled"}
    deliv = {i for i, v in st.items() if v[0] == "delivered"}
    h.check(not (pub & canc), "published and cancelled: %s"
            % sorted(pub & canc)[:5])
    h.check_eq(len(pub | canc), n, "every task published or cancelled")
    h.check_eq(pub, deliv, "published = delivered")
    h.check(0 < len(canc) < n, "the race happened (%d cancelled)"
            % len(canc))
    h.check_eq(j["changed"], len(canc), "changed = cancelled")
    h.check_eq(j["changed"] + j["firing"] + j["skipped"], j["scanned"],
               "every scanned task counted once")
    h.check(j["scanned"] <= n and j["firing"] <= len(pub),
            "counts within bounds: %r" % j)
    h.check(set(j["firing_ids"]) <= pub, "firing ids were published")
    logs = bulk_log_rows("race")
    h.check_eq(set(logs), canc, "a log row per cancelled task")
    h.check(all(len(published(i)) >= 1 for i in pub), "published")


def test_shift_across_horizon_and_buckets():
    now = h.now_ms()
    hour = 3600 * 1000
    # a: in the due set, moved beyond the horizon (2 h);
    # b: beyond the horizon (2 h, DB only), moved to +12 s (due set);
    # c: in a bucket (+10 min), moved to +14 s;
    # d: in the due set (+8 s), moved into a bucket (+10 min).
    a = submit_batch(tasks("shfa", 100, now + 8000))
    b = submit_batch(tasks("shfb", 100, now + 2 * hour))
    c = submit_batch(tasks("shfc", 100, now + 600000))
    d = submit_batch(tasks("shfd", 100, now + 8000))
    before = {}
    for p in ("shfa", "shfb", "shfc", "shfd"):
        before.update(statuses(p))
    jobs = [
        bulk({"action": "shift", "filter": {"id_prefix": "shfa-"},
              "by_ms": 2 * hour}),
        bulk({"action": "shift", "filter": {"id_prefix": "shfb-"},
              "by_ms": -(2 * hour) + 12000}),
        bulk({"action": "set_due", "filter": {"id_prefix": "shfc-"},
              "due_at": now + 14000}),
        bulk({"action": "shift", "filter": {"id_prefix": "shfd-",
                                            "due_to": now + 9000},
              "by_ms": 600000 - 8000}),
    ]
    for jb in jobs:
        jb = wait_job(jb["job"])
        h.check_eq((jb["changed"], jb["firing"], jb["skipped"]),
                   (100, 0, 0), "job %d counts" % jb["job"])
    after = {}
    for p in ("shfa", "shfb", "shfc", "shfd"):
        after.update(statuses(p))
    for i in a:
        h.check_eq(after[i][1], before[i][1] + 2 * hour, "a due")
    for i in b:
        h.check_eq(after[i][1], before[i][1] - 2 * hour + 12000, "b due")
    for i in c:
        h.check_eq(after[i][1], now + 14000, "c due")
    for i in d:
        h.check_eq(after[i][1], before[i][1] + 600000 - 8000, "d due")
    missing = READER.wait_for(b + c, 40, settle=3)
    h.check(not missing, "shifted tasks did not fire: %s" % missing[:5])
    for i in b + c:
        ms = published(i)
        h.check_eq(len(ms), 1, "%s published once" % i)
        h.check(ms[0].recv_ms >= after[i][1] - 50,
                "%s fired before its new time (%d < %d)"
                % (i, ms[0].recv_ms, after[i][1]))
    h.check(not any(published(i) for i in a + d),
            "a task moved away fired at its old time")
    logs = bulk_log_rows("shfb")
    h.check_eq(len(logs), 100, "log rows")
    r = API.get("/v1/tasks/%s?log=1" % b[0])
    notes = [x.get("note") or "" for x in r.json["log"]
             if x.get("actor") == "bulk"]
    h.check(len(notes) == 1 and "due_at %d" % after[b[0]][1] in notes[0],
            "shift log note: %r" % notes)


def test_resume_after_kill():
    n = 3000
    far = h.now_ms() + 3 * 3600 * 1000
    submit_batch(tasks("res", n, far, spread=n))
    before = statuses("res")
    j = bulk({"action": "shift", "filter": {"id_prefix": "res-"},
              "by_ms": 3600000})
    job = j["job"]

    wait_under_way(job, 500)
    C.manager.kill()
    mid = int(C.mysql("SELECT scanned FROM bulk_jobs WHERE id = %d"
                      % job)[0][0])
    h.check(0 < mid < n, "killed mid-job (%d of %d)" % (mid, n))
    C.start_manager()
    j = wait_job(job)
    h.check(j["resumed"] >= 1, "resumed: %r" % j)
    h.check_eq((j["changed"], j["firing"], j["skipped"], j["scanned"]),
               (n, 0, 0, n), "final counts exact")
    after = statuses("res")
    wrong = [i for i in before if after[i][1] != before[i][1] + 3600000]
    h.check(not wrong, "shifted other than once: %s" % wrong[:5])
    logs = bulk_log_rows("res")
    h.check_eq(len(logs), n, "a log row per task")
    h.check(all(v == 1 for v in logs.values()), "no task done twice")


def test_one_runner_and_takeover():
    # A second manager on the same cluster: jobs run on one manager at a
    # time; when it is killed, the other takes the job over once the lease
    # (15 s) ran out, from the committed cursor, and nothing is done twice.
    m2 = C.add_manager()
    n = 8000
    far = h.now_ms() + 5 * 3600 * 1000
    submit_batch(tasks("two", n, far, spread=n))
    jobs = [bulk({"action": "cancel", "filter": {"id_prefix": "two-00"}}),
            bulk({"action": "cancel", "filter": {"id_prefix": "two-"}})]
    owners = set()

    def running():
        rows = C.mysql("SELECT id, owner FROM bulk_jobs WHERE state = "
                       "'running' AND owner IS NOT NULL AND lease_until > "
                       "%d" % h.now_ms())
        h.check(len(rows) <= 1, "two jobs running at once: %r" % rows)
        owners.update(r[1] for r in rows)
        return int(C.mysql("SELECT scanned FROM bulk_jobs WHERE id = %d"
                           % jobs[1]["job"])[0][0]) >= 300
    h.wait_until(running, 60, interval=0.05, what="second job under way")
    h.check_eq(len(owners), 1, "one runner: %r" % owners)
    owner = owners.pop()
    victim = C.manager if owner.endswith(C.manager_addr) else m2
    h.log("killing the runner %s" % owner)
    victim.kill()
    api = h.Api(C.manager_addr if victim is m2 else m2.addr)
    try:
        def done():
            return api.get("/v1/admin/jobs/%d" % jobs[1]["job"]).json["done"]
        h.wait_until(done, 90, interval=0.2, what="the other manager")
        j = api.get("/v1/admin/jobs/%d" % jobs[1]["job"]).json
    finally:
        api.close()
    h.check(j["resumed"] >= 1 and j["owner"] is None, "taken over: %r" % j)
    first = C.mysql("SELECT changed FROM bulk_jobs WHERE id = %d"
                    % jobs[0]["job"])[0][0]
    h.check_eq(int(first) + j["changed"], n, "every task cancelled once")
    h.check_eq(j["changed"] + j["firing"] + j["skipped"], j["scanned"],
               "counts")
    logs = bulk_log_rows("two")
    h.check_eq(len(logs), n, "a log row per task")
    h.check(all(v == 1 for v in logs.values()), "none done twice")
    h.check(all(v[0] == "cancelled" for v in statuses("two").values()),
            "all cancelled")
    if victim is C.manager:
        C.start_manager()
    else:
        m2.stop()


def ctl(*args):
    p = subprocess.run([os.path.join(h.BUILDDIR, "prophetctl"), "--url",
                        "http://" + C.manager_addr] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_cli_bulk_and_jobs():
    far = h.now_ms() + 4 * 3600 * 1000
    submit_batch(tasks("cli", 250, far, topic=OTHER))
    rc, out, err = ctl("bulk", "cancel", "--topic", OTHER, "--id-prefix",
                       "cli-", "--dry-run")
    h.check_eq((rc, out.strip()), (0, "250 scheduled tasks match"),
               "dry run: %s" % err)
    rc, out, err = ctl("bulk", "shift", "--id-prefix", "cli-", "--due-at",
                       "5")
    h.check_eq(rc, 1, "due_at with shift refused: %s %s" % (out, err))
    h.check("due_at" in err, "the field named: %s" % err)
    rc, out, err = ctl("--json", "bulk", "set-due", "--id-prefix", "cli-",
                       "--due-from", str(far - 1), "--due-at",
                       str(far + 60000))
    h.check_eq(rc, 0, "set-due: %s" % err)
    j = json.loads(out)
    h.check_eq((j["done"], j["changed"], j["action"]), (True, 250, "set_due"),
               "followed to the end: %r" % j)
    h.check(all(v == ("scheduled", far + 60000)
                for v in statuses("cli").values()), "moved")
    rc, out, err = ctl("jobs")
    h.check(rc == 0 and ("%6d set_due" % j["job"]) in out, "jobs: %s" % out)
    rc, out, err = ctl("jobs", str(j["job"]))
    h.check(rc == 0 and "250 changed" in out, "jobs ID: %s" % out)
    # The task's log shows each row's note: which job changed it, and how.
    rc, out, err = ctl("get", "cli-00000", "--log")
    h.check(rc == 0 and ("by bulk epoch 0 attempt 0: bulk job %d by "
                         "anonymous: set_due" % j["job"]) in out,
            "get --log: %s %s" % (out, err))


def test_cancel_job_mid_way():
    n = 6000
    far = h.now_ms() + 6 * 3600 * 1000
    submit_batch(tasks("cj", n, far, spread=n))
    before = statuses("cj")
    job = bulk({"action": "shift", "filter": {"id_prefix": "cj-"},
                "by_ms": 3600000})["job"]

    wait_under_way(job, 500)
    rc, out, err = ctl("jobs", str(job), "--cancel")
    h.check(rc == 0 and "cancelled by anonymous" in out,
            "jobs --cancel: %s %s" % (out, err))
    j = API.get("/v1/admin/jobs/%d" % job).json
    h.check_eq((j["state"], j["done"], j["cancelled_by"]),
               ("cancelled", True, "anonymous"), "the job: %r" % j)
    # its runner lets go of it once it has put back what it held
    h.wait_until(lambda: API.get("/v1/admin/jobs/%d" % job).json["owner"]
                 is None, 10, 0.1, "the runner's release of the job")
    h.check(j["finished_at"] is not None, "finished_at set: %r" % j)
    time.sleep(1.5)  # a runner that did not stop would go on now
    j = API.get("/v1/admin/jobs/%d" % job).json
    h.check(0 < j["changed"] < n, "stopped mid-way: %r" % j)
    after = statuses("cj")
    moved = [i for i in before if after[i][1] == before[i][1] + 3600000]
    wrong = [i for i in before if after[i][1] not in
             (before[i][1], before[i][1] + 3600000)]
    h.check(not wrong, "moved other than once or not at all: %s" % wrong[:5])
    h.check_eq(len(moved), j["changed"], "tasks moved = changed")
    logs = bulk_log_rows("cj")
    h.check_eq(sorted(logs), sorted(moved), "log rows of the moved tasks "
               "only")
    h.check(all(v == 1 for v in logs.values()), "no task done twice")
    time.sleep(1)
    h.check_eq(len(bulk_log_rows("cj")), len(moved), "nothing after")

    r = API.post("/v1/admin/jobs/%d/cancel" % job, None)
    h.check_eq((r.status, r.json["error"]["code"], r.json["error"]["field"]),
               (409, "not_running", "job"), "cancelled twice: %r" % r)
    h.check("cancelled" in r.json["error"]["message"], "says why: %r" % r)
    r = API.post("/v1/admin/jobs/999999999/cancel", None)
    h.check_eq(r.status, 404, "unknown job: %r" % r)
    r = API.post("/v1/admin/jobs/x1/cancel", None)
    h.check_eq(r.status, 404, "not a job id: %r" % r)
    # the next job runs as usual
    done = bulk({"action": "cancel", "filter": {"id_prefix": "cj-0000"}})
    d = wait_job(done["job"])
    h.check_eq((d["state"], d["changed"], d["cancelled_by"]),
               ("done", 10, None), "the next job: %r" % d)
    r = API.post("/v1/admin/jobs/%d/cancel" % done["job"], None)
    h.check_eq(r.status, 409, "a done job: %r" % r)
    h.check("is done" in r.json["error"]["message"], "says why: %r" % r)


def test_cancelled_cancel_job_leaves_the_rest_firing():
    """A cancel job stopped mid-way over tasks in the Redis index: the
    chunk rolled back had been taken out of Redis already; its slots are
    rebuilt, so every task the job did not cancel fires, and none it
    cancelled does."""
    n = 4000
    due = h.now_ms() + 25000
    submit_batch(tasks("cc", n, due, spread=4000))
    job = bulk({"action": "cancel", "filter": {"id_prefix": "cc-"}})["job"]

    wait_under_way(job, 400)
    r = API.post("/v1/admin/jobs/%d/cancel" % job, None)
    h.check_eq(r.status, 200, "cancel: %r" % r)
    time.sleep(1)
    j = API.get("/v1/admin/jobs/%d" % job).json
    h.check(0 < j["changed"] < n, "stopped mid-way: %r" % j)
    st = statuses("cc")
    cancelled = {i for i, v in st.items() if v[0] == "cancelled"}
    h.check_eq(len(cancelled), j["changed"], "cancelled = changed")
    rest = [i for i in st if i not in cancelled]

    def all_fired():
        return all(published(i) for i in rest)
    h.wait_until(all_fired, max(30, (due - h.now_ms()) / 1000 + 30), 0.5,
                 "the %d tasks not cancelled fired" % len(rest))
    time.sleep(2)
    fired = [i for i in cancelled if published(i)]
    h.check(not fired, "cancelled tasks published: %s" % fired[:5])
    h.log("FIGURES cancel job stopped after %d of %d; the other %d fired"
          % (len(cancelled), n, len(rest)))


def test_cancel_after_its_runner_died():
    """The runner is killed mid-chunk and the job cancelled through
    another manager before anyone took it over: the Redis steps of its
    last chunks are unknown, so the next manager to look rebuilds every
    slot index once the dead runner's lease is out, and every task the
    job did not cancel still fires."""
    m2 = C.add_manager()
    api2 = h.Api(m2.addr)
    victim = None
    try:
        n = 4000
        due = h.now_ms() + 22000
        submit_batch(tasks("cd", n, due, spread=3000))
        job = bulk({"action": "cancel", "filter": {"id_prefix": "cd-"}})
        job = job["job"]

        wait_under_way(job, 400, api2)
        runner = api2.get("/v1/admin/jobs/%d" % job).json["owner"]
        victim = C.manager if runner.endswith(C.manager_addr) else m2
        other = m2 if victim is C.manager else C.manager
        victim.kill()
        oapi = api2 if other is m2 else API
        r = oapi.post("/v1/admin/jobs/%d/cancel" % job, None)
        h.check_eq(r.status, 200, "cancel through the other manager: %r"
                   % r)
        h.wait_until(lambda: other.grep("left mid-chunk by a manager"),
                     40, 0.2, "the abandoned job's repair")
        line = other.grep("left mid-chunk by a manager")[-1]
        dropped = int(line.split("tombstones_dropped=")[1].split()[0])
        h.check(dropped > 0, "no task of the job's window: %s" % line)
        st = statuses("cd")
        cancelled = {i for i, v in st.items() if v[0] == "cancelled"}
        rest = [i for i in st if i not in cancelled]
        h.check(0 < len(cancelled) < n, "stopped mid-way: %d cancelled"
                % len(cancelled))

        def all_fired():
            return all(published(i) for i in rest)
        h.wait_until(all_fired, max(30, (due - h.now_ms()) / 1000 + 40),
                     0.5, "the %d tasks not cancelled fired" % len(rest))
        time.sleep(2)
        fired = [i for i in cancelled if published(i)]
        h.check(not fired, "cancelled tasks published: %s" % fired[:5])
        h.log("FIGURES runner killed, job cancelled through the other "
              "manager: %d cancelled, %d tasks of the window given back, "
              "the other %d fired" % (len(cancelled), dropped, len(rest)))
        h.check(api2.get("/v1/admin/jobs/%d" % job).json["owner"] is None
                if other is m2 else
                API.get("/v1/admin/jobs/%d" % job).json["owner"] is None,
                "the job's owner cleared")
    finally:
        api2.close()
        if victim is C.manager:
            C.start_manager()
        m2.stop()


def test_max_jobs_bounds_the_queue():
    C.extra_conf["task.bulk_max_jobs"] = 2
    C.write_conf()
    reloads = len(C.manager.grep("access reloaded"))
    C.manager.signal(signal.SIGHUP)
    h.wait_until(lambda: len(C.manager.grep("access reloaded")) > reloads,
                 10, 0.1, "the manager's reload")
    try:
        far = h.now_ms() + 7 * 3600 * 1000
        submit_batch(tasks("cap", 4000, far, spread=4000))
        jobs = [bulk({"action": "shift", "filter": {"id_prefix": "cap-"},
                      "by_ms": 1000})["job"] for _ in range(2)]
        r = API.post("/v1/tasks/bulk", {"action": "cancel",
                                        "filter": {"id_prefix": "cap-"}})
        h.check_eq((r.status, r.json["error"]["code"]),
                   (429, "too_many_jobs"), "a third job: %r" % r)
        h.check("task.bulk_max_jobs" in r.json["error"]["message"],
                "names the key: %r" % r)
        # a dry run is no job: answered
        h.check_eq(bulk({"action": "cancel", "dry_run": True,
                         "filter": {"id_prefix": "cap-"}}, 200)["matched"],
                   4000, "dry run at the bound")
        # the second is queued behind the first: cancelled first, so that
        # the runner does not take it up when the first stops
        for job in reversed(jobs):
            r = API.post("/v1/admin/jobs/%d/cancel" % job, None)
            h.check_eq(r.status, 200, "cancel %d: %r" % (job, r))
        j2 = API.get("/v1/admin/jobs/%d" % jobs[1]).json
        h.check_eq((j2["state"], j2["started_at"]), ("cancelled", None),
                   "the queued job never started: %r" % j2)
        again = bulk({"action": "cancel", "filter": {"id_prefix": "cap-"}})
        d = wait_job(again["job"])
        h.check_eq(d["changed"], 4000, "a job after the cancels: %r" % d)
    finally:
        del C.extra_conf["task.bulk_max_jobs"]
        C.write_conf()
        C.manager.signal(signal.SIGHUP)


def cleanup(failed=False):
    if READER:
        READER.stop()
    if C:
        C.close(failed=failed)


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup, lambda: C and C.dump_logs())
