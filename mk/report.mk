# Performance reports (reports/, `qm report`).
#
#   make perf-report     build the baseline commit (reports/baseline/commit,
#                        from git history) and this tree, measure both
#                        alternately in this job (mk/report.sh), write
#                        reports/out/index.html, summary.md and
#                        comparison.json, print the summary, and fail on a
#                        gated figure that regressed, changed when it must
#                        not, or is missing
#   make perf-baseline   measure HEAD (from git history; PERF_BASELINE_COMMIT
#                        names another) and make it the
#                        baseline: record its commit in reports/baseline/commit
#                        and its gated figures in reports/baseline/history.json
#                        (drawn as trends by every later report); remove
#                        reports/baseline/changes.yaml. Commit the result.
#   make perf-gate-check the gate's own test: this tree against itself with a
#                        15% slowdown of core allocation patched in
#                        (PERF_PATCH) must fail the gate, naming the figures
#   make report-browser  Debian's chromium, for the reports' browser test
#                        (`make test` runs it first: the test needs a browser)
#
# PERF_ROUNDS (default 6), PERF_FAMILIES and PERF_PATCH are mk/report.sh's.
# The whole of perf-report is time-boxed at PERF_TIMEOUT.

PERF_OUT      ?= reports/out
PERF_BASELINE ?= reports/baseline
PERF_TIMEOUT  ?= 25m
# The baseline gets more rounds than a run: its medians go into the
# history, which nothing measures again.
PERF_BASELINE_ROUNDS ?= 10
# The commit perf-baseline measures and records (from git history, so a
# dirty working tree does not matter).
PERF_BASELINE_COMMIT ?= HEAD
# perf-gate-check's slowdown: rounds of a multiply-add chain per allocation
# in core, sized to about 15% of core's gated CPU figures (reports/README.md,
# "Proving the gate").
PERF_GATE_CHECK_PATCH ?= core:150

.PHONY: perf-report perf-baseline perf-gate-check report-browser

## perf-report: measure the baseline commit and this tree alternately; gate.
perf-report: build kube-bins
	GO="$(GO)" PERF_KUBE_BIN_DIR="$(BIN)" timeout $(PERF_TIMEOUT) bash mk/report.sh "$(PERF_OUT)/results"
	$(BIN)/qm report --baseline "$(PERF_OUT)/results/base" --history "$(PERF_BASELINE)/history.json" \
		--out "$(PERF_OUT)" "$(PERF_OUT)"/results/cur/*

## perf-baseline: measure HEAD and make it the baseline.
perf-baseline: build kube-bins
	@commit=$$(git rev-parse "$(PERF_BASELINE_COMMIT)") && \
	GO="$(GO)" PERF_KUBE_BIN_DIR="$(BIN)" PERF_SIDES=base PERF_BASE_COMMIT=$$commit PERF_ROUNDS=$(PERF_BASELINE_ROUNDS) \
		timeout $(PERF_TIMEOUT) bash mk/report.sh "$(PERF_OUT)/baseline-run" && \
	$(BIN)/qm report --quiet --thresholds "$(PERF_BASELINE)/thresholds.yaml" --history "$(PERF_BASELINE)/history.json" \
		--record $$commit --out "$(PERF_OUT)" "$(PERF_OUT)"/baseline-run/base/*.txt "$(PERF_OUT)"/baseline-run/base/*.json && \
	echo $$commit >"$(PERF_BASELINE)/commit" && rm -f "$(PERF_BASELINE)/changes.yaml" && \
	echo "perf-baseline: $$commit recorded in $(PERF_BASELINE)/commit and history.json; commit them"

## perf-gate-check: a 15% slowdown of core allocation must fail the gate.
perf-gate-check: build
	@out="$(PERF_OUT)/gate-check"; \
	GO="$(GO)" PERF_BASE_COMMIT=. PERF_FAMILIES=core PERF_PATCH=$(PERF_GATE_CHECK_PATCH) timeout $(PERF_TIMEOUT) bash mk/report.sh "$$out/results" && \
	if $(BIN)/qm report --quiet --baseline "$$out/results/base" --out "$$out" "$$out"/results/cur/* 2>"$$out/verdict.txt"; then \
		echo "perf-gate-check: the gate passed a build with $(PERF_GATE_CHECK_PATCH) patched in: it cannot catch a 15% slowdown"; exit 1; \
	fi; \
	grep -q 'regression: core\.GateAllocate/.* cpu-sec/op' "$$out/verdict.txt" || { cat "$$out/verdict.txt"; echo "perf-gate-check: the gate failed, but not on core's CPU per allocation"; exit 1; }; \
	echo "perf-gate-check: the patched build failed the gate:"; grep 'regression:' "$$out/verdict.txt"

TEST_DEPS += report-browser

## report-browser: install Debian's chromium when no Chromium is on PATH.
## A machine that cannot install it (no root, no network) still runs the
## tests: the browser test then skips, saying why.
report-browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
		echo "report-browser: could not install chromium; TestPageInBrowser will skip"
