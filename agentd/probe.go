package agentd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/netpolicy"
	"github.com/rodon-compute/rodon/oci"
)

// canaryLimits are applied to the probe's sandbox and then read back from
// the host's cgroups.
var canaryLimits = oci.Limits{CPU: 0.5, MemoryBytes: 96 << 20, Pids: 64}

// canaryWorkspace is the canary's workspace size; it writes twice as much
// into it, which must fail.
var canaryWorkspace = cluster.MinLimits.WorkspaceBytes

// canaryFill tries to write past the canary's workspace quota; exit 8 says
// it could.
var canaryFill = fmt.Sprintf("head -c %d /dev/zero > /workspace/fill 2>/dev/null && exit 8", 2*canaryWorkspace)

// Probe checks that this node can enforce what Rodon promises: a canary
// sandbox of image starts under the configured runtime, runs a command
// with the right exit code, and its CPU, memory and pids limits are visible
// in the host's cgroups. With a Network, the canary gets its own network
// and its egress filter must refuse and count a connect to a private
// address. Its workspace quota must refuse a write past it. Any failure
// makes the node degraded, with a reason.
func (r *Runtime) Probe(ctx context.Context, image string) cluster.Health {
	return r.probe(ctx, image, false)
}

// probe is Probe; with claim (a node with a warm pool) the canary's
// sandbox is made as a pooled one and claimed, so that the limits read
// back are those a claim writes.
func (r *Runtime) probe(ctx context.Context, image string, claim bool) cluster.Health {
	var reasons []string
	id := fmt.Sprintf("canary-%d", time.Now().UnixNano())
	st := Step{ID: cluster.StepID(id), Image: image, Args: []string{"sh", "-c", canaryFill + "; exit 3"},
		Limits: canaryLimits, WorkspaceBytes: canaryWorkspace}
	create := r.Create
	if claim {
		create = r.claimCanary
	}
	sb, err := create(ctx, st)
	if err != nil {
		return cluster.Health{State: cluster.NodeDegraded, Reasons: []string{"canary sandbox does not start: " + err.Error()}}
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := sb.Destroy(dctx); err != nil {
			r.logger.Warn("destroy canary", "error", err)
		}
	}()
	reasons = append(reasons, sb.checkLimits(canaryLimits)...)
	if sb.net != nil {
		// The canary also proves the egress filter: a connect to its own
		// gateway (in the sandbox pool, denied as platform once the
		// control-plane list is loaded and as private before; if the filter
		// failed the packet would still stay on this machine) must be
		// refused at once and counted.
		sb.step.Args = []string{"timeout", "10", "bash", "-c",
			fmt.Sprintf("%s; exec 3<>/dev/tcp/%s/9 && exit 9; exit 3", canaryFill, sb.net.Net.Gateway4)}
	}
	var out bytes.Buffer
	if err := sb.Start(ctx, &out, &out); err != nil {
		reasons = append(reasons, "canary step does not start: "+err.Error())
	} else if rec, err := sb.Wait(ctx); err != nil {
		reasons = append(reasons, "canary step exit not reported: "+err.Error())
	} else if rec.ExitCode == 8 {
		reasons = append(reasons, fmt.Sprintf("workspace quota not enforced: the canary wrote %d bytes into a workspace of %d", 2*canaryWorkspace, canaryWorkspace))
	} else if rec.ExitCode == 9 {
		reasons = append(reasons, "egress filter not enforcing: the canary sandbox connected to its gateway")
	} else if rec.ExitCode != 3 {
		reasons = append(reasons, fmt.Sprintf("canary step exit code %d, want 3 (output %q)", rec.ExitCode, out.String()))
	} else if sb.net != nil {
		c, err := sb.Denied()
		if err != nil {
			reasons = append(reasons, "egress counters unreadable: "+err.Error())
		} else if c[netpolicy.ReasonPrivate].Packets+c[netpolicy.ReasonPlatform].Packets == 0 {
			reasons = append(reasons, "egress filter did not count the canary's denied connect to its gateway")
		}
	}
	if len(reasons) > 0 {
		return cluster.Health{State: cluster.NodeDegraded, Reasons: reasons}
	}
	return cluster.Health{State: cluster.NodeReady}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// claimCanary makes the canary's sandbox as the warm pool makes one (of
// the canary's class) and claims it for st.
func (r *Runtime) claimCanary(ctx context.Context, st Step) (*Sandbox, error) {
	if err := st.Validate(); err != nil {
		return nil, err
	}
	c, ok := r.classOf(ctx, st)
	if !ok {
		return nil, fmt.Errorf("image %q is not on the node (build it with bundles/build)", st.Image)
	}
	sb, err := r.makePooled(ctx, c)
	if err != nil {
		return nil, err
	}
	sb.claimed = true
	if err := r.Claim(ctx, sb, st); err != nil {
		r.destroyFailed(ctx, sb)
		return nil, fmt.Errorf("claim: %w", err)
	}
	return sb, nil
}
