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
	"github.com/rodon-compute/rodon/internal/size"
)

// Log is the writing end of one step's log. Its methods may be called from
// different goroutines (the runtime copies stdout and stderr in two); the
// log serializes them and numbers frames in the order they are appended.
// A write never waits for readers.
//
// Output is coalesced: bytes written to Stdout or Stderr wait up to
// Config.FlushDelay (or until a frame's worth, Config.MaxFrameData, is
// there) and become one frame, so that a step printing one byte at a time
// costs a frame per FlushDelay, not a frame per byte. Output of one stream
// is appended before a later write of the other, and before an event.
//
// Output is capped: the log keeps the first half of its cap as it comes
// and, past that, holds the output back in tail segments on disk that keep
// the last half; at the end (Finish, Exit or Close) the held-back tail is
// appended after an output_truncated event that says how many bytes were
// dropped between the two (if any were). So a step may print forever:
// the log never holds more than its cap of output.
//
// The owner ends the log with Exit once the runtime has reported the
// step's exit, or, when no exit record can be given (the agent is stopping
// and will adopt the step again), with Close, which leaves the log
// unfinished: followers keep waiting and a later Create continues it.
type Log struct {
	l      *stepLog
	stdout *outputWriter
	stderr *outputWriter
	store  *Store

	// Guarded by l.mu:

	// cap is the output kept, head is the part of it kept as it comes,
	// kept the output bytes appended so far.
	cap, head, kept int64
	// tail holds the output past the head, once there is some; tailDone
	// is set once Finish appended it. Output after that is appended while
	// the cap has room and dropped (counted in late) past it.
	tail     *tail
	tailDone bool
	late     int64
}

// Create returns the Log of step id, creating its files, with the store's
// default output cap (Config.OutputBytes). If the store has an unfinished
// log of id that no Log holds (left by Close or by an agent that stopped),
// Create continues it after its last frame. It returns ErrExists if the log
// is finished or held by another Log.
func (s *Store) Create(id cluster.StepID) (*Log, error) {
	return s.CreateLimited(id, s.cfg.OutputBytes)
}

