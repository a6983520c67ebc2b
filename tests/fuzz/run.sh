#!/bin/sh
# Builds the libFuzzer target with clang (ASan+UBSan) and runs it for
# FUZZ_SECONDS (default 20) from the seed corpus. Exit 0 = no finding.
set -eu
src=${PROPHET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
out=${PROPHET_BUILDDIR:-$src/build}/fuzz
secs=${FUZZ_SECONDS:-20}
command -v clang >/dev/null || { echo "not ok 1 - clang missing (scripts/deps installs it)"; exit 1; }
mkdir -p "$out/corpus"
cp "$src"/tests/fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
# shellcheck disable=SC2046
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-D_GNU_SOURCE -I"$src/common" -I"$src/proto" -I"$src/tests/unit" \
	$(pkg-config --cflags jansson libmariadb libevent libcrypto) \
	"$src/tests/fuzz/fuzz_task.c" "$src/proto/task.c" "$src/proto/payload.c" \
	"$src/tests/unit/payload_ref.c" \
	"$src/proto/callback.c" "$src/proto/cron.c" "$src/common/tz.c" \
	"$src/proto/slot.c" "$src/proto/zknode.c" "$src/common/url.c" \
	"$src/common/xmalloc.c" "$src/common/log.c" "$src/common/db.c" \
	"$src/common/crypto.c" "$src/common/utf8.c" \
	$(pkg-config --libs jansson libmariadb libevent libcrypto) -lpthread -o "$out/fuzz_task"
if "$out/fuzz_task" -max_total_time="$secs" -max_len=8192 -timeout=5 \
	-artifact_prefix="$out/" "$out/corpus" >"$out/fuzz.log" 2>&1; then
	runs=$(grep -o 'Done [0-9]* runs' "$out/fuzz.log" | tail -1)
	echo "ok 1 - fuzz_task: no finding in ${secs}s (${runs:-?})"
else
	tail -40 "$out/fuzz.log"
	echo "not ok 1 - fuzz_task found a crash: see $out/crash-*"
	exit 1
fi
