package e2e

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/browsertest"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// workspaceSales is the dataset TestBrowserWorkspace uploads.
const workspaceSales = "region,total\nnorth,120\nsouth,75\neast,98\nwest,143\n"

// workspaceChart is the analysis it uploads beside it and runs as a step:
// matplotlib (the python image's) draws sales.csv's totals as bars into
// chart.png, 600 x 350 pixels.
const workspaceChart = `import csv, os
os.environ.setdefault("MPLCONFIGDIR", "/tmp/matplotlib")
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

with open("sales.csv", newline="") as f:
    rows = list(csv.DictReader(f))
fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
ax.bar([r["region"] for r in rows], [float(r["total"]) for r in rows], color="#1f6feb")
ax.set_title("Sales by region")
ax.set_ylabel("total")
fig.tight_layout()
fig.savefig("chart.png")
print("chart.png:", len(rows), "regions")
`

// TestBrowserWorkspace drives the workspace view in headless Chromium
// against a real gateway, scheduler and agent (issue 12, Done 6): drop
// sales.csv and chart.py on the page, run `python3 chart.py` from the
// new-run form, follow the step's revision link from the run page, see
// chart.png previewed and the history with its authors (the owner twice,
// then the step linked to its run), diff the step's revision, and save
// docs/screenshots/workspace.png.
func TestBrowserWorkspace(t *testing.T) {
	requireBrowser(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	startNamedAgent(t, f, "browser-ws-node-a1")
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	password := g.ownerPassword(t, ownerEmail)
	apiC := newGWClient(t, g, &recorder{})
	owner := apiC.signIn(ownerEmail, password)
	var ws struct {
		ID string `json:"id"`
	}
	apiC.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "sales-demo"}, &ws)

	ctx := browsertest.Start(t, 8*time.Minute)
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		browsertest.Do(t, ctx, what, actions...)
	}
	eval := func(js string) string {
		t.Helper()
		return browsertest.Eval(t, ctx, js)
	}
	wait := func(d time.Duration, what, js string) {
		t.Helper()
		browsertest.Wait(t, ctx, d, what, js)
	}
	revisions := func() []api.Revision {
		t.Helper()
		var revs []api.Revision
		apiC.must(http.StatusOK, http.MethodGet, "/v1/workspaces/"+ws.ID+"/revisions", nil, &revs)
		return revs
	}

	browserSignIn(t, ctx, g.site, ownerEmail, password, ws.ID)

	// Upload: the dataset and the analysis dropped on the empty tree.
	do("open the workspace", chromedp.Navigate(g.site+"/#/workspaces/"+ws.ID))
	wait(30*time.Second, "the empty workspace", `!!document.querySelector('#ws-tree-empty') && !document.querySelector('#ws-error').textContent`)
	browsertest.Drop(t, ctx, "#ws-tree-card", [][2]string{{"sales.csv", workspaceSales}, {"chart.py", workspaceChart}})
	wait(60*time.Second, "the two uploads in the tree and the history",
		`document.querySelectorAll('#ws-tree button[data-path]').length === 2 && document.querySelectorAll('#ws-history tr[data-testid=revision-row]').length === 2`)
	if errText := eval(`document.querySelector('#ws-upload-error').textContent`); errText != "" {
		t.Fatalf("#ws-upload-error = %q after the drop", errText)
	}
	revs := revisions()
	if len(revs) != 2 {
		t.Fatalf("the API lists %d revisions after the drop, want 2: %+v", len(revs), revs)
	}
	for _, r := range revs {
		if r.Author != (api.Author{Kind: api.AuthorAccount, ID: owner.ID}) {
			t.Errorf("revision %s by %+v, want the owner's account %s", r.ID, r.Author, owner.ID)
		}
	}
	do("preview sales.csv", chromedp.Click(chromedp.CSS(`#ws-tree button[data-path="sales.csv"]`)))
	wait(30*time.Second, "the CSV table", `!!document.querySelector('#ws-csv')`)
	if got := eval(`[...document.querySelectorAll('#ws-csv tr')].map(tr => [...tr.cells].map(c => c.textContent).join(',')).join('\n') + '\n'`); got != workspaceSales {
		t.Errorf("#ws-csv shows %q, want %q", got, workspaceSales)
	}

	// Run the analysis from the new-run form; the run page links the step
	// to the revision it made.
	do("start the analysis",
		chromedp.Navigate(g.site+"/#/runs"))
	wait(30*time.Second, "the new-run form", `!!document.querySelector('#new-run-workspace option[value="`+ws.ID+`"]')`)
	do("submit the analysis",
		chromedp.SetValue(chromedp.CSS("#new-run-workspace"), ws.ID),
		chromedp.SetValue(chromedp.CSS("#new-run-image"), "python"),
		chromedp.SetValue(chromedp.CSS("#new-run-args"), "python3 chart.py"),
		chromedp.Click(chromedp.CSS("#new-run-submit")))
	wait(30*time.Second, "the run page", `!!document.querySelector('#run-id')`)
	runID := strings.TrimSpace(eval(`document.querySelector('#run-id').textContent`))
	wait(4*time.Minute, "the run to end", `['succeeded', 'failed', 'cancelled'].includes(document.querySelector('#run-state').textContent)`)
	if state := eval(`document.querySelector('#run-state').textContent`); state != "succeeded" {
		t.Fatalf("the run %s, want succeeded; step 0: %s, terminal %q", state, eval(`document.querySelector('#step-exit-0').textContent`), eval(`window.rodonTerminalText(0)`))
	}
	wait(15*time.Second, "the step's revision linked", `!document.querySelector('#step-revision-0').hidden`)
	stepRev := eval(`document.querySelector('#step-revision-0').dataset.rev`)
	if got, want := eval(`document.querySelector('#step-revision-0').getAttribute('href')`), "#/workspaces/"+ws.ID+"/"+stepRev; got != want {
		t.Errorf("#step-revision-0 links to %q, want %q", got, want)
	}
	if out := eval(`window.rodonTerminalText(0)`); !strings.Contains(out, "chart.png: 4 regions") {
		t.Errorf("the step printed %q, want chart.png: 4 regions", out)
	}

	// The step's revision: chart.png previewed from the files route.
	do("follow the step's revision", chromedp.Click(chromedp.CSS("#step-revision-0")))
	wait(30*time.Second, "the step's revision shown", `document.querySelector('#ws-tree')?.dataset.rev === '`+stepRev+`'`)
	do("preview chart.png", chromedp.Click(chromedp.CSS(`#ws-tree button[data-path="chart.png"]`)))
	wait(30*time.Second, "chart.png loaded", `document.querySelector('#ws-image')?.dataset.loaded === 'true'`)
	if got := eval(`document.querySelector('#ws-image').naturalWidth + 'x' + document.querySelector('#ws-image').naturalHeight`); got != "600x350" {
		t.Errorf("#ws-image is %s, want the 600x350 chart", got)
	}
	code, chart := apiC.do(http.MethodGet, "/v1/workspaces/"+ws.ID+"/files/chart.png?rev="+stepRev, nil, nil)
	if code != http.StatusOK || !bytes.HasPrefix(chart, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("GET files/chart.png = %d with %d bytes, want 200 and a PNG", code, len(chart))
	}

	// The history: the step's revision on top, authored by the step and
	// linked to its run; the owner's two uploads below.
	wait(30*time.Second, "three revisions in the history", `document.querySelectorAll('#ws-history tr[data-testid=revision-row]').length === 3`)
	type row struct {
		Rev    string `json:"rev"`
		Number string `json:"number"`
		Kind   string `json:"kind"`
		Run    string `json:"run"`
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]row](`[...document.querySelectorAll('#ws-history tr[data-testid=revision-row]')].map(tr => `+
		`({rev: tr.dataset.rev, number: tr.dataset.number, kind: tr.dataset.authorKind, run: tr.querySelector('.author a')?.dataset.runId ?? ''}))`))
	if err != nil {
		t.Fatalf("browser: read the history: %v", err)
	}
	want := []row{{stepRev, "3", api.AuthorStep, runID}, {revs[0].ID, "2", api.AuthorAccount, ""}, {revs[1].ID, "1", api.AuthorAccount, ""}}
	if len(rows) != len(want) {
		t.Fatalf("the history shows %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("history row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
	var op gwOperation
	apiC.must(http.StatusOK, http.MethodGet, "/v1/runs/"+runID, nil, &op)
	if r := revisions()[0]; r.ID != stepRev || r.Author != (api.Author{Kind: api.AuthorStep, ID: op.Steps[0].ID}) {
		t.Errorf("the API's newest revision = %+v, want %s by step %s", r, stepRev, op.Steps[0].ID)
	}

	// The diff of the step's revision: chart.png added.
	do("diff the step's revision", chromedp.Click(chromedp.CSS(`tr[data-rev="`+stepRev+`"] button[data-action=diff]`)))
	wait(30*time.Second, "the diff naming chart.png", `!!document.querySelector('#ws-diff-changes li[data-change=added][data-path="chart.png"]')`)

	// The screenshot: the chart, the history and the diff.
	do("back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`), chromedp.Sleep(500*time.Millisecond))
	browsertest.Screenshot(t, ctx, filepath.Join("..", "..", "docs", "screenshots", "workspace.png"))
	for _, p := range append(f.agents, f.schedulers...) {
		p.stop(30 * time.Second)
	}
}
