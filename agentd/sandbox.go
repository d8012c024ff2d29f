package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/treecopy"
	"github.com/rodon-compute/rodon/netpolicy"
	"github.com/rodon-compute/rodon/oci"
)

// execID is the containerd exec id of the step's process in its pod.
const execID = "step"

// ErrNoImage is returned by Create when the step's image is not in
// containerd (see bundles/build).
var ErrNoImage = errors.New("image not found")

// A Sandbox is one pod sandbox, for one step. Its owner must call Destroy
// exactly once, whatever happened before. Start, Wait and Kill may be
// called from different goroutines.
//
// A sandbox is made in two parts: prepare makes everything up to its
// running pause (snapshot, network, workspace filesystem, spec, task),
// and bind gives it its one step (labels, limits, the workspace copy). A
// cold step has both at once (Create); a pooled sandbox is prepared ahead
// and bound when a step claims it (Pool, Runtime.Claim). Nothing unbinds
// a sandbox: after its step it is destroyed.
type Sandbox struct {
	rt *Runtime
	// id is the sandbox's containerd id, and names its network, cgroups,
	// fifos and directories: the step's (Step.sandboxID) for a cold
	// sandbox, a pool id for a pooled one.
	id   string
	step Step
	// class is the pool class of a pooled sandbox (nil for a cold one);
	// boot are the limits in its spec, and madeAt when its pause started.
	class  *poolClass
	boot   oci.Limits
	madeAt time.Time
	// claimed is set once a step took the pooled sandbox (Pool.Take): it
	// never goes back.
	claimed   bool
	container containerd.Container
	task      containerd.Task
	spec      *specs.Spec
	// wsDir is the sandbox's copy of the workspace, bind-mounted at
	// /workspace: the mount point of its workspace filesystem (quota.go).
	wsDir string
	// wsMounted says this runtime mounted the workspace filesystem and
	// counts it in its reservations.
	wsMounted bool
	// quiesced is set once nothing of the sandbox runs any more (Quiesce).
	quiesced bool
	// halted is set once every process of the sandbox is gone from its
	// cgroup (Halt): nothing of it runs, but its task is not deleted yet.
	halted bool
	// ctlDir is bind-mounted read-only at /run/rodon/ctl for the pause; it
	// also holds the sandbox's resolv.conf.
	ctlDir string
	// net is the sandbox's network, nil for loopback only; hasNet says a
	// network was made for it (also when found again after a restart and
	// not adopted).
	net    *netpolicy.SandboxEgress
	hasNet bool
	// podExit reports the exit of the pod's pause; stopPodWait ends that
	// wait in Destroy.
	podExit     <-chan containerd.ExitStatus
	stopPodWait context.CancelFunc
	podDone     bool

	mu     sync.Mutex
	proc   containerd.Process
	exitCh <-chan containerd.ExitStatus
	phases cluster.Phases
	stdout *countingWriter
	stderr *countingWriter
	// stdin is the write end of a TTY step's terminal input.
	stdin  *io.PipeWriter
	killed cluster.TerminatedBy
	// doneCh is closed (once, by waitOnce) when Wait has the exit.
	doneCh   chan struct{}
	waitOnce sync.Once
}

// ID returns the containerd id of the sandbox.
func (s *Sandbox) ID() string { return s.id }

// Create makes the sandbox of st and starts its pause process: prepare
// and bind at once (the cold path). The step's command is not started
// yet. On error nothing is left behind.
func (r *Runtime) Create(ctx context.Context, st Step) (*Sandbox, error) {
	if err := st.Validate(); err != nil {
		return nil, err
	}
	st = st.withDefaults()
	// The sandbox boots without the step's CPU quota, and bind applies it
	// before the step starts, as a claim of a pooled sandbox does: runsc
	// booting under a small quota (a step asking 0.01 CPU) took minutes.
	boot := st
	boot.Limits.CPU = 0
	sb, err := r.prepare(ctx, st.sandboxID(), boot, stepLabels(st))
	if err != nil {
		return nil, err
	}
	if err := r.bind(ctx, sb, st); err != nil {
		r.destroyFailed(ctx, sb)
		return nil, err
	}
	sb.phases.Created = time.Now().UTC()
	return sb, nil
}

