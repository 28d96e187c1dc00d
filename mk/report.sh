#!/usr/bin/env bash
# The performance suite behind `make perf-report` and `make perf-baseline`
# (see mk/report.mk and reports/README.md). Usage: mk/report.sh OUT
#
# Builds two sides and measures them alternately in one job, as Go's own
# performance builders do:
#   base  the baseline commit (PERF_BASE_COMMIT, default the one recorded in
#         reports/baseline/commit), taken from git history into a temporary
#         directory (git archive) and built there;
#   cur   the working tree as it stands.
# PERF_BASE_COMMIT=. makes the working tree itself the base side (what
# `make perf-gate-check` compares a patched build with, so that the check
# does not depend on how far the tree has moved from the baseline).
# PERF_SIDES=base (or cur) measures one side alone: `make perf-baseline`
# measures HEAD that way, from git history, so what it records is exactly
# the commit it names.
#
# The measuring instrument is the working tree's: its gate benchmark files
# (*_gate_bench_test.go and gate_*_test.go) and the package they share
# (internal/gatebench) are copied into the baseline's tree before
# building, so both sides
# run the same benchmarks over their own code. If the baseline's code does
# not compile with them, it is built without them and their figures are
# "new" (not gated) until the baseline moves.
#
# Writes OUT/base and OUT/cur (what each side measured), each with:
#   bench-core.txt   core.GateAllocate: process CPU per allocation, allocs
#                    and bytes per op (1k and 10k servers, packed and
#                    distributed), six processes a round, each timing
#                    every case 4 times for PERF_BENCHTIME (25ms) and
#                    giving the lower quartile of those (core_sample)
#   bench-sim.txt    sim.GateSim: CPU per event, events, allocs and bytes
#                    of twenty virtual minutes at seed 2026, two processes
#                    a round
#   bench-service.txt  allocator.GateService: the gRPC server's CPU, heap
#                    allocations and bytes per allocation (the real server
#                    over mutual TLS on loopback, in a child process, one
#                    caller), three processes a round
#   bench-forward.txt  allocator/forward.GateForward: the entry allocator's
#                    CPU, allocations and bytes per forwarded request (the
#                    entry in a child process, the remote on loopback),
#                    three processes a round
#   bench-kube.txt   allocator/kube.GateKube: the kubernetes backend's CPU,
#                    allocations and bytes per allocation against one local
#                    API server (`qm cluster up`, started once for the run
#                    and shared by both sides), two processes a round
#   load-echo.rN.json  `qm load` against that side's `qm serve` (mk/load.sh),
#                    allocations and the health-check echo taking turns, 32
#                    callers: the server's CPU per allocation from outside
#                    (family service-load)
#   forward.rN.json  mk/load-forward.sh with that side's qm: the entry's CPU
#                    per forwarded request from outside (family
#                    forward-load)
#   sim-NAME.json    every shipped scenario (deterministic: once a side)
# and copies reports/baseline/thresholds.yaml (and changes.yaml, if any) into
# OUT/base, so `qm report --baseline OUT/base OUT/cur/*` is the gate.
#
# Each round measures every family on both sides, the side going first
# alternating from round to round (A B, B A, ...), and within a round the
# in-process families' samples alternate one by one (measure_round), so
# that whatever the machine does meanwhile falls on both sides alike.
#
# PERF_FAMILIES (default "core sim service forward kube service-load
# forward-load") picks the families.
# PERF_PATCH=FAMILY:N builds the cur side with a deliberate slowdown, through
# `go build -overlay` (the tree stays untouched), to show that the gate
# catches it (reports/README.md, "Proving the gate"):
#   core:N     N rounds of a multiply-add chain at the start of each
#              allocation in core (Index.allocate)
#   allocs:N   N extra heap allocations of 64 bytes there
#   sim:N      N rounds of the chain per simulated event (the event queue's pop)
#   service:N  N rounds per allocation in the service (Service.allocate)
#   forward:N  N rounds per forwarded request (Forwarder.AllocateFor)
#   kube:N     N rounds per allocation in the kubernetes backend
#              (Backend.Allocate)
# A missing anchor is an error: a patched build that is not patched would
# prove nothing.
set -euo pipefail

