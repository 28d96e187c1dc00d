package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzObjectFields checks the scanner against encoding/json: on any valid
// JSON object it finds the same members with the same value bytes, and on
// any input at all it returns instead of panicking or looping.
func FuzzObjectFields(f *testing.F) {
	for _, s := range []string{
		agonesObject,
		`{}`, ` { "a" : 1 , "b":[1,{"c":"}"}],"d":"x\"y\\"}`,
		`{"a":"\u00e9","\u0062":true,"c":null,"d":-1.5e3,"e":{"f":[]}}`,
		`{"a":1,"a":2}`, `{"a":"\\\"}"}`, `{"a":1`, `{"a"`, `[1]`, `{"a":1}x`, `{"a":1,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := map[string]string{}
		err := objectFields(b, func(k string, v []byte) error {
			got[k] = string(v)
			return nil
		})
		var want map[string]json.RawMessage
		if json.Unmarshal(b, &want) != nil || want == nil {
			return // not a valid object: any error (or none) will do
		}
		if err != nil {
			t.Fatalf("valid object %q: %v", b, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: members %v, encoding/json %v", b, got, want)
		}
		for k, v := range want {
			if got[k] != string(v) {
				t.Fatalf("%q: member %q = %q, encoding/json %q", b, k, got[k], v)
			}
		}
	})
}

func TestScanObjectIncomplete(t *testing.T) {
	full := []byte(`{"type":"ADDED","object":{"metadata":{"name":"a\"}"}}}`)
	for i := range len(full) {
		if _, err := scanObject(full[:i], func(string, []byte) error { return nil }); !errors.Is(err, errIncomplete) {
			t.Fatalf("prefix %q: want errIncomplete, got %v", full[:i], err)
		}
	}
	end, err := scanObject(append(bytes.Clone(full), `{"next":1}`...), func(string, []byte) error { return nil })
	if err != nil || end != len(full) {
		t.Fatalf("end %d, %v; want %d", end, err, len(full))
	}
}
