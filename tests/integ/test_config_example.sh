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
# --version names the commit built (git describe of the source tree), so
# that an operator can tell which build each host runs.
want=unknown
if [ -e "$src/.git" ]; then
	want=$(cd "$src" && git describe --always --dirty --abbrev=12 2>/dev/null) || want=unknown
fi
for prog in prophet-manager prophet-worker prophet-notifier; do
	got=$("$bin/$prog" --version)
	case $got in
	"$prog "*" (commit $want)") ;;
	*)
		echo "not ok 4 - $prog --version: '$got', want the commit $want" >&2
		exit 1
		;;
	esac
done
echo "ok 4 - --version names the commit: $got"