out=${1:?usage: report.sh OUT}
go=${GO:-go}
rounds=${PERF_ROUNDS:-6}
benchtime=${PERF_BENCHTIME:-25ms}
sides=${PERF_SIDES:-base cur}
families=${PERF_FAMILIES:-core sim service forward kube service-load forward-load}
patch=${PERF_PATCH:-}
load_duration=${PERF_LOAD_DURATION:-2s}
root=$PWD
# The git repository the baseline commit is read from (default: the one
# holding this directory; a frozen copy of a tree can name the repository).
repo=${PERF_REPO:-.}
# The package the gate benchmarks share (copied with them into the
# baseline's tree).
gate_support=internal/gatebench

has() { [[ " $families " == *" $1 "* ]]; }
for f in $families; do
	case $f in core | sim | service | forward | kube | service-load | forward-load) ;; *)
		echo "PERF_FAMILIES: unknown family \"$f\" (want core, sim, service, forward, kube, service-load, forward-load)" >&2
		exit 2
		;;
	esac
done

base_commit=${PERF_BASE_COMMIT:-}
if [[ " $sides " == *" base "* && -z $base_commit ]]; then
	[[ -s reports/baseline/commit ]] || {
		echo "report: no baseline commit: reports/baseline/commit is missing (make perf-baseline records one)" >&2
		exit 2
	}
	base_commit=$(tr -d '[:space:]' <reports/baseline/commit)
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/qm-perf.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"
mkdir -p "$out"

# patch_overlay FAMILY N: writes $tmp/overlay.json, which replaces the file
# holding the family's anchor with a copy that calls perfPatch() first thing
# in the anchored function, and adds perfPatch to that package.
patch_overlay() {
	local family=$1 n=$2 dir anchor body
	case $family in
	core) dir=core anchor='^func \(ix \*Index\) allocate\(' ;;
	allocs) dir=core anchor='^func \(ix \*Index\) allocate\(' ;;
	sim) dir=sim anchor='^func \(q \*queue\) pop\(\) event' ;;
	service) dir=allocator anchor='^func \(s \*Service\) allocate\(' ;;
	forward) dir=allocator/forward anchor='^func \(f \*Forwarder\) AllocateFor\(' ;;
	kube) dir=allocator/kube anchor='^func \(b \*Backend\) Allocate\(' ;;
	*)
		echo "PERF_PATCH: unknown family \"$family\" (want core, allocs, sim, service, forward or kube)" >&2
		exit 2
		;;
	esac
	[[ $n =~ ^[0-9]+$ ]] || { echo "PERF_PATCH: want FAMILY:N with a whole N, got \"$patch\"" >&2; exit 2; }
	local file
	file=$(grep -lE "$anchor" "$dir"/*.go | grep -v '_test\.go$' | head -n 1) || true
	[[ -n $file ]] || {
		echo "PERF_PATCH: no function matching /$anchor/ in $dir/ to patch; update mk/report.sh" >&2
		exit 2
	}
	awk -v anchor="$anchor" '
		$0 ~ anchor { in_fn = 1 }
		{ print }
		in_fn && !done && /\{$/ { print "\tperfPatch()"; done = 1 }
		END { exit done ? 0 : 1 }
	' "$file" >"$tmp/patched.go"
	local pkg
	pkg=$(sed -n 's/^package \([a-z0-9_]*\).*/\1/p' "$file" | head -n 1)
	if [[ $family == allocs ]]; then
		body="for range $n { perfPatchSink = make([]byte, 64) }"
	else
		body="x := perfPatchAcc; for range $n { x = x*6364136223846793005 + 1442695040888963407 }; perfPatchAcc = x"
	fi
	cat >"$tmp/perfpatch.go" <<GO
package $pkg

var (
	perfPatchSink []byte
	perfPatchAcc  uint64
)

func perfPatch() { $body }
GO
	printf '{"Replace": {"%s": "%s", "%s": "%s"}}\n' \
		"$root/$file" "$tmp/patched.go" "$root/$dir/zz_perfpatch.go" "$tmp/perfpatch.go" >"$tmp/overlay.json"
	echo "== PERF_PATCH=$patch: the cur side calls perfPatch() at the start of the function at /$anchor/ in $file" >&2
}

