package logstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/cluster"
)

// TestConcurrentWritersAndReaders writes stdout, stderr and events from
// three goroutines while readers that join at different frames follow, and
// checks that every reader sees the same frames, in order, without a gap or
// a duplicate, and that each stream's bytes arrive in the order written.
func TestConcurrentWritersAndReaders(t *testing.T) {
	s := newTestStore(t, nil)
	const id = "concurrent"
	lg := mustCreate(t, s, id)
	ctx := t.Context()

	const lines = 6000
	var want [2]bytes.Buffer
	for i := range lines {
		fmt.Fprintf(&want[0], "out %05d\n", i)
		fmt.Fprintf(&want[1], "err %05d\n", i)
	}

	// The reference reader starts before the first frame; the others join
	// once it has seen their starting frame.
	starts := []int64{0, 1, 10, 700, 2500, 3000}
	joined := make([]chan struct{}, len(starts))
	for i := range joined {
		joined[i] = make(chan struct{})
	}
	got := make([][]api.Frame, len(starts))
	var readers sync.WaitGroup
	ref := mustOpen(t, s, id, ReadOptions{Follow: true})
	readers.Go(func() {
		next := 1
		for {
			f, err := ref.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Errorf("reference Next() = %v", err)
				break
			}
			got[0] = append(got[0], f)
			for ; next < len(starts) && f.Seq >= starts[next]; next++ {
				close(joined[next])
			}
		}
		for ; next < len(starts); next++ {
			close(joined[next])
		}
	})
	for i := 1; i < len(starts); i++ {
		readers.Go(func() {
			<-joined[i]
			r, err := s.Open(id, ReadOptions{From: starts[i], Follow: true})
			if err != nil {
				t.Errorf("Open(from=%d) = %v", starts[i], err)
				return
			}
			defer r.Close()
			for {
				f, err := r.Next(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					t.Errorf("Next() from %d = %v", starts[i], err)
					return
				}
				got[i] = append(got[i], f)
			}
		})
	}

	var writers sync.WaitGroup
	for k, w := range []io.Writer{lg.Stdout(), lg.Stderr()} {
		writers.Go(func() {
			b := want[k].Bytes()
			rng := rand.New(rand.NewPCG(uint64(k), 1))
			for len(b) > 0 {
				n := min(len(b), 1+rng.IntN(64))
				if _, err := w.Write(b[:n]); err != nil {
					t.Errorf("Write() = %v", err)
					return
				}
				b = b[n:]
			}
		})
	}
	writers.Go(func() {
		for i := range 100 {
			if err := lg.Event(cluster.Event{Time: time.Now().UTC(), Kind: cluster.EventWarning, Message: fmt.Sprint("event ", i)}); err != nil {
				t.Errorf("Event() = %v", err)
				return
			}
		}
	})
	writers.Wait()
	if err := lg.Exit(exitRecord(id, 3)); err != nil {
		t.Fatalf("Exit() = %v", err)
	}
	readers.Wait()
	if t.Failed() {
		return
	}

	all := got[0]
	checkSeqs(t, all, 0)
	if int64(len(all)) < starts[len(starts)-1] {
		t.Fatalf("log has %d frames, want more than %d for the test to mean something", len(all), starts[len(starts)-1])
	}
	for i, from := range starts {
		if diff := diffFrames(all[from:], got[i]); diff != "" {
			t.Errorf("reader from %d saw other frames than the reference (-ref +got):\n%s", from, diff)
		}
	}
	for k, kind := range []api.FrameKind{api.KindStdout, api.KindStderr} {
		if got := output(t, all, kind); !bytes.Equal(got, want[k].Bytes()) {
			t.Errorf("%s = %d bytes, want the %d bytes written in order", kind, len(got), want[k].Len())
		}
	}
	var events int
	for _, f := range all {
		if f.Kind == api.KindEvent {
			e, err := f.Event()
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprint("event ", events); e.Message != want {
				t.Errorf("event %d = %q, want %q", events, e.Message, want)
			}
			events++
		}
	}
	if events != 100 {
		t.Errorf("log has %d events, want 100", events)
	}
	x, err := all[len(all)-1].Exit()
	if err != nil || x.ExitCode == nil || *x.ExitCode != 3 || x.State != "exited" {
		t.Errorf("exit frame = %+v, %v; want state exited, exit code 3", x, err)
	}
}

