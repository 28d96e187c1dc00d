# Soak runs (qm soak; soakrun, soak/README.md): load with faults on a
# seeded schedule against a two-cluster rig of real API servers, fleet
# agents and allocator replicas, then the checker's promises.
#
# `make soak` runs the shipped schedule (soak/default.yaml) for
# SOAK_DURATION (5 minutes; 30m or a night for more), writes the history,
# snapshot and result to SOAK_OUT and the page (the faults over the load,
# the checker's tables) to SOAK_OUT/report, and fails on any violation.
# SOAK_SCHEDULE, SOAK_SEED and SOAK_ARGS (any qm soak flag, such as
# --rate 40, or --allocation-keys=false for requests without idempotency
# keys) change the run. Every request carries a key by default, so the
# checker counts dangling servers strictly (as --strict does). `make test`
# runs a one-minute soak with every kind of fault once (soakrun's
# TestShortSoak).

SOAK_DURATION ?= 5m
SOAK_SCHEDULE ?=
SOAK_SEED     ?=
SOAK_OUT      ?= $(BIN)/soak
SOAK_ARGS     ?=

.PHONY: soak

## soak: load with faults on a schedule against a two-cluster rig (SOAK_DURATION=5m), the checker's table and page; fails on any violation.
soak: build $(BIN)/etcd $(BIN)/kube-apiserver
	rm -rf "$(SOAK_OUT)"
	@status=0; \
	$(BIN)/qm soak --duration $(SOAK_DURATION) --out "$(SOAK_OUT)" --bin-dir $(BIN) \
		$(if $(SOAK_SCHEDULE),--schedule $(SOAK_SCHEDULE)) $(if $(SOAK_SEED),--seed $(SOAK_SEED)) $(SOAK_ARGS) || status=$$?; \
	if [ -s "$(SOAK_OUT)/result.json" ]; then \
		$(BIN)/qm report --quiet --title "Soak" --out "$(SOAK_OUT)/report" "$(SOAK_OUT)/result.json" >/dev/null || true; \
		echo "page: $(SOAK_OUT)/report/index.html"; \
	fi; \
	exit $$status
