package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/benchfleet"
)

// countWriter counts the bytes written to it and times the first.
type countWriter struct {
	mu    sync.Mutex
	n     int64
	first time.Time
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == 0 && len(p) > 0 {
		w.first = time.Now()
	}
	w.n += int64(len(p))
	return len(p), nil
}

// readDirect runs `schedctl logs -f id` (which asks the scheduler for the
// step's stream-url and reads the agent's NDJSON stream itself) with its
// stdout going to a counting writer, and returns when it ends.
func readDirect(ctx context.Context, f *benchfleet.Fleet, id string) (benchfleet.StreamResult, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(f.Bin, "schedctl"), append(f.Mode.Flags(), "logs", "-f", id)...)
	cmd.Env = f.Mode.Env("RODON_SCHEDULER=" + f.SchedURL)
	var out countWriter
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	r := benchfleet.StreamResult{Start: time.Now()}
	err := cmd.Run()
	r.End = time.Now()
	out.mu.Lock()
	r.Stdout, r.First = out.n, out.first
	out.mu.Unlock()
	if err != nil {
		return r, fmt.Errorf("schedctl logs -f %s: %w: %s", id, err, stderr.String())
	}
	return r, nil
}

// readAgent reads step id's NDJSON stream from the agent in this process,
// as `schedctl logs -f` does but without its process and its stdout pipe,
// decoding each frame as readStream does: the relay's own cost is the
// difference between this reader and the gateway's.
func readAgent(ctx context.Context, f *benchfleet.Fleet, id string) (benchfleet.StreamResult, error) {
	r := benchfleet.StreamResult{Start: time.Now()}
	u, err := f.Sched.StreamURL(ctx, id)
	if err != nil {
		return r, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"?from=0&follow=1", nil)
	if err != nil {
		return r, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := f.Agent.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("agent stream of step %s: %s", id, resp.Status)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return r, fmt.Errorf("agent stream of step %s ended before its exit frame: %w", id, err)
		}
		var fr api.Frame
		if err := json.Unmarshal(line, &fr); err != nil {
			return r, err
		}
		switch fr.Kind {
		case api.KindStdout:
			b, err := fr.Output()
			if err != nil {
				return r, err
			}
			r.Stdout += int64(len(b))
		case api.KindExit:
			r.End = time.Now()
			x, err := fr.Exit()
			r.Exit = &x
			return r, err
		}
	}
}
