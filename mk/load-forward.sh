#!/usr/bin/env bash
# Forwarding's throughput measured from outside (issue 10's figure, the
# way a user would reproduce it): two `qm serve` processes on loopback, an
# entry allocator whose one policy forwards to a remote allocator, and
# `qm load` from a third process sending the same multi-cluster request to
# both in alternating turns: "direct" to the remote (which serves it from a
# policy naming its own fleet) and "forwarded" through the entry. The
# ratio forwarded/direct is measured in one run. A third target,
# "roundtrip", is the remote's gRPC health check over the same mTLS: what
# one more hop's round trip costs with no work behind it, for the lone
# request's figure (--workers 1): forwarded p50 against direct p50 plus
# roundtrip p50.
#
# Usage: mk/load-forward.sh path/to/qm OUTDIR pinned|shared|onecore [qm load flags]
#
#   pinned  the entry runs on CPU 1, the remote and qm load on CPU 0: the
#           entry has a core of its own, as an allocator in another
#           cluster has. A direct turn leaves CPU 1 idle; a forwarded
#           one adds the entry's work there, so the ratio says whether
#           the forwarding hop holds throughput back when it is not
#           competing with the remote and the callers for CPU.
#   shared  no pinning: the three processes share the machine's cores, so
#           every forwarded request costs the cores a remote allocation
#           plus the entry's gRPC hop (a ratio near 0.5 on two cores).
#   onecore all three on CPU 0: no wake-up ever crosses cores, which tells
#           a lone request's scheduling delays from the work itself.
#
# --server-pid names the entry: "server CPU forwarded" is the entry's CPU
# per forwarded request (direct and round-trip turns leave it idle).
# Exit status: qm load's (2: an --expect failed), 1 for anything else.
# Writes OUTDIR/forward-MODE.json (qm load's result) and prints its summary.
# FORWARD_IDLE=poll keeps every CPU out of its idle states for the run
# (/dev/cpu_dma_latency held at 0, as tuned's latency-performance profile
# does; needs root): a sleeping core then wakes at once for a lone
# request, which on a virtual machine otherwise costs an exit to the
# hypervisor per wake-up. Direct and forwarded turns run under the same
# setting.
# FORWARD_FLOOR=1 (make load-forward-lone sets it) adds two references
# for the lone request, and prints its arithmetic at the end:
#   relay            the same request through `qm relay` on the entry's
#                    CPU: a hop that ends the caller's mutual TLS and opens
#                    its own to the remote, and only copies bytes. What it
#                    adds to direct is the least any forwarding hop adds on
#                    this machine; forwarded minus relay is the entry's own
#                    work.
#   roundtrip-entry  the entry's health check: a round trip over the hop
#                    forwarding adds (to the entry's CPU, so in pinned mode
#                    it wakes that core as a forwarded request does).
# FORWARD_SERVE_FLAGS adds flags to both `qm serve` commands (say
# "--pprof --http-addr 127.0.0.1:0" to profile them).
# FORWARD_LINK_RTT=1ms puts a link with that round trip (whole
# milliseconds) between the entries and the remote: a toxiproxy server,
# the rigs' link, built from the module cache (needs the Go toolchain).
# FORWARD_B_QM and FORWARD_B_FLAGS start a second entry, "forwarded-b",
# from another qm binary or with other flags, to compare two entries in
# alternating turns of one run; FORWARD_CPU=b charges its CPU instead of
# the first entry's.
set -euo pipefail

qm=${1:?usage: load-forward.sh path/to/qm OUTDIR pinned|shared|onecore [flags]}
outdir=${2:?}
mode=${3:?}
shift 3
case $mode in
pinned | onecore)
	if [[ $mode == pinned && $(nproc) -lt 2 ]]; then
		echo "load-forward: $mode needs two CPUs, this machine has $(nproc)" >&2
		exit 1
	fi
	command -v taskset >/dev/null || { echo "load-forward: $mode needs taskset (util-linux)" >&2; exit 1; }
	on_remote=(taskset -c 0) on_entry=(taskset -c 1) on_load=(taskset -c 0)
	[[ $mode == onecore ]] && on_entry=(taskset -c 0)
	;;
shared) on_remote=() on_entry=() on_load=() ;;
*)
	echo "load-forward: mode must be pinned, shared or onecore, got \"$mode\"" >&2
	exit 1
	;;
esac

case ${FORWARD_IDLE:-} in
"") ;;
poll)
	# Held while fd 9 is open, that is until this script exits.
	[[ -w /dev/cpu_dma_latency ]] || { echo "load-forward: FORWARD_IDLE=poll needs write access to /dev/cpu_dma_latency (root)" >&2; exit 1; }
	exec 9>/dev/cpu_dma_latency
	printf '\x00\x00\x00\x00' >&9
	;;
*)
	echo "load-forward: FORWARD_IDLE must be poll or empty, got \"$FORWARD_IDLE\"" >&2
	exit 1
	;;
esac

