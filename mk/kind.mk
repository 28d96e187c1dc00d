# The offline kind images, for hosts with Docker but no registry (see
# hack/kind/setup-host.sh and docs/local-clusters.md). Where a registry is
# reachable none of this is needed: kind pulls kindest/node itself and the
# qm image builds from the Dockerfile.
#
#   make kind-node-image   the kind node image for $(KUBE_VERSION), offline
#   make kind-qm-image     the qm image as an archive, offline
#
# Every part is cached by its inputs like mk/kube.mk's binaries: the
# Kubernetes binaries by version and a hash of tools/kindnode/kube, the CNI
# plugins and layerimage by a hash of tools/kindnode, CoreDNS by its
# module, the Debian tree by the package list; the node image itself is
# labelled with a hash of all of them (hack/kind/node-image.sh), so a
# second run only checks. The Go builds run niced and one after another.

# Deferred (=) where they name mk/kube.mk's variables: this file is read
# before it.
KIND_NODE_IMAGE_OFFLINE  = quartermaster.dev/kind-node:$(KUBE_VERSION)
KIND_QM_ARCHIVE         := $(BIN)/kindnode/qm-image.tar
DEBIAN_SUITE  ?= bookworm
DEBIAN_MIRROR ?= http://deb.debian.org/debian

# The tags kubeadm $(KUBE_VERSION) asks for (kubeadm config images list).
KIND_ETCD_TAG    := 3.6.8-0
KIND_COREDNS_TAG := v1.14.2
KIND_PAUSE_TAG   := 3.10.2

# kind_hash DIR: short content hash of the files that decide what DIR
# builds (tools/kindnode/kube's go.mod pins the Kubernetes version); tests
# build nothing that goes into an image, so they are left out.
kind_hash = $(shell cat $(filter-out %_test.go,$(wildcard $(1)/go.mod $(1)/go.sum $(1)/*.go $(1)/*/*.go)) 2>/dev/null | sha256sum | cut -c1-8)

KINDNODE         := $(BIN)/kindnode
KINDNODE_HASH    := $(call kind_hash,tools/kindnode)
KINDNODE_KUBE    := $(KINDNODE)/kube-$(call kind_hash,tools/kindnode/kube)
KINDNODE_CNI     := $(KINDNODE)/cni-$(KINDNODE_HASH)
KINDNODE_LAYER   := $(KINDNODE)/layerimage-$(KINDNODE_HASH)
KINDNODE_COREDNS := $(KINDNODE)/coredns-$(KIND_COREDNS_TAG)-$(call kind_hash,tools/kindnode/coredns)
# The Debian tree and the image's scratch directory start with "_": go's
# ./... skips such directories, so a build of the repository never walks
# a root file system under bin/.
KINDNODE_ROOTFS  := $(KINDNODE)/_rootfs-$(DEBIAN_SUITE)-$(shell sha256sum hack/kind/node-packages.txt | cut -c1-8)
KIND_NICE_GO     := CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly nice -n 10 $(GO) build -trimpath -buildvcs=false

KINDNODE_KUBE_CMDS := kubeadm kubelet kube-proxy kube-scheduler kube-controller-manager
CNI_PLUGINS := plugins/main/ptp plugins/main/bridge plugins/main/loopback plugins/ipam/host-local plugins/meta/portmap

.PHONY: kind-node-image kind-qm-image clean-kind-images kind-tools-test

## kind-tools-test: the tests of tools/kindnode's programs (a module of its own; part of make test).
kind-tools-test:
	cd tools/kindnode && GOWORK=off GOFLAGS=-mod=readonly $(GO) test -count=1 ./...
TEST_DEPS += kind-tools-test

