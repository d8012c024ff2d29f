package agentd

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// treeState describes a tree exactly: every path with its type, mode and
// content (or link target), sorted.
func treeState(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			lines = append(lines, fmt.Sprintf("%s link %s", rel, target))
		case d.IsDir():
			lines = append(lines, fmt.Sprintf("%s dir %v", rel, fi.Mode().Perm()))
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			lines = append(lines, fmt.Sprintf("%s file %v %d %s", rel, fi.Mode().Perm(), len(b), hex.EncodeToString(sum[:8])))
		}
		return nil
	})
	if err != nil {
		// Errorf, not Fatalf: this runs in the test's worker goroutines.
		t.Errorf("read tree %s: %v", root, err)
		return "unreadable: " + err.Error()
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// mutator is a step whose background process survives the step's own
// exit and rewrites the workspace as fast as it can: files, a directory
// made and removed each round, a link. The step exits once the mutator
// runs.
const mutator = `(trap '' TERM HUP INT
i=$(cat round 2>/dev/null || echo 0)
while :; do
  i=$((i+1))
  for f in a b c d; do echo "$i" > $f; done
  mkdir -p "dir/$i" && echo "$i" > "dir/$i/x" && rm -rf "dir/$((i-1))"
  ln -sf "dir/$i/x" latest
  echo "$i" > round
  [ -e running ] || : > running
done) </dev/null >/dev/null 2>&1 &
while [ ! -e running ]; do :; done
exit 0`

// TestReadBackRace is Done-means 2 of issue 15: a background process that
// survives the step's exit mutates the workspace during the read-back, 300
// times (30 in -short mode), half of them stopped by Halt, half by Quiesce. Every read-back either brings back exactly
// the quiesced tree, whole, or (when it fails; one in ten is made to,
// past its size limit) leaves the previous tree untouched; never half.
func TestReadBackRace(t *testing.T) {
	rt := newTestRuntime(t)
	total, workers := 300, 3
	if testing.Short() {
		total = 30
	}
	start := time.Now()
	var wg sync.WaitGroup
	var raced atomic.Int64
	for w := range workers {
		wg.Go(func() {
			ws := t.TempDir()
			for i := w; i < total; i += workers {
				ok, survived := readBackOnce(t, rt, ws, i)
				if !ok {
					return
				}
				if survived {
					raced.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d read-backs in %v (%d at a time); in %d of them the mutator was seen rewriting the workspace after the step's exit",
		total, time.Since(start).Round(time.Millisecond), workers, raced.Load())
	// The runtime itself stops the pod early when the step's output does
	// not end within ioSettle of its exit (a loaded host): then there was
	// nothing to race, which must stay rare for the test to mean something.
	if n := raced.Load(); n < int64(total)*9/10 {
		t.Errorf("the mutator survived the step's exit in only %d of %d rounds", n, total)
	}
}

// readBackOnce runs one step of the mutator in ws and checks its
// read-back. ok is false after a fatal failure; survived says the mutator
// was seen rewriting the workspace after the step's exit.
func readBackOnce(t *testing.T, rt *Runtime, ws string, i int) (ok, survived bool) {
	ctx := t.Context()
	st := newStep(t, "sh", "-c", mutator)
	st.Workspace, st.WorkspaceBytes = ws, 16<<20
	previous := treeState(t, ws)
	sb, err := rt.Create(ctx, st)
	if err != nil {
		t.Errorf("round %d: Create() = %v", i, err)
		return false, false
	}
	defer func() {
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("round %d: Destroy() = %v", i, err)
		}
	}()
	if err := sb.Start(ctx, nopWriter{}, nopWriter{}); err != nil {
		t.Errorf("round %d: Start() = %v", i, err)
		return false, false
	}
	rec, err := sb.Wait(ctx)
	if err != nil || rec.ExitCode != 0 {
		t.Errorf("round %d: Wait() = %+v, %v", i, rec, err)
		return false, false
	}
	// The step has exited; its mutator goes on.
	round := func() string { b, _ := os.ReadFile(filepath.Join(sb.wsDir, "round")); return string(b) }
	first, moved := round(), false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if r := round(); r != first && r != "" {
			moved = true
			break
		}
	}
	if !moved {
		t.Logf("round %d: the workspace did not change after the step exited (pod stopped by Wait: %v)", i, sb.podDone)
	}
	// Even rounds stop the sandbox as the agent does after a step with a
	// workspace (Halt: every process of its cgroup killed), odd ones
	// with Quiesce (pod stopped, task deleted).
	stop, how := func() error { return sb.Quiesce(ctx) }, "Quiesce"
	if i%2 == 0 {
		stop, how = sb.Halt, "Halt"
	}
	if err := stop(); err != nil {
		t.Errorf("round %d: %s() = %v", i, how, err)
		return false, false
	}
	quiesced := treeState(t, sb.wsDir)
	time.Sleep(20 * time.Millisecond) // time for a survivor to show
	fail := i%10 == 9
	if fail {
		sb.step.WorkspaceBytes = 1 // the read-back is refused past its limit
	}
	_, err = sb.ReadBack()
	got := treeState(t, ws)
	switch {
	case fail && err == nil:
		t.Errorf("round %d: ReadBack() past its limit = nil error", i)
	case fail && got != previous:
		t.Errorf("round %d: a failed read-back changed the workspace:\n%s\nwant the previous tree:\n%s", i, got, previous)
	case !fail && err != nil:
		t.Errorf("round %d: ReadBack() = %v", i, err)
	case !fail && got != quiesced:
		t.Errorf("round %d: the workspace read back is not the quiesced tree:\n%s\nwant:\n%s", i, got, quiesced)
	}
	if again := treeState(t, sb.wsDir); again != quiesced {
		t.Errorf("round %d: the workspace changed after %s", i, how)
	}
	return true, moved
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
