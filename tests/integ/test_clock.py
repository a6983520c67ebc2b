#!/usr/bin/python3
"""Never early, whatever a daemon's clock does (issue 20).

Workers and managers judge time against a cluster reference, Redis TIME
(common/refclock.h): a worker fires by the earlier of its wall clock and
the reference, a manager computes delay_ms from the later of the two. The
daemons here run under libfaketime (FAKETIME_TIMESTAMP_FILE, re-read every
second; the monotonic clock is left real, as an NTP step leaves it):

  - a worker whose clock jumps 60 s forwards while tasks wait in its
    wheel (and some are due within the jump): nothing fires before its
    due time (by this test's clock), prophet_clock_offset_seconds says
    -60, prophet_clock_skewed 1, the log warns; then back in step;
  - (a worker behind is covered by tests/unit/test_refclock.c: under
    libfaketime its producer's first waits stretch and the case was not
    reliable here);
  - a manager 20 s behind: a delay_ms submission's due time is taken from
    the reference, not 20 s short.

A worker started with its clock already ahead is not run here: under
libfaketime its Kafka producer and ZooKeeper client wait out the offset
on their first timed waits (the library shifts the process's wall clock,
not the kernel's), which a real clock step does not do.
"""

import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
TOPIC = "clock"
C = None
READER = None
SEQ = [0]


def faketime_env(path):
    asan = os.environ.get("ASAN_OPTIONS", "")
    return {"LD_PRELOAD": FAKETIME_LIB,
            "FAKETIME_TIMESTAMP_FILE": path,
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            # libfaketime ahead of the sanitizer runtime in the link order
            "ASAN_OPTIONS": (asan + ":" if asan else "") +
            "verify_asan_link_order=0"}


def set_clock(path, offset_s):
    with open(path + ".new", "w") as f:
        f.write("%+d\n" % offset_s)
    os.replace(path + ".new", path)


def setup():
    global C, READER
    if not os.path.exists(FAKETIME_LIB):
        raise h.TestFailure("%s is missing (scripts/deps installs "
                            "libfaketime)" % FAKETIME_LIB)
    C = h.Cluster(workers=0, name="clock").open()
    # The topic exists before any worker publishes: under libfaketime a
    # producer's metadata retries for a new topic wait out the offset.
    h.create_topics(C.brokers, [C.topic(TOPIC)])
    C.start_manager()
    READER = C.reader([TOPIC])


def worker(offset_s):
    """A worker under libfaketime at offset_s, started; (proc, clock file)."""
    w = C.add_worker()
    path = os.path.join(C.dir, "%s.faketime" % w.wid)
    set_clock(path, offset_s)
    w.env = faketime_env(path)
    C.start_worker(w)
    return w, path


def submit(n, lead_lo_ms, lead_hi_ms):
    """n tasks due lead_lo..lead_hi ms from now (this test's clock); their
    {id: due_at}."""
    api = h.Api(C.manager_addr)
    due = {}
    try:
        now = h.now_ms()
        tasks = []
        for i in range(n):
            SEQ[0] += 1
            tid = "clk-%06d" % SEQ[0]
            d = now + lead_lo_ms + (lead_hi_ms - lead_lo_ms) * i // max(1, n - 1)
            tasks.append({"id": tid, "topic": TOPIC, "body": "b",
                          "due_at": d})
            due[tid] = d
        r = api.post("/v1/tasks/batch", {"tasks": tasks})
        h.check_eq(r.status, 200, "batch submit")
    finally:
        api.close()
    return due


def received(due, timeout):
    """Waits for every id; [(id, recv - due, fired_at header - due)]."""
    missing = READER.wait_for(due.keys(), timeout)
    h.check(not missing, "never published: %d, e.g. %s"
            % (len(missing), sorted(missing)[:3]))
    out = []
    for tid, d in due.items():
        m = READER.by_id[tid][0]
        out.append((tid, m.recv_ms - d,
                    int(m.hdr["prophet-fired-at"]) - d))
    return out


