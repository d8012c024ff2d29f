package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netns"

	"github.com/rodon-compute/rodon/internal/benchfleet"
	"github.com/rodon-compute/rodon/internal/benchstat"
)

// The variant (-variant, issue 14 Done 1): a warm step with its own
// network and a 1 MiB workspace against a bare warm step, both on one
// fleet with mutual TLS and a gateway (internal/benchfleet), whose node
// runs `agentd serve --network egress` in a network namespace made for the
// run and a warm pool. Three kinds alternate, the order rotated round by
// round: bare (`--no-internet`, no workspace), with network and the
// workspace read-only (nothing comes back), and with network and the
// workspace writable (the tree the step left is read back, uploaded and
// committed before the exit is recorded).

const (
	kindBare   = "bare warm (`--no-internet`, no workspace)"
	kindNetRO  = "warm, own network, 1 MiB workspace read-only"
	kindNetRW  = "warm, own network, 1 MiB workspace (writable)"
	kindMissed = "warm-miss (no pooled sandbox claimed)"
)

// runVariant runs the variant and returns its report; a ratio over
// c.maxNetRatio is an error.
func runVariant(c config) (report string, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nsName := fmt.Sprintf("steplat-%d", os.Getpid())
	remove, err := newNetns(nsName)
	if err != nil {
		return "", fmt.Errorf("make the node's network namespace: %w", err)
	}
	defer remove()
	o := benchfleet.Options{Prefix: "steplat-variant", AgentArgs: []string{
		"--network", "egress", "--node-netns", "/run/netns/" + nsName, "--dns", "none",
		"--warm-pool-memory", c.poolMemory, "--heartbeat", "500ms"}}
	mode, _, removeCerts, err := benchfleet.Certificates(c.binDir, o)
	defer removeCerts()
	if err != nil {
		return "", err
	}
	f, err := benchfleet.Start(ctx, c.binDir, mode, o)
	if f != nil {
		defer func() {
			if cerr := f.Close(err != nil); cerr != nil {
				err = errors.Join(err, fmt.Errorf("clean up the fleet: %w", cerr))
			}
		}()
	}
	if err != nil {
		return "", fmt.Errorf("start the fleet: %w", err)
	}
	ws, err := makeWorkspace(ctx, f, 1<<20)
	if err != nil {
		return "", fmt.Errorf("make the 1 MiB workspace: %w", err)
	}
	kinds := []struct {
		name string
		args []string
	}{
		{kindBare, []string{"--no-internet"}},
		{kindNetRO, []string{"--workspace", ws, "--workspace-read-only"}},
		{kindNetRW, []string{"--workspace", ws}},
	}
	samples := map[string][]sample{}
	for i := -1; i < c.n; i++ { // i == -1 warms up, not counted
		for j := range kinds {
			k := kinds[(j+max(i, 0))%len(kinds)]
			if err := benchfleet.WaitFor(ctx, time.Minute, "a pooled sandbox ready", func() bool { return poolReadyAt(f) >= 1 }); err != nil {
				return "", err
			}
			// Each sample's cleanup is awaited: a sandbox being
			// destroyed would slow the next sample.
			id := fmt.Sprintf("v%d-%d-%d", os.Getpid(), i+1, j)
			s, warm, err := fleetRun(ctx, f, id, k.args)
			if err != nil {
				return "", fmt.Errorf("%s: %w", k.name, err)
			}
			var last string
			if err := benchfleet.WaitFor(ctx, time.Minute, "the step's cleanup", func() bool {
				st, err := f.Sched.Step(ctx, id)
				last = fmt.Sprintf("%+v %v", st, err)
				return err == nil && !st.Phases.CleanedUp.IsZero()
			}); err != nil {
				return "", fmt.Errorf("%w: step %s: %s", err, id, last)
			}
			if i < 0 {
				continue
			}
			name := k.name
			if !warm {
				name = kindMissed
			}
			samples[name] = append(samples[name], s)
		}
	}
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "### Warm step with its own network and a 1 MiB workspace (%s, host %s, n=%d each, rotated)\n\n", time.Now().UTC().Format(time.RFC3339), host, c.n)
	fmt.Fprintf(&b, "One fleet on 127.0.0.1 (mutual TLS, one scheduler member, one gateway, `agentd serve --network egress --warm-pool-memory %s` in a network namespace made for the run); `schedctl run -- true`; each sample's cleanup awaited before the next.\n\n", c.poolMemory)
	fmt.Fprintf(&b, "| kind | samples | to exit record p50 | p99 | client return p50 | queued to process started p50 | process started to exit committed p50 | / bare (p50) |\n|---|---|---|---|---|---|---|---|\n")
	p50 := func(s []sample, f func(sample) time.Duration) time.Duration { return benchstat.Quantile(col(s, f), .5) }
	toExit := func(s sample) time.Duration { return s.toExit }
	bare := p50(samples[kindBare], toExit)
	for _, k := range []string{kindBare, kindNetRO, kindNetRW, kindMissed} {
		s := samples[k]
		if len(s) == 0 {
			fmt.Fprintf(&b, "| %s | 0 | | | | | | |\n", k)
			continue
		}
		before := p50(s, func(s sample) time.Duration { return s.stages[0] + s.stages[1] + s.stages[2] + s.stages[3] })
		after := p50(s, func(s sample) time.Duration { return s.stages[4] + s.stages[5] })
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %.2f |\n", k, len(s),
			benchstat.MS(p50(s, toExit)), benchstat.MS(benchstat.Quantile(col(s, toExit), .99)),
			benchstat.MS(p50(s, func(s sample) time.Duration { return s.whole })), benchstat.MS(before), benchstat.MS(after),
			float64(p50(s, toExit))/float64(bare))
	}
	fmt.Fprintf(&b, "\nGoal (issue 14): a warm step with its own network and a 1 MiB workspace within 1.2x of a bare warm step.\n")
	report = b.String()
	if rw := p50(samples[kindNetRW], toExit); c.maxNetRatio > 0 && (bare == 0 || float64(rw)/float64(bare) > c.maxNetRatio) {
		return report, fmt.Errorf("warm with network and a writable workspace is %v against bare %v, over %.2fx", rw, bare, c.maxNetRatio)
	}
	return report, nil
}

