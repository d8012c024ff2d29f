package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/scheduler"
	"github.com/rodon-compute/rodon/scheduler/schedulertest"
)

// outputFrames returns the frames of a step's output: chunks alternate
// between the kinds given, numbered from seq.
type chunk struct {
	kind api.FrameKind
	data string
}

func framesOf(chunks []chunk, exit *api.Exit) []api.Frame {
	var fs []api.Frame
	for i, c := range chunks {
		fs = append(fs, api.NewOutputFrame(int64(i+1), c.kind, []byte(c.data), testNow))
	}
	fs = append(fs, api.NewEventFrame(int64(len(fs)+1), api.Event{Time: testNow, Kind: "started", Message: "started"}, testNow))
	if exit != nil {
		fs = append(fs, api.NewExitFrame(int64(len(fs)+1), *exit, testNow))
	}
	return fs
}

// want returns what chunks make of stdout and stderr.
func want(chunks []chunk) (stdout, stderr string) {
	var o, e strings.Builder
	for _, c := range chunks {
		if c.kind == api.KindStdout {
			o.WriteString(c.data)
		} else {
			e.WriteString(c.data)
		}
	}
	return o.String(), e.String()
}

func intp(i int) *int { return &i }

// runFixture is the real scheduler and a fake agent that run a step: it
// is queued until schedctl first asks for its stream, when node n1 (the
// fake agent's address) registers and the step is placed there, with its
// output frames; end, if set, reports the step's end shortly after the
// agent served the exit frame.
type runFixture struct {
	sched *testScheduler
	agent *fakeAgent
	// node is n1's agent, once registered.
	node *schedulertest.Agent
}

// ending is how the node reports a step's end.
type ending func(a *schedulertest.Agent, id string)

// exitWith ends a step with rec.
func exitWith(rec cluster.ExitRecord) ending {
	return func(a *schedulertest.Agent, id string) { a.ExitWith(id, rec) }
}

func newRunFixture(t *testing.T, frames []api.Frame, end ending) *runFixture {
	return newRunFixtureWith(t, nil, frames, end)
}

func newRunFixtureWith(t *testing.T, edit func(*scheduler.Config), frames []api.Frame, end ending) *runFixture {
	f := &runFixture{sched: newScheduler(t, 1, edit), agent: newFakeAgent(t)}
	var once sync.Once
	ready := make(chan struct{})
	f.sched.onStreamURLRefused = func(id string) {
		once.Do(func() {
			f.node = f.sched.Agent(t, "n1", schedulertest.AgentOptions{Address: addrOf(t, f.agent.srv.URL)})
			close(ready)
		})
		f.node.Assigned(id)
		f.agent.add(id, frames...)
	}
	f.agent.onExitServed = func(id string) {
		if end == nil {
			return
		}
		<-ready
		time.AfterFunc(50*time.Millisecond, func() { end(f.node, id) })
	}
	return f
}

