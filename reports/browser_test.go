package reports

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var screenshot = flag.String("screenshot", "", "also write the top of the page, as a browser shows it, to this PNG (the README's picture)")

// chromium finds Debian's chromium (mk/report.mk installs it) or another
// Chrome on PATH.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestPageInBrowser opens the page in a real headless Chromium: it must
// load with no console error, and every plot must render with pixels that
// are not all one colour. Screenshots go to the test's artifact directory
// (go test ./reports -run Browser -artifacts -outputdir DIR).
func TestPageInBrowser(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("no chromium binary on PATH: install it with `make report-browser` (apt-get install chromium) to run this test")
	}
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	r, err := Build([]string{"testdata/bench-slow.txt", "testdata/sim-small.json", "testdata/live-small.json", "testdata/load-small.json"}, "testdata/baseline")
	if err != nil {
		t.Fatal(err)
	}
	// One recorded baseline, so the page has its trend plots too.
	r.History = &History{APIVersion: apiVersion, Kind: historyKind}
	if err := r.History.Record("0123456789abcdef", "2026-11-22T00:00:00Z", r.Comparison); err != nil {
		t.Fatal(err)
	}
	dir := t.ArtifactDir()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	page, err := filepath.Abs(filepath.Join(dir, HTMLFile))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // tests run as root in CI, where Chromium's sandbox refuses to start
		chromedp.WindowSize(1400, 1500),
		chromedp.Flag("disable-gpu", true),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	// Subscribe before navigating so nothing the page says is missed; a
	// goroutine drains the messages until the browser closes.
	messages := chromedp.Console(bctx)
	var mu sync.Mutex
	var consoleErrors []string
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for m, err := range messages {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				mu.Lock()
				consoleErrors = append(consoleErrors, m.String())
				mu.Unlock()
			}
		}
	}()
	if err := chromedp.Do(bctx, chromedp.Navigate("file://"+page), chromedp.WaitReady("body")); err != nil {
		t.Fatal(err)
	}
	ids, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('figure.plot')).map(f => f.id)`))
	if err != nil {
		t.Fatal(err)
	}
	top, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) < 10 {
		t.Fatalf("found %d plots, want the ratio bars, five per scenario and three for the load run: %q", len(ids), ids)
	}
	writePNG(t, filepath.Join(dir, "page-top.png"), top)
	if *screenshot != "" {
		writePNG(t, *screenshot, top)
	}
	for _, id := range ids {
		size, err := chromedp.Run(bctx, chromedp.Evaluate[[]float64](fmt.Sprintf(
			`(() => { const r = document.querySelector('#%s svg').getBoundingClientRect(); return [r.width, r.height]; })()`, id)))
		if err != nil {
			t.Fatalf("plot %s: %v", id, err)
		}
		shot, err := chromedp.Run(bctx, chromedp.Screenshot("#"+id+" svg"))
		if err != nil {
			t.Fatalf("plot %s: %v", id, err)
		}
		if size[0] < 200 || size[1] < 100 {
			t.Errorf("plot %s is %vx%v px: not laid out", id, size[0], size[1])
		}
		img, err := png.Decode(bytes.NewReader(shot))
		if err != nil {
			t.Fatalf("plot %s: %v", id, err)
		}
		if share := inked(img); share < 0.01 {
			t.Errorf("plot %s: only %.2f%% of its pixels differ from the background: blank", id, 100*share)
		}
		writePNG(t, filepath.Join(dir, id+".png"), shot)
	}
	full, err := chromedp.Run(bctx, chromedp.FullScreenshot(80))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "page.jpg"), full, 0o644); err != nil {
		t.Fatal(err)
	}
	bcancel() // closes the tab, which ends the console subscription
	<-drained
	mu.Lock()
	defer mu.Unlock()
	if len(consoleErrors) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(consoleErrors, "\n"))
	}
	t.Logf("screenshots in %s", dir)
}

// inked is the share of pixels that differ from the top-left pixel (the
// background).
func inked(img image.Image) float64 {
	b := img.Bounds()
	br, bg, bb, _ := img.At(b.Min.X, b.Min.Y).RGBA()
	var n, diff int
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			n++
			if r != br || g != bg || bl != bb {
				diff++
			}
		}
	}
	if n == 0 {
		return 0
	}
	return float64(diff) / float64(n)
}

func writePNG(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
