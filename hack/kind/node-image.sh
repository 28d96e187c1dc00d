#!/usr/bin/env bash
# node-image.sh: assembles the offline kind node image from parts built
# before it (mk/kind.mk builds them; `make kind-node-image` runs this):
# a Debian root file system from debootstrap, this directory's node/ files
# (entrypoint, containerd config, kubelet units), kubelet, kubeadm and
# kubectl, the CNI plugins, and the control plane's images made with
# layerimage and preloaded into containerd at the node's first boot.
# Nothing is pulled and nothing is needed from a registry. The image is
# labelled with a hash of every input: when Docker already has an image of
# that name and label, nothing is done.
#
# Every input comes from the environment (all required):
#   NODE_IMAGE        the image to make, e.g. quartermaster.dev/kind-node:v1.36.3
#   KUBE_VERSION      e.g. v1.36.3 (kind reads it from /kind/version)
#   ROOTFS            the debootstrap tree (hack/kind/node-packages.txt)
#   KUBE_BINS         dir with kubelet kubeadm kube-proxy kube-scheduler kube-controller-manager
#   KUBE_APISERVER KUBECTL ETCD COREDNS   binaries
#   CNI_BINS          dir with ptp host-local loopback portmap bridge
#   LAYERIMAGE        tools/kindnode/layerimage built
#   PAUSE_C           pause.c from the k8s.io/kubernetes module
#   ETCD_TAG COREDNS_TAG PAUSE_TAG   the tags kubeadm asks for
#   WORK              a scratch directory (emptied)
#
# With --key it prints the inputs' key (the label's value) and exits.
set -euo pipefail
shopt -s inherit_errexit # a missing input fails the key, not leaves it out
here=$(cd "$(dirname "$0")" && pwd)
print_key=
case "${1:-}" in
--key) print_key=1 ;;
"") ;;
*) echo "usage: $0 [--key]" >&2; exit 2 ;;
esac
for v in NODE_IMAGE KUBE_VERSION ROOTFS KUBE_BINS KUBE_APISERVER KUBECTL ETCD COREDNS CNI_BINS LAYERIMAGE PAUSE_C ETCD_TAG COREDNS_TAG PAUSE_TAG WORK; do
	if [ -z "${!v:-}" ]; then echo "node-image: $v is not set" >&2; exit 2; fi
done
say() { echo "node-image: $*"; }
label=dev.quartermaster.kind-node.inputs

