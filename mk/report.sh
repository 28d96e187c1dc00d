#!/usr/bin/env bash
# The performance suite behind `make perf-report` and `make perf-baseline`
# (see mk/report.mk). Usage: mk/report.sh path/to/qm RESULTS_DIR
#
# Writes into RESULTS_DIR (its old *.txt and *.json go first):
#   bench-core.txt       core benchmarks, indexed and naive, PERF_ROUNDS rounds
#   bench-allocator.txt  the service's closed and open loop against its echo
#   sim-NAME.json        every shipped scenario (deterministic)
#   load-echo.json       `qm load` against a `qm serve` process on loopback,
#                        allocations and the health-check echo taking turns
#                        (ten rounds, whatever PERF_ROUNDS says)
#   forward-MODE.json    `qm load` direct to a remote `qm serve` and through
#                        an entry that forwards to it (mk/load-forward.sh)
#
# Rounds interleave the parts: each round runs the core benchmarks and then
# the service's, and a "round: N" line before each run lets `qm report`
# divide every figure by its reference from the same round. On a shared
# two-core machine load comes and goes by the minute; a figure and its
# reference measured seconds apart see the same machine.
#
# PERF_SLOW=DURATION (say 50us) builds everything measured with a sleep of
# that long in the allocator's hot path, inside the index lock, through a
# `go build -overlay` of core/index.go made here in a temporary directory:
# the tree and every default build stay as they are. It exists to show that
# the gate fails on a change a person would call broken (reports/README.md).
set -euo pipefail

qm=${1:?usage: report.sh path/to/qm RESULTS_DIR}
out=${2:?usage: report.sh path/to/qm RESULTS_DIR}
go=${GO:-go}
rounds=${PERF_ROUNDS:-6}
benchtime=${PERF_BENCHTIME:-200ms}
slow=${PERF_SLOW:-}

mkdir -p "$out"
rm -f "$out"/*.txt "$out"/*.json
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qm-perf.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

buildflags=()
if [[ -n $slow ]]; then
	case $slow in
	*ns) slow_ns=${slow%ns} ;;
	*us) slow_ns=${slow%us}000 ;;
	*ms) slow_ns=${slow%ms}000000 ;;
	*) slow_ns=x ;;
	esac
	if ! [[ $slow_ns =~ ^[0-9]+$ ]]; then
		echo "PERF_SLOW: want a whole duration such as 50us or 1ms, got \"$slow\"" >&2
		exit 2
	fi
	# The sleep goes right after the first lock of the index in allocate,
	# so the service's callers queue behind it as they would behind any slow
	# code under that lock. A missing anchor is an error: a slowed build
	# that is not slowed would prove nothing.
	awk '
		/^func \(ix \*Index\) allocate\(/ { in_fn = 1 }
		{ print }
		in_fn && !done && /^\t\tix\.mu\.Lock\(\)$/ { print "\t\tperfSlow()"; done = 1 }
		END { exit done ? 0 : 1 }
	' core/index.go >"$tmp/index.go" || {
		echo "PERF_SLOW: core/index.go has no ix.mu.Lock() in func (ix *Index) allocate to slow down; update mk/report.sh" >&2
		exit 2
	}
	cat >"$tmp/perfslow.go" <<EOF
package core

import "time"

func perfSlow() { time.Sleep($slow_ns) }
EOF
	printf '{"Replace": {"%s": "%s", "%s": "%s"}}\n' \
		"$PWD/core/index.go" "$tmp/index.go" "$PWD/core/zz_perfslow.go" "$tmp/perfslow.go" >"$tmp/overlay.json"
	buildflags=(-overlay "$tmp/overlay.json")
	echo "== PERF_SLOW=$slow: measuring a build that sleeps $slow per allocation under the index lock" >&2
	"$go" build "${buildflags[@]}" -o "$tmp/qm" ./cmd/qm
	qm=$tmp/qm
fi

# Test binaries built once, so each round runs the same code without
# compiling again.
"$go" test "${buildflags[@]}" -c -o "$tmp/core.test" ./core
"$go" test "${buildflags[@]}" -c -o "$tmp/allocator.test" ./allocator

start=$SECONDS
for r in $(seq 0 $((rounds - 1))); do
	echo "== round $((r + 1)) of $rounds ($((SECONDS - start)) s so far)" >&2
	{
		echo "round: $r"
		(cd core && "$tmp/core.test" -test.run '^$' -test.bench '^Benchmark(Naive)?Allocate$/-(1k|10k)$' \
			-test.benchtime "$benchtime" -test.benchmem)
	} >>"$out/bench-core.txt"
	{
		echo "round: $r"
		(cd allocator && "$tmp/allocator.test" -test.run '^$' -test.bench '^Benchmark(ClosedLoop|OpenLoop)$' \
			-test.benchtime 1x -bench.rounds 4 -bench.slice 200ms -bench.open 500ms)
	} >>"$out/bench-allocator.txt"
done

# The scenarios: exit status 2 means an expectation failed, which the report
# shows and fails on; anything else is an error here.
for f in scenarios/*.yaml; do
	name=$(basename "$f" .yaml)
	echo "== scenario $name" >&2
	"$qm" sim --quiet "$f" --out "$out/sim-$name.json" || [[ $? -eq 2 ]]
done

# qm load from outside, through mk/load.sh (a `qm serve` process on
# loopback with 400,000 Ready servers): allocations and the health-check
# echo on the same server, port and mTLS take 500 ms turns, ten rounds of
# them whatever PERF_ROUNDS says, so each round gives one alloc÷echo
# throughput ratio measured next to its reference. 5 s of allocations and
# the warm-up (about 250,000 at 40,000/s) stay inside that fleet, so nothing
# needs releasing. Exit status 2 is a failed --expect (errors==0), which the report
# shows and fails on.
echo "== qm load against a local qm serve ($((SECONDS - start)) s so far)" >&2
LOAD_SERVERS=400000 bash mk/load.sh "$qm" "$out" load-echo --workers 64 --duration 5s --window 500ms --progress never >&2 ||
	[[ $? -eq 2 ]]
# Forwarding from outside (mk/load-forward.sh): the same multi-cluster
# request direct to a remote `qm serve` and through an entry `qm serve`
# that forwards to it, in 500 ms turns, the entry on a core of its own
# where there are two. Reported, not gated, except that it must not fail.
fwd_mode=pinned
[[ $(nproc) -ge 2 ]] || fwd_mode=shared
echo "== qm load through a forwarding qm serve, $fwd_mode ($((SECONDS - start)) s so far)" >&2
FORWARD_SERVERS=250000 bash mk/load-forward.sh "$qm" "$out" "$fwd_mode" --workers 64 --duration 3s --window 500ms --progress never >&2 ||
	[[ $? -eq 2 ]]
echo "== suite done in $((SECONDS - start)) s" >&2
