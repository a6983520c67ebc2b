#!/usr/bin/python3
"""Buckets: tasks due later than task.bucket_near_ms wait in Redis in
append-only per-slot buckets of task.bucket_ms of due time, and the slot's
owner moves each bucket into the due set before it starts. Run on a real
cluster with small buckets (1 s wide, moved 3 s ahead) so that tasks due
in 5-12 s go through them: they sit in the buckets (not in the due set),
fire on time, once, never early; cancelled and rescheduled ones leave
stale copies in the buckets that the move drops; a rebuild deletes the
buckets and indexes from the DB again; a worker killed with its buckets
still waiting hands them to the next owner; a recurring series
every 5 s puts each next occurrence in a bucket."""

import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

TOPIC = "jobs"
CONF = {"task.bucket_ms": 1000, "task.bucket_near_ms": 3000,
        "task.horizon_ms": 20000}


def open_cluster(name, workers=1, conf=None):
    cf = dict(CONF)
    cf.update(conf or {})
    c = h.Cluster(workers=workers, name=name, conf=cf).open()
    c.start()
    h.create_topics(c.brokers, [c.topic(TOPIC)])
    rd = c.reader([TOPIC])
    return c, c.api(), rd


def slot_keys(c, r):
    """{slot: (bucket starts, ids in buckets, due ids, moved entries)}."""
    out = {}
    for n in range(c.slots):
        starts = [m.decode() for m in r.cmd(
            "ZRANGE", "{prophet:%d}:bk" % n, 0, -1) or []]
        ids = []
        for s in starts:
            for el in r.cmd("LRANGE", "{prophet:%d}:b:%s" % (n, s), 0,
                            -1) or []:
                due, tid, _ = el.decode().split(" ", 2)
                ids.append((tid, int(due), int(s)))
        due = [m.decode() for m in r.cmd(
            "ZRANGE", "{prophet:%d}:due" % n, 0, -1) or []]
        moved = r.cmd("HGETALL", "{prophet:%d}:moved" % n) or []
        out[n] = (starts, ids, due, moved)
    return out


def bucketed(c):
    """ids in buckets -> [(due, bucket start)], and ids in due sets."""
    r = c.redis()
    try:
        keys = slot_keys(c, r)
    finally:
        r.close()
    ids, due = {}, set()
    for starts, bids, dids, _ in keys.values():
        for tid, d, s in bids:
            ids.setdefault(tid, []).append((d, s))
        due.update(dids)
    return ids, due


def leftovers(c):
    """Bucket keys, bk entries and moved entries left in the test's db."""
    r = c.redis()
    try:
        keys = [k.decode() for k in r.cmd("KEYS", "{prophet:*}:b:*") or []]
        bk = sum(r.cmd("ZCARD", "{prophet:%d}:bk" % n) for n in
                 range(c.slots))
        moved = sum(r.cmd("HLEN", "{prophet:%d}:moved" % n) for n in
                    range(c.slots))
    finally:
        r.close()
    return keys, bk, moved


def spread(prefix, n, start, span, step, body=None):
    """n tasks <prefix>-NNN due at start + (i * step) % span: ({id: due},
    the task objects); the body is body, or names the task."""
    due, batch = {}, []
    for i in range(n):
        tid = "%s-%03d" % (prefix, i)
        d = start + (i * step) % span
        due[tid] = d
        batch.append({"id": tid, "topic": TOPIC, "due_at": d,
                      "body": body or "body of %s" % tid})
    return due, batch


def post_batches(api, tasks, size):
    """Submits tasks through /v1/tasks/batch, size at a time."""
    for i in range(0, len(tasks), size):
        r = api.post("/v1/tasks/batch", {"tasks": tasks[i:i + size]})
        h.check_eq(r.status, 200, "batch status")


def worker_sum(c, name):
    return sum(h.metrics(w.addr).get(name, 0.0) for w in c.workers
               if w.running())


