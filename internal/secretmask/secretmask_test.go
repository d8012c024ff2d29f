package secretmask

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// allForms lists every form of values, written out here independently of
// the package's own list.
func allForms(values []string) []string {
	var out []string
	for _, v := range values {
		if v == "" {
			continue
		}
		b := []byte(v)
		out = append(out, v,
			base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
			base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
			hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)))
	}
	return out
}

// reference masks in the obvious way: mark every byte of every occurrence
// of every form, then write each run of marked bytes as one Mask.
func reference(values []string, in []byte) []byte {
	marked := make([]bool, len(in))
	for _, f := range allForms(values) {
		for i := 0; i+len(f) <= len(in); i++ {
			if string(in[i:i+len(f)]) == f {
				for j := i; j < i+len(f); j++ {
					marked[j] = true
				}
			}
		}
	}
	var out []byte
	for i := range in {
		switch {
		case !marked[i]:
			out = append(out, in[i])
		case i == 0 || !marked[i-1]:
			out = append(out, Mask...)
		}
	}
	return out
}

// mask writes the pieces of in, one Write each, and closes.
func mask(t *testing.T, m *Masker, pieces ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := m.Writer(&buf)
	for _, p := range pieces {
		if n, err := w.Write(p); n != len(p) || err != nil {
			t.Fatalf("Write(%d bytes) = %d, %v, want %d, nil", len(p), n, err, len(p))
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}
	return buf.Bytes()
}

func TestMask(t *testing.T) {
	const s = "hunter2!"
	b64 := base64.StdEncoding.EncodeToString([]byte(s))
	tests := []struct {
		name   string
		values []string
		in     string
		want   string
	}{
		{"value", []string{s}, "pw=" + s + "\n", "pw=***\n"},
		{"base64 std padded", []string{"ab?"}, "x YWI/ y", "x *** y"},
		{"base64 url", []string{"ab?"}, "x YWI_ y", "x *** y"},
		{"base64 std unpadded", []string{"ab?>"}, "x YWI/Pg y", "x *** y"},
		{"base64 std padded whole", []string{"ab?>"}, "x YWI/Pg== y", "x *** y"},
		{"base64 url unpadded", []string{"ab?>"}, "x YWI_Pg y", "x *** y"},
		{"base64 url padded", []string{"ab?>"}, "x YWI_Pg== y", "x *** y"},
		{"base64 of " + s, []string{s}, b64, "***"},
		{"hex lower", []string{s}, "k=" + hex.EncodeToString([]byte(s)), "k=***"},
		{"hex upper", []string{s}, "k=" + strings.ToUpper(hex.EncodeToString([]byte(s))) + ".", "k=***."},
		{"hex mixed case is not a form", []string{"\xab\xcd"}, "aBcD", "aBcD"},
		{"adjacent repeats are one run", []string{s}, s + s + s, "***"},
		{"repeats apart", []string{s}, s + " " + s, "*** ***"},
		{"overlapping repeats", []string{"abab"}, "ababab", "***"},
		{"value inside another", []string{"secret", "topsecretvalue"}, "a topsecretvalue b", "a *** b"},
		{"another inside value", []string{"topsecretvalue", "secret"}, "a secret b", "a *** b"},
		{"overlap of two values", []string{"abcdef", "defghi"}, "xabcdefghix", "x***x"},
		{"short value", []string{"ab"}, "abcab", "***c***"},
		{"one byte", []string{"x"}, "axbxxc", "a***b***c"},
		{"empty values ignored", []string{"", s, ""}, "a" + s, "a***"},
		{"only empty values", []string{"", ""}, "a***b", "a***b"},
		{"prefix at end is kept", []string{s}, "end " + s[:5], "end " + s[:5]},
		{"no match", []string{s}, "nothing here", "nothing here"},
		{"empty input", []string{s}, "", ""},
		{"newlines and binary", []string{s}, "\x00" + s + "\xff\n", "\x00***\xff\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(tt.values)
			if got := string(mask(t, m, []byte(tt.in))); got != tt.want {
				t.Errorf("mask(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if ref := string(reference(tt.values, []byte(tt.in))); ref != tt.want {
				t.Errorf("reference(%q) = %q, want %q", tt.in, ref, tt.want)
			}
			// Every split into two writes gives the same output.
			for i := 0; i <= len(tt.in); i++ {
				if got := string(mask(t, m, []byte(tt.in[:i]), []byte(tt.in[i:]))); got != tt.want {
					t.Errorf("mask(%q | %q) = %q, want %q", tt.in[:i], tt.in[i:], got, tt.want)
				}
			}
			// And so does one byte per write.
			var pieces [][]byte
			for i := range len(tt.in) {
				pieces = append(pieces, []byte{tt.in[i]})
			}
			if got := string(mask(t, m, pieces...)); got != tt.want {
				t.Errorf("mask(%q, a byte a write) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestSplitEveryForm splits each form of a value at every byte boundary
// across two writes, with text around it.
func TestSplitEveryForm(t *testing.T) {
	values := []string{"s3cr3t-t0ken/+?>", "\x00\xfe\xff"}
	m := New(values)
	for _, f := range allForms(values) {
		in := "before " + f + " after"
		for i := 0; i <= len(in); i++ {
			if got := string(mask(t, m, []byte(in[:i]), []byte(in[i:]))); got != "before *** after" {
				t.Errorf("mask(%q | %q) = %q, want %q", in[:i], in[i:], got, "before *** after")
			}
		}
	}
}

func TestPassthrough(t *testing.T) {
	in := make([]byte, 3*chunk+17)
	for i := range in {
		in[i] = byte(i * 7)
	}
	for _, m := range []*Masker{nil, New(nil), New([]string{""})} {
		var buf bytes.Buffer
		w := m.Writer(&buf)
		if n, err := w.Write(in); n != len(in) || err != nil {
			t.Fatalf("Write = %d, %v, want %d, nil", n, err, len(in))
		}
		if !bytes.Equal(buf.Bytes(), in) {
			t.Fatalf("without values, Write wrote %d bytes, not its input", buf.Len())
		}
		if err := w.Close(); err != nil || !bytes.Equal(buf.Bytes(), in) {
			t.Fatalf("Close() = %v, output of %d bytes, want nil and the input", err, buf.Len())
		}
	}
}

// TestHoldBack: after each Write, everything but the last longest-1 bytes
// has reached the underlying writer.
func TestHoldBack(t *testing.T) {
	m := New([]string{"0123456789"}) // longest form: 20 bytes of hex
	const held = 19
	rng := rand.New(rand.NewPCG(1, 2))
	var in, buf bytes.Buffer
	w := m.Writer(&buf)
	for range 200 {
		p := make([]byte, rng.IntN(3*chunk/2))
		for i := range p {
			p[i] = 'a' + byte(rng.IntN(26))
		}
		in.Write(p)
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
		if want := max(0, in.Len()-held); buf.Len() != want {
			t.Fatalf("after %d bytes in, %d bytes out, want %d", in.Len(), buf.Len(), want)
		}
	}
	if err := w.Close(); err != nil || !bytes.Equal(buf.Bytes(), in.Bytes()) {
		t.Fatalf("Close() = %v; output equals input: %v, want nil and true", err, bytes.Equal(buf.Bytes(), in.Bytes()))
	}
}

// TestLargeWrite masks values across the writer's internal chunks.
func TestLargeWrite(t *testing.T) {
	values := []string{"correct horse battery staple", "x9"}
	rng := rand.New(rand.NewPCG(3, 4))
	in := make([]byte, 5*chunk)
	for i := range in {
		in[i] = "abcxyz9 \n"[rng.IntN(9)]
	}
	for _, f := range allForms(values) {
		for range 20 {
			at := rng.IntN(len(in) - len(f))
			copy(in[at:], f)
		}
	}
	for _, f := range allForms(values) { // across the chunk boundaries
		copy(in[chunk-len(f)/2:], f)
		copy(in[3*chunk-1:], f)
	}
	want := reference(values, in)
	if got := mask(t, New(values), in); !bytes.Equal(got, want) {
		t.Fatalf("mask of %d bytes differs from reference (%d and %d bytes)", len(in), len(got), len(want))
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errBroken
	}
	f.n--
	return len(p), nil
}

var errBroken = errors.New("broken pipe")

func TestErrors(t *testing.T) {
	w := New([]string{"abcd"}).Writer(&failWriter{n: 1})
	if _, err := w.Write([]byte("hello world")); err != nil {
		t.Fatalf("first Write = %v, want nil", err)
	}
	if _, err := w.Write([]byte("hello world")); !errors.Is(err, errBroken) {
		t.Fatalf("Write to a failed writer = %v, want %v", err, errBroken)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, errBroken) {
		t.Fatalf("Write after a failure = %v, want %v", err, errBroken)
	}
	if err := w.Close(); !errors.Is(err, errBroken) {
		t.Fatalf("Close after a failure = %v, want %v", err, errBroken)
	}

	w = New([]string{"abcd"}).Writer(io.Discard)
	if err := w.Close(); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close = %v, want %v", err, ErrClosed)
	}
}
