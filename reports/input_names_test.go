package reports

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What users give in place of a result file is named for what it is.
func TestLoadRefusesWhatIsNotAResult(t *testing.T) {
	run := t.TempDir()
	for _, f := range []string{"result.json", "history.jsonl"} {
		if err := os.WriteFile(filepath.Join(run, f), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for file, want := range map[string]string{
		run:                                 "is a directory, not a result file: for the run it holds, give " + filepath.Join(run, "result.json"),
		t.TempDir():                         "is a directory, not a result file: name the result files in it",
		filepath.Join(run, "history.jsonl"): "a soak's history (JSON lines) is not a result: give the run's result.json",
	} {
		_, err := Load(file)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s): %v; want an error saying %q", file, err, want)
		}
	}
}
