# Load against a live allocator (loadgen/, `qm load`). `make test` runs the
# loadgen tests; these targets measure by hand. mk/load.sh starts `qm serve`
# as a process of its own on free loopback ports with a large in-memory
# fleet, drives it with `qm load` from another process, and stops it.

LOAD_WORKERS  ?= 64
LOAD_DURATION ?= 9s
LOAD_WINDOW   ?= 3s
LOAD_RATE     ?= 2000
LOAD_OUT      ?= $(BIN)/load

.PHONY: load-echo load-open

## load-echo: allocations vs the health-check echo on the same server, port and mTLS, 64 callers, three
## interleaved rounds of 3s each (issue 17's measurement, from outside): ratio, p50/p99, server CPU per request.
load-echo: build
	@bash mk/load.sh "$(BIN)/qm" "$(LOAD_OUT)" echo --workers $(LOAD_WORKERS) --duration $(LOAD_DURATION) --window $(LOAD_WINDOW)

## load-open: open loop at LOAD_RATE/s, allocations vs echo, with latency from the intended send time.
load-open: build
	@bash mk/load.sh "$(BIN)/qm" "$(LOAD_OUT)" open --rate $(LOAD_RATE) --duration $(LOAD_DURATION) --window $(LOAD_WINDOW)

FORWARD_MODE ?= pinned

.PHONY: load-forward load-forward-lone

## load-forward: issue 10's forwarding throughput from outside: direct to a remote `qm serve` vs through an entry
## `qm serve` forwarding to it, 64 callers, turns of 1s (FORWARD_MODE=pinned: the entry on a core of its own; shared; onecore).
load-forward: build
	@bash mk/load-forward.sh "$(BIN)/qm" "$(LOAD_OUT)" $(FORWARD_MODE) --workers $(LOAD_WORKERS) --duration $(LOAD_DURATION) --window 1s --progress never

## load-forward-lone: the same with one caller: forwarded p50 against direct p50 plus a round trip (the health check), and
## against `qm relay` (FORWARD_FLOOR=1: a hop that only carries bytes, the floor); FORWARD_IDLE=poll keeps idle CPUs polling (root).
load-forward-lone: build
	@FORWARD_FLOOR=$${FORWARD_FLOOR-1} bash mk/load-forward.sh "$(BIN)/qm" "$(LOAD_OUT)" $(FORWARD_MODE) --workers 1 --duration $(LOAD_DURATION) --window 500ms --progress never