# The key: every file that goes in, by content.
key=$( {
	echo "$NODE_IMAGE $KUBE_VERSION $ETCD_TAG $COREDNS_TAG $PAUSE_TAG"
	cat "$ROOTFS/.qm-packages"
	cd "$here" && find node node-packages.txt node-image.sh runc-capwrap.sh -type f | sort | xargs sha256sum
	sha256sum "$KUBE_BINS"/kubelet "$KUBE_BINS"/kubeadm "$KUBE_BINS"/kube-proxy "$KUBE_BINS"/kube-scheduler \
		"$KUBE_BINS"/kube-controller-manager "$KUBE_APISERVER" "$KUBECTL" "$ETCD" "$COREDNS" "$CNI_BINS"/* "$LAYERIMAGE" "$PAUSE_C" | cut -d' ' -f1
} | sha256sum | cut -c1-16)
if [ -n "$print_key" ]; then
	echo "$key"
	exit 0
fi
if [ "$(docker image inspect --format "{{index .Config.Labels \"$label\"}}" "$NODE_IMAGE" 2>/dev/null)" = "$key" ]; then
	say "$NODE_IMAGE is up to date (inputs $key)"
	exit 0
fi
start=$(date +%s)
rm -rf "$WORK"
mkdir -p "$WORK/images"
stage=$WORK/rootfs

# pause: the sandbox's one process, static so its image needs nothing else.
gcc -Os -static -o "$WORK/pause" "$PAUSE_C"
strip "$WORK/pause"

image() { # archive tag layerimage-args...
	local out=$WORK/images/$1.tar tag=$2
	shift 2
	"$LAYERIMAGE" -o "$out" -tag "$tag" "$@"
}
# binimage NAME TAG BINARY [layerimage flags]: an image of one program in
# /usr/local/bin, with the shared libraries it loads if it has any, taken
# from the node's Debian: mk/kube.mk's binaries are built with cgo and need
# the glibc they were linked against, which that Debian has.
binimage() {
	local name=$1 tag=$2 bin=$3 tree=$WORK/files-$1
	shift 3
	install -D -m 0755 "$bin" "$tree/usr/local/bin/$name"
	cp "$bin" "$ROOTFS/tmp/qm-ldd-$name"
	if ldd "$bin" >/dev/null 2>&1; then
		for lib in $(chroot "$ROOTFS" ldd "/tmp/qm-ldd-$name" | grep -o '/[^ ]*' | sort -u); do
			install -D "$ROOTFS$(chroot "$ROOTFS" readlink -f "$lib")" "$tree$lib"
		done
	fi
	rm -f "$ROOTFS/tmp/qm-ldd-$name"
	image "$name" "$tag" "$@" /=$tree
}
reg=registry.k8s.io
image pause "$reg/pause:$PAUSE_TAG" -entrypoint /pause /pause="$WORK/pause"
binimage etcd "$reg/etcd:$ETCD_TAG" "$ETCD"
binimage kube-apiserver "$reg/kube-apiserver:$KUBE_VERSION" "$KUBE_APISERVER"
binimage kube-controller-manager "$reg/kube-controller-manager:$KUBE_VERSION" "$KUBE_BINS/kube-controller-manager"
binimage kube-scheduler "$reg/kube-scheduler:$KUBE_VERSION" "$KUBE_BINS/kube-scheduler"
image coredns "$reg/coredns/coredns:$COREDNS_TAG" -entrypoint /coredns /coredns="$COREDNS"

# kube-proxy programs iptables: its image carries the nft-based iptables
# of the node's Debian and the libraries it links.
proxy=$WORK/kube-proxy-files
mkdir -p "$proxy/usr/local/bin"
cp "$KUBE_BINS/kube-proxy" "$proxy/usr/local/bin/"
for f in /usr/sbin/xtables-nft-multi /usr/sbin/conntrack /usr/sbin/nft; do
	install -D "$ROOTFS$f" "$proxy$f"
	for lib in $(chroot "$ROOTFS" ldd "$f" | grep -o '/[^ ]*' | sort -u); do
		install -D "$ROOTFS$(chroot "$ROOTFS" readlink -f "$lib")" "$proxy$lib"
	done
done
# iptables' match and target extensions, and the names of protocols.
xt=$(cd "$ROOTFS" && find usr/lib -maxdepth 2 -type d -name xtables | head -n1)
[ -n "$xt" ] && mkdir -p "$proxy/$xt" && cp -a "$ROOTFS/$xt/." "$proxy/$xt/"
for f in /etc/protocols /etc/services /etc/ethertypes; do
	[ -f "$ROOTFS$f" ] && install -D -m 0644 "$ROOTFS$f" "$proxy$f"
done
# The extensions load libraries of their own (libm, for one).
if [ -n "$xt" ]; then
	for so in "$ROOTFS/$xt"/*.so; do
		for lib in $(chroot "$ROOTFS" ldd "/$xt/$(basename "$so")" 2>/dev/null | grep -o '/[^ ]*' | sort -u); do
			[ -e "$proxy$lib" ] || install -D "$ROOTFS$(chroot "$ROOTFS" readlink -f "$lib")" "$proxy$lib"
		done
	done
fi
for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
	ln -sf xtables-nft-multi "$proxy/usr/sbin/$t"
done
image kube-proxy "$reg/kube-proxy:$KUBE_VERSION" /=$proxy

say "assembling the node's root file system"
cp -a "$ROOTFS" "$stage"
cp -a "$here/node/." "$stage/"
install -m 0755 "$KUBE_BINS/kubelet" "$KUBE_BINS/kubeadm" "$KUBECTL" "$stage/usr/bin/"
[ "$(basename "$KUBECTL")" = kubectl ] || mv "$stage/usr/bin/$(basename "$KUBECTL")" "$stage/usr/bin/kubectl"
mkdir -p "$stage/opt/cni/bin" "$stage/kind/images" "$stage/etc/kubernetes/manifests"
install -m 0755 "$CNI_BINS"/* "$stage/opt/cni/bin/"
install -D -m 0755 "$here/runc-capwrap.sh" "$stage/usr/local/libexec/qm-kind/runc-capwrap"
cp "$WORK"/images/*.tar "$stage/kind/images/"
echo "$KUBE_VERSION" >"$stage/kind/version"
# Services: containerd (Debian enables it), the preload, the kubelet; the
# ones that make no sense in a container are masked, and /etc/machine-id
# is made at each boot by the entrypoint.
wants=$stage/etc/systemd/system/multi-user.target.wants
mkdir -p "$wants"
ln -sf /etc/systemd/system/kubelet.service "$wants/kubelet.service"
ln -sf /etc/systemd/system/qm-kind-preload.service "$wants/qm-kind-preload.service"
ln -sf /lib/systemd/system/containerd.service "$wants/containerd.service"
for unit in systemd-binfmt.service getty.target console-getty.service systemd-timesyncd.service e2scrub_reap.service apt-daily.timer apt-daily-upgrade.timer; do
	ln -sf /dev/null "$stage/etc/systemd/system/$unit"
done
echo "ReadKMsg=no" >>"$stage/etc/systemd/journald.conf"
rm -f "$stage/etc/machine-id" "$stage/var/lib/dbus/machine-id"
: >"$stage/etc/resolv.conf"
rm -rf "$stage/var/cache/apt/archives/"*.deb "$stage/var/lib/apt/lists/"*

say "importing into Docker as $NODE_IMAGE"
previous=$(docker image inspect --format '{{.Id}}' "$NODE_IMAGE" 2>/dev/null || true)
tar -C "$stage" --numeric-owner -c . | docker import \
	--change 'ENV container=docker' \
	--change "LABEL $label=$key" \
	--change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
	- "$NODE_IMAGE" >/dev/null
rm -rf "$WORK"
# The image this one replaces has no name left: remove it, unless a
# container (a node still up) uses it.
if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect --format '{{.Id}}' "$NODE_IMAGE")" ]; then
	docker image rm "$previous" >/dev/null 2>&1 || say "the image it replaces ($previous) is still in use; remove it later with docker image rm"
fi
say "$NODE_IMAGE built in $(( $(date +%s) - start ))s (inputs $key)"
