package reports

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden from the current output")

// golden compares got with testdata/golden/name, or rewrites it with
// -update. Re-record only when the diff is understood.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./reports -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; got:\n%s\n(go test ./reports -run '%s' -update rewrites it)", path, got, t.Name())
	}
}

// The three runs against the same baseline: unchanged code, a slowed
// allocator, and too few samples.
var goldenCases = []struct {
	name   string
	files  []string
	passed bool
}{
	{"same", []string{"testdata/bench-same.txt", "testdata/sim-small.json"}, true},
	{"slow", []string{"testdata/bench-slow.txt", "testdata/sim-small.json"}, false},
	{"few", []string{"testdata/bench-few.txt"}, false},
}

func TestGoldenMarkdownAndJSON(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Build(tc.files, "testdata/baseline")
			if err != nil {
				t.Fatal(err)
			}
			if r.Comparison.Passed != tc.passed {
				t.Errorf("passed = %v, want %v", r.Comparison.Passed, tc.passed)
			}
			var md, js bytes.Buffer
			if err := r.Comparison.WriteMarkdown(&md); err != nil {
				t.Fatal(err)
			}
			if err := r.Comparison.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".md", md.Bytes())
			golden(t, tc.name+".json", js.Bytes())
		})
	}
}

// The slowed allocator is named, with its ratio to the naive reference; the
// absolute times, which the machine's speed moves by 30% a round in these
// inputs, are not what fails.
func TestSlowRunNamesTheFigure(t *testing.T) {
	r, err := Build([]string{"testdata/bench-slow.txt"}, "testdata/baseline")
	if err != nil {
		t.Fatal(err)
	}
	c := r.Comparison
	if len(c.Regressions) != 2 {
		t.Fatalf("regressions %q, want both allocator cases", c.Regressions)
	}
	for _, want := range []string{"core.Allocate/distributed-1k sec/op ÷ core.NaiveAllocate/distributed-1k sec/op", "core.Allocate/packed-1k sec/op ÷ core.NaiveAllocate/packed-1k sec/op"} {
		found := false
		for _, r := range c.Regressions {
			found = found || strings.HasPrefix(r, want+": +")
		}
		if !found {
			t.Errorf("no regression names %q: %q", want, c.Regressions)
		}
	}
}

// TestGoldenHTMLStructure pins the page's outline (sections, plots, table
// headers), not its bytes: the SVG's exact coordinates belong to gonum/plot.
func TestGoldenHTMLStructure(t *testing.T) {
	r, err := Build([]string{"testdata/bench-slow.txt", "testdata/sim-small.json", "testdata/live-small.json"}, "testdata/baseline")
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	// xmlns="http://www.w3.org/2000/svg" names a namespace and fetches
	// nothing; any reference to another file would.
	for _, bad := range []string{"<script", "<link", "@import", "url(", "src=", "href=", "<iframe", "<img"} {
		if strings.Contains(html, bad) {
			t.Errorf("page is not self-contained: it contains %q", bad)
		}
	}
	golden(t, "page-outline.txt", []byte(outline(html)))
}

var outlineRe = regexp.MustCompile(`<h[123][^>]*>(.*?)</h[123]>|<figure class="plot" id="([^"]+)">|<thead><tr>(.*?)</tr></thead>|(<svg)`)

// outline lists headings, plot ids, table headers and SVGs in page order.
func outline(html string) string {
	var b strings.Builder
	tags := regexp.MustCompile(`<[^>]+>`)
	for _, m := range outlineRe.FindAllStringSubmatch(html, -1) {
		switch {
		case m[1] != "":
			b.WriteString("heading: " + tags.ReplaceAllString(m[1], "") + "\n")
		case m[2] != "":
			b.WriteString("plot: " + m[2] + "\n")
		case m[3] != "":
			b.WriteString("  table: " + strings.Join(strings.Split(tags.ReplaceAllString(strings.ReplaceAll(m[3], "</th><th>", " | "), ""), "\n"), "") + "\n")
		case m[4] != "":
			b.WriteString("  svg\n")
		}
	}
	return b.String()
}