// TestReadAfterExit reads a finished log from every position.
func TestReadAfterExit(t *testing.T) {
	s := newTestStore(t, nil)
	const id = "finished"
	lg := mustCreate(t, s, id)
	for i := range 10 {
		mustWrite(t, lg.Stdout(), fmt.Appendf(nil, "line %d\n", i))
	}
	if err := lg.Exit(exitRecord(id, 0)); err != nil {
		t.Fatalf("Exit() = %v", err)
	}
	all := readAll(t, t.Context(), mustOpen(t, s, id, ReadOptions{Follow: true}))
	checkSeqs(t, all, 0)
	if len(all) != 11 {
		t.Fatalf("read %d frames, want 11", len(all))
	}
	for from := int64(0); from <= 11; from++ {
		for _, follow := range []bool{true, false} {
			got := readAll(t, t.Context(), mustOpen(t, s, id, ReadOptions{From: from, Follow: follow}))
			if diff := diffFrames(all[from:], got); diff != "" {
				t.Errorf("Open(from=%d, follow=%v) read other frames (-want +got):\n%s", from, follow, diff)
			}
		}
	}
	for _, from := range []int64{-1, 12, 1 << 40} {
		if _, err := s.Open(id, ReadOptions{From: from}); !errors.Is(err, ErrBadFrom) {
			t.Errorf("Open(from=%d) = %v, want ErrBadFrom", from, err)
		}
	}
	if _, err := s.Open("nope", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open(nope) = %v, want ErrNotFound", err)
	}
}

// TestNoFollow ends a reader of a live log at the frames that existed when
// it was opened.
func TestNoFollow(t *testing.T) {
	s := newTestStore(t, nil)
	lg := mustCreate(t, s, "live")
	mustWrite(t, lg.Stdout(), []byte("one\n"))
	mustWrite(t, lg.Stderr(), []byte("two\n"))
	r := mustOpen(t, s, "live", ReadOptions{})
	mustWrite(t, lg.Stdout(), []byte("three\n"))
	got := readAll(t, t.Context(), r)
	if len(got) != 2 || string(output(t, got, api.KindStdout)) != "one\n" || string(output(t, got, api.KindStderr)) != "two\n" {
		t.Errorf("reader without follow read %+v, want the first two frames", got)
	}
}

// TestFollowerWaits checks that a follower blocks until the writer appends
// and is woken by it.
func TestFollowerWaits(t *testing.T) {
	s := newTestStore(t, nil)
	lg := mustCreate(t, s, "wait")
	r := mustOpen(t, s, "wait", ReadOptions{Follow: true})
	b, wait, err := r.TryNext()
	if b != nil || wait == nil || err != nil {
		t.Fatalf("TryNext() on an empty log = %q, %v, %v; want a wait channel", b, wait, err)
	}
	select {
	case <-wait:
		t.Fatal("wait channel closed before any write")
	default:
	}
	mustWrite(t, lg.Stdout(), []byte("hi"))
	select {
	case <-wait:
	case <-time.After(5 * time.Second):
		t.Fatal("wait channel not closed by a write")
	}
	f, err := r.Next(t.Context())
	if err != nil || string(output(t, []api.Frame{f}, api.KindStdout)) != "hi" {
		t.Fatalf("Next() = %+v, %v; want the frame written", f, err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Next() with nothing to read = %v, want the context's error", err)
	}
}

// TestByteExactResume writes 10 MB of random bytes, mostly invalid UTF-8,
// through the stdout writer in uneven writes, reads part of it, resumes from
// the last frame read and checks the joined output is the input.
func TestByteExactResume(t *testing.T) {
	s := newTestStore(t, nil)
	const id = "random"
	lg := mustCreate(t, s, id)
	rng := rand.New(rand.NewPCG(7, 7))
	in := make([]byte, 10<<20)
	for i := range in {
		in[i] = byte(rng.Uint32())
	}
	// Some text too, with multi-byte characters split across writes.
	copy(in[5<<20:], bytes.Repeat([]byte("grüße 世界 🙂\n"), 10000))

	var first []api.Frame
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, err := s.Open(id, ReadOptions{Follow: true})
		if err != nil {
			t.Errorf("Open() = %v", err)
			return
		}
		defer r.Close()
		for range 100 {
			f, err := r.Next(t.Context())
			if err != nil {
				t.Errorf("Next() = %v", err)
				return
			}
			first = append(first, f)
		}
	}()
	for b := in; len(b) > 0; {
		n := min(len(b), 1+rng.IntN(100<<10))
		mustWrite(t, lg.Stdout(), b[:n])
		b = b[n:]
	}
	if err := lg.Exit(exitRecord(id, 0)); err != nil {
		t.Fatalf("Exit() = %v", err)
	}
	<-done
	if t.Failed() {
		return
	}
	rest := readAll(t, t.Context(), mustOpen(t, s, id, ReadOptions{From: first[len(first)-1].Seq, Follow: true}))
	all := append(first, rest...)
	checkSeqs(t, all, 0)
	got := output(t, all, api.KindStdout)
	if !bytes.Equal(got, in) {
		i := 0
		for i < min(len(got), len(in)) && got[i] == in[i] {
			i++
		}
		t.Fatalf("joined output = %d bytes, want the %d bytes written; first difference at byte %d", len(got), len(in), i)
	}
	var text, binary int
	for _, f := range all[:len(all)-1] {
		if len(f.Data) > 2*s.cfg.MaxFrameData {
			t.Errorf("frame %d has %d bytes of data, want at most the base64 of %d", f.Seq, len(f.Data), s.cfg.MaxFrameData)
		}
		if f.Encoding == api.EncodingBase64 {
			binary++
		} else {
			text++
		}
	}
	if text == 0 || binary == 0 {
		t.Errorf("got %d text and %d base64 frames, want both", text, binary)
	}
}

