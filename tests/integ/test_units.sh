#!/bin/sh
# The systemd units pass `systemd-analyze verify` (pointed at the binaries
# just built, since they are not installed here): every
# deploy/*.service.in whose program this build has. They keep Type=notify,
# the watchdog and the hardening. The sysusers.d and tmpfiles.d snippets
# apply cleanly to an empty root.
set -eu
src=${PROPHET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${PROPHET_BUILDDIR:-$src/build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "1..5"
command -v systemd-analyze >/dev/null || {
	echo "not ok 1 - systemd-analyze missing (package systemd)"; exit 1; }

mkdir "$tmp/units"
n=0
verified=""
for in in "$src"/deploy/*.service.in; do
	name=$(basename "$in" .in)
	prog=$(sed -n 's|^ExecStart=@bindir@/\([^ ]*\).*|\1|p' "$in")
	if [ ! -x "$bin/$prog" ]; then
		echo "# $name: $prog is not built here, not verified"
		continue
	fi
	case $name in
	*@.service) out=${name%@.service}@7071.service ;;
	*) out=$name ;;
	esac
	sed -e "s|@bindir@|$bin|g" -e "s|@sysconfdir@|/etc|g" \
		-e "s|@docdir@|/usr/share/doc/prophet|g" "$in" >"$tmp/units/$out"
	n=$((n + 1))
	verified="$verified $out"
done
for must in prophet-manager.service prophet-worker.service \
	prophet-worker@7071.service; do
	[ -f "$tmp/units/$must" ] || {
		echo "not ok 1 - $must not verified (binary missing?)"; exit 1; }
done
if ! out=$(cd "$tmp/units" && SYSTEMD_LOG_LEVEL=warning \
	systemd-analyze verify ./*.service 2>&1); then
	echo "$out" | sed 's/^/# /'
	echo "not ok 1 - systemd-analyze verify failed"
	exit 1
fi
# Warnings about this sandbox (no D-Bus, no prophet user) are not errors of
# the units; anything naming our files is.
if echo "$out" | grep -q "prophet-"; then
	echo "$out" | sed 's/^/# /'
	echo "not ok 1 - systemd-analyze verify complained about the units"
	exit 1
fi
echo "ok 1 - $n units pass systemd-analyze verify:$verified"

# What each unit must keep (a later edit must not drop it silently).
missing=""
for in in "$src"/deploy/*.service.in; do
	for want in Type=notify WatchdogSec= Restart=on-failure User=prophet \
		NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes \
		PrivateTmp=yes RestrictAddressFamilies= \
		"CapabilityBoundingSet=$" SystemCallFilter=@system-service \
		"ExecReload=/bin/kill -HUP"; do
		grep -q "^$want" "$in" || missing="$missing $(basename "$in"):$want"
	done
done
if [ -n "$missing" ]; then
	echo "not ok 2 - units lack:$missing"
	exit 1
fi
echo "ok 2 - every unit has Type=notify, the watchdog, restart and hardening"

root="$tmp/root"
mkdir -p "$root/etc"
if ! out=$(systemd-sysusers --root="$root" \
	"$src/deploy/sysusers.d/prophet.conf" 2>&1) ||
	! grep -q '^prophet:' "$root/etc/passwd"; then
	echo "$out" | sed 's/^/# /'
	echo "not ok 3 - sysusers.d/prophet.conf did not create the user"
	exit 1
fi
uid=$(sed -n 's/^prophet:[^:]*:\([0-9]*\):.*/\1/p' "$root/etc/passwd")
gid=$(sed -n 's/^prophet:[^:]*:\([0-9]*\):.*/\1/p' "$root/etc/group")
echo "ok 3 - sysusers.d/prophet.conf creates user prophet (uid $uid)"

mkdir -p "$root/etc/prophet"
: >"$root/etc/prophet/prophet.conf"
chmod 644 "$root/etc/prophet/prophet.conf"
: >"$root/etc/prophet/tokens"
chmod 644 "$root/etc/prophet/tokens"
mkdir -p "$root/etc/prophet/secrets"
chmod 755 "$root/etc/prophet/secrets"
: >"$root/etc/prophet/secrets/db.pass"
chmod 644 "$root/etc/prophet/secrets/db.pass"
if ! out=$(systemd-tmpfiles --root="$root" --create \
	"$src/deploy/tmpfiles.d/prophet.conf" 2>&1); then
	echo "$out" | sed 's/^/# /'
	echo "not ok 4 - systemd-tmpfiles failed"
	exit 1
fi
got=$(stat -c '%a %u:%g' "$root/var/lib/prophet" "$root/etc/prophet" \
	"$root/etc/prophet/prophet.conf" "$root/etc/prophet/tokens" \
	"$root/etc/prophet/secrets" "$root/etc/prophet/secrets/db.pass" | tr '\n' ' ')
want="750 $uid:$gid 750 0:$gid 640 0:$gid 600 $uid:$gid 750 0:$gid 600 $uid:$gid "
if [ "$got" != "$want" ]; then
	echo "not ok 4 - tmpfiles.d: modes/owners '$got', want '$want'"
	exit 1
fi
echo "ok 4 - tmpfiles.d/prophet.conf: home 750, config readable by prophet only, tokens and secret files by the daemons' user only"

# What a security review runs on a unit: `systemd-analyze security` rates
# its exposure from 0 (locked down) to 10; it was 5.8 "MEDIUM" (no
# capability bounding set, no system call filter, /proc, clock, kernel
# logs, realtime open). --threshold is on the scale 0-100.
bad=""
for u in $verified; do
	if ! out=$(cd "$tmp/units" && SYSTEMD_LOG_LEVEL=warning \
		systemd-analyze security --offline=true --threshold=20 "./$u" 2>&1); then
		bad="$bad $u:$(echo "$out" | sed -n 's/.*exposure level for [^:]*: //p')"
	fi
done
if [ -n "$bad" ]; then
	echo "not ok 5 - systemd-analyze security rates the units above 2.0:$bad"
	exit 1
fi
echo "ok 5 - systemd-analyze security rates every unit 2.0 or below:$verified"
