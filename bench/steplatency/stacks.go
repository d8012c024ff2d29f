package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/benchstat"
)

// The three-way comparison (-stacks): `ctr run --rm` of `true` as the
// baseline, and `schedctl run -- true` through two single-member stacks
// (scheduler serve --bootstrap + agentd serve, plaintext on loopback, one
// containerd), A without a warm pool (cold) and B with one (warm),
// alternating. For each schedctl sample two numbers: submit to exit
// record (the exited event's time minus phases.queued, both the leader's
// clock) and the client's return (schedctl's wall time). A B sample
// without a sandbox_warm event goes to a "warm-miss" row, never to the
// warm row.

// stack is one scheduler and one agentd.
type stack struct {
	name    string
	url     string // the scheduler's
	metrics string // the agent's /metrics
	procs   []*exec.Cmd
	logs    []*os.File
}

// freePort asks the kernel for a free loopback port.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startStack starts a stack named name whose agent has a warm pool of
// poolMemory ("0": none), its files under dir.
func startStack(c config, dir, name, poolMemory string, poolMin int) (*stack, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := freePort()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	s := &stack{name: name, url: "http://" + addrs[0], metrics: "http://" + addrs[2] + "/metrics"}
	start := func(what string, args ...string) error {
		f, err := os.Create(filepath.Join(dir, name+"-"+what+".log"))
		if err != nil {
			return err
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			f.Close()
			return fmt.Errorf("start %s of stack %s: %w", what, name, err)
		}
		s.procs, s.logs = append(s.procs, cmd), append(s.logs, f)
		return nil
	}
	if err := start("scheduler", c.scheduler, "serve", "--plaintext", "--bootstrap", "--node-id", "m-"+name,
		"--data-dir", filepath.Join(dir, name, "scheduler"), "--raft-addr", addrs[1], "--http-addr", addrs[0]); err != nil {
		return s, err
	}
	if err := start("agentd", c.agentd, "serve", "--plaintext", "--scheduler", s.url, "--node-id", name,
		"--data-dir", filepath.Join(dir, name, "agent"), "--listen", addrs[2], "--containerd", c.address, "--runtime", c.rtm,
		"--network", "none", "--heartbeat", "500ms", "--cpu", c.stackCPU, "--memory", c.stackMemory, "--warm-pool-memory", poolMemory,
		"--warm-pool-min", strconv.Itoa(poolMin)); err != nil {
		return s, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := exec.Command(c.schedctl, "--plaintext", "--addr", s.url, "nodes", "-o", "json").Output()
		var nodes []api.Node
		if err == nil && json.Unmarshal(out, &nodes) == nil && len(nodes) == 1 && nodes[0].State == "ready" {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("stack %s: node not ready within 60s (%s)", name, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop ends the agent, then the scheduler, each with SIGTERM (the agent
// destroys its pool), and waits.
func (s *stack) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			p.Process.Kill()
			<-done
		}
		s.logs[i].Close()
	}
}

// poolReady reads rodon_agent_pool_sandboxes{state="ready"} of the agent.
func (s *stack) poolReady() int {
	resp, err := http.Get(s.metrics)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	return readyGauge(resp.Body)
}

// readyGauge reads rodon_agent_pool_sandboxes{state="ready"} from an
// agent's /metrics (0 if it is not there).
func readyGauge(r io.Reader) int {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `rodon_agent_pool_sandboxes{state="ready"} `); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return 0
}

// waitPool waits until the agent has a ready pooled sandbox.
func (s *stack) waitPool() error {
	deadline := time.Now().Add(60 * time.Second)
	for s.poolReady() < 1 {
		if time.Now().After(deadline) {
			return fmt.Errorf("stack %s: no ready pooled sandbox within 60s", s.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// runTrue runs `schedctl run --id id -- true` on the stack and returns
// its sample and whether the step ran in a warm sandbox.
func (s *stack) runTrue(c config, id string) (sample, bool, error) {
	start := time.Now()
	if err := command(c.schedctl, "--plaintext", "--addr", s.url, "run", "--id", id, "--", "true"); err != nil {
		return sample{}, false, fmt.Errorf("schedctl run on %s: %w", s.name, err)
	}
	smp := sample{whole: time.Since(start)}
	out, err := exec.Command(c.schedctl, "--plaintext", "--addr", s.url, "step", id, "-o", "json").Output()
	if err != nil {
		return smp, false, fmt.Errorf("schedctl step %s: %w", id, err)
	}
	var st api.Step
	if err := json.Unmarshal(out, &st); err != nil {
		return smp, false, fmt.Errorf("schedctl step %s: %w", id, err)
	}
	if st.ExitCode == nil || *st.ExitCode != 0 {
		return smp, false, fmt.Errorf("step %s on %s: %s", id, s.name, out)
	}
	warm := stepSample(st, &smp)
	if smp.toExit <= 0 {
		return smp, warm, fmt.Errorf("step %s: no exited event after queued", id)
	}
	return smp, warm, nil
}

// settle waits until step id's sandbox is cleaned up (its phases'
// cleaned_up is recorded): a step's exit is reported before its sandbox is
// stopped and destroyed, and that teardown (several runsc invocations, about
// 100 ms of CPU) would otherwise run beside the next sample on two cores.
func (s *stack) settle(c config, id string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := exec.Command(c.schedctl, "--plaintext", "--addr", s.url, "step", id, "-o", "json").Output()
		if err != nil {
			return fmt.Errorf("schedctl step %s: %w", id, err)
		}
		var st api.Step
		if err := json.Unmarshal(out, &st); err != nil {
			return fmt.Errorf("schedctl step %s: %w", id, err)
		}
		if !st.Phases.CleanedUp.IsZero() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stack %s: step %s not cleaned up within 60s", s.name, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runStacks is the three-way comparison.
func runStacks(c config) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := watchExits(ctx, c.address)
	if err != nil {
		return fmt.Errorf("subscribe to containerd events: %w", err)
	}
	dir, err := os.MkdirTemp("", "steplatency-stacks")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Fprintf(os.Stderr, "stacks' files (kept): %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	cold, err := startStack(c, dir, "cold", "0", 0)
	if cold != nil {
		defer cold.stop()
	}
	if err != nil {
		return err
	}
	warm, err := startStack(c, dir, "warm", c.poolMemory, c.poolMin)
	if warm != nil {
		defer warm.stop()
	}
	if err != nil {
		return err
	}
	var ctrS, coldS, warmS, missS []sample
	for i := -1; i < c.n; i++ { // i == -1 warms up, not counted
		id := fmt.Sprintf("b%d-%d", os.Getpid(), i+1)
		if c.settle {
			// The pool's refill after the last warm step is done too.
			if err := warm.waitPool(); err != nil {
				return err
			}
		}
		b, err := ctrRun(c, w, id+"-c")
		if err != nil {
			return err
		}
		a, _, err := cold.runTrue(c, id+"-cold")
		if err != nil {
			return err
		}
		if c.settle {
			if err := cold.settle(c, id+"-cold"); err != nil {
				return err
			}
		}
		if err := warm.waitPool(); err != nil {
			return err
		}
		m, hit, err := warm.runTrue(c, id+"-warm")
		if err != nil {
			return err
		}
		if c.settle {
			if err := warm.settle(c, id+"-warm"); err != nil {
				return err
			}
		}
		if i < 0 {
			continue
		}
		ctrS, coldS = append(ctrS, b), append(coldS, a)
		if hit {
			warmS = append(warmS, m)
		} else {
			missS = append(missS, m)
		}
	}
	report := renderStacks(c.n, c.settle, ctrS, coldS, warmS, missS)
	var burstErr error
	if c.burst > 0 {
		r, err := runBurst(ctx, c, warm)
		if err != nil {
			burstErr = fmt.Errorf("burst: %w", err)
		} else {
			report += renderBurst(r, c)
			if r.failed > 0 {
				burstErr = fmt.Errorf("burst: %d of %d steps failed", r.failed, r.n)
			}
		}
	}
	fmt.Print(report)
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(report), 0o644); err != nil {
			return err
		}
	}
	if burstErr != nil {
		return burstErr
	}
	return checkStacks(c, ctrS, coldS, warmS, missS)
}

// checkStacks applies the guards of c: absolute limits, and limits as
// multiples of `ctr run --rm`'s p50 (create to exit event) measured in
// the same run, which hold across machines of different speed.
func checkStacks(c config, ctrS, coldS, warmS, missS []sample) error {
	base := ctrBase(ctrS)
	type guard struct {
		name    string
		samples []sample
		q       float64
		max     time.Duration
		ratio   float64
	}
	for _, g := range []guard{
		{"warm", warmS, .5, c.maxWarmP50, c.maxWarmP50Ratio},
		{"warm", warmS, .99, c.maxWarmP99, c.maxWarmP99Ratio},
		{"cold", coldS, .5, c.maxColdP50, c.maxColdP50Ratio},
	} {
		if g.max <= 0 && g.ratio <= 0 {
			continue
		}
		if len(g.samples) == 0 {
			if g.name == "warm" {
				return fmt.Errorf("warm submit to exit record: no warm sample (all %d missed the pool)", len(missS))
			}
			continue
		}
		got := benchstat.Quantile(col(g.samples, sampleToExit), g.q)
		if g.max > 0 && got > g.max {
			return fmt.Errorf("%s submit to exit record: p%.0f %v over the limit of %v", g.name, g.q*100, got, g.max)
		}
		if g.ratio > 0 {
			if base <= 0 {
				return fmt.Errorf("%s submit to exit record: no `ctr run --rm` sample to compare with", g.name)
			}
			if r := float64(got) / float64(base); r > g.ratio {
				return fmt.Errorf("%s submit to exit record: p%.0f %v is %.2f times `ctr run --rm`'s p50 %v, over the limit of %.2f", g.name, g.q*100, got, r, base, g.ratio)
			}
		}
	}
	return nil
}

// ctrRun is one `ctr run --rm` of `true`: create to exit event, whole.
func ctrRun(c config, w *exitWatch, id string) (sample, error) {
	start := time.Now()
	err := command(c.ctr, "--address", c.address, "-n", "rodon", "run", "--rm", "--runtime", c.rtm,
		"--annotation", "io.kubernetes.cri.container-type=sandbox", c.image, id, "true")
	b := sample{whole: time.Since(start)}
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 128) { // gVisor's fast-exit race: see run
		return b, fmt.Errorf("ctr run: %w", err)
	}
	exitAt, ok := w.at(id + "/" + id)
	if !ok {
		return b, fmt.Errorf("no exit event for ctr's container %s", id)
	}
	b.toExit = exitAt.Sub(start)
	return b, nil
}

func renderStacks(n int, settle bool, ctrS, coldS, warmS, missS []sample) string {
	var b strings.Builder
	host, _ := os.Hostname()
	mode := "alternating, each sample after the last one's teardown"
	if !settle {
		mode = "alternating, back to back"
	}
	fmt.Fprintf(&b, "### Step latency, `true` in base: `ctr run --rm`, cold and warm `schedctl run` (%s, host %s, n=%d each, %s)\n\n",
		time.Now().UTC().Format(time.RFC3339), host, n, mode)
	fmt.Fprintf(&b, "| path | samples | to exit record p50 | p99 | client return p50 | p99 |\n|---|---|---|---|---|---|\n")
	for _, r := range []struct {
		name string
		s    []sample
	}{
		{"`ctr run --rm` (create to exit event; whole command)", ctrS},
		{"cold `schedctl run -- true` (submit to exit record; client)", coldS},
		{"warm `schedctl run -- true`", warmS},
		{"warm-miss (no `sandbox_warm` event)", missS},
	} {
		if len(r.s) == 0 {
			fmt.Fprintf(&b, "| %s | 0 | | | | |\n", r.name)
			continue
		}
		e, w := col(r.s, func(s sample) time.Duration { return s.toExit }), col(r.s, func(s sample) time.Duration { return s.whole })
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", r.name, len(r.s),
			benchstat.MS(benchstat.Quantile(e, .5)), benchstat.MS(benchstat.Quantile(e, .99)),
			benchstat.MS(benchstat.Quantile(w, .5)), benchstat.MS(benchstat.Quantile(w, .99)))
	}
	fmt.Fprintf(&b, "\nWhere the time goes (p50 of each stage, from the previous mark; leader and agent share one clock):\n\n| path | queued to placed | to starting committed | to sandbox ready | to process started | to exit on node | to exit committed |\n|---|---|---|---|---|---|---|\n")
	for _, r := range []struct {
		name string
		s    []sample
	}{{"cold", coldS}, {"warm", warmS}} {
		if len(r.s) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s |", r.name)
		for i := range len(r.s[0].stages) {
			fmt.Fprintf(&b, " %s |", benchstat.MS(benchstat.Quantile(col(r.s, func(s sample) time.Duration { return s.stages[i] }), .5)))
		}
		b.WriteString("\n")
	}
	if base := ctrBase(ctrS); base > 0 {
		var parts []string
		for _, r := range []struct {
			name string
			s    []sample
			q    float64
		}{{"cold p50", coldS, .5}, {"warm p50", warmS, .5}, {"warm p99", warmS, .99}} {
			if len(r.s) > 0 {
				parts = append(parts, fmt.Sprintf("%s **%.2f**", r.name, float64(benchstat.Quantile(col(r.s, sampleToExit), r.q))/float64(base)))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, "\nSubmit to exit record as a multiple of `ctr run --rm`'s p50 (create to exit event) in this run: %s.\n", strings.Join(parts, ", "))
		}
	}
	fmt.Fprintf(&b, "\nGoals (issue 14): warm p50 <= 60 ms and p99 <= 150 ms, cold p50 <= 250 ms, submit to exit record. Both stacks run with `--network none`.\n")
	return b.String()
}

// stepSample fills smp's time to the exit record and its stages from the
// step's record, and says whether a pooled sandbox ran it.
func stepSample(st api.Step, smp *sample) bool {
	warm := false
	var starting, exitEv time.Time
	for _, e := range st.Events {
		switch e.Kind {
		case api.EventExited:
			smp.toExit = e.Time.Sub(st.Phases.Queued)
			exitEv = e.Time
		case api.EventStarting:
			starting = e.Time
		case api.EventSandboxWarm:
			warm = true
		}
	}
	// The stages, each from the previous mark (leader and agent share
	// this host's clock): placed, the starting report's commit, the
	// sandbox ready (created), the process started, its exit on the node,
	// the exit's commit.
	marks := []time.Time{st.Phases.Queued, st.Phases.Placed, starting, st.Phases.Created, st.Phases.Started, st.Phases.Exited, exitEv}
	for i := 1; i < len(marks); i++ {
		if !marks[i].IsZero() && !marks[i-1].IsZero() {
			smp.stages[i-1] = marks[i].Sub(marks[i-1])
		}
	}
	return warm
}

// sampleToExit is a sample's time to its exit record (for ctr, to the
// exit event).
func sampleToExit(s sample) time.Duration { return s.toExit }

// ctrBase is the p50 of `ctr run --rm` from create to exit event, the
// baseline the ratio guards and the report divide by (0 without samples).
func ctrBase(ctrS []sample) time.Duration {
	if len(ctrS) == 0 {
		return 0
	}
	return benchstat.Quantile(col(ctrS, sampleToExit), .5)
}
