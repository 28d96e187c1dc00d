package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/quartermaster-dev/quartermaster/loadgen"
	"github.com/quartermaster-dev/quartermaster/plan"
	"github.com/quartermaster-dev/quartermaster/soak"
)

// ThresholdsFile is the name of the gate's rules inside a baseline
// directory; every other *.json, *.txt and *.bench file there is a result.
const ThresholdsFile = "thresholds.yaml"

// Load reads result files: `go test -bench` output, `qm sim --out` reports
// (and live runs in the same format), and `qm load` results. The kind of
// each file is told from its content. A file that is none of them, or is
// malformed, is an error naming the file and what is wrong with it.
func Load(files ...string) (*Set, error) {
	set := newSet()
	if len(files) == 0 {
		return nil, errors.New("no result files given")
	}
	for _, f := range files {
		if err := notAResult(f); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if err := set.read(f, data); err != nil {
			return nil, err
		}
	}
	return set, nil
}

// notAResult refuses, by name, what users give in place of a result file:
// a run's directory, or a soak's history.
func notAResult(f string) error {
	if st, err := os.Stat(f); err == nil && st.IsDir() {
		hint := "name the result files in it"
		if _, err := os.Stat(filepath.Join(f, "result.json")); err == nil {
			hint = "for the run it holds, give " + filepath.Join(f, "result.json")
		}
		return fmt.Errorf("%s is a directory, not a result file: %s", f, hint)
	}
	if strings.HasSuffix(f, ".jsonl") {
		return fmt.Errorf("%s: a soak's history (JSON lines) is not a result: give the run's result.json (`qm soak check --json FILE HISTORY SNAPSHOT` makes one from the history)", f)
	}
	return nil
}

// LoadDir reads every result file in dir (a baseline), in name order.
func LoadDir(dir string) (*Set, error) {
	files, err := ResultFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no result files (*.json, *.txt, *.bench)", dir)
	}
	return Load(files...)
}

// ResultFiles lists the result files in dir, sorted.
func ResultFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || n == ThresholdsFile {
			continue
		}
		switch filepath.Ext(n) {
		case ".json", ".txt", ".bench":
			out = append(out, filepath.Join(dir, n))
		}
	}
	sort.Strings(out)
	return out, nil
}

func (s *Set) read(file string, data []byte) error {
	s.Files = append(s.Files, file)
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return fmt.Errorf("%s: empty file", file)
	}
	if trimmed[0] != '{' {
		n, err := readBench(s, file, data)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%s: neither benchmark output (no line starting with \"Benchmark\" and a result) nor a JSON result", file)
		}
		return nil
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Mode       string `json:"mode"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return fmt.Errorf("%s: %s", file, jsonError(data, err))
	}
	switch {
	case head.Kind == simReportKind:
		return readSim(s, file, data, head.Kind)
	case head.Kind == plan.Kind:
		return readPlan(s, file, data)
	case strings.Contains(head.Kind, "Live") || head.Mode == "live":
		return readSim(s, file, data, head.Kind)
	case isLoadKind(head.Kind):
		return readLoad(s, file, data)
	case isSoakKind(head.Kind):
		return readSoak(s, file, data)
	case head.Kind == "":
		return fmt.Errorf("%s: JSON without a \"kind\": not a result qm report reads (%s)", file, knownKinds())
	default:
		return fmt.Errorf("%s: kind %q is not a result qm report reads (%s)", file, head.Kind, knownKinds())
	}
}

// knownKinds names every kind of result read, for an error about a file
// that is none of them.
func knownKinds() string {
	return simReportKind + " from qm sim --out (or a live run of a scenario), " + loadgen.Kind + " from qm load --out, " +
		plan.Kind + " from qm plan --out, " + soak.ResultKind + " from qm soak, or go test -bench output"
}

// jsonError turns a decoding error's byte offset into a line and column,
// which is what a person looking at the file needs.
func jsonError(data []byte, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var off int64
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	default:
		return "invalid JSON: " + err.Error()
	}
	line := 1 + bytes.Count(data[:min(int(off), len(data))], []byte("\n"))
	col := int(off) - bytes.LastIndexByte(data[:min(int(off), len(data))], '\n')
	return fmt.Sprintf("line %d, column %d: invalid JSON: %v", line, col, err)
}
