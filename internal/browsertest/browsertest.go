// Package browsertest starts headless Chromium for the tests that drive
// the web page (web's page tests against a stand-in API, internal/e2e's
// against the real stack), waits on the page, drops files on it and saves
// its screenshots.
package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rodon-compute/rodon/internal/testenv"
)

// ChromiumPath is the browser the tests drive.
const ChromiumPath = "/usr/bin/chromium"

// Start starts Chromium with a 1280x900 window and returns a context for
// chromedp actions that ends after timeout (or with the test). The browser
// is closed when the test ends. Without Chromium the test skips, or fails
// under CI=true.
func Start(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	if _, err := os.Stat(ChromiumPath); err != nil {
		testenv.Missing(t, "the browser tests need Chromium at "+ChromiumPath+": "+err.Error())
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(ChromiumPath), chromedp.Headless, chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	// The first action starts the browser: its context must not time out.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(cancel)
	return ctx
}

// Screenshot saves a full-page screenshot of the page in ctx as path
// (its directory made when missing).
func Screenshot(t testing.TB, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("browser: screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s (%d bytes)", path, len(png))
}

// Eval evaluates js in the page and returns its string result.
func Eval(t testing.TB, ctx context.Context, js string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("browser: %s: %v", js, err)
	}
	return s
}

// Wait polls js in the page until it is true; past d it fails the test
// naming what and what the page's error lines (elements of class error)
// say.
func Wait(t testing.TB, ctx context.Context, d time.Duration, what, js string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('.error')].filter(e => e.textContent).map(e => '#' + e.id + ': ' + e.textContent).join('; ')`))
			t.Fatalf("browser: waited %v for %s (%v); the page's errors: %q", d, what, err, shown)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Drop drops files (name, text) on the element sel as a person dragging
// them from the desktop would: one DataTransfer, dragenter, dragover and
// drop.
func Drop(t testing.TB, ctx context.Context, sel string, files [][2]string) {
	t.Helper()
	list, err := json.Marshal(files)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := json.Marshal(sel)
	n := Eval(t, ctx, `(() => { const dt = new DataTransfer(); for (const [n, t] of `+string(list)+`) dt.items.add(new File([t], n));`+
		` const el = document.querySelector(`+string(target)+`);`+
		` for (const k of ['dragenter', 'dragover', 'drop']) el.dispatchEvent(new DragEvent(k, {dataTransfer: dt, bubbles: true, cancelable: true}));`+
		` return String(dt.files.length); })()`)
	if n != fmt.Sprint(len(files)) {
		t.Fatalf("browser: dropped %s files on %s, want %d", n, sel, len(files))
	}
}

// Do runs actions, failing the test naming what on an error.
func Do(t testing.TB, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}
