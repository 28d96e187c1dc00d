package core

import "testing"

func TestSelectorMatches(t *testing.T) {
	gs := &GameServer{
		State:    StateReady,
		Labels:   map[string]string{FleetLabel: "green", "tier": "gold"},
		Counters: map[string]Counter{"rooms": {Count: 3, Capacity: 10}, "full": {Count: 4, Capacity: 4}},
		Lists:    map[string]List{"players": {Values: []string{"p1", "p2"}, Capacity: 5}},
	}
	cases := []struct {
		name string
		sel  Selector
		want bool
	}{
		{"empty selector matches Ready", Selector{}, true},
		{"state Allocated does not match Ready", Selector{State: StateAllocated}, false},
		{"matchLabels equal", Selector{MatchLabels: map[string]string{FleetLabel: "green"}}, true},
		{"matchLabels all must hold", Selector{MatchLabels: map[string]string{FleetLabel: "green", "tier": "silver"}}, false},
		{"matchLabels missing key", Selector{MatchLabels: map[string]string{"zone": ""}}, false},
		{"In", Selector{MatchExpressions: []LabelExpression{{Key: "tier", Operator: OpIn, Values: []string{"silver", "gold"}}}}, true},
		{"In missing key", Selector{MatchExpressions: []LabelExpression{{Key: "zone", Operator: OpIn, Values: []string{"a"}}}}, false},
		{"NotIn", Selector{MatchExpressions: []LabelExpression{{Key: "tier", Operator: OpNotIn, Values: []string{"gold"}}}}, false},
		{"NotIn missing key matches", Selector{MatchExpressions: []LabelExpression{{Key: "zone", Operator: OpNotIn, Values: []string{"a"}}}}, true},
		{"Exists", Selector{MatchExpressions: []LabelExpression{{Key: "tier", Operator: OpExists}}}, true},
		{"DoesNotExist", Selector{MatchExpressions: []LabelExpression{{Key: "tier", Operator: OpDoesNotExist}}}, false},
		{"labels AND expressions", Selector{MatchLabels: map[string]string{FleetLabel: "green"}, MatchExpressions: []LabelExpression{{Key: "tier", Operator: OpDoesNotExist}}}, false},
		{"counter minCount", Selector{Counters: map[string]CounterSelector{"rooms": {MinCount: 3}}}, true},
		{"counter minCount above", Selector{Counters: map[string]CounterSelector{"rooms": {MinCount: 4}}}, false},
		{"counter maxCount", Selector{Counters: map[string]CounterSelector{"rooms": {MaxCount: 2}}}, false},
		{"counter maxCount 0 is no limit", Selector{Counters: map[string]CounterSelector{"rooms": {MinCount: 1, MaxCount: 0}}}, true},
		{"counter minAvailable", Selector{Counters: map[string]CounterSelector{"rooms": {MinAvailable: 7}}}, true},
		{"counter minAvailable above", Selector{Counters: map[string]CounterSelector{"rooms": {MinAvailable: 8}}}, false},
		{"counter maxAvailable", Selector{Counters: map[string]CounterSelector{"rooms": {MaxAvailable: 6}}}, false},
		{"counter full has 0 available", Selector{Counters: map[string]CounterSelector{"full": {MinAvailable: 1}}}, false},
		{"counter missing key", Selector{Counters: map[string]CounterSelector{"sessions": {}}}, false},
		{"list containsValue", Selector{Lists: map[string]ListSelector{"players": {ContainsValue: "p2"}}}, true},
		{"list containsValue absent", Selector{Lists: map[string]ListSelector{"players": {ContainsValue: "p9"}}}, false},
		{"list minAvailable", Selector{Lists: map[string]ListSelector{"players": {MinAvailable: 3}}}, true},
		{"list minAvailable above", Selector{Lists: map[string]ListSelector{"players": {MinAvailable: 4}}}, false},
		{"list maxAvailable", Selector{Lists: map[string]ListSelector{"players": {MaxAvailable: 2}}}, false},
		{"list maxAvailable 0 is no limit", Selector{Lists: map[string]ListSelector{"players": {MaxAvailable: 0}}}, true},
		{"list missing key", Selector{Lists: map[string]ListSelector{"spectators": {}}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sel.Matches(gs); got != tc.want {
				t.Fatalf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestComparePriorities(t *testing.T) {
	mk := func(name string, rooms, players int64) *GameServer {
		gs := &GameServer{Name: name, Counters: map[string]Counter{}, Lists: map[string]List{}}
		if rooms >= 0 {
			gs.Counters["rooms"] = Counter{Count: 10 - rooms, Capacity: 10}
		}
		if players >= 0 {
			gs.Lists["players"] = List{Capacity: players}
		}
		return gs
	}
	a, b := mk("a", 2, 5), mk("b", 7, 1)
	missing := mk("m", -1, -1)
	cases := []struct {
		name string
		ps   []Priority
		x, y *GameServer
		want int
	}{
		{"no priorities", nil, a, b, 0},
		{"counter ascending: less available first", []Priority{{Type: PriorityCounter, Key: "rooms"}}, a, b, -1},
		{"counter descending: more available first", []Priority{{Type: PriorityCounter, Key: "rooms", Order: Descending}}, a, b, 1},
		{"list ascending", []Priority{{Type: PriorityList, Key: "players"}}, a, b, 1},
		{"list descending", []Priority{{Type: PriorityList, Key: "players", Order: Descending}}, a, b, -1},
		{"missing key loses, ascending", []Priority{{Type: PriorityCounter, Key: "rooms"}}, missing, a, 1},
		{"missing key loses, descending", []Priority{{Type: PriorityCounter, Key: "rooms", Order: Descending}}, a, missing, -1},
		{"both missing falls through", []Priority{{Type: PriorityCounter, Key: "nope"}, {Type: PriorityList, Key: "players"}}, a, b, 1},
		{"equal falls through", []Priority{{Type: PriorityCounter, Key: "rooms"}, {Type: PriorityList, Key: "players"}}, mk("c", 2, 1), a, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := comparePriorities(tc.ps, tc.x, tc.y); got != tc.want {
				t.Fatalf("comparePriorities = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestSelectorMatchAnnotations(t *testing.T) {
	gs := &GameServer{State: StateAllocated, Annotations: map[string]string{"owner": "bob"}}
	for _, tc := range []struct {
		ann  map[string]string
		want bool
	}{{map[string]string{"owner": "bob"}, true}, {map[string]string{"owner": "mallory"}, false}, {map[string]string{"x": ""}, false}} {
		sel := Selector{State: StateAllocated, MatchAnnotations: tc.ann}
		n, err := Normalize(&Request{Selectors: []Selector{sel}})
		if err != nil {
			t.Fatal(err)
		}
		if got := sel.Matches(gs); got != tc.want {
			t.Errorf("%v: Matches = %v", tc.ann, got)
		}
		if got := n.Selectors[0].Matches(gs); got != tc.want {
			t.Errorf("%v: compiled Matches = %v", tc.ann, got)
		}
	}
}
