#!/bin/sh
# The systemd units must pass `systemd-analyze verify` (pointed at the
# binaries just built, since they are not installed here).
set -eu
src=${PROPHET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${PROPHET_BUILDDIR:-$src/build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v systemd-analyze >/dev/null || {
	echo "not ok 1 - systemd-analyze missing (package systemd)"; exit 1; }
n=0
for in in "$src"/deploy/*.service.in; do
	name=$(basename "$in" .in)
	sed -e "s|@bindir@|$bin|g" -e "s|@sysconfdir@|/etc|g" \
		-e "s|@docdir@|/usr/share/doc/prophet|g" "$in" >"$tmp/$name"
	n=$((n + 1))
done
cp "$tmp/prophet-worker@.service" "$tmp/prophet-worker@7071.service"
rm "$tmp/prophet-worker@.service"
if ! out=$(cd "$tmp" && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify ./*.service 2>&1); then
	echo "$out"
	echo "not ok 1 - systemd-analyze verify failed"
	exit 1
fi
# Warnings about this sandbox (no D-Bus, no prophet user) are not errors of
# the units; anything naming our files is.
if echo "$out" | grep -q "prophet-"; then
	echo "$out"
	echo "not ok 1 - systemd-analyze verify complained about the units"
	exit 1
fi
echo "ok 1 - $n units pass systemd-analyze verify"