# build SIDE SRC [go flags]: the side's qm and gate benchmark binaries.
build() {
	local side=$1 src=$2
	shift 2
	mkdir -p "$tmp/$side"
	# -trimpath: the build cache then serves the baseline's unchanged
	# packages from this tree's builds, whatever directory they sit in.
	(cd "$src" && "$go" build -trimpath "$@" -o "$tmp/$side/qm" ./cmd/qm) || return 1
	if has core; then (cd "$src" && "$go" test -trimpath "$@" -c -o "$tmp/$side/core.test" ./core) || return 1; fi
	if has sim; then (cd "$src" && "$go" test -trimpath "$@" -c -o "$tmp/$side/sim.test" ./sim) || return 1; fi
	if has service; then (cd "$src" && "$go" test -trimpath "$@" -c -o "$tmp/$side/service.test" ./allocator) || return 1; fi
	if has forward; then (cd "$src" && "$go" test -trimpath "$@" -c -o "$tmp/$side/forward.test" ./allocator/forward) || return 1; fi
	if has kube; then (cd "$src" && "$go" test -trimpath "$@" -c -o "$tmp/$side/kube.test" ./allocator/kube) || return 1; fi
}

for side in $sides; do
	mkdir -p "$out/$side"
	if [[ $side == base && $base_commit == . ]]; then
		echo "== base: the working tree itself (PERF_BASE_COMMIT=.)" >&2
		build base "$root"
	elif [[ $side == base ]]; then
		echo "== base: commit $base_commit from git history" >&2
		mkdir -p "$tmp/base-src"
		git -C "$repo" archive "$base_commit" | tar -x -C "$tmp/base-src"
		# go.sum lines only ever vouch for a module's checksum: the union
		# with this tree's lets a commit that was built with a go.sum not
		# yet committed (or a module cache already holding it) build here.
		sort -u "$tmp/base-src/go.sum" go.sum >"$tmp/go.sum" && mv "$tmp/go.sum" "$tmp/base-src/go.sum"
		gates=()
		while IFS= read -r f; do gates+=("$f"); done < <(find . -path ./tools -prune -o \( -name '*_gate_bench_test.go' -o -name 'gate_*_test.go' \) -print | sed 's|^\./||' | sort)
		for f in ${gates[@]+"${gates[@]}"}; do
			[[ -d $tmp/base-src/$(dirname "$f") ]] && cp "$f" "$tmp/base-src/$f"
		done
		# The package the gate benchmarks share is part of the instrument:
		# it goes into the baseline's tree whole, even where that commit
		# predates it.
		while IFS= read -r f; do
			mkdir -p "$tmp/base-src/$(dirname "$f")"
			cp "$f" "$tmp/base-src/$f"
			gates+=("$f")
		done < <(find "$gate_support" -name '*.go' | sort)
		if ! build base "$tmp/base-src" 2>"$tmp/base-build.log"; then
			echo "== base: does not build with this tree's gate benchmarks (${gates[*]-}); building without them, so their figures are new, not gated:" >&2
			sed 's/^/   /' "$tmp/base-build.log" | tail -n 5 >&2
			for f in ${gates[@]+"${gates[@]}"}; do
				rm -f "$tmp/base-src/$f"
				if git -C "$repo" cat-file -e "$base_commit:$f" 2>/dev/null; then git -C "$repo" show "$base_commit:$f" >"$tmp/base-src/$f"; fi
			done
			build base "$tmp/base-src"
		fi
	else
		flags=()
		if [[ -n $patch ]]; then
			patch_overlay "${patch%%:*}" "${patch#*:}"
			flags=(-overlay "$tmp/overlay.json")
		fi
		echo "== cur: the working tree" >&2
		build cur "$root" ${flags[@]+"${flags[@]}"}
	fi
