package core

import (
	"errors"
	"strings"
	"testing"
)

func i64(v int64) *int64 { return &v }

func TestNormalizeRejects(t *testing.T) {
	long := strings.Repeat("a", 64)
	cases := []struct {
		name      string
		req       Request
		wantField string
		wantIn    string // part of the reason
	}{
		{"bad namespace", Request{Namespace: "Bad_NS"}, "namespace", "lower-case"},
		{"label key with space", Request{Selectors: []Selector{{MatchLabels: map[string]string{"a b": "x"}}}}, `gameServerSelectors[0].matchLabels["a b"]`, "key"},
		{"label value too long", Request{Selectors: []Selector{{MatchLabels: map[string]string{"a": long}}}}, `gameServerSelectors[0].matchLabels["a"]`, "at most 63"},
		{"label value bad end", Request{Selectors: []Selector{{MatchLabels: map[string]string{"a": "x-"}}}}, `gameServerSelectors[0].matchLabels["a"]`, "start and end"},
		{"label key bad prefix", Request{Selectors: []Selector{{MatchLabels: map[string]string{"Agones.dev/fleet": "x"}}}}, `gameServerSelectors[0].matchLabels["Agones.dev/fleet"]`, "prefix"},
		{"label key empty name", Request{Selectors: []Selector{{MatchLabels: map[string]string{"agones.dev/": "x"}}}}, `gameServerSelectors[0].matchLabels["agones.dev/"]`, "empty name"},
		{"unknown operator", Request{Selectors: []Selector{{MatchExpressions: []LabelExpression{{Key: "a", Operator: "Like"}}}}}, "gameServerSelectors[0].matchExpressions[0].operator", `unknown operator "Like"`},
		{"In without values", Request{Selectors: []Selector{{MatchExpressions: []LabelExpression{{Key: "a", Operator: OpIn}}}}}, "gameServerSelectors[0].matchExpressions[0].values", "must not be empty"},
		{"Exists with values", Request{Selectors: []Selector{{MatchExpressions: []LabelExpression{{Key: "a", Operator: OpExists, Values: []string{"x"}}}}}}, "gameServerSelectors[0].matchExpressions[0].values", "must be empty"},
		{"expression bad value", Request{Selectors: []Selector{{MatchExpressions: []LabelExpression{{Key: "a", Operator: OpNotIn, Values: []string{"ok", "no way"}}}}}}, "gameServerSelectors[0].matchExpressions[0].values[1]", "only letters"},
		{"state Shutdown", Request{Selectors: []Selector{{State: StateShutdown}}}, "gameServerSelectors[0].gameServerState", "Ready or Allocated"},
		{"counter min > max", Request{Selectors: []Selector{{Counters: map[string]CounterSelector{"rooms": {MinCount: 5, MaxCount: 2}}}}}, `gameServerSelectors[0].counters["rooms"].minCount`, "greater than maxCount"},
		{"counter avail min > max", Request{Selectors: []Selector{{Counters: map[string]CounterSelector{"rooms": {MinAvailable: 5, MaxAvailable: 2}}}}}, `gameServerSelectors[0].counters["rooms"].minAvailable`, "greater than maxAvailable"},
		{"counter negative", Request{Selectors: []Selector{{Counters: map[string]CounterSelector{"rooms": {MinCount: -1}}}}}, `gameServerSelectors[0].counters["rooms"].minCount`, "negative"},
		{"list min > max", Request{Selectors: []Selector{{Lists: map[string]ListSelector{"players": {MinAvailable: 3, MaxAvailable: 1}}}}}, `gameServerSelectors[0].lists["players"].minAvailable`, "greater"},
		{"deprecated required", Request{Required: &Selector{State: "Reserved"}}, "requiredGameServerSelector.gameServerState", "Ready or Allocated"},
		{"deprecated preferred", Request{Preferred: []Selector{{}, {MatchLabels: map[string]string{"-x": "y"}}}}, `preferredGameServerSelectors[1].matchLabels["-x"]`, "key"},
		{"scheduling", Request{Scheduling: Strategy(7)}, "scheduling", "unknown strategy 7"},
		{"metadata label", Request{Metadata: MetaPatch{Labels: map[string]string{"ok": "bad value"}}}, `metadata.labels["ok"]`, "value"},
		{"metadata relabels the fleet", Request{Metadata: MetaPatch{Labels: map[string]string{FleetLabel: "other"}}}, `metadata.labels["agones.dev/fleet"]`, "managed by the system"},
		{"too many list additions", Request{Lists: map[string]ListAction{"players": {AddValues: make([]string, 1001)}}}, `lists["players"].addValues`, "at most 1000"},
		{"too many list deletions", Request{Lists: map[string]ListAction{"players": {DeleteValues: make([]string, 60000)}}}, `lists["players"].deleteValues`, "at most 1000"},
		{"metadata annotation key", Request{Metadata: MetaPatch{Annotations: map[string]string{"/x": "anything goes"}}}, `metadata.annotations["/x"]`, "empty prefix"},
		{"priority type", Request{Priorities: []Priority{{Type: 3, Key: "rooms"}}}, "priorities[0].type", "Counter or List"},
		{"priority key", Request{Priorities: []Priority{{Type: PriorityList}}}, "priorities[0].key", "must not be empty"},
		{"priority order", Request{Priorities: []Priority{{Key: "a", Order: 9}}}, "priorities[0].order", "Ascending or Descending"},
		{"unknown counter action", Request{Counters: map[string]CounterAction{"rooms": {Action: "Multiply", Amount: i64(2)}}}, `counters["rooms"].action`, `unknown action "Multiply"`},
		{"amount without action", Request{Counters: map[string]CounterAction{"rooms": {Amount: i64(2)}}}, `counters["rooms"].action`, "required when amount is set"},
		{"negative amount", Request{Counters: map[string]CounterAction{"rooms": {Action: ActionIncrement, Amount: i64(-1)}}}, `counters["rooms"].amount`, "negative"},
		{"negative counter capacity", Request{Counters: map[string]CounterAction{"rooms": {Capacity: i64(-3)}}}, `counters["rooms"].capacity`, "negative"},
		{"list capacity over 1000", Request{Lists: map[string]ListAction{"players": {Capacity: i64(1001)}}}, `lists["players"].capacity`, "between 0 and 1000"},
		{"list capacity negative", Request{Lists: map[string]ListAction{"players": {Capacity: i64(-1)}}}, `lists["players"].capacity`, "between 0 and 1000"},
		{"policy selector", Request{MultiCluster: MultiClusterSetting{Enabled: true, PolicySelector: map[string]string{"a": "b c"}}}, `multiClusterSetting.policySelector.matchLabels["a"]`, "value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Normalize(&tc.req)
			var ire *InvalidRequestError
			if !errors.As(err, &ire) {
				t.Fatalf("Normalize = %v, want *InvalidRequestError", err)
			}
			for _, fe := range ire.Errors {
				if fe.Field == tc.wantField && strings.Contains(fe.Reason, tc.wantIn) {
					return
				}
			}
			t.Fatalf("want an error on %s containing %q, got: %v", tc.wantField, tc.wantIn, err)
		})
	}
}

