// Command density measures the idle memory of a warm pool's sandboxes
// (issue 14, Done 5): how much RSS and PSS each sandbox waiting for a step
// costs the host, split by process (containerd's shim, runsc's sandbox and
// gofer, and a `runsc wait` where one runs: the shim waits itself unless
// it hands a wait over to runsc), and each PSS split into file pages (the
// binaries, shared by every sandbox) and the rest (each sandbox's own).
//
// It starts one fleet on 127.0.0.1 (internal/benchfleet: one scheduler
// member, one `agentd serve --network none --warm-pool-memory SIZE`, one
// gateway, mutual TLS), teaches the pool a demand of -n sandboxes with a
// burst of -n steps (`true`) submitted at once (the pool keeps as many
// ready as the most claims it saw in a second, within its budget), waits
// until the pool has refilled and then -settle more, and reads
// /proc/PID/smaps_rollup of every process of every ready pooled
// sandbox: those whose command line names the sandbox's container id (the
// shim's -id, runsc's container argument and bundle path) and their
// descendants.
//
// Usage (as root, containerd running, after bundles/build):
//
//	go build -o bin/ ./cmd/... && flock /tmp/rodon-host.lock go run ./bench/density -n 10 -out docs/bench-density-latest.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/benchfleet"
)

type config struct {
	n          int
	bin        string
	address    string
	poolMemory string
	settle     time.Duration
	maxRSS     float64 // MB per sandbox, 0: report only
	out        string
}

// labelPool and labelStep are agentd's container labels (agentd/runtime.go,
// agentd/pool_claim.go): a pooled sandbox has the first and not the second.
const (
	labelPool = "rodon.pool"
	labelStep = "rodon.step"
	namespace = "rodon"
)

func main() {
	var c config
	flag.IntVar(&c.n, "n", 10, "pooled sandboxes to measure (the size of the teaching burst)")
	flag.StringVar(&c.bin, "bin", "bin", "directory of the scheduler, agentd and gateway binaries")
	flag.StringVar(&c.address, "address", "/run/rodon/containerd/containerd.sock", "containerd socket")
	flag.StringVar(&c.poolMemory, "warm-pool-memory", "4GiB", "the node's agentd serve --warm-pool-memory")
	flag.DurationVar(&c.settle, "settle", 10*time.Second, "idle time after the pool is full, before reading memory")
	flag.Float64Var(&c.maxRSS, "max-rss", 0, "fail if the mean RSS per pooled sandbox is over this many MB (0: report only)")
	flag.StringVar(&c.out, "out", "", "also write the markdown report to this file")
	flag.Parse()
	report, err := run(context.Background(), c)
	os.Exit(benchfleet.Finish("density", c.out, report, err))
}

func run(ctx context.Context, c config) (report string, err error) {
	if c.n < 1 {
		return "", fmt.Errorf("-n %d: want at least 1", c.n)
	}
	o := benchfleet.Options{Prefix: "density", AgentArgs: []string{"--warm-pool-memory", c.poolMemory}}
	mode, _, remove, err := benchfleet.Certificates(c.bin, o)
	defer remove()
	if err != nil {
		return "", err
	}
	f, err := benchfleet.Start(ctx, c.bin, mode, o)
	var steps []string
	if f != nil {
		defer func() {
			awaitCleanup(ctx, f, steps)
			if cerr := f.Close(err != nil); cerr != nil {
				err = errors.Join(err, fmt.Errorf("clean up the fleet: %w", cerr))
			}
		}()
	}
	if err != nil {
		return "", fmt.Errorf("start the fleet: %w", err)
	}
	cc, err := containerd.New(c.address, containerd.WithDefaultNamespace(namespace))
	if err != nil {
		return "", err
	}
	defer cc.Close()

	steps, err = burst(ctx, f, c.n)
	if err != nil {
		return "", fmt.Errorf("teaching burst: %w", err)
	}
	ids, err := awaitPool(ctx, cc, c.n)
	if err != nil {
		return "", err
	}
	time.Sleep(c.settle)
	if ids, err = pooled(ctx, cc); err != nil {
		return "", err
	}
	procs, err := readProcs()
	if err != nil {
		return "", err
	}
	var sbs []sandboxMem
	for _, id := range ids {
		m := measure(procs, id)
		if len(m.byKind) == 0 {
			return "", fmt.Errorf("pooled sandbox %s: no process names it", id)
		}
		sbs = append(sbs, m)
	}
	return render(c, sbs)
}