done

# fresh BINARY: a copy of BINARY in a file of its own, to run one sample
# from (the caller removes it). The processes of one file share its
# pages in the page cache, and so the physical placement of its code,
# which decides which of its lines contend for the same cache sets: a
# placement that stays the same for a side's every sample is a bias of
# that side, which alternating cannot cancel. A new file per sample draws
# the placement anew each time, as a new process does for its heap and
# stacks, so the samples stay independent and both sides alike.
fresh() {
	local copy
	copy=$(mktemp "$tmp/exec.$(basename "$1").XXXXXX")
	cp "$1" "$copy" && chmod 755 "$copy" && printf '%s\n' "$copy"
}

# gate_bench FILE ROUND DIR BINARY NAME BENCHTIME: one process of a gate
# benchmark (on one P, as all of them), its results appended to FILE
# after the round's configuration lines; a failure shows its output.
gate_bench() {
	local file=$1 r=$2 dir=$3 bin=$4 name=$5 benchtime=$6 res exe
	exe=$(fresh "$bin")
	res=$(cd "$dir" && GOMAXPROCS=1 "$exe" -test.run '^$' -test.bench "^Benchmark$name\$" -test.benchtime "$benchtime") || {
		rm -f "$exe"
		echo "report: Benchmark$name failed:" >&2
		printf '%s\n' "$res" | tail -n 20 >&2
		return 1
	}
	rm -f "$exe"
	printf 'round: %s\ngomaxprocs: 1\n%s\n' "$r" "$res" >>"$file"
}

# core_sample BINARY ROUND: one sample of core.GateAllocate: one process
# timing each case PERF_CORE_COUNT (4) times for PERF_BENCHTIME (25ms); its
# line per case carries the lower quartile of those timings' CPU per
# allocation (each timing's being the lower quartile of its batches, as
# the in-process service, forwarding and kube benchmarks take: another
# process can only add to a batch's CPU) and the median of the rest.
core_sample() {
	local res exe
	exe=$(fresh "$1")
	res=$(cd core && GOMAXPROCS=1 "$exe" -test.run '^$' -test.bench '^BenchmarkGateAllocate$' \
		-test.benchtime "$benchtime" -test.count "${PERF_CORE_COUNT:-4}" -test.benchmem) || {
		rm -f "$exe"
		echo "report: BenchmarkGateAllocate failed:" >&2
		printf '%s\n' "$res" | tail -n 20 >&2
		return 1
	}
	rm -f "$exe"
	printf 'round: %s\ngomaxprocs: 1\n' "$2"
	printf '%s\n' "$res" | awk '
		function sorted(list, out,   n, i, j, v) {
			n = split(list, out, " ")
			for (i = 2; i <= n; i++) { v = out[i] + 0; j = i - 1; while (j > 0 && out[j] + 0 > v) { out[j + 1] = out[j]; j-- } out[j + 1] = v }
			return n
		}
		function pick(list, q,   a, n) { n = sorted(list, a); return a[int((n - 1) * q) + 1] }
		/^Benchmark/ {
			if (!($1 in seen)) { seen[$1] = 1; order[++cases] = $1 }
			n[$1] = n[$1] " " $2
			for (i = 3; i < NF; i++) v[$1, $(i + 1)] = v[$1, $(i + 1)] " " $i
			next
		}
		/^(goos|goarch|pkg|cpu):/ { print }
		END {
			for (c = 1; c <= cases; c++) {
				k = order[c]
				printf "%s\t%s\t%s ns/op\t%s cpu-ns/op\t%s B/op\t%s allocs/op\n", k, pick(n[k], 0.5),
					pick(v[k, "ns/op"], 0.5), pick(v[k, "cpu-ns/op"], 0.25), pick(v[k, "B/op"], 0.5), pick(v[k, "allocs/op"], 0.5)
			}
		}'
}

