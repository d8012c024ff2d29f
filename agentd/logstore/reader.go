package logstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// ReadOptions says where a Reader starts and whether it follows the log.
type ReadOptions struct {
	// From is the seq of the last frame the reader already has: reading
	// starts at frame From+1. Zero reads from the start.
	From int64
	// Follow makes the reader wait for frames until the exit frame. Without
	// it the reader ends at the last frame that existed when it was opened.
	Follow bool
}

// Reader reads one step's frames in order, each exactly once. A Reader is
// used by one goroutine; any number of Readers may read a log while it is
// written. The owner must Close it.
type Reader struct {
	l      *stepLog
	f      *os.File
	src    committedReader
	br     *bufio.Reader
	follow bool
	// next is the seq of the next frame; end the last one a reader that
	// does not follow returns.
	next, end int64
	line      []byte
	scratch   []byte
}

// readBuffer is the read-ahead of a Reader, and a bound on its memory with
// its line buffer (one frame).
const readBuffer = 64 << 10

// Open returns a Reader of step id's log. It returns ErrNotFound if the
// store has no log of id and ErrBadFrom if opts.From is negative or past the
// log's last frame.
func (s *Store) Open(id cluster.StepID, opts ReadOptions) (*Reader, error) {
	l, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.removed:
		return nil, fmt.Errorf("step %s: %w", id, ErrNotFound)
	case opts.From < 0:
		return nil, fmt.Errorf("%w: from %d: must not be negative", ErrBadFrom, opts.From)
	case opts.From > l.n:
		return nil, fmt.Errorf("%w: from %d: the output of step %s has %d frames so far", ErrBadFrom, opts.From, id, l.n)
	}
	off, err := l.offsetLocked(opts.From + 1)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(l.logPath)
	if err != nil {
		return nil, fmt.Errorf("open output log of step %s: %w", id, err)
	}
	r := &Reader{l: l, f: f, follow: opts.Follow, next: opts.From + 1, end: l.n}
	r.src = committedReader{f: f, off: off, limit: l.size}
	r.br = bufio.NewReaderSize(&r.src, readBuffer)
	return r, nil
}

// offsetLocked returns where frame seq starts; seq may be one past the last
// frame. The caller holds l.mu.
func (l *stepLog) offsetLocked(seq int64) (int64, error) {
	switch {
	case seq == 1:
		return 0, nil
	case seq == l.n+1:
		return l.size, nil
	}
	f, err := os.Open(l.idxPath)
	if err != nil {
		return 0, fmt.Errorf("open output index of step %s: %w", l.id, err)
	}
	defer f.Close()
	var b [idxEntry]byte
	if _, err := f.ReadAt(b[:], (seq-1)*idxEntry); err != nil {
		return 0, fmt.Errorf("%w: read index of frame %d of step %s: %v", ErrCorrupt, seq, l.id, err)
	}
	return int64(binary.LittleEndian.Uint64(b[:])), nil
}

// TryNext returns the JSON encoding of the next frame (without a newline),
// valid until the next call, if there is one. If the reader must wait for
// the writer, it returns a nil frame and a channel that is closed when the
// log changes; call TryNext again then. After the last frame (the exit
// frame, or the last one at Open for a reader that does not follow) it
// returns io.EOF. A follower of a log that is removed before its exit frame
// gets ErrRemoved; of a log whose writer failed, that write's error.
func (r *Reader) TryNext() ([]byte, <-chan struct{}, error) {
	if !r.follow && r.next > r.end {
		return nil, nil, io.EOF
	}
	l := r.l
	l.mu.Lock()
	if r.next > l.n {
		var wait <-chan struct{}
		var err error
		switch {
		case l.finished:
			err = io.EOF
		case l.removed:
			err = fmt.Errorf("step %s: %w", l.id, ErrRemoved)
		case l.err != nil:
			err = fmt.Errorf("output of step %s is incomplete: %w", l.id, l.err)
		default:
			wait = l.waitLocked()
		}
		l.mu.Unlock()
		return nil, wait, err
	}
	r.src.limit = l.size
	l.mu.Unlock()

	r.line = r.line[:0]
	for {
		b, err := r.br.ReadSlice('\n')
		r.line = append(r.line, b...)
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, nil, fmt.Errorf("%w: read frame %d of step %s: %v", ErrCorrupt, r.next, l.id, err)
		}
	}
	line := r.line[:len(r.line)-1]
	r.scratch = framePrefix(r.scratch[:0], r.next)
	if !bytes.HasPrefix(line, r.scratch) {
		return nil, nil, fmt.Errorf("%w: frame %d of step %s is not where its index says", ErrCorrupt, r.next, l.id)
	}
	r.next++
	return line, nil, nil
}

// NextJSON is TryNext that waits, until ctx ends, while the reader follows
// a log with no new frame.
func (r *Reader) NextJSON(ctx context.Context) ([]byte, error) {
	for {
		b, wait, err := r.TryNext()
		if b != nil || err != nil {
			return b, err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Next is NextJSON, decoded.
func (r *Reader) Next(ctx context.Context) (api.Frame, error) {
	var f api.Frame
	b, err := r.NextJSON(ctx)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%w: decode frame %d of step %s: %v", ErrCorrupt, r.next-1, r.l.id, err)
	}
	return f, nil
}

// Close releases the reader's file.
func (r *Reader) Close() error { return r.f.Close() }

// committedReader reads a log file up to its committed length, which the
// Reader raises as frames are committed.
type committedReader struct {
	f          *os.File
	off, limit int64
}

func (c *committedReader) Read(p []byte) (int, error) {
	if c.off >= c.limit {
		return 0, io.EOF
	}
	if rem := c.limit - c.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := c.f.ReadAt(p, c.off)
	c.off += int64(n)
	if err == io.EOF && n == len(p) {
		err = nil
	} else if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