// burst submits n steps at once and waits for all of them to end
// (exited 0).
func burst(ctx context.Context, f *benchfleet.Fleet, n int) ([]string, error) {
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ids[i] = fmt.Sprintf("density-%d-%d", os.Getpid(), i)
		wg.Go(func() {
			req := api.StepRequest{ID: ids[i], Image: "base", Args: []string{"true"}, CPU: 0.01, MemoryBytes: 32 << 20}
			if _, err := f.Sched.SubmitStep(ctx, req); err != nil {
				errs[i] = err
				return
			}
			var index uint64
			deadline := time.Now().Add(5 * time.Minute)
			for time.Now().Before(deadline) {
				st, err := f.Sched.WaitStep(ctx, ids[i], index, 30*time.Second)
				if err != nil {
					errs[i] = err
					return
				}
				if st.Terminal() {
					if st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 0 {
						errs[i] = fmt.Errorf("step %s ended %s", ids[i], st.State)
					}
					return
				}
				index = st.ModifyIndex
			}
			errs[i] = fmt.Errorf("step %s: not ended within 5 minutes", ids[i])
		})
	}
	wg.Wait()
	return ids, errors.Join(errs...)
}

// awaitPool waits until n sandboxes are pooled (ready, no step), or until
// their number has not grown for 30 s (at most 5 minutes): what the pool
// keeps is then what is measured, and the report says how many.
func awaitPool(ctx context.Context, cc *containerd.Client, n int) ([]string, error) {
	var ids []string
	last, since := -1, time.Now()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		var err error
		if ids, err = pooled(ctx, cc); err != nil {
			return nil, err
		}
		if len(ids) >= n {
			return ids, nil
		}
		if len(ids) != last {
			last, since = len(ids), time.Now()
		} else if len(ids) > 0 && time.Since(since) > 30*time.Second {
			return ids, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(ids) == 0 {
		return nil, errors.New("no pooled sandbox after 5 minutes")
	}
	return ids, nil
}

// pooled lists the containers of pooled sandboxes that wait for a step
// and whose task runs.
func pooled(ctx context.Context, cc *containerd.Client) ([]string, error) {
	cs, err := cc.Containers(ctx, "labels.\""+labelPool+"\"")
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, ctr := range cs {
		labels, err := ctr.Labels(ctx)
		if err != nil {
			continue
		}
		if _, claimed := labels[labelStep]; claimed {
			continue
		}
		t, err := ctr.Task(ctx, nil)
		if err != nil {
			continue
		}
		if st, err := t.Status(ctx); err != nil || st.Status != containerd.Running {
			continue
		}
		ids = append(ids, ctr.ID())
	}
	sort.Strings(ids)
	return ids, nil
}

// proc is one host process.
type proc struct {
	pid, ppid int
	comm      string
	cmdline   string
	mem       mem
}

// mem is what smaps_rollup says of a process, or a sum of them, in kB:
// Rss, Pss, and Pss split into file pages (Pss_File: the shim's and
// runsc's binaries, shared by every sandbox) and the rest (Pss_Anon and
// Pss_Shmem: heaps, stacks and the sentry's memory file, each sandbox's
// own).
type mem struct {
	rss, pss, pssFile, pssOwn int64
}

func (m mem) add(o mem) mem {
	return mem{m.rss + o.rss, m.pss + o.pss, m.pssFile + o.pssFile, m.pssOwn + o.pssOwn}
}

func readProcs() (map[int]*proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int]*proc{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		p := &proc{pid: pid, ppid: ppid, comm: s[strings.IndexByte(s, '(')+1 : i]}
		if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
			p.cmdline = strings.ReplaceAll(string(b), "\x00", " ")
		}
		if b, err := os.ReadFile(filepath.Join(dir, "smaps_rollup")); err == nil {
			for line := range strings.Lines(string(b)) {
				f := strings.Fields(line)
				if len(f) < 2 {
					continue
				}
				v, _ := strconv.ParseInt(f[1], 10, 64)
				switch f[0] {
				case "Rss:":
					p.mem.rss = v
				case "Pss:":
					p.mem.pss = v
				case "Pss_File:":
					p.mem.pssFile = v
				case "Pss_Anon:", "Pss_Shmem:":
					p.mem.pssOwn += v
				}
			}
		}
		out[pid] = p
	}
	return out, nil
}

// sandboxMem is one pooled sandbox's processes, summed by kind.
type sandboxMem struct {
	id     string
	byKind map[string]mem
	all    mem
}

