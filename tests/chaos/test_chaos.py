#!/usr/bin/python3
"""The short chaos run of make check (normal build; scripts/test keeps it
out of the sanitizer build like the other long fault suites): every fault
kind of tests/chaos/chaos.py at least once within ~100 s at a fixed seed,
then one TAP line per ledger figure that must hold. The managers prune
with a short task.retention (5 s) and archive what they delete: the
ledger reads a task gone from the DB by its archive record. Environment:
PROPHET_CHAOS_DURATION / PROPHET_CHAOS_SEED / PROPHET_CHAOS_RETENTION (0:
no pruner) override the defaults."""

import os
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402

# The first round (every kind once) runs past it when its faults take
# longer; the --ha run uses the same default.
DURATION = os.environ.get("PROPHET_CHAOS_DURATION", "100s")
SEED = os.environ.get("PROPHET_CHAOS_SEED", "20261130")
# Short: most finished tasks are pruned (and archived) during the run.
RETENTION = os.environ.get("PROPHET_CHAOS_RETENTION", "5s")
NOTIFIER_BIN = os.path.join(chaos.h.BUILDDIR, "prophet-notifier")


def main(extra=(), faults=None, name="test_chaos.py"):
    """The run and its checks; extra: more chaos.py arguments (--ha),
    faults: the kinds that must all have been injected."""
    fd, path = tempfile.mkstemp(prefix="prophet-chaos-", suffix=".json")
    os.close(fd)
    rep = None
    try:
        rep = chaos.main(["--duration", DURATION, "--seed", SEED,
                          "--notifier", NOTIFIER_BIN,
                          "--callback-fraction", "0.1",
                          "--retention", RETENTION, "--json", path] +
                         list(extra))
    except Exception as e:
        import traceback
        for line in traceback.format_exc().splitlines():
            print("# " + line)
        print("# chaos run failed: %r" % e)
    checks = []
    if rep is None:
        checks.append(("chaos run completed", False, "no ledger"))
    else:
        kinds = set(rep["faults_by_kind"])
        want = set(faults or chaos.ALL_FAULTS) | {"notifier_kill"}
        checks += [
            ("every fault kind injected", kinds >= want,
             "missing: %s" % ",".join(sorted(want - kinds))),
            ("tasks accepted and delivered", rep["accepted"] > 0 and
             rep["delivered"] > 0, "%d accepted, %d delivered"
             % (rep["accepted"], rep["delivered"])),
            ("nothing lost", rep["lost"] == 0,
             "%d lost, e.g. %s" % (rep["lost"], rep["lost_ids"][:5])),
            ("nothing cancelled was published",
             rep["cancelled_but_published"] == 0,
             "%d" % rep["cancelled_but_published"]),
            ("nothing published before its due time",
             rep["published_before_due"] == 0,
             "%s" % rep["published_before_due_examples"][:3]),
            ("never two owners of one slot at one epoch",
             rep["ownership"]["two_owners_one_epoch"] == 0 and
             rep["ownership"]["zookeeper_samples"] > 0 and
             rep["ownership"]["worker_samples"] > 0,
             "%s" % rep["ownership"]),
            ("nothing published under an epoch after a higher one was "
             "written", rep["ownership"]["published_after_superseded"] == 0,
             "%s" % rep["ownership"]["published_after_superseded_examples"]
             [:3]),
            ("DB: every expected task delivered, cancelled ones cancelled",
             rep["db"]["not_delivered"] == 0 and
             rep["db"]["cancelled_not_cancelled"] == 0, "%s" % rep["db"]),
            ("every task with a callback was called back (notifier)",
             rep["callbacks"]["checked"] and
             rep["callbacks"]["expected"] > 0 and
             rep["callbacks"]["missing"] == 0, "%s" % rep["callbacks"]),
            ("a task is pruned only once delivered, cancelled or "
             "expired, each archived once, some pruned",
             (rep["prune"]["retention"] is None or
              rep["prune"]["pruned"] > 0) and
             rep["prune"]["not_final"] == 0 and
             rep["prune"]["archived_twice"] == 0, "%s" % rep["prune"]),
            ("no sanitizer report", not rep["sanitizer_reports"],
             "%s" % rep["sanitizer_reports"]),
        ]
        if rep.get("exactly_once"):
            checks.append(("exactly-once: no duplicate (read_committed)",
                           rep["duplicates"]["total"] == 0,
                           "%d, by cause %s" % (
                               rep["duplicates"]["total"],
                               rep["duplicates"]["by_cause"])))
    print("1..%d" % len(checks))
    failed = 0
    for n, (what, ok, detail) in enumerate(checks, 1):
        print("%sok %d - %s" % ("" if ok else "not ", n, what))
        if not ok:
            failed += 1
            print("# %s: %s" % (what, detail))
    print("# ledger: %s" % path)
    print("# %s: %d passed, %d failed"
          % (name, len(checks) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
