// Command steplatency measures the latency of one step, create to exit
// record, through `agentd run -- true`, side by side with plain `ctr run
// --rm` of the same image under the same gVisor runtime. Runs alternate
// between the two so that machine noise hits both alike; the result is a
// ratio of medians measured in the same run, with a per-phase breakdown of
// agentd's runs taken from its exit records.
//
//	go run ./bench/steplatency -n 30 -out docs/bench-latest.md
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

func main() {
	n := flag.Int("n", 30, "runs of each command")
	agentdBin := flag.String("agentd", "bin/agentd", "agentd binary")
	ctrBin := flag.String("ctr", "/opt/rodon/bin/ctr", "ctr binary")
	address := flag.String("address", "/run/rodon/containerd/containerd.sock", "containerd socket")
	image := flag.String("image", "rodon.local/base:latest", "image")
	runtimeType := flag.String("runtime", "io.containerd.rodon.v1", "containerd runtime")
	out := flag.String("out", "", "also write the markdown report to this file")
	flag.Parse()
	if err := run(*n, *agentdBin, *ctrBin, *address, *image, *runtimeType, *out); err != nil {
		fmt.Fprintln(os.Stderr, "steplatency:", err)
		os.Exit(1)
	}
}

func run(n int, agentdBin, ctrBin, address, image, runtimeType, out string) error {
	if n < 3 {
		return fmt.Errorf("-n %d: want at least 3 runs", n)
	}
	tmp, err := os.MkdirTemp("", "steplatency")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var agentdT, ctrT []time.Duration
	var phases [][5]time.Duration // create, start, first byte, exit, delete
	// One warm-up of each, not counted.
	for i := -1; i < n; i++ {
		rec := filepath.Join(tmp, "rec.json")
		d, err := timeCmd(agentdBin, "run", "--containerd", address, "--runtime", runtimeType, "--image", image, "--record", rec, "--", "true")
		if err != nil {
			return fmt.Errorf("agentd run: %w", err)
		}
		var r cluster.ExitRecord
		if err := readJSON(rec, &r); err != nil {
			return err
		}
		// First output from a step that prints, in a separate run.
		d2, err := timeCmd(agentdBin, "run", "--containerd", address, "--runtime", runtimeType, "--image", image, "--record", rec, "--", "echo", "hi")
		if err != nil || d2 <= 0 {
			return fmt.Errorf("agentd run echo: %w", err)
		}
		var re cluster.ExitRecord
		if err := readJSON(rec, &re); err != nil {
			return err
		}
		id := fmt.Sprintf("bench-ctr-%d-%d", os.Getpid(), i+1)
		dc, err := timeCmd(ctrBin, "--address", address, "-n", "rodon", "run", "--rm", "--runtime", runtimeType,
			"--annotation", "io.kubernetes.cri.container-type=sandbox", image, id, "true")
		if err != nil {
			return fmt.Errorf("ctr run: %w", err)
		}
		if i < 0 {
			continue
		}
		agentdT = append(agentdT, d)
		ctrT = append(ctrT, dc)
		p := r.Phases
		phases = append(phases, [5]time.Duration{
			p.Created.Sub(p.Queued), p.Started.Sub(p.Created), re.Phases.FirstOutput.Sub(re.Phases.Started),
			p.Exited.Sub(p.Started), p.CleanedUp.Sub(p.Exited),
		})
	}
	report := render(n, agentdT, ctrT, phases)
	fmt.Print(report)
	if out != "" {
		return os.WriteFile(out, []byte(report), 0o644)
	}
	return nil
}

func timeCmd(name string, args ...string) (time.Duration, error) {
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return d, nil
}

func readJSON(file string, v any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func render(n int, agentdT, ctrT []time.Duration, phases [][5]time.Duration) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "### Step latency: `agentd run -- true` vs `ctr run --rm` (%s, %s, n=%d each, alternating)\n\n", time.Now().UTC().Format(time.RFC3339), host, n)
	fmt.Fprintf(&b, "| command | median | p95 |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| `ctr run --rm` (baseline) | %s | %s |\n", ms(quantile(ctrT, .5)), ms(quantile(ctrT, .95)))
	fmt.Fprintf(&b, "| `agentd run` | %s | %s |\n", ms(quantile(agentdT, .5)), ms(quantile(agentdT, .95)))
	fmt.Fprintf(&b, "| **ratio agentd / ctr** | **%.2f** | %.2f |\n\n",
		float64(quantile(agentdT, .5))/float64(quantile(ctrT, .5)), float64(quantile(agentdT, .95))/float64(quantile(ctrT, .95)))
	names := []string{"create (image lookup, workspace, snapshot, pod start)", "start (exec)", "first byte (`echo hi`)", "exit (start to exit record)", "delete (kill pod, delete, cleanup)"}
	fmt.Fprintf(&b, "agentd phases (median, p95):\n\n| phase | median | p95 |\n|---|---|---|\n")
	for i, name := range names {
		var col []time.Duration
		for _, p := range phases {
			col = append(col, p[i])
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, ms(quantile(col, .5)), ms(quantile(col, .95)))
	}
	return b.String()
}
