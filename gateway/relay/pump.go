package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/gorilla/websocket"

	"github.com/rodon-compute/rodon/api"
)

// readBuffer is the pump's read-ahead from the upstream; a frame longer
// than it is gathered in a buffer of its own, up to Config.MaxFrame.
const readBuffer = 64 << 10

// Backoff between attempts to open a broken upstream: the first retry is
// immediate, the next ones wait minBackoff, doubling up to maxBackoff.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// pump reads the step's frames after from and hands them to the writer
// until the exit frame, opening the upstream again after the last frame
// handed over whenever it breaks, for up to RetryTimeout without progress.
// It returns how the stream ends; a zero end when ctx ends first.
func (s *session) pump(ctx context.Context, from uint64) end {
	p := pumpState{last: from, br: bufio.NewReaderSize(nil, readBuffer)}
	var failedSince time.Time
	for attempt := 0; ; attempt++ {
		rc, err := s.up.Open(ctx, s.id, p.last)
		if err == nil {
			progressed, fin, ferr := s.relayFrames(ctx, &p, rc)
			rc.Close()
			if fin != nil {
				return *fin
			}
			p.opened = true
			if progressed {
				attempt = 0
			}
			err = ferr
		}
		if ctx.Err() != nil {
			return end{err: ctx.Err()}
		}
		if fin := s.fatalOpen(&p, from, err); fin != nil {
			return *fin
		}
		if attempt == 0 {
			failedSince = time.Now()
		}
		if time.Since(failedSince) >= s.cfg.RetryTimeout {
			return end{
				code:   websocket.CloseInternalServerErr,
				reason: fmt.Sprintf("lost the step's stream after frame %d; reconnect with from=%d", p.last, p.last),
				err:    fmt.Errorf("resume stream after frame %d: gave up after %v: %w", p.last, s.cfg.RetryTimeout, err),
			}
		}
		s.logger.Debug("resume stream", "from", p.last, "attempt", attempt+1, "error", err)
		s.cfg.Metrics.resumed()
		if !sleep(ctx, backoff(attempt)) {
			return end{err: ctx.Err()}
		}
	}
}

// pumpState is what the pump keeps across upstream connections.
type pumpState struct {
	// last is the seq of the last frame handed to the writer.
	last uint64
	// opened is set once an upstream has been opened.
	opened bool
	br     *bufio.Reader
	// long gathers a frame longer than br's buffer.
	long []byte
}

// fatalOpen returns the end of a stream that err says cannot be opened
// again, or nil when trying again may help.
func (s *session) fatalOpen(p *pumpState, from uint64, err error) *end {
	if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrBadFrom) {
		return nil
	}
	if !p.opened && p.last == from {
		// The browser asked for something the node does not have.
		if errors.Is(err, ErrNotFound) {
			return &end{code: api.CloseNotFound, err: err,
				reason: "no output of this step: it has not run on a node yet, or its output is past retention"}
		}
		return &end{code: api.CloseBadRequest, err: err,
			reason: fmt.Sprintf("from=%d: the step has no frame %d; want the seq of the last frame you have", from, from)}
	}
	return &end{code: websocket.CloseInternalServerErr, err: fmt.Errorf("resume stream after frame %d: %w", p.last, err),
		reason: fmt.Sprintf("the step's stream cannot be resumed after frame %d: the node no longer has it", p.last)}
}

