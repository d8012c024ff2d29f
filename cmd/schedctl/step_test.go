package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
)

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"placed on node n1 (attempt 2)", "placed on node n1 (attempt 2)"},
		{"a, +b.txt", "a, +b.txt"},
		{"café ☕", "café ☕"},
		{"x\n~y", `"x\n~y"`},
		{"tab\there", `"tab\there"`},
		{"\x1b[2Jcleared", `"\x1b[2Jcleared"`},
		{"bad \xff utf-8", `"bad \xff utf-8"`},
		{"\u202eevil", `"\u202eevil"`},
		{`"quoted"`, `"\"quoted\""`},
		{" lead", `" lead"`},
		{"trail ", `"trail "`},
	} {
		if got := printable(tc.in); got != tc.want {
			t.Errorf("printable(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestPrintStepEscapes: `schedctl step` shows event messages and the
// changed files' names with control characters escaped, one name a line,
// so that "x\n~y" is one name and "a, +b.txt" is not two.
func TestPrintStepEscapes(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := api.Step{ID: "s1", State: "exited", Attempts: 1, Reason: "reason\x1b[31m red", Events: []api.Event{
		{Time: now, Kind: api.EventFilesChanged, Message: "3 files changed: +a, +b.txt, ~x\n~y, -\x07bell",
			Files: &api.FilesChanged{Added: []string{"a, +b.txt"}, Modified: []string{"x\n~y"}, Removed: []string{"\x07bell"}, More: 2}},
		{Time: now, Kind: api.EventWarning, Message: "line one\nline two\r\x1b[2K"},
	}}
	var b bytes.Buffer
	if err := printStep(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, r := range out {
		if r != '\n' && r < ' ' || r == 0x7f {
			t.Fatalf("output holds control character %q:\n%s", r, out)
		}
	}
	for _, want := range []string{
		`"reason\x1b[31m red"`,
		`"3 files changed: +a, +b.txt, ~x\n~y, -\abell"`,
		`"line one\nline two\r\x1b[2K"`,
		"\nfiles changed:\n  + a, +b.txt\n  ~ \"x\\n~y\"\n  - \"\\abell\"\n  and 2 more\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPrintStepWorkspace(t *testing.T) {
	s := api.Step{ID: "s1", State: "exited", Attempts: 1, Revision: "rev-2",
		Spec: api.StepRequest{Workspace: "ws-a", BaseRevision: "rev-1"}}
	var b bytes.Buffer
	if err := printStep(&b, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"workspace:   ws-a from rev-1\n", "revision:    rev-2\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
