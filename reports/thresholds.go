package reports

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// Thresholds are the gate's rules, read from thresholds.yaml beside the
// baseline's results.
type Thresholds struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// Alpha is the significance level: a change counts only when the
	// Mann-Whitney U test's p-value is below it. Default 0.05.
	Alpha float64 `yaml:"alpha"`
	// Confidence is the level of the intervals shown. Default 0.95.
	Confidence float64 `yaml:"confidence"`
	// MinSamples is the fewest samples each side needs before a figure is
	// gated; with fewer the report says so and does not gate. Default 5.
	MinSamples int `yaml:"minSamples"`
	// Gates are the rules; a figure no rule matches is reported, never
	// gated.
	Gates []Gate `yaml:"gates"`

	// Declared are the changes the code under test says it makes to exact
	// figures (ChangesFile beside the thresholds); not part of the
	// thresholds file itself.
	Declared []DeclaredChange `yaml:"-"`
}

// Gate is one rule.
type Gate struct {
	// Figure is a regular expression matched against whole figure names.
	Figure string `yaml:"figure"`
	// Reference, when set, names the in-run reference the figure is divided
	// by, round by round; $1 and the like expand from Figure's groups. The
	// gate then applies to the ratio.
	Reference string `yaml:"reference"`
	// MaxRegression is how much worse than the baseline the figure (or
	// ratio) may get, as a fraction: 0.5 lets a time grow by half, or a
	// throughput drop by half, before the gate fails.
	MaxRegression float64 `yaml:"maxRegression"`
	// Better overrides the direction told from the unit: "lower" or
	// "higher".
	Better string `yaml:"better"`
	// Exact gates figures that must not change at all (the simulator's
	// outputs and event counts at a fixed seed): any difference between
	// the sides fails, unless a declared change (changes.yaml) covers the
	// figure. MaxRegression does not apply.
	Exact bool `yaml:"exact"`

	re *regexp.Regexp
}

const thresholdsKind = "ReportThresholds"

// DefaultThresholds gate nothing; they apply when a baseline has no
// thresholds file.
func DefaultThresholds() *Thresholds {
	t := &Thresholds{APIVersion: apiVersion, Kind: thresholdsKind}
	t.defaults()
	return t
}

func (t *Thresholds) defaults() {
	if t.Alpha == 0 {
		t.Alpha = 0.05
	}
	if t.Confidence == 0 {
		t.Confidence = 0.95
	}
	if t.MinSamples == 0 {
		t.MinSamples = 5
	}
}

// LoadThresholds reads a thresholds file. A missing file gives the
// defaults (nothing gated) and ok false.
func LoadThresholds(path string) (t *Thresholds, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return DefaultThresholds(), false, nil
	}
	if err != nil {
		return nil, false, err
	}
	t, err = ParseThresholds(data)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return t, true, nil
}

// ParseThresholds decodes strictly (an unknown field is an error), applies
// defaults and validates.
func ParseThresholds(data []byte) (*Thresholds, error) {
	var head struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return nil, err
	}
	if head.APIVersion != apiVersion {
		return nil, fmt.Errorf("apiVersion: got %q, want %q", head.APIVersion, apiVersion)
	}
	if head.Kind != thresholdsKind {
		return nil, fmt.Errorf("kind: got %q, want %q", head.Kind, thresholdsKind)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var t Thresholds
	if err := dec.Decode(&t); err != nil {
		return nil, err
	}
	var extra any
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, errors.New("a thresholds file holds one YAML document; found more")
	}
	t.defaults()
	if err := t.validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

func (t *Thresholds) validate() error {
	if t.Alpha <= 0 || t.Alpha >= 1 {
		return fmt.Errorf("alpha: must be between 0 and 1, got %v", t.Alpha)
	}
	if t.Confidence <= 0 || t.Confidence >= 1 {
		return fmt.Errorf("confidence: must be between 0 and 1, got %v", t.Confidence)
	}
	// Below 4 samples a side, Mann-Whitney U can never reach p < 0.05:
	// such a gate could never fail, which is worse than no gate.
	if t.MinSamples < 4 {
		return fmt.Errorf("minSamples: must be at least 4 (with fewer the test can never be significant), got %d", t.MinSamples)
	}
	for i := range t.Gates {
		g := &t.Gates[i]
		p := fmt.Sprintf("gates[%d]", i)
		if g.Figure == "" {
			return fmt.Errorf("%s.figure: missing", p)
		}
		re, err := regexp.Compile("^(?:" + g.Figure + ")$")
		if err != nil {
			return fmt.Errorf("%s.figure: %v", p, err)
		}
		g.re = re
		if g.Exact {
			if g.MaxRegression != 0 || g.Reference != "" {
				return fmt.Errorf("%s: an exact gate takes neither maxRegression nor reference", p)
			}
			continue
		}
		if g.MaxRegression <= 0 {
			return fmt.Errorf("%s.maxRegression: must be positive (a fraction such as 0.5), got %v", p, g.MaxRegression)
		}
		if g.Better != "" && g.Better != "lower" && g.Better != "higher" {
			return fmt.Errorf("%s.better: must be lower or higher, got %q", p, g.Better)
		}
	}
	return nil
}

// gateFor returns the first gate whose pattern matches name, and the
// reference it names for it (expanded), if any.
func (t *Thresholds) gateFor(name string) (*Gate, string) {
	for i := range t.Gates {
		g := &t.Gates[i]
		m := g.re.FindStringSubmatchIndex(name)
		if m == nil {
			continue
		}
		ref := ""
		if g.Reference != "" {
			ref = string(g.re.ExpandString(nil, g.Reference, name, m))
		}
		return g, ref
	}
	return nil, ""
}
