package yamlfile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type doc struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Spec       struct {
		Every Duration `yaml:"every"`
		Name  string   `yaml:"name"`
	} `yaml:"spec"`
}

var format = Format{Name: "widget", APIVersion: "example.test/v1", Kind: "Widget", MaxSize: 200}

// TestDecode: a file of the format decodes; a file of another version
// or kind says which before any field is looked at; unknown fields, a
// second document, an empty or oversized file are refused, each naming
// what is wrong; Reword sees the YAML library's errors and only those.
func TestDecode(t *testing.T) {
	var d doc
	if err := format.Decode([]byte("apiVersion: example.test/v1\nkind: Widget\nspec:\n  every: 1h30m\n  name: w\n"), &d); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if d.Spec.Every.D() != 90*time.Minute || d.Spec.Name != "w" {
		t.Errorf("decoded %+v", d.Spec)
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"version", "apiVersion: example.test/v2\nkind: Widget\nspec: {bogus: 1}\n", `apiVersion: got "example.test/v2", want "example.test/v1"`},
		{"kind", "apiVersion: example.test/v1\nkind: Gadget\nspec: {bogus: 1}\n", `kind: got "Gadget", want "Widget"`},
		{"no header", "spec: {name: w}\n", `apiVersion: got "", want "example.test/v1"`},
		{"unknown field", "apiVersion: example.test/v1\nkind: Widget\nspec:\n  colour: red\n", "line 4: field colour not found"},
		{"two documents", "apiVersion: example.test/v1\nkind: Widget\n---\napiVersion: example.test/v1\nkind: Widget\n", "a widget file holds one YAML document; found more"},
		{"empty", " \n\n", "widget is empty"},
		{"too large", "apiVersion: example.test/v1\nkind: Widget\n#" + strings.Repeat("x", 200) + "\n", "widget is 243 bytes; the limit is 200"},
		{"syntax", "apiVersion: [\n", "yaml: line"},
		{"bad duration", "apiVersion: example.test/v1\nkind: Widget\nspec:\n  every: 5\n", `line 4: "5" is not a duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			err := format.Decode([]byte(tc.file), &d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode: %v, want an error with %q", err, tc.want)
			}
		})
	}

	reworded := errors.New("reworded")
	var saw []string
	rw := format
	rw.Reword = func(data []byte, err error) error {
		saw = append(saw, string(data))
		return reworded
	}
	bad := "apiVersion: example.test/v1\nkind: Widget\nspec:\n  colour: red\n"
	if err := rw.Decode([]byte(bad), &d); !errors.Is(err, reworded) || len(saw) != 1 || saw[0] != bad {
		t.Errorf("an unknown field: %v, Reword saw %q", err, saw)
	}
	if err := rw.Decode([]byte("apiVersion: ["), &d); !errors.Is(err, reworded) {
		t.Errorf("a syntax error: %v, want Reword's", err)
	}
	saw = nil
	if err := rw.Decode([]byte("apiVersion: example.test/v1\nkind: Gadget\n"), &d); errors.Is(err, reworded) || len(saw) != 0 {
		t.Errorf("a wrong kind went through Reword: %v", err)
	}
}

// TestDuration: a duration is one string with a unit; a bare number, a
// word, a list or a mapping is refused with its line; it writes back as
// the string it reads.
func TestDuration(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	if err := yaml.Unmarshal([]byte("d: 250ms\n"), &v); err != nil || v.D.D() != 250*time.Millisecond {
		t.Fatalf("250ms: %v %v", v.D.D(), err)
	}
	for in, want := range map[string]string{
		"d: 5\n":          `line 1: "5" is not a duration: write one value with a unit`,
		"d: \"5\"\n":      `line 1: "5" is not a duration`,
		"d: soon\n":       `line 1: "soon" is not a duration`,
		"\nd: [1s]\n":     "line 2: a list is not a duration",
		"d: {a: 1s}\n":    "line 1: a mapping is not a duration",
		"d: 1.5\n":        `"1.5" is not a duration`,
		"d: 10s 20s\n":    `"10s 20s" is not a duration`,
		"d: true\n":       `"true" is not a duration`,
		"d: 1h30mx\n":     `"1h30mx" is not a duration`,
		"d: 0x10\n":       `"0x10" is not a duration`,
		"d: 1e3\n":        `"1e3" is not a duration`,
		"d: \"\"\n":       `"" is not a duration`,
		"d: .inf\n":       `".inf" is not a duration`,
		"d: 12:30\n":      `"12:30" is not a duration`,
		"d: 2026-11-26\n": `"2026-11-26" is not a duration`,
	} {
		if err := yaml.Unmarshal([]byte(in), &v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	out, err := yaml.Marshal(struct {
		D Duration `yaml:"d"`
	}{Duration(90 * time.Minute)})
	if err != nil || string(out) != "d: 1h30m0s\n" {
		t.Errorf("Marshal: %q %v", out, err)
	}
	if j, err := Duration(250 * time.Millisecond).MarshalJSON(); err != nil || string(j) != `"250ms"` {
		t.Errorf("MarshalJSON: %s %v", j, err)
	}
}
