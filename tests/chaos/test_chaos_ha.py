#!/usr/bin/python3
"""The short chaos run on the replicated topology (issue 20), in make
check's normal build like test_chaos.py: scripts/devcluster up --ha (a
3-server ZooKeeper ensemble, 3 KRaft brokers with replication 3 and
min.insync.replicas 2 and no auto-creation, Redis primary + replica + 3
Sentinels, MariaDB) and every fault kind of chaos.HA_FAULTS once at a
fixed seed (the ZooKeeper leader and a follower killed, the Kafka leader of
a partition in use killed, a broker stopped 60 s, a Sentinel failover and
the primary killed while its replica lags, a worker's and a manager's wall
clock jumped either way, and the process faults of the single-node run),
then the same ledger checks. PROPHET_CHAOS_DURATION / _SEED / _RETENTION
as for test_chaos.py; the long run is `make chaos-ha`."""

import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402
import test_chaos  # noqa: E402

if __name__ == "__main__":
    sys.exit(test_chaos.main(["--ha"], chaos.HA_FAULTS, "test_chaos_ha.py"))
