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
# Every source of common/ and proto/ is built once with the fuzzers' flags
# into an archive; each fuzzer links what it uses from it, so a new
# dependency between those sources needs no change here.
pkgs="jansson libmariadb libevent libevent_openssl libevent_pthreads libssl libcrypto inih rdkafka libsystemd hiredis libcurl"
mkdir -p "$out/obj"
rm -f "$out/obj/"*.o "$out/libfuzz.a"
# (proto/scripts.c is made by make from proto/lua/, in the build tree.)
scripts_c=${PROPHET_BUILDDIR:-$src/build}/proto/scripts.c
[ -f "$scripts_c" ] || scripts_c=
for f in "$src"/common/*.c "$src"/proto/*.c $scripts_c; do
	# shellcheck disable=SC2046,SC2086
	clang $flags -DTHREADED $incs $(pkg-config --cflags $pkgs) \
		-c "$f" -o "$out/obj/$(basename "$(dirname "$f")")_$(basename "$f" .c).o"
done
ar rcs "$out/libfuzz.a" "$out/obj/"*.o
# fuzz_task links only jansson, libcrypto and libcurl (for its URL parser)
# besides the archive: proto/ holds formats only, so the codecs link no
# database, Redis, ZooKeeper, Kafka or libevent client (a new such
# dependency fails this link).
# shellcheck disable=SC2046,SC2086
clang $flags $incs $(pkg-config --cflags jansson libcurl) \
	"$src/tests/fuzz/fuzz_task.c" "$src/tests/unit/payload_ref.c" \
	"$src/tests/unit/task_same.c" \
	"$out/libfuzz.a" $(pkg-config --libs jansson libcrypto libcurl) \
	-lpthread -lm \
	-o "$out/fuzz_task"
# shellcheck disable=SC2046,SC2086
clang $flags $incs $(pkg-config --cflags $pkgs) \
	"$src/tests/fuzz/fuzz_http.c" "$out/libfuzz.a" \
	$(pkg-config --libs $pkgs) -lzookeeper_mt -lpthread -o "$out/fuzz_http"
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
