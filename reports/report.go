package reports

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// markdownExt is the Markdown summary's file extension.
const markdownExt = ".md"

// Output file names inside the output directory.
const (
	HTMLFile     = "index.html"
	MarkdownFile = "summary" + markdownExt
	JSONFile     = "comparison.json"
)

// Report is a run's results, the baseline's, and their comparison: all
// that the three outputs are written from.
type Report struct {
	Current    *Set
	Baseline   *Set // nil without a baseline
	Thresholds *Thresholds
	Comparison *Comparison
	// Title heads the page.
	Title string
	// History is the recorded baselines' gated figures (nil: none), drawn
	// as a trend per gated figure.
	History *History
}

// UseThresholds compares again under th (the gate's rules from elsewhere
// than the baseline directory), keeping its declared changes.
func (r *Report) UseThresholds(th *Thresholds) {
	base := r.Comparison.Baseline
	r.Thresholds = th
	r.Comparison = Compare(r.Current, r.Baseline, th)
	r.Comparison.Baseline = base
}

// Build reads the result files and, when baselineDir is not empty, the
// baseline and its thresholds, and compares them.
func Build(files []string, baselineDir string) (*Report, error) {
	cur, err := Load(files...)
	if err != nil {
		return nil, err
	}
	r := &Report{Current: cur, Thresholds: DefaultThresholds(), Title: "Quartermaster performance report"}
	if baselineDir != "" {
		if st, err := os.Stat(baselineDir); err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		} else if !st.IsDir() {
			return nil, fmt.Errorf("baseline %s: not a directory", baselineDir)
		}
		th, _, err := LoadThresholds(filepath.Join(baselineDir, ThresholdsFile))
		if err != nil {
			return nil, err
		}
		if th.Declared, err = LoadChanges(filepath.Join(baselineDir, ChangesFile)); err != nil {
			return nil, err
		}
		base, err := LoadDir(baselineDir)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		r.Baseline, r.Thresholds = base, th
	}
	r.Comparison = Compare(cur, r.Baseline, r.Thresholds)
	r.Comparison.Baseline = filepath.ToSlash(baselineDir)
	return r, nil
}

// WriteFiles writes the page, the Markdown summary and the comparison
// (HTMLFile, MarkdownFile, JSONFile) into dir, creating it. Each file is
// written whole or not at all (a temporary file renamed), so a reader
// never sees half a page.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md, js, page bytes.Buffer
	if err := r.Comparison.WriteMarkdown(&md); err != nil {
		return err
	}
	if err := r.Comparison.WriteJSON(&js); err != nil {
		return err
	}
	if err := r.WriteHTML(&page); err != nil {
		return fmt.Errorf("page: %w", err)
	}
	for name, b := range map[string][]byte{MarkdownFile: md.Bytes(), JSONFile: js.Bytes(), HTMLFile: page.Bytes()} {
		if err := writeAtomic(filepath.Join(dir, name), b); err != nil {
			return err
		}
	}
	return nil
}

func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
