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
		// Dropping any member (the first key found, when keys repeat)
		// leaves a valid object with the others.
		if len(want) == 1 || !bytes.Contains(b, []byte(`"a"`)) {
			return
		}
		out, err := withoutMember(b, "a")
		if err != nil {
			t.Fatalf("withoutMember(%q): %v", b, err)
		}
		var rest map[string]json.RawMessage
		if err := json.Unmarshal(out, &rest); err != nil {
			t.Fatalf("withoutMember(%q) = %q: %v", b, out, err)
		}
		if _, had := want["a"]; had && bytes.Count(b, []byte(`"a"`)) == 1 {
			delete(want, "a")
			if len(rest) != len(want) {
				t.Fatalf("withoutMember(%q) = %q", b, out)
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

func TestWithoutMember(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"managedFields":[1,2],"name":"a"}`, `{"name":"a"}`},
		{`{"name":"a","managedFields":[{"x":{"y":1}}],"uid":"u"}`, `{"name":"a","uid":"u"}`},
		{`{"name":"a","managedFields":[]}`, `{"name":"a"}`},
		{`{"managedFields":null}`, `{}`},
		{"{\n  \"managedFields\" : [ ] ,\n  \"name\" : \"a\"\n}", "{\n  \"name\" : \"a\"\n}"},
		{"{ \"name\": \"a\" ,\n \"managedFields\": [] }", "{ \"name\": \"a\" }"},
		{`{"name":"a","labels":{"managedFields":"kept"}}`, `{"name":"a","labels":{"managedFields":"kept"}}`},
		{`{"name":"a"}`, `{"name":"a"}`},
		{`{}`, `{}`},
	} {
		got, err := withoutMember([]byte(c.in), "managedFields")
		if err != nil || string(got) != c.want {
			t.Errorf("withoutMember(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("withoutMember(%s) = %s: not JSON", c.in, got)
		}
	}
	for _, bad := range []string{`{"managedFields":[}`, `["managedFields"]`, `{"a":1`} {
		if _, err := withoutMember([]byte(bad), "managedFields"); err == nil {
			t.Errorf("withoutMember(%s): no error", bad)
		}
	}
}
