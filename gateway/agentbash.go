package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
)

// Bash calls of agent runs: a script step the Driver submits, answered at
// once or, with ?wait=, once it ended with its exit and the last
// outputTail bytes of its output.

const (
	// outputTail is how much of a Bash step's output its answer holds:
	// the last 32 KiB.
	outputTail = 32 << 10
	// outputReadTimeout bounds reading an ended step's output from its
	// node.
	outputReadTimeout = 30 * time.Second
	// maxOutputLine bounds one frame of a node's stream (the relay's
	// MaxFrame).
	maxOutputLine = 1<<20 + 64<<10
)

// OutputSource reads a step's stream from its node (*relay's Upstream:
// relay.NewAgentUpstream): the frames after frame from, as NDJSON, until
// the exit frame. The caller closes the stream.
type OutputSource interface {
	Open(ctx context.Context, stepID string, from uint64) (io.ReadCloser, error)
}

// bashCall answers the Bash call of step index of run (appended, pending):
// it has the Driver submit the step, waits up to wait for its end, and
// answers the step with its BashResult.
func (g *Gateway) bashCall(c *call, run runRecord, index int, wait time.Duration) error {
	id, sid := run.ID, run.Steps[index].ID
	if adv, err := g.driver.advance(c.ctx, id); err == nil {
		run = adv
	} else {
		g.log.Warn("advance run for a Bash call", "run", id, "error", err)
	}
	g.driver.Wake()
	var st *api.Step
	if wait > 0 {
		// The answer comes after the wait: the deadlines move past it (a
		// server without deadlines has nothing to move).
		rc := http.NewResponseController(c.w)
		rc.SetReadDeadline(time.Now().Add(wait + g.cfg.Timeouts.Read))
		rc.SetWriteDeadline(time.Now().Add(wait + g.cfg.Timeouts.Write))
		got, err := g.waitStep(c.ctx, sid, wait)
		if err != nil {
			return err
		}
		st = got
		if st != nil && st.Terminal() {
			// Record its end (and its events) now rather than at the next
			// pass.
			if adv, err := g.driver.advance(c.ctx, id); err == nil {
				run = adv
				// Another driver may have ended it: the answer comes once
				// the events it reserved are written, so that a caller
				// reads them all.
				g.awaitEvents(c.ctx, &run)
			} else {
				g.log.Warn("advance run after a Bash step ended", "run", id, "error", err)
			}
		}
	}
	if index >= len(run.Steps) {
		return fmt.Errorf("run %s lost step %d", id, index)
	}
	view, err := g.stepView(c.ctx, run.Steps[index], true)
	if err != nil && !IsNotFound(err) {
		return err
	}
	res := api.BashResult{State: view.State, Output: ""}
	if st != nil && st.Terminal() {
		res.State, res.Revision = st.State, st.Revision
		if st.ExitCode != nil {
			code := *st.ExitCode
			res.ExitCode = &code
		}
		if st.State != api.StepExited {
			res.Error = Scrub(st.Reason, g.nodes.known(c.ctx, st.Node)...)
			if res.Error == "" {
				res.Error = "the step " + st.State
			}
		}
		if !st.Phases.Started.IsZero() {
			out, truncated, err := g.outputTail(c.ctx, sid)
			if err != nil {
				g.log.Warn("read a Bash step's output", "step", sid, "error", err)
			}
			res.Output, res.Truncated = out, truncated
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, api.ToolAnswer{Step: view, Result: b})
}

// waitStep waits up to wait for step id to end and returns it as last
// seen (nil when the scheduler never had it in that time: the Driver had
// not submitted it yet).
func (g *Gateway) waitStep(ctx context.Context, id string, wait time.Duration) (*api.Step, error) {
	deadline := time.Now().Add(wait)
	var last *api.Step
	var index uint64
	for {
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return last, nil
		}
		var st api.Step
		var err error
		if last == nil {
			st, err = g.steps.Step(ctx, id)
		} else {
			st, err = g.steps.WaitStep(ctx, id, index, left)
		}
		switch {
		case IsNotFound(err):
			// Not submitted yet: the Driver does it at its next pass.
			g.driver.Wake()
			select {
			case <-ctx.Done():
			case <-time.After(min(left, 200*time.Millisecond)):
			}
			continue
		case err != nil:
			if ctx.Err() != nil {
				return last, nil
			}
			return last, err
		}
		last, index = &st, st.ModifyIndex
		if st.Terminal() {
			return last, nil
		}
	}
}