func TestRun(t *testing.T) {
	chunks := []chunk{
		{api.KindStdout, "hello\n"},
		{api.KindStderr, "warning: café ☕\n"},
		{api.KindStdout, "binary:\x00\xff\xfe\n"},
		{api.KindStdout, "no newline at the end"},
	}
	for _, tt := range []struct {
		name     string
		end      ending
		wantCode int
		wantErr  string
	}{
		{"exit 0", exitWith(cluster.ExitRecord{State: cluster.StateExited, ExitCode: 0, TerminatedBy: cluster.ByExit}), 0, ""},
		{"exit 3", exitWith(cluster.ExitRecord{State: cluster.StateExited, ExitCode: 3, TerminatedBy: cluster.ByExit}), 3, ""},
		{"oom 137", exitWith(cluster.ExitRecord{State: cluster.StateExited, ExitCode: 137, TerminatedBy: cluster.ByOOM,
			Reason: "memory limit 512Mi reached"}), 137, "memory limit 512Mi reached"},
		{"timeout", exitWith(cluster.ExitRecord{State: cluster.StateExited, ExitCode: 143, TerminatedBy: cluster.ByTimeout,
			Reason: "wall-clock limit 1s reached"}), 143, "timeout"},
		{"failed", exitWith(cluster.ExitRecord{State: cluster.StateFailed, TerminatedBy: cluster.ByPlatform,
			Reason: `image "nope" not found`}), 1, `failed: image "nope" not found`},
		{"lost", func(a *schedulertest.Agent, id string) { a.Lose("stopped answering") }, 1, "not re-run"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The exit frame carries 0 whatever happened: the scheduler's
			// record is the truth schedctl exits with.
			exit := &api.Exit{State: "exited", ExitCode: intp(0), TerminatedBy: "exit"}
			f := newRunFixture(t, framesOf(chunks, exit), tt.end)
			r := schedctl(t, f.sched.url, nil, "run", "--env", "A=1", "--", "sh", "-c", "echo hello")
			wantOut, wantErrOut := want(chunks)
			if r.code != tt.wantCode || r.stdout != wantOut || !strings.HasPrefix(r.stderr, wantErrOut) ||
				!strings.Contains(r.stderr, tt.wantErr) {
				t.Errorf("run = %v; want exit %d, stdout %q, stderr %q then %q", r, tt.wantCode, wantOut, wantErrOut, tt.wantErr)
			}
			if tt.wantErr == "" && r.stderr != wantErrOut {
				t.Errorf("run printed stderr %q, want exactly the step's %q", r.stderr, wantErrOut)
			}
			if f.sched.refusals() == 0 {
				t.Errorf("schedctl never asked for the stream while the step was queued")
			}
			sub := f.sched.submitted()[0]
			if !strings.HasPrefix(sub.ID, "run-") || sub.Image != "base" || sub.CPU != 1 || sub.MemoryBytes != 512<<20 ||
				!cmp.Equal(sub.Args, []string{"sh", "-c", "echo hello"}) || !cmp.Equal(sub.Env, []string{"A=1"}) {
				t.Errorf("submitted %+v; want the defaults (base, 1 cpu, 512m) and the command", sub)
			}
			for _, c := range f.agent.connections() {
				if c.accept != "application/x-ndjson" || c.follow != "1" {
					t.Errorf("stream request %+v; want NDJSON, follow=1", c)
				}
			}
		})
	}
}

func TestRunFlags(t *testing.T) {
	exit := &api.Exit{State: "exited", ExitCode: intp(0), TerminatedBy: "exit"}
	f := newRunFixture(t, framesOf(nil, exit), exitWith(cluster.ExitRecord{State: cluster.StateExited, ExitCode: 0, TerminatedBy: cluster.ByExit}))
	ws := "ws-analysis-1"
	r := schedctl(t, f.sched.url, nil, "run", "--id", "my-step", "--image", "python", "--cpu", "0.5",
		"--memory", "1g", "--timeout", "90s", "--no-internet", "--env", "A=1", "--env", "B=x=y",
		"--workspace", ws, "--workspace-read-only", "--tty", "--idempotent", "--pids", "256", "--workspace-size", "2g", "--output-cap", "128m",
		"--", "python3", "-c", "print(1)")
	if r.code != 0 {
		t.Fatalf("run = %v", r)
	}
	want := api.StepRequest{ID: "my-step", Image: "python", Args: []string{"python3", "-c", "print(1)"},
		Env: []string{"A=1", "B=x=y"}, CPU: 0.5, MemoryBytes: 1 << 30, Timeout: api.Duration(90 * time.Second),
		Workspace: ws, WorkspaceReadOnly: true, NoInternet: true, TTY: true, Idempotent: true, Pids: 256, WorkspaceBytes: 2 << 30, OutputBytes: 128 << 20}
	if diff := cmp.Diff(want, f.sched.submitted()[0]); diff != "" {
		t.Errorf("submitted (-want +got):\n%s", diff)
	}
	if r := schedctl(t, f.sched.url, nil, "run", "--workspace", "/etc", "--", "true"); r.code != exitUsage || !strings.Contains(r.stderr, "--workspace") {
		t.Errorf("run --workspace /etc = %v; want a usage error naming --workspace", r)
	}
	if r := schedctl(t, f.sched.url, nil, "run", "--workspace-read-only", "--", "true"); r.code != exitUsage || !strings.Contains(r.stderr, "--workspace-read-only needs --workspace") {
		t.Errorf("run --workspace-read-only without --workspace = %v; want a usage error naming both", r)
	}
	for _, bad := range [][]string{{"--pids", "-1"}, {"--workspace-size", "lots"}, {"--output-cap", "-1m"}} {
		if r := schedctl(t, f.sched.url, nil, append(append([]string{"run"}, bad...), "--", "true")...); r.code != exitUsage || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("run %s %s = %v; want a usage error naming %s", bad[0], bad[1], r, bad[0])
		}
	}
	if r := schedctl(t, f.sched.url, nil, "run", "--id", "my-step", "--", "true"); r.code != exitError || !strings.Contains(r.stderr, "exists") {
		t.Errorf("run with a used --id = %v; want exit 1, exists", r)
	}
}

