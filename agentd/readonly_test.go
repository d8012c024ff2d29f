package agentd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/cluster"
)

// readOnlyScript tries three writes to the workspace and exits with how
// many failed; its stderr is its stdout.
const readOnlyScript = `exec 2>&1; n=0
echo x > /workspace/a || n=$((n+1))
touch /workspace/b || n=$((n+1))
rm /workspace/existing || n=$((n+1))
exit $n`

// TestAgentReadOnlyWorkspace: a step whose workspace is read-only (the
// Bash step of an agent without a writing tool) sees its revision at
// /workspace and every write fails with EROFS; nothing is read back,
// uploaded or reported, and the head stays. The same step without the
// flag writes, and its changes are the step's revision.
func TestAgentReadOnlyWorkspace(t *testing.T) {
	rt := newTestRuntime(t)
	sched := newRecordingScheduler(t)
	logs := startAgent(t, rt, sched)
	sched.waitNode("n1")
	head := sched.seed("ws-1", map[string]string{"existing": "keep\n"})
	spec := cluster.StepSpec{Image: "base", Args: []string{"sh", "-c", "cat existing; " + readOnlyScript}, CPU: 1, MemoryBytes: 256 << 20,
		Workspace: "ws-1", WorkspaceReadOnly: true}
	sched.assign(cluster.Step{ID: "ro-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	sched.waitFor(t, "the exit of ro-1", func() bool { _, ok := sched.exits["ro-1"]; return ok })
	sched.mu.Lock()
	rec, uploads, events := sched.exits["ro-1"], len(sched.uploads), slices.Clone(sched.events["ro-1"])
	sched.mu.Unlock()
	out, _ := keptOutput(t, logs, "ro-1")
	if rec.State != cluster.StateExited || rec.ExitCode != 3 {
		t.Errorf("read-only step: %+v, output %q; want exited 3 (all three writes failed)", rec, out)
	}
	if !strings.HasPrefix(string(out), "keep\n") || strings.Count(string(out), "Read-only file system") != 3 {
		t.Errorf("read-only step's output %q, want the file read and three EROFS errors", out)
	}
	if rec.Workspace != nil || uploads != 0 {
		t.Errorf("read-only step reported result %+v after %d upload requests, want none", rec.Workspace, uploads)
	}
	if fc := eventsOfCluster(events, cluster.EventFilesChanged); len(fc) != 0 {
		t.Errorf("read-only step's files_changed events %+v, want none", fc)
	}
	if step, _ := sched.c.State().Step("ro-1"); step.Revision != "" {
		t.Errorf("read-only step made revision %s", step.Revision)
	}
	if w, _ := sched.c.State().Workspace("ws-1"); w.Head != head.ID {
		t.Errorf("head after the read-only step = %s, want %s", w.Head, head.ID)
	}

	// Without the flag the same writes succeed and become a revision.
	spec.WorkspaceReadOnly = false
	sched.assign(cluster.Step{ID: "rw-1", State: cluster.StatePlaced, Node: "n1", Attempts: 1, Spec: spec})
	sched.waitFor(t, "the exit of rw-1", func() bool { _, ok := sched.exits["rw-1"]; return ok })
	sched.mu.Lock()
	rec = sched.exits["rw-1"]
	sched.mu.Unlock()
	if rec.State != cluster.StateExited || rec.ExitCode != 0 || rec.Workspace == nil {
		out, _ := keptOutput(t, logs, "rw-1")
		t.Fatalf("writable step: %+v (result %+v), output %q; want exited 0 with a result", rec, rec.Workspace, out)
	}
	step, _ := sched.c.State().Step("rw-1")
	tree := sched.tree("ws-1", step.Revision)
	_, hasA := tree["a"]
	_, hasB := tree["b"]
	_, hasExisting := tree["existing"]
	if step.Revision == "" || !hasA || !hasB || hasExisting {
		t.Errorf("writable step's revision %q: %v; want a and b, without existing", step.Revision, tree)
	}
	sched.waitFor(t, "cleanup of rw-1", func() bool { return sched.reports[len(sched.reports)-1] == "cleaned up" })
	noTrees(t, rt)
}

// TestRunReadOnlyWorkspace: the runtime alone (agentd run --workspace
// DIR): a read-only step's writes fail with EROFS and the host directory
// is left as it was.
func TestRunReadOnlyWorkspace(t *testing.T) {
	rt := newTestRuntime(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "existing"), []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := newStep(t, "sh", "-c", readOnlyScript)
	st.Workspace, st.WorkspaceReadOnly = dir, true
	rec, out, _ := runStep(t, rt, st)
	if rec.State != cluster.StateExited || rec.ExitCode != 3 || strings.Count(out, "Read-only file system") != 3 {
		t.Errorf("read-only step: %+v, output %q; want exited 3 with three EROFS errors", rec, out)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "existing" {
		t.Errorf("host workspace after a read-only step: %v, want only existing", ents)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "existing")); string(b) != "keep\n" {
		t.Errorf("existing = %q, %v; want it unchanged", b, err)
	}
}
