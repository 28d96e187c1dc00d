#!/usr/bin/env bash
# Starts `qm serve` (memory backend, LOAD_SERVERS Ready servers, development
# certificates) on free loopback ports, runs `qm load` against it from this
# shell's process tree, and stops the server. See mk/load.mk.
# Usage: mk/load.sh path/to/qm OUTDIR NAME [qm load flags...]
set -euo pipefail

qm=${1:?usage: load.sh path/to/qm OUTDIR NAME [flags]}
outdir=${2:?}
name=${3:?}
shift 3
state=$(mktemp -d "${TMPDIR:-/tmp}/qm-load.XXXXXX")
server_pid=

cleanup() {
	status=$?
	if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$server_pid" 2>/dev/null || true
	fi
	if [[ $status -ne 0 && -f $state/server.log ]]; then
		echo "--- server log ---" >&2
		tail -n 20 "$state/server.log" >&2
	fi
	rm -rf "$state"
	exit "$status"
}
trap cleanup EXIT INT TERM

# Nothing is released (below), so the fleet must hold every allocation of
# the run: 64 callers reach about 40,000/s here, and 9s of allocation turns
# plus the warm-up take about 400,000. LOAD_SERVERS sets it (500,000 by default).
servers=${LOAD_SERVERS:-500000}
cat >"$state/fleets.yaml" <<YAML
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 1000
fleets:
- name: load
  replicas: $servers
  labels: {mode: load}
YAML

# LOAD_SERVER_ENV: extra environment for the server alone (GOGC=200, say),
# to measure runtime settings without changing the load generator's.
read -r -a server_env <<<"${LOAD_SERVER_ENV:-}"
env ${server_env[@]+"${server_env[@]}"} "$qm" serve --addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --state-dir "$state" \
	--ready-file "$state/ready.json" --fleets "$state/fleets.yaml" >/dev/null 2>"$state/server.log" &
server_pid=$!
for _ in $(seq 600); do
	[[ -s $state/ready.json ]] && break
	kill -0 "$server_pid" 2>/dev/null || { echo "load: the server exited" >&2; exit 1; }
	sleep 0.1
done
[[ -s $state/ready.json ]] || { echo "load: the server did not start in 60s" >&2; exit 1; }
addr=$(sed -n 's/.*"grpc":"\([^"]*\)".*/\1/p' "$state/ready.json")

mkdir -p "$outdir"
# One allocation first: the server indexes a label key the first time a
# selector names it (the whole fleet sorted once, seconds on a busy
# machine; other requests go on meanwhile, but the ones naming that key
# wait for it), which is not what the run measures.
"$qm" allocate --addr "$addr" --certs-dir "$state/certs" --selector mode=load --timeout 2m >/dev/null
# The fleet is large enough that nothing needs releasing: every request is
# a fresh allocation and the server does nothing else meanwhile (a Release
# per allocation would be charged to the allocations' turns). errors==0
# fails the run if the fleet ran out after all. --server-pid charges the
# server's CPU to the target whose turn it is.
# LOAD_CLIENT: another qm binary for the generator (comparing two server
# builds under the same generator).
cmd=("${LOAD_CLIENT:-$qm}" load --certs-dir "$state/certs" --target "alloc=$addr" --target "echo=$addr" --echo echo
	--selector mode=load --release=false --warmup 1s --server-pid "$server_pid" --expect 'errors==0'
	--out "$outdir/$name.json" "$@")
echo "+ ${cmd[*]}"
"${cmd[@]}"
