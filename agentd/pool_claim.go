package agentd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/oci"
)

// LabelPool is the pool class key on a sandbox made for the warm pool. A
// pooled sandbox without LabelStep was never claimed: a restarted agent
// destroys it (nothing proves no step ran in it).
const LabelPool = "rodon.pool"

// claimMemoryRoom is how far above a pooled sandbox's memory use a step's
// memory limit must be for the step to claim it (cluster.MinRequest's 16 MiB).
const claimMemoryRoom = 16 << 20

// errClaimMiss is wrapped by Claim when the step does not fit the sandbox
// (its memory limit is below what the sandbox already uses): a miss, not
// a failure of the node.
var errClaimMiss = errors.New("step does not fit the pooled sandbox")

// classOf returns the pool class of st (with its defaults), and false for
// a step that always goes cold: one with a library (its mount would be
// covered like a workspace mounted after start), or whose image is not
// on the node (the cold path says so).
func (r *Runtime) classOf(ctx context.Context, st Step) (poolClass, bool) {
	st = st.withDefaults()
	if st.Library != "" {
		return poolClass{}, false
	}
	img, err := r.client.GetImage(r.nsCtx(ctx), st.Image)
	if err != nil {
		return poolClass{}, false
	}
	return poolClass{
		Image: st.Image, Digest: img.Target().Digest.String(),
		Network: r.cfg.Network != nil && !st.NoInternet, WorkspaceBytes: st.WorkspaceBytes,
		Pids: st.Limits.Pids, ReadOnly: st.WorkspaceReadOnly,
	}, true
}

// defaultClass is the node's default class: image, the node's network,
// the default workspace size and pids, a writable workspace.
func (r *Runtime) defaultClass(ctx context.Context, image string) (poolClass, error) {
	c, ok := r.classOf(ctx, Step{Image: image})
	if !ok {
		return c, fmt.Errorf("image %q is not on the node", image)
	}
	return c, nil
}

// makePooled prepares a sandbox of class c for no step yet: its spec has
// the image's environment only, the class's pids limit and no CPU or
// memory limit (a claim writes them).
func (r *Runtime) makePooled(ctx context.Context, c poolClass) (*Sandbox, error) {
	var b [6]byte
	rand.Read(b[:])
	id := "pool-" + c.key() + "-" + hex.EncodeToString(b[:])
	tmpl := Step{Image: c.Image, NoInternet: !c.Network, WorkspaceBytes: c.WorkspaceBytes,
		WorkspaceReadOnly: c.ReadOnly, Limits: oci.Limits{Pids: c.Pids}}
	sb, err := r.prepare(ctx, id, tmpl, map[string]string{LabelPool: c.key()})
	if err != nil {
		return nil, err
	}
	sb.class = &c
	return sb, nil
}

func (r *Runtime) destroy(ctx context.Context, sb *Sandbox) error { return sb.Destroy(ctx) }

// check is the host-side health pass over a ready pooled sandbox, without
// an exec: its pause runs, and its cgroup, workspace filesystem (of the
// class's size at most) and network namespace are there.
func (r *Runtime) check(ctx context.Context, sb *Sandbox) error {
	st, err := sb.task.Status(r.nsCtx(ctx))
	if err != nil {
		return fmt.Errorf("status of its pause: %w", err)
	}
	if st.Status != containerd.Running {
		return fmt.Errorf("its pause is %s", st.Status)
	}
	cg := sb.cgroupPath()
	if !dirExists(filepath.Join(cgroupRoot, "memory", cg)) && !dirExists(filepath.Join(cgroupRoot, cg)) {
		return fmt.Errorf("its cgroup %s is gone", cg)
	}
	sp, err := statSpace(sb.wsDir)
	if err != nil {
		return fmt.Errorf("its workspace filesystem: %w", err)
	}
	if int64(sp.total) > sb.step.WorkspaceBytes {
		return fmt.Errorf("its workspace filesystem has %d bytes, more than its class's %d: not mounted", sp.total, sb.step.WorkspaceBytes)
	}
	if sb.net != nil {
		if _, err := os.Stat(sb.net.Net.NSPath); err != nil {
			return fmt.Errorf("its network: %w", err)
		}
	}
	return nil
}

// memory is what the sandbox uses: its cgroup's memory and its shim's,
// which lives outside it.
func (r *Runtime) memory(sb *Sandbox) int64 {
	n, ok := memoryUsage(sb.cgroupPath())
	if !ok {
		return 0
	}
	return n + shimOverhead
}