// stepLabels are the labels that tie a sandbox to its step: how a
// restarted agent finds the step's sandbox again.
func stepLabels(st Step) map[string]string {
	labels := map[string]string{LabelStep: string(st.ID)}
	if st.Workspace != "" {
		labels[LabelWorkspace] = st.Workspace
	}
	if st.WorkspaceReadOnly {
		labels[LabelWorkspaceReadOnly] = "true"
	}
	if st.Attempt > 0 {
		labels[LabelAttempt] = strconv.Itoa(st.Attempt)
	}
	return labels
}

// destroyFailed destroys a sandbox whose making failed.
func (r *Runtime) destroyFailed(ctx context.Context, sb *Sandbox) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(r.nsCtx(ctx)), time.Minute)
	defer cancel()
	if err := sb.Destroy(cctx); err != nil {
		r.logger.Warn("clean up after failed create", "sandbox", sb.id, "error", err)
	}
}

// prepare makes the sandbox id for tmpl and starts its pause: image,
// directories, network, spec (tmpl's image, network, workspace size and
// read-only flag, library and limits), the container with labels and the
// sandbox's own, its empty workspace filesystem mounted, and its task
// started. It copies no workspace: bind does. On error nothing is left
// behind.
func (r *Runtime) prepare(ctx context.Context, id string, tmpl Step, labels map[string]string) (_ *Sandbox, retErr error) {
	ctx = r.nsCtx(ctx)
	img, err := r.client.GetImage(ctx, tmpl.Image)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, failure(api.CauseImageNotFound, fmt.Sprintf("image %q is not on the node (build it with bundles/build)", tmpl.Image), ErrNoImage)
		}
		return nil, fmt.Errorf("look up image %q: %w", tmpl.Image, err)
	}
	imgEnv, err := imageEnv(ctx, img)
	if err != nil {
		return nil, err
	}

	sb := &Sandbox{rt: r, id: id, step: tmpl, boot: tmpl.Limits, wsDir: filepath.Join(workspacesDir(r.cfg), id)}
	sb.ctlDir = filepath.Join(ctlDir(r.cfg), id)
	joinNet := func() error { return nil }
	defer func() {
		if retErr != nil {
			joinNet() //nolint:errcheck // a failed finish cleaned up after itself
			r.destroyFailed(ctx, sb)
		}
	}()
	if err := os.Mkdir(sb.wsDir, 0o755); err != nil {
		return nil, fmt.Errorf("create workspace copy: %w", err)
	}
	if err := os.Mkdir(sb.ctlDir, 0o755); err != nil {
		return nil, fmt.Errorf("create control dir: %w", err)
	}
	if labels[LabelStep] != "" {
		// A cold sandbox's pause watches for its step's end from the start.
		if err := sb.markStep(); err != nil {
			return nil, err
		}
	}

	opts := []oci.SpecOpt{
		oci.WithPodSandbox(),
		oci.WithPause(r.cfg.PauseBinary, sb.ctlDir),
		oci.WithEnv(imgEnv),
		workspaceMount(tmpl, sb.wsDir),
		oci.WithLibrary(tmpl.Library),
		oci.WithLimits(tmpl.Limits),
		oci.WithCgroupsPath(path.Join(r.cfg.CgroupParent, id)),
	}
	netOpts, finishNet, err := sb.setupNetwork(ctx)
	if err != nil {
		return nil, err
	}
	// The veth is made and the filter attached while the container and
	// runsc's sandbox are created (20-30 ms off a cold create); joined
	// before the sandbox starts, when runsc reads the namespace's links.
	netDone := make(chan error, 1)
	go func() { netDone <- finishNet() }()
	joinNet = sync.OnceValue(func() error { return <-netDone })
	opts = append(opts, netOpts...)
	spec, err := oci.Spec(ctx, r.cfg.Namespace, id, opts...)
	if err != nil {
		return nil, err
	}
	sb.spec = spec
	all := map[string]string{
		LabelManaged:        "true",
		LabelOwner:          r.owner,
		LabelNode:           r.cfg.Node,
		LabelWorkspaceBytes: strconv.FormatInt(tmpl.WorkspaceBytes, 10),
	}
	if sb.hasNet {
		all[LabelNetwork] = "egress"
	}
	for k, v := range labels {
		all[k] = v
	}
	lctx, lease, err := r.createLease(ctx)
	if err != nil {
		return nil, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	c, err := r.client.NewContainer(lctx, id,
		containerd.WithImage(img),
		// A writable snapshot, though the spec makes the root read-only
		// for the step: runsc's gofer creates mount points in it.
		// Labelled with its owner: until the container exists only the
		// lease holds it, and another agent's sweep must see it is in use.
		containerd.WithNewSnapshot(id, img, snapshots.WithLabels(map[string]string{LabelOwner: r.owner})),
		containerd.WithRuntime(r.cfg.RuntimeType, r.runtimeOptions()),
		containerd.WithSpec(spec),
		containerd.WithContainerLabels(all),
	)
	// From here the container (if any) holds the snapshot; without one,
	// dropping the lease removes the snapshot.
	if derr := r.dropLease(context.WithoutCancel(ctx), lease, err != nil); derr != nil {
		r.logger.Warn("drop create lease", "sandbox", id, "error", derr)
	}
	if err != nil {
		if errdefs.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create sandbox %s: a sandbox with this id exists already", id)
		}
		return nil, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	sb.container = c
	// The workspace filesystem is made once the container exists, so that
	// a sandbox found again after a crash is the one to unmount it.
	if err := sb.mountWorkspace(ctx); err != nil {
		return nil, err
	}
	// The task is made whole even if ctx ends meanwhile (the agent
	// stopping): a task create cut short left runsc's sandbox, gofer and
	// cgroups behind with no task to delete them by. A sandbox made after
	// ctx ended is destroyed by the caller as any failed one is.
	tctx, cancelTask := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancelTask()
	t, err := c.NewTask(tctx, cio.NullIO)
	if err != nil {
		// A network that failed to finish tore its namespace down, maybe
		// under runsc's create: its error is the likely cause, and comes
		// first.
		if nerr := joinNet(); nerr != nil {
			return nil, fmt.Errorf("%w (and create sandbox task %s: %w)", nerr, id, err)
		}
		return nil, fmt.Errorf("create sandbox task %s: %w", id, err)
	}
	sb.task = t
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sb.stopPodWait = cancel
	if sb.podExit, err = t.Wait(wctx); err != nil {
		return nil, fmt.Errorf("wait for sandbox %s: %w", id, err)
	}
	if err := joinNet(); err != nil {
		return nil, err
	}
	if err := t.Start(tctx); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	sb.madeAt = time.Now().UTC()
	return sb, nil
}

