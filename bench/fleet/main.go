// Command fleet benchmarks the scheduler:
//
//   - placement throughput: a 3-member cluster on loopback (real scheduler
//     processes) with in-process fake agents (agentd/agentdtest) that accept
//     assignments without running containers; steps submitted, placed,
//     reported running and exited, per second, against the rate of the
//     cheapest replicated write (a heartbeat) measured on the same cluster;
//   - end-to-end latency of `schedctl run -- true` against `agentd run --
//     true` in the same run (a one-member scheduler and a real agentd), runs
//     alternating; the scheduler's cost is the difference of the medians.
//
// Usage (as root, after scripts/install-deps, bundles/build and go build -o
// bin/ ./cmd/...):
//
//	go run ./bench/fleet -steps 2000 -latency-runs 20
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rodon-compute/rodon/agentd/agentdtest"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler/client"
)

func main() {
	steps := flag.Int("steps", 2000, "steps to push through the 3-member cluster")
	agents := flag.Int("agents", 4, "fake agents")
	runs := flag.Int("latency-runs", 20, "runs of each command for the latency comparison (0 skips it)")
	binDir := flag.String("bin", "bin", "directory of the scheduler, agentd and schedctl binaries")
	maxAdded := flag.Duration("max-added", 0, "fail if schedctl run's median exceeds agentd run's by more than this (0: report only)")
	out := flag.String("out", "", "also write the markdown report to this file")
	flag.Parse()
	report, err := run(*steps, *agents, *runs, *binDir, *maxAdded)
	fmt.Print(report)
	if *out != "" && report != "" {
		if werr := os.WriteFile(*out, []byte(report), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type daemon struct{ cmd *exec.Cmd }

func startDaemon(name string, args ...string) (*daemon, error) {
	cmd := exec.Command(name, args...)
	cmd.Stderr = nil
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &daemon{cmd}, nil
}

func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-done
	}
}

// startCluster starts n scheduler members and returns their URLs.
func startCluster(binDir string, n int) ([]*daemon, string, error) {
	var ds []*daemon
	var urls []string
	first := ""
	for i := 0; i < n; i++ {
		dir, err := os.MkdirTemp("", "bench-sched")
		if err != nil {
			return ds, "", err
		}
		httpAddr := freeAddr()
		args := []string{"serve", "--node-id", fmt.Sprintf("m%d", i+1), "--data-dir", dir,
			"--raft-addr", freeAddr(), "--http-addr", httpAddr}
		if i == 0 {
			args = append(args, "--bootstrap")
			first = httpAddr
		} else {
			args = append(args, "--join", first)
		}
		d, err := startDaemon(binDir+"/scheduler", args...)
		if err != nil {
			return ds, "", err
		}
		ds = append(ds, d)
		urls = append(urls, "http://"+httpAddr)
		c, _ := client.New(urls[i], client.Options{RetryFor: 30 * time.Second})
		deadline := time.Now().Add(30 * time.Second)
		for {
			ms, err := c.Members(context.Background())
			if err == nil && len(ms) == i+1 {
				break
			}
			if time.Now().After(deadline) {
				return ds, "", fmt.Errorf("member %d did not join: %v", i+1, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return ds, strings.Join(urls, ","), nil
}

func run(steps, agents, runs int, binDir string, maxAdded time.Duration) (string, error) {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "### Scheduler (%s, host %s)\n\n", time.Now().UTC().Format(time.RFC3339), host)
	if err := throughput(&b, steps, agents, binDir); err != nil {
		return b.String(), err
	}
	if runs > 0 {
		err := latency(&b, runs, binDir, maxAdded)
		return b.String(), err
	}
	return b.String(), nil
}

func throughput(b *strings.Builder, steps, agents int, binDir string) error {
	ds, urls, err := startCluster(binDir, 3)
	defer func() {
		for _, d := range ds {
			d.stop()
		}
	}()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(urls, client.Options{})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := 0; i < agents; i++ {
		a := &agentdtest.FakeAgent{Node: cluster.NodeID(fmt.Sprintf("fake-%d", i)), Capacity: cluster.Resources{CPU: 1000, MemoryBytes: 1 << 42},
			MaxStarting: 64, Client: c}
		wg.Add(1)
		go func() { defer wg.Done(); a.Run(ctx) }()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		nodes, err := c.Nodes(ctx)
		if err == nil && len(nodes) == agents {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fake agents did not register: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Baseline: heartbeats, the cheapest replicated write, for 3 s.
	var beats atomic.Int64
	bctx, bcancel := context.WithTimeout(ctx, 3*time.Second)
	var bwg sync.WaitGroup
	for w := 0; w < 32; w++ {
		bwg.Add(1)
		go func(w int) {
			defer bwg.Done()
			node := cluster.NodeID(fmt.Sprintf("fake-%d", w%agents))
			for bctx.Err() == nil {
				if _, err := c.Heartbeat(bctx, cluster.Heartbeat{Node: node, Health: cluster.Health{State: cluster.NodeReady}}); err == nil {
					beats.Add(1)
				}
			}
		}(w)
	}
	bwg.Wait()
	bcancel()
	writesPerSec := float64(beats.Load()) / 3

	start := time.Now()
	next := make(chan int)
	go func() {
		defer close(next)
		for i := 0; i < steps; i++ {
			next <- i
		}
	}()
	var swg sync.WaitGroup
	var failed atomic.Int64
	for w := 0; w < 32; w++ {
		swg.Add(1)
		go func() {
			defer swg.Done()
			for i := range next {
				if _, err := c.SubmitStep(ctx, api.StepRequest{ID: fmt.Sprintf("b-%05d", i), Image: "base", CPU: 0.01, MemoryBytes: 16 << 20, Args: []string{"true"}}); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	swg.Wait()
	submitted := time.Since(start)
	for {
		st, err := c.Steps(ctx, client.StepFilter{State: "exited"})
		if err == nil && len(st) == steps-int(failed.Load()) {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return errors.New("steps did not all exit within 10 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	total := time.Since(start)
	perSec := float64(steps) / total.Seconds()
	fmt.Fprintf(b, "Placement throughput, 3 members on loopback, %d fake agents, %d steps submitted by 32 clients:\n\n", agents, steps)
	fmt.Fprintf(b, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(b, "| baseline: heartbeats committed per second (32 clients) | %.0f |\n", writesPerSec)
	fmt.Fprintf(b, "| steps submitted per second | %.0f |\n", float64(steps)/submitted.Seconds())
	fmt.Fprintf(b, "| steps committed end to end per second (submit, place, running, exit) | %.0f |\n", perSec)
	fmt.Fprintf(b, "| ratio: full step lifecycles per heartbeat write | **%.2f** |\n", perSec/writesPerSec)
	fmt.Fprintf(b, "| failed submissions | %d |\n\n", failed.Load())
	return nil
}

func latency(b *strings.Builder, runs int, binDir string, maxAdded time.Duration) error {
	ds, urls, err := startCluster(binDir, 1)
	defer func() {
		for _, d := range ds {
			d.stop()
		}
	}()
	if err != nil {
		return err
	}
	dataDir, err := os.MkdirTemp("", "bench-agent")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	agent, err := startDaemon(binDir+"/agentd", "serve", "--plaintext", "--scheduler", urls, "--node-id", "bench", "--data-dir", dataDir,
		"--listen", freeAddr(), "--heartbeat", "500ms", "--network", "none")
	if err != nil {
		return err
	}
	defer agent.stop()
	c, _ := client.New(urls, client.Options{})
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := c.Node(context.Background(), "bench")
		if err == nil && n.State == "ready" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	timeIt := func(name string, args ...string) (time.Duration, error) {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), "RODON_SCHEDULER="+urls)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		t := time.Now()
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("%s: %w: %s", name, err, stderr.String())
		}
		return time.Since(t), nil
	}
	agentRunDir, err := os.MkdirTemp("", "bench-agentrun")
	if err != nil {
		return err
	}
	defer os.RemoveAll(agentRunDir)
	var sched, local, schedRec, localRec []time.Duration
	recFile := agentRunDir + "/record.json"
	for i := -1; i < runs; i++ {
		id := fmt.Sprintf("lat-%d-%d", os.Getpid(), i+1)
		ds, err := timeIt(binDir+"/schedctl", "run", "--id", id, "--cpu", "0.5", "--memory", "256m", "--", "true")
		if err != nil {
			return err
		}
		st, err := c.Step(context.Background(), id)
		if err != nil {
			return err
		}
		dl, err := timeIt(binDir+"/agentd", "run", "--data-dir", agentRunDir, "--record", recFile, "--cpu", "0.5", "--memory", "256m", "--", "true")
		if err != nil {
			return err
		}
		var rec cluster.ExitRecord
		if b, err := os.ReadFile(recFile); err != nil || json.Unmarshal(b, &rec) != nil {
			return fmt.Errorf("read agentd run's record: %v", err)
		}
		if i >= 0 {
			sched, local = append(sched, ds), append(local, dl)
			schedRec = append(schedRec, st.Phases.Exited.Sub(st.Phases.Queued))
			localRec = append(localRec, rec.Phases.Exited.Sub(rec.Phases.Queued))
		}
	}
	med := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	p95 := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[int(0.95*float64(len(s)-1)+0.5)]
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	added := med(schedRec) - med(localRec)
	fmt.Fprintf(b, "End-to-end latency of `true`, one scheduler member and one agentd on this machine, %d runs each, alternating:\n\n", runs)
	fmt.Fprintf(b, "| command | median | p95 |\n|---|---|---|\n")
	fmt.Fprintf(b, "| `agentd run -- true` (baseline) | %s | %s |\n", ms(med(local)), ms(p95(local)))
	fmt.Fprintf(b, "| `schedctl run -- true` | %s | %s |\n", ms(med(sched)), ms(p95(sched)))
	fmt.Fprintf(b, "| whole commands: ratio of medians | %.2f | |\n", float64(med(sched))/float64(med(local)))
	fmt.Fprintf(b, "| step record, queued to exited: `agentd run` | %s | %s |\n", ms(med(localRec)), ms(p95(localRec)))
	fmt.Fprintf(b, "| step record, queued to exited: `schedctl run` (scheduler's record) | %s | %s |\n", ms(med(schedRec)), ms(p95(schedRec)))
	fmt.Fprintf(b, "| **added by the scheduler: difference of the queued-to-exited medians** | **%s** | |\n", ms(added))
	if maxAdded > 0 && added > maxAdded {
		return fmt.Errorf("schedctl run adds %v over agentd run at the median, over the limit of %v", added, maxAdded)
	}
	return nil
}