// measure sums the processes that name id on their command line and
// their descendants.
func measure(procs map[int]*proc, id string) sandboxMem {
	m := sandboxMem{id: id, byKind: map[string]mem{}}
	in := map[int]bool{}
	for pid, p := range procs {
		if strings.Contains(p.cmdline, id) {
			in[pid] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for pid, p := range procs {
			if !in[pid] && in[p.ppid] {
				in[pid], changed = true, true
			}
		}
	}
	for pid := range in {
		p := procs[pid]
		k := kind(p)
		m.byKind[k] = m.byKind[k].add(p.mem)
		m.all = m.all.add(p.mem)
	}
	return m
}

// kind names a sandbox's process for the report.
func kind(p *proc) string {
	switch {
	case strings.HasPrefix(p.comm, "containerd-shim"):
		return "shim"
	case p.comm == "runsc-sandbox" || strings.Contains(p.cmdline, " boot "):
		return "runsc sandbox"
	case p.comm == "runsc-gofer" || strings.Contains(p.cmdline, " gofer "):
		return "runsc gofer"
	case strings.Contains(p.cmdline, " wait "):
		return "runsc wait"
	case p.comm == "exe" && p.cmdline == "":
		// The sandbox's children with no command line: the stub
		// processes of gVisor's systrap platform, one per address space.
		return "runsc sandbox stubs (systrap)"
	default:
		return p.comm
	}
}

func mb(kb int64) float64 { return float64(kb) / 1024 }

func render(c config, sbs []sandboxMem) (string, error) {
	var b strings.Builder
	host, _ := os.Hostname()
	kinds := map[string]bool{}
	var all mem
	for _, s := range sbs {
		all = all.add(s.all)
		for k := range s.byKind {
			kinds[k] = true
		}
	}
	n := int64(len(sbs))
	fmt.Fprintf(&b, "### Idle memory per pooled sandbox (%s, host %s)\n\n", time.Now().UTC().Format(time.RFC3339), host)
	fmt.Fprintf(&b, "One fleet on 127.0.0.1 (mutual TLS; `agentd serve --network none --warm-pool-memory %s`); a burst of %d `true` steps taught the pool the demand; "+
		"%d pooled sandboxes were ready and idle for %s when measured (smaps_rollup of every process naming the sandbox and its descendants). MB = 2^20 bytes.\n\n",
		c.poolMemory, c.n, n, c.settle)
	fmt.Fprintf(&b, "| process | RSS per sandbox (mean) | PSS per sandbox (mean) | of the PSS: file pages (binaries, shared) | of the PSS: anonymous and shared memory (its own) |\n|---|---|---|---|---|\n")
	var names []string
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	row := func(name, em string, m mem) {
		fmt.Fprintf(&b, "| %[1]s%[2]s%[1]s | %[1]s%.1[3]f MB%[1]s | %[1]s%.1[4]f MB%[1]s | %[1]s%.1[5]f MB%[1]s | %[1]s%.1[6]f MB%[1]s |\n",
			em, name, mb(m.rss/n), mb(m.pss/n), mb(m.pssFile/n), mb(m.pssOwn/n))
	}
	for _, k := range names {
		var m mem
		for _, s := range sbs {
			m = m.add(s.byKind[k])
		}
		row(k, "", m)
	}
	row("whole sandbox", "**", all)
	fmt.Fprintf(&b, "\nBefore the pool (RUNTIME-NOTES.md, an idle pod sandbox): about 103 MB RSS, 49 MB PSS. Goal: at most 60 MB RSS.\n")
	fmt.Fprintf(&b, "\nRSS counts a page once for every process that maps it; PSS divides it among them, so PSS sums to what the sandboxes hold together. "+
		"Its file pages are mostly the runsc and shim binaries, shared by every sandbox and fewer per sandbox the more there are; "+
		"the rest (anonymous memory and the sentry's memory file) is each sandbox's own, about what one more idle sandbox adds.\n")
	if c.maxRSS > 0 && mb(all.rss/n) > c.maxRSS {
		return b.String(), fmt.Errorf("mean RSS per pooled sandbox %.1f MB, over the limit of %.1f MB", mb(all.rss/n), c.maxRSS)
	}
	return b.String(), nil
}

// awaitCleanup waits (at most a minute) until the steps run have been
// cleaned up, so that Close finds no sandbox of a step.
func awaitCleanup(ctx context.Context, f *benchfleet.Fleet, ids []string) {
	deadline := time.Now().Add(time.Minute)
	for _, id := range ids {
		for time.Now().Before(deadline) {
			st, err := f.Sched.Step(ctx, id)
			if err != nil || !st.Phases.CleanedUp.IsZero() {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
