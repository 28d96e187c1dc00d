#!/bin/sh
# runc-capwrap: runc, for hosts whose capability bounding set lacks some
# capabilities (restricted VMs drop CAP_SYS_RESOURCE, for one). A
# --privileged container asks for every capability, and runc refuses to
# start a process with one it cannot have ("unable to apply caps:
# operation not permitted"). This wrapper removes from the OCI spec (the
# bundle's config.json on create/run, the --process file on exec) every
# capability outside this process's own bounding set, then runs the real
# runc with the same arguments. On a host that lacks nothing it changes
# nothing.
#
# Installed by hack/kind/setup-host.sh as Docker's default runtime, and in
# the offline kind node image as containerd's runc, since the node
# inherits the same bounding set. Needs jq and capsh (libcap2-bin).
set -eu

real=${QM_REAL_RUNC:-/usr/sbin/runc}
[ -x "$real" ] || real=/usr/bin/runc

# The names this process may hold, upper-cased as OCI specs spell them.
# QM_CAPWRAP_BOUNDING stands in for the bounding set (hex, as
# /proc/self/status prints it) where a test needs one it does not have.
bounding=${QM_CAPWRAP_BOUNDING:-$(awk '/^CapBnd:/ {print $2}' /proc/self/status)}
allowed=$(capsh --decode="$bounding" | sed 's/^[^=]*=//' | tr 'a-z' 'A-Z')

strip() {
	[ -f "$1" ] || return 0
	tmp="$1.capwrap.$$"
	jq --arg allowed "$allowed" '
		($allowed | split(",")) as $ok
		| def keep: map(select(. as $c | $ok | index($c)));
		  if .process? then .process.capabilities |= (if . then map_values(keep) else . end)
		  elif .capabilities? then .capabilities |= map_values(keep)
		  else . end' "$1" >"$tmp"
	mv "$tmp" "$1"
}

# Find the command and its spec file among runc's arguments.
cmd= bundle= process= prev=
for a in "$@"; do
	case "$prev" in
	--bundle | -b) bundle=$a ;;
	--process | -p) process=$a ;;
	esac
	case "$a" in
	--bundle=*) bundle=${a#--bundle=} ;;
	--process=*) process=${a#--process=} ;;
	esac
	if [ -z "$cmd" ]; then
		case "$a" in
		create | run | exec) cmd=$a ;;
		esac
	fi
	prev=$a
done

case "$cmd" in
create | run) strip "${bundle:-.}/config.json" ;;
exec) [ -n "$process" ] && strip "$process" ;;
esac
exec "$real" "$@"
