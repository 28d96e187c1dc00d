# The multi-cluster e2e tests, by provider.
#
# PROVIDER=local (the default): the Ginkgo suite (e2e/multicluster) on a rig
# of real API servers, fleet agents and allocator replicas from
# e2e/multicluster/testdata's topology, with latency proxies on every link,
# replaying seed 003's policies. `make test` runs it too; this target runs it
# alone, verbosely, and writes the allocations' latencies and cluster shares
# in qm load's result format to bin/e2e-multicluster.json.
#
# PROVIDER=kind: the same Ginkgo suite, unchanged, on kind clusters
# (QM_E2E_PROVIDER=kind; kindcluster/kind: one kind cluster per topology
# cluster, the image built from the Dockerfile, the allocator from
# deploy/allocator.yaml, the fleet agent, policies and Secrets). The specs
# reach either rig through kindcluster/rig.Handle. On kind the links between
# clusters are toxiproxy links in the test process, listening on the
# address kind's pods reach this host by: by default the gateway of kind's
# Docker network (docker network inspect kind); set KIND_HOST_ADDRESS (and
# KIND_LINK_LISTEN, where the links listen) where that is wrong, e.g.
# KIND_HOST_ADDRESS=host.docker.internal on Docker Desktop. An API-server
# restart is `docker restart` of the cluster's node container (on a
# one-node kind cluster its pods restart with it); a Secret rotation goes
# through the API. Results go to bin/e2e-multicluster-kind.json.
# Runs here after the host setup (hack/kind/setup-host.sh, then make
# kind-node-image: no registry is needed; docs/local-clusters.md has the
# steps and times). Where Docker has the offline node image
# (quartermaster.dev/kind-node) and KIND_NODE_IMAGE is not set, the run
# uses it and the qm image from make kind-qm-image; elsewhere kind's own
# node image and the Dockerfile, as on any machine with a registry.
# `make test` checks the kind path dry (every docker/kind/kubectl command
# it would issue, in e2e/multicluster/testdata/kind-dry-run.txt) and
# kindcluster/kind's Exec against fake docker and kind programs.
# Where Docker, the node image or kubectl is missing, it prints
# "SKIPPED", why, and everything missing on one line, and exits 0: a
# missing prerequisite is no failure of the code. A CI job that must run
# on kind sets KIND_REQUIRED=1, which turns the skip into a failure.

PROVIDER ?= local
KIND_REQUIRED ?=
KIND_HOST_ADDRESS ?=
KIND_LINK_LISTEN ?=
KIND_NODE_IMAGE ?=
KIND_IMAGE_ARCHIVE ?=

.PHONY: e2e-multicluster e2e-multicluster-local e2e-multicluster-kind

## e2e-multicluster: the multi-cluster e2e tests (PROVIDER=local, or kind where Docker runs).
e2e-multicluster:
	@case "$(PROVIDER)" in \
	  local|kind) $(MAKE) --no-print-directory e2e-multicluster-$(PROVIDER) ;; \
	  *) echo "e2e-multicluster: PROVIDER=$(PROVIDER): want local or kind"; exit 2 ;; \
	esac

e2e-multicluster-local: $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kubectl
	QM_E2E_OUT=$(BIN)/e2e-multicluster.json $(GO) test -count=1 -timeout 15m -v ./e2e/multicluster/ -args -ginkgo.v
	@echo "results: $(BIN)/e2e-multicluster.json (qm report $(BIN)/e2e-multicluster.json)"

e2e-multicluster-kind: build
	@node="$(KIND_NODE_IMAGE)"; archive="$(KIND_IMAGE_ARCHIVE)"; \
	if [ -z "$$node" ] && docker image inspect $(KIND_NODE_IMAGE_OFFLINE) >/dev/null 2>&1; then \
		node=$(KIND_NODE_IMAGE_OFFLINE); \
		if [ -z "$$archive" ]; then $(MAKE) --no-print-directory kind-qm-image || exit 1; archive=$(KIND_QM_ARCHIVE); fi; \
		echo "e2e-multicluster PROVIDER=kind: the offline images: $$node, $$archive"; \
	fi; \
	export QM_KIND_NODE_IMAGE="$$node" QM_KIND_IMAGE_ARCHIVE="$$archive"; \
	status=0; reason=$$($(BIN)/qm cluster check --provider kind) || status=$$?; \
	if [ $$status = 3 ] && [ -z "$(KIND_REQUIRED)" ]; then echo "e2e-multicluster PROVIDER=kind: SKIPPED (this machine cannot run kind clusters; KIND_REQUIRED=1 makes this a failure): $$reason"; exit 0; fi; \
	if [ $$status = 3 ]; then echo "e2e-multicluster PROVIDER=kind: FAILED (KIND_REQUIRED is set): $$reason"; exit 1; fi; \
	if [ $$status != 0 ]; then echo "e2e-multicluster PROVIDER=kind: $$reason"; exit $$status; fi; \
	echo "$$reason"; \
	echo "QM_E2E_PROVIDER=kind $(GO) test -count=1 -timeout 45m -v -run '^TestMultiCluster$$' ./e2e/multicluster/ -args -ginkgo.v"; \
	QM_E2E_PROVIDER=kind KIND_REQUIRED=$(KIND_REQUIRED) \
	QM_KIND_HOST_ADDRESS=$(KIND_HOST_ADDRESS) QM_KIND_LINK_LISTEN=$(KIND_LINK_LISTEN) \
	QM_E2E_OUT=$(BIN)/e2e-multicluster-kind.json \
	$(GO) test -count=1 -timeout 45m -v -run '^TestMultiCluster$$' ./e2e/multicluster/ -args -ginkgo.v