// TestTextStaysText writes UTF-8 one byte at a time and in writes that cut
// characters, and checks that no frame needed base64.
func TestTextStaysText(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.MaxFrameData = 100 })
	lg := mustCreate(t, s, "text")
	text := bytes.Repeat([]byte("aé世🙂"), 200)
	for i := range 20 {
		mustWrite(t, lg.Stdout(), text[i:i+1])
	}
	for b := text[20:]; len(b) > 0; {
		n := min(len(b), 7)
		mustWrite(t, lg.Stdout(), b[:n])
		b = b[n:]
	}
	mustWrite(t, lg.Stderr(), []byte("\xe4\xb8")) // half of 世, flushed by Exit
	if err := lg.Exit(exitRecord("text", 0)); err != nil {
		t.Fatal(err)
	}
	all := readAll(t, t.Context(), mustOpen(t, s, "text", ReadOptions{}))
	for _, f := range all {
		if f.Kind == api.KindStdout && f.Encoding != "" {
			t.Errorf("stdout frame %d has encoding %q, want text", f.Seq, f.Encoding)
		}
	}
	if got := output(t, all, api.KindStdout); !bytes.Equal(got, text) {
		t.Errorf("stdout = %q, want %q", got, text)
	}
	if got := output(t, all, api.KindStderr); string(got) != "\xe4\xb8" {
		t.Errorf("stderr = %q, want the incomplete sequence flushed at exit", got)
	}
}

func TestCutAndIncompleteTail(t *testing.T) {
	tests := []struct {
		in       string
		max      int
		wantCut  int
		wantTail int
	}{
		{"abcdef", 3, 3, 0},
		{"ab世def", 3, 2, 0},                // 世 is 3 bytes at 2..4
		{"ab世def", 4, 2, 0},                //
		{"ab世def", 5, 5, 0},                //
		{"a🙂b", 2, 1, 0},                   // 🙂 is 4 bytes at 1..4
		{"a🙂b", 4, 1, 0},                   //
		{"\x80\x80\x80\x80\x80x", 3, 3, 0}, // no boundary near: cut at max
		{"ab\xe4", 1, 1, 1},
		{"ab\xe4\xb8", 1, 1, 2},
		{"ab\xf0\x9f\x99", 1, 1, 3},
		{"ab\xff", 1, 1, 0},         // invalid, not incomplete
		{"ab\xe4\xb8\x96", 1, 1, 0}, // complete
	}
	for _, tt := range tests {
		if tt.max < len(tt.in) {
			if got := cut([]byte(tt.in), tt.max); got != tt.wantCut {
				t.Errorf("cut(%q, %d) = %d, want %d", tt.in, tt.max, got, tt.wantCut)
			}
		}
		if got := incompleteTail([]byte(tt.in)); got != tt.wantTail {
			t.Errorf("incompleteTail(%q) = %d, want %d", tt.in, got, tt.wantTail)
		}
	}
}

