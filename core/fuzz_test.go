package core

import (
	"testing"
	"time"
)

// FuzzNormalize feeds arbitrary field values through validation, and the
// valid requests through allocation: neither may panic.
func FuzzNormalize(f *testing.F) {
	f.Add("default", "agones.dev/fleet", "green", "In", "Ready", int64(0), int64(0), "Increment", int64(1), int64(10), int64(5), 0, 0)
	f.Add("", "a b", "x", "Like", "Shutdown", int64(5), int64(2), "Multiply", int64(-1), int64(-1), int64(1001), 2, 9)
	f.Add("x", "", "", "Exists", "Allocated", int64(-9), int64(1<<62), "", int64(1<<62), int64(0), int64(0), 1, 1)
	ix := NewIndex()
	for _, gs := range benchFleet(50) {
		ix.Upsert(gs)
	}
	f.Fuzz(func(t *testing.T, ns, key, val, op, state string, lo, hi int64, action string, amount, capacity, listCap int64, sched, order int) {
		req := &Request{
			Namespace:  ns,
			Scheduling: Strategy(sched),
			Selectors: []Selector{{
				MatchLabels:      map[string]string{key: val},
				MatchExpressions: []LabelExpression{{Key: key, Operator: Operator(op), Values: []string{val}}},
				State:            State(state),
				Counters:         map[string]CounterSelector{"rooms": {MinCount: lo, MaxCount: hi, MinAvailable: hi, MaxAvailable: lo}},
				Lists:            map[string]ListSelector{val: {ContainsValue: val, MinAvailable: lo, MaxAvailable: hi}},
			}},
			Priorities: []Priority{{Type: PriorityType(order), Key: key, Order: Order(order)}},
			Metadata:   MetaPatch{Labels: map[string]string{val: key}, Annotations: map[string]string{key: val}},
			Counters:   map[string]CounterAction{"rooms": {Action: action, Amount: &amount, Capacity: &capacity}},
			Lists:      map[string]ListAction{"players": {Capacity: &listCap, AddValues: []string{val}, DeleteValues: []string{key}}},
		}
		n, err := Normalize(req)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if res, err := ix.Allocate(n, time.Unix(0, 0), uint64(lo)); err == nil {
			ix.Abort(res)
		}
	})
}
