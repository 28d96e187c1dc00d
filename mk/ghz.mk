# qm load's speed and honesty benchmarks (loadgen/ghz_bench_test.go): qm
# load against ghz, the gRPC load tool, on the same in-process mTLS echo in
# the same run, and qm load's own pacing at 2,000/s. ghz is built from the
# pinned tools/ghz module (as tools/proto pins the protoc plugins), cached
# in $(BIN) under a name keyed by its version and the module's hash.
#
#   make load-bench                         3 rounds of 5s per phase, then 3 x 30s of pacing (default, timers, spin)
#   make load-bench LOAD_BENCH_ROUNDS=5 LOAD_BENCH_DURATION=10s
#
# The figures are reported as qm load over ghz, measured in the same run;
# none of this runs in `make test`.

GHZ_VERSION := v0.121.0
# (mk/kube.mk's tools_hash is not defined yet when this file is read.)
GHZ_HASH    := $(shell cat tools/ghz/go.mod tools/ghz/go.sum 2>/dev/null | sha256sum | cut -c1-8)
GHZ_BIN     := $(BIN)/ghz-$(GHZ_VERSION)-$(GHZ_HASH)

LOAD_BENCH_ROUNDS   ?= 3
LOAD_BENCH_DURATION ?= 5s
LOAD_BENCH_PACE     ?= 30s

.PHONY: ghz load-bench

## ghz: the pinned ghz binary in bin/ghz (cached).
ghz: $(BIN)/ghz

$(GHZ_BIN):
	@mkdir -p $(BIN)
	@rm -f $(BIN)/ghz-v*
	cd tools/ghz && GOWORK=off GOFLAGS=-mod=readonly $(GO) build -trimpath -buildvcs=false -ldflags '-s -w' -o $@.tmp github.com/bojand/ghz/cmd/ghz && mv $@.tmp $@

$(BIN)/ghz: $(GHZ_BIN)
	ln -sfn $(notdir $<) $@

## load-bench: qm load vs ghz (max rate, p50 at half of it) and qm load's pacing at 2,000/s.
load-bench: build $(BIN)/ghz
	QM_BIN=$(BIN)/qm QM_GHZ=$(BIN)/ghz LOAD_BENCH_ROUNDS=$(LOAD_BENCH_ROUNDS) LOAD_BENCH_DURATION=$(LOAD_BENCH_DURATION) \
	LOAD_BENCH_PACE=$(LOAD_BENCH_PACE) $(GO) test -run '^$$' -bench 'Generator' -benchtime 1x -timeout 30m ./loadgen/
