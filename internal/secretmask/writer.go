package secretmask

import (
	"bytes"
	"errors"
	"io"
)

// ErrClosed is returned by a Write after Close.
var ErrClosed = errors.New("secretmask: write after close")

// chunk is how many bytes of a Write are scanned at a time: it bounds the
// writer's memory and the size of its writes to the underlying writer.
const chunk = 64 << 10

// Writer returns a writer that masks what is written to it and writes the
// result to w, one Write of w for each chunk of up to 64 KiB of input
// (longer or shorter where masks replace runs). It holds back at most
// the longest form minus one bytes until a later Write shows whether they
// begin a form; Close writes them and must be called at the end of the
// stream. Close does not close w:
// the caller owns w. A Write reports len(p) on success; after w fails,
// every Write and Close returns w's error. On a nil Masker, or one without
// values, the writer passes the bytes through unchanged.
func (m *Masker) Writer(w io.Writer) io.WriteCloser {
	if m == nil {
		m = &Masker{}
	}
	return &writer{m: m, w: w}
}

// span is the half-open range [start, end) of buf covered by a match.
type span struct{ start, end int }

// writer is the stream returned by Masker.Writer.
type writer struct {
	m *Masker
	w io.Writer

	// buf holds the tail held back from the previous Write, then the
	// chunk being scanned.
	buf []byte
	// covered is how many leading bytes of buf a match that began in an
	// earlier chunk already covers (its beginning is gone from buf).
	covered int
	// inRun reports whether the output written so far ends with a mask
	// whose run reaches the byte just before buf[0].
	inRun bool

	out   []byte // scratch: the masked output of one chunk
	spans []span // scratch: the matches of one chunk

	err    error // sticky: the first error of w
	closed bool
}

func (x *writer) Write(p []byte) (int, error) {
	if x.err != nil {
		return 0, x.err
	}
	if x.closed {
		return 0, ErrClosed
	}
	if x.m.longest == 0 {
		n, err := x.w.Write(p)
		if err != nil {
			x.err = err
		}
		return n, err
	}
	for n := 0; n < len(p); {
		k := min(len(p)-n, chunk)
		x.buf = append(x.buf, p[n:n+k]...)
		if err := x.emit(false); err != nil {
			return n, err
		}
		n += k
	}
	return len(p), nil
}

// Close writes the held tail, masked where it completes a form and as is
// where it only begins one. It does not close the underlying writer. A
// second Close does nothing.
func (x *writer) Close() error {
	if x.closed {
		return x.err
	}
	x.closed = true
	if x.err != nil || len(x.buf) == 0 {
		return x.err
	}
	return x.emit(true)
}

// emit masks buf and writes the part of it that no later byte can change,
// everything when final, keeping the rest in buf.
//
// A match that ends after buf starts in buf's last longest-1 bytes, at or
// after cut, so whether a byte before cut is covered depends only on
// matches that lie wholly in buf. A match that starts before cut and ends
// after it leaves its remainder as covered for the next call, and a run
// that reaches cut is continued, without a second mask, by a match that
// starts there.
func (x *writer) emit(final bool) error {
	cut := len(x.buf)
	if !final {
		cut -= x.m.longest - 1
	}
	if cut <= 0 {
		return nil
	}
	spans := x.spans[:0]
	if x.covered > 0 {
		spans = append(spans, span{0, x.covered})
	}
	// Matches starting before cut, in order of their start, each merged
	// into the previous span where they overlap or touch it. The others
	// are found again, whole, in the next call.
	m, buf := x.m, x.buf
	end := min(cut, len(buf)-1) // the last byte has no pair
	for i, c := range buf[:end] {
		if p := pair(c, buf[i+1]); m.pairs[p/64]&(1<<(p%64)) != 0 {
			spans = m.matchAt(spans, buf, i)
		}
	}
	if end < cut && m.single[buf[end]] {
		spans = addSpan(spans, span{end, end + 1})
	}

	out, pos, run, carry := x.out[:0], 0, x.inRun, 0
	for _, s := range spans { // in order, apart from each other
		if s.start > pos {
			out = append(out, x.buf[pos:s.start]...)
			run = false
		}
		if !run {
			out = append(out, Mask...)
			run = true
		}
		if s.end > cut {
			carry, s.end = s.end-cut, cut
		}
		pos = s.end
	}
	if pos < cut {
		out = append(out, x.buf[pos:cut]...)
		run = false
	}
	x.spans, x.out = spans[:0], out[:0]
	x.buf = append(x.buf[:0], x.buf[cut:]...)
	x.covered, x.inRun = carry, run

	if len(out) == 0 {
		return nil
	}
	n, err := x.w.Write(out)
	if err == nil && n < len(out) {
		err = io.ErrShortWrite
	}
	if err != nil {
		x.err = err
	}
	return err
}

// matchAt adds to spans the forms that occur at buf[i], where buf[i:i+2]
// is in m.pairs.
func (m *Masker) matchAt(spans []span, buf []byte, i int) []span {
	if m.single[buf[i]] {
		spans = addSpan(spans, span{i, i + 1})
	}
	for _, f := range m.byPair[pair(buf[i], buf[i+1])] {
		if bytes.HasPrefix(buf[i:], f) {
			spans = addSpan(spans, span{i, i + len(f)})
		}
	}
	return spans
}

// addSpan appends s to spans, which are in order of their start and no
// later than s, or extends the last span where s overlaps or touches it.
func addSpan(spans []span, s span) []span {
	if last := len(spans) - 1; last >= 0 && s.start <= spans[last].end {
		spans[last].end = max(spans[last].end, s.end)
		return spans
	}
	return append(spans, s)
}
