package textdiff

import "testing"

func TestUnified(t *testing.T) {
	for _, tc := range []struct {
		name, a, b, want string
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"added file", "", "x\n", "--- a/f\n+++ b/f\n@@ -0,0 +1,1 @@\n+x\n"},
		{"removed file", "x\ny\n", "", "--- a/f\n+++ b/f\n@@ -1,2 +0,0 @@\n-x\n-y\n"},
		{"one line", "1\n2\n3\n", "1\nTWO\n3\n", "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 1\n-2\n+TWO\n 3\n"},
		{"no newline at the end", "a", "b", "--- a/f\n+++ b/f\n@@ -1,1 +1,1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n", "--- a/f\n+++ b/f\n" +
			"@@ -1,3 +1,4 @@\n+0\n 1\n 2\n 3\n" + "@@ -9,4 +10,3 @@\n 9\n 10\n 11\n-12\n"},
	} {
		if got, _ := Unified("f", tc.a, tc.b, 1<<20); got != tc.want {
			t.Errorf("%s: Unified =\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
	if got, truncated := Unified("f", "", "aaaaaaaaaa\n", 20); !truncated || len(got) != 20 {
		t.Errorf("capped diff = %q, %v; want 20 bytes, truncated", got, truncated)
	}
}
