package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/rodon-compute/rodon/cluster"
)

// An Orphan is a sandbox whose agent died: containerd still has it, and
// nobody owns it. Adopt it to destroy it or report on it.
type Orphan struct {
	Sandbox *Sandbox
	// Owner is the dead agent ("pid:starttime").
	Owner string
	// Running reports whether the step's process was still running when
	// the orphan was found.
	Running bool
}

// Orphans finds the sandboxes in containerd that carry agentd's labels and
// whose owner is no longer alive, and takes them over: each Orphan's
// Sandbox belongs to the caller, who must Destroy it.
func (r *Runtime) Orphans(ctx context.Context) ([]Orphan, error) {
	ctx = r.nsCtx(ctx)
	cs, err := r.client.Containers(ctx, fmt.Sprintf("labels.%q==true", LabelManaged))
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []Orphan
	for _, c := range cs {
		labels, err := c.Labels(ctx)
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue
			}
			return out, fmt.Errorf("labels of %s: %w", c.ID(), err)
		}
		owner := labels[LabelOwner]
		if labels[LabelNode] != r.cfg.Node || owner == r.owner || ownerAlive(owner) {
			continue
		}
		attempt, _ := strconv.Atoi(labels[LabelAttempt])
		wsBytes, _ := strconv.ParseInt(labels[LabelWorkspaceBytes], 10, 64)
		sb := &Sandbox{
			rt:        r,
			id:        c.ID(),
			step:      Step{ID: cluster.StepID(labels[LabelStep]), Workspace: labels[LabelWorkspace], Attempt: attempt, WorkspaceBytes: wsBytes},
			wsDir:     filepath.Join(workspacesDir(r.cfg), c.ID()),
			ctlDir:    filepath.Join(ctlDir(r.cfg), c.ID()),
			container: c,
			hasNet:    labels[LabelNetwork] != "",
		}
		sb.step.WorkspaceReadOnly = labels[LabelWorkspaceReadOnly] == "true"
		// Its workspace filesystem, if mounted, counts in the reservations
		// until Destroy unmounts it.
		if img := imagePath(sb.wsDir); fileExists(img) {
			r.mu.Lock()
			r.images[img] = max(wsBytes, allocatedBytes(img))
			r.mu.Unlock()
			sb.wsMounted = true
		}
		o := Orphan{Sandbox: sb, Owner: owner}
		if t, err := c.Task(ctx, nil); err == nil {
			sb.task = t
			if p, err := t.LoadProcess(ctx, execID, nil); err == nil {
				sb.proc = p
				if st, err := p.Status(ctx); err == nil && st.Status == containerd.Running {
					o.Running = true
				}
			}
		} else if !errdefs.IsNotFound(err) {
			return out, fmt.Errorf("task of %s: %w", c.ID(), err)
		}
		out = append(out, o)
	}
	return out, nil
}

// Resume makes an orphan's Wait report its step's exit again (the exit
// status is kept by the shim until the process is deleted). Output the step
// writes from now on is not collected. A sandbox with a network gets its
// egress filter attached again; until then its veth carries nothing.
func (s *Sandbox) Resume(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return errors.New("resume: the step's process is gone")
	}
	// A process created and never started (the agent died in between)
	// would never exit: the step did not run, and is not adopted.
	if st, err := s.proc.Status(s.rt.nsCtx(ctx)); err != nil {
		return fmt.Errorf("resume: status of the step's process: %w", err)
	} else if st.Status == containerd.Created {
		return errors.New("resume: the step's process was created but never started")
	}
	if err := s.adoptNetwork(); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	ch, err := s.proc.Wait(context.WithoutCancel(s.rt.nsCtx(ctx)))
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	s.exitCh = ch
	s.stdout = &countingWriter{w: io.Discard}
	s.stderr = &countingWriter{w: io.Discard}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Step returns what the sandbox knows of its step (from its labels, for an
// orphan).
func (s *Sandbox) Step() Step { return s.step }
