package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/browsertest"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/web"
)

// browserCommand makes two files whose names would read as more in a
// message ("a, +b.txt" and "x", a newline, "~y": a name the store
// refuses, so it is named in a warning instead), prints "line 0" to
// "line 33" every 0.3 s, then sleeps. It ignores SIGTERM, so that a
// cancel is confirmed only after the node's kill grace (SIGKILL): the
// page must show "cancel requested" for that long, and the API must not
// show the cancel confirmed meanwhile.
const browserCommand = `python3 -u -c "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); ` +
	`[open(n, 'w').close() for n in ('a, +b.txt', 'x' + chr(10) + '~y')]; ` +
	`[(print('line %d' % i, flush=True), time.sleep(0.3)) for i in range(34)]; time.sleep(300)"`

// TestBrowser drives the web page in headless Chromium against a real
// gateway, scheduler and agent: sign in, start a run from the form, watch
// its output arrive while it runs, cancel it and see "cancel requested"
// and then "cancel confirmed", the file it made listed, and the one the
// store refused named in a warning with its newline escaped. It saves
// docs/screenshots/run.png.
func TestBrowser(t *testing.T) {
	requireBrowser(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	startNamedAgent(t, f, "browser-node-a1")
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	password := g.ownerPassword(t, ownerEmail)
	apiC := newGWClient(t, g, &recorder{})
	apiC.signIn(ownerEmail, password)
	var ws struct {
		ID string `json:"id"`
	}
	apiC.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "browser-demo"}, &ws)

	ctx := browsertest.Start(t, 5*time.Minute)
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("browser: read %s: %v", sel, err)
		}
		return s
	}

	browserSignIn(t, ctx, g.site, ownerEmail, password, ws.ID)

	// Start the run through the new-run form; its page opens.
	run("start a run",
		chromedp.SetValue(chromedp.CSS("#new-run-workspace"), ws.ID),
		chromedp.SetValue(chromedp.CSS("#new-run-image"), "python"),
		chromedp.SetValue(chromedp.CSS("#new-run-args"), browserCommand),
		chromedp.Click(chromedp.CSS("#new-run-submit")),
		chromedp.WaitVisible(chromedp.CSS("#run-id")),
		chromedp.WaitVisible(chromedp.CSS("#cancel-button")),
	)
	runID := strings.TrimSpace(text("#run-id"))
	if !strings.HasPrefix(runID, "run-") {
		t.Fatalf("#run-id = %q, want a run id", runID)
	}
	t.Logf("run %s started from the page", runID)

	// Output appears in the terminal while the step runs.
	type view struct {
		Text   string `json:"text"`
		State  string `json:"state"`
		Cancel string `json:"cancel"`
	}
	const readView = `({text: window.rodonTerminalText(0), state: document.querySelector('#run-state').textContent.trim(),` +
		` cancel: document.querySelector('#cancel-status').textContent})`
	var v view
	readV := func() {
		t.Helper()
		var err error
		if v, err = chromedp.Run(ctx, chromedp.Evaluate[view](readView)); err != nil {
			t.Fatalf("browser: read the run page: %v", err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		readV()
		if strings.Contains(v.Text, "line 0\nline 1\nline 2\n") && v.State == "running" {
			break
		}
		if time.Now().After(deadline) || v.State != "" && v.State != "running" {
			t.Fatalf("terminal %q with run state %q, want the first lines while the run is running", v.Text, v.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var op gwOperation
	apiC.must(http.StatusOK, http.MethodGet, "/v1/runs/"+runID, nil, &op)
	if op.State != "running" || op.Steps[0].State != "running" {
		t.Fatalf("while the page showed output the API said %+v, want the step running", op)
	}
	t.Logf("terminal while running: %q", v.Text)

	// Let some more lines arrive, then cancel from the page.
	time.Sleep(2 * time.Second)
	run("click cancel", chromedp.Click(chromedp.CSS("#cancel-button")))
	var seen []string
	var requestedAt time.Time
	var atRequested gwOperation
	deadline = time.Now().Add(90 * time.Second)
	for v.Cancel != "cancel confirmed" {
		if time.Now().After(deadline) {
			t.Fatalf("#cancel-status went %q, want cancel requested then cancel confirmed", seen)
		}
		readV()
		if len(seen) == 0 || seen[len(seen)-1] != v.Cancel {
			seen = append(seen, v.Cancel)
			t.Logf("%s #cancel-status %q", time.Now().Format("15:04:05.000"), v.Cancel)
			if v.Cancel == "cancel requested" {
				// The page says so once the gateway accepted the cancel. Once the
				// API shows the cancel requested, it must not show it
				// confirmed yet: the step ignores SIGTERM, so the process
				// lives until the node's kill grace ends.
				requestedAt = time.Now()
				waitFor(t, 10*time.Second, "the API to show the cancel requested", func() bool {
					apiC.must(http.StatusOK, http.MethodGet, "/v1/runs/"+runID, nil, &atRequested)
					return atRequested.Cancel != nil
				})
				readV()
				if v.Cancel != "cancel requested" {
					t.Errorf("#cancel-status = %q right after the API showed the cancel %+v, want cancel requested", v.Cancel, atRequested.Cancel)
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	var shown []string
	for _, s := range seen {
		if s != "" {
			shown = append(shown, s)
		}
	}
	if len(shown) != 2 || shown[0] != "cancel requested" || shown[1] != "cancel confirmed" {
		t.Errorf("#cancel-status went %q, want exactly cancel requested, then cancel confirmed", seen)
	}
	if c := atRequested.Cancel; c == nil || c.RequestedAt.IsZero() || !c.ConfirmedAt.IsZero() || c.Unverified != "" {
		t.Errorf("when the page showed cancel requested the API showed the run's cancel %+v, want requested and not confirmed", c)
	}
	if sc := atRequested.Steps[0].Cancel; sc != nil && !sc.ConfirmedAt.IsZero() {
		t.Errorf("when the page showed cancel requested the API showed the step's cancel confirmed: %+v", sc)
	}
	apiC.must(http.StatusOK, http.MethodGet, "/v1/runs/"+runID, nil, &op)
	if op.State != "cancelled" || op.Cancel == nil || op.Cancel.ConfirmedAt.IsZero() ||
		!op.Cancel.ConfirmedAt.After(op.Cancel.RequestedAt) || !op.Cancel.ConfirmedAt.After(requestedAt) {
		t.Errorf("after the page showed cancel confirmed the run is %s with cancel %+v; want cancelled, confirmed after it was requested and after %v",
			op.State, op.Cancel, requestedAt)
	}
	if st := op.Steps[0]; st.State != "cancelled" || st.TerminatedBy != "user" {
		t.Errorf("step after cancel: %+v, want cancelled by the user", st)
	}
	t.Logf("cancel requested at %v, page showed it at %v, confirmed at %v", op.Cancel.RequestedAt, requestedAt, op.Cancel.ConfirmedAt)

	// The screenshot: the run page with output, phases, events and the
	// confirmed cancel, once the sandbox is cleaned up.
	waitFor(t, 60*time.Second, "the cleaned_up phase", func() bool {
		apiC.must(http.StatusOK, http.MethodGet, "/v1/runs/"+runID, nil, &op)
		return !op.Steps[0].Phases.CleanedUp.IsZero()
	})
	run("wait for the page to show the end",
		chromedp.WaitReady(chromedp.CSS(`#phase-0-cleaned_up[data-time]`)),
		chromedp.Sleep(time.Second))
	readV()
	if !strings.Contains(v.Text, "line 0\nline 1\nline 2\nline 3\n") || v.State != "cancelled" {
		t.Errorf("terminal %q with state %q at the end, want the lines and cancelled", v.Text, v.State)
	}

	// The files the step made, one item each, as the node named them (in
	// data-path) and shown with the newline escaped; the same in the run's
	// union and in the API.
	type shownFile struct {
		Change string `json:"change"`
		Path   string `json:"path"`
		Text   string `json:"text"`
	}
	const readFiles = `[...document.querySelectorAll('%s li[data-change]')].map(li => ` +
		`({change: li.dataset.change, path: li.dataset.path, text: li.querySelector('code').textContent}))`
	wantFiles := []shownFile{{"added", "a, +b.txt", "a, +b.txt"}}
	for _, list := range []string{"#files-0", "#run-files"} {
		var got []shownFile
		waitFor(t, 10*time.Second, "the page to list the step's files in "+list, func() bool {
			var err error
			got, err = chromedp.Run(ctx, chromedp.Evaluate[[]shownFile](fmt.Sprintf(readFiles, list)))
			return err == nil && len(got) >= len(wantFiles)
		})
		if !slices.Equal(got, wantFiles) {
			t.Errorf("%s lists %+v, want %+v", list, got, wantFiles)
		}
	}
	if fc := op.Steps[0].FilesChanged; fc == nil || !slices.Equal(fc.Added, []string{"a, +b.txt"}) || len(fc.Modified)+len(fc.Removed)+fc.More != 0 {
		t.Errorf("the API's files_changed of step 0 = %+v, want a, +b.txt added", fc)
	}
	// The name with a newline is no path of a stored tree: the step's
	// warning names it, typed, and the page shows it quoted.
	st, err := newClient(t, f.urls()).Step(t.Context(), op.Steps[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var dropped *api.Warning
	for _, e := range st.Events {
		if e.Warning != nil && e.Warning.Cause == api.WarningWorkspacePathsDropped {
			dropped = e.Warning
		}
	}
	if dropped == nil || !slices.Equal(dropped.Paths, []string{"x\n~y"}) {
		t.Errorf("step 0's workspace_paths_dropped warning %+v (events %+v), want it naming \"x\\n~y\"", dropped, st.Events)
	}
	waitFor(t, 10*time.Second, "the page to show the dropped name quoted", func() bool {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#events').textContent`))
		return err == nil && strings.Contains(got, `"x\n~y"`)
	})
	browsertest.Screenshot(t, ctx, filepath.Join("..", "..", "docs", "screenshots", "run.png"))
	for _, p := range append(f.agents, f.schedulers...) {
		p.stop(30 * time.Second)
	}
}

// requireBrowser needs containerd, Chromium (browsertest.Start checks it)
// and the built page.
func requireBrowser(t *testing.T) {
	t.Helper()
	testenv.RequireContainerd(t)
	if !web.Built() {
		// Without the page the gateway serves none, and the sign-in form
		// would be waited for until the test's deadline.
		testenv.Missing(t, "the browser tests need the web page: run web/build (scripts/test does)")
	}
}

// browserSignIn signs email in through the page's form and waits for the
// runs page to offer workspace ws.
func browserSignIn(t *testing.T, ctx context.Context, site, email, password, ws string) {
	t.Helper()
	err := chromedp.Do(ctx,
		chromedp.Navigate(site+"/"),
		chromedp.WaitVisible(chromedp.CSS("#signin-email")),
		chromedp.SendKeys(chromedp.CSS("#signin-email"), email),
		chromedp.SendKeys(chromedp.CSS("#signin-password"), password),
		chromedp.Click(chromedp.CSS("#signin-submit")),
		chromedp.WaitVisible(chromedp.CSS("#new-run-args")),
		chromedp.WaitReady(chromedp.CSS(`#new-run-workspace option[value="`+ws+`"]`)),
	)
	if err != nil {
		t.Fatalf("browser: sign in: %v", err)
	}
	who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#whoami")))
	if err != nil || !strings.Contains(who, email) {
		t.Errorf("#whoami = %q (%v), want %s", who, err, email)
	}
}
