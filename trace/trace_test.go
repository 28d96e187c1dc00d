package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
)

var t0 = time.Date(2026, 11, 22, 21, 0, 0, 0, time.UTC)

func rec(i int) Record {
	return Record{
		At:         t0.Add(time.Duration(i) * 10 * time.Millisecond),
		Request:    json.RawMessage(`{"namespace":"default","gameServerSelectors":[{"matchLabels":{"game":"shooter"}}]}`),
		Outcome:    "OK",
		Cluster:    "on-prem",
		GameServer: fmt.Sprintf("default/game-%d", i),
		LatencyMs:  1.25,
		Retries:    i % 3,
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	w, err := NewWriter(path, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want []Record
	for i := range 50 {
		r := rec(i)
		if i%10 == 9 {
			r = Record{At: r.At, Event: EventRelease, Outcome: "NotFound", GameServer: "default/gone", LatencyMs: 0.5}
		}
		want = append(want, r)
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, wrote %d", len(got), len(want))
	}
	// The same request is kept once.
	if &got[0].Request[0] != &got[1].Request[0] {
		t.Error("two records with the same request hold two copies of it")
	}
	for i := range want {
		if !got[i].At.Equal(want[i].At) {
			t.Fatalf("record %d: at %v, want %v", i, got[i].At, want[i].At)
		}
		got[i].At = want[i].At
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// TestRotation writes far more than the bound: the trace on disk stays
// within it, keeps the newest records in order, and starts at a record
// boundary.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.jsonl")
	// A leftover rotated file of an earlier run must not be read as ours.
	if err := os.WriteFile(path+".7", []byte("stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const maxBytes = 4 * 4096
	w, err := NewWriter(path, WriterOptions{MaxBytes: maxBytes, Keep: 3})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := range n {
		r := rec(i)
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := Files(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{path + ".3", path + ".2", path + ".1", path}
	if !reflect.DeepEqual(files, want) {
		t.Fatalf("files %v, want %v", files, want)
	}
	var total int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > maxBytes/4 {
			t.Errorf("%s holds %d bytes, over the per-file bound %d", f, st.Size(), maxBytes/4)
		}
		total += st.Size()
	}
	if total > maxBytes {
		t.Errorf("the trace takes %d bytes, over its bound %d", total, maxBytes)
	}
	got, err := ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 10 || len(got) >= n {
		t.Fatalf("kept %d records of %d", len(got), n)
	}
	// The newest records, consecutive, ending with the last one written.
	for i, r := range got {
		if want := fmt.Sprintf("default/game-%d", n-len(got)+i); r.GameServer != want {
			t.Fatalf("record %d of the kept ones is %s, want %s", i, r.GameServer, want)
		}
	}
}

func TestWriterOptionErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t")
	for _, tc := range []struct {
		o    WriterOptions
		want string
	}{
		{WriterOptions{MaxBytes: -1}, "max bytes -1"},
		{WriterOptions{MaxBytes: 1000}, "too small"},
		{WriterOptions{MaxBytes: 1 << 20, Keep: 10}, "keep 10"},
	} {
		if _, err := NewWriter(path, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.o, err, tc.want)
		}
	}
	if _, err := NewWriter(filepath.Join(path, "no", "such", "dir"), WriterOptions{}); err == nil {
		t.Error("a path in a missing directory was accepted")
	}
}

func TestReaderErrorsNameTheLine(t *testing.T) {
	good := `{"at":"2026-11-22T21:00:00Z","request":{},"outcome":"OK","latencyMs":1}`
	for _, tc := range []struct {
		name, line, want string
	}{
		{"not json", `{"at":`, "line 3: the record ends early"},
		{"garbage", `hello`, "line 3: column 1: not JSON"},
		{"unknown field", `{"at":"2026-11-22T21:00:00Z","request":{},"outcome":"OK","latencyMs":1,"colour":"red"}`, `line 3: json: unknown field "colour"`},
		{"no at", `{"request":{},"outcome":"OK","latencyMs":1}`, "line 3: at: missing"},
		{"bad time", `{"at":"yesterday","request":{},"outcome":"OK","latencyMs":1}`, "line 3: "},
		{"bad outcome", `{"at":"2026-11-22T21:00:00Z","request":{},"outcome":"Fine","latencyMs":1}`, `line 3: outcome: "Fine" is not a gRPC code name`},
		{"no outcome", `{"at":"2026-11-22T21:00:00Z","request":{},"latencyMs":1}`, "line 3: outcome: missing"},
		{"no request", `{"at":"2026-11-22T21:00:00Z","outcome":"OK","latencyMs":1}`, "line 3: request: missing"},
		{"request not object", `{"at":"2026-11-22T21:00:00Z","request":[1],"outcome":"OK","latencyMs":1}`, "line 3: request: not a JSON object"},
		{"negative latency", `{"at":"2026-11-22T21:00:00Z","request":{},"outcome":"OK","latencyMs":-1}`, "line 3: latencyMs: -1"},
		{"latency string", `{"at":"2026-11-22T21:00:00Z","request":{},"outcome":"OK","latencyMs":"1"}`, "line 3: latencyMs: a JSON string where float64 belongs"},
		{"negative retries", `{"at":"2026-11-22T21:00:00Z","request":{},"outcome":"OK","latencyMs":1,"retries":-2}`, "line 3: retries: -2"},
		{"bad event", `{"at":"2026-11-22T21:00:00Z","event":"free","gameServer":"a/b","outcome":"OK","latencyMs":1}`, `line 3: event: "free"`},
		{"release without server", `{"at":"2026-11-22T21:00:00Z","event":"release","outcome":"OK","latencyMs":1}`, "line 3: gameServer: missing"},
		{"server without namespace", `{"at":"2026-11-22T21:00:00Z","request":{},"outcome":"OK","latencyMs":1,"gameServer":"x"}`, `line 3: gameServer: "x": want namespace/name`},
		{"two values", good + ` {}`, "line 3: more than one JSON value"},
		{"trailing", good + ` ]`, `line 3: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := good + "\n\n" + tc.line + "\n" + good + "\n"
			_, err := ReadAll(strings.NewReader(in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestReaderLongLineAndLastLine(t *testing.T) {
	long := `{"at":"2026-11-22T21:00:00Z","request":{"namespace":"` + strings.Repeat("x", MaxLine) + `"},"outcome":"OK","latencyMs":1}`
	if _, err := ReadAll(strings.NewReader(long + "\n")); err == nil || !strings.Contains(err.Error(), "line 1: longer than") {
		t.Fatalf("error %v, want the line named as too long", err)
	}
	// The last line may lack its newline.
	recs, err := ReadAll(strings.NewReader(`{"at":"2026-11-22T21:00:00Z","request":{},"outcome":"OK","latencyMs":1}`))
	if err != nil || len(recs) != 1 {
		t.Fatalf("got %d records, %v", len(recs), err)
	}
	// A file cut mid-record says so, with the line.
	_, err = ReadAll(strings.NewReader("{\"at\":\"2026-11-22T21:00:00Z\",\"request\":{},\"outcome\":\"OK\",\"latencyMs\":1}\n{\"at\":\"2026-11-22T21:00:00Z\",\"requ"))
	if err == nil || !strings.Contains(err.Error(), "line 2:") {
		t.Fatalf("error %v, want line 2 named", err)
	}
	if _, err := ReadFiles(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing trace was read")
	}
}

// TestAsyncDropsInsteadOfBlocking: with the writer stalled, Add returns at
// once and counts what it could not queue; after Close, everything queued
// is in the file.
func TestAsyncDropsInsteadOfBlocking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	w, err := NewWriter(path, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var once sync.Once
	a := NewAsync(w, 8, func(i *int, r *Record) {
		once.Do(func() { <-gate }) // the first record stalls the writer
		*r = rec(*i)
	}, nil)
	start := time.Now()
	accepted := 0
	for i := range 100 {
		if a.Add(i) {
			accepted++
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("100 Adds took %v with the writer stalled", d)
	}
	// The writer holds one, the queue 8: the rest were dropped.
	if accepted > 9 || a.Dropped() != uint64(100-accepted) {
		t.Fatalf("accepted %d, dropped %d", accepted, a.Dropped())
	}
	close(gate)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if a.Add(1) || a.Dropped() != uint64(101-accepted) {
		t.Fatal("Add after Close was not dropped")
	}
	got, err := ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != accepted || a.Written() != uint64(accepted) {
		t.Fatalf("file holds %d records, written %d, accepted %d", len(got), a.Written(), accepted)
	}
}

func TestAsyncReportsWriteErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	w, err := NewWriter(path, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.f.Close() // the disk goes away under the writer
	var reported []error
	a := NewAsync(w, 4, func(i *int, r *Record) { *r = rec(*i) }, func(err error) { reported = append(reported, err) })
	for i := range 3 {
		a.Add(i)
	}
	if err := a.Close(); err == nil {
		t.Fatal("Close reported no error")
	}
	if len(reported) != 1 || a.Failed() == 0 {
		t.Fatalf("reported %v, failed %d", reported, a.Failed())
	}
}

func TestCoreRequest(t *testing.T) {
	raw := `{"namespace":"games","multiClusterSetting":{"enabled":true,"policySelector":{"matchLabels":{"route":"burst"}}},
	"gameServerSelectors":[{"matchLabels":{"game":"shooter"},"gameServerState":"ALLOCATED",
	"matchExpressions":[{"key":"region","operator":"In","values":["eu"]}]},{"matchLabels":{"game":"shooter"}}],
	"scheduling":"Distributed","counters":{"rooms":{"action":"Increment","amount":"1"}}}`
	got, err := CoreRequest(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := core.Request{
		Namespace:    "games",
		MultiCluster: core.MultiClusterSetting{Enabled: true, PolicySelector: map[string]string{"route": "burst"}},
		Selectors: []core.Selector{
			{MatchLabels: map[string]string{"game": "shooter"}, State: core.StateAllocated,
				MatchExpressions: []core.LabelExpression{{Key: "region", Operator: core.OpIn, Values: []string{"eu"}}}},
			{MatchLabels: map[string]string{"game": "shooter"}},
		},
		Scheduling: core.Distributed,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if _, err := core.Normalize(&got); err != nil {
		t.Fatalf("the converted request does not normalize: %v", err)
	}
	// Numbers for enums, and the deprecated selectors.
	got, err = CoreRequest(json.RawMessage(`{"scheduling":1,"requiredGameServerSelector":{"gameServerState":1},"preferredGameServerSelectors":[{"matchLabels":{"a":"b"}}]}`))
	if err != nil || got.Scheduling != core.Distributed || got.Required == nil || got.Required.State != core.StateAllocated || len(got.Preferred) != 1 {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, tc := range []struct{ raw, want string }{
		{`{"scheduling":"Distributd"}`, `request.scheduling: "Distributd" is not one of its names`},
		{`{"scheduling":7}`, "request.scheduling: 7: want a name or a number 0 to 1"},
		{`{"gameServerSelectors":[{},{"gameServerState":"GONE"}]}`, "request.gameServerSelectors[1].gameServerState"},
		{`{"namespace":3}`, "request: json: cannot unmarshal number"},
		{``, "request: missing"},
	} {
		if _, err := CoreRequest(json.RawMessage(tc.raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.raw, err, tc.want)
		}
	}
}

// FuzzReader: whatever the bytes, the reader returns records that
// validate, or an error naming a line, never a panic; and what it read
// writes back and reads again to the same records.
func FuzzReader(f *testing.F) {
	f.Add([]byte(`{"at":"2026-11-22T21:00:00Z","request":{"namespace":"default"},"outcome":"OK","cluster":"a","gameServer":"default/x","latencyMs":1.5,"retries":1}` + "\n"))
	f.Add([]byte(`{"at":"2026-11-22T21:00:00.123456789+02:00","event":"release","gameServer":"a/b","outcome":"NotFound","latencyMs":0}`))
	f.Add([]byte("\n\n{\"at\":\"2026-11-22T21:00:00Z\",\"request\":{},\"outcome\":\"OK\",\"latencyMs\":1}\r\n"))
	f.Add([]byte(`{"at":"2026-11-22T21:00:00Z","request":{"scheduling":"Distributed","gameServerSelectors":[{"gameServerState":1}]},"outcome":"OK","latencyMs":1e3}`))
	f.Add([]byte(`{"at":`))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ReadAll(bytes.NewReader(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		var buf bytes.Buffer
		path := filepath.Join(t.TempDir(), "t")
		w, err := NewWriter(path, WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			if err := recs[i].Validate(); err != nil {
				t.Fatalf("record %d read but invalid: %v", i, err)
			}
			// Converting must not panic; an error is fine (a request the
			// core cannot take is still a record).
			_, _ = recs[i].CoreRequest()
			if err := w.Write(&recs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		again, err := ReadAll(&buf)
		if err != nil {
			t.Fatalf("re-reading what was written: %v", err)
		}
		if len(again) != len(recs) {
			t.Fatalf("%d records, %d after a round trip", len(recs), len(again))
		}
		for i := range recs {
			if !again[i].At.Equal(recs[i].At) || again[i].Outcome != recs[i].Outcome || again[i].GameServer != recs[i].GameServer ||
				again[i].LatencyMs != recs[i].LatencyMs || again[i].Retries != recs[i].Retries || again[i].Event != recs[i].Event {
				t.Fatalf("record %d changed in a round trip:\n%+v\n%+v", i, recs[i], again[i])
			}
		}
	})
}
