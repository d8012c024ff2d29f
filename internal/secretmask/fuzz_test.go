package secretmask

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzMask writes in, with a form of a value spliced into it, in the
// pieces that cuts describes, and checks that (1) no form of any value
// appears in the output, (2) an input holding no form and no '*' comes out
// unchanged, and (3) the output is the reference's, whatever the pieces.
// Values holding '*' are skipped: a mask can complete them (package doc).
func FuzzMask(f *testing.F) {
	f.Add([]byte("log line with secret inside\n"), "secret", "other", uint16(9), []byte{3, 0, 7})
	f.Add([]byte("aaaaaaaa"), "aa", "", uint16(0), []byte{1})
	f.Add([]byte("xyz"), "\x00\xff", "abcabc", uint16(0x0102), []byte{})
	f.Add([]byte("topsecretvalue"), "secret", "topsecretvalue", uint16(0), []byte{5, 5})
	f.Fuzz(func(t *testing.T, in []byte, a, b string, splice uint16, cuts []byte) {
		if strings.Contains(a, "*") || strings.Contains(b, "*") {
			t.Skip("a value holding '*'")
		}
		values := []string{a, b}
		forms := allForms(values)
		if len(forms) > 0 && len(in) > 0 && splice&1 == 1 {
			form := forms[int(splice>>1)%len(forms)]
			at := int(splice>>4) % (len(in) + 1)
			in = append(in[:at:at], append([]byte(form), in[at:]...)...)
		}
		var pieces [][]byte
		rest := in
		for _, c := range cuts {
			n := min(int(c), len(rest))
			pieces, rest = append(pieces, rest[:n]), rest[n:]
		}
		pieces = append(pieces, rest)

		out := mask(t, New(values), pieces...)
		for _, f := range forms {
			if bytes.Contains(out, []byte(f)) {
				t.Fatalf("mask(%q) with values %q = %q: holds form %q", in, values, out, f)
			}
		}
		clean := !bytes.Contains(in, []byte("*"))
		for _, f := range forms {
			clean = clean && !bytes.Contains(in, []byte(f))
		}
		if clean && !bytes.Equal(out, in) {
			t.Fatalf("mask(%q) with values %q = %q, want the input: it holds no form", in, values, out)
		}
		if want := reference(values, in); !bytes.Equal(out, want) {
			t.Fatalf("mask(%q) with values %q in %d pieces = %q, want %q", in, values, len(pieces), out, want)
		}
	})
}
