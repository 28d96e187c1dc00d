# The multi-cluster e2e suite (e2e/multicluster): a rig of real API servers,
# fleet agents and allocator replicas from e2e/multicluster/testdata's
# topology, with latency proxies on every link, and Ginkgo specs replaying
# seed 003's policies on it. `make test` runs it too; this target runs it
# alone, verbosely, and writes the allocations' latencies and cluster shares
# in qm load's result format to bin/e2e-multicluster.json. PROVIDER=kind is refused for now: kind needs Docker and
# kind's node image, which these machines do not have.

PROVIDER ?= local

.PHONY: e2e-multicluster

## e2e-multicluster: bring up the multi-cluster rig and run the e2e suite on it.
e2e-multicluster: $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kubectl
	@if [ "$(PROVIDER)" != local ]; then echo "e2e-multicluster: provider $(PROVIDER) is not built yet; only PROVIDER=local runs here"; exit 2; fi
	QM_E2E_OUT=$(BIN)/e2e-multicluster.json $(GO) test -count=1 -timeout 15m -v ./e2e/multicluster/ -args -ginkgo.v
	@echo "results: $(BIN)/e2e-multicluster.json (qm report $(BIN)/e2e-multicluster.json)"