func TestNormalizeAccepts(t *testing.T) {
	cases := []Request{
		{},
		{Namespace: "game-1", Selectors: []Selector{{
			MatchLabels:      map[string]string{FleetLabel: "green", "example.com/tier": "a.b_c-1", "empty": ""},
			MatchExpressions: []LabelExpression{{Key: "x", Operator: OpIn, Values: []string{"1"}}, {Key: "y", Operator: OpDoesNotExist}},
			State:            StateAllocated,
			Counters:         map[string]CounterSelector{"rooms": {MinCount: 1, MaxCount: 0, MinAvailable: 1}},
			Lists:            map[string]ListSelector{"players": {ContainsValue: "any string at all", MaxAvailable: 10}},
		}}},
		{Counters: map[string]CounterAction{"rooms": {Action: ActionDecrement, Amount: i64(0), Capacity: i64(0)}, "x": {Action: ActionIncrement}}},
		{Lists: map[string]ListAction{"players": {Capacity: i64(1000), AddValues: []string{"anything"}}}},
		{Metadata: MetaPatch{Annotations: map[string]string{"note": "free text, spaces and all"}}},
		{Priorities: []Priority{{Type: PriorityList, Key: "players", Order: Descending}}, Scheduling: Distributed},
	}
	for i, r := range cases {
		if _, err := Normalize(&r); err != nil {
			t.Errorf("case %d: %v", i, err)
		}
	}
}

func TestNormalizeDefaultsAndDeprecatedSelectors(t *testing.T) {
	n, err := Normalize(&Request{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Namespace != "default" || len(n.Selectors) != 1 || n.Selectors[0].State != StateReady {
		t.Fatalf("defaults: %+v", n)
	}

	req := &Request{
		Required:  &Selector{MatchLabels: map[string]string{"game": "x"}},
		Preferred: []Selector{{MatchLabels: map[string]string{FleetLabel: "green"}}, {MatchLabels: map[string]string{FleetLabel: "blue"}, State: StateAllocated}},
	}
	n, err = Normalize(req)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, s := range n.Selectors {
		got = append(got, s.MatchLabels[FleetLabel]+s.MatchLabels["game"]+"/"+string(s.State))
	}
	if strings.Join(got, ",") != "green/Ready,blue/Allocated,x/Ready" {
		t.Fatalf("converted selectors = %v", got)
	}
	if n.Required != nil || n.Preferred != nil {
		t.Fatal("deprecated fields should be cleared after conversion")
	}
	if req.Selectors != nil || req.Preferred[0].State != "" {
		t.Fatal("Normalize modified its input")
	}

	// Selectors win over the deprecated fields.
	n, _ = Normalize(&Request{Selectors: []Selector{{State: StateAllocated}}, Required: &Selector{MatchLabels: map[string]string{"a": "b"}}})
	if len(n.Selectors) != 1 || n.Selectors[0].State != StateAllocated {
		t.Fatalf("selectors should take precedence: %+v", n.Selectors)
	}
}

func TestNormalizeErrorsAreDeterministic(t *testing.T) {
	req := &Request{Selectors: []Selector{{MatchLabels: map[string]string{"a b": "1", "c d": "2", "e f": "3", "g h": "4"}}}}
	_, first := Normalize(req)
	for range 20 {
		if _, err := Normalize(req); err.Error() != first.Error() {
			t.Fatalf("messages differ:\n%v\n%v", first, err)
		}
	}
	if n := len(first.(*InvalidRequestError).Errors); n != 4 {
		t.Fatalf("want every bad field reported, got %d: %v", n, first)
	}
}

// TestNormalizeAllocations bounds what normalizing a typical request costs
// the heap (the allocator normalizes every request): the normalized copy,
// its selector list and the compiled selector. Field names for errors are
// built only when there is an error to report.
func TestNormalizeAllocations(t *testing.T) {
	r := &Request{
		Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "f", "mode": "load"}, State: StateReady}},
		Metadata:  MetaPatch{Annotations: map[string]string{"quartermaster.dev/owner": "dev"}},
	}
	n := testing.AllocsPerRun(100, func() {
		if _, err := Normalize(r); err != nil {
			t.Fatal(err)
		}
	})
	if n > 3 {
		t.Fatalf("Normalize allocates %.0f times, want at most 3", n)
	}
}
