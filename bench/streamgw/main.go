// Command streamgw benchmarks a step's output read through the gateway's
// websocket (GET /v1/steps/{id}/stream, docs/GATEWAY.md) against the same
// output read by `schedctl logs -f`, which asks the scheduler for the
// step's stream-url and reads the node agent's NDJSON stream directly. Both
// are measured in the same run on the same steps:
//
//   - throughput of a finished step (both read its stored log): a step
//     writes -mb MB to stdout as fast as it can; each run reads it both
//     ways one after the other, the order alternating run by run; the
//     result is the ratio of the medians, gateway / direct. A third
//     reader, the agent's NDJSON stream read in this process with the
//     same decoding as the websocket reader, separates the relay's own
//     cost from schedctl's (its process and its stdout pipe);
//   - throughput while the step runs: both readers start at once as soon
//     as the step's id is known and read it concurrently; since the step
//     is the bottleneck, what matters is how far behind its exit each
//     reader gets the exit frame;
//   - first-byte latency: a step sleeps 0.5 s, prints one line and sleeps
//     2 s; both readers are connected as soon as the step's id is known,
//     and the latency is from the step's phases.first_output (the node's
//     time for the line) to the bytes arriving in each reader.
//
// It starts its own fleet on 127.0.0.1 (scheduler serve --bootstrap,
// agentd serve --network none, gateway serve) with all data in a temporary
// directory, and stops and removes it at the end: every step is let end
// and cleaned up before agentd gets SIGTERM, then `agentd cleanup` runs.
// Other containerd users on the machine check for leaks, so hold the lock:
//
//	go build -o bin/ ./cmd/... && flock /tmp/rodon-containerd.lock go run ./bench/streamgw -runs 5 -mb 100 -min-ratio 0.8
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/benchstat"
)

type config struct {
	mb       int
	runs     int
	bin      string
	out      string
	minRatio float64
}

