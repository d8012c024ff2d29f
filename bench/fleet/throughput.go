package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rodon-compute/rodon/agentd/agentdtest"
	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/benchtls"
	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// tpCluster is a 3-member cluster with its fake agents, each acting with
// its own identity (agent/fake-I) through its own client.
type tpCluster struct {
	*schedCluster
	clients int
	agents  []*client.Client
	fakes   []*agentdtest.FakeAgent
	// metrics reads a member's /metrics (every member applies every
	// entry, so any one counts them all).
	metrics *http.Client
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// tpResult is one cluster's throughput.
type tpResult struct {
	beatsPerSec, beatWritesPerSec, submitPerSec, stepsPerSec float64
	failed                                                   int64
	// entries and items are the Raft entries and the commands in them
	// that the steps took, by type (the FSM's counters).
	entries, items map[string]float64
	check          lifeCheck
	// cpu is the CPU time the members and this process used during the
	// steps.
	cpu cpuTimes
}

func startThroughput(c config, dir string, mode benchtls.Mode) (*tpCluster, error) {
	sc, err := startCluster(c.bin, dir, "throughput", mode, 3)
	tc := &tpCluster{schedCluster: sc, clients: c.clients, cancel: func() {}}
	if err != nil {
		return tc, err
	}
	tr, err := mode.Transport(operator, pki.AllowRoles(pki.RoleMember))
	if err != nil {
		return tc, err
	}
	tc.metrics = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	tc.cancel = cancel
	for i := range c.agents {
		node := cluster.NodeID(fakeNode(i))
		ac, err := mode.Client(sc.urls, pki.Identity{Role: pki.RoleAgent, Name: string(node)}, client.Options{})
		if err != nil {
			return tc, err
		}
		tc.agents = append(tc.agents, ac)
		a := &agentdtest.FakeAgent{Node: node, Capacity: cluster.Resources{CPU: 1000, MemoryBytes: 1 << 42}, MaxStarting: 64, Client: ac}
		tc.fakes = append(tc.fakes, a)
		tc.wg.Go(func() { a.Run(ctx) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		nodes, err := sc.op.Nodes(ctx)
		if err == nil && len(nodes) == c.agents {
			return tc, nil
		}
		if time.Now().After(deadline) {
			return tc, fmt.Errorf("%s: fake agents did not register: %v", mode, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (tc *tpCluster) stop() {
	tc.cancel()
	tc.wg.Wait()
	for _, a := range tc.agents {
		a.CloseIdleConnections()
	}
	tc.metrics.CloseIdleConnections()
	tc.schedCluster.stop()
}

// heartbeats measures heartbeats for d, from clients goroutines, each for
// a node through that node's agent client, and returns the heartbeats
// answered per second. Unchanged heartbeats stay in the leader's memory;
// with flip, each goroutine alternates its node's health between ready
// and degraded, so that they are changes, which the leader logs: it then
// returns the heartbeats logged per second, as the FSM counted them (the
// baseline of the cheapest replicated write). The nodes end ready.
func (tc *tpCluster) heartbeats(d time.Duration, flip bool) (float64, error) {
	var beats atomic.Int64
	before, err := tc.scrape()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for w := range tc.clients {
		ac, node := tc.agents[w%len(tc.agents)], cluster.NodeID(fakeNode(w%len(tc.agents)))
		wg.Go(func() {
			h := cluster.Health{State: cluster.NodeReady}
			for i := 0; ctx.Err() == nil; i++ {
				if flip && i%2 == 1 {
					h = cluster.Health{State: cluster.NodeDegraded, Reasons: []string{"bench: flipping health"}}
				} else {
					h = cluster.Health{State: cluster.NodeReady}
				}
				if _, err := ac.Heartbeat(ctx, cluster.Heartbeat{Node: node, Health: h}); err == nil {
					beats.Add(1)
				}
			}
		})
	}
	wg.Wait()
	for i, ac := range tc.agents {
		if _, err := ac.Heartbeat(context.Background(), cluster.Heartbeat{Node: cluster.NodeID(fakeNode(i)), Health: cluster.Health{State: cluster.NodeReady}}); err != nil {
			return 0, err
		}
	}
	if !flip {
		return float64(beats.Load()) / d.Seconds(), nil
	}
	after, err := tc.scrape()
	if err != nil {
		return 0, err
	}
	return (after.items["heartbeat"] - before.items["heartbeat"]) / d.Seconds(), nil
}

// steps submits n steps from clients goroutines as the operator and waits
// until the fake agents reported every accepted one exited (each report
// acknowledged once committed), then checks every step (lifeCheck).
func (tc *tpCluster) steps(n int, r *tpResult) error {
	ctx := context.Background()
	before, err := tc.scrape()
	if err != nil {
		return err
	}
	exitedBefore := tc.exited()
	cpuBefore, err := tc.cpu()
	if err != nil {
		return err
	}
	start := time.Now()
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range n {
			next <- i
		}
	}()
	var wg sync.WaitGroup
	var failed atomic.Int64
	accepted := make([]bool, n)
	for range tc.clients {
		wg.Go(func() {
			for i := range next {
				if _, err := tc.op.SubmitStep(ctx, api.StepRequest{ID: stepID(i), Image: "base", CPU: 0.01, MemoryBytes: 16 << 20, Args: []string{"true"}}); err != nil {
					failed.Add(1)
					continue
				}
				accepted[i] = true
			}
		})
	}
	wg.Wait()
	submitted := time.Since(start)
	want := n - int(failed.Load())
	// A submission that failed may still have committed, and its step
	// run: the count is a cheap first test, then every accepted step
	// must be seen exited (else the check below would read the state
	// while steps still run).
	for tc.exited()-exitedBefore < want || !tc.allExited(accepted) {
		if time.Since(start) > 10*time.Minute {
			break // the check below counts what is missing
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cpuAfter, err := tc.cpu()
	if err != nil {
		return err
	}
	r.cpu = cpuTimes{members: cpuAfter.members - cpuBefore.members, bench: cpuAfter.bench - cpuBefore.bench}
	after, err := tc.scrape()
	if err != nil {
		return err
	}
	r.submitPerSec = float64(n) / submitted.Seconds()
	r.stepsPerSec = float64(tc.exited()-exitedBefore) / elapsed.Seconds()
	r.failed = failed.Load()
	r.entries, r.items = delta(after.entries, before.entries), delta(after.items, before.items)
	r.check, err = tc.check(ctx, accepted)
	return err
}

// allExited reports whether a fake agent reported every accepted step
// exited.
func (tc *tpCluster) allExited(accepted []bool) bool {
	for i, ok := range accepted {
		if !ok {
			continue
		}
		id := cluster.StepID(stepID(i))
		if !slices.ContainsFunc(tc.fakes, func(a *agentdtest.FakeAgent) bool { return a.HasExited(id) }) {
			return false
		}
	}
	return true
}

// stepID is the id of the bench's step i.
func stepID(i int) string { return fmt.Sprintf("b-%05d", i) }

// exited is how many steps the fake agents reported exited so far.
func (tc *tpCluster) exited() int {
	n := 0
	for _, a := range tc.fakes {
		n += a.Exited()
	}
	return n
}

// lifeCheck counts the steps whose lifecycle was not exactly one start
// and one exited record of attempt 1: accepted steps with no exited record
// (lost), with more than one start or attempt (duplicated), with no start,
// and steps recorded that were not accepted (a submission that failed
// after it committed).
type lifeCheck struct {
	accepted, lost, duplicated, notStarted, notAccepted int
}

func (c lifeCheck) bad() bool { return c.lost+c.duplicated+c.notStarted > 0 }

// check reads back every step and compares with what the agents started.
func (tc *tpCluster) check(ctx context.Context, accepted []bool) (lifeCheck, error) {
	var c lifeCheck
	starts := map[string]int{}
	multi := map[string]bool{}
	for _, a := range tc.fakes {
		for k, v := range a.Starts() {
			starts[string(k.Step)] += v
			if k.Attempt != 1 {
				multi[string(k.Step)] = true
			}
		}
	}
	steps, err := tc.op.Steps(ctx, client.StepFilter{})
	if err != nil {
		return c, fmt.Errorf("read the steps back: %w", err)
	}
	byID := make(map[string]api.Step, len(steps))
	for _, s := range steps {
		byID[s.ID] = s
	}
	for i, ok := range accepted {
		id := stepID(i)
		s, recorded := byID[id]
		switch {
		case !ok:
			if recorded {
				c.notAccepted++
			}
			continue
		case !recorded || s.State != "exited":
			c.lost++
		case s.Attempts != 1 || starts[id] > 1 || multi[id]:
			c.duplicated++
		case starts[id] == 0:
			c.notStarted++
		}
		c.accepted++
	}
	return c, nil
}

// counts are the FSM's entry and item counters of one member, by type.
type counts struct{ entries, items map[string]float64 }

// scrape reads the FSM's counters off the first member's /metrics.
func (tc *tpCluster) scrape() (counts, error) {
	c := counts{entries: map[string]float64{}, items: map[string]float64{}}
	url := strings.Split(tc.urls, ",")[0] + "/metrics"
	resp, err := tc.metrics.Get(url)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for prefix, m := range map[string]map[string]float64{
			`rodon_scheduler_fsm_entries_total{type="`: c.entries, `rodon_scheduler_fsm_items_total{type="`: c.items,
		} {
			rest, ok := strings.CutPrefix(line, prefix)
			if !ok {
				continue
			}
			typ, value, ok := strings.Cut(rest, `"} `)
			if !ok {
				return c, fmt.Errorf("%s: cannot parse %q", url, line)
			}
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return c, fmt.Errorf("%s: %q: %w", url, line, err)
			}
			m[typ] = v
		}
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	if len(c.entries) == 0 {
		return c, fmt.Errorf("%s has no rodon_scheduler_fsm_entries_total: the names here and the scheduler's disagree", url)
	}
	return c, nil
}

// delta is after - before, type by type.
func delta(after, before map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v-before[k] != 0 {
			d[k] = v - before[k]
		}
	}
	return d
}

func sum(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// throughput starts a plaintext and a TLS cluster side by side and
// measures them in turn, in the order plaintext, TLS for heartbeats and
// TLS, plaintext for steps, so that a drift of the machine's load during
// the run weighs on both alike.
func throughput(b *strings.Builder, c config, dir string, plain, tlsMode benchtls.Mode) error {
	var pc, tc *tpCluster
	defer func() {
		for _, x := range []*tpCluster{tc, pc} {
			if x != nil {
				x.stop()
			}
		}
	}()
	var err error
	if pc, err = startThroughput(c, dir, plain); err != nil {
		return err
	}
	if tc, err = startThroughput(c, dir, tlsMode); err != nil {
		return err
	}
	var p, t tpResult
	for _, m := range []struct {
		tc   *tpCluster
		r    *tpResult
		flip bool
	}{{pc, &p, false}, {tc, &t, false}, {pc, &p, true}, {tc, &t, true}} {
		v, err := m.tc.heartbeats(3*time.Second, m.flip)
		if err != nil {
			return fmt.Errorf("%s: heartbeats: %w", m.tc.mode, err)
		}
		if m.flip {
			m.r.beatWritesPerSec = v
		} else {
			m.r.beatsPerSec = v
		}
	}
	if err := tc.steps(c.steps, &t); err != nil {
		return fmt.Errorf("%s: %w", tlsMode, err)
	}
	if err := pc.steps(c.steps, &p); err != nil {
		return fmt.Errorf("%s: %w", plain, err)
	}
	n := float64(c.steps)
	fmt.Fprintf(b, "Scheduler throughput, 3 members on loopback, %d fake agents, %d steps submitted by %d clients; "+
		"a plaintext and a mutual-TLS cluster up side by side, measured in turn (heartbeats for 3 s each: plaintext, then TLS, unchanged then flipping health; steps: TLS, then plaintext):\n\n",
		c.agents, c.steps, c.clients)
	fmt.Fprintf(b, "| measure | plaintext | mutual TLS | TLS / plaintext |\n|---|---|---|---|\n")
	row := func(what, format string, pv, tv float64, bold bool) {
		r := ratio(tv, pv)
		if bold {
			r = "**" + r + "**"
		}
		fmt.Fprintf(b, "| %s | "+format+" | "+format+" | %s |\n", what, pv, tv, r)
	}
	row(fmt.Sprintf("heartbeats answered per second, unchanged (%d clients; in the leader's memory, no Raft write)", c.clients), "%.0f", p.beatsPerSec, t.beatsPerSec, false)
	row(fmt.Sprintf("baseline: heartbeat writes committed per second (%d clients, each heartbeat a change of health)", c.clients), "%.0f", p.beatWritesPerSec, t.beatWritesPerSec, true)
	row("steps submitted per second", "%.0f", p.submitPerSec, t.submitPerSec, false)
	row("**whole step lifecycles committed per second** (submit, place, running, exit)", "%.0f", p.stepsPerSec, t.stepsPerSec, true)
	row("ratio: lifecycles per heartbeat write", "%.2f", p.stepsPerSec/p.beatWritesPerSec, t.stepsPerSec/t.beatWritesPerSec, false)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	row("CPU per lifecycle, the 3 members together (ms; hardly depends on the machine's other load)", "%.3f", ms(p.cpu.members), ms(t.cpu.members), false)
	row("CPU per lifecycle, the bench's process (clients and fake agents; ms)", "%.3f", ms(p.cpu.bench), ms(t.cpu.bench), false)
	row("Raft entries per lifecycle", "%.3f", sum(p.entries)/n, sum(t.entries)/n, false)
	row("commands (batch items and single entries) per entry", "%.1f", sum(p.items)/sum(p.entries), sum(t.items)/sum(t.entries), false)
	row("batch entries per lifecycle (batch and binary_batch)", "%.3f", (p.entries["batch"]+p.entries["binary_batch"])/n, (t.entries["batch"]+t.entries["binary_batch"])/n, false)
	fmt.Fprintf(b, "| failed submissions | %d | %d | |\n", p.failed, t.failed)
	fmt.Fprintf(b, "| check: accepted steps | %d | %d | |\n", p.check.accepted, t.check.accepted)
	fmt.Fprintf(b, "| check: lost (accepted, no exited record) | %d | %d | |\n", p.check.lost, t.check.lost)
	fmt.Fprintf(b, "| check: duplicated (attempts ≠ 1 or started more than once) | %d | %d | |\n", p.check.duplicated, t.check.duplicated)
	fmt.Fprintf(b, "| check: exited but never started | %d | %d | |\n", p.check.notStarted, t.check.notStarted)
	fmt.Fprintf(b, "| recorded though the submission failed | %d | %d | |\n\n", p.check.notAccepted, t.check.notAccepted)
	fmt.Fprintf(b, "Commands by type during the steps (plaintext): %s.\n\n", fmtCounts(p.items))
	fmt.Fprintf(b, "Entries by type during the steps (plaintext): %s.\n\n", fmtCounts(p.entries))
	for _, x := range []struct {
		mode benchtls.Mode
		r    tpResult
	}{{plain, p}, {tlsMode, t}} {
		if x.r.check.bad() {
			return fmt.Errorf("%s: %d steps lost, %d duplicated, %d exited without a start", x.mode, x.r.check.lost, x.r.check.duplicated, x.r.check.notStarted)
		}
	}
	if c.minLifecycles > 0 && t.stepsPerSec < c.minLifecycles {
		return fmt.Errorf("%s: %.0f whole step lifecycles per second, want at least %.0f (-min-lifecycles)", tlsMode, t.stepsPerSec, c.minLifecycles)
	}
	return nil
}

// fmtCounts formats counts by type, largest first.
func fmtCounts(m map[string]float64) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Compare(m[b], m[a]) })
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	return strings.Join(out, ", ")
}

// fakeNode is the node id of fake agent i.
func fakeNode(i int) string { return fmt.Sprintf("fake-%d", i) }
