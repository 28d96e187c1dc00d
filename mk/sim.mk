# The simulator and its scenarios (sim/, scenarios/). `make test` already runs
# their tests (fidelity checks, golden results, every shipped scenario); these
# targets are for running and timing them by hand.

SCENARIOS := $(wildcard scenarios/*.yaml)

.PHONY: sim-scenarios bench-sim bench-sim-1m

## sim-scenarios: run every shipped scenario with qm sim; fails if any expectation fails.
sim-scenarios: build
	@set -e; for f in $(SCENARIOS); do echo "== $$f"; $(BIN)/qm sim --quiet $$f; done

## bench-sim: the 100k-server, 24-hour simulator benchmark (about 5 million allocations).
bench-sim:
	$(GO) test -run '^$$' -bench Day100k -benchtime 1x -benchmem ./sim/

## bench-sim-1m: the million-server day (scenarios/testdata/bench-day-1m.yaml, about 50 million allocations; minutes, about 3 GB).
bench-sim-1m: build
	$(BIN)/qm sim scenarios/testdata/bench-day-1m.yaml
