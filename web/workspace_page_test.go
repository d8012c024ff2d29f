package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/browsertest"
)

// The workspace view's logic, driven in Chromium against filesAPI, a
// stand-in for the gateway's workspace routes (SPEC.md, "Workspaces and
// revisions") answering package api's shapes. The real stack is driven
// by internal/e2e's TestBrowserWorkspace.

const testWS = "ws-demo"

// testLibrary is the account library's workspace: in no list, its
// revisions the stand-in's too.
const testLibrary = "ws-library"

// filesAPI holds one workspace's revisions in memory, oldest first.
type filesAPI struct {
	mu   sync.Mutex
	role api.Role
	revs []fakeRev
	// ifMatch is the If-Match of each PUT, in order ("" when none).
	ifMatch  []string
	restores []string
	run      api.Operation
}

type fakeRev struct {
	api.Revision
	files map[string][]byte
}

func (f *filesAPI) head() *fakeRev {
	if len(f.revs) == 0 {
		return nil
	}
	return &f.revs[len(f.revs)-1]
}

func (f *filesAPI) find(id string) *fakeRev {
	for i := range f.revs {
		if f.revs[i].ID == id {
			return &f.revs[i]
		}
	}
	return nil
}

// commit makes a revision of files by author; f.mu is held.
func (f *filesAPI) commit(author api.Author, files map[string][]byte, message string) api.Revision {
	r := fakeRev{files: files}
	r.ID = fmt.Sprintf("rev-%04d", len(f.revs)+1)
	r.Workspace, r.Number, r.Author, r.Message = testWS, int64(len(f.revs)+1), author, message
	r.CreatedAt = time.Date(2026, 12, 1, 21, 0, len(f.revs), 0, time.UTC)
	var parent map[string][]byte
	if h := f.head(); h != nil {
		r.Parent, parent = h.ID, h.files
	}
	r.Changes = changes(parent, files)
	r.Files = int64(len(files))
	for _, b := range files {
		r.Bytes += int64(len(b))
	}
	r.Manifest = strings.Repeat("ab", 32)
	f.revs = append(f.revs, r)
	return r.Revision
}

