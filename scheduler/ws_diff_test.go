package scheduler

import (
	"testing"

	"github.com/rodon-compute/rodon/internal/manifest"
)

func TestManifestCacheBound(t *testing.T) {
	c := newManifestCache(5)
	tree := func(n int) *manifest.Manifest { return &manifest.Manifest{Entries: make([]manifest.Entry, n)} }
	c.put("a", tree(2))
	c.put("b", tree(2))
	c.get("a") // b is now the least recently used
	c.put("c", tree(2))
	c.put("huge", tree(6))
	for d, want := range map[string]bool{"a": true, "b": false, "c": true, "huge": false} {
		if _, ok := c.get(d); ok != want {
			t.Errorf("get(%s) = %v, want %v", d, ok, want)
		}
	}
	if c.entries != 4 {
		t.Errorf("entries = %d, want 4", c.entries)
	}
}
