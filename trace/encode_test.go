package trace

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"
)

// FuzzAppendRecord: the hand-written encoder writes what encoding/json
// would, as JSON values (the escapes of <, > and & and the spelling of
// numbers may differ), for any strings and numbers.
func FuzzAppendRecord(f *testing.F) {
	f.Add("release", "OK", "on-prem", "default/x", 1.25, 3, int64(1))
	f.Add("", "Unavailable", "a\"b\\c\n\t\x01<>&", "ns/\xff\xfe", 1e-9, 0, int64(-5e17))
	f.Add("", "OK", "\u2028\u2029é", "", 1e21, 7, int64(0))
	f.Fuzz(func(t *testing.T, event, outcome, cluster, gs string, lat float64, retries int, ns int64) {
		if math.IsNaN(lat) || math.IsInf(lat, 0) {
			return
		}
		r := Record{At: time.Unix(0, ns).UTC(), Event: event, Outcome: outcome, Cluster: cluster, GameServer: gs,
			LatencyMs: lat, Retries: retries, Request: json.RawMessage(`{"namespace": "default",` + "\n" + ` "scheduling":1}`)}
		ours, err := AppendRecord(nil, &r)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		var a, b map[string]any
		if err := json.Unmarshal(ours, &a); err != nil {
			t.Fatalf("%s: %v", ours, err)
		}
		if err := json.Unmarshal(theirs, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("ours   %s\ntheirs %s", ours, theirs)
		}
		for _, c := range ours {
			if c == '\n' {
				t.Fatalf("a newline inside the record: %q", ours)
			}
		}
	})
}

func TestAppendRecordRefuses(t *testing.T) {
	if _, err := AppendRecord(nil, &Record{Request: json.RawMessage(`{"a":`)}); err == nil {
		t.Error("invalid request JSON written")
	}
	if _, err := AppendRecord(nil, &Record{LatencyMs: math.NaN()}); err == nil {
		t.Error("NaN latency written")
	}
}