state=$(mktemp -d "${TMPDIR:-/tmp}/qm-forward.XXXXXX")
pids=()
cleanup() {
	status=$?
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
	done
	if [[ $status -ne 0 ]]; then
		for n in remote entry relay; do
			[[ -f $state/$n.log ]] && { echo "--- $n log ---" >&2; tail -n 20 "$state/$n.log" >&2; }
		done
	fi
	rm -rf "$state"
	exit "$status"
}
trap cleanup EXIT INT TERM

"$qm" certs --dir "$state/certs" --hosts localhost,127.0.0.1 --clients caller,forwarder >/dev/null

# The remote: a fleet big enough that no turn runs it dry (nothing is
# released; FORWARD_SERVERS, 500,000 by default, holds 64 callers' 9s
# per target with warm-ups at this machine's rates), and a policy naming its own fleet, so the direct target's
# multi-cluster request is served here with the same request as the
# forwarded one.
servers=${FORWARD_SERVERS:-500000}
cat >"$state/fleets.yaml" <<YAML
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 2000
fleets:
- name: load
  replicas: $servers
  labels: {mode: load}
YAML
cat >"$state/remote-policies.yaml" <<'YAML'
apiVersion: multicluster.agones.dev/v1
kind: GameServerAllocationPolicy
metadata: {name: here, namespace: default, labels: {route: bench}}
spec:
  priority: 1
  weight: 100
  connectionInfo: {clusterName: remote}
YAML
printf 'apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nnodes: 1\nfleets: []\n' >"$state/empty.yaml"

# Every process listens on a port of its own choosing (port 0) and says
# which: a port picked here and bound later could be taken meanwhile as
# the source port of some other process's outgoing connection.
start() { # name fleets policies cpu...: sets addr to its gRPC address, pid to its process
	local name=$1 fleets=$2 policies=$3
	shift 3
	"$@" "${serve_qm:-$qm}" serve --addr 127.0.0.1:0 --http-addr "" --cluster-name "$name" \
		--tls-dir "$state/certs/server" --client-ca-dir "$state/certs/client-ca" \
		--fleets "$fleets" --policies "$policies" --ready-file "$state/$name.ready" ${FORWARD_SERVE_FLAGS:-} ${serve_flags:-} >/dev/null 2>"$state/$name.log" &
	pid=$!
	pids+=($pid)
	for _ in $(seq 600); do [[ -s $state/$name.ready ]] && break; sleep 0.1; done
	[[ -s $state/$name.ready ]] || { echo "load-forward: $name did not start in 60s" >&2; exit 1; }
	addr=$(sed -n 's/.*"grpc":"\([^"]*\)".*/\1/p' "$state/$name.ready")
}
start remote "$state/fleets.yaml" "$state/remote-policies.yaml" ${on_remote[@]+"${on_remote[@]}"}
remote=$addr
link=$remote
case ${FORWARD_LINK_RTT:-} in
"") ;;
*ms)
	rtt=${FORWARD_LINK_RTT%ms}
	[[ $rtt =~ ^[0-9]+$ ]] || { echo "load-forward: FORWARD_LINK_RTT must be whole milliseconds (1ms), got \"$FORWARD_LINK_RTT\"" >&2; exit 1; }
	(cd "$(dirname "$0")/.." && go build -o "$state/toxiproxy-server" github.com/Shopify/toxiproxy/v2/cmd/server)
	# toxiproxy's API takes no port 0: try a few in the range below the
	# kernel's ephemeral ports until one is ours.
	for _ in $(seq 20); do
		api=127.0.0.1:$((20000 + RANDOM % 12000))
		"$state/toxiproxy-server" --host 127.0.0.1 --port "${api#*:}" >"$state/link.log" 2>&1 &
		link_pid=$!
		for _ in $(seq 50); do
			kill -0 "$link_pid" 2>/dev/null || break
			curl -fsS "http://$api/version" >/dev/null 2>&1 && break 2
			sleep 0.1
		done
		kill "$link_pid" 2>/dev/null || true
		link_pid=
	done
	[[ -n ${link_pid:-} ]] || { echo "load-forward: the link's toxiproxy server did not start: $(tail -n 5 "$state/link.log")" >&2; exit 1; }
	pids+=($link_pid)
	link=$(curl -fsS -X POST "http://$api/proxies" -d "{\"name\":\"to-remote\",\"listen\":\"127.0.0.1:0\",\"upstream\":\"$remote\"}" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["listen"])')
	# The round trip, split between the two ways (whole milliseconds).
	for way in upstream:$(((rtt + 1) / 2)) downstream:$((rtt / 2)); do
		[[ ${way#*:} -eq 0 ]] && continue
		curl -fsS -X POST "http://$api/proxies/to-remote/toxics" \
			-d "{\"type\":\"latency\",\"stream\":\"${way%:*}\",\"attributes\":{\"latency\":${way#*:}}}" >/dev/null
	done
	echo "link to the remote: $link ($FORWARD_LINK_RTT round trip)"
	;;
*)
	echo "load-forward: FORWARD_LINK_RTT must be whole milliseconds (1ms), got \"$FORWARD_LINK_RTT\"" >&2
	exit 1
	;;
esac
cat >"$state/entry-policies.yaml" <<YAML
apiVersion: multicluster.agones.dev/v1
kind: GameServerAllocationPolicy
metadata: {name: to-remote, namespace: default, labels: {route: bench}}
spec:
  priority: 1
  weight: 100
  connectionInfo:
    clusterName: remote
    allocationEndpoints: ["$link"]
    secretName: to-remote
    namespace: default
YAML
sh "$(dirname "$0")/../examples/multicluster/secret.sh" "$state/certs" forwarder to-remote >>"$state/entry-policies.yaml"
start entry "$state/empty.yaml" "$state/entry-policies.yaml" ${on_entry[@]+"${on_entry[@]}"}
entry=$addr entry_pid=$pid
entries=("$entry")
second=()
if [[ -n ${FORWARD_B_QM:-}${FORWARD_B_FLAGS:-} ]]; then
	serve_qm=${FORWARD_B_QM:-$qm} serve_flags=${FORWARD_B_FLAGS:-}
	start entry-b "$state/empty.yaml" "$state/entry-policies.yaml" ${on_entry[@]+"${on_entry[@]}"}
	serve_qm= serve_flags=
	entries+=("$addr")
	second=(--target "forwarded-b=$addr")
	[[ ${FORWARD_CPU:-} == b ]] && entry_pid=$pid
fi
floor=()
case ${FORWARD_FLOOR:-} in
"" | 0) ;;
1)
	${on_entry[@]+"${on_entry[@]}"} "$qm" relay --addr 127.0.0.1:0 --to "$remote" --certs-dir "$state/certs" --identity forwarder \
		>"$state/relay.ready" 2>"$state/relay.log" &
	pids+=($!)
	for _ in $(seq 100); do [[ -s $state/relay.ready ]] && break; sleep 0.1; done
	[[ -s $state/relay.ready ]] || { echo "load-forward: the relay did not start in 10s: $(cat "$state/relay.log")" >&2; exit 1; }
	relay=$(sed -n 's/^relay: \([^ ]*\) -> .*/\1/p' "$state/relay.ready")
	floor=(--target "relay=$relay" --target "roundtrip-entry=$entry" --echo roundtrip-entry)
	;;
