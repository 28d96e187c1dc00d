# Quartermaster build. The README names two entry points: `make demo` and
# `make test`. Each builds whatever it needs by itself.
#
# Area-specific rules live in mk/*.mk (one file per area, so work on one area
# does not collide with another); they may append to TEST_DEPS, VERIFY_DEPS
# and GENERATE_TARGETS.

SHELL     := bash
GO        ?= go
BIN       := $(CURDIR)/bin
PKGS      := ./...
BENCHTIME ?= 1s

TEST_DEPS        :=
VERIFY_DEPS      :=
GENERATE_TARGETS :=

-include mk/*.mk

.PHONY: all build test unit verify fmt-check vet tidy-check imports-check bench generate clean

all: build

build:
	$(GO) build -buildvcs=auto -o $(BIN)/qm ./cmd/qm

## test: vet plus every test (unit and integration) under the race detector.
## A package's tests against real API servers (allocator/kube's) run for
## minutes under -race on a loaded machine: go test's default ten-minute
## limit per package is too close, hence a longer one.
test: $(TEST_DEPS)
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

## unit: the fast tests only (no real API servers).
unit:
	$(GO) test -short -count=1 $(PKGS)

## verify: formatting, vet, go.mod tidiness, import boundaries, generated code.
verify: fmt-check vet tidy-check imports-check $(VERIFY_DEPS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^tools/')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

tidy-check:
	@cp go.mod go.mod.tidy-bak; cp go.sum go.sum.tidy-bak 2>/dev/null || touch go.sum.tidy-bak; \
	$(GO) mod tidy; \
	if ! diff -q go.mod go.mod.tidy-bak >/dev/null || ! diff -q go.sum go.sum.tidy-bak >/dev/null; then \
		diff -u go.mod.tidy-bak go.mod; mv go.mod.tidy-bak go.mod; mv go.sum.tidy-bak go.sum; \
		echo "go.mod/go.sum are not tidy: run 'go mod tidy'"; exit 1; \
	fi; rm -f go.mod.tidy-bak go.sum.tidy-bak

imports-check:
	@bash hack/check-imports.sh

## bench: the core benchmarks, indexed and naive in one run, with the
## speed-up table (BENCHTIME=3s for steadier figures).
bench:
	set -o pipefail; $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./core/ | awk -f hack/bench-ratio.awk

generate: $(GENERATE_TARGETS)

clean:
	rm -rf $(BIN)
