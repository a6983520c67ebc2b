#!/bin/sh
# Model-checks the slot handover and claim protocol (tests/model/handover.pml)
# with spin: the safety assertions (S1, S2) and the liveness property (ltl
# live, weak fairness) must hold, and the -DBROKEN variant (no claim fence)
# must be rejected with an S2 assertion violation; the same with -DEOS
# (exactly-once: S3 too), whose -DBROKEN_EOS (markers not read) and
# -DBROKEN_FENCE (the slot's last producer not fenced) and -DBROKEN_SWITCH
# (the checkpoint moved to the new owner's partition before the markers
# read are recorded) variants must be rejected with an S3 violation;
# -DSHARED (both workers' markers in one partition) must hold too.
#   tests/model/run.sh          small fault bounds (make check, ~1 min)
# First it checks the model's slot phase moves against the C table.
#   tests/model/run.sh --full   the model's default bounds (make model-check)
# Prints TAP lines, the states explored, and "N passed, N failed".
set -u
here=$(cd "$(dirname "$0")" && pwd)
model="$here/handover.pml"
# Exactly-once adds a transactional id per worker incarnation, the slot's
# record of its last producer and fatal producer errors (MAXF), which
# multiply the states: make check runs its bounds in two parts (session
# expiries without crashes, crashes without expiries), --full together.
if [ "${1:-}" = "--full" ]; then
	safety_bounds="-DMAXX=2 -DMAXC=1 -DMAXH=2" # the model's defaults
	live_bounds="-DMAXX=1"
	eos_bounds_list="-DMAXX=1_-DMAXH=1_-DMAXC=1_-DMAXF=1 -DSHARED_-DMAXX=1_-DMAXH=1_-DMAXC=1_-DMAXF=1"
	eos_live_bounds="-DMAXX=1 -DMAXH=1 -DMAXC=0"
else
	safety_bounds="-DMAXX=1"
	live_bounds="-DMAXX=1 -DMAXH=1"
	eos_bounds_list="-DMAXX=1_-DMAXH=1_-DMAXC=0 -DMAXX=0_-DMAXH=1_-DMAXC=1 -DSHARED_-DMAXX=0_-DMAXH=1_-DMAXC=1"
	eos_live_bounds="-DMAXX=1 -DMAXH=1 -DMAXC=0"
fi
CC=${CC:-cc}
pass=0
fail=0
n=0
work=$(mktemp -d "${TMPDIR:-/tmp}/prophet-model.XXXXXX")
trap 'rm -rf "$work"' EXIT

report() { # name ok|notok detail
	n=$((n + 1))
	if [ "$2" = ok ]; then
		pass=$((pass + 1))
		echo "ok $n - $1"
	else
		fail=$((fail + 1))
		echo "not ok $n - $1"
	fi
	[ -n "$3" ] && echo "# $1: $3"
}

# run NAME SPIN_FLAGS CC_FLAGS PAN_FLAGS -> pan output in $work/NAME.out
run() {
	d="$work/$1"
	mkdir -p "$d" && cp "$model" "$d/" || return 1
	# shellcheck disable=SC2086
	(cd "$d" && spin $2 -a handover.pml >spin.out 2>&1 &&
		$CC -O2 -w $3 -o pan pan.c >cc.out 2>&1 &&
		./pan $4 >"$work/$1.out" 2>&1)
	rc=$?
	if [ ! -s "$work/$1.out" ]; then
		cat "$d/spin.out" "$d/cc.out" 2>/dev/null | head -20 | sed 's/^/# /'
	fi
	return $rc
}

summary() { # pan output -> "N states, depth D, T s"
	st=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$1" | head -1)
	dp=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$1" | head -1)
	tm=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\).*/\1/p' "$1" | head -1)
	er=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$1" | head -1)
	echo "errors $er, $st states stored, depth $dp, ${tm}s"
}

if ! command -v spin >/dev/null 2>&1; then
	echo "not ok 1 - spin is missing (apt-get install spin; scripts/deps)"
	echo "0 passed, 1 failed"
	exit 1
fi

# search safety|live NAME LABEL SPIN_FLAGS: the exhaustive safety search
# (assertions, no deadlock) or ltl live under weak fairness (no acceptance
# cycle) must find nothing.
search() {
	if [ "$1" = safety ]; then
		run "$2" "$4" "-DSAFETY -DNOCLAIM -DCOLLAPSE" "-m400000 -w24"
		done_re="Full statespace search"
	else
		run "$2" "$4" "-DCOLLAPSE -DNFAIR=3" "-a -f -m400000 -w24"
		done_re="acceptance   cycles.*+"
	fi
	o="$work/$2.out"
	if grep -q "errors: 0" "$o" && grep -q "$done_re" "$o" &&
		! grep -q "max search depth too small" "$o"; then
		report "$3" ok "$(summary "$o")"
	else
		report "$3" notok "$(summary "$o")"
		grep -E "violated|error|invalid|cycle" "$o" | head -5 | sed 's/^/# /'
	fi
	rm -rf "${work:?}/$2"
}