// TestStreamResume cuts the agent's stream twice in the middle of a frame
// and replays a frame on resumption: the output must come out whole, each
// byte once.
func TestStreamResume(t *testing.T) {
	var chunks []chunk
	for i := range 12 {
		kind := api.KindStdout
		if i%3 == 2 {
			kind = api.KindStderr
		}
		chunks = append(chunks, chunk{kind, strings.Repeat(string(rune('a'+i)), 100) + "\xff\n"})
	}
	exit := &api.Exit{State: "exited", ExitCode: intp(7), TerminatedBy: "exit"}
	f := newRunFixture(t, framesOf(chunks, exit), exitWith(cluster.ExitRecord{State: cluster.StateExited, ExitCode: 7, TerminatedBy: cluster.ByExit}))
	f.agent.dropConns, f.agent.dropAfter, f.agent.replay = 2, 4, true
	r := schedctl(t, f.sched.url, nil, "run", "--", "gen")
	wantOut, wantErr := want(chunks)
	if r.code != 7 || r.stdout != wantOut || r.stderr != wantErr {
		t.Errorf("run over a stream cut twice = %v;\nwant exit 7, stdout %q, stderr %q", r, wantOut, wantErr)
	}
	var froms []string
	for _, c := range f.agent.connections() {
		froms = append(froms, c.from)
	}
	// Cut after 4 frames (1-4), then after 4 more (4 replayed, 5-7).
	if want := []string{"0", "4", "7"}; !cmp.Equal(froms, want) {
		t.Errorf("stream requests from %q, want %q", froms, want)
	}
}