def check_not_early(got, what):
    early = [(t, r) for t, r, _ in got if r < 0]
    early_hdr = [(t, f) for t, _, f in got if f < 0]
    lat = sorted(r for _, r, _ in got)
    h.log("%s: %d tasks, received after due p50 %d ms, p99 %d ms, max %d "
          "ms, min %d ms" % (what, len(got), h.percentile(lat, 50),
                             h.percentile(lat, 99), lat[-1], lat[0]))
    h.check(not early, "%s: %d received before due, e.g. %s"
            % (what, len(early), early[:3]))
    h.check(not early_hdr, "%s: %d with prophet-fired-at before due, e.g. "
            "%s" % (what, len(early_hdr), early_hdr[:3]))
    return lat


def offset_metric(addr, want_s, within_s=1.0, timeout=10):
    last = [None]

    def close_enough():
        m = h.metrics(addr)
        last[0] = (m.get("prophet_clock_offset_seconds"),
                   m.get("prophet_clock_skewed"))
        return (last[0][0] is not None and
                abs(last[0][0] - want_s) <= within_s)
    h.wait_until(close_enough, timeout, 0.2,
                 "prophet_clock_offset_seconds near %s (last: %r)"
                 % (want_s, last))
    return last[0]


def test_worker_jumps_forward_and_back():
    """Tasks in the wheel when the worker's clock jumps 60 s forwards:
    still on time (the reference is carried by the monotonic clock, not
    the next sample); then back to true time."""
    w, path = worker(0)
    try:
        offset_metric(w.addr, 0.0)
        due = submit(300, 3000, 12000)
        time.sleep(1.0)
        set_clock(path, 60)
        off, skewed = offset_metric(w.addr, -60.0)
        h.check_eq(skewed, 1.0, "prophet_clock_skewed after the jump")
        h.check(w.grep("clock off the reference"), "no warning logged")
        lat = check_not_early(received(due, 60), "jumped 60 s forwards")
        h.check(lat[len(lat) // 2] < 1000,
                "jumped forwards: p50 %d ms" % lat[len(lat) // 2])
        set_clock(path, 0)
        off, skewed = offset_metric(w.addr, 0.0)
        h.check_eq(skewed, 0.0, "prophet_clock_skewed back in step")
        check_not_early(received(submit(100, 1000, 3000), 30), "back")
    finally:
        w.stop()
        C.workers.remove(w)


def test_manager_behind_delay_ms():
    """A manager 20 s behind: delay_ms from the reference (the later
    clock), so the stored due time is now + delay by this test's clock."""
    port = h.free_port()
    path = os.path.join(C.dir, "manager2.faketime")
    set_clock(path, -20)
    p = h.Proc("manager2", [h.MANAGER_BIN, "-c", C.conf_path, "--set",
                            "http.listen=127.0.0.1:%d" % port],
               os.path.join(C.dir, "manager2.log"))
    p.env = faketime_env(path)
    p.addr = "127.0.0.1:%d" % port
    C.workers.append(p)
    p.start()
    C._wait_http(p, p.addr, "/readyz", 60)
    try:
        offset_metric(p.addr, 20.0)
        api = h.Api(p.addr)
        try:
            t0 = h.now_ms()
            r = api.post("/v1/tasks", {"id": "clk-delay", "topic": TOPIC,
                                       "body": "d", "delay_ms": 3000})
            t1 = h.now_ms()
            h.check(r.status in (200, 201), "delay submit: %r" % r)
        finally:
            api.close()
        due = int(C.mysql("SELECT due_at FROM tasks WHERE id = "
                          "'clk-delay'")[0][0])
        h.log("manager 20 s behind: delay_ms 3000 stored due at now%+d ms"
              % (due - t0))
        h.check(t0 + 3000 - 50 <= due <= t1 + 3000 + 50,
                "due_at %d not within [%d, %d]" % (due, t0 + 3000, t1 + 3000))
    finally:
        p.stop()
        C.workers.remove(p)


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