// bind gives the prepared sandbox sb its step st: the step's labels (a
// pooled sandbox's; a cold one has them from prepare), its limits where
// they differ from the sandbox's boot limits (written to the host's
// cgroups and read back), and its workspace copied into the workspace
// filesystem (then made read-only on the host for a read-only step). The
// step's environment and arguments go only into its process (Start).
func (r *Runtime) bind(ctx context.Context, sb *Sandbox, st Step) error {
	ctx = r.nsCtx(ctx)
	boot := sb.step
	sb.step = st
	if sb.class != nil {
		if _, err := sb.container.SetLabels(ctx, stepLabels(st)); err != nil {
			return fmt.Errorf("label sandbox %s for step %s: %w", sb.id, st.ID, err)
		}
		if err := sb.markStep(); err != nil {
			return err
		}
	}
	if st.Limits != sb.boot {
		if err := applyLimits(sb.cgroupPath(), st.Limits); err != nil {
			return err
		}
	}
	if boot.WorkspaceBytes != st.WorkspaceBytes || boot.WorkspaceReadOnly != st.WorkspaceReadOnly {
		return fmt.Errorf("bind step %s to sandbox %s: workspace %d bytes (read-only %v), the sandbox has %d (read-only %v)",
			st.ID, sb.id, st.WorkspaceBytes, st.WorkspaceReadOnly, boot.WorkspaceBytes, boot.WorkspaceReadOnly)
	}
	if err := sb.copyIn(st.WorkspaceBytes); err != nil {
		return err
	}
	if st.WorkspaceReadOnly {
		return remountReadOnly(sb.wsDir)
	}
	return nil
}

