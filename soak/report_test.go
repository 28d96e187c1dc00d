package soak

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Every field of a result is in the table qm soak prints (and writes), but
// for the marks of the document and the timeline qm report draws: a field
// added to Result that this test does not know fails it.
func TestTableShowsEveryResultField(t *testing.T) {
	r := &Result{APIVersion: ResultAPIVersion, Kind: ResultKind,
		Start: t0, End: t0.Add(90 * time.Second),
		FaultSpans: []Fault{{Kind: FaultAnswerLost, Target: "callers->east", Start: t0.Add(10 * time.Second), End: t0.Add(15 * time.Second)}},
		Timeline:   []Second{{At: 0, Sent: 1, OK: 1}},
		Requests:   1001, OK: 1002, Retries: 1003, Resolves: 1004, ResolvedHeld: 1005, Released: 1006, Live: 1007,
		Strict: true,
		Promises: []Promise{{Name: PromiseNoDangling, Description: "no server left Allocated that no live session holds",
			Violations: 1008, Examples: []string{"east/default/gs-example is Allocated"}, Explained: 1009}},
		Unread:           []string{"west-unread"},
		ErrorRateOutside: 0.1234, P99Outside: 1010 * time.Millisecond,
		Faults: []FaultStats{{Kind: FaultAnswerLost, Count: 1011, During: 1012, DuringFailed: 506, After: 1013,
			MaxRecovery: 1014 * time.Second, Unrecovered: 1015, P99During: 1016 * time.Millisecond}},
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	shown := map[string][]string{
		"APIVersion":       nil,
		"Kind":             nil,
		"Timeline":         nil,
		"Start":            {"from " + t0.Format(time.RFC3339)},
		"End":              {"Run: 1m30s from"},
		"FaultSpans":       {", 1 faults"},
		"Requests":         {"Requests: 1001"},
		"OK":               {"answered OK: 1002"},
		"Retries":          {"1003 tries sent again"},
		"Resolves":         {"1004 requests given up and resolved"},
		"ResolvedHeld":     {"1005 of which held a server"},
		"Released":         {"released 1006"},
		"Live":             {"held at the end 1007"},
		"Strict":           {"counted strictly"},
		"Promises":         {"| no-dangling | 1008 | 1009 | no server left Allocated", "- east/default/gs-example is Allocated", "violations: 1008"},
		"Unread":           {"cluster could not be read): west-unread"},
		"ErrorRateOutside": {"error rate 12.3%"},
		"P99Outside":       {"p99 1.01s"},
		"Faults":           {"| answer-lost | 1011 | 50.0% of 1012 | 0.0% of 1013 | 16m54s | 1015 | 1.016s |"},
	}
	fields := reflect.TypeOf(Result{})
	for i := range fields.NumField() {
		name := fields.Field(i).Name
		wants, ok := shown[name]
		if !ok {
			t.Errorf("Result.%s: a field this test does not know; write it in WriteTable and add it here", name)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(text, w) {
				t.Errorf("Result.%s: the table has no %q:\n%s", name, w, text)
			}
		}
	}
}
