package manifest

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	good := map[string]string{
		"a.txt":             "a.txt",
		"/workspace/a/b.go": "a/b.go",
		"./x/y":             "x/y",
		"dir/é.png":         "dir/é.png",
	}
	for in, want := range good {
		got, err := Clean(in, DefaultLimits)
		if err != nil || got != want {
			t.Errorf("Clean(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{"", "/etc/passwd", "../x", "a/../../x", "a/..", "a//b", "a/./b", "a/", "a\x00b", "a\nb", "a\\b",
		"/workspace", "/workspace/", "/workspace/../etc", strings.Repeat("a", 1025), strings.Repeat("a", 256), strings.Repeat("a/", 65) + "a", "\xff"}
	for _, in := range bad {
		if got, err := Clean(in, DefaultLimits); !errors.Is(err, ErrPath) {
			t.Errorf("Clean(%q) = %q, %v; want ErrPath", in, got, err)
		}
	}
}

func file(p, content string) Entry {
	return Entry{Path: p, Type: File, Mode: 0o644, Size: int64(len(content)), SHA256: Digest([]byte(content))}
}

func TestValidate(t *testing.T) {
	ok := &Manifest{Entries: []Entry{file("a", "1"), {Path: "b/empty", Type: Dir, Mode: 0o755}, {Path: "b/l", Type: Symlink, Mode: 0o777, Target: "../a"}, file("c/d", "2")}}
	if err := ok.Validate(DefaultLimits); err != nil {
		t.Fatal(err)
	}
	bad := map[string]*Manifest{
		"unsorted":       {Entries: []Entry{file("b", ""), file("a", "")}},
		"repeated":       {Entries: []Entry{file("a", ""), file("a", "")}},
		"escaping link":  {Entries: []Entry{{Path: "l", Type: Symlink, Target: "../etc/passwd"}}},
		"absolute link":  {Entries: []Entry{{Path: "l", Type: Symlink, Target: "/etc/passwd"}}},
		"below a file":   {Entries: []Entry{file("a", ""), file("a/b", "")}},
		"below a link":   {Entries: []Entry{{Path: "a", Type: Symlink, Target: "b"}, file("a/c", "")}},
		"non-empty dir":  {Entries: []Entry{{Path: "a", Type: Dir}, file("a/c", "")}},
		"bad digest":     {Entries: []Entry{{Path: "a", Type: File, SHA256: "ABC"}}},
		"setuid":         {Entries: []Entry{{Path: "a", Type: File, Mode: 0o4755, SHA256: Digest(nil)}}},
		"dotdot path":    {Entries: []Entry{file("../a", "")}},
		"unknown type":   {Entries: []Entry{{Path: "a", Type: "fifo"}}},
		"negative size":  {Entries: []Entry{{Path: "a", Type: File, Size: -1, SHA256: Digest(nil)}}},
		"dir with bytes": {Entries: []Entry{{Path: "a", Type: Dir, Size: 3}}},
	}
	for name, m := range bad {
		if err := m.Validate(DefaultLimits); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, m.Entries)
		}
	}
	small := DefaultLimits
	small.MaxEntries = 1
	if err := ok.Validate(small); err == nil {
		t.Error("Validate accepted 4 entries with MaxEntries 1")
	}
}

func TestEncodeDecode(t *testing.T) {
	m := &Manifest{Entries: []Entry{file("a", "1"), file("b", "2")}}
	b, d := Encode(m)
	got, err := Decode(strings.NewReader(string(b)), MaxEncodedBytes, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if _, d2 := Encode(got); d2 != d {
		t.Fatalf("digest changed over a round trip: %s, %s", d, d2)
	}
	if _, err := Decode(strings.NewReader(`{"entries":[],"extra":1}`), MaxEncodedBytes, DefaultLimits); err == nil {
		t.Error("Decode accepted an unknown field")
	}
	if _, err := Decode(strings.NewReader(string(b)), int64(len(b)-1), DefaultLimits); err == nil {
		t.Error("Decode accepted a manifest larger than its bound")
	}
	if _, empty := Encode(&Manifest{}); empty != Digest([]byte(`{"entries":[]}`)) {
		t.Errorf("empty tree digest %s", empty)
	}
}

func TestDiff(t *testing.T) {
	a := &Manifest{Entries: []Entry{file("keep", "k"), file("mod", "1"), file("rm", "x")}}
	b := &Manifest{Entries: []Entry{file("add", "n"), file("keep", "k"), file("mod", "2")}}
	d := Diff(a, b)
	if !slices.Equal(d.Added, []string{"add"}) || !slices.Equal(d.Modified, []string{"mod"}) || !slices.Equal(d.Removed, []string{"rm"}) {
		t.Fatalf("Diff = %+v", d)
	}
	if d := Diff(nil, b); len(d.Added) != 3 {
		t.Fatalf("Diff(nil, b) = %+v", d)
	}
}

func TestRebase(t *testing.T) {
	base := &Manifest{Entries: []Entry{file("a", "1"), file("b", "1")}}
	head := &Manifest{Entries: []Entry{file("a", "2"), file("b", "1")}}
	mine := &Manifest{Entries: []Entry{file("a", "1"), file("b", "3"), file("c", "new")}}
	got, conflicts := Rebase(base, head, mine)
	if len(conflicts) != 0 {
		t.Fatalf("conflicts %v for disjoint changes", conflicts)
	}
	want := &Manifest{Entries: []Entry{file("a", "2"), file("b", "3"), file("c", "new")}}
	if d := Diff(got, want); len(d.Added)+len(d.Modified)+len(d.Removed) != 0 {
		t.Fatalf("Rebase = %+v, want %+v", got.Entries, want.Entries)
	}
	clash := &Manifest{Entries: []Entry{file("a", "9"), file("b", "1")}}
	if _, conflicts := Rebase(base, head, clash); !slices.Equal(conflicts, []string{"a"}) {
		t.Fatalf("conflicts = %v, want [a]", conflicts)
	}
	// The same change on both sides is no conflict.
	if _, conflicts := Rebase(base, head, head); len(conflicts) != 0 {
		t.Fatalf("conflicts %v for equal changes", conflicts)
	}
	// A file turned into a directory by one side, a file below it by the other.
	dirHead := &Manifest{Entries: []Entry{file("a/x", "1"), file("b", "1")}}
	if _, conflicts := Rebase(base, dirHead, &Manifest{Entries: []Entry{file("b", "1")}}); !slices.Equal(conflicts, []string{"a"}) {
		t.Fatalf("remove a vs a become a directory: conflicts = %v, want [a]", conflicts)
	}
}