// errNoOutput: the gateway was built without an OutputSource.
var errNoOutput = errors.New("this gateway reads no step output (no output source)")

// outputTail reads ended step id's output from its node and returns its
// last outputTail bytes (cut at a character's start), and whether there
// was more.
func (g *Gateway) outputTail(ctx context.Context, id string) (string, bool, error) {
	if g.cfg.Output == nil {
		return "", false, errNoOutput
	}
	ctx, cancel := context.WithTimeout(ctx, outputReadTimeout)
	defer cancel()
	rc, err := g.cfg.Output.Open(ctx, id, 0)
	if err != nil {
		return "", false, err
	}
	defer rc.Close()
	var buf []byte
	truncated := false
	br := bufio.NewReaderSize(rc, 64<<10)
	for {
		line, err := readLine(br, maxOutputLine)
		if len(bytes.TrimSpace(line)) > 0 {
			var f api.Frame
			if jerr := json.Unmarshal(line, &f); jerr != nil {
				return tail(buf, truncated), true, fmt.Errorf("stream of step %s: frame: %w", id, jerr)
			}
			switch f.Kind {
			case api.KindStdout, api.KindStderr:
				p, oerr := f.Output()
				if oerr != nil {
					return tail(buf, truncated), true, fmt.Errorf("stream of step %s: frame %d: %w", id, f.Seq, oerr)
				}
				buf = append(buf, p...)
				if len(buf) > 2*outputTail {
					buf, truncated = append(buf[:0], buf[len(buf)-outputTail:]...), true
				}
			case api.KindExit:
				out, more := tailOf(buf, truncated)
				return out, more, nil
			}
		}
		if err == io.EOF {
			out, more := tailOf(buf, truncated)
			return out, more, nil
		}
		if err != nil {
			out, more := tailOf(buf, truncated)
			return out, more, fmt.Errorf("stream of step %s: %w", id, err)
		}
	}
}

// readLine reads one line of at most max bytes (longer: an error).
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, fmt.Errorf("a frame longer than %d bytes", max)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, err
	}
}

func tail(buf []byte, truncated bool) string {
	s, _ := tailOf(buf, truncated)
	return s
}

// tailOf is the last outputTail bytes of buf, starting at a character,
// and whether output was left out.
func tailOf(buf []byte, truncated bool) (string, bool) {
	if len(buf) > outputTail {
		buf, truncated = buf[len(buf)-outputTail:], true
	}
	if truncated {
		for i := 0; i < utf8.UTFMax && i < len(buf); i++ {
			if utf8.RuneStart(buf[i]) {
				buf = buf[i:]
				break
			}
		}
	}
	return string(buf), truncated
}

// eventsWait bounds how long an answer waits for the events its run
// reserved to be written.
const eventsWait = 2 * time.Second

// awaitEvents waits, at most eventsWait, until the last event run
// reserved is written (events are written in order, after the run).
func (g *Gateway) awaitEvents(ctx context.Context, run *runRecord) {
	if run.Agent == nil || run.Agent.Events == 0 {
		return
	}
	deadline := time.Now().Add(eventsWait)
	for {
		_, err := g.store.GetRecord(ctx, kindRunEvent, eventID(run.ID, run.Agent.Events))
		if err == nil || !IsNotFound(err) || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}
