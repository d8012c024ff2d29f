package main

import (
	"testing"

	"github.com/rodon-compute/rodon/internal/grammartest"
)

// TestGrammar: the gateway's --name reads the table's names as the other
// entry points do (internal/grammartest).
func TestGrammar(t *testing.T) {
	grammartest.Run(t, grammartest.Entry{grammartest.Name: func(_ *testing.T, s string) (int64, error) {
		f := clusterFlags{scheduler: "http://127.0.0.1:7100", name: s}
		return 0, f.check()
	}})
}
