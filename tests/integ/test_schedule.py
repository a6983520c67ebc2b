#!/usr/bin/python3
"""The future-load view against known bookings, on the real dev cluster:
tasks at known due times in the near window (counted in Redis), within
the horizon beyond it and beyond the horizon (counted in the DB), in two
topics, plus cancelled and delivered ones that must not count.
  1. GET /v1/schedule: exact counts per step, with and without a topic,
     a step straddling the Redis/DB boundary, by=topic rows.
  2. The near window really comes from Redis: an entry added to a slot's
     due ZSET shows up there (and not in a topic count, from the DB).
  3. prophet_schedule_booked_next_minute reaches the booked count.
  4. prophetctl schedule prints the histogram.
  5. Every bad parameter gets a 400 naming it.
"""

import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
T0 = None  # a 10 s boundary 50-60 s ahead: steps are counted from it
MIN = 60000
HOUR = 3600000
DAY = 86400000
CTL = os.path.join(h.BUILDDIR, "prophetctl")


def setup():
    global C, T0
    C = h.Cluster(workers=1, name="schedule").open()
    C.start()
    T0 = (h.now_ms() // 10000 + 6) * 10000
    tasks = []

    def book(topic, due, n, tag):
        for i in range(n):
            tasks.append({"id": "s-%s-%s-%d" % (topic, tag, i),
                          "topic": topic, "body": "x", "due_at": due})
    # near window (Redis): A 3 at +1 s, A 2 at +11 s, B 4 at +12 s
    book("A", T0 + 1000, 3, "n1")
    book("A", T0 + 11000, 2, "n2")
    book("B", T0 + 12000, 4, "n3")
    # within the horizon (30 min), beyond the near window (2 min)
    book("A", T0 + 10 * MIN, 5, "h")
    book("B", T0 + 10 * MIN + 500, 1, "h")
    # beyond the horizon: in the DB only
    book("A", T0 + 2 * HOUR + 7, 2, "f")
    book("B", T0 + 3 * DAY, 7, "f")
    book("B", T0 + 1000, 1, "cancelled")
    api = C.api()
    try:
        r = api.post("/v1/tasks/batch", {"tasks": tasks})
        h.check_eq(r.status, 200, "batch")
        h.check_eq({x["code"] for x in r.json["results"]}, {201},
                   "batch results")
        r = api.request("DELETE", "/v1/tasks/s-B-cancelled-0")
        h.check_eq(r.status, 200, "cancel")
        # a delivered task in the range counts neither
        r = api.post("/v1/tasks", {"id": "s-done", "topic": "A",
                                   "body": "d", "delay_ms": 0})
        h.check_eq(r.status, 201, "submit")
    finally:
        api.close()
    h.wait_until(lambda: C.mysql("SELECT status FROM tasks WHERE id = "
                                 "'s-done'")[0][0] == "delivered", 30, 0.2,
                 "s-done delivered")


def get(query):
    api = C.api()
    try:
        return api.get("/v1/schedule?" + query)
    finally:
        api.close()


def counts(query):
    r = get(query)
    h.check_eq(r.status, 200, "GET /v1/schedule?%s: %s" % (query, r.text))
    return r.json


def test_near_window_per_step():
    j = counts("from=%d&to=%d&step=10000" % (T0, T0 + MIN))
    h.check_eq(j["counts"], [3, 6, 0, 0, 0, 0], "counts, all topics")
    h.check_eq(j["total"], 9, "total")
    h.check_eq((j["steps"], j["step"], j["from"], j["to"]),
               (6, 10000, T0, T0 + MIN), "echoed range")
    h.check(j["redis_until"] is not None and j["redis_until"] > T0 + 12000,
            "near window counted in Redis: %r" % j["redis_until"])
    j = counts("from=%d&to=%d&step=10000&topic=A" % (T0, T0 + MIN))
    h.check_eq(j["counts"], [3, 2, 0, 0, 0, 0], "counts, topic A")
    h.check_eq((j["topic"], j["redis_until"]), ("A", None),
               "a topic is counted in the DB")
    j = counts("from=%d&to=%d&step=10000&topic=B" % (T0, T0 + MIN))
    h.check_eq(j["counts"], [0, 4, 0, 0, 0, 0], "counts, topic B")


def test_horizon_and_beyond():
    j = counts("from=%d&to=%d&step=%d" % (T0, T0 + 4 * DAY, HOUR))
    want = [0] * 96
    want[0], want[2], want[72] = 9 + 6, 2, 7
    h.check_eq(j["counts"], want, "hourly counts over 4 days")
    h.check_eq(j["total"], 24, "total")
    # one step across the Redis/DB boundary: both parts add up
    j = counts("from=%d&to=%d&step=%d" % (T0, T0 + 20 * MIN, 20 * MIN))
    h.check_eq(j["counts"], [15], "a step straddling the near window")
    # a last partial step ends at to
    j = counts("from=%d&to=%d&step=%d&topic=A" % (T0, T0 + 2 * HOUR + 8,
                                                  HOUR))
    h.check_eq(j["counts"], [10, 0, 2], "partial last step")
    j = counts("from=%d&to=%d&step=%d&topic=A" % (T0, T0 + 2 * HOUR + 7,
                                                  HOUR))
    h.check_eq(j["counts"], [10, 0, 0], "to is exclusive")
    # the default range: the next 24 h by the hour
    j = counts("")
    h.check_eq(j["steps"], 24, "default steps")
    h.check_eq(j["total"], 17, "default total (the 3-day ones are out)")


def test_by_topic():
    j = counts("from=%d&to=%d&step=%d&by=topic" % (T0, T0 + 4 * DAY, DAY))
    rows = {t["topic"]: (t["total"], t["counts"]) for t in j["topics"]}
    h.check_eq(rows, {"A": (12, [12, 0, 0, 0]), "B": (12, [5, 0, 0, 7])},
               "per topic")
    h.check_eq((j["counts"], j["truncated"]), ([17, 0, 0, 7], False),
               "all topics")


def test_near_window_is_read_from_redis():
    """An entry only Redis has (a fake id in slot 0's due ZSET) is counted
    in the near window and not by the DB (topic counts)."""
    r = C.redis()
    try:
        r.cmd("ZADD", "{prophet:0}:due", str(T0 + 5000), "s-fake")
        j = counts("from=%d&to=%d&step=10000" % (T0, T0 + MIN))
        r.cmd("ZREM", "{prophet:0}:due", "s-fake")
    finally:
        r.close()
    h.check_eq(j["counts"][0], 4, "the Redis-only entry counted")
    j = counts("from=%d&to=%d&step=10000" % (T0, T0 + MIN))
    h.check_eq(j["counts"], [3, 6, 0, 0, 0, 0], "and gone again")


def test_lost_index_falls_back_to_db():
    """A slot whose index is lost (no built marker) sends the near window
    to the DB: the counts stay exact."""
    r = C.redis()
    try:
        # the slot's owner notices and rebuilds it from the DB
        r.cmd("DEL", "{prophet:3}:built")
        j = counts("from=%d&to=%d&step=10000" % (T0, T0 + MIN))
    finally:
        r.close()
    h.check_eq(j["counts"], [3, 6, 0, 0, 0, 0], "counts with a lost slot")
    h.log("redis_until with slot 3 lost: %r" % j["redis_until"])


def test_prophetctl_schedule():
    p = subprocess.run([CTL, "--url", "http://" + C.manager_addr,
                        "schedule", "--from", str(T0), "--to",
                        str(T0 + MIN), "--step", "10s", "--topic", "B"],
                       capture_output=True, text=True, timeout=30)
    h.check_eq(p.returncode, 0, "prophetctl schedule: %s" % p.stderr)
    lines = p.stdout.splitlines()
    h.check("topic B" in lines[0] and "total 4" in lines[0],
            "header line: %r" % lines[0])
    h.check_eq([int(x.split()[2]) for x in lines[1:]], [0, 4, 0, 0, 0, 0],
               "histogram counts")
    h.check(lines[2].endswith("#" * 50), "full bar: %r" % lines[2])
    p = subprocess.run([CTL, "--url", "http://" + C.manager_addr,
                        "schedule", "--step", "10ms"],
                       capture_output=True, text=True, timeout=30)
    h.check(p.returncode != 0 and "step" in p.stderr,
            "a bad step refused: %r %r" % (p.returncode, p.stderr))


BAD = [
    ("step=999", "step"),
    ("step=abc", "step"),
    ("from=-5", "from"),
    ("from=12x", "from"),
    ("to=abc", "to"),
    ("from=2000000&to=2000000", "to"),
    ("from=2000000&to=1000000", "to"),
    ("from=0&to=%d&step=%d" % (401 * DAY, DAY), "to"),
    ("from=0&to=10001000&step=1000", "step"),
    ("from=0&to=1001000&step=1000&by=topic", "step"),
    ("topic=a%20b", "topic"),
    ("by=slot", "by"),
    ("by=topic&topic=A", "by"),
]


def test_bad_parameters_400():
    for q, field in BAD:
        r = get(q)
        h.check_eq((r.status, (r.json or {}).get("error", {}).get("field")),
                   (400, field), "GET /v1/schedule?%s: %s" % (q, r.text))
    r = get("frm=1")
    h.check_eq((r.status, (r.json or {}).get("error", {}).get("field")),
               (400, "frm"), "unknown parameter: %s" % r.text)
    # A step that is no integer is not "less than 1000" (as it was told).
    for q, why in (("step=1e5", "integer"), ("step=99999999999999999999",
                                              "integer"),
                   ("step=999", "at least 1000")):
        r = get(q)
        h.check(r.status == 400 and why in r.json["error"]["message"],
                "GET /v1/schedule?%s: %s" % (q, r.text))
    # the largest allowed request is answered
    j = counts("from=%d&to=%d&step=1000" % (T0 + MIN,
                                             T0 + MIN + 10000 * 1000))
    h.check_eq((j["steps"], j["total"]), (10000, 8), "10,000 steps")


BULK = 20000


def test_queries_use_indexes():
    """20,000 scheduled rows 300 days ahead (beyond every other range of
    this file): each query the manager sends reads an index range only
    (EXPLAIN), and the answer counts them all (timed)."""
    base = T0 + 300 * DAY
    C.mysql("INSERT INTO tasks (id, slot, topic, body, due_at, status, "
            "content_hash, batch_id, created_at, updated_at) "
            "SELECT CONCAT('bulk-', seq), seq %% 16, "
            "IF(seq %% 2, 'bulk', 'bulk2'), 'x', %d + seq * 1000, "
            "'scheduled', 0, 0, 0, 0 FROM seq_1_to_%d" % (base, BULK))
    C.mysql("ANALYZE TABLE tasks")
    # half of them: a range over nearly all of an index may be planned as
    # a full scan of that index (still index only)
    rng = "due_at >= %d AND due_at < %d" % (base, base + BULK * 500)
    slots = ",".join(str(i) for i in range(16))
    plans = {
        "slots": ("SELECT FLOOR((due_at - %d) / 60000), COUNT(*) FROM tasks "
                  "FORCE INDEX (due_by_slot) WHERE slot IN (%s) AND status "
                  "= 'scheduled' AND %s GROUP BY 1 ORDER BY NULL" % (base, slots, rng),
                  "due_by_slot", "Using index"),
        "topic": ("SELECT FLOOR((due_at - %d) / 60000), COUNT(*) FROM tasks "
                  "FORCE INDEX (by_topic) WHERE topic = 'bulk' AND status = "
                  "'scheduled' AND %s GROUP BY 1 ORDER BY NULL" % (base, rng),
                  "by_topic", "Using index"),
        "topics": ("SELECT topic, MIN(due_at) FROM tasks FORCE INDEX "
                   "(by_topic) WHERE status = 'scheduled' AND %s GROUP BY "
                   "topic ORDER BY topic LIMIT 51" % rng,
                   "by_topic", "Using index for group-by"),
    }
    for name, (sql, key, extra) in plans.items():
        row = C.mysql("EXPLAIN " + sql)[0]
        # id select_type table type possible_keys key key_len ref rows Extra
        h.log("EXPLAIN %s: type=%s key=%s rows=%s extra=%s"
              % (name, row[3], row[5], row[8], row[9]))
        h.check_eq((row[3], row[5]), ("range", key), "plan of %s" % name)
        h.check(extra in (row[9] or ""), "%s: %r" % (name, row[9]))
    t = h.now_ms()
    j = counts("from=%d&to=%d&step=60000" % (base, base + DAY))
    h.log("all topics, %d rows over 1,440 steps: %d ms"
          % (BULK, h.now_ms() - t))
    h.check_eq(j["total"], BULK, "bulk total")
    h.check_eq(j["counts"][:3], [59, 60, 60], "first minutes")
    t = h.now_ms()
    j = counts("from=%d&to=%d&step=60000&topic=bulk" % (base, base + DAY))
    h.log("one topic, %d rows: %d ms" % (BULK // 2, h.now_ms() - t))
    h.check_eq(j["total"], BULK // 2, "bulk topic total")
    j = counts("from=%d&to=%d&step=%d&by=topic" % (base, base + DAY, HOUR))
    h.check_eq([(x["topic"], x["total"]) for x in j["topics"]],
               [("bulk", BULK // 2), ("bulk2", BULK // 2)], "by topic")
    C.mysql("DELETE FROM tasks WHERE id LIKE 'bulk-%'")



def test_next_minute_gauge():
    """Once T0 + 12 s is less than a minute ahead (and before T0 + 1 s):
    A 5 and B 4; sampled every 5 s."""
    want = 9
    h.check(h.now_ms() < T0 - 5000, "too late for the gauge test")
    h.wait_until(lambda: h.metrics(C.manager_addr).get(
        "prophet_schedule_booked_next_minute") == want,
        (T0 - h.now_ms()) / 1000.0, 0.5,
        "prophet_schedule_booked_next_minute == %d (is %r)"
        % (want, h.metrics(C.manager_addr).get(
            "prophet_schedule_booked_next_minute")))


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
