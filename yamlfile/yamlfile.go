// Package yamlfile reads Quartermaster's versioned YAML files (rig
// topologies, scenarios, soak schedules) one way: the size bounded, the
// apiVersion and kind checked before anything else, so that a file of
// another kind says so instead of listing unknown fields, then one
// document decoded with unknown fields refused. Duration is the duration
// such files write.
package yamlfile

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"go.yaml.in/yaml/v3"
)

// Format is one kind of versioned file.
type Format struct {
	// Name is how errors name a file of this format ("scenario").
	Name       string
	APIVersion string
	Kind       string
	// MaxSize bounds the file in bytes, so a hostile file cannot cost
	// unbounded memory.
	MaxSize int
	// Reword turns the YAML library's errors (syntax, unknown fields,
	// wrong types) into the words the format's users read, given the
	// whole file; nil leaves them as they are.
	Reword func(data []byte, err error) error
}

// Decode reads data, one YAML document of f's apiVersion and kind, into
// v, refusing unknown fields. Defaults and validation are the caller's.
func (f Format) Decode(data []byte, v any) error {
	if len(data) > f.MaxSize {
		return fmt.Errorf("%s is %d bytes; the limit is %d", f.Name, len(data), f.MaxSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%s is empty", f.Name)
	}
	var head struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return f.reword(data, err)
	}
	if head.APIVersion != f.APIVersion {
		return fmt.Errorf("apiVersion: got %q, want %q", head.APIVersion, f.APIVersion)
	}
	if head.Kind != f.Kind {
		return fmt.Errorf("kind: got %q, want %q", head.Kind, f.Kind)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return f.reword(data, err)
	}
	var extra any
	if err := dec.Decode(&extra); err != io.EOF {
		return fmt.Errorf("a %s file holds one YAML document; found more", f.Name)
	}
	return nil
}

func (f Format) reword(data []byte, err error) error {
	if f.Reword == nil {
		return err
	}
	return f.Reword(data, err)
}

// Duration is a time.Duration written as Go writes one ("1h30m",
// "250ms"). A bare number is refused: its unit would be a guess.
type Duration time.Duration

// UnmarshalYAML accepts one duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		// A list or mapping has no value to quote; say what it is instead.
		return fmt.Errorf("line %d: a %s is not a duration: write one value with a unit, like 10s or 1h30m", n.Line, NodeKind(n))
	}
	v, err := time.ParseDuration(n.Value)
	if n.Tag != "!!str" || err != nil {
		return fmt.Errorf("line %d: %q is not a duration: write one value with a unit, like 10s or 1h30m", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// D is the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// NodeKind names a YAML node's kind as a reader of the file would: "list",
// "mapping", "alias" or "value".
func NodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	case yaml.AliasNode:
		return "alias"
	default:
		return "value"
	}
}
