// Package scenarios reads scenario files and runs them in the simulator.
//
// A scenario file is versioned YAML (apiVersion quartermaster.dev/v1alpha1,
// kind Scenario) describing clusters, fleets, multi-cluster policies (the
// GameServerAllocationPolicy fields), the matchmaker's workload, faults, and
// expectations: bounds on result metrics that make a run pass or fail.
//
// Reading follows kind's config handling: decode strictly (an unknown field
// is an error, not a silent typo), apply defaults, then validate, with every
// problem reported as "path: reason" (spec.clusters[1].nodes.slots: must be
// positive) so a bad file says where it is wrong. The shipped scenarios sit
// beside this file; testdata/ holds valid-*.yaml and invalid-*.yaml fixtures.
package scenarios
