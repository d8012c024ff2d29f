package stepfollow

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// DefaultStallGrace is how long a followed stream may stay silent once
// the scheduler's record of the step is terminal before Follow stops
// waiting for the stream's exit frame (the node may be gone).
const DefaultStallGrace = 5 * time.Second

// ErrNoStream means a step's output could not be read to its end: the step
// ended without being placed, or the node serving its stream is gone.
var ErrNoStream = errors.New("output stream unavailable")

// Config is what following a step needs.
type Config struct {
	// Client reaches the scheduler.
	Client *client.Client
	// Agents makes the clients of the node agents' streams.
	Agents *Agents
	// Stdout and Stderr get the step's output. When Frames is set, they
	// get nothing and Frames gets every frame as a line of JSON instead.
	Stdout, Stderr io.Writer
	Frames         io.Writer
	// Warn reports trouble that Follow works around (it keeps trying).
	Warn func(format string, args ...any)
	// StallGrace is how long a stream may stay silent once the step's
	// record is terminal; 0 means DefaultStallGrace.
	StallGrace time.Duration
}

// streamer copies a step's output from the agent that runs it (the URL
// the scheduler gives) to stdout and stderr, byte for byte. It resumes
// after a dropped connection from the last frame it wrote, so nothing is
// lost or repeated, and ends with the stream's exit frame.
type streamer struct {
	Config
	id string

	// last is the seq of the last frame written; attempt the step's
	// attempt the frames belong to.
	last    int64
	attempt int
	// progress is the time (UnixNano) a frame last arrived.
	progress atomic.Int64
}

// Dump writes the frames of step id's stream at loc that exist now and
// returns; exit is the exit frame's data if the stream has ended.
func Dump(ctx context.Context, cfg Config, id string, loc api.StreamURL) (exit *api.Exit, err error) {
	return (&streamer{Config: cfg, id: id}).read(ctx, loc, false)
}

// follow reads the step's stream until its exit frame. w tells it when
// the stream may exist (the step is placed) and when to stop waiting (the
// step ended but its node does not answer): then it returns ErrNoStream.
func (s *streamer) follow(ctx context.Context, w *watch) (*api.Exit, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel(nil)
		wg.Wait()
	}()
	wg.Go(func() { s.superviseStall(ctx, w, cancel) })

	s.progress.Store(time.Now().UnixNano())
	delay := time.Duration(0)
	for {
		if err := sleep(ctx, delay); err != nil {
			return nil, s.ctxErr(ctx)
		}
		// changed is taken before the requests below, so that a change
		// they race with is not missed.
		st, changed, werr := w.Current()
		if werr != nil {
			return nil, werr
		}
		loc, err := s.Client.StreamLocation(ctx, s.id)
		switch {
		case ctx.Err() != nil:
			return nil, s.ctxErr(ctx)
		case err != nil && st.Terminal() && st.Node == "":
			return nil, fmt.Errorf("%w: step %s ended (%s) without running", ErrNoStream, s.id, st.State)
		case err != nil && st.Terminal() && client.IsStatus(err, http.StatusNotFound, http.StatusConflict):
			return nil, fmt.Errorf("%w: step %s is %s: %w", ErrNoStream, s.id, st.State, err)
		case client.IsStatus(err, http.StatusNotFound, http.StatusConflict):
			// Not placed yet: wait for the record to change.
			if err := waitChange(ctx, changed, longPoll); err != nil {
				return nil, s.ctxErr(ctx)
			}
			delay = 0
			continue
		case client.IsStatus(err, http.StatusServiceUnavailable):
			if err := waitChange(ctx, changed, time.Second); err != nil {
				return nil, s.ctxErr(ctx)
			}
			delay = 0
			continue
		case err != nil:
			s.Warn("get stream address of step %s: %v (retrying)", s.id, err)
			delay = backoff(delay)
			continue
		}
		if st.Attempts != s.attempt {
			if s.attempt != 0 && s.last > 0 {
				s.Warn("step %s: attempt %d on node %s; its output starts again", s.id, st.Attempts, st.Node)
				s.last = 0
			}
			s.attempt = st.Attempts
		}
		before := s.last
		exit, err := s.read(ctx, loc, true)
		switch {
		case exit != nil:
			return exit, nil
		case ctx.Err() != nil:
			return nil, s.ctxErr(ctx)
		case errors.Is(err, errWrite), errors.Is(err, errBadFrame), errors.Is(err, errStreamAddress):
			return nil, err
		case client.IsStatus(err, http.StatusNotFound):
			// The agent does not know the step yet (or any more).
			if err := waitChange(ctx, changed, time.Second); err != nil {
				return nil, s.ctxErr(ctx)
			}
			delay = 0
			continue
		}
		if s.last > before {
			delay = 0 // the connection dropped after progress: resume now
		} else {
			delay = backoff(delay)
		}
		if err != nil && delay >= 2*time.Second {
			s.Warn("read output of step %s: %v (retrying)", s.id, err)
		}
	}
}

