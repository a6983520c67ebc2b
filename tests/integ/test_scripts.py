#!/usr/bin/python3
"""The fire path's Redis scripts (proto/lua: claim, attempted, forget,
giveback) run
as the worker runs them, on the dev cluster's Redis, checked key by key:
what is claimed and what is not (not due, no payload, unknown, sent twice,
a stale epoch), the reply's positions, attempts counted once a publish
and twice for an id given twice, and batches past the scripts' chunk of
1,000 ids (Lua's unpack limit), where one call serves many ids."""

import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
R = None
LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                   "proto", "lua")
K = {k: "{prophet:3}:" + k for k in ("due", "task", "inflight", "attempt",
                                      "epoch")}
NOW = 1_800_000_000_000
LEASE = NOW + 30_000


def script(name):
    with open(os.path.join(LUA, name + ".lua")) as f:
        return f.read()


def setup():
    global C, R
    C = h.Cluster(workers=0, name="scripts").open()
    R = C.redis()


def cleanup(failed):
    if R is not None:
        R.close()
    if C is not None:
        C.close(failed=failed)


def reset():
    R.cmd("DEL", *K.values())


def claim(epoch, ids, now=NOW):
    return R.cmd("EVAL", script("claim"), 5, K["due"], K["task"],
                 K["inflight"], K["attempt"], K["epoch"], epoch, now, LEASE,
                 *ids)


def add(tid, due, payload=True, attempts=None):
    R.cmd("ZADD", K["due"], due, tid)
    if payload:
        R.cmd("HSET", K["task"], tid, "payload-" + tid)
    if attempts is not None:
        R.cmd("HSET", K["attempt"], tid, attempts)


def pairs(reply):
    return [(reply[i], reply[i + 1]) for i in range(0, len(reply), 2)]


def test_claim_each_case():
    """Due with a payload: claimed, in flight with the lease, attempt + 1;
    not due yet, due without a payload, unknown, or sent twice: 0 and
    nil at its position, and only the first copy of a twice-sent id is
    claimed."""
    reset()
    add("a", NOW - 5, attempts=2)
    add("b", NOW + 1)
    add("c", NOW, payload=False)
    add("d", NOW - 1)
    got = pairs(claim(7, ["a", "b", "c", "zz", "d", "a"]))
    h.check_eq(got, [(3, b"payload-a"), (0, None), (0, None), (0, None),
                     (1, b"payload-d"), (0, None)], "claim reply")
    h.check_eq(R.cmd("ZRANGE", K["due"], 0, -1), [b"b"],
               "left due: only the one not due yet")
    h.check_eq(R.cmd("ZRANGE", K["inflight"], 0, -1, "WITHSCORES"),
               [b"a", str(LEASE).encode(), b"d", str(LEASE).encode()],
               "in flight with the lease")
    h.check_eq(R.cmd("HGET", K["attempt"], "a"), b"2",
               "attempts are counted on publish, not on claim")
    h.check_eq(R.cmd("GET", K["epoch"]), b"7", "epoch recorded")


def test_claim_fenced():
    """A caller below the recorded epoch claims nothing (-1); one above
    raises it."""
    reset()
    add("a", NOW - 5)
    R.cmd("SET", K["epoch"], 9)
    h.check_eq(claim(8, ["a"]), -1, "stale epoch")
    h.check_eq(R.cmd("ZSCORE", K["due"], "a"), str(NOW - 5).encode(),
               "a fenced claim leaves the task due")
    h.check_eq(pairs(claim(10, ["a"])), [(1, b"payload-a")], "newer epoch")
    h.check_eq(R.cmd("GET", K["epoch"]), b"10", "epoch raised")