// ErrWorkspaceTooLarge is wrapped by Create when the step's workspace holds
// more than its workspace limit.
var ErrWorkspaceTooLarge = errors.New("workspace larger than the step's workspace limit")

// mountWorkspace mounts the sandbox's (empty) workspace filesystem of the
// step's workspace size, if the node's disk can take it; bind copies the
// step's workspace into it.
func (s *Sandbox) mountWorkspace(ctx context.Context) error {
	r, quota, img := s.rt, s.step.WorkspaceBytes, imagePath(s.wsDir)
	// Admission and reservation in one critical section; the image
	// counts from here, before it takes any space.
	r.mu.Lock()
	err := r.admitLocked(quota)
	if err == nil {
		r.images[img] = quota
		s.wsMounted = true
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := mountWorkspace(ctx, s.wsDir, quota); err != nil {
		return err // Destroy drops the reservation
	}
	r.logger.Debug("workspace filesystem mounted", "sandbox", s.id, "bytes", quota, "took", time.Since(start))
	return nil
}

// copyIn copies the step's workspace (if any) into its workspace
// filesystem.
func (s *Sandbox) copyIn(quota int64) error {
	if s.step.Workspace == "" {
		return nil
	}
	unlock := s.rt.lockWorkspace(s.step.Workspace)
	defer unlock()
	if err := treecopy.Copy(s.step.Workspace, s.wsDir, treecopy.Limits{MaxBytes: quota, Perm: s.step.WorkspacePerm}); err != nil {
		if errors.Is(err, treecopy.ErrTooLarge) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return failure(api.CauseWorkspaceTooLarge, fmt.Sprintf("the workspace does not fit in the step's workspace limit of %s", fmtBytes(quota)),
				fmt.Errorf("%w: %s (%d bytes): %w", ErrWorkspaceTooLarge, fmtBytes(quota), quota, err))
		}
		return fmt.Errorf("copy workspace into sandbox: %w", err)
	}
	return nil
}

// workspaceMount is the sandbox's mount of its workspace filesystem at
// dir: read-only for a step whose workspace is.
func workspaceMount(st Step, dir string) oci.SpecOpt {
	if st.WorkspaceReadOnly {
		return oci.WithReadOnlyWorkspace(dir)
	}
	return oci.WithWorkspace(dir)
}

func (r *Runtime) runtimeOptions() any {
	if r.cfg.RuntimeConfigPath == "" {
		return nil
	}
	return &runtimeoptions.Options{ConfigPath: r.cfg.RuntimeConfigPath}
}

func imageEnv(ctx context.Context, img containerd.Image) ([]string, error) {
	cfg, err := img.Spec(ctx)
	if err != nil {
		return nil, fmt.Errorf("read config of image %s: %w", img.Name(), err)
	}
	return cfg.Config.Env, nil
}

func (s *Sandbox) fifoDir() string { return filepath.Join(fifoDir(s.rt.cfg), s.ID()) }

