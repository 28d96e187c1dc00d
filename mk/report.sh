#!/usr/bin/env bash
# The performance suite behind `make perf-report` and `make perf-baseline`
# (see mk/report.mk). Usage: mk/report.sh path/to/qm RESULTS_DIR
#
# Writes into RESULTS_DIR (its old *.txt and *.json go first):
#   bench-core.txt       core benchmarks, indexed and naive, PERF_ROUNDS rounds
#   bench-allocator.txt  the service's closed and open loop against its echo
#   sim-NAME.json        every shipped scenario (deterministic)
#
# Rounds interleave the parts: each round runs the core benchmarks and then
# the service's, and a "round: N" line before each run lets `qm report`
# divide every figure by its reference from the same round. On a shared
# two-core machine load comes and goes by the minute; a figure and its
# reference measured seconds apart see the same machine.
set -euo pipefail

qm=${1:?usage: report.sh path/to/qm RESULTS_DIR}
out=${2:?usage: report.sh path/to/qm RESULTS_DIR}
go=${GO:-go}
rounds=${PERF_ROUNDS:-6}
benchtime=${PERF_BENCHTIME:-200ms}

mkdir -p "$out"
rm -f "$out"/*.txt "$out"/*.json
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qm-perf.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Test binaries built once, so each round runs the same code without
# compiling again.
"$go" test -c -o "$tmp/core.test" ./core
"$go" test -c -o "$tmp/allocator.test" ./allocator

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

if "$qm" load -h >/dev/null 2>&1; then
	echo "== qm load: not part of the suite yet (see reports/README.md)" >&2
else
	echo "== qm load: not in this build; skipped" >&2
fi
echo "== suite done in $((SECONDS - start)) s" >&2