func TestLogs(t *testing.T) {
	chunks := []chunk{{api.KindStdout, "one\n"}, {api.KindStderr, "two\n"}, {api.KindStdout, "three\xff"}}
	sched, agent := newScheduler(t, 1, nil), newFakeAgent(t)
	n1 := node("n1", addrOf(t, agent.srv.URL))
	n1.Capacity.CPU = 1 // s1 takes it all: q1 waits
	s1 := liveStep("s1", cluster.StateRunning, "n1")
	sched.Restore([]cluster.Node{n1}, []cluster.Step{s1})
	agent.add("s1", framesOf(chunks, nil)...)
	wantOut, wantErr := want(chunks)

	// Without -f: what exists, then the end.
	r := schedctl(t, sched.url, nil, "logs", "s1")
	if r.code != 0 || r.stdout != wantOut || r.stderr != wantErr {
		t.Errorf("logs s1 = %v; want stdout %q, stderr %q", r, wantOut, wantErr)
	}
	if c := agent.connections()[0]; c.follow != "0" || c.from != "0" {
		t.Errorf("logs s1 asked %+v; want from=0 without follow", c)
	}

	// -o json: the frames, one per line.
	r = schedctl(t, sched.url, nil, "logs", "s1", "-o", "json")
	var got []byte
	for l := range strings.Lines(r.stdout) {
		var fr api.Frame
		if err := json.Unmarshal([]byte(l), &fr); err != nil {
			t.Fatalf("logs -o json line %q: %v", l, err)
		}
		if fr.Kind == api.KindStdout {
			b, _ := fr.Output()
			got = append(got, b...)
		}
	}
	if string(got) != wantOut {
		t.Errorf("logs -o json frames carry stdout %q, want %q", got, wantOut)
	}

	// -f: waits for the rest and ends with the exit frame.
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan result)
	go func() { done <- schedctlTo(t, sched.url, nil, stdout, stderr, "logs", "-f", "s1") }()
	stdout.waitFor(t, "three")
	agent.add("s1", api.NewOutputFrame(5, api.KindStdout, []byte(" four\n"), testNow),
		api.NewExitFrame(6, api.Exit{State: "exited", ExitCode: intp(0), TerminatedBy: "exit"}, testNow))
	r = <-done
	if r.code != 0 || r.stdout != wantOut+" four\n" {
		t.Errorf("logs -f s1 = %v; want exit 0 and all of stdout", r)
	}

	// A queued step has no output yet.
	sched.Restore([]cluster.Node{n1}, []cluster.Step{s1, liveStep("q1", cluster.StateQueued, "")})
	if r := schedctl(t, sched.url, nil, "logs", "q1"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "queued") {
		t.Errorf("logs q1 = %v; want exit 0 and a note that it is queued", r)
	}
}

// TestCancelWait checks that "cancel confirmed" is printed only after the
// scheduler's record has confirmed_at, and after "cancel requested".
func TestCancelWait(t *testing.T) {
	f := newScheduler(t, 1, nil)
	a := f.Agent(t, "n1", schedulertest.AgentOptions{})
	if _, err := f.Client().SubmitStep(t.Context(), api.StepRequest{ID: "s1", Image: "base", Args: []string{"sleep", "60"}, CPU: 1, MemoryBytes: 512 << 20}); err != nil {
		t.Fatal(err)
	}
	a.Start("s1")
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan result)
	go func() { done <- schedctlTo(t, f.url, nil, stdout, stderr, "cancel", "s1", "--wait", "20s") }()

	got := stdout.waitFor(t, "cancel requested")
	if got != "cancel requested\n" {
		t.Fatalf("stdout after the request = %q, want only %q", got, "cancel requested\n")
	}
	// The process is killed, the exit recorded: not confirmed yet.
	a.Exit("s1", 143)
	time.Sleep(300 * time.Millisecond)
	if got := stdout.String(); got != "cancel requested\n" {
		t.Fatalf("stdout before confirmed_at = %q, want only %q", got, "cancel requested\n")
	}
	a.ConfirmCancel("s1")
	r := <-done
	if r.code != 0 || r.stdout != "cancel requested\ncancel confirmed\n" {
		t.Errorf("cancel --wait = %v; want exit 0, requested then confirmed", r)
	}
}