func main() {
	var c config
	flag.IntVar(&c.mb, "mb", 100, "MB (10^6 bytes) of stdout the throughput step writes")
	flag.IntVar(&c.runs, "runs", 5, "runs of each measurement, after one warm-up run")
	flag.StringVar(&c.bin, "bin", "bin", "directory of the scheduler, agentd, gateway and schedctl binaries")
	flag.StringVar(&c.out, "out", "", "also write the markdown report to this file")
	flag.Float64Var(&c.minRatio, "min-ratio", 0, "fail if the gateway's median throughput on a finished step is below this fraction of schedctl's (0: report only)")
	flag.Parse()
	if c.runs < 1 || c.mb < 1 {
		fmt.Fprintln(os.Stderr, "streamgw: -runs and -mb must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	report, err := run(ctx, c)
	stop()
	fmt.Print(report)
	if c.out != "" && report != "" {
		if werr := os.WriteFile(c.out, []byte(report), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "streamgw:", err)
		os.Exit(1)
	}
}

// bench is one benchmark run on one fleet.
type bench struct {
	c  config
	f  *fleet
	gw *gwClient
	ws string

	// runs and steps are every run and step started, to let them end and
	// be cleaned up before agentd stops.
	runs, steps []string
}

func run(ctx context.Context, c config) (report string, err error) {
	f, err := startFleet(ctx, c.bin)
	b := &bench{c: c, f: f}
	defer func() {
		if f == nil {
			return
		}
		b.drain()
		if cerr := f.close(err != nil); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up the fleet: %w", cerr))
		}
	}()
	if err != nil {
		return "", err
	}
	const email = "bench@rodon.local"
	pw, err := f.bootstrap(ctx, email)
	if err != nil {
		return "", err
	}
	if b.gw, err = apiKey(ctx, f.site, email, pw); err != nil {
		return "", err
	}
	var ws struct {
		ID string `json:"id"`
	}
	if err := b.gw.do(ctx, http.MethodPost, "/v1/workspaces", map[string]string{"name": "streamgw"}, &ws); err != nil {
		return "", err
	}
	b.ws = ws.ID

	var tp []throughputSample
	for i := -1; i < c.runs; i++ { // run -1 warms up, not counted
		s, err := b.throughput(ctx, i%2 != 0)
		if err != nil {
			return "", fmt.Errorf("throughput run %d: %w", i+1, err)
		}
		if i >= 0 {
			tp = append(tp, s)
		}
	}
	var fb []firstByteSample
	for i := -1; i < c.runs; i++ {
		s, err := b.firstByte(ctx)
		if err != nil {
			return "", fmt.Errorf("first-byte run %d: %w", i+1, err)
		}
		if i >= 0 {
			fb = append(fb, s)
		}
	}
	report, ratio := render(c, tp, fb)
	if c.minRatio > 0 && ratio < c.minRatio {
		return report, fmt.Errorf("the gateway's median throughput is %.2f of schedctl's, under the limit of %.2f", ratio, c.minRatio)
	}
	return report, nil
}

// startRun starts a one-step run and remembers it for drain.
func (b *bench) startRun(ctx context.Context, script string) (operation, error) {
	op, err := b.gw.startRun(ctx, b.ws, "sh", "-c", script)
	if err != nil {
		return op, err
	}
	b.runs, b.steps = append(b.runs, op.ID), append(b.steps, op.Steps[0].ID)
	return op, nil
}

// endRun waits for run op to end and checks that it succeeded; it returns
// the scheduler's record of its step.
func (b *bench) endRun(ctx context.Context, op operation) (api.Step, error) {
	end, err := b.gw.waitRun(ctx, op.ID)
	if err != nil {
		return api.Step{}, err
	}
	if end.State != "succeeded" {
		return api.Step{}, fmt.Errorf("run %s ended %s: %v", op.ID, end.State, end.Errors)
	}
	return b.f.sched.Step(ctx, op.Steps[0].ID)
}

// drain cancels every run not ended and waits until each step has ended
// and its sandbox is cleaned up (with a fresh context: ctx may be the
// cancelled one), so that agentd stops with nothing running.
func (b *bench) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if b.gw != nil {
		for _, id := range b.runs {
			var op operation
			if b.gw.do(ctx, http.MethodGet, "/v1/runs/"+id, nil, &op) == nil && op.State == "running" {
				b.gw.do(ctx, http.MethodPost, "/v1/runs/"+id+"/cancel", nil, nil)
			}
		}
	}
	for _, id := range b.steps {
		err := waitFor(ctx, time.Minute, "step "+id+" to be cleaned up", func() bool {
			st, err := b.f.sched.Step(ctx, id)
			return err == nil && st.Terminal() && !st.Phases.CleanedUp.IsZero()
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "streamgw:", err)
		}
	}
}

// both runs the gateway reader and `schedctl logs -f` on step id at once.
func (b *bench) both(ctx context.Context, id string) (gw, direct streamResult, err error) {
	var wg sync.WaitGroup
	var gerr, derr error
	wg.Go(func() { gw, gerr = b.gw.readStream(ctx, id) })
	wg.Go(func() { direct, derr = b.f.readDirect(ctx, id) })
	wg.Wait()
	return gw, direct, errors.Join(gerr, derr)
}

// throughputSample is one throughput run: the stored log read each way,
// and the live read of both at once.
type throughputSample struct {
	gwStored, directStored time.Duration // connect to exit frame
	agentStored            time.Duration // the agent's stream read in-process
	gwLive, directLive     time.Duration // step's first output to exit frame
	gwLag, directLag       time.Duration // step's exit to exit frame
	step                   time.Duration // step's first output to its exit
	redials                int
}