def check_fired(p, rd, due, must_not=(), settle=2.0, timeout=30):
    """Every id of due fired once at or after its due time (fired-at
    header and Kafka timestamp), late by little; none of must_not fired.
    Returns the fired-at lateness list."""
    missing = rd.wait_for(list(due), timeout=timeout, settle=settle)
    p.check(not missing, "%d task(s) never fired: %s" % (len(missing),
                                                         missing[:5]))
    late = []
    with rd.cond:
        for tid, d in due.items():
            ms = rd.by_id.get(tid, [])
            if not ms:
                continue
            p.check(len(ms) == 1, "%s published %d times" % (tid, len(ms)))
            fired = int(ms[0].hdr.get("prophet-fired-at", "0"))
            p.check(fired >= d and ms[0].ts >= d,
                    "%s published early: fired-at %d, due %d"
                    % (tid, fired, d))
            p.check(int(ms[0].hdr.get("prophet-due-at", "0")) == d,
                    "%s carries prophet-due-at %s, want %d"
                    % (tid, ms[0].hdr.get("prophet-due-at"), d))
            late.append(fired - d)
        for tid in must_not:
            p.check(tid not in rd.by_id, "%s was published" % tid)
    if late:
        p.check(h.percentile(late, 99) < 1000,
                "bucketed tasks fired late: fired-at - due p99 %d ms"
                % h.percentile(late, 99))
    return late


def test_far_tasks_wait_in_buckets():
    """Tasks due in 5-12 s are appended to their 1-second buckets (not to
    the due set), those due within 3 s go to the due set; all fire on
    time, once; the buckets, bk and moved are empty afterwards."""
    c, api, rd = open_cluster("bk-far")
    failed = True
    try:
        now = h.now_ms()
        due, batch = spread("bf", 300, now + 5000, 7000, 7919)
        post_batches(api, batch, 100)
        singles = {}
        for i in range(20):
            tid = "bs-%02d" % i
            d = now + 6000 + i * 250
            r = api.post("/v1/tasks", {"id": tid, "topic": TOPIC,
                                       "body": "b", "due_at": d})
            h.check_eq(r.status, 201, "single submission")
            singles[tid] = d
        near = {}
        for i in range(20):
            tid = "bn-%02d" % i
            d = h.now_ms() + 1500 + i * 50
            r = api.post("/v1/tasks", {"id": tid, "topic": TOPIC,
                                       "body": "b", "due_at": d})
            h.check_eq(r.status, 201, "near submission")
            near[tid] = d
        ids, in_due = bucketed(c)
        p = h.Problems()
        want = dict(due)
        want.update(singles)
        t_read = h.now_ms()
        waiting = [t for t in want if want[t] - (want[t] % 1000) >
                   t_read + 3000 + 500]
        h.log("in buckets: %d of %d far tasks (%d could have moved by the "
              "read); near in the due set: %d of %d" % (
                  len(set(want) & set(ids)), len(want), len(want) -
                  len(waiting), len(set(near) & in_due), len(near)))
        p.check(set(waiting) <= set(ids), "%d far task(s) not in a bucket, "
                "e.g. %s" % (len(set(waiting) - set(ids)),
                             sorted(set(waiting) - set(ids))[:5]))
        p.check(not (set(waiting) & in_due), "far tasks in the due set: %s"
                % sorted(set(waiting) & in_due)[:5])
        p.check(not (set(near) & set(ids)), "near tasks in a bucket: %s"
                % sorted(set(near) & set(ids))[:5])
        for tid, copies in ids.items():
            for d, s in copies:
                p.check(d == want.get(tid, near.get(tid)) and
                        s == d - d % 1000 and s <= d < s + 1000,
                        "%s in bucket %d with due %d (submitted %s)"
                        % (tid, s, d, want.get(tid)))
        want.update(near)
        late = check_fired(p, rd, want)
        h.log("fired-at - due: p50 %d p99 %d max %d ms over %d tasks" % (
            h.percentile(late, 50), h.percentile(late, 99), max(late),
            len(late)))
        moved = worker_sum(c, "prophet_bucket_moved_total")
        p.check(moved >= len(waiting), "prophet_bucket_moved_total %s < %d"
                % (moved, len(waiting)))
        keys, bk, mv = leftovers(c)
        p.check(not keys and bk == 0 and mv == 0, "left in Redis: bucket "
                "keys %s, bk entries %d, moved entries %d" % (keys[:5], bk,
                                                               mv))
        p.raise_if_any("far tasks through buckets")
        failed = False
    finally:
        c.close(failed=failed)