# rejected NAME LABEL SPIN_FLAGS ASSERTION: a broken variant must violate
# ASSERTION (as pan prints it).
rejected() {
	run "$1" "$3" "-DSAFETY -DNOCLAIM" "-m400000"
	o="$work/$1.out"
	if grep -qF "assertion violated ($4)" "$o" && grep -q "errors: 1" "$o"; then
		report "$2" ok "$(grep -m1 'assertion violated' "$o" | sed 's/^pan:1: //')"
	else
		report "$2" notok "spin found no violation of $4: $(summary "$o")"
	fi
}

# 0. The model's slot phase moves ("phase:" comments of its worker steps)
# are exactly the C table's (worker/slotfsm.c, printed by the unit test
# binary of the build: PROPHET_BUILDDIR, as make check sets it).
PHASES='(idle|starting|owned|draining|handing)'
model_moves() {
	awk -v re="phase: $PHASES" '
		$0 ~ re { on = 1; buf = "" }
		on {
			l = $0
			sub(/^[ \t]*(\/\*|\*)?[ \t]*/, "", l)
			buf = buf " " l
			if ($0 ~ /\*\//) { print buf; on = 0 }
		}' "$model" |
		grep -oE "$PHASES( -> $PHASES)+" |
		awk '{ for (i = 1; i + 2 <= NF; i += 2) print $i, $(i + 2) }' |
		sort -u
}
fsm="${PROPHET_BUILDDIR:-.}/tests/unit/test_slotfsm"
if [ ! -x "$fsm" ]; then
	report "phase moves: model = C table" notok \
		"$fsm is not built (make check builds it)"
else
	"$fsm" --moves | sort -u >"$work/c.moves"
	model_moves >"$work/model.moves"
	only_c=$(comm -23 "$work/c.moves" "$work/model.moves" | tr '\n' ';')
	only_m=$(comm -13 "$work/c.moves" "$work/model.moves" | tr '\n' ';')
	if [ -s "$work/c.moves" ] && [ -z "$only_c$only_m" ]; then
		report "phase moves: model = C table" ok \
			"$(wc -l <"$work/c.moves") moves"
	else
		report "phase moves: model = C table" notok \
			"only in C: ${only_c:-none}; only in the model: ${only_m:-none}"
	fi
fi

# 1.-3. safety (S1, S2), liveness (every claimed task is eventually
# delivered), and the variant without the claim fence must violate S2.
search safety safety "safety (S1, S2) $safety_bounds" "$safety_bounds"
search live live "liveness (ltl live) $live_bounds" "$live_bounds"
rejected broken "-DBROKEN (no claim fence) is rejected" \
	"-DBROKEN -DMAXX=1 -DMAXH=1" "pend[w]>=started"

# 4.-10. exactly-once (-DEOS): S1, S2, S3 (also with both workers' markers
# in one partition) and liveness; the variants whose open does not read
# the markers, does not fence the slot's last producer, or moves the
# checkpoint to its partition before recording what it read, must
# violate S3.
for b in $eos_bounds_list; do
	eos_bounds=$(echo "$b" | tr _ ' ')
	search safety eos "exactly-once safety (S1, S2, S3) $eos_bounds" \
		"-DEOS $eos_bounds"
done
search live eos-live "exactly-once liveness (ltl live) $eos_live_bounds" \
	"-DEOS $eos_live_bounds"
rejected eos-broken "-DEOS -DBROKEN_EOS (markers not read) is rejected" \
	"-DEOS -DBROKEN_EOS -DMAXX=1 -DMAXH=1" "kCommits<=1"
rejected eos-nofence \
	"-DEOS -DBROKEN_FENCE (last producer not fenced) is rejected" \
	"-DEOS -DBROKEN_FENCE -DMAXX=1 -DMAXH=1" "kCommits<=1"
rejected eos-early-switch \
	"-DEOS -DBROKEN_SWITCH (checkpoint moved before recording) is rejected" \
	"-DEOS -DBROKEN_SWITCH -DMAXX=1 -DMAXH=1" "kCommits<=1"

echo "# $(basename "$0"): $pass passed, $fail failed"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
