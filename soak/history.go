package soak

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"time"
)

// CodeOK is the answer code of a request that was answered with a server
// and of a release that succeeded (the gRPC code names, as the wire has them).
const CodeOK = "OK"

// Line types of a history file.
const (
	lineRun     = "run"
	lineRequest = "request"
	lineRelease = "release"
	lineFault   = "fault"
)

// Run is a history's first line: when the run's load started and stopped.
type Run struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Request is one allocation request and its answer.
type Request struct {
	// ID is unique within the history; a release names it.
	ID uint64 `json:"id"`
	// Caller is the session's identity; Owner is what the allocator
	// records as the holder on the serving cluster (its owner annotation:
	// the forwarder's identity when the request was forwarded). Empty
	// Owner means the owner is Caller.
	Caller string `json:"caller"`
	Owner  string `json:"owner,omitempty"`
	// Key is the request's idempotency key, if it carried one: requests
	// of one caller with one key are one allocation.
	Key string `json:"key,omitempty"`
	// Attempt numbers a keyed request's tries from 0: a try sent again,
	// with the same key, after an answer was lost. Resolve marks a try
	// sent after the caller gave the request up, to learn what its key
	// allocated and give that back; it is not a request of the caller's.
	Attempt int  `json:"attempt,omitempty"`
	Resolve bool `json:"resolve,omitempty"`
	// Cluster is the cluster the request was sent to.
	Cluster string    `json:"cluster"`
	Sent    time.Time `json:"sent"`
	// Answered is when the answer (or the error) arrived.
	Answered time.Time `json:"answered"`
	// Code is the answer's status code name; Server and Source (the
	// cluster that allocated, as the answer's source field names it; empty
	// for the cluster the request was sent to) are set on OK answers.
	Code      string `json:"code"`
	Namespace string `json:"namespace,omitempty"`
	Server    string `json:"server,omitempty"`
	Source    string `json:"source,omitempty"`
}

// Release is the end of a session: the caller gave its server back.
type Release struct {
	ID uint64    `json:"id"`
	At time.Time `json:"at"`
	// Result is the release's final answer code. NotFound says the caller
	// held no such server, unless Retried: the release was sent again
	// after an attempt whose outcome was unknown, which may have done it.
	Result  string `json:"result"`
	Retried bool   `json:"retried,omitempty"`
}

