package logstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
	"github.com/rodon-compute/rodon/internal/size"
)

// A tail keeps the last output of a step past its log's head, on disk, in
// two segment files (<step>.tail0 and <step>.tail1) of at most half the
// tail's budget each: output goes to the current segment; when it is full
// the older one is dropped and reused. So the tail keeps between half and
// all of its budget of the latest output, whatever the step prints, in
// bounded disk and no memory. A segment is a sequence of records: a kind
// byte ('o' stdout, 'e' stderr), the data's length as a little-endian
// uint32, the data.
type tail struct {
	paths [2]string
	files [2]*os.File
	// cur indexes the current segment; bytes counts the data in each.
	cur    int
	bytes  [2]int64
	segMax int64
	// total counts all the output the tail was given.
	total int64
	hdr   [5]byte
}

const recordHeader = 5

func (s *Store) newTail(id cluster.StepID, budget int64) (*tail, error) {
	base := s.newStepLog(id).logPath
	t := &tail{segMax: max(budget/2, 1)}
	for i := range t.paths {
		t.paths[i] = fmt.Sprintf("%s%s%d", base[:len(base)-len(logSuffix)], tailSuffix, i)
		f, err := os.OpenFile(t.paths[i], os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			t.remove()
			return nil, fmt.Errorf("create output tail of step %s: %w", id, err)
		}
		t.files[i] = f
	}
	return t, nil
}

// add appends output of kind to the tail, dropping the oldest segment as
// needed.
func (t *tail) add(kind api.FrameKind, p []byte) error {
	for len(p) > 0 {
		room := t.segMax - t.bytes[t.cur]
		if room <= 0 {
			t.cur = 1 - t.cur
			if err := t.files[t.cur].Truncate(0); err != nil {
				return fmt.Errorf("rotate output tail: %w", err)
			}
			if _, err := t.files[t.cur].Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("rotate output tail: %w", err)
			}
			t.bytes[t.cur] = 0
			room = t.segMax
		}
		n := int(min(int64(len(p)), room))
		t.hdr[0] = 'o'
		if kind == api.KindStderr {
			t.hdr[0] = 'e'
		}
		binary.LittleEndian.PutUint32(t.hdr[1:], uint32(n))
		f := t.files[t.cur]
		if _, err := f.Write(t.hdr[:]); err != nil {
			return fmt.Errorf("write output tail: %w", err)
		}
		if _, err := f.Write(p[:n]); err != nil {
			return fmt.Errorf("write output tail: %w", err)
		}
		t.bytes[t.cur] += int64(n)
		t.total += int64(n)
		p = p[n:]
	}
	return nil
}

// kept is the output the tail holds.
func (t *tail) kept() int64 { return t.bytes[0] + t.bytes[1] }

// each calls fn with every record the tail holds, oldest first.
func (t *tail) each(fn func(kind api.FrameKind, data []byte) error) error {
	var data []byte
	for _, i := range []int{1 - t.cur, t.cur} {
		if t.bytes[i] == 0 {
			continue
		}
		br := bufio.NewReaderSize(io.NewSectionReader(t.files[i], 0, 1<<62), 64<<10)
		var hdr [recordHeader]byte
		for {
			if _, err := io.ReadFull(br, hdr[:]); err == io.EOF {
				break
			} else if err != nil {
				return fmt.Errorf("read output tail: %w", err)
			}
			n := int(binary.LittleEndian.Uint32(hdr[1:]))
			if cap(data) < n {
				data = make([]byte, n)
			}
			if _, err := io.ReadFull(br, data[:n]); err != nil {
				return fmt.Errorf("read output tail: %w", err)
			}
			kind := api.KindStdout
			if hdr[0] == 'e' {
				kind = api.KindStderr
			}
			if err := fn(kind, data[:n]); err != nil {
				return err
			}
		}
	}
	return nil
}

// remove closes and deletes the tail's files; it is safe on a nil tail.
func (t *tail) remove() {
	if t == nil {
		return
	}
	for i, f := range t.files {
		if f != nil {
			f.Close()
			t.files[i] = nil
		}
		if t.paths[i] != "" {
			os.Remove(t.paths[i])
		}
	}
}

// appendTailLocked appends the output_truncated event (if the tail dropped
// output) and then the tail's output as frames, coalesced again to frames
// of at most MaxFrameData of one kind. The caller holds lg.l.mu.
func (lg *Log) appendTailLocked() (cluster.Event, bool, error) {
	t := lg.tail
	var ev cluster.Event
	dropped := t.total - t.kept()
	if dropped > 0 {
		ev = cluster.Event{Time: time.Now().UTC(), Kind: cluster.EventOutputTruncated,
			Output: &api.Output{DroppedBytes: dropped, HeadBytes: lg.kept, TailBytes: t.kept(), CapBytes: lg.cap},
			Message: fmt.Sprintf("output truncated: %s dropped between the first %s and the last %s (output cap %s)",
				size.Format(dropped), size.Format(lg.kept), size.Format(t.kept()), size.Format(lg.cap))}
		if err := lg.eventLocked(ev); err != nil {
			return cluster.Event{}, false, err
		}
	}
	max := lg.stdout.max
	var buf []byte
	var bufKind api.FrameKind
	flush := func(all bool) error {
		for len(buf) >= max || all && len(buf) > 0 {
			n := len(buf)
			if n > max {
				n = cut(buf, max)
			}
			if err := lg.frameLocked(bufKind, buf[:n]); err != nil {
				return err
			}
			buf = buf[n:]
		}
		return nil
	}
	err := t.each(func(kind api.FrameKind, data []byte) error {
		if kind != bufKind {
			if err := flush(true); err != nil {
				return err
			}
			bufKind = kind
		}
		buf = append(buf, data...)
		return flush(false)
	})
	if err == nil {
		err = flush(true)
	}
	t.remove()
	if err != nil {
		return cluster.Event{}, false, lg.l.failLocked(fmt.Errorf("append output tail of step %s: %w", lg.l.id, err))
	}
	return ev, dropped > 0, nil
}

// removeStrayTails deletes tail segments that no Log holds (left by an
// agent that stopped without closing its logs).
func (s *Store) removeStrayTails() {
	ents, _ := os.ReadDir(s.cfg.Dir)
	for _, e := range ents {
		if name := e.Name(); len(name) > len(tailSuffix)+1 && name[len(name)-len(tailSuffix)-1:len(name)-1] == tailSuffix {
			if err := os.Remove(s.cfg.Dir + "/" + name); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.logger.Warn("remove stray output tail", "file", name, "error", err)
			}
		}
	}
}
