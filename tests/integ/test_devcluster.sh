#!/bin/sh
# scripts/devcluster keeps the ports a run dir was brought up with: a run
# dir up on its own ports (as several clusters share one machine), then
# `up` and `status` again without the PROPHET_*_PORT variables, as the test
# harness calls it before every test program, must stay on those ports.
# They once fell back to the defaults and wrote them into devcluster.env
# and prophet.conf while the run dir's servers went on listening on their
# own: the tests then ran against whatever cluster held the default ports.
# Other ports while the servers run are refused.
set -u
src=${PROPHET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
dc=$src/scripts/devcluster
run=$(mktemp -d /tmp/prophet-devcluster-XXXXXX)
out=$run.out
cleanup() {
	PROPHET_RUN_DIR=$run "$dc" down --purge >>"$out" 2>&1
	rm -rf "$run" "$out"
}
trap cleanup EXIT
# five free ports below the ephemeral range (where other programs' own
# connections could take one before the server binds it), the last two
# adjacent (Kafka's controller is the broker's port + 1)
set -- $(python3 -c '
import random, socket
def bindable(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
got = []
while len(got) < 4:
    p = random.randrange(20000, 32000)
    n = 2 if len(got) == 3 else 1
    if all(bindable(p + i) and p + i not in got for i in range(n)):
        got.append(p)
print(*got)')
zk=$1 redis=$2 db=$3 kafka=$4
fail() {
	cat "$out"
	echo "not ok 1 - $*"
	exit 1
}
PROPHET_RUN_DIR=$run PROPHET_ZK_PORT=$zk PROPHET_REDIS_PORT=$redis \
	PROPHET_DB_PORT=$db PROPHET_KAFKA_PORT=$kafka "$dc" up >"$out" 2>&1 ||
	fail "devcluster up on ports $zk $redis $db $kafka"
PROPHET_RUN_DIR=$run "$dc" up >>"$out" 2>&1 || fail "devcluster up again"
for want in "PROPHET_ZK=127.0.0.1:$zk" "PROPHET_REDIS_URL=redis://127.0.0.1:$redis/0" \
	"PROPHET_DB_URL=mysql://prophet:prophet@127.0.0.1:$db/prophet" \
	"PROPHET_KAFKA_BROKERS=127.0.0.1:$kafka"; do
	grep -qx "$want" "$run/devcluster.env" ||
		fail "devcluster.env after an up without the port variables: no $want"
done
grep -q "^hosts = 127.0.0.1:$zk\$" "$run/prophet.conf" ||
	fail "prophet.conf after an up without the port variables: not ZooKeeper port $zk"
PROPHET_RUN_DIR=$run "$dc" status >>"$out" 2>&1 || fail "devcluster status"
grep -q "^mariadb .* port $db\$" "$out" || fail "status: mariadb not on port $db"
if PROPHET_RUN_DIR=$run PROPHET_DB_PORT=$((db + 1)) "$dc" up >>"$out" 2>&1; then
	fail "up with another port while the servers run was not refused"
fi
grep -q "runs on other ports (PROPHET_DB_PORT=$db)" "$out" ||
	fail "no refusal naming the running port"
echo "ok 1 - scripts/devcluster: a run dir stays on its ports ($zk $redis $db $kafka)"
exit 0
