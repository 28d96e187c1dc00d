# Live runs of scenario files (scenarios/live, `qm scenario run FILE --live`).
#
# `make test` runs one fidelity pair (provider-preference, about 2 minutes);
# this target runs all three the issue names, and a small burst to cloud on
# the kubernetes rig (--backend kubernetes), each simulated and live at a
# time scale that keeps the live run near 90 s, checks that cluster shares
# agree within 5 points and success rates within 1 point, and writes the
# predicted-and-measured report to $(LIVE_OUT)/index.html. LIVE_OUT may be
# relative to the repository or absolute. The kubernetes rig runs etcd and
# kube-apiserver from $(BIN), so the target builds them as `make test` does.

LIVE_OUT ?= reports/out/live

.PHONY: live-fidelity

## live-fidelity: burst-to-cloud, provider-preference and load-spreading, simulated and live, side by side.
live-fidelity: build $(BIN)/etcd $(BIN)/kube-apiserver
	QM_LIVE_FIDELITY=all QM_LIVE_OUT="$(abspath $(LIVE_OUT))" QM_BIN_DIR="$(BIN)" $(GO) test -count=1 -timeout 20m -v -run '^(TestFidelity|TestKubernetesBackend)$$' ./scenarios/live/
	@# qm report fails when a live run breaks an expectation the simulator met
	@# (provider-preference's p99, named in its live.notModelled); the gate is
	@# the test above, so the target fails only when no page was written.
	$(BIN)/qm report --title "Scenarios: simulated and live" --out "$(LIVE_OUT)" "$(LIVE_OUT)"/*-sim.json "$(LIVE_OUT)"/*-live.json || test -s "$(LIVE_OUT)/index.html"
