package agentd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/cluster"
)

// TestAgentServerTimeouts serves the agent's routes with short timeouts
// and checks each: a client that sends a header or an input body too
// slowly is cut off, an idle keep-alive connection is closed, and a
// follower of a step stream stays connected well past all of them.
func TestAgentServerTimeouts(t *testing.T) {
	saved := agentTimeouts
	t.Cleanup(func() { agentTimeouts = saved })
	agentTimeouts = serverTimeouts{
		header:  300 * time.Millisecond,
		idle:    300 * time.Millisecond,
		input:   deadlines{read: 300 * time.Millisecond, write: time.Second},
		metrics: deadlines{read: 300 * time.Millisecond, write: time.Second},
		health:  deadlines{read: 300 * time.Millisecond, write: time.Second},
	}
	logger := slog.New(slog.DiscardHandler)
	logs, lg := newStepLog(t, "s-1")
	defer lg.Close()
	cfg := DefaultAgentConfig()
	cfg.Node, cfg.Address = "n1", netip.MustParseAddrPort("127.0.0.1:1")
	agent, err := NewAgent(cfg, nil, nil, nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	mux, err := newAgentMux(logs, agent, access{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv := newAgentServer(ctx, mux, agentTimeouts, logger)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	dial := func(t *testing.T) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closedWithin waits for the server to end the connection.
	closedWithin := func(t *testing.T, c net.Conn, d time.Duration) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(d))
		_, err := io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("connection still open after %v", d)
		}
	}

	t.Run("slow header", func(t *testing.T) {
		c := dial(t)
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		closedWithin(t, c, 3*time.Second)
	})
	t.Run("slow input body", func(t *testing.T) {
		c := dial(t)
		start := time.Now()
		fmt.Fprint(c, "POST /v1/steps/s-1/input HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"type\":")
		closedWithin(t, c, 3*time.Second)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("slow input body cut off after %v, want about its read deadline", d)
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c := dial(t)
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
			t.Fatalf("healthz: %q, %v", line, err)
		}
		closedWithin(t, c, 3*time.Second)
	})
	t.Run("stream outlives them", func(t *testing.T) {
		c := dial(t)
		fmt.Fprint(c, "GET /v1/steps/s-1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
		time.Sleep(1500 * time.Millisecond) // past every deadline above
		if _, err := io.WriteString(lg.Stdout(), "late\n"); err != nil {
			t.Fatal(err)
		}
		if err := lg.Exit(cluster.ExitRecord{Step: "s-1", State: cluster.StateExited, TerminatedBy: cluster.ByExit}); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		if !strings.Contains(string(b), `"late\n"`) || !strings.Contains(string(b), `"kind":"exit"`) {
			t.Errorf("stream read %q, want the late output and the exit frame", b)
		}
	})
}

// TestAgentTimeoutDefaults: every timeout of the agent's server is set,
// and an input request may wait as long as the agent waits for a starting
// step and its terminal.
func TestAgentTimeoutDefaults(t *testing.T) {
	d := agentTimeouts
	for name, v := range map[string]time.Duration{
		"header": d.header, "idle": d.idle, "input read": d.input.read, "input write": d.input.write,
		"metrics read": d.metrics.read, "metrics write": d.metrics.write, "health read": d.health.read, "health write": d.health.write,
	} {
		if v <= 0 || v > 2*time.Minute {
			t.Errorf("%s timeout = %v, want a bound of at most 2m", name, v)
		}
	}
	if d.input.write < 15*time.Second {
		t.Errorf("input write timeout %v, want at least the 10 s start wait and 5 s input wait", d.input.write)
	}
}