func backoff(d time.Duration) time.Duration {
	return min(max(2*d, 250*time.Millisecond), 5*time.Second)
}

// ctxErr is why ctx ended: ErrNoStream from the stall supervisor, else the
// context's error.
func (s *streamer) ctxErr(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrNoStream) {
		return cause
	}
	return ctx.Err()
}

// superviseStall ends the stream with ErrNoStream when the step's record
// is terminal and no frame arrived for StallGrace: the node that has the
// rest of the output is not answering.
func (s *streamer) superviseStall(ctx context.Context, w *watch, stop context.CancelCauseFunc) {
	st, err := w.WaitFor(ctx, func(st api.Step) bool { return st.Terminal() })
	if err != nil {
		return
	}
	grace := s.StallGrace
	if grace <= 0 {
		grace = DefaultStallGrace
	}
	since := time.Now()
	tick := time.NewTicker(grace / 5)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			last := time.Unix(0, s.progress.Load())
			if now.Sub(since) >= grace && now.Sub(last) >= grace {
				stop(fmt.Errorf("%w: step %s is %s and its node has not sent the rest of its output for %v",
					ErrNoStream, s.id, st.State, grace))
				return
			}
		}
	}
}

// errWrite marks a failure to write output locally (a closed pipe), and
// errBadFrame a frame that cannot be decoded: no point reading on.
var (
	errWrite    = errors.New("write output")
	errBadFrame = errors.New("bad frame")
)

// read reads the stream from the frame after s.last until it ends, and
// returns the exit frame's data if it came.
func (s *streamer) read(ctx context.Context, loc api.StreamURL, follow bool) (*api.Exit, error) {
	hc, u, err := s.Agents.get(loc)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("from", strconv.FormatInt(s.last, 10))
	if follow {
		q.Set("follow", "1")
	} else {
		q.Set("follow", "0")
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, agentError(resp)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		switch {
		case err == io.EOF && len(bytes.TrimSpace(line)) == 0:
			return nil, nil // the stream ended (without follow: all that exists)
		case err == io.EOF:
			// A line without its newline is a frame cut by a dropped
			// connection: it is read again on resumption.
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var f api.Frame
		if err := json.Unmarshal(line, &f); err != nil {
			return nil, fmt.Errorf("stream of step %s: %w %.100q: %w", s.id, errBadFrame, line, err)
		}
		if f.Seq <= s.last {
			continue // already written
		}
		if f.Seq != s.last+1 {
			s.Warn("stream of step %s: frames %d to %d are missing", s.id, s.last+1, f.Seq-1)
		}
		s.progress.Store(time.Now().UnixNano())
		exit, err := s.write(f, line)
		if err != nil {
			return nil, err
		}
		s.last = f.Seq
		if exit != nil {
			return exit, nil
		}
	}
}

// write writes one frame's output (or the frame itself, for -o json).
func (s *streamer) write(f api.Frame, line []byte) (*api.Exit, error) {
	if s.Frames != nil {
		if _, err := s.Frames.Write(append(line, '\n')); err != nil {
			return nil, fmt.Errorf("%w: %w", errWrite, err)
		}
	}
	switch f.Kind {
	case api.KindStdout, api.KindStderr:
		if s.Frames != nil {
			return nil, nil
		}
		b, err := f.Output()
		if err != nil {
			return nil, fmt.Errorf("stream of step %s: %w: %w", s.id, errBadFrame, err)
		}
		w := s.Stdout
		if f.Kind == api.KindStderr {
			w = s.Stderr
		}
		if _, err := w.Write(b); err != nil {
			return nil, fmt.Errorf("%w: %w", errWrite, err)
		}
	case api.KindExit:
		x, err := f.Exit()
		if err != nil {
			return nil, fmt.Errorf("stream of step %s: %w: %w", s.id, errBadFrame, err)
		}
		return &x, nil
	}
	return nil, nil
}
