package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
)

func TestParseFilesChanged(t *testing.T) {
	var twenty, twentyNamed []string
	for i := range 20 {
		twenty = append(twenty, fmt.Sprintf("out/f%02d.csv", i))
		twentyNamed = append(twentyNamed, fmt.Sprintf("+out/f%02d.csv", i))
	}
	fc := func(added, modified, removed []string, more int) *api.FilesChanged {
		out := newFilesChanged()
		out.Added = append(out.Added, added...)
		out.Modified = append(out.Modified, modified...)
		out.Removed = append(out.Removed, removed...)
		out.More = more
		return out
	}
	for _, tc := range []struct {
		name string
		in   string
		want *api.FilesChanged // nil: not a files_changed message
	}{
		{"none", "no files changed", fc(nil, nil, nil, 0)},
		{"one", "1 file changed: +chart.png", fc([]string{"chart.png"}, nil, nil, 0)},
		{"three kinds", "3 files changed: +chart.png, ~summary.csv, -old.txt",
			fc([]string{"chart.png"}, []string{"summary.csv"}, []string{"old.txt"}, 0)},
		{"directories", "4 files changed: +out/, +out/a.png, ~data/b.csv, -tmp/",
			fc([]string{"out/", "out/a.png"}, []string{"data/b.csv"}, []string{"tmp/"}, 0)},
		{"and more", "25 files changed: " + strings.Join(twentyNamed, ", ") + ", and 5 more", fc(twenty, nil, nil, 5)},
		{"and more, counts off", "24 files changed: " + strings.Join(twentyNamed, ", ") + ", and 5 more", fc(twenty, nil, nil, 5)},
		{"comma in a path", "2 files changed: +a, b.txt, -c.txt", fc([]string{"a, b.txt"}, nil, []string{"c.txt"}, 0)},
		{"path ending like the tail", "1 file changed: +notes, and 2 more", fc([]string{"notes, and 2 more"}, nil, nil, 0)},
		// The documented limitation: ", -" inside a name splits it.
		{"sign after comma in a path", "1 file changed: +a, -b", fc([]string{"a"}, nil, []string{"b"}, 0)},
		{"sign in a name", "1 file changed: +-x-", fc([]string{"-x-"}, nil, nil, 0)},
		{"empty", "", nil},
		{"other text", "copied back", nil},
		{"no count", "files changed: +a", nil},
		{"zero", "0 files changed: +a", nil},
		{"no list", "2 files changed: ", nil},
		{"no sign", "1 file changed: a.txt", nil},
		{"sign only", "1 file changed: +", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseFilesChanged(tc.in)
			if ok != (tc.want != nil) {
				t.Fatalf("parseFilesChanged(%q) = %+v, %v; want ok %v", tc.in, got, ok, tc.want != nil)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseFilesChanged(%q) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestUnionFilesChanged(t *testing.T) {
	if got := unionFilesChanged([]api.RunStep{{}, {}}); got != nil {
		t.Errorf("unionFilesChanged(no events) = %+v, want nil", got)
	}
	steps := []api.RunStep{
		{FilesChanged: &api.FilesChanged{Added: []string{"a.csv", "out/"}, Modified: []string{"m.txt"}, Removed: []string{}, More: 2}},
		{}, // no event
		{FilesChanged: &api.FilesChanged{Added: []string{"out/", "b.png"}, Modified: []string{"a.csv", "m.txt"}, Removed: []string{"old.txt"}, More: 1}},
	}
	want := &api.FilesChanged{Added: []string{"a.csv", "out/", "b.png"}, Modified: []string{"m.txt", "a.csv"}, Removed: []string{"old.txt"}, More: 3}
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
	f.sched.AddEvent(s0, eventFilesChanged, "1 file changed: +stale.txt")
	f.sched.AddEvent(s0, eventFilesChanged, "2 files changed: +chart.png, ~data.csv")
	f.sched.Exit(s0, 0)
	f.g.Driver().Pass(ctx)
	f.sched.Start(s1)
	f.sched.AddEvent(s1, eventFilesChanged, "2 files changed: ~chart.png, -data.csv")

	var st api.RunStep
	f.do("viewer", "GET", "/v1/steps/"+s0, "", 200, &st)
	want0 := &api.FilesChanged{Added: []string{"chart.png"}, Modified: []string{"data.csv"}, Removed: []string{}}
	if diff := cmp.Diff(want0, st.FilesChanged); diff != "" {
		t.Errorf("step 0 files_changed mismatch (-want +got):\n%s", diff)
	}
	op := f.getRun(f.run)
	want := &api.FilesChanged{Added: []string{"chart.png"}, Modified: []string{"data.csv", "chart.png"}, Removed: []string{"data.csv"}}
	if diff := cmp.Diff(want, op.FilesChanged); diff != "" {
		t.Errorf("run files_changed mismatch (-want +got):\n%s", diff)
	}
	if len(op.Steps) != 2 || op.Steps[1].FilesChanged == nil {
		t.Errorf("run steps = %+v, want step 1 with files_changed", op.Steps)
	}
}
