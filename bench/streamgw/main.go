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
// Every measurement is taken on two fleets in the same run, up side by
// side on 127.0.0.1, each one `scheduler serve --bootstrap`, one `agentd
// serve --network none` and one `gateway serve`: one with mutual TLS
// between every component (a cluster CA made in a temporary directory; the
// gateway's public listener on HTTPS with a certificate of that CA) and
// one in plaintext (--plaintext everywhere), the baseline; which fleet is
// measured first alternates run by run. The report gives both and their
// ratios; -min-ratio applies to the TLS fleet. All data is in temporary
// directories, removed at the end: every step is let end and cleaned up
// before agentd gets SIGTERM, then `agentd cleanup` runs for each node.
// Other containerd users on the machine check for leaks, so hold the lock:
//
//	go build -o bin/ ./cmd/... && flock /tmp/rodon-host.lock go run ./bench/streamgw -runs 5 -mb 100 -min-ratio 0.8
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
	"sync"
	"syscall"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/benchfleet"
	"github.com/rodon-compute/rodon/internal/benchtls"
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
	flag.Float64Var(&c.minRatio, "min-ratio", 0, "fail if, with mutual TLS, the gateway's median throughput on a finished step is below this fraction of schedctl's (0: report only)")
	flag.Parse()
	if c.runs < 1 || c.mb < 1 {
		fmt.Fprintln(os.Stderr, "streamgw: -runs and -mb must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	report, err := run(ctx, c)
	stop()
	os.Exit(benchfleet.Finish("streamgw", c.out, report, err))
}

// bench is one benchmark run on one fleet.
type bench struct {
	c  config
	f  *benchfleet.Fleet
	gw *benchfleet.Client
	ws string

	// runs and steps are every run and step started, to let them end and
	// be cleaned up before agentd stops.
	runs, steps []string

	tp []throughputSample
	fb []firstByteSample
}

// fleetOptions name the fleets' directories and nodes streamgw-PID-MODE.
var fleetOptions = benchfleet.Options{Prefix: "streamgw"}

// modes are the two fleets' modes, in the order of bench slices:
// plaintext (the baseline), then mutual TLS.
const (
	plainIdx = iota
	tlsIdx
)

func run(ctx context.Context, c config) (report string, err error) {
	tlsMode, plain, remove, err := benchfleet.Certificates(c.bin, fleetOptions)
	defer remove()
	if err != nil {
		return "", err
	}
	var bs []*bench
	defer func() {
		for i := len(bs) - 1; i >= 0; i-- {
			b := bs[i]
			b.drain()
			if cerr := b.f.Close(err != nil); cerr != nil {
				err = errors.Join(err, fmt.Errorf("clean up the %s fleet: %w", b.f.Mode, cerr))
			}
		}
	}()
	for _, mode := range []benchtls.Mode{plain, tlsMode} {
		f, err := benchfleet.Start(ctx, c.bin, mode, fleetOptions)
		if f != nil {
			bs = append(bs, &bench{c: c, f: f})
		}
		if err != nil {
			return "", fmt.Errorf("start the %s fleet: %w", mode, err)
		}
		if err := bs[len(bs)-1].signIn(ctx); err != nil {
			return "", fmt.Errorf("%s fleet: %w", mode, err)
		}
	}

	start := time.Now()
	// Each run measures both fleets, which goes first alternating; run -1
	// warms up, not counted.
	for i := -1; i < c.runs; i++ {
		for _, b := range inTurn(bs, i) {
			s, err := b.throughput(ctx, i%2 != 0)
			if err != nil {
				return "", fmt.Errorf("%s: throughput run %d: %w", b.f.Mode, i+1, err)
			}
			if i >= 0 {
				b.tp = append(b.tp, s)
			}
		}
	}
	for i := -1; i < c.runs; i++ {
		for _, b := range inTurn(bs, i) {
			s, err := b.firstByte(ctx)
			if err != nil {
				return "", fmt.Errorf("%s: first-byte run %d: %w", b.f.Mode, i+1, err)
			}
			if i >= 0 {
				b.fb = append(b.fb, s)
			}
		}
	}
	report, ratio := render(c, bs, time.Since(start))
	if c.minRatio > 0 && ratio < c.minRatio {
		return report, fmt.Errorf("with mutual TLS, the gateway's median throughput is %.2f of schedctl's, under the limit of %.2f", ratio, c.minRatio)
	}
	return report, nil
}

// inTurn is bs in run i's order: plaintext first in even runs.
func inTurn(bs []*bench, i int) []*bench {
	if i%2 == 0 {
		return bs
	}
	return []*bench{bs[1], bs[0]}
}

// signIn creates the owner with `gateway bootstrap`, signs in, makes an
// admin API key for the rest and a workspace for the runs.
func (b *bench) signIn(ctx context.Context) error {
	var err error
	if b.gw, err = b.f.SignIn(ctx); err != nil {
		return err
	}
	var ws struct {
		ID string `json:"id"`
	}
	if err := b.gw.Do(ctx, http.MethodPost, "/v1/workspaces", map[string]string{"name": "streamgw"}, &ws); err != nil {
		return err
	}
	b.ws = ws.ID
	return nil
}

// startRun starts a one-step run and remembers it for drain.
func (b *bench) startRun(ctx context.Context, script string) (benchfleet.Operation, error) {
	op, err := b.gw.StartRun(ctx, b.ws, "sh", "-c", script)
	if err != nil {
		return op, err
	}
	b.runs, b.steps = append(b.runs, op.ID), append(b.steps, op.Steps[0].ID)
	return op, nil
}

// endRun waits for run op to end and checks that it succeeded; it returns
// the scheduler's record of its step.
func (b *bench) endRun(ctx context.Context, op benchfleet.Operation) (api.Step, error) {
	end, err := b.gw.WaitRun(ctx, op.ID)
	if err != nil {
		return api.Step{}, err
	}
	if end.State != "succeeded" {
		return api.Step{}, fmt.Errorf("run %s ended %s: %v", op.ID, end.State, end.Errors)
	}
	return b.f.Sched.Step(ctx, op.Steps[0].ID)
}

// drain cancels every run not ended and waits until each step has ended
// and its sandbox is cleaned up (with a fresh context: ctx may be the
// cancelled one), so that agentd stops with nothing running.
func (b *bench) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if b.gw != nil {
		for _, id := range b.runs {
			var op benchfleet.Operation
			if b.gw.Do(ctx, http.MethodGet, "/v1/runs/"+id, nil, &op) == nil && op.State == "running" {
				b.gw.Do(ctx, http.MethodPost, "/v1/runs/"+id+"/cancel", nil, nil)
			}
		}
	}
	for _, id := range b.steps {
		err := benchfleet.WaitFor(ctx, time.Minute, "step "+id+" to be cleaned up", func() bool {
			st, err := b.f.Sched.Step(ctx, id)
			return err == nil && st.Terminal() && !st.Phases.CleanedUp.IsZero()
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "streamgw:", err)
		}
	}
}