## kind-node-image: the kind node image for the rigs' Kubernetes, built offline (cached).
kind-node-image: $(KINDNODE_KUBE)/.done $(KINDNODE_CNI)/.done $(KINDNODE_LAYER) $(KINDNODE_COREDNS) \
		$(KINDNODE_ROOTFS)/.qm-packages $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kubectl
	NODE_IMAGE=$(KIND_NODE_IMAGE_OFFLINE) KUBE_VERSION=$(KUBE_VERSION) \
	ROOTFS=$(KINDNODE_ROOTFS) KUBE_BINS=$(KINDNODE_KUBE) CNI_BINS=$(KINDNODE_CNI) \
	KUBE_APISERVER=$(KUBE_APISERVER_BIN) KUBECTL=$(KUBECTL_BIN) ETCD=$(ETCD_BIN) COREDNS=$(KINDNODE_COREDNS) \
	LAYERIMAGE=$(KINDNODE_LAYER) PAUSE_C=$$(cd tools/kindnode/kube && $(TOOLS_GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c \
	ETCD_TAG=$(KIND_ETCD_TAG) COREDNS_TAG=$(KIND_COREDNS_TAG) PAUSE_TAG=$(KIND_PAUSE_TAG) \
	WORK=$(KINDNODE)/_work \
	bash hack/kind/node-image.sh

# The five node binaries one after another (kubelet takes minutes each).
$(KINDNODE_KUBE)/.done:
	@mkdir -p $(KINDNODE)
	@rm -rf $(KINDNODE)/kube-*
	@mkdir -p $(KINDNODE_KUBE)
	cd tools/kindnode/kube && for c in $(KINDNODE_KUBE_CMDS); do \
		echo "building $$c"; \
		$(KIND_NICE_GO) -ldflags '$(KUBE_LDFLAGS)' -o $(KINDNODE_KUBE)/$$c ./$$c || exit 1; \
	done
	touch $@

$(KINDNODE_CNI)/.done: | $(KINDNODE_KUBE)/.done
	@rm -rf $(KINDNODE)/cni-*
	@mkdir -p $(KINDNODE_CNI)
	cd tools/kindnode && for p in $(CNI_PLUGINS); do \
		$(KIND_NICE_GO) -ldflags '-s -w' -o $(KINDNODE_CNI)/$$(basename $$p) github.com/containernetworking/plugins/$$p || exit 1; \
	done
	touch $@

$(KINDNODE_LAYER):
	@mkdir -p $(KINDNODE)
	@rm -f $(KINDNODE)/layerimage-*
	cd tools/kindnode && $(KIND_NICE_GO) -ldflags '-s -w' -o $@ ./layerimage

$(KINDNODE_COREDNS): | $(KINDNODE_CNI)/.done
	@rm -f $(KINDNODE)/coredns-*
	cd tools/kindnode/coredns && $(KIND_NICE_GO) -ldflags '-s -w' -o $@.tmp . && mv $@.tmp $@

# Debian from the configured mirror, with the node's packages; needs root
# and debootstrap (hack/kind/setup-host.sh installs it). hack/kind/rootfs.sh
# leaves nothing mounted, however debootstrap ends.
$(KINDNODE_ROOTFS)/.qm-packages: hack/kind/node-packages.txt
	bash hack/kind/rootfs.sh $(DEBIAN_SUITE) $(DEBIAN_MIRROR) hack/kind/node-packages.txt $(KINDNODE_ROOTFS)
	@for old in $(KINDNODE)/_rootfs-* $(KINDNODE)/rootfs-*; do \
		case "$$old" in $(KINDNODE_ROOTFS)|*'*') ;; *) bash hack/kind/rootfs.sh --remove "$$old" ;; esac; \
	done

## kind-qm-image: the qm image as an archive kind loads (no base image, no Docker build).
kind-qm-image: $(KINDNODE_LAYER)
	@mkdir -p $(KINDNODE)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(KINDNODE)/qm ./cmd/qm
	@sum=$$(cat $(KINDNODE)/qm $(KINDNODE_LAYER) | sha256sum | cut -c1-16); \
	if [ -f $(KIND_QM_ARCHIVE) ] && [ "$$(cat $(KIND_QM_ARCHIVE).inputs 2>/dev/null)" = "$$sum" ]; then \
		echo "$(KIND_QM_ARCHIVE) is up to date"; \
	else \
		$(KINDNODE_LAYER) -o $(KIND_QM_ARCHIVE) -tag quartermaster.dev/qm:dev -entrypoint /qm -user 65532:65532 /qm=$(KINDNODE)/qm && \
		echo "$$sum" > $(KIND_QM_ARCHIVE).inputs && echo "wrote $(KIND_QM_ARCHIVE)"; \
	fi

clean-kind-images:
	rm -rf $(KINDNODE)
	-docker image rm $(KIND_NODE_IMAGE_OFFLINE)
