package main

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/agentd/logstore"
	"github.com/rodon-compute/rodon/agentd/stream"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/pki"
)

// TestRealAgentStream reads a step's output from agentd's own stream
// handler and log store, with frames small enough to split the output
// everywhere, while the output is being written.
func TestRealAgentStream(t *testing.T) {
	cfg := logstore.DefaultConfig()
	cfg.Dir, cfg.MaxFrameData = t.TempDir(), 64
	cfg.FlushDelay = 0 // a frame per write: "logs" without -f reads what exists now
	logger := slog.New(slog.DiscardHandler)
	store, err := logstore.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	h, err := stream.New(stream.DefaultConfig(), store, logger)
	if err != nil {
		t.Fatal(err)
	}
	agent := startFake(t, h, testPKI().agent, pki.RoleOperator)
	sched := newScheduler(t, 1, nil)
	sched.Restore([]cluster.Node{node("n1", addrOf(t, agent.URL))}, []cluster.Step{liveStep("s1", cluster.StateRunning, "n1")})

	lg, err := store.Create("s1")
	if err != nil {
		t.Fatal(err)
	}
	var wantOut, wantErr strings.Builder
	write := func(stdout bool, s string) {
		t.Helper()
		w, b := lg.Stderr(), &wantErr
		if stdout {
			w, b = lg.Stdout(), &wantOut
		}
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		b.WriteString(s)
	}
	write(true, strings.Repeat("héllo wörld ☕ ", 20)+"\n")
	write(false, "warn\x00\xff\xfe bytes\n")

	// Without -f: what exists now, even though the step goes on.
	r := schedctl(t, sched.url, nil, "logs", "s1")
	if r.code != 0 || r.stdout != wantOut.String() || r.stderr != wantErr.String() {
		t.Errorf("logs s1 = %v; want what was written so far", r)
	}

	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan result)
	go func() { done <- schedctlTo(t, sched.url, nil, stdout, stderr, "logs", "-f", "s1") }()
	stdout.waitFor(t, "wörld")
	for i := range 50 {
		write(i%2 == 0, strings.Repeat(string(rune('a'+i%26)), i*7)+"\u2028é\n")
	}
	code := 0
	if err := lg.Exit(cluster.ExitRecord{Step: "s1", State: cluster.StateExited, ExitCode: code, TerminatedBy: cluster.ByExit}); err != nil {
		t.Fatal(err)
	}
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("logs -f did not end after the exit frame")
	}
	if r.code != 0 || r.stdout != wantOut.String() || r.stderr != wantErr.String() {
		t.Errorf("logs -f s1 = %v;\nwant stdout %q, stderr %q", r, wantOut.String(), wantErr.String())
	}
}