def test_bucket_larger_than_one_move():
    """A slot whose buckets hold more than one move call takes
    (BUCKET_MOVE_BATCH, 2,000 tasks) is moved in several calls. The reply
    of the first one used to read its freed call to find the slot of the
    next: the worker died of SIGSEGV (glibc's free writes into it), and
    so did every next owner of the slot. Here 2 slots and 5,000 tasks due
    in one second: the worker lives, all fire once, none early."""
    c = h.Cluster(workers=1, name="bk-big", conf=CONF, slots=2).open()
    failed = True
    try:
        c.start()
        h.create_topics(c.brokers, [c.topic(TOPIC)])
        rd = c.reader([TOPIC])
        api = c.api()
        now = h.now_ms()
        start = now + 8000 - now % 1000
        due, batch = spread("bb", 5000, start, 900, 7)
        post_batches(api, batch, 1000)
        p = h.Problems()
        check_fired(p, rd, due, timeout=40)
        w = c.workers[0]
        p.check(w.running(), "the worker died while moving the buckets: %s"
                % (w.tail(3),))
        p.check(worker_sum(c, "prophet_bucket_moved_total") >= 4000,
                "prophet_bucket_moved_total %s: the tasks did not go "
                "through the buckets" % worker_sum(
                    c, "prophet_bucket_moved_total"))
        p.raise_if_any("a bucket larger than one move")
        failed = False
    finally:
        c.close(failed=failed)


def test_cancel_and_reschedule_in_buckets():
    """Cancelled and rescheduled tasks leave their copies in the buckets;
    the move drops the stale ones: a cancelled task never fires, a
    rescheduled one fires once, at its new time (later, earlier, into the
    near window, beyond the horizon and back, twice); no bucket is left
    afterwards."""
    c, api, rd = open_cluster("bk-change")
    failed = True
    try:
        now = h.now_ms()
        base = now + 9000
        plan = {  # id: (first due, new due or None = cancel)
            "bc-cancel": (base, None),
            "bc-later": (base, base + 3000),
            "bc-earlier": (base + 3000, base - 2000),
            "bc-near": (base, h.now_ms() + 2500),
            "bc-twice": (base, base + 2000),
            "bc-far": (base, now + 30000),
            "bc-same-bucket": (base, base + 300),
            "bc-keep": (base + 500, False),
        }
        for tid, (d, _) in plan.items():
            r = api.post("/v1/tasks", {"id": tid, "topic": TOPIC,
                                       "body": "b", "due_at": d})
            h.check_eq(r.status, 201, "submit %s" % tid)
        ids, _ = bucketed(c)
        p = h.Problems()
        p.check(set(plan) <= set(ids), "not in buckets: %s"
                % sorted(set(plan) - set(ids)))
        final = {}
        for tid, (d, new) in plan.items():
            if new is None:
                r = api.request("DELETE", "/v1/tasks/" + tid)
                h.check_eq(r.status, 200, "cancel %s" % tid)
            elif new is not False:
                if tid == "bc-near":
                    new = h.now_ms() + 2500
                r = api.request("PATCH", "/v1/tasks/" + tid,
                                {"due_at": new})
                h.check_eq(r.status, 200, "reschedule %s: %r" % (tid, r))
                final[tid] = new
            else:
                final[tid] = d
        # Moved back and forth: its last copy is the one due latest.
        r = api.request("PATCH", "/v1/tasks/bc-twice", {"due_at": base + 1000})
        h.check_eq(r.status, 200, "second reschedule of bc-twice")
        final["bc-twice"] = base + 1000
        r = c.redis()
        try:
            moved = {}
            for n in range(c.slots):
                kv = r.cmd("HGETALL", "{prophet:%d}:moved" % n) or []
                for i in range(0, len(kv), 2):
                    moved[kv[i].decode()] = kv[i + 1].decode()
        finally:
            r.close()
        h.log("moved entries after the changes: %s" % moved)
        p.check(moved.get("bc-later") == "%d %d" % (base + 3000, base + 3000),
                "moved entry of bc-later: %r" % moved.get("bc-later"))
        p.check(moved.get("bc-earlier") == "%d %d" % (base - 2000,
                                                      base + 3000),
                "moved entry of bc-earlier: %r" % moved.get("bc-earlier"))
        p.check(moved.get("bc-twice") == "%d %d" % (base + 1000, base + 2000),
                "moved entry of bc-twice: %r" % moved.get("bc-twice"))
        check_fired(p, rd, {t: d for t, d in final.items()
                            if t != "bc-far"},
                    must_not=["bc-cancel"], settle=3.0)
        # bc-far went beyond the horizon (DB only); the loader brings it
        # back into a bucket and it fires at its new time.
        check_fired(p, rd, {"bc-far": final["bc-far"]}, timeout=40,
                    settle=1.0)
        dropped = worker_sum(c, "prophet_bucket_dropped_total")
        p.check(dropped >= 5, "prophet_bucket_dropped_total %s: the stale "
                "copies (cancel, later, earlier, near, twice x2, far, same "
                "bucket) were not all dropped" % dropped)
        keys, bk, mv = leftovers(c)
        # Moved entries stay until trimmed, an hour after their last due.
        p.check(not keys and bk == 0 and mv == len(moved), "left in Redis: "
                "bucket keys %s, bk entries %d, moved entries %d (want %d)"
                % (keys[:5], bk, mv, len(moved)))
        p.raise_if_any("cancel and reschedule through buckets")
        failed = False
    finally:
        c.close(failed=failed)


