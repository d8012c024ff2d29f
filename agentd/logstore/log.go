package logstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// Log is the writing end of one step's log. Its methods may be called from
// different goroutines (the runtime copies stdout and stderr in two); the
// log serializes them and numbers frames in the order they are appended.
// A write goes to disk before it returns and never waits for readers.
//
// The owner ends the log with Exit once the runtime has reported the
// step's exit, or, when no exit record can be given (the agent is stopping
// and will adopt the step again), with Close, which leaves the log
// unfinished: followers keep waiting and a later Create continues it.
type Log struct {
	l      *stepLog
	stdout *outputWriter
	stderr *outputWriter
}

// Create returns the Log of step id, creating its files. If the store has
// an unfinished log of id that no Log holds (left by Close or by an agent
// that stopped), Create continues it after its last frame. It returns
// ErrExists if the log is finished or held by another Log.
func (s *Store) Create(id cluster.StepID) (*Log, error) {
	if err := validateID(id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, known := s.logs[id]
	if !known {
		l = s.newStepLog(id)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.finished:
		return nil, fmt.Errorf("step %s: %w (finished)", id, ErrExists)
	case l.writer != nil:
		return nil, fmt.Errorf("step %s: %w (being written)", id, ErrExists)
	}
	if err := l.openForAppendLocked(!known); err != nil {
		return nil, err
	}
	lg := &Log{l: l}
	lg.stdout = &outputWriter{lg: lg, kind: api.KindStdout, max: s.cfg.MaxFrameData}
	lg.stderr = &outputWriter{lg: lg, kind: api.KindStderr, max: s.cfg.MaxFrameData}
	l.writer = lg
	l.err = nil
	l.idleSince = time.Now().UTC()
	s.logs[id] = l
	return lg, nil
}

// CreateLimited is Create for a log that keeps at most outputBytes of the
// step's output.
func (s *Store) CreateLimited(id cluster.StepID, outputBytes int64) (*Log, error) {
	return s.Create(id)
}

// Stdout returns the writer of the step's stdout, to be passed to the
// runtime. Each Write appends one or more stdout frames.
func (lg *Log) Stdout() io.Writer { return lg.stdout }

// Stderr returns the writer of the step's stderr.
func (lg *Log) Stderr() io.Writer { return lg.stderr }

// writableLocked reports why lg may not append, if it may not. The caller
// holds lg.l.mu.
func (lg *Log) writableLocked() error {
	l := lg.l
	switch {
	case l.removed:
		return fmt.Errorf("step %s: %w", l.id, ErrRemoved)
	case l.finished:
		return fmt.Errorf("step %s: %w", l.id, ErrFinished)
	case l.writer != lg:
		return fmt.Errorf("step %s: %w", l.id, ErrClosed)
	}
	return l.err
}

// Event appends an event frame.
func (lg *Log) Event(e cluster.Event) error {
	ev := api.Event(e)
	lg.l.mu.Lock()
	defer lg.l.mu.Unlock()
	if err := lg.writableLocked(); err != nil {
		return err
	}
	return lg.l.appendLocked(func(dst []byte, seq int64, t time.Time) []byte {
		return appendJSON(dst, api.NewEventFrame(seq, ev, t))
	})
}

// Exit appends the exit frame carrying rec and ends the log: output held
// back by the writers is flushed first, and every later write fails with
// ErrFinished. Followers end after the exit frame.
func (lg *Log) Exit(rec cluster.ExitRecord) error {
	x := exitData(rec)
	l := lg.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := lg.writableLocked(); err != nil {
		return err
	}
	for _, w := range []*outputWriter{lg.stdout, lg.stderr} {
		if err := w.flushLocked(); err != nil {
			return err
		}
	}
	err := l.appendLocked(func(dst []byte, seq int64, t time.Time) []byte {
		return appendJSON(dst, api.NewExitFrame(seq, x, t))
	})
	if err != nil {
		return err
	}
	l.finished = true
	l.writer = nil
	return l.closeFilesLocked()
}

// Close releases the Log without ending the log (see Log). Output held back
// by the writers is flushed. Close after Exit does nothing.
func (lg *Log) Close() error {
	l := lg.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.writer != lg {
		return nil
	}
	var errs []error
	if l.err == nil && !l.removed {
		errs = append(errs, lg.stdout.flushLocked(), lg.stderr.flushLocked())
	}
	l.writer = nil
	l.idleSince = time.Now().UTC()
	errs = append(errs, l.closeFilesLocked())
	return errors.Join(errs...)
}

func appendJSON(dst []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Frames hold only strings, numbers and times.
		panic(fmt.Sprintf("marshal %T: %v", v, err))
	}
	return append(dst, b...)
}

// exitData converts the runtime's exit record to the public exit data.
func exitData(rec cluster.ExitRecord) api.Exit {
	x := api.Exit{
		State:        string(rec.State),
		TerminatedBy: string(rec.TerminatedBy),
		Reason:       rec.Reason,
		Phases:       api.Phases(rec.Phases),
		StdoutBytes:  rec.Stdout,
		StderrBytes:  rec.Stderr,
	}
	if rec.State == cluster.StateExited || rec.State == cluster.StateCancelled {
		code := rec.ExitCode
		x.ExitCode = &code
	}
	return x
}

// outputWriter turns writes to one of a step's output streams into frames
// of at most max bytes. It never splits a UTF-8 sequence when it can help
// it: a chunk is cut at a character boundary, and a write that ends inside
// a character holds those bytes back until the next write (or Exit or
// Close) completes them, so that text frames stay text.
type outputWriter struct {
	lg   *Log
	kind api.FrameKind
	max  int
	// pending (guarded by lg.l.mu) is an incomplete UTF-8 sequence held
	// back from the last write.
	pending []byte
}

func (w *outputWriter) Write(p []byte) (int, error) {
	l := w.lg.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := w.lg.writableLocked(); err != nil {
		return 0, err
	}
	buf, held := p, len(w.pending)
	if held > 0 {
		buf = append(w.pending, p...)
		w.pending = nil
	}
	for len(buf) > 0 {
		n := len(buf)
		if n > w.max {
			n = cut(buf, w.max)
		} else if k := incompleteTail(buf); k > 0 && utf8.Valid(buf[:n-k]) {
			w.pending = append([]byte(nil), buf[n-k:]...)
			n -= k
			if n == 0 {
				break
			}
		}
		chunk := buf[:n]
		err := l.appendLocked(func(dst []byte, seq int64, t time.Time) []byte {
			return api.AppendOutputFrame(dst, seq, w.kind, chunk, t)
		})
		if err != nil {
			return max(0, len(p)-len(buf)), err
		}
		buf = buf[n:]
	}
	return len(p), nil
}

// flushLocked appends the bytes held back, if any.
func (w *outputWriter) flushLocked() error {
	if len(w.pending) == 0 {
		return nil
	}
	chunk := w.pending
	w.pending = nil
	return w.lg.l.appendLocked(func(dst []byte, seq int64, t time.Time) []byte {
		return api.AppendOutputFrame(dst, seq, w.kind, chunk, t)
	})
}

// cut returns where to split b, longer than max: at max, or up to three
// bytes before it so as not to split a UTF-8 sequence.
func cut(b []byte, max int) int {
	for n := max; n > max-utf8.UTFMax && n > 0; n-- {
		if utf8.RuneStart(b[n]) {
			return n
		}
	}
	return max
}

// incompleteTail returns the length of the valid but incomplete UTF-8
// sequence at the end of b, or 0.
func incompleteTail(b []byte) int {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}
