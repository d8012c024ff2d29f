package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/benchstat"
	"github.com/rodon-compute/rodon/internal/benchtls"
)

// latencyNode is the node id of mode's agentd in the latency comparison.
func latencyNode(mode benchtls.Mode) string { return "bench-" + mode.Short() }

// latFleet is one scheduler member and one agentd serve in one mode.
type latFleet struct {
	*schedCluster
	agent          *daemon
	node, agentDir string
	// steps are the ids of the steps run, to let them be cleaned up
	// before agentd stops.
	steps []string
	// whole and rec are schedctl run's times and the scheduler's
	// queued-to-exited records, one per run; placing, creating and
	// running split rec at the step's placed and created phases.
	whole, rec                 []time.Duration
	placing, creating, running []time.Duration
}

func startLatency(c config, dir string, mode benchtls.Mode) (*latFleet, error) {
	sc, err := startCluster(c.bin, dir, "latency", mode, 1)
	lf := &latFleet{schedCluster: sc}
	if err != nil {
		return lf, err
	}
	node := latencyNode(mode)
	dataDir := filepath.Join(dir, "agent-"+mode.Short())
	lf.node, lf.agentDir = node, dataDir
	args := append([]string{"serve", "--scheduler", sc.urls, "--node-id", node, "--data-dir", dataDir,
		"--listen", freeAddr(), "--heartbeat", "500ms", "--network", "none"}, mode.Flags()...)
	if lf.agent, err = startDaemon(dataDir+".log", c.bin+"/agentd", args...); err != nil {
		return lf, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := sc.op.Node(context.Background(), node)
		if err == nil && n.State == "ready" {
			return lf, nil
		}
		if time.Now().After(deadline) {
			return lf, fmt.Errorf("%s: agent not ready: %v\n%s", mode, err, lf.agent.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop waits until every step run has been cleaned up (schedctl run
// returns at the exit, before the sandbox is gone), stops agentd and the
// scheduler, and destroys whatever sandbox of the node is left with
// `agentd cleanup`, so that nothing is left on the host.
func (lf *latFleet) stop(binDir string) error {
	var errs []error
	deadline := time.Now().Add(time.Minute)
	for _, id := range lf.steps {
		for {
			st, err := lf.op.Step(context.Background(), id)
			if err == nil && !st.Phases.CleanedUp.IsZero() {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("%s: step %s not cleaned up within a minute: %v", lf.mode, id, err))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if lf.agent != nil {
		lf.agent.stop()
		out, err := exec.Command(binDir+"/agentd", "cleanup", "--node-id", lf.node, "--network", "none", "--data-dir", lf.agentDir).CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("agentd cleanup: %w: %s", err, out))
		}
	}
	lf.schedCluster.stop()
	return errors.Join(errs...)
}

// schedctlRun runs `schedctl run -- true` against the fleet and records
// its times unless it is the warm-up.
func (lf *latFleet) schedctlRun(c config, id string, record bool) error {
	args := append(lf.mode.Flags(), "run", "--id", id, "--cpu", "0.5", "--memory", "256m", "--", "true")
	lf.steps = append(lf.steps, id)
	d, err := timeIt(c.bin+"/schedctl", lf.mode.Env("RODON_SCHEDULER="+lf.urls), args...)
	if err != nil {
		return fmt.Errorf("%s: %w", lf.mode, err)
	}
	st, err := lf.op.Step(context.Background(), id)
	if err != nil {
		return err
	}
	if record {
		p := st.Phases
		lf.whole, lf.rec = append(lf.whole, d), append(lf.rec, p.Exited.Sub(p.Queued))
		lf.placing, lf.creating, lf.running = append(lf.placing, p.Placed.Sub(p.Queued)), append(lf.creating, p.Created.Sub(p.Placed)), append(lf.running, p.Exited.Sub(p.Created))
	}
	return nil
}

func timeIt(name string, env []string, args ...string) (time.Duration, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", name, err, stderr.String())
	}
	return time.Since(t), nil
}

// latency compares `schedctl run -- true` through a plaintext and a TLS
// fleet with `agentd run -- true`: each round runs schedctl against one
// fleet, agentd run, then schedctl against the other, which fleet goes
// first alternating round by round.
func latency(b *strings.Builder, c config, dir string, plain, tlsMode benchtls.Mode) (err error) {
	var pf, tf *latFleet
	defer func() {
		for _, f := range []*latFleet{tf, pf} {
			if f != nil {
				err = errors.Join(err, f.stop(c.bin))
			}
		}
	}()
	if pf, err = startLatency(c, dir, plain); err != nil {
		return err
	}
	if tf, err = startLatency(c, dir, tlsMode); err != nil {
		return err
	}
	agentRunDir := filepath.Join(dir, "agentrun")
	recFile := filepath.Join(dir, "record.json")
	var local, localRec []time.Duration
	for i := -1; i < c.runs; i++ { // round -1 warms up, not counted
		first, second := pf, tf
		if i%2 != 0 {
			first, second = tf, pf
		}
		id := fmt.Sprintf("lat-%d-%d", os.Getpid(), i+1)
		if err := first.schedctlRun(c, id, i >= 0); err != nil {
			return err
		}
		dl, err := timeIt(c.bin+"/agentd", os.Environ(), "run", "--data-dir", agentRunDir, "--record", recFile, "--cpu", "0.5", "--memory", "256m", "--", "true")
		if err != nil {
			return err
		}
		var rec cluster.ExitRecord
		if b, err := os.ReadFile(recFile); err != nil || json.Unmarshal(b, &rec) != nil {
			return fmt.Errorf("read agentd run's record: %v", err)
		}
		if err := second.schedctlRun(c, id, i >= 0); err != nil {
			return err
		}
		if i >= 0 {
			local, localRec = append(local, dl), append(localRec, rec.Phases.Exited.Sub(rec.Phases.Queued))
		}
	}
	med, p95 := benchstat.Median, func(d []time.Duration) time.Duration { return benchstat.Quantile(d, 0.95) }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	rat := func(t, p []time.Duration) string { return ratio(float64(med(t)), float64(med(p))) }
	addedPlain, addedTLS := med(pf.rec)-med(localRec), med(tf.rec)-med(localRec)
	fmt.Fprintf(b, "End-to-end latency of `true`: for each mode one scheduler member and one `agentd serve` on this machine, up side by side; "+
		"%d rounds, each running `schedctl run` against one, `agentd run`, then `schedctl run` against the other, which goes first alternating:\n\n", c.runs)
	fmt.Fprintf(b, "| command | median | p95 |\n|---|---|---|\n")
	fmt.Fprintf(b, "| `agentd run -- true` (baseline) | %s | %s |\n", ms(med(local)), ms(p95(local)))
	fmt.Fprintf(b, "| `schedctl run -- true`, plaintext | %s | %s |\n", ms(med(pf.whole)), ms(p95(pf.whole)))
	fmt.Fprintf(b, "| `schedctl run -- true`, mutual TLS | %s | %s |\n", ms(med(tf.whole)), ms(p95(tf.whole)))
	fmt.Fprintf(b, "| whole `schedctl run`: ratio of medians, TLS / plaintext | %s | |\n", rat(tf.whole, pf.whole))
	fmt.Fprintf(b, "| step record, queued to exited: `agentd run` | %s | %s |\n", ms(med(localRec)), ms(p95(localRec)))
	fmt.Fprintf(b, "| step record, queued to exited: `schedctl run`, plaintext (scheduler's record) | %s | %s |\n", ms(med(pf.rec)), ms(p95(pf.rec)))
	fmt.Fprintf(b, "| step record, queued to exited: `schedctl run`, mutual TLS (scheduler's record) | %s | %s |\n", ms(med(tf.rec)), ms(p95(tf.rec)))
	fmt.Fprintf(b, "| step records: ratio of medians, TLS / plaintext | %s | |\n", rat(tf.rec, pf.rec))
	fmt.Fprintf(b, "| added by the scheduler, plaintext: difference of the queued-to-exited medians | %s | |\n", ms(addedPlain))
	fmt.Fprintf(b, "| **added by the scheduler, mutual TLS: difference of the queued-to-exited medians** | **%s** | |\n", ms(addedTLS))
	fmt.Fprintf(b, "| added by the scheduler, mutual TLS, as a fraction of `agentd run`'s queued-to-exited median | %.2f | |\n", addedRatio(addedTLS, med(localRec)))
	fmt.Fprintf(b, "| added by TLS: difference of the scheduler's queued-to-exited medians, TLS − plaintext | %s | |\n\n", ms(med(tf.rec)-med(pf.rec)))
	fmt.Fprintf(b, "The scheduler's record of `schedctl run`'s step, split at its phases (medians; the phases' own medians need not add up):\n\n")
	fmt.Fprintf(b, "| phase | plaintext | mutual TLS |\n|---|---|---|\n")
	fmt.Fprintf(b, "| queued to placed (placement) | %s | %s |\n", benchstat.MS(med(pf.placing)), benchstat.MS(med(tf.placing)))
	fmt.Fprintf(b, "| placed to created (the agent's assignments poll, sandbox create) | %s | %s |\n", benchstat.MS(med(pf.creating)), benchstat.MS(med(tf.creating)))
	fmt.Fprintf(b, "| created to exited (start, run `true`, exit report) | %s | %s |\n\n", benchstat.MS(med(pf.running)), benchstat.MS(med(tf.running)))
	if c.maxAdded > 0 && addedTLS > c.maxAdded {
		return fmt.Errorf("with mutual TLS, schedctl run adds %v over agentd run at the median, over the limit of %v", addedTLS, c.maxAdded)
	}
	if r := addedRatio(addedTLS, med(localRec)); c.maxAddedRatio > 0 && r > c.maxAddedRatio {
		return fmt.Errorf("with mutual TLS, schedctl run adds %v over agentd run at the median, %.2f of agentd run's %v, over the limit of %.2f", addedTLS, r, med(localRec), c.maxAddedRatio)
	}
	return nil
}

// addedRatio is the scheduler's added latency as a fraction of agentd
// run's queued-to-exited median (0 without one).
func addedRatio(added, base time.Duration) float64 {
	if base <= 0 {
		return 0
	}
	return float64(added) / float64(base)
}