// TestWriteAfterEnd checks which writes fail after Exit, Close and Remove,
// and when Create refuses.
func TestWriteAfterEnd(t *testing.T) {
	s := newTestStore(t, nil)

	lg := mustCreate(t, s, "exited")
	if _, err := s.Create("exited"); !errors.Is(err, ErrExists) {
		t.Errorf("Create() of a log being written = %v, want ErrExists", err)
	}
	if err := lg.Exit(exitRecord("exited", 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Stdout().Write([]byte("x")); !errors.Is(err, ErrFinished) {
		t.Errorf("Write() after Exit = %v, want ErrFinished", err)
	}
	if err := lg.Event(cluster.Event{Kind: "late"}); !errors.Is(err, ErrFinished) {
		t.Errorf("Event() after Exit = %v, want ErrFinished", err)
	}
	if err := lg.Exit(exitRecord("exited", 0)); !errors.Is(err, ErrFinished) {
		t.Errorf("second Exit() = %v, want ErrFinished", err)
	}
	if err := lg.Close(); err != nil {
		t.Errorf("Close() after Exit = %v, want nil", err)
	}
	if _, err := s.Create("exited"); !errors.Is(err, ErrExists) {
		t.Errorf("Create() of a finished log = %v, want ErrExists", err)
	}

	lg = mustCreate(t, s, "closed")
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Stderr().Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Write() after Close = %v, want ErrClosed", err)
	}

	lg = mustCreate(t, s, "removed")
	r := mustOpen(t, s, "removed", ReadOptions{Follow: true})
	errc := make(chan error, 1)
	go func() {
		_, err := r.Next(t.Context())
		errc <- err
	}()
	if err := s.Remove("removed"); err != nil {
		t.Fatalf("Remove() = %v", err)
	}
	if err := <-errc; !errors.Is(err, ErrRemoved) {
		t.Errorf("follower's Next() after Remove = %v, want ErrRemoved", err)
	}
	if _, err := lg.Stdout().Write([]byte("x")); !errors.Is(err, ErrRemoved) {
		t.Errorf("Write() after Remove = %v, want ErrRemoved", err)
	}
	if _, err := s.Open("removed", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open() after Remove = %v, want ErrNotFound", err)
	}
	if err := s.Remove("removed"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove() = %v, want ErrNotFound", err)
	}
	for _, id := range []cluster.StepID{"", "../x", ".hidden", "a/b", "-x"} {
		if _, err := s.Create(id); err == nil {
			t.Errorf("Create(%q) = nil error, want one", id)
		}
	}
}

// TestRecover opens a store over the logs of an earlier one, continues an
// unfinished log and drops a torn tail.
func TestRecover(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, func(c *Config) { c.Dir = dir })
	done := mustCreate(t, s, "done")
	mustWrite(t, done.Stdout(), []byte("done\n"))
	if err := done.Exit(exitRecord("done", 0)); err != nil {
		t.Fatal(err)
	}
	lg := mustCreate(t, s, "adopted")
	mustWrite(t, lg.Stdout(), []byte("before\n"))
	mustWrite(t, lg.Stdout(), []byte("restart\n"))
	lg.Close()
	// A crash after writing a frame but before its index entry, and a
	// torn index entry.
	f, err := os.OpenFile(filepath.Join(dir, "adopted.log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":3,"kind":"stdout","data":"torn`)
	f.Close()
	f, err = os.OpenFile(filepath.Join(dir, "adopted.idx"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{1, 2, 3})
	f.Close()

	s2 := newTestStore(t, func(c *Config) { c.Dir = dir })
	got := readAll(t, t.Context(), mustOpen(t, s2, "done", ReadOptions{Follow: true}))
	checkSeqs(t, got, 0)
	if string(output(t, got, api.KindStdout)) != "done\n" {
		t.Errorf("recovered finished log = %+v", got)
	}
	if _, err := s2.Create("done"); !errors.Is(err, ErrExists) {
		t.Errorf("Create() of a recovered finished log = %v, want ErrExists", err)
	}
	r := mustOpen(t, s2, "adopted", ReadOptions{From: 1, Follow: true})
	lg2 := mustCreate(t, s2, "adopted")
	mustWrite(t, lg2.Stdout(), []byte("after\n"))
	if err := lg2.Exit(exitRecord("adopted", 0)); err != nil {
		t.Fatal(err)
	}
	rest := readAll(t, t.Context(), r)
	checkSeqs(t, rest, 1)
	all := readAll(t, t.Context(), mustOpen(t, s2, "adopted", ReadOptions{}))
	checkSeqs(t, all, 0)
	if got, want := string(output(t, all, api.KindStdout)), "before\nrestart\nafter\n"; got != want {
		t.Errorf("continued log's stdout = %q, want %q", got, want)
	}
}

// TestCorruptFrame detects a frame that is not where the index says.
func TestCorruptFrame(t *testing.T) {
	s := newTestStore(t, nil)
	lg := mustCreate(t, s, "corrupt")
	for _, line := range []string{"one\n", "two\n", "three\n"} {
		mustWrite(t, lg.Stdout(), []byte(line))
	}
	if err := lg.Exit(exitRecord("corrupt", 0)); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(s.cfg.Dir, "corrupt.log"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	second := bytes.IndexByte(b, '\n') + 1
	f.WriteAt([]byte(`{"seq":9`), int64(second))
	f.Close()
	r := mustOpen(t, s, "corrupt", ReadOptions{From: 1})
	if _, err := r.Next(t.Context()); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Next() at a corrupt frame = %v, want ErrCorrupt", err)
	}
}