func (b *bench) throughput(ctx context.Context, reverse bool) (throughputSample, error) {
	var s throughputSample
	n := int64(b.c.mb) * 1_000_000
	op, err := b.startRun(ctx, fmt.Sprintf(`head -c %d /dev/zero | tr '\0' x`, n))
	if err != nil {
		return s, err
	}
	id := op.Steps[0].ID
	gl, dl, err := b.both(ctx, id)
	if err != nil {
		return s, fmt.Errorf("live read: %w", err)
	}
	st, err := b.endRun(ctx, op)
	if err != nil {
		return s, err
	}
	if err := checkBytes("live", n, gl, dl); err != nil {
		return s, err
	}
	p := st.Phases
	s.gwLive, s.directLive = gl.end.Sub(p.FirstOutput), dl.end.Sub(p.FirstOutput)
	s.gwLag, s.directLag = gl.end.Sub(p.Exited), dl.end.Sub(p.Exited)
	s.step = p.Exited.Sub(p.FirstOutput)
	s.redials = gl.redials

	var gs, ds, as streamResult
	readGW := func() error { gs, err = b.gw.readStream(ctx, id); return err }
	readDirect := func() error { ds, err = b.f.readDirect(ctx, id); return err }
	readAgent := func() error { as, err = b.f.readAgent(ctx, id); return err }
	order := []func() error{readGW, readDirect, readAgent}
	if reverse {
		slices.Reverse(order)
	}
	for _, read := range order {
		if err := read(); err != nil {
			return s, fmt.Errorf("stored read: %w", err)
		}
	}
	if err := checkBytes("stored", n, gs, ds); err != nil {
		return s, err
	}
	if as.stdout != n {
		return s, fmt.Errorf("stored read: the agent's stream gave %d bytes of stdout, want %d", as.stdout, n)
	}
	s.gwStored, s.directStored, s.agentStored = gs.end.Sub(gs.start), ds.end.Sub(ds.start), as.end.Sub(as.start)
	return s, nil
}

func checkBytes(what string, want int64, gw, direct streamResult) error {
	if gw.stdout != want || direct.stdout != want || gw.exit == nil || gw.exit.StdoutBytes != want {
		return fmt.Errorf("%s read: gateway got %d bytes of stdout, schedctl %d, want %d", what, gw.stdout, direct.stdout, want)
	}
	return nil
}

// firstByteSample is one first-byte run.
type firstByteSample struct {
	gw, direct time.Duration // first_output to the bytes in the reader
	// lateConnect: the gateway's websocket was not open before the line.
	lateConnect bool
	redials     int
}

const firstByteLine = "first-byte\n"

func (b *bench) firstByte(ctx context.Context) (firstByteSample, error) {
	var s firstByteSample
	op, err := b.startRun(ctx, "sleep 0.5; echo first-byte; sleep 2")
	if err != nil {
		return s, err
	}
	gr, dr, err := b.both(ctx, op.Steps[0].ID)
	if err != nil {
		return s, err
	}
	st, err := b.endRun(ctx, op)
	if err != nil {
		return s, err
	}
	if err := checkBytes("first-byte", int64(len(firstByteLine)), gr, dr); err != nil {
		return s, err
	}
	ref := st.Phases.FirstOutput
	if ref.IsZero() {
		return s, fmt.Errorf("step %s has no first_output phase", st.ID)
	}
	s.gw, s.direct = gr.first.Sub(ref), dr.first.Sub(ref)
	s.lateConnect = !gr.connected.Before(ref)
	s.redials = gr.redials
	return s, nil
}