*)
	echo "load-forward: FORWARD_FLOOR must be 1, 0 or empty, got \"$FORWARD_FLOOR\"" >&2
	exit 1
	;;
esac

cat >"$state/request.json" <<'JSON'
{"multiClusterSetting": {"enabled": true, "policySelector": {"matchLabels": {"route": "bench"}}},
 "selectors": [{"matchLabels": {"mode": "load"}}]}
JSON
# One allocation through each first: the label key's index and the
# entry's client to the remote exist before the clock starts.
for a in "$remote" "${entries[@]}"; do
	"$qm" allocate --addr "$a" --certs-dir "$state/certs" --identity caller --policy-selector route=bench \
		--selector mode=load --timeout 2m >/dev/null
done

mkdir -p "$outdir"
cmd=(${on_load[@]+"${on_load[@]}"} "$qm" load --certs-dir "$state/certs" --identity caller
	--target "direct=$remote" --target "forwarded=$entry" ${second[@]+"${second[@]}"} --target "roundtrip=$remote" --echo roundtrip ${floor[@]+"${floor[@]}"} --reference direct
	--request "$state/request.json" --release=false --warmup 1s --expect 'errors==0'
	--server-pid "$entry_pid" --out "$outdir/forward-$mode.json" "$@")
echo "+ ${cmd[*]}"
# (An earlier run's result must not pass for this one's below.)
rm -f "$outdir/forward-$mode.json"
status=0
"${cmd[@]}" || status=$?
if [[ ${#floor[@]} -gt 0 && -s $outdir/forward-$mode.json ]]; then
	# qm load's exit status stands, whatever becomes of the arithmetic.
	python3 - "$outdir/forward-$mode.json" <<'PY' || echo "load-forward: could not work out the lone request's figures" >&2
import json, sys
p50 = {t["name"]: t["latency"]["p50Ms"] * 1000 for t in json.load(open(sys.argv[1]))["targets"]}
d, f, r, rt, rte = (p50[n] for n in ("direct", "forwarded", "relay", "roundtrip", "roundtrip-entry"))
print()
print("lone request, p50 (excess: over direct + one round trip; the target is <= 0):")
for name, v in (("forwarded", f), ("relay (the floor)", r)):
	print(f"  {name:18} {v:4.0f} us   excess {v - d - rt:+4.0f} us (round trip to the remote), {v - d - rte:+4.0f} us (to the entry)")
print(f"  direct {d:.0f} us, round trip to the remote {rt:.0f} us, to the entry {rte:.0f} us")
print(f"  the entry's own work, forwarded - relay: {f - r:+.0f} us")
PY
fi
exit "$status"
