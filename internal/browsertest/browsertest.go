// Package browsertest starts headless Chromium for the tests that drive
// the web page (web's page tests against a stand-in API, internal/e2e's
// against the real stack) and saves their screenshots.
package browsertest

import (
	"context"
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