func changes(from, to map[string][]byte) api.FilesChanged {
	c := api.FilesChanged{Added: []string{}, Modified: []string{}, Removed: []string{}}
	for _, p := range slices.Sorted(maps.Keys(to)) {
		if old, ok := from[p]; !ok {
			c.Added = append(c.Added, p)
		} else if !bytes.Equal(old, to[p]) {
			c.Modified = append(c.Modified, p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(from)) {
		if _, ok := to[p]; !ok {
			c.Removed = append(c.Removed, p)
		}
	}
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (f *filesAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(FS()))
	mux.HandleFunc("GET /v1/me", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, api.Me{Account: &api.Account{ID: "acct-me", Email: "me@example.com", Role: f.role}, Role: f.role, CSRFToken: "csrf-1"})
	})
	mux.HandleFunc("GET /v1/workspaces", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []api.Workspace{{ID: testWS, Name: "demo"}})
	})
	mux.HandleFunc("GET /v1/library", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.Workspace{ID: testLibrary, Name: "library"})
	})
	mux.HandleFunc("GET /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := []api.Operation{}
		if f.run.ID != "" && r.URL.Query().Get("workspace") == f.run.Workspace {
			out = append(out, f.run)
		}
		writeJSON(w, 200, out)
	})
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, f.run)
	})
	mux.HandleFunc("GET /v1/workspaces/{ws}/revisions", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := []api.Revision{}
		for i := len(f.revs) - 1; i >= 0; i-- {
			out = append(out, f.revs[i].Revision)
		}
		writeJSON(w, 200, out)
	})
	mux.HandleFunc("GET /v1/workspaces/{ws}/revisions/{rev}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if rv := f.find(r.PathValue("rev")); rv != nil {
			writeJSON(w, 200, rv.Revision)
			return
		}
		writeJSON(w, 404, api.NewError(api.CodeNotFound, "no such revision"))
	})
	mux.HandleFunc("GET /v1/workspaces/{ws}/tree", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		rv := f.find(r.URL.Query().Get("rev"))
		if rv == nil {
			writeJSON(w, 404, api.NewError(api.CodeNotFound, "no such revision"))
			return
		}
		out := []api.TreeEntry{}
		for _, p := range slices.Sorted(maps.Keys(rv.files)) {
			out = append(out, api.TreeEntry{Path: p, Type: "file", Size: int64(len(rv.files[p])), SHA256: strings.Repeat("cd", 32), Mode: 0o644})
		}
		writeJSON(w, 200, out)
	})
	mux.HandleFunc("GET /v1/workspaces/{ws}/files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		rv := f.find(r.URL.Query().Get("rev"))
		var b []byte
		var ok bool
		if rv != nil {
			b, ok = rv.files[r.PathValue("path")]
		}
		f.mu.Unlock()
		if !ok {
			writeJSON(w, 404, api.NewError(api.CodeNotFound, "no such file"))
			return
		}
		name := r.PathValue("path")
		w.Header().Set("Content-Disposition", "attachment; filename="+strconv.Quote(filepath.Base(name)))
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
	})
	mux.HandleFunc("PUT /v1/workspaces/{ws}/files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		body, err := readAll(r)
		if err != nil || r.Header.Get("X-CSRF-Token") != "csrf-1" {
			writeJSON(w, 400, api.NewError(api.CodeBadRequest, "bad upload"))
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		p := r.PathValue("path")
		match := r.Header.Get("If-Match")
		f.ifMatch = append(f.ifMatch, match)
		head := f.head()
		files := map[string][]byte{}
		if head != nil {
			files = maps.Clone(head.files)
			if base := f.find(match); match != "" && base != nil && base.ID != head.ID && !bytes.Equal(base.files[p], head.files[p]) {
				d := api.Revision{ID: "rev-detached", Workspace: testWS, Detached: true, Conflict: []string{p}, Author: api.Author{Kind: api.AuthorAccount, ID: "acct-me"}}
				doc := api.NewError(api.CodeConflict, "workspace conflict: "+p+" changed by "+head.ID+" since "+match)
				doc.Detail.Revision = &d
				writeJSON(w, 409, doc)
				return
			}
		}
		files[p] = body
		writeJSON(w, 201, f.commit(api.Author{Kind: api.AuthorAccount, ID: "acct-me"}, files, ""))
	})
	mux.HandleFunc("POST /v1/workspaces/{ws}/restore", func(w http.ResponseWriter, r *http.Request) {
		var req api.RestoreRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || r.Header.Get("X-CSRF-Token") != "csrf-1" {
			writeJSON(w, 400, api.NewError(api.CodeBadRequest, "bad restore"))
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.restores = append(f.restores, req.Rev)
		rv := f.find(req.Rev)
		if rv == nil {
			writeJSON(w, 404, api.NewError(api.CodeNotFound, "no such revision"))
			return
		}
		writeJSON(w, 201, f.commit(api.Author{Kind: api.AuthorAccount, ID: "acct-me"}, maps.Clone(rv.files), "restore "+rv.ID))
	})
	mux.HandleFunc("GET /v1/workspaces/{ws}/diff", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		from, to := f.find(r.URL.Query().Get("from")), f.find(r.URL.Query().Get("to"))
		if from == nil || to == nil {
			writeJSON(w, 404, api.NewError(api.CodeNotFound, "no such revision"))
			return
		}
		d := api.WorkspaceDiff{From: from.ID, To: to.ID, Changes: changes(from.files, to.files), Text: []api.FileDiff{}}
		for _, p := range d.Changes.Modified {
			var b strings.Builder
			fmt.Fprintf(&b, "--- a/%s\n+++ b/%s\n@@ @@\n", p, p)
			for _, l := range strings.SplitAfter(string(from.files[p]), "\n") {
				if l != "" {
					b.WriteString("-" + l)
				}
			}
			for _, l := range strings.SplitAfter(string(to.files[p]), "\n") {
				if l != "" {
					b.WriteString("+" + l)
				}
			}
			d.Text = append(d.Text, api.FileDiff{Path: p, Diff: b.String()})
		}
		writeJSON(w, 200, d)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The gateway's policy, without data: images.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self'")
		mux.ServeHTTP(w, r)
	})
}

