package soak

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestHistoryRoundTrip(t *testing.T) {
	h := hist(
		ok(1, "alice", "a", "", "gs-1", 1, 5),
		withKey(ok(2, "bob", "a", "b", "gs-2", 2, -1), "k"),
		failed(3, "carol", "a", 3, "ResourceExhausted"),
		withRelease(ok(4, "dave", "b", "", "gs-3", 4, 9), "NotFound", true),
		withAttempt(withKey(ok(5, "bob", "a", "", "gs-4", 5, -1), "k2"), 2, false),
		withAttempt(withKey(failed(6, "bob", "a", 6, "NotFound"), "k3"), 0, true),
	)
	h.Faults = []Fault{{Kind: FaultLinkCut, Target: "a-b", Start: at(10), End: at(20)}}
	var b bytes.Buffer
	w := NewWriter(&b, Run{Start: h.Run.Start})
	for _, s := range h.Sessions {
		if err := w.Request(s.Request); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range h.Sessions {
		if s.Release != nil {
			if err := w.Release(*s.Release); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Fault(h.Faults[0]); err != nil {
		t.Fatal(err)
	}
	if err := w.End(h.Run.End); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != 1+6+2+1+1 {
		t.Errorf("%d lines, want one per event:\n%s", n, b.String())
	}
	got, err := ReadHistory(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, h)
	}
}

func TestReadHistoryErrors(t *testing.T) {
	const run = `{"type":"run","start":"2026-01-02T03:00:00Z","end":"2026-01-02T03:10:00Z"}` + "\n"
	const req = `{"type":"request","id":1,"caller":"alice","cluster":"a","sent":"2026-01-02T03:00:01Z","answered":"2026-01-02T03:00:02Z","code":"OK","server":"gs-1"}` + "\n"
	const failedReq = `{"type":"request","id":2,"caller":"bob","cluster":"a","sent":"2026-01-02T03:00:01Z","answered":"2026-01-02T03:00:02Z","code":"Unavailable"}` + "\n"
	const rel = `{"type":"release","id":1,"at":"2026-01-02T03:00:05Z","result":"OK"}` + "\n"
	cases := []struct {
		name, in, want string
	}{
		{"empty", "", "history is empty"},
		{"first line not run", req, `line 1: the first line must be of type "run", got "request"`},
		{"not JSON", run + "{oops\n", "line 2: not a JSON object"},
		{"no type", run + `{"id":1}` + "\n", "line 2: field type is missing"},
		{"unknown type", run + `{"type":"allocation"}` + "\n", `line 2: field type: unknown line type "allocation"`},
		{"unknown field", run + strings.Replace(req, `"code"`, `"colour":"red","code"`, 1), `line 2: request: unknown field "colour"`},
		{"bad time", run + strings.Replace(req, `"2026-01-02T03:00:01Z"`, `"yesterday"`, 1), `line 2: request: field sent: "yesterday" is not an RFC 3339 time`},
		{"id not a number", run + strings.Replace(req, `"id":1`, `"id":"one"`, 1), "line 2: request: field id: a JSON string is not a uint64"},
		{"no caller", run + strings.Replace(req, `"caller":"alice",`, "", 1), "line 2: request 1: field caller is missing"},
		{"no cluster", run + strings.Replace(req, `"cluster":"a",`, "", 1), "line 2: request 1: field cluster is missing"},
		{"no code", run + strings.Replace(req, `"code":"OK",`, "", 1), "line 2: request 1: field code is missing"},
		{"OK without server", run + strings.Replace(req, `,"server":"gs-1"`, "", 1), "line 2: request 1: field server is missing on an OK answer"},
		{"error with server", run + strings.Replace(failedReq, `"}`, `","server":"gs-1"}`, 1), "line 2: request 2: field server: set on a Unavailable answer"},
		{"answered before sent", run + strings.Replace(req, "03:00:02Z", "02:59:00Z", 1), "line 2: request 1: field answered: before sent"},
		{"negative attempt", run + strings.Replace(req, `"code"`, `"key":"k","attempt":-1,"code"`, 1), "line 2: request 1: field attempt: -1 is negative"},
		{"retry without key", run + strings.Replace(req, `"code"`, `"attempt":1,"code"`, 1), "line 2: request 1: field key is missing on a try sent again"},
		{"resolve without key", run + strings.Replace(req, `"code"`, `"resolve":true,"code"`, 1), "line 2: request 1: field key is missing on a try sent again"},
		{"id twice", run + req + req, "line 3: request: field id: 1 is used twice"},
		{"release of nothing", run + rel, "line 2: release: field id: no request 1 before this line"},
		{"release twice", run + req + rel + rel, "line 4: release: field id: request 1 is released twice"},
		{"release of a failure", run + failedReq + strings.Replace(rel, `"id":1`, `"id":2`, 1), "line 3: release: field id: request 2 was answered Unavailable"},
		{"release before answer", run + req + strings.Replace(rel, "03:00:05Z", "03:00:01Z", 1), "line 3: release: field at: 2026-01-02T03:00:01Z is before request 1 was answered"},
		{"release without result", run + req + strings.Replace(rel, `,"result":"OK"`, "", 1), "line 3: release: field result is missing"},
		{"fault without kind", run + `{"type":"fault","start":"2026-01-02T03:00:01Z","end":"2026-01-02T03:00:02Z"}` + "\n", "line 2: fault: field kind is missing"},
		{"fault ends before it starts", run + `{"type":"fault","kind":"link-cut","start":"2026-01-02T03:00:02Z","end":"2026-01-02T03:00:01Z"}` + "\n", "line 2: fault: field end: before start"},
		{"run without start", `{"type":"run","end":"2026-01-02T03:10:00Z"}` + "\n", "line 1: run: field start is missing"},
		{"run without end", strings.Replace(run, `,"end":"2026-01-02T03:10:00Z"`, "", 1), "run: field end is missing"},
		{"second run line with a start", run + run, "line 2: run: a second run line may only set end"},
		{"line too long", run + `{"type":"request","caller":"` + strings.Repeat("x", maxLine) + "\"}\n", "line 2: longer than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadHistory(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// The end may come on a last run line, written when the run is over.
	h, err := ReadHistory(strings.NewReader(strings.Replace(run, `,"end":"2026-01-02T03:10:00Z"`, "", 1) + req + `{"type":"run","end":"2026-01-02T03:10:00Z"}` + "\n"))
	if err != nil || h.Run.End.IsZero() || len(h.Sessions) != 1 {
		t.Errorf("history with a last run line: %+v, %v", h, err)
	}
}