// Quiesce kills everything in the sandbox and waits until nothing of it
// runs: the pod (and with it every process the step left), the step's
// process and the pod's task are deleted, so runsc's sandbox and gofer
// are gone and the workspace filesystem no longer changes. The container,
// its network and the workspace filesystem stay for ReadBack and Destroy.
// Quiesce may be called more than once.
func (s *Sandbox) Quiesce(ctx context.Context) error {
	if s.quiesced {
		return nil
	}
	err := s.quiesce(s.rt.nsCtx(ctx))
	if err == nil {
		s.quiesced = true
	}
	return err
}

func (s *Sandbox) quiesce(ctx context.Context) error {
	var errs []error
	s.closeInput()
	if s.task != nil && s.neverStarted(ctx) {
		// An agent died between creating the task and starting it. runsc
		// refuses to signal a created sandbox and containerd to delete an
		// unstopped task, so the pause is started, only to be killed.
		if err := s.task.Start(ctx); err != nil {
			errs = append(errs, fmt.Errorf("start never-started sandbox to stop it: %w", err))
		}
	}
	if s.task != nil {
		errs = append(errs, s.stopPod(ctx, podExitGrace))
		s.mu.Lock()
		proc := s.proc
		s.mu.Unlock()
		if proc != nil {
			waitIO(proc, 10*time.Second)
			if _, err := proc.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
				s.rt.logger.Debug("delete step process", "step", s.step.ID, "error", err)
			}
		}
		_, err := s.task.Delete(ctx, containerd.WithProcessKill)
		switch {
		case errdefs.IsNotFound(err):
			errs = append(errs, s.reapTask(ctx))
		case err != nil:
			errs = append(errs, fmt.Errorf("delete sandbox task: %w", err))
		}
	} else if s.container != nil {
		errs = append(errs, s.reapTask(ctx))
	}
	if s.stopPodWait != nil {
		s.stopPodWait()
	}
	return errors.Join(errs...)
}

// reapTask finishes a task delete that containerd began and did not end.
// When the caller of a task delete goes away (an agent killed while it
// destroys a sandbox) after the shim has dropped the container but before
// containerd has shut the shim down, containerd keeps its record of the
// task, with the shim process and its bundle, while the client no longer
// finds the task: nothing would ever stop that shim. containerd's own task
// delete, asked again, sees the shim serve nothing and shuts it down.
func (s *Sandbox) reapTask(ctx context.Context) error {
	_, err := s.rt.client.TaskService().Delete(ctx, &tasks.DeleteTaskRequest{ContainerID: s.id})
	if err == nil || errdefs.IsNotFound(errgrpc.ToNative(err)) {
		return nil
	}
	return fmt.Errorf("delete what containerd keeps of the sandbox task: %w", errgrpc.ToNative(err))
}

// ReadBack makes the step's host workspace what the step left in its
// workspace filesystem: copied (holes kept, at most the step's workspace
// size) into a staging directory beside it and swapped in atomically, so
// that the workspace is the whole new tree or, on an error, the previous
// one untouched. It returns what changed. Call it after Quiesce: the tree
// it copies is quiesced. A read-only workspace is not read back.
func (s *Sandbox) ReadBack() (treecopy.Changes, error) {
	switch {
	case s.step.Workspace == "" || s.step.WorkspaceReadOnly:
		return treecopy.Changes{}, nil
	case !s.quiesced && !s.halted:
		return treecopy.Changes{}, errors.New("read back workspace: the sandbox still runs")
	}
	limit := s.step.WorkspaceBytes
	if limit <= 0 {
		// A sandbox found again without its size: the filesystem's own.
		sp, err := statSpace(s.wsDir)
		if err != nil {
			return treecopy.Changes{}, fmt.Errorf("read back workspace: %w", err)
		}
		limit = int64(sp.total)
	}
	unlock := s.rt.lockWorkspace(s.step.Workspace)
	defer unlock()
	if err := s.rt.checkReadBack(s.wsDir, filepath.Dir(s.step.Workspace)); err != nil {
		return treecopy.Changes{}, err
	}
	return treecopy.Replace(s.wsDir, s.step.Workspace, treecopy.Limits{MaxBytes: limit})
}