# sample FAMILY SIDE ROUND: one sample of an in-process family on one
# side: one process of its gate benchmark.
sample() {
	local family=$1 side=$2 r=$3 bin=$tmp/$2 exe
	# GOMAXPROCS=1 for the benchmarks: with one P no idle P spins looking
	# for work, CPU time a busy machine adds or takes away at random; the
	# work itself (collector included) is the same on one P as on two.
	# Every sample is a process of its own: samples from one process share
	# its heap's and stacks' placement, which moves CPU per op from one
	# process to the next, so they are not independent as the test assumes;
	# and each runs from a copy of its binary of its own (fresh).
	case $family in
	core) core_sample "$bin/core.test" "$r" >>"$out/$side/bench-core.txt" ;;
	sim)
		exe=$(fresh "$bin/sim.test")
		{
			echo "round: $r"
			echo "gomaxprocs: 1"
			(cd sim && GOMAXPROCS=1 "$exe" -test.run '^$' -test.bench '^BenchmarkGateSim$' -test.benchtime 1x -test.benchmem)
		} >>"$out/$side/bench-sim.txt"
		rm -f "$exe"
		;;
	# The service, forwarding and the kubernetes backend in process: CPU
	# per operation of the process doing the work (the server, the entry
	# or the backend), one caller and one request at a time, so that every
	# request costs it the same wake-ups however busy the machine is.
	service) gate_bench "$out/$side/bench-service.txt" "$r" allocator "$bin/service.test" GateService "$PERF_SERVICE_OPS" ;;
	forward) gate_bench "$out/$side/bench-forward.txt" "$r" allocator/forward "$bin/forward.test" GateForward "$PERF_FORWARD_OPS" ;;
	kube) QM_GATE_KUBECONFIG=$kubeconfig gate_bench "$out/$side/bench-kube.txt" "$r" allocator/kube "$bin/kube.test" GateKube "$PERF_KUBE_OPS" ;;
	esac
}

# samples_per_round FAMILY: how many processes of the family each side
# runs a round. Core's are short (a few seconds each), and interference
# from whatever shares the machine's caches comes and goes within
# seconds: many short samples, alternated, let it fall on both sides
# alike rather than on a few long ones of one side.
samples_per_round() {
	case $1 in core) echo 6 ;; service | forward) echo 3 ;; *) echo 2 ;; esac
}

