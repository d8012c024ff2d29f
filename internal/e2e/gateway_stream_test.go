package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestGatewayStream reads step streams through `gateway serve`: a client
// that drops its connection in the middle of a step and resumes with
// ?from=N sees every byte once, and a slow client reading 200 MB does not
// make the gateway buffer it.
func TestGatewayStream(t *testing.T) {
	testenv.RequireContainerd(t)
	defer testenv.CheckNoLeaks(t, "rodon", "/rodon")
	f := &fleet{}
	startSchedulers(t, f, 1)
	startNamedAgent(t, f, "stream-node-a1")
	const ownerEmail = "owner@example.com"
	g := startGateway(t, f, ownerEmail)
	rec := &recorder{}
	c := newGWClient(t, g, rec)
	c.signIn(ownerEmail, g.ownerPassword(t, ownerEmail))
	var ws struct {
		ID string `json:"id"`
	}
	c.must(http.StatusCreated, http.MethodPost, "/v1/workspaces", map[string]string{"name": "streams"}, &ws)

	t.Run("resume", func(t *testing.T) {
		c.t = t
		const lines = 200
		var want strings.Builder
		for i := 1; i <= lines; i++ {
			fmt.Fprintf(&want, "line %d\n", i)
		}
		op := c.startRun(ws.ID, map[string]any{"image": "base", "cpu": 0.5, "memory": "128Mi",
			"args": []string{"sh", "-c", fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line $i"; i=$((i+1)); sleep 0.05; done`, lines)}})
		id := op.Steps[0].ID

		// Read until some lines arrived, then drop the connection.
		s := c.openStream(id, 0)
		var first []api.Frame
		s.conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
		for len(bytes.Split(stdout(t, first, 1), []byte("\n"))) <= 40 {
			fr, err := s.next()
			if err != nil {
				t.Fatalf("stream ended after %d frames: %v", len(first), err)
			}
			if fr.Kind == api.KindExit {
				t.Fatalf("the step ended before the test disconnected (frame %d); make it print longer", fr.Seq)
			}
			first = append(first, fr)
		}
		s.conn.UnderlyingConn().Close() // no close frame: the network went away
		last := first[len(first)-1].Seq
		var mid gwOperation
		c.must(http.StatusOK, http.MethodGet, "/v1/runs/"+op.ID, nil, &mid)
		if mid.Steps[0].State != "running" {
			t.Fatalf("step %s after the disconnect, want it still running", mid.Steps[0].State)
		}
		time.Sleep(500 * time.Millisecond)
		rest := c.openStream(id, last).untilExit()
		joined := stdout(t, append(first, rest...), 1)
		t.Logf("read frames 1-%d, disconnected while the step ran, resumed from=%d and read frames %d-%d",
			last, last, rest[0].Seq, rest[len(rest)-1].Seq)
		if rest[0].Seq != last+1 {
			t.Errorf("resumed stream starts at frame %d, want %d", rest[0].Seq, last+1)
		}
		full := c.openStream(id, 0).untilExit()
		whole := stdout(t, full, 1)
		if !bytes.Equal(joined, whole) {
			t.Errorf("joined output (%d bytes) differs from the whole stream's (%d bytes):\njoined %q\nwhole  %q", len(joined), len(whole), joined, whole)
		}
		if string(whole) != want.String() {
			t.Errorf("whole output = %q, want %q", whole, want.String())
		}
		if len(full) != len(first)+len(rest) {
			t.Errorf("whole stream has %d frames, the joined one %d", len(full), len(first)+len(rest))
		}
		x, err := full[len(full)-1].Exit()
		if err != nil || x.ExitCode == nil || *x.ExitCode != 0 || x.StdoutBytes != int64(want.Len()) {
			t.Errorf("exit frame %+v (%v), want exit 0 with %d stdout bytes", x, err, want.Len())
		}
		c.waitRun(op.ID, time.Minute)
	})

	t.Run("200MB", func(t *testing.T) {
		c.t = t
		const total = 200_000_000
		// A slowish client: at most this many bytes a second.
		const rate = 25 << 20
		op := c.startRun(ws.ID, map[string]any{"image": "base", "cpu": 1, "memory": "256Mi",
			"args": []string{"sh", "-c", fmt.Sprintf(`head -c %d /dev/zero | tr '\0' x`, total)}})
		// Warm the gateway up, then take the baseline.
		for range 5 {
			c.must(http.StatusOK, http.MethodGet, "/v1/runs/"+op.ID, nil, nil)
		}
		baseline := rssKiB(t, g.pid())
		var mu sync.Mutex
		peak := baseline
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				r := rssKiB(t, g.pid())
				mu.Lock()
				peak = max(peak, r)
				mu.Unlock()
			}
		})
		// The recorder would keep 200 MB: this stream is not recorded.
		quiet := newGWClient(t, g, &recorder{})
		quiet.jar, quiet.csrf = c.jar, c.csrf
		s := quiet.openStream(op.Steps[0].ID, 0)
		s.rec = &recorder{}
		s.conn.SetReadDeadline(time.Now().Add(5 * time.Minute))
		var n, frames int64
		var bad bool
		var expected int64 = 1
		var exit *api.Exit
		var dropped int64 // the node keeps the default output cap of it
		start := time.Now()
		for exit == nil {
			_, b, err := s.conn.ReadMessage()
			if err != nil {
				t.Fatalf("stream broke after %d bytes in %d frames: %v", n, frames, err)
			}
			fr, err := decodeFrame(b)
			if err != nil {
				t.Fatal(err)
			}
			if fr.Seq != expected {
				t.Fatalf("frame %d after frame %d", fr.Seq, expected-1)
			}
			expected++
			frames++
			switch fr.Kind {
			case api.KindStdout:
				out, err := fr.Output()
				if err != nil {
					t.Fatal(err)
				}
				if !bad && bytes.Count(out, []byte("x")) != len(out) {
					bad = true
					t.Errorf("frame %d carries bytes other than x", fr.Seq)
				}
				n += int64(len(out))
			case api.KindEvent:
				var e api.Event
				if err := json.Unmarshal(fr.Data, &e); err == nil && e.Kind == "output_truncated" && e.Output != nil {
					dropped += e.Output.DroppedBytes
				}
			case api.KindExit:
				x, err := fr.Exit()
				if err != nil {
					t.Fatal(err)
				}
				exit = &x
			}
			// Slow down to rate.
			if ahead := time.Duration(float64(n)/rate*float64(time.Second)) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		elapsed := time.Since(start)
		close(stop)
		wg.Wait()
		s.conn.Close()
		mu.Lock()
		growth := peak - baseline
		mu.Unlock()
		t.Logf("read %d bytes in %d frames in %v through the gateway: %.1f MB/s (client limit %.1f MB/s)",
			n, frames, elapsed.Round(time.Millisecond), float64(n)/1e6/elapsed.Seconds(), float64(rate)/1e6)
		t.Logf("gateway VmRSS: baseline %.1f MB, peak %.1f MB, growth %.1f MB", float64(baseline)/1024, float64(peak)/1024, float64(growth)/1024)
		if n+dropped != total || n > cluster.DefaultLimits.OutputBytes {
			t.Errorf("read %d stdout bytes and an output_truncated event dropping %d, want at most the default cap %d kept of %d, the rest counted",
				n, dropped, cluster.DefaultLimits.OutputBytes, total)
		}
		if exit.ExitCode == nil || *exit.ExitCode != 0 || exit.StdoutBytes != total {
			t.Errorf("exit %+v, want exit 0 with %d stdout bytes", exit, total)
		}
		if growth >= 64<<10 {
			t.Errorf("the gateway's RSS grew by %.1f MB while it relayed 200 MB to a slow client, want under 64 MB", float64(growth)/1024)
		}
		c.waitRun(op.ID, time.Minute)
	})
	c.t = t
	for _, p := range append(f.agents, f.schedulers...) {
		p.stop(30 * time.Second)
	}
}
