# Mutation runs: each named mutation of the product in hack/mutations
# (NAME.mut: what it breaks, the edits, the tests that must notice) is
# applied to a copy of the tree, and each of its tests (an e2e spec on the
# local rig, by Ginkgo label, or a go test) is run there and must FAIL.
# The run fails when a test still passes on a mutated tree, when a
# mutation no longer applies (the code it edits moved), or when a test
# fails on the unmutated copy (checked first, so a failure proves
# something). It prints the table: mutation, test, result, time.
#
# Slow (an e2e spec brings its rig up once per mutation; see
# e2e/multicluster/README.md for the time it takes), so it is part of
# neither `make test` nor .ci/run; `make test` only checks that every
# mutation still applies (hack/mutations' own test).
#
# MUTATIONS=a,b runs only those; MUTATE_REF=HEAD copies a commit instead
# of the working tree's files; logs go to bin/mutations/.

MUTATIONS  ?=
MUTATE_REF ?=

.PHONY: e2e-mutations

## e2e-mutations: break the product on purpose (hack/mutations) and check each e2e spec and test fails (slow: about 20 minutes).
e2e-mutations: $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kubectl
	$(GO) run ./hack/mutations -logs $(BIN)/mutations $(if $(MUTATIONS),-only $(MUTATIONS)) $(if $(MUTATE_REF),-ref $(MUTATE_REF))