func TestCancelOutcomes(t *testing.T) {
	f := newScheduler(t, 1, nil)
	f.Restore([]cluster.Node{node("n1", netip.MustParseAddrPort("127.0.0.1:7300"))}, []cluster.Step{
		stepWith(liveStep("lost1", cluster.StateLost, "n1"), func(s *cluster.Step) { s.TerminatedBy = cluster.ByNodeLost }),
		liveStep("run1", cluster.StateRunning, "n1"),
		stepWith(liveStep("done1", cluster.StateExited, "n1"), func(s *cluster.Step) { s.ExitCode, s.TerminatedBy = intp(0), cluster.ByExit }),
	})
	r := schedctl(t, f.url, nil, "cancel", "lost1", "--wait", "5s")
	if r.code != exitError || r.stdout != "cancel requested\ncancel unverified: node n1 is down: the step's process could not be confirmed gone\n" {
		t.Errorf("cancel --wait of a lost step = %v; want exit 1, requested then unverified", r)
	}
	r = schedctl(t, f.url, nil, "cancel", "run1", "--wait", "300ms")
	if r.code != exitError || r.stdout != "cancel requested\n" || !strings.Contains(r.stderr, "not confirmed within 300ms") {
		t.Errorf("cancel --wait 300ms never confirmed = %v; want exit 1 and a timeout", r)
	}
	r = schedctl(t, f.url, nil, "cancel", "run1")
	if r.code != 0 || r.stdout != "cancel requested\n" {
		t.Errorf("cancel without --wait = %v; want exit 0, requested", r)
	}
	r = schedctl(t, f.url, nil, "cancel", "done1", "--wait", "1s")
	if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "terminal") {
		t.Errorf("cancel of an ended step = %v; want exit 1 and the scheduler's reason", r)
	}
	r = schedctl(t, f.url, nil, "cancel", "run1", "-o", "json")
	var s api.Step
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Cancel == nil {
		t.Errorf("cancel -o json = %v (%v); want the step with its cancel", r, err)
	}
}

// TestRunInterrupt: the first interrupt cancels the step, schedctl waits
// for the confirmed end and exits with the step's code.
func TestRunInterrupt(t *testing.T) {
	f := newRunFixture(t, framesOf([]chunk{{api.KindStdout, "working\n"}}, nil), nil)
	f.sched.onCancel = func(id string) {
		// The node kills the process; its exit and then the confirmation
		// arrive later.
		go func() {
			time.Sleep(50 * time.Millisecond)
			f.agent.add(id, api.NewOutputFrame(3, api.KindStderr, []byte("terminated\n"), testNow),
				api.NewExitFrame(4, api.Exit{State: "cancelled", ExitCode: intp(143), TerminatedBy: "user"}, testNow))
			f.node.Exit(id, 143)
			time.Sleep(200 * time.Millisecond)
			f.node.ConfirmCancel(id)
		}()
	}
	f.agent.onExitServed = nil
	intr, _, done := runUntilWorking(t, f)
	intr <- syscall.SIGINT
	r := <-done
	if r.code != 143 || r.stdout != "working\n" || !strings.Contains(r.stderr, "cancelling step") ||
		!strings.Contains(r.stderr, "terminated\n") || !strings.Contains(r.stderr, "cancel confirmed") {
		t.Errorf("run interrupted = %v; want exit 143 after the confirmed cancel", r)
	}
	if s := f.sched.step(f.sched.submitted()[0].ID); s.Cancel == nil || s.Cancel.ConfirmedAt.IsZero() {
		t.Errorf("step after run returned = %+v; want its cancel confirmed", s)
	}
}

// runUntilWorking runs `schedctl run -- sleep 600` against f with an
// interrupt channel, and returns once the step printed "working".
func runUntilWorking(t *testing.T, f *runFixture) (intr chan os.Signal, stderr *syncBuffer, done chan result) {
	t.Helper()
	intr = make(chan os.Signal, 2)
	stdout := newSyncBuffer()
	stderr = newSyncBuffer()
	done = make(chan result)
	go func() { done <- schedctlTo(t, f.sched.url, intr, stdout, stderr, "run", "--", "sleep", "600") }()
	stdout.waitFor(t, "working\n")
	return intr, stderr, done
}

// TestRunDetach: a second interrupt stops waiting; the cancel stands.
func TestRunDetach(t *testing.T) {
	f := newRunFixture(t, framesOf([]chunk{{api.KindStdout, "working\n"}}, nil), nil)
	intr, stderr, done := runUntilWorking(t, f)
	intr <- syscall.SIGINT
	stderr.waitFor(t, "cancelling step")
	intr <- syscall.SIGINT
	r := <-done
	if r.code != exitInterrupted || !strings.Contains(r.stderr, "stopped waiting") {
		t.Errorf("run interrupted twice = %v; want exit 130", r)
	}
}