func readAll(r *http.Request) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(r.Body)
	return b.Bytes(), err
}

// chartPNG is a small valid PNG: w x h, one colour.
func chartPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{31, 111, 235, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestWorkspacePage(t *testing.T) {
	requireBuilt(t)
	f := &filesAPI{role: api.RoleEditor}
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	ctx := browsertest.Start(t, 2*time.Minute)
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		browsertest.Do(t, ctx, what, actions...)
	}
	eval := func(js string) string {
		t.Helper()
		return browsertest.Eval(t, ctx, js)
	}
	wait := func(what, js string) {
		t.Helper()
		browsertest.Wait(t, ctx, 15*time.Second, what, js)
	}
	// RODON_PAGE_SCREENSHOTS=DIR saves the views along the way, to look at.
	shot := func(name string) {
		t.Helper()
		if dir := os.Getenv("RODON_PAGE_SCREENSHOTS"); dir != "" {
			browsertest.Screenshot(t, ctx, filepath.Join(dir, name+".png"))
		}
	}
	page := srv.URL + "/#/workspaces/" + testWS

	// An empty workspace: no files, no history, an upload for editors.
	do("open the workspace", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#ws-tree-empty")), chromedp.WaitVisible(chromedp.CSS("#ws-upload-input + span")))

	// Two files dropped: two revisions, the first PUT with no If-Match
	// (there is no revision), the second naming the first's.
	csv := "region,total,note\nnorth,12,\"a, quoted <b>cell</b>\"\nsouth,7,\"two\nlines\"\n"
	browsertest.Drop(t, ctx, "#ws-tree-card", [][2]string{{"sales.csv", csv}, {"notes.txt", "one\ntwo\nthree\n"}})
	wait("two revisions in the history", `document.querySelectorAll('#ws-history tr[data-testid=revision-row]').length === 2`)
	wait("the tree to list both files", `document.querySelectorAll('#ws-tree button[data-path]').length === 2`)
	f.mu.Lock()
	gotMatch := slices.Clone(f.ifMatch)
	f.mu.Unlock()
	if want := []string{"", "rev-0001"}; !slices.Equal(gotMatch, want) {
		t.Errorf("If-Match of the uploads = %q, want %q", gotMatch, want)
	}
	if got := eval(`document.querySelector('#ws-rev').textContent`); got != "#2" {
		t.Errorf("#ws-rev = %q after the uploads, want #2 (the head)", got)
	}
	// The last file uploaded is chosen: notes.txt, with line numbers.
	wait("notes.txt shown with its lines", `document.querySelectorAll('#ws-text li').length === 3`)
	if got := eval(`[...document.querySelectorAll('#ws-text li')].map(li => li.textContent).join('|')`); got != "one|two|three" {
		t.Errorf("#ws-text lines = %q, want one|two|three", got)
	}
	if got := eval(`location.hash`); got != "#/workspaces/"+testWS+"/head/notes.txt" {
		t.Errorf("location.hash = %q, want the head with notes.txt", got)
	}

	// The CSV as a table, cells as text: the markup in a cell is text.
	do("choose sales.csv", chromedp.Click(chromedp.CSS(`#ws-tree button[data-path="sales.csv"]`)), chromedp.WaitVisible(chromedp.CSS("#ws-csv")))
	if got := eval(`JSON.stringify([...document.querySelectorAll('#ws-csv tr')].map(tr => [...tr.cells].map(c => c.textContent)))`); got != `[["region","total","note"],["north","12","a, quoted <b>cell</b>"],["south","7","two\nlines"]]` {
		t.Errorf("#ws-csv = %s, want the three rows as text", got)
	}
	shot("csv")
	if got := eval(`String(document.querySelectorAll('#ws-preview b').length)`); got != "0" {
		t.Errorf("the CSV preview made %s <b> elements, want none", got)
	}
	if got := eval(`document.querySelector('#ws-download').getAttribute('href') + ' ' + document.querySelector('#ws-download').getAttribute('download')`); got != "/v1/workspaces/"+testWS+"/files/sales.csv?rev=rev-0002 sales.csv" {
		t.Errorf("#ws-download = %q, want the files route at the revision shown", got)
	}
	if got := eval(`document.querySelector('#ws-archive').getAttribute('href')`); got != "/v1/workspaces/"+testWS+"/archive?rev=rev-0002" {
		t.Errorf("#ws-archive = %q, want the archive route at the revision shown", got)
	}

	// An image through the file chooser, shown from the gateway's origin.
	chart := filepath.Join(t.TempDir(), "chart.png")
	if err := os.WriteFile(chart, chartPNG(t, 40, 20), 0o644); err != nil {
		t.Fatal(err)
	}
	do("upload chart.png", chromedp.SetUploadFiles(chromedp.CSS("#ws-upload-input"), []string{chart}))
	wait("chart.png shown", `document.querySelector('#ws-image')?.dataset.loaded === 'true'`)
	shot("image")
	if got := eval(`document.querySelector('#ws-image').naturalWidth + 'x' + document.querySelector('#ws-image').naturalHeight`); got != "40x20" {
		t.Errorf("#ws-image is %s, want 40x20", got)
	}

	// A step's revision: its author links to its run, which the page
	// finds among the workspace's runs (the revision does not name it).
	f.mu.Lock()
	files := maps.Clone(f.head().files)
	files["sales.csv"] = []byte(csv + "east,3,\n")
	stepRev := f.commit(api.Author{Kind: api.AuthorStep, ID: "step-7"}, files, "")
	f.revs[len(f.revs)-1].Step = "step-7"
	f.run = api.Operation{ID: "run-7", Workspace: testWS, State: api.RunSucceeded, CreatedAt: time.Now(),
		Steps: []api.RunStep{{ID: "step-7", Index: 0, Args: []string{"true"}, State: api.StepExited, Revision: stepRev.ID, Events: []api.Event{}}}}
	f.mu.Unlock()
	wait("the step's revision, followed", `document.querySelector('#ws-rev').textContent === '#4'`)
	if got := eval(`document.querySelector('tr[data-rev="` + stepRev.ID + `"] .author a').getAttribute('href')`); got != "#/runs/run-7" {
		t.Errorf("the step author's link = %q, want #/runs/run-7", got)
	}

	// The diff of the step's revision against its parent.
	do("diff the step's revision", chromedp.Click(chromedp.CSS(`tr[data-rev="`+stepRev.ID+`"] button[data-action=diff]`)))
	wait("the diff", `!!document.querySelector('#ws-diff-changes li[data-change=modified][data-path="sales.csv"]')`)
	shot("diff")
	if got := eval(`[...document.querySelectorAll('.file-diff[data-path="sales.csv"] .diff-add')].map(s => s.textContent).join('')`); !strings.Contains(got, "+east,3,\n") {
		t.Errorf("the diff's added lines = %q, want +east,3,", got)
	}

	// An upload onto an older revision whose path changed since: the
	// conflict is named, nothing is made.
	do("open revision 1", chromedp.Navigate(page+"/rev-0001"), chromedp.WaitVisible(chromedp.CSS("#ws-head-note")))
	wait("revision 1's tree", `document.querySelector('#ws-tree').dataset.rev === 'rev-0001'`)
	browsertest.Drop(t, ctx, "#ws-tree-card", [][2]string{{"sales.csv", "mine\n"}})
	wait("the conflict", `!!document.querySelector('#ws-conflict li[data-path="sales.csv"]')`)
	shot("conflict")
	if got := eval(`document.querySelector('#ws-upload-error').textContent`); !strings.Contains(got, "sales.csv") || !strings.Contains(got, "conflict") {
		t.Errorf("#ws-upload-error = %q, want the conflict on sales.csv named", got)
	}
	f.mu.Lock()
	n, last := len(f.revs), f.ifMatch[len(f.ifMatch)-1]
	f.mu.Unlock()
	if n != 4 || last != "rev-0001" {
		t.Errorf("after the conflict: %d revisions, last If-Match %q; want 4 and rev-0001", n, last)
	}

	// Restore revision 1 after the confirmation: a new head equal to it.
	do("ask to restore", chromedp.Click(chromedp.CSS(`tr[data-rev="rev-0001"] button[data-action=restore]`)), chromedp.WaitVisible(chromedp.CSS("#ws-restore-confirm")))
	shot("restore")
	f.mu.Lock()
	early := len(f.restores)
	f.mu.Unlock()
	if early != 0 {
		t.Errorf("%d restores before the confirmation, want none", early)
	}
	do("confirm", chromedp.Click(chromedp.CSS("#ws-restore-yes")))
	wait("the restored head", `document.querySelector('#ws-rev').textContent === '#5' && location.hash === '#/workspaces/`+testWS+`'`)
	f.mu.Lock()
	restores := slices.Clone(f.restores)
	f.mu.Unlock()
	if !slices.Equal(restores, []string{"rev-0001"}) {
		t.Errorf("restores = %q, want [rev-0001]", restores)
	}
	wait("the restored tree", `document.querySelectorAll('#ws-tree button[data-path]').length === 1`)

	// The run page links each step to the revision it made.
	do("open the run", chromedp.Navigate(srv.URL+"/#/runs/run-7"), chromedp.WaitVisible(chromedp.CSS("#step-revision-0")))
	shot("run")
	do("follow the step's revision", chromedp.Click(chromedp.CSS("#step-revision-0")))
	wait("the step's revision shown", `document.querySelector('#ws-rev')?.dataset.rev === '`+stepRev.ID+`'`)

	// The account library, linked from the runs list: an editor reads it
	// (only an admin not limited to some workspaces writes it).
	do("open the runs list", chromedp.Navigate(srv.URL+"/#/runs"))
	wait("the library link", `document.querySelector('#open-library')?.hidden === false`)
	do("open the library", chromedp.Click(chromedp.CSS("#open-library")))
	wait("the library, read only for an editor", `document.querySelector('#ws-name').textContent === 'library' && !!document.querySelector('#ws-read-only')`+
		` && !document.querySelector('#ws-upload-input') && document.querySelectorAll('#ws-history tr').length > 1 && !document.querySelector('button[data-action=restore]')`)
	f.mu.Lock()
	f.role = api.RoleAdmin
	f.mu.Unlock()
	do("reload as an admin", chromedp.Reload())
	wait("the library, writable for an admin", `document.querySelector('#ws-name').textContent === 'library' && !!document.querySelector('#ws-upload-input')`+
		` && !!document.querySelector('button[data-action=restore]')`)

	// A viewer reads: no upload, no restore.
	f.mu.Lock()
	f.role = api.RoleViewer
	f.mu.Unlock()
	do("reload as a viewer", chromedp.Navigate(page+"/"+stepRev.ID), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#ws-read-only")))
	wait("the history", `document.querySelectorAll('#ws-history tr[data-testid=revision-row]').length === 5`)
	if got := eval(`String(document.querySelectorAll('#ws-upload-input, button[data-action=restore]').length)`); got != "0" {
		t.Errorf("a viewer sees %s upload and restore controls, want none", got)
	}
	shot("viewer")
}
