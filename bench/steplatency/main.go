// Command steplatency measures the latency of one step through `agentd run
// -- true`, side by side with plain `ctr run --rm` of the same image under
// the same gVisor runtime. Runs alternate between the two so that machine
// noise hits both alike; results are ratios of medians from the same run.
//
// Two latencies are reported for each command, both seen from outside:
//
//   - create to exit record: from starting the command to containerd's
//     /tasks/exit event for the step (agentd's exit record follows that
//     event once the output has drained; its own phases are shown too);
//   - whole command: until the command returns, cleanup included.
//
// Usage (as root, after scripts/install-deps and bundles/build):
//
//	go run ./bench/steplatency -n 30 -out docs/bench-latest.md
//
// With -stacks it compares `ctr run --rm` with cold and warm `schedctl run
// -- true` instead (stacks.go):
//
//	go build -o bin/ ./cmd/... && go run ./bench/steplatency -stacks -n 30
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/typeurl/v2"

	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/benchfleet"
	"github.com/rodon-compute/rodon/internal/benchstat"
)

type config struct {
	n                   int
	agentd, ctr         string
	address, image, rtm string
	out                 string
	maxRatio            float64
	// The three-way comparison (stacks.go).
	stacks              bool
	keep                bool
	settle              bool
	scheduler, schedctl string
	poolMemory          string
	maxWarmP50          time.Duration
	maxColdP50          time.Duration
	maxWarmP99          time.Duration
	maxWarmP50Ratio     float64
	maxWarmP99Ratio     float64
	maxColdP50Ratio     float64
	burst               int
	stackMemory         string
	stackCPU            string
	burstCPU            float64
	poolMin             int
	variant             bool
	binDir              string
	maxNetRatio         float64
}

func main() {
	var c config
	flag.IntVar(&c.n, "n", 30, "runs of each command")
	flag.StringVar(&c.agentd, "agentd", "bin/agentd", "agentd binary")
	flag.StringVar(&c.ctr, "ctr", "/opt/rodon/bin/ctr", "ctr binary")
	flag.StringVar(&c.address, "address", "/run/rodon/containerd/containerd.sock", "containerd socket")
	flag.StringVar(&c.image, "image", "rodon.local/base:latest", "image")
	flag.StringVar(&c.rtm, "runtime", "io.containerd.rodon.v1", "containerd runtime")
	flag.StringVar(&c.out, "out", "", "also write the markdown report to this file")
	flag.Float64Var(&c.maxRatio, "max-ratio", 0, "fail if agentd's median create-to-exit-record latency exceeds this multiple of ctr's (0: report only)")
	flag.StringVar(&c.stackMemory, "stack-memory", "4g", "with -stacks: each stack's agentd serve --memory (the warm pool's budget is taken from it)")
	flag.IntVar(&c.burst, "burst", 0, "with -stacks: then submit this many steps at once to the warm stack, twice (the first teaches the pool), and report the second (0: no burst)")
	flag.BoolVar(&c.stacks, "stacks", false, "compare ctr run --rm with cold and warm schedctl run through two scheduler+agentd stacks (stacks.go)")
	flag.StringVar(&c.scheduler, "scheduler", "bin/scheduler", "scheduler binary (-stacks)")
	flag.StringVar(&c.schedctl, "schedctl", "bin/schedctl", "schedctl binary (-stacks)")
	flag.StringVar(&c.poolMemory, "warm-pool-memory", "1g", "the warm stack's agentd serve --warm-pool-memory (-stacks)")
	flag.DurationVar(&c.maxWarmP99, "max-warm-p99", 0, "fail if the warm p99 from submit to exit record exceeds this (-stacks; 0: report only)")
	flag.DurationVar(&c.maxColdP50, "max-cold-p50", 0, "fail if the cold p50 from submit to exit record exceeds this (-stacks; 0: report only)")
	flag.DurationVar(&c.maxWarmP50, "max-warm-p50", 0, "fail if the warm p50 from submit to exit record exceeds this (-stacks; 0: report only)")
	flag.Float64Var(&c.maxWarmP50Ratio, "max-warm-p50-ratio", 0, "fail if the warm p50 from submit to exit record exceeds this multiple of `ctr run --rm`'s p50 from create to exit event, measured in the same run (-stacks; 0: report only)")
	flag.Float64Var(&c.maxWarmP99Ratio, "max-warm-p99-ratio", 0, "fail if the warm p99 from submit to exit record exceeds this multiple of `ctr run --rm`'s p50 (-stacks; 0: report only)")
	flag.Float64Var(&c.maxColdP50Ratio, "max-cold-p50-ratio", 0, "fail if the cold p50 from submit to exit record exceeds this multiple of `ctr run --rm`'s p50 (-stacks; 0: report only)")
	flag.StringVar(&c.stackCPU, "stack-cpu", "2", "with -stacks: each stack's agentd serve --cpu (CPUs offered to steps; more than the host's cores overcommits them)")
	flag.Float64Var(&c.burstCPU, "burst-cpu", 0.01, "with -burst: the CPU each burst step asks for (its quota)")
	flag.IntVar(&c.poolMin, "warm-pool-min", 0, "with -stacks: the warm stack's agentd serve --warm-pool-min")
	flag.BoolVar(&c.variant, "variant", false, "a warm step with its own network and a 1 MiB workspace against a bare warm one, on a fleet with mutual TLS and a gateway (variant.go)")
	flag.StringVar(&c.binDir, "bin", "bin", "with -variant: directory of the scheduler, agentd, gateway and schedctl binaries")
	flag.Float64Var(&c.maxNetRatio, "max-net-ratio", 0, "with -variant: fail if the warm step with network and a writable workspace is over this multiple of a bare warm one, p50 (0: report only)")
	flag.BoolVar(&c.settle, "settle", true, "with -stacks: before each sample, wait until the previous step's sandbox is cleaned up and a pooled sandbox is ready, so that no sample shares the CPUs with another's teardown (false: the samples follow each other at once)")
	flag.BoolVar(&c.keep, "keep", false, "with -stacks: keep the stacks' data and logs (their directory is printed)")
	flag.Parse()
	if c.variant {
		report, err := runVariant(c)
		os.Exit(benchfleet.Finish("steplatency", c.out, report, err))
	}
	run := run
	if c.stacks {
		run = runStacks
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "steplatency:", err)
		os.Exit(1)
	}
}