func TestRunNeverPlaced(t *testing.T) {
	f := newScheduler(t, 1, nil)
	// The leader expires the step (its queue timeout, shortened).
	f.onStreamURLRefused = func(id string) {
		f.Apply(t.Context(), cluster.Expire{Step: cluster.StepID(id), Reason: "no node could take it within 10m", At: time.Now()})
	}
	r := schedctl(t, f.url, nil, "run", "--", "true")
	if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "expired: no node could take it within 10m") ||
		strings.Contains(r.stderr, "incomplete") {
		t.Errorf("run of a step that expired queued = %v; want exit 1 with the reason", r)
	}
}

func TestFramesByteExact(t *testing.T) {
	// Every byte value, split at awkward places, in both encodings.
	var all bytes.Buffer
	for i := range 256 {
		all.WriteByte(byte(i))
	}
	all.WriteString("é\u2028<>&\"\\")
	data := all.Bytes()
	var chunks []chunk
	for i := 0; i < len(data); i += 37 {
		chunks = append(chunks, chunk{api.KindStdout, string(data[i:min(i+37, len(data))])})
	}
	sched, agent := newScheduler(t, 1, nil), newFakeAgent(t)
	sched.Restore([]cluster.Node{node("n1", addrOf(t, agent.srv.URL))}, []cluster.Step{
		stepWith(liveStep("s1", cluster.StateExited, "n1"), func(s *cluster.Step) { s.ExitCode, s.TerminatedBy = intp(0), cluster.ByExit }),
	})
	agent.add("s1", framesOf(chunks, &api.Exit{State: "exited", ExitCode: intp(0)})...)
	r := schedctl(t, sched.url, nil, "logs", "-f", "s1")
	if r.code != 0 || r.stdout != string(data) {
		t.Errorf("logs -f = exit %d, stdout %q; want %q", r.code, r.stdout, data)
	}
}

// TestRunNodeLost: the node stops answering mid-stream and the scheduler
// declares the step lost; schedctl stops waiting for the stream and exits
// 1 with the reason.
func TestRunNodeLost(t *testing.T) {
	f := newRunFixture(t, framesOf([]chunk{{api.KindStdout, "partial\n"}}, nil), nil)
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan result)
	shortGrace := func(c *cli) { c.stallGrace = 200 * time.Millisecond }
	vars := map[string]string{"RODON_SCHEDULER": f.sched.url, "RODON_TLS_DIR": testPKI().operatorDir}
	go func() { done <- schedctlWith(t, shortGrace, vars, nil, stdout, stderr, "run", "--", "sleep", "600") }()
	stdout.waitFor(t, "partial\n")
	f.node.Lose("stopped answering")
	r := <-done
	if r.code != exitError || r.stdout != "partial\n" || !strings.Contains(r.stderr, "incomplete") ||
		!strings.Contains(r.stderr, "lost: node n1 lost (stopped answering) with attempt 1 placed; not re-run") {
		t.Errorf("run on a lost node = %v; want exit 1, the output so far and the reason", r)
	}
}

func TestRunJSON(t *testing.T) {
	exit := &api.Exit{State: "exited", ExitCode: intp(4), TerminatedBy: "exit"}
	f := newRunFixture(t, framesOf([]chunk{{api.KindStdout, "x"}}, exit), exitWith(cluster.ExitRecord{State: cluster.StateExited, ExitCode: 4, TerminatedBy: cluster.ByExit}))
	r := schedctl(t, f.sched.url, nil, "run", "-o", "json", "--", "true")
	var kinds []api.FrameKind
	for l := range strings.Lines(r.stdout) {
		var fr api.Frame
		if err := json.Unmarshal([]byte(l), &fr); err != nil {
			t.Fatalf("run -o json line %q: %v", l, err)
		}
		kinds = append(kinds, fr.Kind)
	}
	if want := []api.FrameKind{api.KindStdout, api.KindEvent, api.KindExit}; r.code != 4 || !cmp.Equal(kinds, want) {
		t.Errorf("run -o json = %v, frames %v; want exit 4 and frames %v", r, kinds, want)
	}
}