// makeWorkspace makes a workspace of one file of size random bytes
// through the fleet's gateway and returns its id.
func makeWorkspace(ctx context.Context, f *benchfleet.Fleet, size int) (string, error) {
	gw, err := f.SignIn(ctx)
	if err != nil {
		return "", err
	}
	var w struct {
		ID string `json:"id"`
	}
	if err := gw.Do(ctx, http.MethodPost, "/v1/workspaces", map[string]string{"name": "steplatency"}, &w); err != nil {
		return "", err
	}
	data := make([]byte, size)
	rand.Read(data)
	resp, err := gw.Send(ctx, http.MethodPut, "/v1/workspaces/"+w.ID+"/files/data.bin", bytes.NewReader(data), nil)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("PUT data.bin: %s", resp.Status)
	}
	return w.ID, nil
}

// fleetRun runs `schedctl run -- true` with extra flags on f and returns
// its sample and whether a pooled sandbox ran it.
func fleetRun(ctx context.Context, f *benchfleet.Fleet, id string, extra []string) (sample, bool, error) {
	args := append(f.Mode.Flags(), "run", "--id", id, "--cpu", "0.5", "--memory", "256m")
	args = append(append(args, extra...), "--", "true")
	cmd := exec.CommandContext(ctx, f.Bin+"/schedctl", args...)
	cmd.Env = f.Mode.Env("RODON_SCHEDULER=" + f.SchedURL)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return sample{}, false, fmt.Errorf("schedctl run: %w: %s", err, stderr.String())
	}
	smp := sample{whole: time.Since(start)}
	st, err := f.Sched.Step(ctx, id)
	if err != nil {
		return smp, false, err
	}
	if st.ExitCode == nil || *st.ExitCode != 0 {
		return smp, false, fmt.Errorf("step %s: state %s, exit %v: %s", id, st.State, st.ExitCode, st.Reason)
	}
	warm := stepSample(st, &smp)
	if smp.toExit <= 0 {
		return smp, warm, fmt.Errorf("step %s: no exited event after queued", id)
	}
	return smp, warm, nil
}

// poolReadyAt reads the fleet's node's ready pooled sandboxes (0 if it
// cannot).
func poolReadyAt(f *benchfleet.Fleet) int {
	resp, err := f.Agent.Get(f.AgentURL + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	return readyGauge(resp.Body)
}

// newNetns makes the named network namespace the node's sandboxes route
// through (nothing leaves it: the steps run `true`) and returns its
// removal.
func newNetns(name string) (func(), error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		return nil, err
	}
	h.Close()
	if err := netns.Set(orig); err != nil {
		netns.DeleteNamed(name)
		return nil, err
	}
	return func() { netns.DeleteNamed(name) }, nil
}
