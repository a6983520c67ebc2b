#!/bin/sh
# deploy/prophet.conf.example must document every key with its default:
# it is generated from the config table and must not drift from it.
set -eu
src=${PROPHET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${PROPHET_BUILDDIR:-$src/build}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$bin/prophet-manager" --print-example-config >"$tmp"
if ! diff -u "$src/deploy/prophet.conf.example" "$tmp"; then
	echo "not ok 1 - deploy/prophet.conf.example is stale:" \
		"regenerate with prophet-manager --print-example-config" >&2
	exit 1
fi
echo "ok 1 - example config matches the config table"
# The example itself must load, and a wrong value must name its key.
"$bin/prophet-manager" -c "$src/deploy/prophet.conf.example" --check-config >/dev/null
echo "ok 2 - example config is valid"
if "$bin/prophet-worker" -c "$src/deploy/prophet.conf.example" \
	--set worker.lease_ms=5 --check-config 2>"$tmp"; then
	echo "not ok 3 - out-of-range value accepted" >&2
	exit 1
fi
grep -q "worker.lease_ms" "$tmp"
echo "ok 3 - bad value rejected with the key name: $(cat "$tmp")"
