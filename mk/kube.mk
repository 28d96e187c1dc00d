# Real Kubernetes control-plane binaries for the integration tests:
# etcd, kube-apiserver and kubectl, built from Go modules under tools/ (see
# docs/local-clusters.md; there is no Docker here for kind).
#
# A cold kube-apiserver build takes minutes, so each binary is cached in
# $(BIN) under a name keyed by its version and a hash of the tools module that
# builds it (go.mod, go.sum, main.go); bin/<name> is a symlink to it. A warm
# `make test` therefore never rebuilds, and changing the tools module (or the
# version) rebuilds exactly once. The hash is of file contents, not mtimes, so
# a fresh checkout or a touched file does not trigger an 8-minute rebuild.
#
# The three binaries are built one after another, never at once: they share
# most of their dependencies and the build cache, and on 2 cores parallel
# builds only thrash. `make -j` is kept sequential by the order-only
# prerequisites below.

ETCD_VERSION := v3.6.8
KUBE_VERSION := v1.36.3
KUBE_MAJOR   := 1
KUBE_MINOR   := 36

# tools_hash DIR: short content hash of the files that decide what DIR builds.
tools_hash = $(shell cat $(wildcard $(1)/go.mod $(1)/go.sum $(1)/*.go $(1)/*/*.go) 2>/dev/null | sha256sum | cut -c1-8)

ETCD_HASH := $(call tools_hash,tools/etcd)
KUBE_HASH := $(call tools_hash,tools/kube)

ETCD_BIN           := $(BIN)/etcd-$(ETCD_VERSION)-$(ETCD_HASH)
KUBE_APISERVER_BIN := $(BIN)/kube-apiserver-$(KUBE_VERSION)-$(KUBE_HASH)
KUBECTL_BIN        := $(BIN)/kubectl-$(KUBE_VERSION)-$(KUBE_HASH)

# kubectl refuses a server whose version it cannot parse, and both kubectl
# (client-go's version) and the server (component-base's) report their own.
KUBE_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(KUBE_MAJOR) \
	-X k8s.io/component-base/version.gitMinor=$(KUBE_MINOR) \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=$(KUBE_MAJOR) \
	-X k8s.io/client-go/pkg/version.gitMinor=$(KUBE_MINOR) \
	-X k8s.io/client-go/pkg/version.gitTreeState=clean

# The tools modules must build on their own, whatever go.work or flags the
# caller has around.
TOOLS_GO := GOWORK=off GOFLAGS=-mod=readonly $(GO)

.PHONY: kube-bins clean-kube-bins

## kube-bins: etcd, kube-apiserver and kubectl in bin/ (cached).
kube-bins: $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kubectl

$(ETCD_BIN):
	@mkdir -p $(BIN)
	@rm -f $(BIN)/etcd-v*
	cd tools/etcd && $(TOOLS_GO) build -trimpath -buildvcs=false -ldflags '-s -w' -o $@.tmp . && mv $@.tmp $@

$(KUBE_APISERVER_BIN): | $(ETCD_BIN)
	@mkdir -p $(BIN)
	@rm -f $(BIN)/kube-apiserver-v*
	cd tools/kube && $(TOOLS_GO) build -trimpath -buildvcs=false -ldflags '$(KUBE_LDFLAGS)' -o $@.tmp ./kube-apiserver && mv $@.tmp $@

$(KUBECTL_BIN): | $(KUBE_APISERVER_BIN)
	@mkdir -p $(BIN)
	@rm -f $(BIN)/kubectl-v*
	cd tools/kube && $(TOOLS_GO) build -trimpath -buildvcs=false -ldflags '$(KUBE_LDFLAGS)' -o $@.tmp ./kubectl && mv $@.tmp $@

# The stable names are symlinks, relative so bin/ can move. `ln -sfn` keeps
# them pointing at the binary for the current key.
$(BIN)/etcd: $(ETCD_BIN)
	ln -sfn $(notdir $<) $@

$(BIN)/kube-apiserver: $(KUBE_APISERVER_BIN)
	ln -sfn $(notdir $<) $@

$(BIN)/kubectl: $(KUBECTL_BIN)
	ln -sfn $(notdir $<) $@

clean-kube-bins:
	rm -f $(BIN)/etcd $(BIN)/etcd-v* $(BIN)/kube-apiserver $(BIN)/kube-apiserver-v* $(BIN)/kubectl $(BIN)/kubectl-v*

TEST_DEPS += $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kubectl

# `make bin/kube-apiserver` as typed at the shell names a relative path, while
# the rules above use $(BIN), which is absolute: tie the two together.
ifneq ($(BIN),bin)
bin/etcd: $(BIN)/etcd
bin/kube-apiserver: $(BIN)/kube-apiserver
bin/kubectl: $(BIN)/kubectl
endif