def test_claim_past_a_chunk():
    """2,500 ids in one call (three chunks), every third not due: each
    answered at its own position."""
    reset()
    ids = ["t%04d" % i for i in range(2500)]
    for i, tid in enumerate(ids):
        add(tid, NOW + (1 if i % 3 == 0 else -1))
    got = pairs(claim(1, ids))
    h.check_eq(len(got), 2500, "reply length")
    bad = [tid for i, tid in enumerate(ids)
           if got[i] != ((0, None) if i % 3 == 0
                         else (1, ("payload-" + tid).encode()))]
    h.check(not bad, "wrong answers for %d ids, first %s" % (len(bad),
                                                             bad[:3]))
    h.check_eq(R.cmd("ZCARD", K["inflight"]), 2500 - 834, "in flight")
    h.check_eq(R.cmd("ZCARD", K["due"]), 834, "still due")


def test_attempted_counts():
    """One more attempt for each id, two for an id given twice, from
    nothing or from a count; past a chunk of 1,000 too."""
    reset()
    R.cmd("HSET", K["attempt"], "x", 4)
    n = R.cmd("EVAL", script("attempted"), 1, K["attempt"], "x", "y", "y")
    h.check_eq(n, 3, "ids counted")
    h.check_eq(R.cmd("HGET", K["attempt"], "x"), b"5", "x from 4")
    h.check_eq(R.cmd("HGET", K["attempt"], "y"), b"2", "y given twice")
    ids = ["t%04d" % i for i in range(2500)]
    R.cmd("EVAL", script("attempted"), 1, K["attempt"], *ids)
    R.cmd("EVAL", script("attempted"), 1, K["attempt"], *ids[:1200])
    counts = R.cmd("HMGET", K["attempt"], *ids)
    want = [b"2" if i < 1200 else b"1" for i in range(2500)]
    h.check(counts == want, "attempt counts past a chunk: %d wrong"
            % sum(1 for a, b in zip(counts, want) if a != b))


def test_forget_past_a_chunk():
    """2,500 delivered ids forgotten in one call: gone from in flight, the
    payloads and the attempts; others left alone."""
    reset()
    ids = ["t%04d" % i for i in range(2500)]
    for tid in ids + ["keep"]:
        R.cmd("ZADD", K["inflight"], LEASE, tid)
        R.cmd("HSET", K["task"], tid, "p")
        R.cmd("HSET", K["attempt"], tid, 1)
    n = R.cmd("EVAL", script("forget"), 3, K["inflight"], K["task"],
              K["attempt"], *ids)
    h.check_eq(n, 2500, "ids forgotten")
    h.check_eq(R.cmd("ZRANGE", K["inflight"], 0, -1), [b"keep"],
               "in flight left")
    h.check_eq(R.cmd("HKEYS", K["task"]), [b"keep"], "payloads left")
    h.check_eq(R.cmd("HKEYS", K["attempt"]), [b"keep"], "attempts left")


def test_giveback_fenced_by_the_lease():
    """A failed publish gives its task back to due at the retry time, only
    while it is in flight under its own claim's lease end: one claimed
    again since (another lease end), one no longer in flight and one never
    claimed stay as they are; the payload stays."""
    reset()
    add("a", NOW - 5)
    add("b", NOW - 5)
    h.check_eq(len(pairs(claim(1, ["a", "b"]))), 2, "claimed")
    R.cmd("ZADD", K["inflight"], LEASE + 7, "b")  # claimed again since
    add("c", NOW + 100)  # still due, never claimed
    retry = NOW + 30_000
    n = R.cmd("EVAL", script("giveback"), 2, K["due"], K["inflight"], retry,
              "a", LEASE, "b", LEASE, "c", LEASE, "gone", LEASE)
    h.check_eq(n, 1, "given back")
    h.check_eq(R.cmd("ZSCORE", K["due"], "a"), str(retry).encode(),
               "a due at the retry time")
    h.check(R.cmd("ZSCORE", K["inflight"], "a") is None, "a still in flight")
    h.check_eq(R.cmd("ZSCORE", K["inflight"], "b"), str(LEASE + 7).encode(),
               "b's newer claim")
    h.check(R.cmd("ZSCORE", K["due"], "b") is None, "b put in due")
    h.check_eq(R.cmd("ZSCORE", K["due"], "c"), str(NOW + 100).encode(),
               "c's due time")
    h.check_eq(R.cmd("HGET", K["task"], "a"), b"payload-a", "a's payload")


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)
