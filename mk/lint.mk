# Static analysis beyond go vet: golangci-lint with the small set in
# .golangci.yml (govet, staticcheck, unused, ineffassign). It is built from
# the pinned tools/lint module (as tools/ghz pins ghz) and cached in $(BIN)
# under a name keyed by its version and the module's hash, so a fresh
# machine builds it once and a change of the pin builds it again.
#
#   make lint        every package of the main module (part of make verify)

GOLANGCI_VERSION := v2.15.0
GOLANGCI_HASH    := $(shell cat tools/lint/go.mod tools/lint/go.sum 2>/dev/null | sha256sum | cut -c1-8)
GOLANGCI_BIN     := $(BIN)/golangci-lint-$(GOLANGCI_VERSION)-$(GOLANGCI_HASH)

.PHONY: lint

VERIFY_DEPS += lint

$(GOLANGCI_BIN):
	@mkdir -p $(BIN)
	@rm -f $(BIN)/golangci-lint-v*
	cd tools/lint && GOWORK=off GOFLAGS=-mod=readonly $(GO) build -trimpath -buildvcs=false -o $@.tmp github.com/golangci/golangci-lint/v2/cmd/golangci-lint && mv $@.tmp $@

$(BIN)/golangci-lint: $(GOLANGCI_BIN)
	ln -sfn $(notdir $<) $@

## lint: golangci-lint with .golangci.yml's linters.
lint: $(BIN)/golangci-lint
	$(BIN)/golangci-lint run $(PKGS)