// Destroy tears the sandbox down: it quiesces it (if not done yet), then
// unmounts and removes its workspace filesystem, and deletes the container
// and its snapshot (kept if the filesystem could not be unmounted, for a
// later Destroy), its network and its directories. It is safe on a partly created sandbox and returns
// the first error after trying every part.
func (s *Sandbox) Destroy(ctx context.Context) error {
	ctx = s.rt.nsCtx(ctx)
	var errs []error
	if err := s.Quiesce(ctx); err != nil {
		errs = append(errs, err)
	}
	// The workspace filesystem goes before the container: the container
	// is how an agent started after a crash finds the sandbox again, so
	// while it exists its filesystem is not lost (SweepWorkspaces removes
	// those it finds without one).
	unmounted := true
	if s.wsDir != "" {
		err := unmountWorkspace(s.wsDir)
		errs = append(errs, err)
		unmounted = err == nil
		if s.wsMounted && unmounted {
			s.rt.mu.Lock()
			delete(s.rt.images, imagePath(s.wsDir))
			s.rt.mu.Unlock()
			s.wsMounted = false
		}
	}
	if s.container != nil && unmounted {
		if err := s.container.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete sandbox container: %w", err))
		}
		if err := os.RemoveAll(s.fifoDir()); err != nil {
			errs = append(errs, fmt.Errorf("remove fifo dir: %w", err))
		}
	}
	if s.container != nil {
		errs = append(errs, s.removeCgroups())
	}
	errs = append(errs, s.teardownNetwork(ctx))
	for _, d := range []string{s.wsDir, s.ctlDir} {
		if d == "" || d == s.wsDir && !unmounted {
			continue // never remove what a mounted filesystem holds
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// markStep tells the sandbox's pause that it has a step (the file "step"
// in its control directory): it then watches for the step's end more
// often than an idle pooled sandbox's pause does (cmd/rodon-pause).
func (s *Sandbox) markStep() error {
	if err := os.WriteFile(filepath.Join(s.ctlDir, "step"), nil, 0o644); err != nil {
		return fmt.Errorf("tell the pause of sandbox %s it has a step: %w", s.id, err)
	}
	return nil
}

// stopPod ends the pod and waits until containerd reports its pause gone:
// it asks the pause to exit and, if it has not within grace, kills it
// (which also kills everything else in the sandbox).
func (s *Sandbox) stopPod(ctx context.Context, grace time.Duration) error {
	if s.podExit == nil {
		// A sandbox found again after a restart: no wait is running.
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		s.stopPodWait = cancel
		ch, err := s.task.Wait(wctx)
		if err != nil {
			if errdefs.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("wait for sandbox: %w", err)
		}
		s.podExit = ch
	}
	if s.podDone {
		return nil
	}
	if grace > 0 && s.ctlDir != "" {
		// Without its control directory (removed by an earlier, failed
		// Destroy) the pause cannot be asked; it is killed instead.
		if err := os.WriteFile(filepath.Join(s.ctlDir, "exit"), nil, 0o644); err == nil {
			select {
			case <-s.podExit:
				s.podDone = true
				return nil
			case <-time.After(grace):
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tell pause to exit: %w", err)
		}
	}
	if err := s.task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("kill sandbox: %w", err)
	}
	select {
	case <-s.podExit:
		s.podDone = true
	case <-time.After(30 * time.Second):
		return fmt.Errorf("sandbox did not exit within 30s of SIGKILL")
	}
	return nil
}

// waitIO waits until the process's output is copied, for at most d, and
// reports whether it was.
func waitIO(p containerd.Process, d time.Duration) bool {
	pio := p.IO()
	if pio == nil {
		return true
	}
	done := make(chan struct{})
	go func() {
		pio.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// neverStarted reports whether the sandbox's task was created and never
// started.
func (s *Sandbox) neverStarted(ctx context.Context) bool {
	st, err := s.task.Status(ctx)
	return err == nil && st.Status == containerd.Created
}