# measure_round ROUND SIDE...: one round. Each in-process family's
# samples are taken with the sides in turn, sample by sample, the side
# going first swapping every time (A B, B A, A B, ...): a burst of load
# lasting a few seconds then falls on one sample of one side and the
# next sample is the other side's, rather than on a run of one side's
# samples, which the test would count as that many independent pieces
# of evidence. The from-outside families then run a side at a time.
measure_round() {
	local r=$1 family k side
	shift
	local turn=("$@")
	for family in core sim service forward kube; do
		has "$family" || continue
		for k in $(seq 1 "$(samples_per_round "$family")"); do
			for side in "${turn[@]}"; do sample "$family" "$side" "$r"; done
			if [[ ${#turn[@]} -eq 2 ]]; then turn=("${turn[1]}" "${turn[0]}"); fi
		done
	done
	for side in "$@"; do measure_outside "$side" "$r"; done
}

# measure_outside SIDE ROUND: the from-outside families on one side.
measure_outside() {
	local side=$1 r=$2 bin=$tmp/$1
	# The servers from outside: closed loops of 32 callers. The server's CPU per request
	# depends on how many requests each wake-up finds waiting; a saturated
	# server finds many on any machine, a lightly loaded one few or many
	# depending on what else runs (reports/README.md). Nothing is released, so the
	# fleets hold every allocation of the turns and the warm-ups. Exit
	# status 2 is a failed --expect (errors==0), which the report shows and
	# fails on.
	if has service-load; then
		# The side's server on one P (see the benchmarks), this tree's
		# qm load as the driver for both sides (the side's own when only
		# one is measured).
		local driver=$tmp/cur/qm
		[[ -x $driver ]] || driver=$bin/qm
		LOAD_CLIENT=$driver LOAD_SERVER_ENV=GOMAXPROCS=1 LOAD_SERVERS=250000 bash mk/load.sh "$bin/qm" "$out/$side" "load-echo.r$r" \
			--workers 32 --duration "$load_duration" --window 500ms --progress never >/dev/null || [[ $? -eq 2 ]]
	fi
	if has forward-load; then
		local mode=pinned
		[[ $(nproc) -ge 2 ]] || mode=shared
		# The remote's one fleet serves the direct and the forwarded
		# target and is never released: sized for both at a quiet
		# machine's rates, warm-ups included (as load-echo's above).
		FORWARD_SERVERS=250000 bash mk/load-forward.sh "$bin/qm" "$tmp/fwd" "$mode" \
			--workers 32 --duration "$load_duration" --window 500ms --progress never >/dev/null || [[ $? -eq 2 ]]
		mv "$tmp/fwd/forward-$mode.json" "$out/$side/forward.r$r.json"
	fi
}

# The kubernetes backend's samples share one local API server for the
# whole run (both sides): starting one per sample would cost seconds each.
kubeconfig=
if has kube; then
	qm=$tmp/cur/qm
	[[ -x $qm ]] || qm=$tmp/base/qm
	"$qm" cluster up --name qm-perf-gate --dir "$tmp/cluster" ${PERF_KUBE_BIN_DIR:+--bin-dir "$PERF_KUBE_BIN_DIR"} >"$tmp/cluster.log" 2>&1 &
	cluster_pid=$!
	trap 'kill "$cluster_pid" 2>/dev/null; wait "$cluster_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
	for _ in $(seq 1 120); do
		grep -q ' is up: ' "$tmp/cluster.log" && break
		kill -0 "$cluster_pid" 2>/dev/null || break
		sleep 1
	done
	grep -q ' is up: ' "$tmp/cluster.log" || {
		echo "report: the local API server for the kube family did not come up:" >&2
		cat "$tmp/cluster.log" >&2
		exit 1
	}
	kubeconfig=$tmp/cluster/kubeconfig
fi
: "${PERF_SERVICE_OPS:=2000x}" "${PERF_FORWARD_OPS:=1500x}" "${PERF_KUBE_OPS:=200x}"

start=$SECONDS
read -r -a order <<<"$sides"
for r in $(seq 0 $((rounds - 1))); do
	echo "== round $((r + 1)) of $rounds: ${order[*]} ($((SECONDS - start)) s so far)" >&2
	measure_round "$r" "${order[@]}"
	# The other side first next round.
	if [[ ${#order[@]} -eq 2 ]]; then order=("${order[1]}" "${order[0]}"); fi
done

# The scenarios (this tree's files, run by each side's qm), once a side:
# the same seed gives the same figures, so any difference is a change of
# behaviour. Exit status 2 means an expectation failed, which the report
# shows and fails on. A scenario the baseline's qm cannot read (a newer
# field) is skipped there, saying so: its figures are then new, not gated.
if has sim; then
	for side in $sides; do
		for f in scenarios/*.yaml; do
			name=$(basename "$f" .yaml)
			status=0
			"$tmp/$side/qm" sim --quiet "$f" --out "$out/$side/sim-$name.json" 2>"$tmp/sim.err" || status=$?
			case $status in
			0 | 2) ;;
			*)
				if [[ $side == cur ]]; then cat "$tmp/sim.err" >&2; exit 1; fi
				echo "== base: qm sim $f failed ($(head -c 300 "$tmp/sim.err")); its figures are new, not gated" >&2
				rm -f "$out/$side/sim-$name.json"
				;;
			esac
		done
	done
fi
if [[ -d $out/base ]]; then
	cp reports/baseline/thresholds.yaml "$out/base/"
	[[ ! -f reports/baseline/changes.yaml ]] || cp reports/baseline/changes.yaml "$out/base/"
fi
echo "== suite done in $((SECONDS - start)) s" >&2