func render(c config, tp []throughputSample, fb []firstByteSample) (string, float64) {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "### Step output: gateway websocket vs `schedctl logs -f` (%s, host %s)\n\n", time.Now().UTC().Format(time.RFC3339), host)
	fmt.Fprintf(&b, "One scheduler member, one `agentd serve --network none` and one gateway on 127.0.0.1; %d runs of each measurement after one warm-up run. "+
		"Throughput step: `head -c %d /dev/zero | tr '\\0' x` in `base` (%d MB of stdout).\n\n", c.runs, int64(c.mb)*1_000_000, c.mb)

	mbps := func(d time.Duration) string { return fmt.Sprintf("%.0f MB/s", float64(c.mb)/d.Seconds()) }
	col := func(f func(throughputSample) time.Duration) []time.Duration {
		var out []time.Duration
		for _, s := range tp {
			out = append(out, f(s))
		}
		return out
	}
	gs, ds := col(func(s throughputSample) time.Duration { return s.gwStored }), col(func(s throughputSample) time.Duration { return s.directStored })
	ratio := float64(benchstat.Median(ds)) / float64(benchstat.Median(gs))
	fmt.Fprintf(&b, "Throughput of a finished step's stored log, each run reading the same step each way, one after the other, the order reversed every other run "+
		"(from starting the reader to the exit frame, connection set-up and decoding of every frame included):\n\n")
	fmt.Fprintf(&b, "| reader | median | slowest | fastest |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| `schedctl logs -f` (agent's NDJSON stream, direct) | %s | %s | %s |\n", mbps(benchstat.Median(ds)), mbps(benchstat.Quantile(ds, 1)), mbps(benchstat.Quantile(ds, 0)))
	fmt.Fprintf(&b, "| gateway websocket, `from=0` | %s | %s | %s |\n", mbps(benchstat.Median(gs)), mbps(benchstat.Quantile(gs, 1)), mbps(benchstat.Quantile(gs, 0)))
	fmt.Fprintf(&b, "| **ratio of medians, gateway / direct** | **%.2f** | | |\n", ratio)
	as := col(func(s throughputSample) time.Duration { return s.agentStored })
	fmt.Fprintf(&b, "| the agent's NDJSON stream read in this process (no schedctl process, no stdout pipe) | %s | %s | %s |\n",
		mbps(benchstat.Median(as)), mbps(benchstat.Quantile(as, 1)), mbps(benchstat.Quantile(as, 0)))
	fmt.Fprintf(&b, "| ratio of medians, gateway / agent's stream in this process (the relay's own cost) | %.2f | | |\n\n",
		float64(benchstat.Median(as))/float64(benchstat.Median(gs)))

	gl, dl := col(func(s throughputSample) time.Duration { return s.gwLive }), col(func(s throughputSample) time.Duration { return s.directLive })
	gg, dg := col(func(s throughputSample) time.Duration { return s.gwLag }), col(func(s throughputSample) time.Duration { return s.directLag })
	step := col(func(s throughputSample) time.Duration { return s.step })
	fmt.Fprintf(&b, "While the step runs: both readers started at once as soon as the step's id is known, reading concurrently "+
		"(rate from the step's first output to the exit frame; lag from the step's exit, phases.exited, to the exit frame):\n\n")
	fmt.Fprintf(&b, "| reader | median rate | median lag after the step's exit | slowest lag |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| the step itself (first output to exit) | %s | | |\n", mbps(benchstat.Median(step)))
	fmt.Fprintf(&b, "| `schedctl logs -f` | %s | %s | %s |\n", mbps(benchstat.Median(dl)), benchstat.MS(benchstat.Median(dg)), benchstat.MS(benchstat.Quantile(dg, 1)))
	fmt.Fprintf(&b, "| gateway websocket | %s | %s | %s |\n", mbps(benchstat.Median(gl)), benchstat.MS(benchstat.Median(gg)), benchstat.MS(benchstat.Quantile(gg, 1)))
	fmt.Fprintf(&b, "| ratio of median rates, gateway / direct | %.2f | | |\n\n", float64(benchstat.Median(dl))/float64(benchstat.Median(gl)))

	var fg, fd []time.Duration
	late, redials := 0, 0
	for _, s := range fb {
		fg, fd = append(fg, s.gw), append(fd, s.direct)
		if s.lateConnect {
			late++
		}
		redials += s.redials
	}
	for _, s := range tp {
		redials += s.redials
	}
	fmt.Fprintf(&b, "First byte: a step runs `sleep 0.5; echo first-byte; sleep 2`; both readers start as soon as its id is known; "+
		"latency from the step's phases.first_output (the node's time for the line) to the bytes arriving in the reader:\n\n")
	fmt.Fprintf(&b, "| reader | median | slowest |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| `schedctl logs -f` | %s | %s |\n", benchstat.MS(benchstat.Median(fd)), benchstat.MS(benchstat.Quantile(fd, 1)))
	fmt.Fprintf(&b, "| gateway websocket | %s | %s |\n", benchstat.MS(benchstat.Median(fg)), benchstat.MS(benchstat.Quantile(fg, 1)))
	fmt.Fprintf(&b, "| **difference of medians, gateway − direct** | **%+.1f ms** | |\n\n", float64(benchstat.Median(fg)-benchstat.Median(fd))/float64(time.Millisecond))
	fmt.Fprintf(&b, "Gateway websocket opened after the line was written: %d of %d first-byte runs. "+
		"Websockets closed 4404 before any frame and opened again (step placed, its log not open yet): %d.\n\n", late, len(fb), redials)
	fmt.Fprintf(&b, "Command: `go build -o bin/ ./cmd/... && flock /tmp/rodon-containerd.lock go run ./bench/streamgw %s`\n", strings.Join(os.Args[1:], " "))
	return b.String(), ratio
}
