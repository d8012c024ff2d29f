package agentd

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

// TestAgentReprobesDegradedNode: a node whose canary failed at start is
// not out of service for good. Its probe runs again while it is degraded,
// and once the canary passes the scheduler sees the node ready. The
// canary's image is missing at start and tagged afterwards.
func TestAgentReprobesDegradedNode(t *testing.T) {
	rt := newTestRuntime(t)
	sched := newRecordingScheduler(t)
	probeImage := fmt.Sprintf("rodon.local/reprobe-%d:latest", time.Now().UnixNano())
	startAgentWith(t, rt, sched, func(c *AgentConfig, _ *logstore.Config) {
		c.ProbeImage = probeImage
		c.Reprobe = 300 * time.Millisecond
	})

	health := func() cluster.Health {
		n, _ := sched.c.State().Node("n1")
		return n.Health
	}
	sched.waitNode("n1")
	if h := health(); h.State != cluster.NodeDegraded || len(h.Reasons) == 0 || !strings.Contains(h.Reasons[0], "is not on the node") {
		t.Fatalf("health with the canary's image missing = %+v, want degraded naming the image", h)
	}
	// Still degraded after a few probes: a failing probe does not pass.
	time.Sleep(time.Second)
	if h := health(); h.State != cluster.NodeDegraded {
		t.Fatalf("health after more failed probes = %+v, want degraded", h)
	}

	ctx := rt.nsCtx(t.Context())
	base, err := rt.client.GetImage(ctx, baseImage)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.client.ImageService().Create(ctx, images.Image{Name: probeImage, Target: base.Target()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rt.client.ImageService().Delete(rt.nsCtx(context.Background()), probeImage) //nolint:errcheck // best effort
	})
	schedulertest.Eventually(t, "the node ready once its canary passes", func() bool {
		return health().State == cluster.NodeReady
	})
	if h := health(); len(h.Reasons) != 0 {
		t.Errorf("ready node's reasons = %q, want none", h.Reasons)
	}
}

func TestNewAgentRejectsNegativeReprobe(t *testing.T) {
	cfg := DefaultAgentConfig()
	cfg.Node = "n1"
	cfg.Address = netip.MustParseAddrPort("127.0.0.1:1")
	cfg.Reprobe = -time.Second
	if _, err := NewAgent(cfg, nil, nil, nil, testenv.Logger(t)); err == nil || !strings.Contains(err.Error(), "reprobe") {
		t.Errorf("NewAgent with a negative reprobe = %v, want an error naming it", err)
	}
}
