#!/usr/bin/python3
"""Exactly-once publishing (issue 21, kafka.exactly_once) under
test_durability.py's server faults, on real servers.

The clusters, streams and ledgers of test_durability.py with
kafka.exactly_once on and a read_committed reader (kcat); each fault must
end with nothing lost, nothing early and 0 duplicates:

  redis_killed      private Redis SIGKILLed, restarted EMPTY mid-stream
                    (every slot index rebuilt from the DB)
  redis_stopped     private Redis stopped: DB mode, then back
  kafka_stopped     private Kafka broker stopped: transactions fail and
                    are retried once it is back
  mariadb_stopped   private MariaDB stopped: delivered records and
                    checkpoints wait, firing goes on

Outages are 18 s (Redis, Kafka) and 15 s (MariaDB) here (PROPHET_DURABILITY_OUTAGE_S and _SHORT_OUTAGE_S
override).
"""

import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
os.environ["PROPHET_DURABILITY_EOS"] = "1"
os.environ.setdefault("PROPHET_DURABILITY_OUTAGE_S", "18")
os.environ.setdefault("PROPHET_DURABILITY_SHORT_OUTAGE_S", "15")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_durability as td  # noqa: E402

if __name__ == "__main__":
    td.main([td.test_redis_killed_restarted_empty, td.test_redis_stopped,
             td.test_kafka_stopped, td.test_mariadb_stopped])