// memoryUsage reads the memory use of cgroup cg (v1 or v2).
func memoryUsage(cg string) (int64, bool) {
	for _, f := range []string{
		filepath.Join(cgroupRoot, "memory", cg, "memory.usage_in_bytes"),
		filepath.Join(cgroupRoot, cg, "memory.current"),
	} {
		if b, err := os.ReadFile(f); err == nil {
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// Claim binds step st to sb, a sandbox the caller took from the pool
// (Pool.Take): the step's labels, its CPU, memory and pids limits written
// to the host's cgroups and read back (an error wrapping
// ErrLimitsNotApplied if they do not), and its workspace copied in (and
// made read-only for a read-only step). The step has not started: on any
// error the caller destroys sb and may create a cold sandbox instead.
func (r *Runtime) Claim(ctx context.Context, sb *Sandbox, st Step) error {
	if !sb.claimed || sb.class == nil {
		return fmt.Errorf("claim sandbox %s: not taken from the pool", sb.id)
	}
	if err := st.Validate(); err != nil {
		return err
	}
	st = st.withDefaults()
	if st.Limits.MemoryBytes > 0 {
		if used, ok := memoryUsage(sb.cgroupPath()); ok && st.Limits.MemoryBytes < used+claimMemoryRoom {
			return fmt.Errorf("%w: memory limit %d bytes, the sandbox uses %d", errClaimMiss, st.Limits.MemoryBytes, used)
		}
	}
	if err := r.bind(ctx, sb, st); err != nil {
		return err
	}
	sb.phases.Created = time.Now().UTC()
	return nil
}

// claim gives st a sandbox of the pool, if one of its class is ready and
// the claim works; nil otherwise (the caller creates one cold). A failed
// claim destroys the sandbox: it is never offered again.
func (p *Pool) claim(ctx context.Context, rt *Runtime, st Step) *Sandbox {
	if p == nil || st.Validate() != nil {
		return nil
	}
	c, ok := rt.classOf(ctx, st)
	if !ok {
		return nil
	}
	sb, ok := p.Take(c)
	if !ok {
		return nil
	}
	start := time.Now()
	err := rt.Claim(ctx, sb, st)
	if err == nil {
		p.metrics.pool.claim.Observe(time.Since(start).Seconds())
		p.succeeded()
		return sb
	}
	reason := "claim_failed"
	if errors.Is(err, errClaimMiss) {
		reason = "no_fit"
	} else {
		p.mu.Lock()
		p.failLocked(fmt.Sprintf("claim a sandbox of class %s: %v", c.key(), err), errors.Is(err, ErrLimitsNotApplied))
		p.mu.Unlock()
		p.logger.Warn("claim a pooled sandbox; creating one cold", "step", st.ID, "sandbox", sb.id, "error", err)
	}
	p.metrics.pool.discarded.WithLabelValues(reason).Inc()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := sb.Destroy(dctx); err != nil {
		p.logger.Warn("destroy a pooled sandbox after a failed claim", "sandbox", sb.id, "error", err)
	}
	return nil
}

// sandboxFor gives the step its sandbox: a claimed one of the warm pool
// (with a sandbox_warm event in its log and to the scheduler), else one
// created cold.
func (r *stepRun) sandboxFor(ctx context.Context, st Step, lg *logstore.Log) (*Sandbox, error) {
	sb := r.a.pool.claim(ctx, r.a.rt, st)
	if sb == nil {
		for {
			sb, err := r.a.rt.Create(ctx, st)
			// Pooled sandboxes reserve disk for their workspaces: a
			// step the disk refuses goes first.
			if errors.Is(err, ErrLowDisk) && r.a.pool.Shed(ctx) {
				continue
			}
			return sb, err
		}
	}
	ev := cluster.Event{Time: sb.phases.Created, Kind: cluster.EventSandboxWarm,
		Message: "the step runs in a sandbox made ahead of it (warm pool)",
		Warm:    &api.SandboxWarm{CreatedAt: sb.madeAt, Class: sb.class.key()}}
	if err := lg.Event(ev); err != nil {
		r.a.logger.Warn("record sandbox_warm event", "step", r.id, "error", err)
	}
	// Off the step's path: run joins it before the running report, so
	// the scheduler records the event before the start.
	r.async(func() {
		r.report(ctx, "events", func(ctx context.Context) error {
			return r.a.sched.StepEvents(ctx, cluster.StepEvents{Step: r.id, Node: r.a.cfg.Node, Attempt: r.attempt, Events: []cluster.Event{ev}})
		})
	})
	return sb, nil
}