// CreateLimited is Create for a log that keeps at most outputBytes of the
// step's output (at least MinOutputBytes).
func (s *Store) CreateLimited(id cluster.StepID, outputBytes int64) (*Log, error) {
	if err := validateID(id); err != nil {
		return nil, err
	}
	if outputBytes < MinOutputBytes {
		return nil, fmt.Errorf("output cap of step %s: %d bytes, want at least %d", id, outputBytes, MinOutputBytes)
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
	lg := &Log{l: l, store: s, cap: outputBytes, head: outputBytes / 2}
	// A log continued counts what it holds already against its cap, as
	// if all of it were output.
	lg.kept = l.size
	lg.stdout = &outputWriter{lg: lg, kind: api.KindStdout, max: s.cfg.MaxFrameData}
	lg.stderr = &outputWriter{lg: lg, kind: api.KindStderr, max: s.cfg.MaxFrameData}
	lg.stdout.other, lg.stderr.other = lg.stderr, lg.stdout
	l.writer = lg
	l.err = nil
	l.idleSince = time.Now().UTC()
	s.logs[id] = l
	return lg, nil
}

// Stdout returns the writer of the step's stdout, to be passed to the
// runtime.
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

// Event appends an event frame, after the output written before it.
func (lg *Log) Event(e cluster.Event) error {
	lg.l.mu.Lock()
	defer lg.l.mu.Unlock()
	if err := lg.writableLocked(); err != nil {
		return err
	}
	if err := lg.flushOutputLocked(false); err != nil {
		return err
	}
	return lg.eventLocked(e)
}

func (lg *Log) eventLocked(e cluster.Event) error {
	ev := api.Event(e)
	return lg.l.appendLocked(func(dst []byte, seq int64, t time.Time) []byte {
		return appendJSON(dst, api.NewEventFrame(seq, ev, t))
	})
}

// Finish appends what the log holds back (the output waiting to be
// coalesced, and the tail past the head) and returns the output_truncated
// event it appended before the tail, if output was dropped, so that the
// owner can report it. Exit and Close call it; after it, output is still
// taken (and capped) until Exit.
func (lg *Log) Finish() (cluster.Event, bool, error) {
	lg.l.mu.Lock()
	defer lg.l.mu.Unlock()
	if err := lg.writableLocked(); err != nil {
		return cluster.Event{}, false, err
	}
	return lg.finishLocked()
}

func (lg *Log) finishLocked() (cluster.Event, bool, error) {
	if err := lg.flushOutputLocked(true); err != nil {
		return cluster.Event{}, false, err
	}
	if lg.tail == nil || lg.tailDone {
		return cluster.Event{}, false, nil
	}
	lg.tailDone = true
	return lg.appendTailLocked()
}

// Exit appends the exit frame carrying rec and ends the log: output held
// back is appended first (Finish), and every later write fails with
// ErrFinished. Followers end after the exit frame.
func (lg *Log) Exit(rec cluster.ExitRecord) error {
	x := exitData(rec)
	l := lg.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := lg.writableLocked(); err != nil {
		return err
	}
	if _, _, err := lg.finishLocked(); err != nil {
		return err
	}
	err := l.appendLocked(func(dst []byte, seq int64, t time.Time) []byte {
		return appendJSON(dst, api.NewExitFrame(seq, x, t))
	})
	if err != nil {
		return err
	}
	l.finished = true
	l.writer = nil
	lg.stopTimersLocked()
	lg.tail.remove()
	lg.store.kick()
	return l.closeFilesLocked()
}

// Close releases the Log without ending the log (see Log). Output held
// back is appended first. Close after Exit does nothing.
func (lg *Log) Close() error {
	l := lg.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.writer != lg {
		return nil
	}
	var errs []error
	if l.err == nil && !l.removed {
		_, _, err := lg.finishLocked()
		errs = append(errs, err)
	}
	l.writer = nil
	l.idleSince = time.Now().UTC()
	lg.stopTimersLocked()
	lg.tail.remove()
	errs = append(errs, l.closeFilesLocked())
	return errors.Join(errs...)
}

func (lg *Log) stopTimersLocked() {
	for _, w := range []*outputWriter{lg.stdout, lg.stderr} {
		if w.timer != nil {
			w.timer.Stop()
			w.timer = nil
		}
	}
}

// flushOutputLocked appends the output both writers hold; all of it with
// complete set, else all but an unfinished UTF-8 sequence at the end.
func (lg *Log) flushOutputLocked(complete bool) error {
	for _, w := range []*outputWriter{lg.stdout, lg.stderr} {
		if err := w.flushLocked(complete); err != nil {
			return err
		}
	}
	return nil
}

// outputLocked takes one chunk of output, at most a frame, into the log:
// as a frame while the head has room, into the tail past it.
func (lg *Log) outputLocked(kind api.FrameKind, chunk []byte) error {
	if lg.tailDone {
		n := int(min(int64(len(chunk)), max(lg.cap-lg.kept, 0)))
		lg.late += int64(len(chunk) - n)
		if n == 0 {
			return nil
		}
		return lg.frameLocked(kind, chunk[:n])
	}
	if room := lg.head - lg.kept; lg.tail == nil && room > 0 {
		n := len(chunk)
		if int64(n) > room {
			n = cut(chunk, int(room))
		}
		if err := lg.frameLocked(kind, chunk[:n]); err != nil {
			return err
		}
		chunk = chunk[n:]
	}
	if len(chunk) == 0 {
		return nil
	}
	if lg.tail == nil {
		t, err := lg.store.newTail(lg.l.id, lg.cap-lg.head)
		if err != nil {
			return lg.l.failLocked(err)
		}
		lg.tail = t
		err = lg.eventLocked(cluster.Event{Time: time.Now().UTC(), Kind: cluster.EventWarning,
			Warning: &api.Warning{Cause: api.WarningOutputHeldBack},
			Output:  &api.Output{HeadBytes: lg.kept, TailBytes: lg.cap - lg.head, CapBytes: lg.cap},
			Message: fmt.Sprintf("output past the first %s is held back until the step ends: its last %s will be kept and what comes before them dropped (output cap %s)",
				size.Format(lg.kept), size.Format(lg.cap-lg.head), size.Format(lg.cap))})
		if err != nil {
			return err
		}
	}
	if err := lg.tail.add(kind, chunk); err != nil {
		return lg.l.failLocked(err)
	}
	return nil
}

func (lg *Log) frameLocked(kind api.FrameKind, chunk []byte) error {
	err := lg.l.appendLocked(func(dst []byte, seq int64, t time.Time) []byte {
		return api.AppendOutputFrame(dst, seq, kind, chunk, t)
	})
	if err == nil {
		lg.kept += int64(len(chunk))
	}
	return err
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
		Cause:        rec.Cause,
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
// of at most max bytes, coalescing small writes for up to the store's
// FlushDelay. It never splits a UTF-8 sequence when it can help it: a
// chunk is cut at a character boundary, and an incomplete sequence at the
// end of what it holds waits for the next write (or Exit or Close) to
// complete it, so that text frames stay text.
type outputWriter struct {
	lg    *Log
	kind  api.FrameKind
	max   int
	other *outputWriter

	// Guarded by lg.l.mu: pending is the output not yet appended; timer
	// appends it FlushDelay after it began.
	pending []byte
	timer   *time.Timer
}

func (w *outputWriter) Write(p []byte) (int, error) {
	l := w.lg.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := w.lg.writableLocked(); err != nil {
		return 0, err
	}
	if len(w.other.pending) > 0 {
		// The other stream's output came first.
		if err := w.other.flushLocked(false); err != nil {
			return 0, err
		}
	}
	// Whole frames go now, straight from p when nothing is pending; the
	// rest waits for more or for the timer.
	buf := p
	if len(w.pending) > 0 {
		w.pending = append(w.pending, p...)
		buf = w.pending
	}
	for len(buf) >= w.max {
		n := w.max
		if len(buf) > w.max {
			n = cut(buf, w.max)
		}
		if err := w.lg.outputLocked(w.kind, buf[:n]); err != nil {
			w.pending = w.pending[:0]
			return 0, err
		}
		buf = buf[n:]
	}
	if cap(w.pending) > 2*w.max {
		w.pending = nil // a long write's buffer is not kept
	}
	if len(buf) > cap(w.pending) {
		w.pending = append(make([]byte, 0, w.max), buf...)
	} else {
		// copy, not append: buf may be the end of w.pending itself.
		w.pending = w.pending[:len(buf)]
		copy(w.pending, buf)
	}
	if len(w.pending) == 0 {
		return len(p), nil
	}
	delay := w.lg.store.cfg.FlushDelay
	if delay <= 0 {
		return len(p), w.flushLocked(false)
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(delay, w.flushOnTimer)
	}
	return len(p), nil
}

func (w *outputWriter) flushOnTimer() {
	l := w.lg.l
	l.mu.Lock()
	defer l.mu.Unlock()
	w.timer = nil
	if w.lg.writableLocked() != nil {
		return
	}
	if err := w.flushLocked(false); err != nil {
		w.lg.store.logger.Warn("append output", "step", l.id, "error", err)
	}
}

// flushLocked appends the pending output: all of it with complete set, else
// all but an incomplete UTF-8 sequence at its end, which stays pending.
func (w *outputWriter) flushLocked(complete bool) error {
	n := len(w.pending)
	if !complete {
		if k := incompleteTail(w.pending); k > 0 && utf8.Valid(w.pending[:n-k]) {
			n -= k
		}
	}
	for buf := w.pending[:n]; len(buf) > 0; {
		m := len(buf)
		if m > w.max {
			m = cut(buf, w.max)
		}
		if err := w.lg.outputLocked(w.kind, buf[:m]); err != nil {
			w.pending = w.pending[:0]
			return err
		}
		buf = buf[m:]
	}
	k := copy(w.pending, w.pending[n:])
	w.pending = w.pending[:k]
	return nil
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
