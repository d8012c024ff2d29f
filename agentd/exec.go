package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/oci"
)

// ioSettle is how long the output of an exited step may take to end before
// the pod is stopped to end it.
const ioSettle = 200 * time.Millisecond

// podExitGrace is how long the pause has to exit by itself after the step
// before the pod is killed.
const podExitGrace = 2 * time.Second

// ErrStartFailed wraps the reason a step's command could not be started
// (a missing binary, a bad working directory).
var ErrStartFailed = errors.New("step did not start")

// Start runs the step's command in the sandbox, copying its stdout and
// stderr to the given writers (each written by one goroutine at a time).
// A command that cannot be started returns an error wrapping ErrStartFailed.
func (s *Sandbox) Start(ctx context.Context, stdout, stderr io.Writer) error {
	ctx = s.rt.nsCtx(ctx)
	pspec, err := oci.Process(s.spec, s.step.Args, s.step.Env)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.stdout = &countingWriter{w: stdout, first: s.firstOutput}
	s.stderr = &countingWriter{w: stderr, first: s.firstOutput}
	s.mu.Unlock()
	ioOpts := []cio.Opt{cio.WithStreams(nil, s.stdout, s.stderr), cio.WithFIFODir(s.fifoDir())}
	if s.step.TTY {
		// On a terminal stderr is stdout; input comes through Input.
		pspec.Terminal = true
		pr, pw := io.Pipe()
		s.mu.Lock()
		s.stdin = pw
		s.mu.Unlock()
		ioOpts = []cio.Opt{cio.WithStreams(pr, s.stdout, nil), cio.WithTerminal, cio.WithFIFODir(s.fifoDir())}
	}
	p, err := s.task.Exec(ctx, execID, pspec, cio.NewCreator(ioOpts...))
	if err != nil {
		return fmt.Errorf("create step process: %w", err)
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	// Wait before Start so that a fast exit is not missed. Its context is
	// not the caller's: the exit must be collected even if the caller
	// stops caring.
	ch, err := p.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("wait for step process: %w", err)
	}
	started := time.Now().UTC()
	if err := p.Start(ctx); err != nil {
		cmd := ""
		if len(s.step.Args) > 0 {
			cmd = s.step.Args[0]
		}
		return startFailure(cmd, err)
	}
	s.mu.Lock()
	s.exitCh = ch
	s.phases.Started = started
	s.mu.Unlock()
	return nil
}

func (s *Sandbox) firstOutput() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phases.FirstOutput.IsZero() {
		s.phases.FirstOutput = time.Now().UTC()
	}
}

// Kill asks the step's process to stop with SIGTERM and, if it is still
// there after grace, SIGKILL. why is recorded as the step's terminated_by.
// Kill returns once the signals are sent; Wait reports the exit.
func (s *Sandbox) Kill(ctx context.Context, why cluster.TerminatedBy, grace time.Duration) error {
	ctx = s.rt.nsCtx(ctx)
	s.mu.Lock()
	p, exitCh := s.proc, s.exitCh
	if s.killed == "" {
		s.killed = why
	}
	s.mu.Unlock()
	if p == nil || exitCh == nil {
		return errors.New("kill step: not started")
	}
	if err := p.Kill(ctx, syscall.SIGTERM); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("kill step: %w", err)
	}
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			if err := p.Kill(context.WithoutCancel(ctx), syscall.SIGKILL); err != nil && !errdefs.IsNotFound(err) {
				s.rt.logger.Warn("SIGKILL step", "step", s.step.ID, "error", err)
			}
		case <-s.exited():
		}
	}()
	return nil
}

// exited returns a channel closed once Wait has collected the exit.
func (s *Sandbox) exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.doneCh == nil {
		s.doneCh = make(chan struct{})
	}
	return s.doneCh
}

