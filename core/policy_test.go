package core

import (
	"math"
	"testing"
)

func pol(cluster string, priority int32, weight int) Policy {
	return Policy{Name: cluster, Priority: priority, Weight: weight, Connection: ConnectionInfo{ClusterName: cluster}}
}

func clusters(ps []Policy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Connection.ClusterName
	}
	return out
}

// TestWeightedOrderSplit: weights 300:100 put the heavier cluster first 75%
// of the time, within one point over 100k draws.
func TestWeightedOrderSplit(t *testing.T) {
	ps := []Policy{pol("cloud-a", 1, 300), pol("cloud-b", 1, 100)}
	const draws = 100_000
	first := 0
	for s := range uint64(draws) {
		order := OrderClusters(ps, s)
		if len(order) != 2 {
			t.Fatalf("order has %d clusters", len(order))
		}
		if order[0].Connection.ClusterName == "cloud-a" {
			first++
		}
	}
	share := float64(first) / draws
	if math.Abs(share-0.75) > 0.01 {
		t.Fatalf("cloud-a first in %.4f of draws, want 0.75 ± 0.01", share)
	}
}

func TestPrioritiesNeverInverted(t *testing.T) {
	ps := []Policy{
		pol("cloud-1", 2, 10), pol("on-prem", 1, 0), pol("cloud-2", 2, 90),
		pol("backup", 7, 1), pol("cloud-3", 2, 0),
	}
	for s := range uint64(5000) {
		order := OrderClusters(ps, s)
		if len(order) != 5 {
			t.Fatalf("seed %d: %v", s, clusters(order))
		}
		for i := 1; i < len(order); i++ {
			if order[i].Priority < order[i-1].Priority {
				t.Fatalf("seed %d: priority inverted: %v", s, clusters(order))
			}
		}
		if order[0].Connection.ClusterName != "on-prem" || order[4].Connection.ClusterName != "backup" {
			t.Fatalf("seed %d: %v", s, clusters(order))
		}
		// Zero-weight clusters come after the weighted ones of their tier.
		if order[3].Connection.ClusterName != "cloud-3" {
			t.Fatalf("seed %d: zero weight not last in tier: %v", s, clusters(order))
		}
	}
}

func TestEachClusterOnce(t *testing.T) {
	ps := []Policy{pol("a", 1, 10), pol("a", 1, 30), pol("b", 1, 20), pol("a", 2, 50), pol("c", 2, 5)}
	for s := range uint64(200) {
		order := OrderClusters(ps, s)
		got := clusters(order)
		if len(got) != 3 || got[2] != "c" {
			t.Fatalf("seed %d: %v, want a and b (either order) then c", s, got)
		}
		for _, p := range order {
			if p.Connection.ClusterName == "a" && p.Priority != 1 {
				t.Fatalf("cluster a must be tried in its first tier: %+v", p)
			}
		}
	}
}

func TestClusterWeightIsAverageOfItsPolicies(t *testing.T) {
	// a: (100+300)/2 = 200; b: 200. Equal shares.
	ps := []Policy{pol("a", 0, 100), pol("a", 0, 300), pol("b", 0, 200)}
	first := 0
	const draws = 40_000
	for s := range uint64(draws) {
		if OrderClusters(ps, s)[0].Connection.ClusterName == "a" {
			first++
		}
	}
	if share := float64(first) / draws; math.Abs(share-0.5) > 0.015 {
		t.Fatalf("a first in %.3f of draws, want 0.5", share)
	}
}

func TestAllZeroWeightTierIsStillTried(t *testing.T) {
	ps := []Policy{pol("on-prem", 0, 0), pol("cloud", 1, 100)}
	got := clusters(OrderClusters(ps, 3))
	if len(got) != 2 || got[0] != "on-prem" || got[1] != "cloud" {
		t.Fatalf("order = %v", got)
	}
	if len(OrderClusters(nil, 1)) != 0 {
		t.Fatal("no policies, no clusters")
	}
}

func TestSelectPolicies(t *testing.T) {
	a := pol("a", 0, 1)
	a.Labels = map[string]string{"game": "x", "region": "eu"}
	b := pol("b", 0, 1)
	b.Labels = map[string]string{"game": "x"}
	got := clusters(SelectPolicies([]Policy{a, b}, map[string]string{"region": "eu"}))
	if len(got) != 1 || got[0] != "a" {
		t.Fatalf("got %v", got)
	}
	if n := len(SelectPolicies([]Policy{a, b}, nil)); n != 2 {
		t.Fatalf("empty selector selects all, got %d", n)
	}
}

func TestValidatePolicy(t *testing.T) {
	if err := ValidatePolicy(pol("a", 1, 1)); err != nil {
		t.Fatal(err)
	}
	bad := pol("a", -1, -5)
	bad.Connection.Endpoints = []string{""}
	err := ValidatePolicy(bad)
	ire, ok := err.(*InvalidRequestError)
	if !ok || len(ire.Errors) != 3 {
		t.Fatalf("want 3 field errors, got %v", err)
	}
}