// Fault is one injected fault, from its start to its end.
type Fault struct {
	Kind   string    `json:"kind"`
	Target string    `json:"target,omitempty"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
}

// Session is a request joined with its release (nil while the session
// was still live when the run ended).
type Session struct {
	Request
	Release *Release
}

// ServingCluster is the cluster that allocated the session's server.
func (s *Session) ServingCluster() string {
	if s.Source != "" {
		return s.Source
	}
	return s.Cluster
}

// ExpectedOwner is the owner the allocator should record for the session.
func (s *Session) ExpectedOwner() string {
	if s.Owner != "" {
		return s.Owner
	}
	return s.Caller
}

// History is a whole run as the checker reads it.
type History struct {
	Run      Run
	Sessions []Session // in the order of their requests' lines
	Faults   []Fault
}

// line is one line of a history file: its type and one of the payloads,
// flattened (a request line holds the Request's fields).
type line struct {
	Type string `json:"type"`
}

// Writer writes a history as it happens: one line per event, so that a
// long run holds no more than the sessions it is tracking.
type Writer struct {
	w   io.Writer
	err error
}

// NewWriter writes the run line and returns a Writer for the rest.
func NewWriter(w io.Writer, run Run) *Writer {
	hw := &Writer{w: w}
	hw.write(lineRun, run)
	return hw
}

// Request writes a request's line once it is answered.
func (hw *Writer) Request(r Request) error { return hw.write(lineRequest, r) }

// Release writes a session's release.
func (hw *Writer) Release(r Release) error { return hw.write(lineRelease, r) }

// Fault writes a fault once it has ended.
func (hw *Writer) Fault(f Fault) error { return hw.write(lineFault, f) }

// End writes a last run line with the run's end, which the reader takes
// over the first line's: the end is known only when the run is over.
func (hw *Writer) End(end time.Time) error {
	return hw.write(lineRun, Run{End: end})
}

// Err is the first write error, if any.
func (hw *Writer) Err() error { return hw.err }

func (hw *Writer) write(typ string, payload any) error {
	if hw.err != nil {
		return hw.err
	}
	body, err := json.Marshal(payload)
	if err != nil {
		hw.err = err
		return err
	}
	// {"type":"...",<payload fields>}
	var b bytes.Buffer
	b.WriteString(`{"type":`)
	t, _ := json.Marshal(typ)
	b.Write(t)
	if len(body) > 2 {
		b.WriteByte(',')
		b.Write(body[1:])
	} else {
		b.WriteByte('}')
	}
	b.WriteByte('\n')
	if _, err := hw.w.Write(b.Bytes()); err != nil {
		hw.err = err
	}
	return hw.err
}

// maxLine bounds one history line: a request is a few hundred bytes, and a
// bound keeps a corrupt file from costing unbounded memory.
const maxLine = 64 << 10

// ReadHistory reads a history file, checking every line. An error names
// the line and the field that is wrong.
func ReadHistory(r io.Reader) (*History, error) {
	h := &History{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	index := map[uint64]int{}
	n, sawRun := 0, false
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("line %d: not a JSON object: %v", n, err)
		}
		if !sawRun && l.Type != lineRun {
			return nil, fmt.Errorf("line %d: the first line must be of type %q, got %q", n, lineRun, l.Type)
		}
		switch l.Type {
		case lineRun:
			var run Run
			if err := decodeLine(raw, &run); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			if !sawRun {
				if run.Start.IsZero() {
					return nil, fmt.Errorf("line %d: run: field start is missing", n)
				}
				h.Run = run
				sawRun = true
				break
			}
			if !run.Start.IsZero() {
				return nil, fmt.Errorf("line %d: run: a second run line may only set end", n)
			}
			h.Run.End = run.End
		case lineRequest:
			var q Request
			if err := decodeLine(raw, &q); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			if err := q.validate(); err != nil {
				return nil, fmt.Errorf("line %d: request %d: %v", n, q.ID, err)
			}
			if _, dup := index[q.ID]; dup {
				return nil, fmt.Errorf("line %d: request: field id: %d is used twice", n, q.ID)
			}
			index[q.ID] = len(h.Sessions)
			h.Sessions = append(h.Sessions, Session{Request: q})
		case lineRelease:
			var rel Release
			if err := decodeLine(raw, &rel); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			i, ok := index[rel.ID]
			if !ok {
				return nil, fmt.Errorf("line %d: release: field id: no request %d before this line", n, rel.ID)
			}
			s := &h.Sessions[i]
			switch {
			case s.Release != nil:
				return nil, fmt.Errorf("line %d: release: field id: request %d is released twice", n, rel.ID)
			case s.Code != CodeOK:
				return nil, fmt.Errorf("line %d: release: field id: request %d was answered %s, there is nothing to release", n, rel.ID, s.Code)
			case rel.At.IsZero():
				return nil, fmt.Errorf("line %d: release: field at is missing", n)
			case rel.At.Before(s.Answered):
				return nil, fmt.Errorf("line %d: release: field at: %s is before request %d was answered", n, rel.At.Format(time.RFC3339Nano), rel.ID)
			case rel.Result == "":
				return nil, fmt.Errorf("line %d: release: field result is missing", n)
			}
			s.Release = &rel
		case lineFault:
			var f Fault
			if err := decodeLine(raw, &f); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			switch {
			case f.Kind == "":
				return nil, fmt.Errorf("line %d: fault: field kind is missing", n)
			case f.Start.IsZero():
				return nil, fmt.Errorf("line %d: fault: field start is missing", n)
			case f.End.Before(f.Start):
				return nil, fmt.Errorf("line %d: fault: field end: before start", n)
			}
			h.Faults = append(h.Faults, f)
		case "":
			return nil, fmt.Errorf("line %d: field type is missing", n)
		default:
			return nil, fmt.Errorf("line %d: field type: unknown line type %q (want run, request, release or fault)", n, l.Type)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", n+1, maxLine)
		}
		return nil, err
	}
	if !sawRun {
		return nil, errors.New("history is empty: no run line")
	}
	if h.Run.End.IsZero() {
		return nil, errors.New("run: field end is missing (the run line, or a last run line, must set it)")
	}
	if h.Run.End.Before(h.Run.Start) {
		return nil, errors.New("run: field end: before start")
	}
	sort.SliceStable(h.Faults, func(i, j int) bool { return h.Faults[i].Start.Before(h.Faults[j].Start) })
	return h, nil
}

// decodeLine decodes one line strictly: an unknown field is an error.
func decodeLine(raw []byte, v any) error {
	var typed struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &typed)
	// The type field is not part of the payloads; decode through a
	// wrapper that drops it and decodes the rest strictly.
	if err := json.Unmarshal(raw, &withType{v: v}); err != nil {
		return fmt.Errorf("%s: %s", typed.Type, err)
	}
	return nil
}

// withType decodes a line into its payload, allowing the type field.
type withType struct{ v any }

func (w *withType) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	delete(fields, "type")
	rest, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	if err := decodeStrict(rest, w.v); err != nil {
		// Find the field at fault, one at a time, so the error names it
		// (a malformed time says only what it could not parse).
		names := make([]string, 0, len(fields))
		for k := range fields {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			one, _ := json.Marshal(map[string]json.RawMessage{k: fields[k]})
			fresh := reflect.New(reflect.TypeOf(w.v).Elem()).Interface()
			if ferr := decodeStrict(one, fresh); ferr != nil {
				if msg := fieldError(ferr); strings.HasPrefix(msg, "unknown field") {
					return errors.New(msg)
				}
				return fmt.Errorf("field %s: %s", k, fieldError(ferr))
			}
		}
		return err
	}
	return nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// fieldError words the JSON decoder's errors with the field's name.
func fieldError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("a JSON %s is not a %s", te.Value, te.Type)
	}
	var pe *time.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%q is not an RFC 3339 time", pe.Value)
	}
	msg := err.Error()
	const unknown = "json: unknown field "
	if len(msg) > len(unknown) && msg[:len(unknown)] == unknown {
		return "unknown field " + msg[len(unknown):]
	}
	return msg
}

func (q *Request) validate() error {
	switch {
	case q.Caller == "":
		return errors.New("field caller is missing")
	case q.Cluster == "":
		return errors.New("field cluster is missing")
	case q.Sent.IsZero():
		return errors.New("field sent is missing")
	case q.Answered.IsZero():
		return errors.New("field answered is missing")
	case q.Answered.Before(q.Sent):
		return errors.New("field answered: before sent")
	case q.Code == "":
		return errors.New("field code is missing")
	case q.Code == CodeOK && q.Server == "":
		return errors.New("field server is missing on an OK answer")
	case q.Code != CodeOK && q.Server != "":
		return fmt.Errorf("field server: set on a %s answer", q.Code)
	case q.Attempt < 0:
		return fmt.Errorf("field attempt: %d is negative", q.Attempt)
	case (q.Attempt > 0 || q.Resolve) && q.Key == "":
		return errors.New("field key is missing on a try sent again (attempt or resolve): only a keyed request is retried")
	}
	return nil
}

// Keyed says whether any request carried an idempotency key.
func (h *History) Keyed() bool {
	for i := range h.Sessions {
		if h.Sessions[i].Key != "" {
			return true
		}
	}
	return false
}

// Call is one request as its caller saw it: a request without a key, or
// every try of one caller's keyed request within its deadline (not the
// resolves after it was given up), from the first try's send to the last
// try's answer, OK if a try was answered OK.
type Call struct {
	Sent, Answered time.Time
	OK             bool
}

// Calls are the history's requests as their callers made them, in the
// order of their first lines.
func (h *History) Calls() []Call {
	var out []Call
	byKey := map[[2]string]int{}
	for i := range h.Sessions {
		s := &h.Sessions[i]
		if s.Resolve {
			continue
		}
		ok := s.Code == CodeOK
		if s.Key == "" {
			out = append(out, Call{Sent: s.Sent, Answered: s.Answered, OK: ok})
			continue
		}
		k := [2]string{s.Caller, s.Key}
		j, seen := byKey[k]
		if !seen {
			byKey[k] = len(out)
			out = append(out, Call{Sent: s.Sent, Answered: s.Answered, OK: ok})
			continue
		}
		c := &out[j]
		if s.Sent.Before(c.Sent) {
			c.Sent = s.Sent
		}
		if s.Answered.After(c.Answered) {
			c.Answered = s.Answered
		}
		c.OK = c.OK || ok
	}
	return out
}
