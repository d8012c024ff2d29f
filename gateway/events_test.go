package gateway

import (
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/api"
)

// TestDroppedMessage: the paths a revision does not hold are named quoted
// (a newline in one stays escaped), counted, with the rest summed.
func TestDroppedMessage(t *testing.T) {
	for _, c := range []struct {
		w    api.Warning
		want string
	}{
		{api.Warning{Cause: api.WarningWorkspacePathsDropped, Paths: []string{"x\n~y"}},
			`1 path not saved in the workspace's revision (a link out of the workspace, a name it cannot hold or a special file): "x\n~y"`},
		{api.Warning{Cause: api.WarningWorkspacePathsDropped, Paths: []string{"a", "b"}, More: 3},
			`5 paths not saved in the workspace's revision (a link out of the workspace, a name it cannot hold or a special file): "a", "b", and 3 more`},
		{api.Warning{Cause: api.WarningWorkspacePathsDropped}, "paths not saved in the workspace's revision"},
	} {
		got := eventMessage(api.Event{Kind: api.EventWarning, Warning: &c.w})
		if got != c.want {
			t.Errorf("message of %+v = %q, want %q", c.w, got, c.want)
		}
		if strings.ContainsRune(got, '\n') {
			t.Errorf("message of %+v holds a newline: %q", c.w, got)
		}
	}
}