// relayFrames hands the frames of rc to the writer, one at a time. fin is
// the end of the stream when it must end: the exit frame was sent, or the
// upstream sent something no retry can fix. Otherwise err says why rc
// broke; progressed reports whether it gave any frame.
func (s *session) relayFrames(ctx context.Context, p *pumpState, rc io.Reader) (progressed bool, fin *end, err error) {
	p.br.Reset(rc)
	defer p.br.Reset(nil)
	for {
		line, err := p.readLine(s.cfg.MaxFrame)
		if errors.Is(err, errFrameTooLong) {
			return progressed, &end{code: websocket.CloseInternalServerErr, err: err,
				reason: fmt.Sprintf("frame %d is over %d bytes; the gateway cannot relay it", p.last+1, s.cfg.MaxFrame)}, nil
		}
		if err != nil {
			return progressed, nil, fmt.Errorf("read upstream after frame %d: %w", p.last, err)
		}
		seq, exit, err := frameHead(line)
		switch {
		case err != nil || seq > p.last+1:
			if err == nil {
				err = fmt.Errorf("frame %d after frame %d", seq, p.last)
			}
			return progressed, &end{code: websocket.CloseInternalServerErr, err: fmt.Errorf("bad upstream frame: %w", err),
				reason: fmt.Sprintf("the node sent a bad frame after frame %d", p.last)}, nil
		case seq <= p.last:
			continue // relayed already
		}
		if s.cfg.Rewrite != nil && !isOutput(line) {
			line = s.cfg.Rewrite(ctx, line)
		}
		select {
		case s.lines <- line:
		case <-ctx.Done():
			return progressed, nil, ctx.Err()
		}
		select {
		case <-s.acks:
		case <-ctx.Done():
			return progressed, nil, ctx.Err()
		}
		p.last = seq
		progressed = true
		if exit {
			return true, &end{code: websocket.CloseNormalClosure, reason: "end of stream"}, nil
		}
	}
}

var errFrameTooLong = errors.New("frame too long")

// readLine returns the next line without its newline, valid until the next
// call. A last line without a newline is io.ErrUnexpectedEOF: the upstream
// broke in the middle of a frame.
func (p *pumpState) readLine(max int) ([]byte, error) {
	if cap(p.long) > 4*readBuffer {
		p.long = nil // keep no huge buffer for the rest of the stream
	}
	line, err := p.br.ReadSlice('\n')
	if err == nil {
		line = line[:len(line)-1]
		if len(line) > max {
			return nil, errFrameTooLong
		}
		return line, nil
	}
	p.long = append(p.long[:0], line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		line, err = p.br.ReadSlice('\n')
		if len(p.long)+len(line) > max+1 {
			p.long = nil
			return nil, errFrameTooLong
		}
		p.long = append(p.long, line...)
	}
	switch {
	case err == nil:
		return p.long[:len(p.long)-1], nil
	case errors.Is(err, io.EOF) && len(p.long) > 0:
		return nil, io.ErrUnexpectedEOF
	case errors.Is(err, io.EOF):
		return nil, errors.New("stream ended before the exit frame")
	}
	return nil, err
}

var (
	seqPrefix  = []byte(`{"seq":`)
	kindPrefix = []byte(`,"kind":"`)
	exitKind   = []byte(`exit"`)
)

// frameHead returns the seq of an NDJSON frame and whether it is the exit
// frame. Frames as the agent writes them start {"seq":N,"kind":"K" and are
// read without decoding the rest; others are decoded.
func frameHead(line []byte) (seq uint64, exit bool, err error) {
	if rest, ok := bytes.CutPrefix(line, seqPrefix); ok {
		i := 0
		for i < len(rest) && i < 19 && rest[i] >= '0' && rest[i] <= '9' {
			seq = seq*10 + uint64(rest[i]-'0')
			i++
		}
		if kind, ok := bytes.CutPrefix(rest[i:], kindPrefix); ok && i > 0 && seq > 0 {
			return seq, bytes.HasPrefix(kind, exitKind), nil
		}
	}
	var h struct {
		Seq  *uint64 `json:"seq"`
		Kind string  `json:"kind"`
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return 0, false, fmt.Errorf("decode frame: %w", err)
	}
	if h.Seq == nil || *h.Seq == 0 || h.Kind == "" {
		return 0, false, errors.New("frame without a seq or a kind")
	}
	return *h.Seq, h.Kind == "exit", nil
}

var (
	stdoutKind = []byte(`,"kind":"stdout"`)
	stderrKind = []byte(`,"kind":"stderr"`)
)

// isOutput reports whether line is a stdout or stderr frame written as
// the agent writes them ({"seq":N,"kind":"stdout",...}). Any other line,
// output or not, is not recognised and goes through Config.Rewrite.
func isOutput(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, seqPrefix)
	if !ok {
		return false
	}
	i := 0
	for i < len(rest) && i < 19 && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	return bytes.HasPrefix(rest[i:], stdoutKind) || bytes.HasPrefix(rest[i:], stderrKind)
}

// backoff is how long to wait before retry attempt+1.
func backoff(attempt int) time.Duration {
	if attempt == 0 {
		return 0
	}
	d := min(minBackoff<<min(attempt-1, 10), maxBackoff)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
