#!/bin/sh
# README's first command, scripts/demo, on the suite's build and the running
# dev cluster: five tasks pushed through the API to a topic that does not
# exist yet must arrive on Kafka, and the demo must end with "demo: OK".
# (It uses the dev cluster's own prophet.conf: root /prophet, the API on
# 127.0.0.1:7070; the suite runs it once, in the normal build.)
set -u
src=${PROPHET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${PROPHET_BUILDDIR:-$src/build}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
PROPHET_DEMO_BUILD=$bin "$src/scripts/demo" >"$out" 2>&1
rc=$?
n=$(grep -c '^  received key=' "$out")
if [ "$rc" -eq 0 ] && [ "$n" -eq 5 ] && grep -q '^demo: OK' "$out"; then
	echo "ok 1 - scripts/demo: 5 tasks received on Kafka, demo: OK"
	exit 0
fi
cat "$out"
echo "not ok 1 - scripts/demo: exit $rc, $n of 5 received"
exit 1
