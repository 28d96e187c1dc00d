#!/usr/bin/env bash
# Runs the allocator demo; see mk/demo.mk. Usage: mk/demo.sh path/to/qm
set -euo pipefail

qm=${1:?usage: demo.sh path/to/qm}
state=$(mktemp -d "${TMPDIR:-/tmp}/qm-demo.XXXXXX")
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
		cat "$state/server.log" >&2
	fi
	rm -rf "$state"
	exit "$status"
}
trap cleanup EXIT INT TERM

# step prints a heading and the command, runs it, and keeps its output in
# $state/last.out so a later step can check what it claimed.
step() {
	printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "${*:2}"
	"${@:2}" | tee "$state/last.out"
	return "${PIPESTATUS[0]}"
}
server_name() { sed -n 's/.*"gameServerName": *"\([^"]*\)".*/\1/p' "$state/last.out" | head -n 1; }

# Port 0: the system picks free ports; the server writes them to ready.json.
"$qm" serve --addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --state-dir "$state" \
	--ready-file "$state/ready.json" --seed 42 >"$state/banner.txt" 2>"$state/server.log" &
server_pid=$!
for _ in $(seq 100); do
	[[ -s $state/ready.json ]] && break
	kill -0 "$server_pid" 2>/dev/null || { echo "demo: the server exited" >&2; exit 1; }
	sleep 0.1
done
[[ -s $state/ready.json ]] || { echo "demo: the server did not start in 10s" >&2; exit 1; }
cat "$state/banner.txt"

field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" "$state/ready.json"; }
addr=$(field grpc)
http=$(field http)
certs="$state/certs"

step "gRPC: a deathmatch server in namespace default" \
	"$qm" allocate --addr "$addr" --certs-dir "$certs" --identity dev --selector mode=deathmatch
step "REST: a lobby, taking a room and a player slot" \
	"$qm" allocate --rest --addr "$addr" --certs-dir "$certs" --identity alice \
	--selector mode=lobby --counter rooms=Increment:1 --list-add players=alice
alice_lobby=$(server_name)
# Re-allocation (selector state Allocated) only ever matches the caller's own
# servers, so alice gets her lobby back while bob, asking the same way, is
# given a Ready lobby of his own rather than alice's running session.
step "gRPC: alice again: her own lobby if it has room (Allocated first), else a Ready one" \
	"$qm" allocate --addr "$addr" --certs-dir "$certs" --identity alice \
	--selector mode=lobby --state Allocated --selector mode=lobby --counter rooms=Increment:1 --list-add players=alice2
[[ $(server_name) == "$alice_lobby" ]] || { echo "demo: alice was given $(server_name), not her lobby $alice_lobby" >&2; exit 1; }
echo "(the same server as before: $alice_lobby)"
step "gRPC: bob asks the same way: alice's lobby is not his, so he gets a Ready one" \
	"$qm" allocate --addr "$addr" --certs-dir "$certs" --identity bob \
	--selector mode=lobby --state Allocated --selector mode=lobby --counter rooms=Increment:1 --list-add players=bob
[[ $(server_name) != "$alice_lobby" ]] || { echo "demo: bob was given alice's lobby $alice_lobby" >&2; exit 1; }
echo "(another server: $(server_name))"
step "REST: Distributed, namespace ranked, with a label on the server" \
	"$qm" allocate --rest --addr "$addr" --certs-dir "$certs" --identity dev \
	--namespace ranked --scheduling Distributed --selector region=eu --label match=demo-1

set +e
step "gRPC: a namespace with no fleets (fails: ResourceExhausted, exit code 8)" \
	"$qm" allocate --addr "$addr" --certs-dir "$certs" --namespace empty
code=$?
set -e
[[ $code -eq 8 ]] || { echo "demo: expected exit code 8, got $code" >&2; exit 1; }

step "gRPC: alice's allocations (Quartermaster's List)" \
	"$qm" list --addr "$addr" --certs-dir "$certs" --identity alice

printf '\n\033[1m== metrics\033[0m\n'
if command -v curl >/dev/null; then
	curl -fsS "http://$http/metrics" | grep '^qm_allocator_allocations_total' || true
fi

printf '\n\033[1m== stopping the server (SIGTERM)\033[0m\n'
kill -TERM "$server_pid"
wait "$server_pid"
server_pid=
tail -n 2 "$state/server.log"
echo "demo: ok"
