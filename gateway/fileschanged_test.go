package gateway

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
)

func TestUnionFilesChanged(t *testing.T) {
	if got := unionFilesChanged([]api.RunStep{{}, {}}); got != nil {
		t.Errorf("unionFilesChanged(no events) = %+v, want nil", got)
	}
	steps := []api.RunStep{
		{FilesChanged: &FilesChanged{Added: []string{"a.csv", "out/"}, Modified: []string{"m.txt"}, Removed: []string{}, More: 2}},
		{}, // no event
		{FilesChanged: &FilesChanged{Added: []string{"out/", "b.png"}, Modified: []string{"a.csv", "m.txt"}, Removed: []string{"old.txt"}, More: 1}},
	}
	want := &FilesChanged{Added: []string{"a.csv", "out/", "b.png"}, Modified: []string{"m.txt", "a.csv"}, Removed: []string{"old.txt"}, More: 3}
	if diff := cmp.Diff(want, unionFilesChanged(steps)); diff != "" {
		t.Errorf("unionFilesChanged mismatch (-want +got):\n%s", diff)
	}
	empty := unionFilesChanged([]api.RunStep{{FilesChanged: newFilesChanged()}})
	if diff := cmp.Diff(newFilesChanged(), empty); diff != "" {
		t.Errorf("unionFilesChanged(no files changed) mismatch (-want +got):\n%s", diff)
	}
}

// TestFilesChangedView: a step shows its latest files_changed event, the
// run the union of its steps, and neither carries the field before an
// event.
func TestFilesChangedView(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	s0, s1 := stepID(f.run, 0), stepID(f.run, 1)
	w := f.do("viewer", "GET", "/v1/runs/"+f.run, "", 200, nil)
	if strings.Contains(w.Body.String(), "files_changed") {
		t.Fatalf("run before any files_changed event carries files_changed: %s", w.Body)
	}
	files := func(id string, added, modified, removed []string) {
		f.sched.AddTypedEvent(id, api.Event{Kind: api.EventFilesChanged, Message: "a message no one reads, +x, ~y",
			Files: &api.FilesChanged{Added: added, Modified: modified, Removed: removed}})
	}
	files(s0, []string{"stale.txt"}, nil, nil)
	files(s0, []string{"chart.png"}, []string{"data.csv"}, nil)
	f.sched.Exit(s0, 0)
	f.g.Driver().Pass(ctx)
	f.sched.Start(s1)
	files(s1, nil, []string{"chart.png"}, []string{"data.csv"})

	var st api.RunStep
	f.do("viewer", "GET", "/v1/steps/"+s0, "", 200, &st)
	want0 := &FilesChanged{Added: []string{"chart.png"}, Modified: []string{"data.csv"}, Removed: []string{}}
	if diff := cmp.Diff(want0, st.FilesChanged); diff != "" {
		t.Errorf("step 0 files_changed mismatch (-want +got):\n%s", diff)
	}
	op := f.getRun(f.run)
	want := &FilesChanged{Added: []string{"chart.png"}, Modified: []string{"data.csv", "chart.png"}, Removed: []string{"data.csv"}}
	if diff := cmp.Diff(want, op.FilesChanged); diff != "" {
		t.Errorf("run files_changed mismatch (-want +got):\n%s", diff)
	}
	if len(op.Steps) != 2 || op.Steps[1].FilesChanged == nil {
		t.Errorf("run steps = %+v, want step 1 with files_changed", op.Steps)
	}
}

// TestFilesChangedNames: paths that would read as several in a message
// ("a, +b.txt", a newline and a sign) reach the view as the node named
// them, one each, and the event's message is the gateway's own.
func TestFilesChangedNames(t *testing.T) {
	f := newFixture(t)
	s0 := stepID(f.run, 0)
	names := []string{"a, +b.txt", "x\n~y", "-z, and 3 more"}
	f.sched.AddTypedEvent(s0, api.Event{Kind: api.EventFilesChanged, Message: "3 files changed: +a, +b.txt, ~x\n~y",
		Files: &api.FilesChanged{Added: names[:1], Modified: names[1:2], Removed: names[2:]}})
	var st api.RunStep
	f.do("viewer", "GET", "/v1/steps/"+s0, "", 200, &st)
	want := &FilesChanged{Added: names[:1], Modified: names[1:2], Removed: names[2:]}
	if diff := cmp.Diff(want, st.FilesChanged); diff != "" {
		t.Errorf("files_changed mismatch (-want +got):\n%s", diff)
	}
	if n := len(st.Events); n == 0 || st.Events[n-1].Message != "3 files changed" || cmp.Diff(want, st.Events[n-1].Files) != "" {
		t.Errorf("events = %+v, want the last saying 3 files changed, with the three paths", st.Events)
	}
}