def test_recurring_series_through_buckets():
    """A series every 5 s: each next occurrence (5 s after the one being
    published, so beyond the 3 s near window) is appended to its bucket
    by the worker that records the current one (SCRIPT_CRON_NEXT), moved
    into the due set by the slot's owner, and fires on time, once; after
    DELETE the copy waiting in a bucket is dropped and nothing fires."""
    c, api, rd = open_cluster("bk-cron")
    failed = True
    try:
        r = api.post("/v1/tasks", {"id": "br-series", "topic": TOPIC,
                                   "body": "b", "cron": "*/5 * * * * *"})
        h.check_eq(r.status, 201, "recurring submission")
        p = h.Problems()

        def occ():
            with rd.cond:
                ms = list(rd.by_id.get("br-series", []))
            return [(int(m.hdr["prophet-occurrence"]), m) for m in ms]

        h.wait_until(lambda: len(occ()) >= 1, 15, what="first occurrence")
        first = occ()[0][0]
        seen = {}

        def in_bucket(k):
            ids, _ = bucketed(c)
            for d, s in ids.get("br-series", []):
                seen[d] = s
            return first + 5000 * k in seen

        h.wait_until(lambda: in_bucket(1), 4, what="the second occurrence "
                     "in a bucket")
        h.wait_until(lambda: len(occ()) >= 3, 20, what="three occurrences")
        h.wait_until(lambda: in_bucket(3), 4, what="the fourth occurrence "
                     "in a bucket")
        r = api.request("DELETE", "/v1/tasks/br-series")
        h.check_eq(r.status, 200, "DELETE of the series")
        n_after = len(occ())
        waiting = leftovers(c)[0]
        in_flight = r.json.get("occurrence_in_flight")
        h.log("occurrences %s; bucketed copies (due: bucket) %s; "
              "in flight at DELETE: %s" % ([o - first for o, _ in occ()],
                                           seen, in_flight))
        got = occ()
        occs = [o for o, _ in got]
        p.check(len(set(occs)) == len(occs), "an occurrence published "
                "twice: %s" % occs)
        p.check(occs == [first + 5000 * i for i in range(len(occs))],
                "occurrences are not every 5 s from %d: %s" % (first,
                                                                occs))
        for o, m in got:
            fired = int(m.hdr.get("prophet-fired-at", "0"))
            p.check(o <= fired < o + 1000 and m.ts >= o, "occurrence %d "
                    "fired at %d (Kafka timestamp %d)" % (o, fired, m.ts))
        p.check(seen.get(first + 5000) == first + 5000, "the second "
                "occurrence waited in bucket %s, want %d"
                % (seen.get(first + 5000), first + 5000))
        p.check(worker_sum(c, "prophet_bucket_moved_total") >= 2,
                "prophet_bucket_moved_total %s < 2"
                % worker_sum(c, "prophet_bucket_moved_total"))
        # The next occurrence's copy sits in a bucket until the move
        # drops it (cancelled); then nothing of the series is left.
        h.wait_until(lambda: not leftovers(c)[0], 10,
                     what="the cancelled series' bucket dropped")
        time.sleep(1.0)
        extra = len(occ()) - n_after
        p.check(extra <= (1 if in_flight else 0), "%d occurrence(s) after "
                "DELETE (in flight: %s)" % (extra, in_flight))
        # Moved before the DELETE landed (a slow machine), the copy left
        # the due set with the cancel instead.
        p.check(not waiting or
                worker_sum(c, "prophet_bucket_dropped_total") >= 1,
                "prophet_bucket_dropped_total %s: the cancelled copy was "
                "not dropped" % worker_sum(c, "prophet_bucket_dropped_total"))
        p.raise_if_any("recurring series through buckets")
        failed = False
    finally:
        c.close(failed=failed)


