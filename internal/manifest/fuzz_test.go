package manifest

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzClean: whatever a caller sends, a path Clean accepts is relative,
// has no "." or ".." component, no NUL or control character, and is its
// own clean form.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"a/b", "/workspace/x", "../x", "%2e%2e/x", "a\x00b", "./a", "a//b", "/etc/passwd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := Clean(in, DefaultLimits)
		if err != nil {
			return
		}
		if strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
			t.Fatalf("Clean(%q) = %q: absolute or holds NUL", in, p)
		}
		for _, n := range strings.Split(p, "/") {
			if n == "" || n == "." || n == ".." {
				t.Fatalf("Clean(%q) = %q: component %q", in, p, n)
			}
		}
		if again, err := Clean(p, DefaultLimits); err != nil || again != p {
			t.Fatalf("Clean(Clean(%q)) = %q, %v; want %q", in, again, err, p)
		}
	})
}

// FuzzDecode: Decode never panics, and a manifest it accepts encodes to
// bytes that decode to the same digest.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"entries":[{"path":"a","type":"file","mode":420,"size":1,"sha256":"` + strings.Repeat("a", 64) + `"}]}`))
	f.Add([]byte(`{"entries":[{"path":"l","type":"symlink","mode":511,"target":"../x"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(bytes.NewReader(b), MaxEncodedBytes, DefaultLimits)
		if err != nil {
			return
		}
		enc, d := Encode(m)
		m2, err := Decode(bytes.NewReader(enc), MaxEncodedBytes, DefaultLimits)
		if err != nil {
			t.Fatalf("re-decode of an accepted manifest: %v", err)
		}
		if _, d2 := Encode(m2); d2 != d {
			t.Fatalf("digest changed over a round trip")
		}
	})
}
