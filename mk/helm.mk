# The Helm chart (deploy/helm/quartermaster) and its tests. The tests use the
# Helm SDK, which pulls in far more than the rest of Quartermaster needs, so
# they live in a module of their own (deploy/helm/go.mod, with a replace to
# this one) that `go test ./...` at the root does not reach; `make test` runs
# it through TEST_DEPS. Like the tools modules it builds with GOWORK=off and
# a read-only go.mod, whatever the caller has around.
#
# Without -race: the tests are sequential and the code under test is
# templates; the race detector would only instrument Helm's and client-go's
# internals, at minutes of extra build time.

HELM_GO := GOWORK=off GOFLAGS=-mod=readonly $(GO)

.PHONY: helm-test helm-golden

## helm-test: the chart's golden, lint, schema and API-server tests.
helm-test: $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kubectl
	cd deploy/helm && $(HELM_GO) vet ./... && $(HELM_GO) test -count=1 -timeout 10m ./...

## helm-golden: rewrite the chart's golden files (read the diff first).
helm-golden:
	cd deploy/helm && $(HELM_GO) test -count=1 -run TestGolden ./... -update

TEST_DEPS += helm-test
