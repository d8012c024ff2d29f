package agentd

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/oci"
)

// Step is what the runtime needs to run one step.
type Step struct {
	ID cluster.StepID
	// Image is a containerd image reference (see bundles.Ref for short names).
	Image string
	Args  []string
	Env   []string
	// Workspace, if set, is a host directory copied into the sandbox at
	// /workspace before the step starts and updated from it after the step
	// ends. The step never sees the directory itself.
	Workspace string
	// WorkspacePerm, if set, gives the mode of each file of Workspace in
	// the sandbox's copy (by its slash-separated path), in place of the
	// directory's own: the agent's materialised revisions are links into
	// its blob cache, whose files are read-only (treecopy.Limits.Perm).
	WorkspacePerm func(rel string) uint32
	// WorkspaceReadOnly mounts the step's copy of Workspace read-only:
	// the filesystem is remounted read-only on the host once the copy is
	// in, and the sandbox's mount is read-only too, so every write fails
	// with EROFS; ReadBack then copies nothing back.
	WorkspaceReadOnly bool
	// Library, if set, is a host directory the step sees read-only at
	// /library (the account library).
	Library string
	// Limits are the sandbox's CPU, memory and pids limits; zero pids
	// means cluster.DefaultLimits.Pids (a sandbox always has a pids limit).
	Limits oci.Limits
	// WorkspaceBytes is the size of the filesystem the step sees at
	// /workspace (see quota.go): writes past it fail with ENOSPC, and
	// what comes back never exceeds it. Zero means
	// cluster.DefaultLimits.WorkspaceBytes.
	WorkspaceBytes int64
	// Timeout ends the step with terminated_by=timeout; zero means none.
	Timeout time.Duration
	// Attempt is the scheduler's attempt number (zero for `agentd run`).
	Attempt int
	// NoInternet gives the sandbox no network but loopback, even on a
	// runtime with a Network: there is nothing to reach and nothing to
	// filter.
	NoInternet bool
	// TTY runs the step on a terminal: stdout and stderr are one stream,
	// and Input and Resize reach it while it runs.
	TTY bool
}

// sandboxID names the step's sandbox in containerd: the step id, with the
// attempt appended when there is one, so that a new attempt never collides
// with what an earlier one left.
func (s Step) sandboxID() string {
	if s.Attempt > 0 {
		return fmt.Sprintf("%s.%d", s.ID, s.Attempt)
	}
	return string(s.ID)
}

// withDefaults returns s with the defaults of the limits it leaves zero.
func (s Step) withDefaults() Step {
	if s.Limits.Pids == 0 {
		s.Limits.Pids = cluster.DefaultLimits.Pids
	}
	if s.WorkspaceBytes == 0 {
		s.WorkspaceBytes = cluster.DefaultLimits.WorkspaceBytes
	}
	return s
}

// errInvalid marks a step that fails validation.
var errInvalid = errors.New("invalid step")

// Validate reports the first problem that makes the step unrunnable.
func (s Step) Validate() error {
	if err := s.validate(); err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	return nil
}

func (s Step) validate() error {
	switch {
	case cluster.ValidateStepID(s.ID) != nil:
		return cluster.ValidateStepID(s.ID)
	case s.Image == "":
		return fmt.Errorf("step %s: empty image", s.ID)
	case len(s.Args) == 0:
		return fmt.Errorf("step %s: empty command", s.ID)
	case s.Library != "" && !filepath.IsAbs(s.Library):
		return fmt.Errorf("step %s: library %q: not an absolute path", s.ID, s.Library)
	case s.Timeout < 0:
		return fmt.Errorf("step %s: negative timeout %v", s.ID, s.Timeout)
	case s.WorkspaceBytes < 0 || s.WorkspaceBytes > 0 && s.WorkspaceBytes < cluster.MinLimits.WorkspaceBytes:
		return fmt.Errorf("step %s: workspace size %d bytes: want at least %d", s.ID, s.WorkspaceBytes, cluster.MinLimits.WorkspaceBytes)
	}
	for i, e := range s.Env {
		// Never quoted: the value is a secret, and the error becomes the
		// step's reason.
		if !validEnv(e) {
			return fmt.Errorf("step %s: environment entry %d: want NAME=VALUE without NUL", s.ID, i)
		}
	}
	return s.Limits.Validate()
}

func validEnv(e string) bool {
	for i := 0; i < len(e); i++ {
		switch {
		case e[i] == '=':
			return i > 0
		case e[i] == 0:
			return false
		}
	}
	return false
}
