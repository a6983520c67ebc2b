#!/bin/sh
# Builds the libFuzzer targets with clang (ASan+UBSan) and runs each for
# FUZZ_SECONDS (default 20) from its seed corpus. Exit 0 = no finding.
#   fuzz_task  task JSON, payload codec, slot nodes, URLs, cron, callbacks
#   fuzz_http  raw requests through the HTTP gate, routes and replies
set -eu
src=${PROPHET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
out=${PROPHET_BUILDDIR:-$src/build}/fuzz
secs=${FUZZ_SECONDS:-20}
command -v clang >/dev/null || { echo "not ok 1 - clang missing (scripts/deps installs it)"; exit 1; }
mkdir -p "$out/corpus" "$out/corpus_http"
cp "$src"/tests/fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
cp "$src"/tests/fuzz/corpus_http/* "$out/corpus_http/" 2>/dev/null || true
# Requests with multi-byte names cut at every boundary of the fixed
# buffers that quote them (64-byte field, 256- and 512-byte messages).
python3 "$src/tests/fuzz/seeds_http.py" "$out/corpus_http"
flags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE -DHAVE_CONFIG_H -DSYSCONFDIR=\"/etc\""
# config.h of the build (the configured paths and version) first.
incs="-I${PROPHET_BUILDDIR:-$src/build} -I$src/common -I$src/proto -I$src/tests/unit"
# shellcheck disable=SC2046,SC2086
clang $flags $incs $(pkg-config --cflags jansson libmariadb libevent libcrypto inih rdkafka libsystemd) \
	"$src/tests/fuzz/fuzz_task.c" "$src/proto/task.c" "$src/proto/payload.c" \
	"$src/tests/unit/payload_ref.c" \
	"$src/proto/callback.c" "$src/proto/cron.c" "$src/common/tz.c" \
	"$src/proto/slot.c" "$src/proto/zknode.c" "$src/common/url.c" \
	"$src/common/xmalloc.c" "$src/common/log.c" "$src/common/db.c" \
	"$src/common/crypto.c" "$src/common/utf8.c" "$src/common/cfg.c" \
	"$src/common/secret.c" "$src/common/netguard.c" "$src/common/kafka.c" \
	"$src/common/daemon.c" \
	$(pkg-config --libs jansson libmariadb libevent libcrypto inih rdkafka libsystemd) -lpthread -o "$out/fuzz_task"
# shellcheck disable=SC2046,SC2086
clang $flags $incs $(pkg-config --cflags jansson libevent libsystemd libcrypto libssl libevent_openssl) \
	"$src/tests/fuzz/fuzz_http.c" "$src/common/http.c" \
	"$src/common/httpgate.c" "$src/common/utf8.c" "$src/common/hmap.c" \
	"$src/common/metrics.c" "$src/common/daemon.c" "$src/common/url.c" \
	"$src/common/xmalloc.c" "$src/common/log.c" "$src/proto/task.c" \
	"$src/proto/callback.c" "$src/proto/cron.c" "$src/common/tz.c" \
	"$src/common/crypto.c" \
	$(pkg-config --libs jansson libevent libsystemd libcrypto libssl libevent_openssl) -lpthread -o "$out/fuzz_http"
n=0
for t in task http; do
	n=$((n + 1))
	corpus=$out/corpus
	[ $t = http ] && corpus=$out/corpus_http
	if "$out/fuzz_$t" -max_total_time="$secs" -max_len=8192 -timeout=5 \
		-artifact_prefix="$out/$t-" "$corpus" >"$out/fuzz_$t.log" 2>&1; then
		runs=$(grep -o 'Done [0-9]* runs' "$out/fuzz_$t.log" | tail -1)
		echo "ok $n - fuzz_$t: no finding in ${secs}s (${runs:-?})"
	else
		tail -40 "$out/fuzz_$t.log"
		echo "not ok $n - fuzz_$t found a crash: see $out/$t-crash-*"
		exit 1
	fi
done
