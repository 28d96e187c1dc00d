package reports

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ChangesFile is the name, beside thresholds.yaml, of the file in which a
// change says that it changes figures gated as exact (the simulator's
// outputs at a fixed seed), and why. `make perf-baseline` removes it: once
// the baseline includes the change there is nothing left to declare.
const ChangesFile = "changes.yaml"

const changesKind = "DeclaredChanges"

// DeclaredChange lets exact figures matching Figure differ from the
// baseline, for Reason.
type DeclaredChange struct {
	// Figure is a regular expression matched against whole figure names.
	Figure string `yaml:"figure"`
	// Reason says what the change does to them; the report shows it.
	Reason string `yaml:"reason"`

	re *regexp.Regexp
}

// LoadChanges reads a changes file; a missing file declares nothing.
func LoadChanges(path string) ([]DeclaredChange, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := ParseChanges(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseChanges decodes a changes file strictly and validates it.
func ParseChanges(data []byte) ([]DeclaredChange, error) {
	var doc struct {
		APIVersion string           `yaml:"apiVersion"`
		Kind       string           `yaml:"kind"`
		Changes    []DeclaredChange `yaml:"changes"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	var extra any
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, errors.New("a changes file holds one YAML document; found more")
	}
	if doc.APIVersion != apiVersion {
		return nil, fmt.Errorf("apiVersion: got %q, want %q", doc.APIVersion, apiVersion)
	}
	if doc.Kind != changesKind {
		return nil, fmt.Errorf("kind: got %q, want %q", doc.Kind, changesKind)
	}
	for i := range doc.Changes {
		c := &doc.Changes[i]
		p := fmt.Sprintf("changes[%d]", i)
		if c.Figure == "" {
			return nil, fmt.Errorf("%s.figure: missing", p)
		}
		if strings.TrimSpace(c.Reason) == "" {
			return nil, fmt.Errorf("%s.reason: missing (say what the change does to these figures)", p)
		}
		re, err := regexp.Compile("^(?:" + c.Figure + ")$")
		if err != nil {
			return nil, fmt.Errorf("%s.figure: %v", p, err)
		}
		c.re = re
	}
	return doc.Changes, nil
}

// declared returns the declared change covering figure name, or nil.
func (t *Thresholds) declared(name string) *DeclaredChange {
	for i := range t.Declared {
		if t.Declared[i].re.MatchString(name) {
			return &t.Declared[i]
		}
	}
	return nil
}
