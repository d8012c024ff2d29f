package textdiff

import (
	"strings"
	"testing"
)

// TestPatchRoundTrip: the diff Unified makes applies to its old side and
// gives its new side.
func TestPatchRoundTrip(t *testing.T) {
	var long, longer strings.Builder
	for i := range 40 {
		long.WriteString(strings.Repeat("x", i%7) + "\n")
		if i%9 == 3 {
			longer.WriteString("inserted\n")
		}
		if i%11 != 5 {
			longer.WriteString(strings.Repeat("x", i%7) + "\n")
		}
	}
	for _, tc := range []struct{ name, a, b string }{
		{"one line", "1\n2\n3\n", "1\nTWO\n3\n"},
		{"added file", "", "x\ny\n"},
		{"removed file", "x\ny\n", ""},
		{"no newline at the end", "a\nb", "a\nc"},
		{"newline added at the end", "a", "a\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n"},
		{"repeated lines", long.String(), longer.String()},
	} {
		d, _ := Unified("f", tc.a, tc.b, 1<<20)
		ps, err := ParsePatch(d)
		if err != nil {
			t.Errorf("%s: ParsePatch(%q) = %v", tc.name, d, err)
			continue
		}
		if len(ps) != 1 || ps[0].Path() != "f" {
			t.Errorf("%s: ParsePatch = %+v, want one patch of f", tc.name, ps)
			continue
		}
		got, err := ps[0].Apply(tc.a)
		if err != nil || got != tc.b {
			t.Errorf("%s: Apply = %q, %v; want %q\npatch:\n%s", tc.name, got, err, tc.b, d)
		}
	}
}

func TestParseGitPatch(t *testing.T) {
	patch := `diff --git a/data/sales.csv b/data/sales.csv
index 3b18e51..a9c4d1e 100644
--- a/data/sales.csv
+++ b/data/sales.csv
@@ -1,3 +1,4 @@
 region,total
 north,10
-south,20
+south,25
+east,5
diff --git a/new.txt b/new.txt
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
\ No newline at end of file
`
	ps, err := ParsePatch(patch)
	if err != nil || len(ps) != 3 {
		t.Fatalf("ParsePatch = %+v, %v; want 3 files", ps, err)
	}
	if ps[0].Old != "data/sales.csv" || ps[0].New != "data/sales.csv" || ps[1].Old != "" || ps[1].New != "new.txt" || ps[2].New != "" || ps[2].Path() != "old.txt" {
		t.Errorf("paths = %+v", ps)
	}
	for i, tc := range []struct{ in, want string }{
		{"region,total\nnorth,10\nsouth,20\n", "region,total\nnorth,10\nsouth,25\neast,5\n"},
		{"", "hello\n"},
		{"bye", ""},
	} {
		if got, err := ps[i].Apply(tc.in); err != nil || got != tc.want {
			t.Errorf("Apply %d = %q, %v; want %q", i, got, err, tc.want)
		}
	}
	// Moved lines: the hunk applies where its lines are now.
	if got, err := ps[0].Apply("# header\n\nregion,total\nnorth,10\nsouth,20\n"); err != nil || got != "# header\n\nregion,total\nnorth,10\nsouth,25\neast,5\n" {
		t.Errorf("Apply to moved lines = %q, %v", got, err)
	}
	if _, err := ps[0].Apply("region,total\nnorth,11\nsouth,20\n"); err == nil || !strings.Contains(err.Error(), "does not apply") {
		t.Errorf("Apply to other lines = %v, want it not to apply", err)
	}
}

func TestParsePatchRefuses(t *testing.T) {
	for _, tc := range []struct{ patch, want string }{
		{"", "no file in the patch"},
		{"just words\n", "no file in the patch"},
		{"--- a/x\n", "without its +++ line"},
		{"--- a/x\n+++ b/x\n", "has no hunk"},
		{"--- a/x\n+++ b/x\n@@ -1 +1 @@\n", "the hunk ends after 0 old and 0 new lines"},
		{"--- a/x\n+++ b/x\n@@ one @@\n", "hunk header"},
		{"--- a/x\n+++ b/x\n@@ -1 +1 @@\n*x\n", "want a line starting with"},
		{"diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n", "renames and copies are not taken"},
		{"diff --git a/x b/x\nBinary files a/x and b/x differ\n", "binary patches are not taken"},
		{"--- /dev/null\n+++ /dev/null\n@@ -0,0 +0,0 @@\n", "both sides are /dev/null"},
	} {
		if _, err := ParsePatch(tc.patch); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePatch(%q) = %v, want %q", tc.patch, err, tc.want)
		}
	}
}

// FuzzParsePatch: whatever the patch, parsing and applying it never
// panics, and a patch Unified made applies.
func FuzzParsePatch(f *testing.F) {
	f.Add("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", "a\n")
	f.Add("--- /dev/null\n+++ b/x\n@@ -0,0 +1,2 @@\n+a\n+b\n\\ No newline at end of file\n", "")
	f.Add("--- a/x\n+++ b/x\n@@ -1,2 +1,1 @@\n a\n\n-b\n", "a\n\nb\n")
	f.Fuzz(func(t *testing.T, patch, text string) {
		ps, err := ParsePatch(patch)
		if err == nil {
			for _, p := range ps {
				p.Apply(text)
			}
		}
		if !IsText(text) || len(text) > 4096 {
			return
		}
		b := strings.ToUpper(text) + "tail\n"
		d, _ := Unified("f", text, b, 1<<20)
		ps, err = ParsePatch(d)
		if err != nil {
			t.Fatalf("ParsePatch(Unified(%q, %q)) = %v", text, b, err)
		}
		if got, err := ps[0].Apply(text); err != nil || got != b {
			t.Fatalf("Apply(Unified(%q, %q)) = %q, %v", text, b, got, err)
		}
	})
}