// both runs the gateway reader and `schedctl logs -f` on step id at once.
func (b *bench) both(ctx context.Context, id string) (gw, direct benchfleet.StreamResult, err error) {
	var wg sync.WaitGroup
	var gerr, derr error
	wg.Go(func() { gw, gerr = b.gw.ReadStream(ctx, id) })
	wg.Go(func() { direct, derr = readDirect(ctx, b.f, id) })
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
	s.gwLive, s.directLive = gl.End.Sub(p.FirstOutput), dl.End.Sub(p.FirstOutput)
	s.gwLag, s.directLag = gl.End.Sub(p.Exited), dl.End.Sub(p.Exited)
	s.step = p.Exited.Sub(p.FirstOutput)
	s.redials = gl.Redials

	var gs, ds, as benchfleet.StreamResult
	readGW := func() error { gs, err = b.gw.ReadStream(ctx, id); return err }
	readDirect := func() error { ds, err = readDirect(ctx, b.f, id); return err }
	readAgent := func() error { as, err = readAgent(ctx, b.f, id); return err }
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
	if as.Stdout != n {
		return s, fmt.Errorf("stored read: the agent's stream gave %d bytes of stdout, want %d", as.Stdout, n)
	}
	s.gwStored, s.directStored, s.agentStored = gs.End.Sub(gs.Start), ds.End.Sub(ds.Start), as.End.Sub(as.Start)
	return s, nil
}

func checkBytes(what string, want int64, gw, direct benchfleet.StreamResult) error {
	if gw.Stdout != want || direct.Stdout != want || gw.Exit == nil || gw.Exit.StdoutBytes != want {
		return fmt.Errorf("%s read: gateway got %d bytes of stdout, schedctl %d, want %d", what, gw.Stdout, direct.Stdout, want)
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
	s.gw, s.direct = gr.First.Sub(ref), dr.First.Sub(ref)
	s.lateConnect = !gr.Connected.Before(ref)
	s.redials = gr.Redials
	return s, nil
}
