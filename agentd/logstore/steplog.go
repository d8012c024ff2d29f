package logstore

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// idxEntry is the size of one index entry: the frame's offset in the log.
const idxEntry = 8

// stepLog is the state of one step's log shared by its writer and readers.
type stepLog struct {
	id      cluster.StepID
	logPath string
	idxPath string

	mu sync.Mutex
	// n is the number of committed frames (the last seq) and size the
	// committed length of the log file. A frame is committed once it and
	// its index entry are written; readers never look past size.
	n    int64
	size int64
	// finished is set once the exit frame is committed.
	finished bool
	// idleSince is when the log was last written (its exit frame for a
	// finished log); retention counts from it while no writer holds it.
	idleSince time.Time
	removed   bool
	// err is the first write error; the log takes no frame after it.
	err error
	// writer is the Log handle that may append, nil when none.
	writer *Log
	// logf and idxf are open while a writer holds the log.
	logf, idxf *os.File
	// buf is the writer's encoding buffer, ib its index entry.
	buf []byte
	ib  [idxEntry]byte
	// changed is closed when n, finished, removed or err change; it is
	// made by the first reader that waits and replaced after each close.
	changed chan struct{}
}

// waitLocked returns a channel closed at the log's next change.
func (l *stepLog) waitLocked() <-chan struct{} {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

func (l *stepLog) notifyLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// appendLocked appends one frame, encoded by enc with its seq and time, and
// commits it. The caller holds l.mu and has checked that it may write.
func (l *stepLog) appendLocked(enc func(dst []byte, seq int64, t time.Time) []byte) error {
	if l.err != nil {
		return l.err
	}
	seq := l.n + 1
	now := time.Now().UTC()
	l.buf = append(enc(l.buf[:0], seq, now), '\n')
	if _, err := l.logf.WriteAt(l.buf, l.size); err != nil {
		return l.failLocked(fmt.Errorf("write frame %d of step %s: %w", seq, l.id, err))
	}
	binary.LittleEndian.PutUint64(l.ib[:], uint64(l.size))
	if _, err := l.idxf.WriteAt(l.ib[:], (seq-1)*idxEntry); err != nil {
		return l.failLocked(fmt.Errorf("write index of frame %d of step %s: %w", seq, l.id, err))
	}
	l.n = seq
	l.size += int64(len(l.buf))
	l.idleSince = now
	if cap(l.buf) > 1<<20 {
		// A huge event or exit reason: do not keep its buffer.
		l.buf = nil
	}
	l.notifyLocked()
	return nil
}

func (l *stepLog) failLocked(err error) error {
	l.err = err
	l.notifyLocked()
	return err
}

// diskBytesLocked is what the log's files take: the committed frames and
// their index.
func (l *stepLog) diskBytesLocked() int64 { return l.size + l.n*idxEntry }

// closeFilesLocked closes the writer's files.
func (l *stepLog) closeFilesLocked() error {
	var errs []error
	for _, f := range []*os.File{l.logf, l.idxf} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	l.logf, l.idxf = nil, nil
	l.buf = nil
	return errors.Join(errs...)
}

// remove deletes the log's files and wakes its readers.
func (l *stepLog) remove() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.removed = true
	l.writer = nil
	l.closeFilesLocked()
	l.notifyLocked()
	var errs []error
	for _, p := range []string{l.logPath, l.idxPath} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove output log: %w", err))
		}
	}
	return errors.Join(errs...)
}

// openForAppend opens the log's files for writing, creating them, or
// truncating a torn tail past the committed frames. The caller holds l.mu.
func (l *stepLog) openForAppendLocked(create bool) error {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_EXCL
	}
	logf, err := os.OpenFile(l.logPath, flag, 0o600)
	if err != nil {
		return fmt.Errorf("open output log of step %s: %w", l.id, err)
	}
	idxf, err := os.OpenFile(l.idxPath, flag&^os.O_EXCL|os.O_CREATE, 0o600)
	if err != nil {
		logf.Close()
		return fmt.Errorf("open output index of step %s: %w", l.id, err)
	}
	if err := errors.Join(logf.Truncate(l.size), idxf.Truncate(l.n*idxEntry)); err != nil {
		logf.Close()
		idxf.Close()
		return fmt.Errorf("truncate output log of step %s: %w", l.id, err)
	}
	l.logf, l.idxf = logf, idxf
	return nil
}

// maxScanLine bounds the frame size scan accepts when recovering a log.
const maxScanLine = 64 << 20

// scan recovers the committed state of a log from its files: the last
// frame whose index entry points at a complete line with the right seq.
func (l *stepLog) scan() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	logf, err := os.Open(l.logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	fi, err := logf.Stat()
	if err != nil {
		return err
	}
	l.idleSince = fi.ModTime().UTC()
	idx, err := os.ReadFile(l.idxPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for k := int64(len(idx) / idxEntry); k >= 1; k-- {
		off := int64(binary.LittleEndian.Uint64(idx[(k-1)*idxEntry:]))
		if off >= fi.Size() {
			continue
		}
		br := bufio.NewReader(io.NewSectionReader(logf, off, min(fi.Size()-off, maxScanLine)))
		line, err := br.ReadBytes('\n')
		if err != nil {
			continue
		}
		var f api.Frame
		if json.Unmarshal(line, &f) != nil || f.Seq != k {
			continue
		}
		l.n, l.size = k, off+int64(len(line))
		if f.Kind == api.KindExit {
			l.finished = true
			l.idleSince = f.Time
		}
		if k < int64(len(idx)/idxEntry) || l.size < fi.Size() {
			return fmt.Errorf("%w: torn tail after frame %d", ErrCorrupt, k)
		}
		return nil
	}
	if fi.Size() > 0 {
		return fmt.Errorf("%w: no complete frame", ErrCorrupt)
	}
	return nil
}

// framePrefix is how every line of a log starts, for a cheap check that a
// reader is where it thinks it is.
func framePrefix(dst []byte, seq int64) []byte {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	return append(dst, ',')
}
