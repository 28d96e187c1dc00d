#!/usr/bin/env bash
# rootfs.sh: the Debian root file system of the offline kind node image,
# from debootstrap and the configured mirror, with the packages listed in
# PACKAGES (one a line). Needs root and debootstrap.
#
#   hack/kind/rootfs.sh SUITE MIRROR PACKAGES DEST
#   hack/kind/rootfs.sh --remove DIR   # unmount what is under DIR, remove it
#
# The tree is built in DEST.tmp and moved to DEST when complete, with a
# copy of PACKAGES as DEST/.qm-packages (what hack/kind/node-image.sh keys
# on). debootstrap mounts /proc and /sys inside the tree while it works;
# whatever is still mounted under DEST.tmp is unmounted when this script
# ends, however it ends, and before any old tree is removed, so neither
# rm nor a walk of the directories (go's ./... in the repository) ever
# reaches the host's /proc. mk/kind.mk names DEST with a leading "_",
# which go's package patterns skip.
set -euo pipefail

# unmount_under DIR: every mount point at or below DIR, deepest first.
unmount_under() {
	local dir
	dir=$(realpath -m "$1")
	awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts |
		sort -r | while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m"
	done
}

if [ "${1:-}" = --remove ] && [ $# -eq 2 ]; then
	unmount_under "$2"
	rm -rf "$2"
	exit 0
fi
if [ $# -ne 4 ]; then
	echo "usage: $0 SUITE MIRROR PACKAGES DEST, or $0 --remove DIR" >&2
	exit 2
fi
suite=$1 mirror=$2 packages=$3 dest=$4
tmp=$dest.tmp
trap 'unmount_under "$tmp"' EXIT

unmount_under "$tmp"
rm -rf "$tmp"
nice -n 10 debootstrap --variant=minbase --include="$(paste -sd, "$packages")" "$suite" "$tmp" "$mirror"
unmount_under "$tmp"
cp "$packages" "$tmp/.qm-packages"
unmount_under "$dest"
rm -rf "$dest"
mv "$tmp" "$dest"