// Wait blocks until containerd reports the step's process gone, then
// returns its exit record. The caller still owns Destroy.
func (s *Sandbox) Wait(ctx context.Context) (cluster.ExitRecord, error) {
	s.mu.Lock()
	ch := s.exitCh
	s.mu.Unlock()
	if ch == nil {
		return cluster.ExitRecord{}, errors.New("wait for step: not started")
	}
	var es containerd.ExitStatus
	select {
	case es = <-ch:
	case <-ctx.Done():
		return cluster.ExitRecord{}, ctx.Err()
	}
	s.exited()
	s.waitOnce.Do(func() { close(s.doneCh) })
	if err := es.Error(); err != nil {
		return cluster.ExitRecord{}, fmt.Errorf("wait for step: %w", err)
	}
	oom := s.oomKilled()
	// The step is over. Its output is complete once every writer of it
	// is gone: usually at once, but a background process the step left
	// may still hold stdout, so if the output has not ended shortly, end
	// the pod (and with it everything the step left running) first.
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if !waitIO(p, ioSettle) {
		if err := s.stopPod(s.rt.nsCtx(ctx), podExitGrace); err != nil {
			return cluster.ExitRecord{}, fmt.Errorf("stop sandbox after the step: %w", err)
		}
		waitIO(p, 10*time.Second)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phases.Exited = es.ExitTime().UTC()
	rec := cluster.ExitRecord{
		Step:         s.step.ID,
		State:        cluster.StateExited,
		ExitCode:     int(es.ExitCode()),
		TerminatedBy: cluster.ByExit,
		Phases:       s.phases,
		Stdout:       s.stdout.n.Load(),
		Stderr:       s.stderr.n.Load(),
	}
	switch {
	case oom && rec.ExitCode != 0:
		rec.TerminatedBy = cluster.ByOOM
		rec.Reason = fmt.Sprintf("out of memory: the memory limit of %d bytes was reached", s.step.Limits.MemoryBytes)
	case oom:
		// A process of the step was OOM-killed, yet the step itself
		// exited 0: it ended by its own exit, and says what happened.
		rec.Reason = fmt.Sprintf("a process was killed at the memory limit of %d bytes; the step exited 0", s.step.Limits.MemoryBytes)
	case s.killed == cluster.ByUser:
		rec.State = cluster.StateCancelled
		rec.TerminatedBy = cluster.ByUser
	case s.killed != "":
		rec.TerminatedBy = s.killed
		if s.killed == cluster.ByTimeout {
			rec.Reason = fmt.Sprintf("timed out after %v", s.step.Timeout)
		}
	}
	return rec, nil
}

// ErrNotInteractive is returned by Input and Resize for a step that does
// not run on a terminal, or no longer runs.
var ErrNotInteractive = errors.New("step is not running on a terminal")

// inputTimeout bounds how long Input waits for the step's terminal to take
// the bytes.
const inputTimeout = 5 * time.Second

// Input writes data to the terminal of a TTY step.
func (s *Sandbox) Input(data []byte) error {
	done := s.exited()
	s.mu.Lock()
	w := s.stdin
	s.mu.Unlock()
	if w == nil {
		return ErrNotInteractive
	}
	errc := make(chan error, 1)
	go func() { _, err := w.Write(data); errc <- err }()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNotInteractive, err)
		}
		return nil
	case <-done:
		return ErrNotInteractive
	case <-time.After(inputTimeout):
		return fmt.Errorf("step's terminal did not take input within %v", inputTimeout)
	}
}

// Resize sets the size of a TTY step's terminal.
func (s *Sandbox) Resize(ctx context.Context, cols, rows int) error {
	if cols <= 0 || rows <= 0 || cols > 10000 || rows > 10000 {
		return fmt.Errorf("terminal size %dx%d: want 1 to 10000 columns and rows", cols, rows)
	}
	s.mu.Lock()
	p, tty := s.proc, s.stdin != nil
	s.mu.Unlock()
	if p == nil || !tty {
		return ErrNotInteractive
	}
	if err := p.Resize(s.rt.nsCtx(ctx), uint32(cols), uint32(rows)); err != nil {
		return fmt.Errorf("resize terminal: %w", err)
	}
	return nil
}

// closeInput ends the step's terminal input, once the step has exited.
func (s *Sandbox) closeInput() {
	s.mu.Lock()
	w := s.stdin
	s.mu.Unlock()
	if w != nil {
		w.Close()
	}
}
