package tools

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMatchLines: searching the whole text finds exactly the lines a
// search line by line finds.
func TestMatchLines(t *testing.T) {
	texts := []string{
		"", "\n", "\n\n\n", "a", "a\n", "def main():\n    pass\n\ndef other():\n",
		"one two\r\nthree\r\n\r\nfour", "aXb\na\nb\nab\n", "xx\n\nx\nyxy\n", "word words sword\nword\n",
		"needle 1\nhay\nneedle 22\nhay needle\n", "a\nb\na b\n",
	}
	patterns := []string{"^def", "a$", "x*", "o", `needle \d+`, "[^x]+", "a.b", "(?s)a.b", `\Aa`, "^$", `\bword\b`, "a[^z]*b", `b\n`, "(?i)A", "$", "^"}
	for _, p := range patterns {
		re := regexp.MustCompile(p)
		whole := wholeText(p)
		for _, s := range texts {
			var want, got []string
			matchLines(re, nil, s, func(n int, l string) { want = append(want, fmt.Sprintf("%d:%s", n, l)) })
			matchLines(re, whole, s, func(n int, l string) { got = append(got, fmt.Sprintf("%d:%s", n, l)) })
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("matchLines(%q, %q) whole (-line by line +whole):\n%s", p, s, diff)
			}
		}
	}
}

// TestMatchLinesSpanning: a pattern whose matches span lines and match
// no line costs one search of the text, not one per line (which would
// take minutes here).
func TestMatchLinesSpanning(t *testing.T) {
	s := strings.Repeat("a\n", 100_000) + "b\n"
	re := regexp.MustCompile("a[^z]*b")
	n := 0
	matchLines(re, wholeText(re.String()), s, func(int, string) { n++ })
	if n != 0 {
		t.Errorf("%d lines match, want none", n)
	}
}

func FuzzMatchLines(f *testing.F) {
	f.Add("a.b", "aXb\na\nb\n")
	f.Add("^x*$", "\nxx\n\nx")
	f.Fuzz(func(t *testing.T, p, s string) {
		re, err := regexp.Compile(p)
		if err != nil || len(s) > 2000 {
			return
		}
		var want, got []string
		matchLines(re, nil, s, func(n int, l string) { want = append(want, fmt.Sprintf("%d:%s", n, l)) })
		matchLines(re, wholeText(p), s, func(n int, l string) { got = append(got, fmt.Sprintf("%d:%s", n, l)) })
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("matchLines(%q, %q) (-line by line +whole):\n%s", p, s, diff)
		}
	})
}