def test_rebuild_and_failover_with_buckets():
    """Two workers; tasks wait in buckets. The index markers are deleted
    (Redis lost the slots): each owner rebuilds, deleting the buckets and
    indexing from the DB again. Then the worker owning slot 0 is killed
    while buckets wait: its successor moves them. Every task fires once,
    on time or (for the dead worker's) after the takeover."""
    c, api, rd = open_cluster("bk-fail", workers=2,
                              conf={"zookeeper.session_timeout_ms": 4000})
    failed = True
    try:
        due, batch = spread("bx", 400, h.now_ms() + 7000, 12000, 104729,
                            body="b")
        post_batches(api, batch, 200)
        before, _ = bucketed(c)
        rebuilds = worker_sum(c, "prophet_redis_rebuilds_total")
        r = c.redis()
        try:
            for n in range(c.slots):
                r.cmd("DEL", "{prophet:%d}:built" % n)
        finally:
            r.close()
        h.wait_until(lambda: worker_sum(c, "prophet_redis_rebuilds_total")
                     >= rebuilds + c.slots, 30, what="every slot rebuilt")
        after, _ = bucketed(c)
        p = h.Problems()
        dup = [t for t, cp in after.items() if len(cp) > 1]
        h.log("in buckets: %d before the rebuild, %d after; %d with more "
              "than one copy" % (len(before), len(after), len(dup)))
        p.check(not dup, "copies left by the reset: %s" % dup[:5])
        p.check(len(after) >= len(before) // 2, "the rebuild indexed only "
                "%d into buckets (%d before)" % (len(after), len(before)))
        t_kill = h.now_ms()
        c.workers[1].kill()
        missing = rd.wait_for(list(due), timeout=40, settle=2.0)
        p.check(not missing, "%d task(s) never fired after the kill: %s"
                % (len(missing), missing[:5]))
        late_after = []
        with rd.cond:
            for tid, d in due.items():
                ms = rd.by_id.get(tid, [])
                p.check(len(ms) <= 1 or all(
                    int(m.hdr.get("prophet-fired-at", 0)) < t_kill + 10000
                    for m in ms), "%s published %d times" % (tid, len(ms)))
                for m in ms:
                    p.check(int(m.hdr.get("prophet-fired-at", "0")) >= d,
                            "%s published early" % tid)
                if ms and d > t_kill + 8000:
                    late_after.append(
                        int(ms[0].hdr.get("prophet-fired-at")) - d)
        if late_after:
            h.log("due 8 s or more after the kill (%d): fired-at - due p99 "
                  "%d ms" % (len(late_after), h.percentile(late_after, 99)))
            p.check(h.percentile(late_after, 99) < 1000,
                    "tasks due well after the takeover fired late: p99 %d"
                    % h.percentile(late_after, 99))
        keys, bk, mv = leftovers(c)
        p.check(not keys and bk == 0, "left in Redis: bucket keys %s, bk "
                "entries %d" % (keys[:5], bk))
        p.raise_if_any("rebuild and failover with buckets")
        failed = False
    finally:
        c.close(failed=failed)


if __name__ == "__main__":
    h.main(globals())
