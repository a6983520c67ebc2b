#!/usr/bin/python3
"""Exactly-once publishing (issue 21, kafka.exactly_once) through
test_coord.py's failovers, on real servers.

The cluster, the stream and the ledger of test_coord.py with
kafka.exactly_once on and a read_committed reader (kcat), where every
failover must deliver each task exactly once:

  1. 3 workers, a 4th joins, one leaves with SIGTERM: 0 duplicates.
  2. kill -9 of a non-master, 5 times, a burst due at each kill (claims in
     flight, transactions open): nothing lost, 0 duplicates; the tasks the
     new owners found committed (a marker) and recorded instead of firing
     again are counted (`# failover-eos: ...`).
  3. SIGSTOP past the session timeout, then SIGCONT: 0 duplicates, nothing
     published under the old epoch after the takeover.
  4. The zombie, from the broker's side: Kafka's own TransactionsCommand
     shows the stopped worker's transactional id with a producer epoch
     raised by the new owners (each logged fencing it for its slot)
     before the zombie wakes; the zombie's records are not read
     (read_committed) and its commits are refused (logged).
  5. kill -9 of the master: 0 duplicates.
"""

import os
import re
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
os.environ["PROPHET_COORD_EOS"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import servers  # noqa: E402
import test_coord as tc  # noqa: E402


def txn_id(worker):
    """The transactional id of worker's producer (one per process)."""
    lines = worker.grep('msg="exactly-once publishing"')
    h.check(lines, "%s: no 'exactly-once publishing' line" % worker.wid)
    m = re.search(r"txn_id=(\S+)", lines[-1])
    h.check(m, "no txn_id in %r" % lines[-1])
    return m.group(1)


def marker_part(worker):
    """The marker partition of worker's producer (its log)."""
    lines = worker.grep('msg="exactly-once publishing"')
    h.check(lines, "%s: no 'exactly-once publishing' line" % worker.wid)
    m = re.search(r" partition=(\d+)", lines[-1])
    h.check(m, "no partition in %r" % lines[-1])
    return int(m.group(1))


def txn_state(tid):
    """(producer id, producer epoch, state) of a transactional id, as the
    transaction coordinator says."""
    out = servers.kafka_tool_cli(tc.C.brokers, "TransactionsCommand",
                                 "describe", "--transactional-id", tid)
    lines = [l.split() for l in out.splitlines() if l.strip()]
    head = next((i for i, l in enumerate(lines) if "ProducerEpoch" in l),
                None)
    h.check(head is not None and head + 1 < len(lines),
            "TransactionsCommand describe: %s" % out[-500:])
    cols, row = lines[head], lines[head + 1]
    return (int(row[cols.index("ProducerId")]),
            int(row[cols.index("ProducerEpoch")]),
            row[cols.index("TransactionState")])


def test_zombie_fenced_by_kafka():
    tc.ensure_four()
    all4 = tc.C.workers[:4]
    st = tc.wait_settled(tc.C, all4, what="before the zombie")
    victim = tc.non_master(st)[0]
    vslots = tc.owned_by(st, victim.wid)
    vtid = txn_id(victim)
    before = txn_state(vtid)
    stream = tc.Stream(tc.C, "zombie", rate=300).start()
    time.sleep(1.5)
    stop_ms = h.now_ms()
    victim.signal(signal.SIGSTOP)
    try:
        seen = tc.wait_moved(vslots, victim.wid, stop_ms,
                             tc.SESSION_MS / 1000.0 + 10)
        owners = {s: tc.find_worker(v[0]) for s, v in seen.items()}

        def opened():
            # ready since the stop: a new owner may have held the slot
            # before, and its old "ready" line says nothing of this open
            return all(any("slot=%d " % s in l and
                           (h.log_ts_ms(l) or 0) >= stop_ms for l in
                           owners[s].grep("exactly-once slot ready"))
                       for s in vslots)
        h.wait_until(opened, 20, 0.1, "the new owners' slots ready")
        after = txn_state(vtid)
        # each slot's checkpoint moved to its new owner's marker
        # partition before the slot was ready
        parts = {int(r[0]): int(r[1]) for r in tc.C.mysql(
            "SELECT slot, eos_part FROM slot_state WHERE eos_part IS "
            "NOT NULL")}
        want_parts = {s: marker_part(owners[s]) for s in vslots}
        fenced = {s for s in vslots
                  if any("slot=%d txn_id=%s " % (s, vtid) in l for l in
                         owners[s].grep("the slot's last producer fenced"))}
    finally:
        cont_ms = h.now_ms()
        victim.signal(signal.SIGCONT)
    p = h.Problems()
    pid0, ep0, _ = before
    pid1, ep1, state = after
    p.check((pid1, ep1) > (pid0, ep0), "%s: producer %d epoch %d before, %d "
            "epoch %d after the takeover (want raised: the zombie fenced)"
            % (vtid, pid0, ep0, pid1, ep1))
    p.check(fenced == set(vslots), "slots whose new owner fenced %s: %s, "
            "want all of %s" % (vtid, sorted(fenced), sorted(vslots)))
    p.check(all(parts.get(s) == want_parts[s] for s in vslots),
            "slot_state.eos_part of the moved slots %s, want their new "
            "owners' marker partitions %s"
            % ({s: parts.get(s) for s in vslots}, want_parts))
    print("# zombie: txn_id=%s producer_epoch %d -> %d (producer id %d -> %d)"
          " state=%s slots=%s marker_partition %d -> %s"
          % (vtid, ep0, ep1, pid0, pid1, state, sorted(vslots),
             marker_part(victim), sorted(set(want_parts.values()))),
          flush=True)
    tc.wait_settled(tc.C, all4, timeout=30, what="after SIGCONT")
    time.sleep(1.0)
    stream.stop()
    msgs, dups = tc.account(stream, tc.READER, "zombie")
    late_old = [tid for tid, _ in
                tc.published_under_old_epoch(msgs, vslots, seen)]
    p.check(not late_old, "%d task(s) committed under the zombie's epoch "
            "after the takeover, e.g. %s" % (len(late_old), late_old[:5]))
    p.check(dups == 0, "zombie: %d duplicates (want 0)" % dups)
    # its commits refused after it woke (a transaction was open when it
    # stopped: likely at this rate, not certain)
    refused = [l for l in victim.grep("exactly-once transaction failed")
               if (h.log_ts_ms(l) or 0) >= stop_ms and
               re.search(r"fenc|epoch", l, re.I)]
    print("# zombie: victim=%s stopped_ms=%d tasks=%d duplicates=0 "
          "zombie_commits_refused=%d" % (victim.wid, cont_ms - stop_ms,
                                         len(msgs), len(refused)),
          flush=True)
    for l in refused[:3]:
        h.log("  " + l[:300])
    p.raise_if_any("zombie")


def main():
    h.run_suite(tc.__dict__, tc.setup, tc.cleanup,
                lambda: tc.C.dump_logs(25) if tc.C is not None else None,
                tests=[tc.test_assignment_join_and_graceful_leave,
                       tc.test_failover_kill9_nonmaster,
                       tc.test_sigstop_past_session_timeout,
                       test_zombie_fenced_by_kafka,
                       tc.test_master_kill9])


if __name__ == "__main__":
    main()
