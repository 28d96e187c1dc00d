# Performance reports (reports/, `qm report`).
#
#   make perf-report     run the suite (mk/report.sh) into reports/out/results,
#                        write reports/out/index.html, summary.md and
#                        comparison.json, print the summary, and fail on a
#                        significant regression against reports/baseline/
#   make perf-baseline   run the suite into reports/baseline/ (keeping its
#                        thresholds.yaml): commit the result after a change
#                        that moves the figures on purpose
#   make report-browser  Debian's chromium, for the reports' browser test
#                        (`make test` runs it first: the test needs a browser)
#
# PERF_ROUNDS (default 6) and PERF_BENCHTIME (default 200ms) size the suite;
# the whole target is time-boxed to 15 minutes. PERF_SLOW=50us measures a
# build with a sleep in the allocator's hot path (mk/report.sh), which the
# gate must fail: the check that the gate can fail at all.

PERF_OUT      ?= reports/out
PERF_BASELINE ?= reports/baseline
PERF_TIMEOUT  ?= 15m
# The baseline gets more rounds than a run: it is measured once and compared
# with every run after, so it should see more of the machine's moods.
PERF_BASELINE_ROUNDS ?= 10

.PHONY: perf-report perf-baseline report-browser

## perf-report: run the performance suite and gate it against reports/baseline.
perf-report: build
	GO="$(GO)" timeout $(PERF_TIMEOUT) bash mk/report.sh "$(BIN)/qm" "$(PERF_OUT)/results"
	$(BIN)/qm report --baseline "$(PERF_BASELINE)" --out "$(PERF_OUT)" "$(PERF_OUT)"/results/*

## perf-baseline: run the suite and make its results the new baseline.
perf-baseline: build
	GO="$(GO)" PERF_ROUNDS=$(PERF_BASELINE_ROUNDS) timeout $(PERF_TIMEOUT) bash mk/report.sh "$(BIN)/qm" "$(PERF_BASELINE)"
	$(BIN)/qm report --quiet --out "$(PERF_OUT)" "$(PERF_BASELINE)"/*.txt "$(PERF_BASELINE)"/*.json

TEST_DEPS += report-browser

## report-browser: install Debian's chromium when no Chromium is on PATH.
## A machine that cannot install it (no root, no network) still runs the
## tests: the browser test then skips, saying why.
report-browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
		echo "report-browser: could not install chromium; TestPageInBrowser will skip"