// exitWatch timestamps containerd's /tasks/exit events as they arrive.
type exitWatch struct {
	mu   sync.Mutex
	seen map[string]time.Time // "container/exec" -> arrival
}

func watchExits(ctx context.Context, address string) (*exitWatch, error) {
	client, err := containerd.New(address)
	if err != nil {
		return nil, err
	}
	w := &exitWatch{seen: map[string]time.Time{}}
	ch, errs := client.Subscribe(ctx, `topic=="/tasks/exit"`)
	go func() {
		defer client.Close()
		for {
			select {
			case env := <-ch:
				now := time.Now()
				v, err := typeurl.UnmarshalAny(env.Event)
				if err != nil {
					continue
				}
				if e, ok := v.(*apievents.TaskExit); ok {
					w.mu.Lock()
					w.seen[e.ContainerID+"/"+e.ID] = now
					w.mu.Unlock()
				}
			case <-errs:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return w, nil
}

func (w *exitWatch) at(key string) (time.Time, bool) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		w.mu.Lock()
		t, ok := w.seen[key]
		w.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return t, ok
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type sample struct {
	toExit, whole time.Duration
	// stages split toExit (-stacks only; see runTrue).
	stages [6]time.Duration
}

func run(c config) error {
	if c.n < 3 {
		return fmt.Errorf("-n %d: want at least 3 runs", c.n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := watchExits(ctx, c.address)
	if err != nil {
		return fmt.Errorf("subscribe to containerd events: %w", err)
	}
	tmp, err := os.MkdirTemp("", "steplatency")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var agentdS, ctrS []sample
	var phases [][5]time.Duration // create, start, first byte, exit, cleanup
	wrongCtr := 0
	for i := -1; i < c.n; i++ { // i == -1 warms up, not counted
		id := fmt.Sprintf("bench-%d-%d", os.Getpid(), i+1)
		rec := filepath.Join(tmp, "rec.json")

		start := time.Now()
		if err := command(c.agentd, "run", "--network", "none", "--containerd", c.address, "--runtime", c.rtm, "--image", c.image,
			"--id", id+"-a", "--record", rec, "--", "true"); err != nil {
			return fmt.Errorf("agentd run: %w", err)
		}
		a := sample{whole: time.Since(start)}
		exitAt, ok := w.at(id + "-a/step")
		if !ok {
			return fmt.Errorf("no exit event for agentd's step %s", id)
		}
		a.toExit = exitAt.Sub(start)
		var r cluster.ExitRecord
		if err := readRecord(rec, &r); err != nil {
			return err
		}
		if r.ExitCode != 0 {
			return fmt.Errorf("agentd run -- true: exit code %d", r.ExitCode)
		}

		// The first byte needs a step that prints.
		if err := command(c.agentd, "run", "--network", "none", "--containerd", c.address, "--runtime", c.rtm, "--image", c.image,
			"--id", id+"-e", "--record", rec, "--", "echo", "hi"); err != nil {
			return fmt.Errorf("agentd run echo: %w", err)
		}
		var re cluster.ExitRecord
		if err := readRecord(rec, &re); err != nil {
			return err
		}

		start = time.Now()
		err := command(c.ctr, "--address", c.address, "-n", "rodon", "run", "--rm", "--runtime", c.rtm,
			"--annotation", "io.kubernetes.cri.container-type=sandbox", c.image, id+"-c", "true")
		b := sample{whole: time.Since(start)}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 128 {
			// gVisor's fast-exit race (RUNTIME-NOTES.md): the sandbox's
			// own init exited before its status was read. The run is
			// complete; only its exit code is wrong.
			wrongCtr++
		} else if err != nil {
			return fmt.Errorf("ctr run: %w", err)
		}
		exitAt, ok = w.at(id + "-c/" + id + "-c")
		if !ok {
			return fmt.Errorf("no exit event for ctr's container %s", id)
		}
		b.toExit = exitAt.Sub(start)
		if i < 0 {
			continue
		}
		agentdS = append(agentdS, a)
		ctrS = append(ctrS, b)
		p := r.Phases
		phases = append(phases, [5]time.Duration{
			p.Created.Sub(p.Queued), p.Started.Sub(p.Created), re.Phases.FirstOutput.Sub(re.Phases.Started),
			p.Exited.Sub(p.Started), p.CleanedUp.Sub(p.Exited),
		})
	}
	report := render(c.n, agentdS, ctrS, phases, wrongCtr)
	fmt.Print(report)
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(report), 0o644); err != nil {
			return err
		}
	}
	toExit := func(s sample) time.Duration { return s.toExit }
	ratio := float64(benchstat.Quantile(col(agentdS, toExit), .5)) / float64(benchstat.Quantile(col(ctrS, toExit), .5))
	if c.maxRatio > 0 && ratio > c.maxRatio {
		return fmt.Errorf("create to exit record: agentd's median is %.2f times ctr's, over the limit of %.2f", ratio, c.maxRatio)
	}
	return nil
}

func command(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, stderr.String())
	}
	return nil
}

func readRecord(file string, r *cluster.ExitRecord) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	return jsonUnmarshal(b, r)
}

