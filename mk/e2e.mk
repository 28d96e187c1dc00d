# The multi-cluster e2e tests, by provider.
#
# PROVIDER=local (the default): the Ginkgo suite (e2e/multicluster) on a rig
# of real API servers, fleet agents and allocator replicas from
# e2e/multicluster/testdata's topology, with latency proxies on every link,
# replaying seed 003's policies. `make test` runs it too; this target runs it
# alone, verbosely, and writes the allocations' latencies and cluster shares
# in qm load's result format to bin/e2e-multicluster.json.
#
# PROVIDER=kind: examples/rig-burst-to-cloud.yaml as kind clusters
# (kindcluster/kind: image built from the Dockerfile, allocator from
# deploy/allocator.yaml, fleet agent, policies and Secrets) and burst to
# cloud checked on them (TestKindRig). The Ginkgo suite itself stays on the
# local provider: its specs switch link faults on the rig's proxies, and
# restart and rotate through the local rig, which kind clusters do not have.
# Where Docker, kind's node image or kubectl is missing, it prints one line,
# "SKIPPED: <what is missing>", and exits 0: machines without Docker (these)
# run the same targets, and a missing prerequisite is no failure of the code.
# A CI job that must run on kind sets KIND_REQUIRED=1, which turns the skip
# into a failure.

PROVIDER ?= local
KIND_REQUIRED ?=

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
	@status=0; reason=$$($(BIN)/qm cluster check --provider kind) || status=$$?; \
	if [ $$status = 3 ] && [ -z "$(KIND_REQUIRED)" ]; then echo "e2e-multicluster PROVIDER=kind: SKIPPED: $$reason"; exit 0; fi; \
	if [ $$status = 3 ]; then echo "e2e-multicluster PROVIDER=kind: FAILED (KIND_REQUIRED is set): $$reason"; exit 1; fi; \
	if [ $$status != 0 ]; then echo "e2e-multicluster PROVIDER=kind: $$reason"; exit $$status; fi; \
	echo "$$reason"; \
	echo "QM_KIND_E2E=1 $(GO) test -count=1 -timeout 30m -v -run '^TestKindRig$$' ./kindcluster/kind/"; \
	QM_KIND_E2E=1 $(GO) test -count=1 -timeout 30m -v -run '^TestKindRig$$' ./kindcluster/kind/
