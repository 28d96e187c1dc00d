#!/usr/bin/env bash
# setup-host.sh: Docker for kind on a restricted Debian host with no
# container registry, such as the machines this project is built on.
#
# Users with an ordinary Docker (Docker Desktop, Docker Engine from
# docker.com, a CI runner) need none of this: kind works there as it is.
# This script is for a Debian 12 host where
#   - Docker is not installed and nothing can be pulled: Debian's
#     docker.io is installed from the configured apt sources;
#   - the capability bounding set lacks capabilities that --privileged
#     containers (every kind node) ask for, so runc fails with "unable to
#     apply caps": runc-capwrap.sh, beside this script, becomes Docker's
#     default runtime and removes what this host cannot grant;
#   - there is no init system to start daemons: dockerd is started in the
#     background, its log in /var/log/qm-dockerd.log.
# It is idempotent: run it again and it changes only what is missing
# (after a reboot, it starts dockerd again).
#
#   sudo hack/kind/setup-host.sh           # install, configure, start
#   sudo hack/kind/setup-host.sh --check   # say what is missing, change nothing
#
# Afterwards: make kind-node-image (the offline node and qm images), then
# make e2e-multicluster PROVIDER=kind. docs/local-clusters.md has the times.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
wrapper=/usr/local/libexec/qm-kind/runc-capwrap
runtime=qm-capwrap
daemon_json=/etc/docker/daemon.json
log=/var/log/qm-dockerd.log
packages=(docker.io jq libcap2-bin debootstrap)

check_only=
case "${1:-}" in
--check) check_only=1 ;;
"") ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

say() { echo "setup-host: $*"; }
missing=0
todo() { say "missing: $*"; missing=1; }

if [ -z "$check_only" ] && [ "$(id -u)" != 0 ]; then
	echo "setup-host: run as root (it installs packages and starts dockerd)" >&2
	exit 1
fi

# The daemon config: the wrapper as default runtime, the rest Docker's own
# defaults. An existing file is kept if it already says this, else moved
# aside (daemon.json.qm-bak) so nothing of the owner's is lost silently.
want_config=$(jq -n --arg rt "$runtime" --arg path "$wrapper" \
	'{"runtimes": {($rt): {"path": $path}}, "default-runtime": $rt}')

install_packages() {
	local need=()
	for p in "${packages[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
	done
	if [ ${#need[@]} -eq 0 ]; then return; fi
	if [ -n "$check_only" ]; then todo "packages ${need[*]} (apt-get install ${need[*]})"; return; fi
	say "installing ${need[*]} from the configured apt sources"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
}

install_wrapper() {
	if cmp -s "$here/runc-capwrap.sh" "$wrapper"; then return; fi
	if [ -n "$check_only" ]; then todo "the runc wrapper at $wrapper"; return; fi
	say "installing the runc wrapper at $wrapper"
	install -D -m 0755 "$here/runc-capwrap.sh" "$wrapper"
}

write_config() {
	local have=
	if [ -f "$daemon_json" ]; then
		have=$(jq -S . "$daemon_json" 2>/dev/null || true)
	fi
	if [ -n "$have" ] && [ "$(jq -S --argjson want "$want_config" '. as $h | $want | to_entries | all(.value == $h[.key])' <<<"$have")" = true ]; then
		return 1 # already says what we want
	fi
	if [ -n "$check_only" ]; then todo "$daemon_json with runtime $runtime as default"; return 1; fi
	mkdir -p "$(dirname "$daemon_json")"
	if [ -f "$daemon_json" ]; then
		say "merging into $daemon_json (the old one is $daemon_json.qm-bak)"
		cp "$daemon_json" "$daemon_json.qm-bak"
		jq --argjson want "$want_config" '. * $want' "$daemon_json.qm-bak" >"$daemon_json"
	else
		say "writing $daemon_json"
		echo "$want_config" >"$daemon_json"
	fi
	return 0
}

dockerd_pid() { pgrep -x dockerd | head -n1 || true; }

start_dockerd() {
	local changed=$1 pid
	pid=$(dockerd_pid)
	if [ -n "$pid" ] && [ "$changed" = 0 ] && docker info >/dev/null 2>&1; then
		return
	fi
	if [ -n "$check_only" ]; then
		if [ -z "$pid" ]; then todo "a running dockerd"; else todo "a dockerd that answers (docker info)"; fi
		return
	fi
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		say "restarting docker through systemd"
		systemctl restart docker
	else
		if [ -n "$pid" ]; then
			say "stopping dockerd (pid $pid) to apply the new config"
			kill "$pid"
			for _ in $(seq 50); do [ -z "$(dockerd_pid)" ] && break; sleep 0.2; done
		fi
		say "starting dockerd (log: $log)"
		setsid nohup dockerd >>"$log" 2>&1 </dev/null &
	fi
	for _ in $(seq 100); do
		docker info >/dev/null 2>&1 && break
		sleep 0.3
	done
	docker info >/dev/null 2>&1 || { echo "setup-host: dockerd did not answer; see $log" >&2; exit 1; }
}

# A privileged container is what kind starts; if the wrapper does its job
# it runs. The image is made here from nothing (no pull): /bin/true and
# its libraries, enough for runc to apply the capabilities and exit.
smoke_test() {
	[ -n "$check_only" ] && return
	if ! docker image inspect qm-capwrap-probe >/dev/null 2>&1; then
		local d
		d=$(mktemp -d)
		mkdir -p "$d/bin"
		cp /bin/true "$d/bin/true"
		for lib in $(ldd /bin/true | grep -o '/[^ ]*'); do install -D "$lib" "$d$lib"; done
		tar -C "$d" -c . | docker import - qm-capwrap-probe >/dev/null
		rm -rf "$d"
	fi
	if docker run --rm --privileged --network none qm-capwrap-probe /bin/true 2>/tmp/qm-capwrap-probe.err; then
		say "a --privileged container runs"
	else
		echo "setup-host: a --privileged container fails: $(cat /tmp/qm-capwrap-probe.err)" >&2
		exit 1
	fi
}

install_packages
if [ -z "$check_only" ] || command -v jq >/dev/null; then
	install_wrapper
	changed=0
	write_config && changed=1
	if command -v dockerd >/dev/null; then
		start_dockerd "$changed"
	else
		todo "dockerd (package docker.io)"
	fi
	smoke_test
fi
if [ -n "$check_only" ]; then
	[ "$missing" = 0 ] && say "nothing missing"
	exit "$missing"
fi
say "done: $(docker version --format 'Docker {{.Server.Version}}, {{.Server.Os}}/{{.Server.Arch}}') with $runtime as the default runtime"