func col(ss []sample, f func(sample) time.Duration) []time.Duration {
	var out []time.Duration
	for _, s := range ss {
		out = append(out, f(s))
	}
	return out
}

func render(n int, agentdS, ctrS []sample, phases [][5]time.Duration, wrongCtr int) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "### Step latency, `true` in base: `agentd run` vs `ctr run --rm` (%s, host %s, n=%d each, alternating)\n\n",
		time.Now().UTC().Format(time.RFC3339), host, n)
	fmt.Fprintf(&b, "| latency | `ctr run --rm` median | p95 | `agentd run` median | p95 | ratio of medians | ratio of p95 |\n|---|---|---|---|---|---|---|\n")
	for _, m := range []struct {
		name string
		f    func(sample) time.Duration
	}{
		{"create to exit record", func(s sample) time.Duration { return s.toExit }},
		{"whole command (cleanup included)", func(s sample) time.Duration { return s.whole }},
	} {
		a, c := col(agentdS, m.f), col(ctrS, m.f)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | **%.2f** | %.2f |\n", m.name,
			benchstat.MS(benchstat.Quantile(c, .5)), benchstat.MS(benchstat.Quantile(c, .95)), benchstat.MS(benchstat.Quantile(a, .5)), benchstat.MS(benchstat.Quantile(a, .95)),
			float64(benchstat.Quantile(a, .5))/float64(benchstat.Quantile(c, .5)), float64(benchstat.Quantile(a, .95))/float64(benchstat.Quantile(c, .95)))
	}
	names := []string{"create (image, workspace copy, snapshot, pod start)", "exec set up (before its start)", "start to first byte (`echo hi`)",
		"start to exit (runsc exec runs `true`)", "cleanup (pod stop, delete, workspace)"}
	fmt.Fprintf(&b, "\n`agentd run` phases from its exit records:\n\n| phase | median | p95 |\n|---|---|---|\n")
	for i, name := range names {
		var c []time.Duration
		for _, p := range phases {
			c = append(c, p[i])
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, benchstat.MS(benchstat.Quantile(c, .5)), benchstat.MS(benchstat.Quantile(c, .95)))
	}
	fmt.Fprintf(&b, "\nExit code of `true` misreported as 128: `ctr run --rm` %d of %d runs (gVisor's sandbox-init race, which agentd avoids by running the step as an exec in a pod), `agentd run` none (a wrong code fails the benchmark).\n", wrongCtr, n+1)
	return b.String()
}
