# The demo: `make demo` builds qm, starts the allocator on free loopback
# ports with a fresh state directory (development certificates, built-in
# fleets), makes a few allocations over gRPC and REST with `qm allocate`,
# prints them and stops the server. Where a step claims something (alice's
# re-allocation returns her own lobby, bob's asking the same way does not),
# the script checks it and fails otherwise. mk/demo.sh does the work and
# cleans up even when a step fails.

.PHONY: demo

## demo: start the allocator, allocate over gRPC and REST, stop.
demo: build
	@bash mk/demo.sh "$(BIN)/qm"
