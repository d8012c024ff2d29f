package tools_test

import (
	"fmt"
	"testing"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/gateway/tools"
	"github.com/rodon-compute/rodon/gateway/tools/toolstest"
)

// BenchmarkRead: one Read in a workspace of 10,000 files (the index of
// the tree is built per call).
func BenchmarkRead(b *testing.B) {
	files := map[string]string{}
	for i := range 10_000 {
		files[fmt.Sprintf("d%02d/f%04d.txt", i%100, i)] = "line\n"
	}
	env := tools.Env{Workspace: toolstest.New(files)}
	for b.Loop() {
		if r, err := tools.Read(b.Context(), env, api.ReadInput{Path: "d07/f0007.txt"}); err != nil || r.Error != "" {
			b.Fatal(r.Error, err)
		}
	}
}

// BenchmarkGrep: one Grep over 1,000 files of 10 KB.
func BenchmarkGrep(b *testing.B) {
	files := map[string]string{}
	line := "the quick brown fox jumps over the lazy dog, again and again\n"
	var body string
	for len(body) < 10_000 {
		body += line
	}
	for i := range 1000 {
		files[fmt.Sprintf("d%02d/f%04d.txt", i%10, i)] = body + fmt.Sprintf("needle %d\n", i)
	}
	env := tools.Env{Workspace: toolstest.New(files)}
	for b.Loop() {
		if r, err := tools.Grep(b.Context(), env, api.GrepInput{Pattern: `needle \d+`}); err != nil || r.Count != 1000 {
			b.Fatal(r.Error, err)
		}
	}
}
